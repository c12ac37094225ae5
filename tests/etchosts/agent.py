"""Start ``hairpin-proxy etchosts`` exactly as the CLI runs it, and look at it from outside."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from tests.peers import free_port

NAMESPACE = "hairpin-proxy"


class EtchostsProcess:
    def __init__(self, kubeconfig: Path, hosts_file: Path, log: Path, *args: str) -> None:
        self.port = free_port()
        self.log_path = log
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("HAIRPIN_", "KUBECONFIG", "POD_NAMESPACE"))}
        argv = [sys.executable, "-m", "hairpin_proxy", "etchosts", "--kubeconfig",
                str(kubeconfig), "--namespace", NAMESPACE, "--hosts-file", str(hosts_file),
                "--admin-listen", f"127.0.0.1:{self.port}", "--watch-timeout", "5",
                "--poll-interval", "0.1", "--resync-interval", "2", *args]
        self._log = log.open("ab")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=self._log, env=env)

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError:
            return 0, ""

    def metric(self, name: str) -> float:
        """Sum of the samples whose name-and-labels start with ``name``."""
        _, body = self.get("/metrics")
        return sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
                   if line.startswith(name))

    def alive(self) -> bool:
        assert self.proc.poll() is None, f"etchosts exited:\n{self.log()}"
        return True

    def ready(self) -> bool:
        return self.alive() and self.get("/readyz")[0] == 200

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(10)
        self._log.close()
        return code
