"""Processes the benchmark measures: the nginx backend, HAProxy and our relay.

Each runs in the foreground as a child of the benchmark, with every file in a scratch directory,
and is stopped (never leaked) when its context exits.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIG_BYTES = 1 << 30


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for_port(port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def rss_kib(pids: Sequence[int]) -> int:
    """Resident set size of the given processes, in KiB."""
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total


def cpu_seconds(pids: Sequence[int]) -> float:
    """User plus system CPU time the given processes have used so far."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            # Fields after the command name (which may hold spaces); utime and stime are
            # the 14th and 15th of the whole line.
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / tick


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids = (task / "children").read_text().split()
        out.extend(int(k) for k in kids)
    return out


@dataclass
class Proc:
    popen: subprocess.Popen[bytes]
    port: int

    def pids(self) -> list[int]:
        """The process and its descendants (workers)."""
        todo, seen = [self.popen.pid], []
        while todo:
            pid = todo.pop()
            seen.append(pid)
            with contextlib.suppress(OSError):
                todo.extend(children(pid))
        return seen


@contextlib.contextmanager
def _running(argv: list[str], port: int, log: Path, cpus: str | None = None,
             env: dict[str, str] | None = None) -> Iterator[Proc]:
    if cpus is not None and shutil.which("taskset"):
        argv = ["taskset", "-c", cpus, *argv]
    with log.open("wb") as out:
        popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True)
    try:
        try:
            wait_for_port(port)
        except RuntimeError:
            raise RuntimeError(f"{argv[0]} did not start; see {log}:\n{log.read_text()[-2000:]}"
                               ) from None
        yield Proc(popen, port)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGTERM)
        try:
            popen.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(popen.pid, signal.SIGKILL)
            popen.wait(10)


@dataclass
class Backend:
    pp_port: int      # listen ... proxy_protocol
    plain_port: int   # the same server without PROXY protocol


@contextlib.contextmanager
def nginx(workdir: Path) -> Iterator[Backend]:
    workdir.mkdir(parents=True, exist_ok=True)
    big = workdir / "big"
    if not big.exists() or big.stat().st_size != BIG_BYTES:
        with big.open("wb") as f:  # sparse: served from the page cache, costs no disk
            f.truncate(BIG_BYTES)
    pp, plain = free_port(), free_port()
    user = "user root root;" if os.geteuid() == 0 else ""
    temp = "\n".join(f"{kind}_temp_path {workdir}/{kind};"
                     for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    conf = workdir / "nginx.conf"
    conf.write_text(f"""
{user}
worker_processes 1;
worker_rlimit_nofile 20000;
daemon off;
pid {workdir}/nginx.pid;
error_log {workdir}/error.log warn;
events {{ worker_connections 19000; }}
http {{
    access_log off;
    {temp}
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000000;
    keepalive_timeout 600s;
    client_header_timeout 600s;
    default_type text/plain;
    server {{
        listen 127.0.0.1:{pp} proxy_protocol backlog=8192;
        listen 127.0.0.1:{plain} backlog=8192;
        root {workdir};
        location = /small {{ return 200 "ok\\n"; }}
        location = /big {{ }}
    }}
}}
""")
    with _running(["nginx", "-c", str(conf), "-p", str(workdir)], pp, workdir / "nginx.log"):
        yield Backend(pp, plain)


@contextlib.contextmanager
def haproxy(workdir: Path, backend_port: int, *, threads: int, splice: bool,
            cpus: str | None, maxconn: int = 9900) -> Iterator[Proc]:
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    splicing = "option splice-auto" if splice else "no option splice-auto"
    # Each pipe costs two descriptors and HAProxy reserves maxconn/4 of them by default, which
    # does not fit under a 20,000 open-file limit next to ~10,000 relayed connections; the
    # one bulk stream needs one pipe.
    pipes = "maxpipes 64" if splice else ""
    conf = workdir / "haproxy.cfg"
    conf.write_text(f"""
global
    nbthread {threads}
    maxconn {maxconn}
    {pipes}
defaults
    mode tcp
    timeout connect 5s
    timeout client 1h
    timeout server 1h
    {splicing}
frontend fe
    bind 127.0.0.1:{port} backlog 8192
    default_backend be
backend be
    server s1 127.0.0.1:{backend_port} send-proxy
""")
    subprocess.run(["haproxy", "-c", "-q", "-f", str(conf)], check=True)
    with _running(["haproxy", "-db", "-f", str(conf)], port, workdir / "haproxy.log", cpus) as p:
        yield p


@contextlib.contextmanager
def relay(workdir: Path, backend_port: int, *, workers: int, cpus: str | None,
          extra: Sequence[str] = (), src: Path | None = None,
          upstream_host: str = "127.0.0.1") -> Iterator[Proc]:
    """The relay; ``src`` runs the package from another source tree (a baseline to compare);
    ``upstream_host`` a name for the backend's address (with a ``--dns-server`` in ``extra``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    argv = [sys.executable, "-m", "hairpin_proxy", "proxy",
            "--listen", f"127.0.0.1:{port}={upstream_host}:{backend_port}",
            "--admin-listen", "", "--workers", str(workers), "--log-level", "warning",
            "--max-connections", "60000", *extra]
    env = {**os.environ, "PYTHONPATH": str(src or REPO / "src")}
    with _running(argv, port, workdir / "relay.log", cpus, env) as p:
        yield p
