"""Start ``hairpin-proxy etchosts`` exactly as the CLI runs it, and look at it from outside."""

from __future__ import annotations

from pathlib import Path

from tests.peers import CliProcess, free_port

NAMESPACE = "hairpin-proxy"


class EtchostsProcess(CliProcess):
    def __init__(self, kubeconfig: Path, hosts_file: Path, log: Path, *args: str) -> None:
        port = free_port()
        super().__init__(["etchosts", "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE,
                          "--hosts-file", str(hosts_file), "--admin-listen", f"127.0.0.1:{port}",
                          "--watch-timeout", "5", "--poll-interval", "0.1",
                          "--resync-interval", "2", *args], log, port)

    def alive(self) -> bool:
        assert self.proc.poll() is None, f"etchosts exited:\n{self.log()}"
        return True

    def ready(self) -> bool:
        return self.alive() and self.get("/readyz")[0] == 200
