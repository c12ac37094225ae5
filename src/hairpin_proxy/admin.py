"""The admin endpoint every long-running command serves: /healthz, /readyz and /metrics.

/metrics answers in the Prometheus text format 0.0.4, or in OpenMetrics when the scraper's
``Accept`` header asks for ``application/openmetrics-text`` (Prometheus does by default).

A deliberately tiny HTTP/1.1 responder on asyncio streams: probes and scrapes need GET and
nothing else, and the proxy image should not carry a web framework for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from hairpin_proxy.addresses import parse_hostport
from hairpin_proxy.metrics import Registry

log = logging.getLogger("hairpin_proxy.admin")


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


class AdminServer:
    def __init__(self, registry: Registry, *, health: CheckFn = _always_ok,
                 ready: CheckFn = _always_ok, check_timeout: float = 5.0) -> None:
        self.registry = registry
        self.health = health
        self.ready = ready
        self.check_timeout = check_timeout
        self._server: asyncio.Server | None = None

    async def start(self, listen: str) -> asyncio.Server:
        host, port = parse_hostport(listen)
        self._server = await asyncio.start_server(self._handle, host, port, reuse_address=True)
        return self._server

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

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
