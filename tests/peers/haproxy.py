"""A real HAProxy (foreground, own session) for tests, with its log lines captured.

``config`` is HAProxy configuration text. When it has no ``global`` section, this helper puts
in front of it::

    global
        log stdout format raw local0
        stats socket <workdir>/admin.sock level admin
    defaults
        mode tcp
        log global
        option tcplog
        timeout connect 10s
        timeout client 60s
        timeout server 60s

so callers write only frontends/backends/listens. A caller who brings its own ``global``
section gets the ``stats socket`` line added to it (readiness is detected through it) and
should log to stdout to get ``log_lines()``. ``{workdir}`` in the text is replaced by the
work directory.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.peers import read_text, require_binary, stop_process

_PREAMBLE = """\
global
    log stdout format raw local0
    stats socket {workdir}/admin.sock level admin
defaults
    mode tcp
    log global
    option tcplog
    timeout connect 10s
    timeout client 60s
    timeout server 60s
"""


@dataclass
class HAProxy:
    workdir: Path
    config_path: Path
    proc: subprocess.Popen[bytes] = field(repr=False)

    @property
    def stats_socket(self) -> Path:
        return self.workdir / "admin.sock"

    @property
    def log_path(self) -> Path:
        return self.workdir / "haproxy.log"

    def log_lines(self) -> list[str]:
        """Everything HAProxy wrote to stdout/stderr so far (its log when logging to stdout)."""
        return read_text(self.log_path).splitlines()

    def wait_for_log(self, needle: str, timeout: float = 30.0) -> str:
        """The first log line containing ``needle``, polling until it appears."""
        deadline = time.monotonic() + timeout
        while True:
            for line in self.log_lines():
                if needle in line:
                    return line
            if time.monotonic() > deadline:
                raise TimeoutError(f"no HAProxy log line with {needle!r} within {timeout}s; "
                                   f"log so far:\n" + "\n".join(self.log_lines()))
            time.sleep(0.05)

    def command(self, cmd: str, timeout: float = 10.0) -> str:
        """Run one command on the admin socket (e.g. ``show info``) and return the answer."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(self.stats_socket))
            s.sendall(cmd.encode() + b"\n")
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        return out.decode(errors="replace")


def _ready(h: HAProxy) -> bool:
    try:
        return "Name: HAProxy" in h.command("show info", timeout=2.0)
    except OSError:
        return False


@contextlib.contextmanager
def run_haproxy(workdir: Path, config: str, *, start_timeout: float = 30.0) -> Iterator[HAProxy]:
    """Validate ``config`` with ``haproxy -c``, run it in the foreground, stop it on exit."""
    binary = require_binary("haproxy")
    workdir.mkdir(parents=True, exist_ok=True)
    text = config.replace("{workdir}", str(workdir))
    has_global = any(line.strip() == "global" for line in text.splitlines())
    if not has_global:
        text = _PREAMBLE.format(workdir=workdir) + text
    elif f"{workdir}/admin.sock" not in text:
        lines = text.splitlines()
        at = next(i for i, line in enumerate(lines) if line.strip() == "global")
        lines.insert(at + 1, f"    stats socket {workdir}/admin.sock level admin")
        text = "\n".join(lines)
    config_path = workdir / "haproxy.cfg"
    config_path.write_text(text if text.endswith("\n") else text + "\n")
    check = subprocess.run([binary, "-c", "-f", str(config_path)], capture_output=True,
                           text=True, timeout=60, check=False)
    if check.returncode != 0:
        raise RuntimeError(f"haproxy rejected the configuration {config_path}:\n"
                           f"{check.stdout}{check.stderr}\n--- config ---\n{text}")
    (workdir / "admin.sock").unlink(missing_ok=True)
    with (workdir / "haproxy.log").open("ab") as out:
        proc = subprocess.Popen([binary, "-db", "-f", str(config_path)], stdin=subprocess.DEVNULL,
                                stdout=out, stderr=out, start_new_session=True)
    h = HAProxy(workdir=workdir, config_path=config_path, proc=proc)
    try:
        deadline = time.monotonic() + start_timeout
        # `show info` answers only once the process runs its loop, i.e. every bind succeeded.
        while not _ready(h):
            if proc.poll() is not None:
                raise RuntimeError(f"haproxy exited with {proc.returncode}:\n"
                                   + "\n".join(h.log_lines()))
            if time.monotonic() > deadline:
                raise RuntimeError(f"haproxy not ready within {start_timeout}s:\n"
                                   + "\n".join(h.log_lines()))
            time.sleep(0.05)
        yield h
    finally:
        stop_process(proc, sig=15)
