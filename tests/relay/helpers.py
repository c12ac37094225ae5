"""The relay under test (as the CLI runs it) and small Python peers that speak PROXY headers.

Peers use blocking sockets on threads: they are simple, and the relay process keeps its own
cores busy regardless. Everything binds to loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hairpin_proxy import proxyproto
from hairpin_proxy.relay import server
from hairpin_proxy.relay.lookup import Resolver
from hairpin_proxy.relay.spec import parse_listeners
from hairpin_proxy.settings import ProxySettings, settings_from_args
from tests import waiting
from tests.image import as_in_image
from tests.peers import free_ports, read_text, stop_process, wait_for

# The shared helper, re-exported (an assignment, so mypy --strict sees the export): relay tests
# import wait_until from here.
wait_until = waiting.wait_until

# Both event loops the relay runs on.
LOOPS = ("uvloop", "asyncio")
CHUNK = 1 << 20


# ----------------------------------------------------------------------------- data streams

def block(seed: int) -> bytes:
    return random.Random(seed).randbytes(CHUNK)


def chunks(total: int, seed: int) -> Iterator[bytes]:
    """``total`` bytes of deterministic data, one MiB at a time (rotated so chunks differ)."""
    base = block(seed)
    sent, i = 0, 0
    while sent < total:
        k = (i * 7919) % CHUNK
        piece = base[k:] + base[:k]
        piece = piece[: total - sent]
        yield piece
        sent += len(piece)
        i += 1


def send_stream(sock: socket.socket, total: int, seed: int) -> str:
    """Send the stream, then shut down the write side; returns its sha256."""
    h = hashlib.sha256()
    for piece in chunks(total, seed):
        sock.sendall(piece)
        h.update(piece)
    sock.shutdown(socket.SHUT_WR)
    return h.hexdigest()


def drain_hash(sock: socket.socket, first: bytes = b"") -> tuple[int, str]:
    """Read to EOF; (byte count, sha256)."""
    h = hashlib.sha256(first)
    n = len(first)
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    while True:
        got = sock.recv_into(buf)
        if not got:
            return n, h.hexdigest()
        h.update(view[:got])
        n += got


def recv_all(sock: socket.socket) -> bytes:
    out = bytearray()
    while chunk := sock.recv(65536):
        out += chunk
    return bytes(out)


# ----------------------------------------------------------------------------- upstream peer

@dataclass
class Accepted:
    """One connection the upstream peer took, after its PROXY header."""

    sock: socket.socket
    header: proxyproto.ProxyHeader
    rest: bytes


Handler = Callable[[Accepted], None]


def read_header(sock: socket.socket) -> tuple[proxyproto.ProxyHeader, bytes]:
    data = b""
    while True:
        try:
            header, used = proxyproto.decode(data)
        except proxyproto.IncompleteHeader:
            chunk = sock.recv(4096)
            if not chunk:
                raise ConnectionError(f"EOF inside the PROXY header after {data!r}") from None
            data += chunk
            continue
        return header, data[used:]


class Upstream:
    """A threaded TCP server that demands a PROXY header, then runs ``handler``."""

    def __init__(self, handler: Handler, host: str = "127.0.0.1", port: int = 0,
                 backlog: int = 128) -> None:
        self.handler = handler
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((host, port))
        self.listener.listen(backlog)
        self.host = host
        self.port: int = self.listener.getsockname()[1]
        self.headers: list[proxyproto.ProxyHeader] = []
        self.errors: list[BaseException] = []
        self.accepted = 0
        self._threads: list[threading.Thread] = []
        self._closing = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closing:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                header, rest = read_header(conn)
                self.headers.append(header)
                self.handler(Accepted(conn, header, rest))
            except Exception as exc:
                self.errors.append(exc)

    def close(self) -> None:
        self._closing = True
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self._thread.join(5)
        for t in self._threads:
            t.join(5)

    def __enter__(self) -> Upstream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def echo(acc: Accepted) -> None:
    """Echo everything until EOF, then close."""
    if acc.rest:
        acc.sock.sendall(acc.rest)
    while chunk := acc.sock.recv(CHUNK):
        acc.sock.sendall(chunk)


def full_duplex(size: int, seed: int, results: dict[str, object],
                timeout: float = 300.0) -> Handler:
    """An upstream that sends ``size`` bytes while it reads to EOF; ``results`` gets the
    sent stream's hash (``down_sent``) and what was read (``up_received``: count, hash)."""
    def handler(acc: Accepted) -> None:
        sender = threading.Thread(
            target=lambda: results.__setitem__("down_sent", send_stream(acc.sock, size, seed)))
        sender.start()
        results["up_received"] = drain_hash(acc.sock, acc.rest)
        sender.join(timeout)
    return handler


# ----------------------------------------------------------------------------- the relay

@dataclass
class Relay:
    proc: subprocess.Popen[bytes]
    admin_port: int
    log_path: Path
    ports: list[int] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def get(self, path: str) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.admin_port, timeout=30)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read().decode()
        finally:
            conn.close()

    def metric(self, name: str, **labels: str) -> float:
        """The value of one sample on /metrics (0 when absent)."""
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in self.get("/metrics")[1].splitlines():
            if line.startswith("#"):
                continue
            m = re.fullmatch(r"([a-z_]+)(?:\{(.*)\})? (\S+)", line)
            if m and m.group(1) == name:
                got = ",".join(sorted((m.group(2) or "").split(","))) if m.group(2) else ""
                if got == want:
                    return float(m.group(3))
        return 0.0

    def log_text(self) -> str:
        return read_text(self.log_path)

    def log_records(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def fd_count(self) -> int:
        """Descriptors other than pipes (the splice pool keeps some idle: see pipe_count)."""
        return sum(1 for fd in Path(f"/proc/{self.pid}/fd").iterdir()
                   if not _readlink(fd).startswith("pipe:"))

    def pipe_count(self) -> int:
        """Pipe descriptors: the event loop's own, and two per pipe of the splice pool."""
        return sum(1 for fd in Path(f"/proc/{self.pid}/fd").iterdir()
                   if _readlink(fd).startswith("pipe:"))

    def rss(self) -> int:
        """Resident set size in bytes."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)


def _readlink(path: Path) -> str:
    try:
        return str(path.readlink())
    except OSError:  # closed since it was listed
        return ""


def splicing() -> bool:
    """Whether relays started now splice (the ``data_path`` fixture's choice)."""
    return os.environ.get("HAIRPIN_SPLICE", "auto") != "off"


def relay_command(listen: list[str], admin_port: int, *args: str,
                  loop: str = "asyncio") -> list[str]:
    cmd = [sys.executable, "-m", "hairpin_proxy", "proxy", "--log-format", "json",
           "--admin-listen", f"127.0.0.1:{admin_port}", "--loop", loop]
    for spec in listen:
        cmd += ["--listen", spec]
    if "--workers" not in args:
        # One process unless a test asks for more: the tests look into it (descriptors, pid).
        cmd += ["--workers", "1"]
    return cmd + list(args)


@contextlib.contextmanager
def run_relay(tmp: Path, listen: list[str], *args: str, loop: str = "asyncio",
              env: dict[str, str] | None = None, prefix: tuple[str, ...] = ()
              ) -> Iterator[Relay]:
    """Start ``hairpin-proxy proxy`` as the CLI would and wait for its admin endpoint;
    ``prefix``: a command that runs it (then ``pid`` is that command's).

    ``{port}`` in a listen spec is replaced by a fresh free loopback port (see Relay.ports).
    """
    # The listeners' fresh ports and the admin port, all different and none a port the specs
    # name already (separate free_port calls can return the same port twice).
    named = {int(n) for text in listen for n in re.findall(r":(\d+)", text)}
    *fresh, admin_port = free_ports(sum("{port}" in text for text in listen) + 1, avoid=named)
    ports: list[int] = []
    specs = []
    for text in listen:
        if "{port}" in text:
            ports.append(fresh[len(ports)])
            text = text.replace("{port}", str(ports[-1]))  # noqa: PLW2901
        specs.append(text)
    log_path = tmp / f"relay-{admin_port}.log"
    full_env = {**as_in_image(os.environ), **(env or {})}
    with log_path.open("ab") as out:
        proc = subprocess.Popen([*prefix, *relay_command(specs, admin_port, *args, loop=loop)],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=full_env,
                                start_new_session=True)
    relay = Relay(proc, admin_port, log_path, ports)
    try:
        def up() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"relay exited with {proc.returncode}:\n{relay.log_text()}")
            try:
                return relay.get("/healthz")[0] == 200
            except OSError:
                return False
        wait_for(up, 30, "relay admin endpoint")
        if full_env.get("HAIRPIN_SPLICE") == "auto" and "--splice" not in args:
            # The data_path fixture asked for splice: the relay must not have fallen back.
            assert "splicing streams through pipes" in relay.log_text(), relay.log_text()
        yield relay
    finally:
        stop_process(proc, timeout=30)


def settled_fd_count(relay: Relay) -> int:
    """The relay's descriptor count once it stops changing (an admin reply may be closing)."""
    seen = [relay.fd_count()]

    def steady() -> int | None:
        time.sleep(0.2)
        now = relay.fd_count()
        before, seen[0] = seen[0], now
        return now if now == before else None

    count = wait_until(steady, 20, "the relay's descriptor count to settle")
    assert count is not None
    return count


def connect(port: int, host: str = "127.0.0.1", timeout: float = 30.0) -> socket.socket:
    return socket.create_connection((host, port), timeout=timeout)


def closed_promptly(sock: socket.socket) -> bool:
    """True when the relay ends the connection (FIN or reset) without sending data."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def elapsed(since: float) -> float:
    return time.monotonic() - since


def black_hole(host: str = "127.0.0.1") -> tuple[socket.socket, list[socket.socket]]:
    """A listener whose accept queue is full, so that further SYNs go unanswered."""
    hole = socket.socket()
    hole.bind((host, 0))
    hole.listen(0)
    fillers = []
    for _ in range(4):
        f = socket.socket()
        f.setblocking(False)
        f.connect_ex(hole.getsockname())
        fillers.append(f)
    return hole, fillers


@contextlib.contextmanager
def relay_in_thread(specs: list[str], resolver: Resolver | None = None,
                    **settings: Any) -> Iterator[server.Relay]:
    """A Relay on its own event loop in a background thread (to inject a resolver or patch);
    ``settings`` are ProxySettings fields."""
    parsed = parse_listeners(specs, target_server="unused.test", default_version="v1")
    # The data path from the environment (the data_path fixture), as the CLI would read it.
    env = settings_from_args(ProxySettings, {}, {
        k: v for k, v in os.environ.items() if k.startswith("HAIRPIN_SPLICE")})
    relay = server.Relay(parsed, ProxySettings(**{
        "admin_listen": "", "connect_timeout": 10, "splice": env.splice,
        "splice_threshold": env.splice_threshold, **settings}), resolver=resolver)
    loop = asyncio.new_event_loop()
    started = threading.Event()

    def main() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(relay.start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    assert started.wait(30)
    try:
        yield relay
    finally:
        asyncio.run_coroutine_threadsafe(relay.close(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


@contextlib.contextmanager
def frozen(relay: Relay) -> Iterator[None]:
    """The relay stopped: what the peers send meanwhile waits in its sockets, all at once."""
    os.kill(relay.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(relay.pid, signal.SIGCONT)


@contextlib.contextmanager
def relayed_pair(relay: Relay, upstream: socket.socket) -> Iterator[tuple[socket.socket,
                                                                          socket.socket]]:
    """(client, the relay's upstream connection as accepted on ``upstream``), past the header."""
    with connect(relay.ports[0]) as client:
        client.sendall(b"hello")
        sock, _ = upstream.accept()
        with sock:
            sock.settimeout(30)
            _, rest = read_header(sock)
            while len(rest) < 5:
                rest += sock.recv(5)
            assert rest == b"hello"
            yield client, sock


def listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    return sock
