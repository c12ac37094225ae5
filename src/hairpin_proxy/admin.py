"""The admin endpoint every long-running command serves: /healthz, /readyz and /metrics.

/metrics answers in the Prometheus text format 0.0.4, or in OpenMetrics when the scraper's
``Accept`` header asks for ``application/openmetrics-text`` (Prometheus does by default).

A deliberately tiny HTTP/1.1 responder on asyncio streams: probes and scrapes need GET and
nothing else, and the proxy image should not carry a web framework for them.

``bind_stream`` is also how the proxy binds its listeners: ``[::]`` (the default address)
serves IPv4 and IPv6 clients on one socket where the platform can, so the same defaults work
on IPv4-only, IPv6-only and dual-stack clusters.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from hairpin_proxy.addresses import parse_hostport
from hairpin_proxy.metrics import Registry

log = logging.getLogger("hairpin_proxy.admin")

UNIX_PREFIX = "unix:"


@dataclass(frozen=True)
class Check:
    """Result of a health or readiness check; ``detail`` is shown to the prober."""

    ok: bool
    detail: str = "ok"


CheckFn = Callable[[], Awaitable[Check]]


async def _always_ok() -> Check:
    return Check(True)


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            503: "Service Unavailable"}


def _header(request: bytes, name: bytes) -> str:
    """The value of one request header (repeated ones joined by commas), or ""."""
    values = []
    for line in request.split(b"\r\n")[1:]:
        key, sep, value = line.partition(b":")
        if sep and key.strip().lower() == name:
            values.append(value.strip().decode("latin-1"))
    return ",".join(values)


# Errors that say this host cannot have an IPv6 (or a dual-stack) socket, as opposed to errors
# about the port (taken, privileged), which must surface as they are.
_NO_IPV6 = frozenset({errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT,
                      errno.ENOPROTOOPT, errno.EINVAL})


def bind_stream(host: str, port: int,
                prepare: Callable[[socket.socket], None] | None = None) -> list[socket.socket]:
    """Bound, not yet listening, non-blocking TCP sockets for ``host``:``port``.

    ``::`` is one IPv6 socket with IPV6_V6ONLY off, which IPv4 clients reach too (as
    IPv4-mapped addresses); where the kernel has no IPv6 or refuses dual-stack sockets, it is
    ``0.0.0.0`` instead, decided here at bind time so that one default fits every cluster.
    Any other address or host name: a socket per address it stands for, IPv6 ones IPv6-only
    (as written: ``[::1]`` does not also mean 127.0.0.1). ``prepare`` sets options before
    the bind (accepted sockets inherit most of them). Raises OSError, closing what it opened.
    """
    if host == "::":
        try:
            return [_bind_one(socket.AF_INET6, ("::", port), prepare, v6only=False)]
        except OSError as exc:
            if exc.errno not in _NO_IPV6:
                raise
            log.info("no dual-stack IPv6 socket here; listening on IPv4 only",
                     extra={"listen": f"[::]:{port}", "reason": exc.strerror or str(exc)})
        return [_bind_one(socket.AF_INET, ("0.0.0.0", port), prepare)]
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    seen: set[Any] = set()
    try:
        for family, _, _, _, sockaddr in infos:
            if sockaddr in seen:
                continue
            seen.add(sockaddr)
            sockets.append(_bind_one(family, sockaddr, prepare,
                                     v6only=sockaddr[0] != "::"))
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _bind_one(family: int, sockaddr: Any, prepare: Callable[[socket.socket], None] | None,
              *, v6only: bool = True) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1 if v6only else 0)
        if prepare is not None:
            prepare(sock)
        sock.bind(sockaddr)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class AdminServer:
    def __init__(self, registry: Registry, *, health: CheckFn = _always_ok,
                 ready: CheckFn = _always_ok, check_timeout: float = 5.0,
                 refresh: Callable[[], Awaitable[None]] | None = None) -> None:
        self.registry = registry
        self.health = health
        self.ready = ready
        self.check_timeout = check_timeout
        # Called before each /metrics answer: what the registry shows is gathered then.
        self.refresh = refresh
        self._servers: list[asyncio.Server] = []

    async def start(self, listen: str) -> None:
        """Serve on ``listen`` (``ADDR:PORT``; ``[::]:PORT`` is dual stack, see bind_stream;
        ``unix:PATH`` a Unix socket, for a process's own workers).

        Our own sockets rather than start_server(host, port): asyncio makes every IPv6
        listening socket IPv6-only, so ``[::]`` would turn away the kubelet's IPv4 probes.
        """
        if listen.startswith(UNIX_PREFIX):
            self._servers.append(await asyncio.start_unix_server(
                self._handle, path=listen[len(UNIX_PREFIX):]))
            return
        host, port = parse_hostport(listen)
        socks = bind_stream(host, port)
        try:
            while socks:
                self._servers.append(await asyncio.start_server(self._handle, sock=socks[0]))
                socks.pop(0)  # the server owns it now
        except BaseException:
            for sock in socks:
                sock.close()
            await self.close()
            raise

    @property
    def port(self) -> int:
        assert self._servers
        port: int = self._servers[0].sockets[0].getsockname()[1]
        return port

    async def close(self) -> None:
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        for server in servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()

    async def _check(self, fn: CheckFn) -> Check:
        try:
            return await asyncio.wait_for(fn(), self.check_timeout)
        except TimeoutError:
            return Check(False, "check timed out")
        except Exception as exc:  # a failing check is an answer, not a crash
            return Check(False, f"check failed: {exc!r}")

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            status, ctype, body = await self._respond(request)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                ConnectionError):
            writer.close()
            return
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        try:
            writer.write(head + body)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _respond(self, request: bytes) -> tuple[int, str, bytes]:
        line = request.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split()
        if len(parts) != 3:
            return 400, "text/plain", b"bad request\n"
        method, target = parts[0], parts[1].split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return 405, "text/plain", b"method not allowed\n"
        if target == "/metrics":
            if self.refresh is not None:
                await self.refresh()
            body, ctype = self.registry.expose(_header(request, b"accept"))
            return 200, ctype, body
        if target in ("/healthz", "/livez", "/readyz"):
            check = await self._check(self.ready if target == "/readyz" else self.health)
            return (200 if check.ok else 503), "text/plain", (check.detail + "\n").encode()
        return 404, "text/plain", b"not found\n"


async def serve_admin(registry: Registry, listen: str, *, ready: CheckFn,
                      health: CheckFn = _always_ok) -> AdminServer | None:
    """The started admin endpoint, or None (the reason logged) when it cannot listen there."""
    admin = AdminServer(registry, health=health, ready=ready)
    try:
        await admin.start(listen)
    except (OSError, ValueError) as exc:
        log.error("cannot serve the admin endpoint", extra={"listen": listen, "error": str(exc)})
        return None
    return admin


async def get_unix(path: str, target: str) -> tuple[int, str]:
    """(status, body) of ``GET target`` from an admin endpoint on the Unix socket ``path``;
    OSError when it does not answer (callers bound the wait with asyncio.timeout)."""
    reader, writer = await asyncio.open_unix_connection(path)
    try:
        writer.write(f"GET {target} HTTP/1.1\r\nHost: localhost\r\nAccept: text/plain\r\n"
                     "Connection: close\r\n\r\n".encode())
        await writer.drain()
        answer = await reader.read()
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ", 2)[1])
    except (IndexError, ValueError):
        raise OSError(f"{path}: not an HTTP answer") from None
    return status, body.decode("utf-8", "replace")
