"""The progress line: on a terminal (stderr a TTY) the doctor says how far it is; piped, it
says nothing, and the report on stdout is the same either way."""

from __future__ import annotations

import json
import os
import pty
import select
import socket
import subprocess
import sys
import time
from typing import Any

HOSTS = [f"h{i}.example.test" for i in range(12)]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # bound, never listening: refused at once


def command() -> list[str]:
    resolve = [arg for h in HOSTS for arg in ("--resolve", f"{h}:127.0.0.1")]
    return [sys.executable, "-m", "hairpin_proxy", "doctor", *HOSTS, *resolve, "--no-api",
            "--verify-hosts", "off", "--port", str(closed_port()), "--tls-port", "0",
            "--timeout", "1", "--output", "json"]


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("HAIRPIN_")}


def hosts_of(stdout: str) -> list[tuple[str, str]]:
    report: dict[str, Any] = json.loads(stdout)
    return [(h["host"], h["verdict"]) for h in report["hosts"]]


def test_progress_on_a_terminal() -> None:
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(command(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=slave, env=env())
        os.close(slave)
        slave = -1
        seen = b""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the child closed its end
                    break
                if not chunk:
                    break
                seen += chunk
            elif proc.poll() is not None:
                break
        stdout = proc.communicate(timeout=60)[0].decode()
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)
    assert proc.returncode == 1
    text = seen.decode(errors="replace")
    assert "\rhairpin-proxy doctor: resolving 0/12 hosts" in text, text
    assert f"probing {len(HOSTS)}/{len(HOSTS)} hosts" in text, text
    # The line is wiped at the end, so that the terminal is left clean.
    assert text.endswith("\r\x1b[K"), text[-40:]
    assert hosts_of(stdout) == [(h, "unreachable") for h in HOSTS]


def test_no_progress_when_stderr_is_not_a_terminal() -> None:
    proc = subprocess.run(command(), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          env=env(), timeout=60, check=False)
    assert proc.returncode == 1
    assert proc.stderr == ""
    assert hosts_of(proc.stdout) == [(h, "unreachable") for h in HOSTS]
