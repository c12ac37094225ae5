"""Real network peers for tests (nginx, HAProxy) and the small helpers they share.

Everything listens on loopback only. Processes are started in their own session so that a
stop can always reach every child, even when the leader died abruptly.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

import pytest

from tests.image import as_in_image
from tests.waiting import WaitTimeout, wait_until

__all__ = [
    "CliProcess",
    "free_port",
    "free_ports",
    "has_ipv6_loopback",
    "read_text",
    "require_binary",
    "stop_process",
    "wait_for",
    "wait_for_port",
]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the caller must cope with a rare race)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def free_ports(count: int, host: str = "127.0.0.1", avoid: Collection[int] = ()) -> list[int]:
    """``count`` different TCP ports that were free a moment ago, none of them in ``avoid``:
    the sockets stay bound until all are chosen, so the kernel cannot hand one out twice (as
    separate ``free_port`` calls may)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    held: list[socket.socket] = []
    try:
        ports: list[int] = []
        while len(ports) < count:
            s = socket.socket(family, socket.SOCK_STREAM)
            held.append(s)
            s.bind((host, 0))
            port: int = s.getsockname()[1]
            if port not in avoid:
                ports.append(port)
        return ports
    finally:
        for s in held:
            s.close()


def has_ipv6_loopback() -> bool:
    """Whether ::1 can be bound here (IPv6 may be disabled in a container)."""
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


def wait_for_port(host: str, port: int, timeout: float = 30.0) -> None:
    """Poll until a TCP connect to host:port succeeds; TimeoutError otherwise.

    Note that a bare connect to a ``proxy_protocol`` listener makes the server log a
    complaint; the peers below have their own readiness checks that avoid that.
    """
    last: list[OSError] = []

    def accepts() -> bool:
        try:
            with socket.create_connection((host, port), timeout=min(2.0, timeout)):
                return True
        except OSError as exc:
            last[:] = [exc]
            return False

    try:
        wait_until(accepts, timeout, f"a listener on {host}:{port}")
    except WaitTimeout:
        raise TimeoutError(f"nothing accepted connections on {host}:{port} within {timeout}s: "
                           f"{last[0] if last else None}") from None


def wait_for(predicate: Callable[[], object], timeout: float = 30.0,
             what: str = "condition") -> None:
    """Poll a zero-argument callable until it returns something truthy (tests.waiting)."""
    wait_until(predicate, timeout, what)


def require_binary(name: str) -> str:
    """Absolute path of an executable, or skip the calling test with the reason."""
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/local/sbin")
    if path is None:
        pytest.skip(f"{name!r} is not installed (needed as a real peer for this test)")
    return path


def stop_process(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM,
                 timeout: float = 15.0) -> None:
    """Stop a process started with ``start_new_session=True`` and everything in its group."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)
    # The group outlives its leader when workers were left behind; make sure none are.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=timeout)


def read_text(path: Path) -> str:
    """A log file's text so far ('' when it does not exist yet)."""
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


class CliProcess:
    """One ``hairpin-proxy`` command in a subprocess, started exactly as the CLI runs it
    (no HAIRPIN_*, KUBECONFIG or POD_NAMESPACE from the test's environment, the image's Python
    settings), its output in
    ``log_path`` and its admin endpoint, when it serves one, on 127.0.0.1:``port``."""

    def __init__(self, argv: Sequence[str], log: Path, port: int) -> None:
        self.port = port
        self.log_path = log
        env = as_in_image({k: v for k, v in os.environ.items()
                           if not k.startswith(("HAIRPIN_", "KUBECONFIG", "POD_NAMESPACE"))})
        self._log = log.open("ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "hairpin_proxy", *argv],
                                     stdout=self._log, stderr=self._log, env=env)

    def get(self, path: str) -> tuple[int, str]:
        """(status, body) of a GET on the admin endpoint; (0, "") when nothing answers."""
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

    def log(self) -> str:
        return read_text(self.log_path)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signal it, wait (killing it after 20 s), and return its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(10)
        self._log.close()
        return code
