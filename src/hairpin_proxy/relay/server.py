"""The ``proxy`` command: listeners, the admin endpoint, idle sweeping and graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import signal
import socket
from collections.abc import Callable
from typing import Any

from hairpin_proxy import proxyproto
from hairpin_proxy.addresses import format_hostport, parse_hostport
from hairpin_proxy.admin import AdminServer, Check
from hairpin_proxy.logs import setup_logging
from hairpin_proxy.metrics import Registry
from hairpin_proxy.relay import engines
from hairpin_proxy.relay.engines import Engine
from hairpin_proxy.relay.limits import connection_limit, read_cgroup
from hairpin_proxy.relay.resolve import ConnectError, Resolver, dns_resolver
from hairpin_proxy.relay.route import Connection, Encoder, Route, size_buffers
from hairpin_proxy.relay.spec import (
    ListenerSpec,
    ListenerSpecError,
    is_ip_literal,
    parse_listeners,
)
from hairpin_proxy.relay.stats import RelayMetrics, dns_failures
from hairpin_proxy.settings import ProxySettings

log = logging.getLogger("hairpin_proxy.relay")

BACKLOG = socket.SOMAXCONN


ENCODERS: dict[str, Encoder] = {"v1": proxyproto.encode_v1, "v2": proxyproto.encode_v2}


class StartupError(Exception):
    """The relay cannot start (a listener cannot bind, an option cannot work)."""


def bind(spec: ListenerSpec, buffers: int = 0) -> list[socket.socket]:
    """Bound (not yet listening) sockets for a listener; ``[::]`` also accepts IPv4.
    ``buffers``: SO_SNDBUF/SO_RCVBUF, which accepted sockets inherit (0: autotuned)."""
    try:
        infos = socket.getaddrinfo(spec.listen_host, spec.listen_port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise StartupError(f"cannot listen on {spec.name}: {exc}") from None
    sockets: list[socket.socket] = []
    seen: set[Any] = set()
    try:
        for family, _, _, _, sockaddr in infos:
            if sockaddr in seen:
                continue
            seen.add(sockaddr)
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            # Accepted sockets inherit it: small writes (TLS handshakes) go out at once.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            size_buffers(sock, buffers)
            if family == socket.AF_INET6:
                # Dual stack only for the wildcard; IPv4 clients then show up IPv4-mapped,
                # which the header encodes as TCP4.
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY,
                                0 if sockaddr[0] == "::" else 1)
            sock.bind(sockaddr)
            sock.setblocking(False)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise StartupError(f"cannot listen on {spec.name}: {exc.strerror or exc}") from None
    return sockets


class Relay:
    """Every listener of one process, the connections they carry and their metrics."""

    def __init__(self, specs: tuple[ListenerSpec, ...], settings: ProxySettings, *,
                 resolver: Resolver | None = None, registry: Registry | None = None) -> None:
        self.specs = specs
        self.settings = settings
        self.registry = registry or Registry()
        self.metrics = RelayMetrics(self.registry)
        self.resolver = resolver or Resolver(dns_client=dns_resolver(settings.dns_server))
        self.dns_failures = dns_failures(self.registry)
        if self.resolver.on_failure is None:
            self.resolver.on_failure = self._dns_failed
        self.live: set[Connection] = set()
        self.max_connections = max_connections(settings)
        sources: dict[str, int] = {}  # connections per client address, every listener
        self.routes = [Route(spec=spec, stats=self.metrics.for_listener(spec.name),
                             resolver=self.resolver, encode=ENCODERS[spec.version],
                             connect_timeout=settings.connect_timeout,
                             max_connections=self.max_connections, live=self.live,
                             address=self.resolver.literal(spec.target_host, spec.target_port),
                             advertise_host=settings.advertise_address or None,
                             per_source=settings.max_connections_per_source, sources=sources,
                             socket_buffer=settings.socket_buffer)
                       for spec in specs]
        self.engine: Engine | None = None
        self.admin: AdminServer | None = None
        self.draining = False
        self._sweeper: asyncio.Task[None] | None = None

    def _dns_failed(self, host: str, stale: bool, why: str) -> None:
        del why  # logged by the resolver (stale) or with each failed connection
        self.dns_failures.labels(host, "stale" if stale else "error").inc()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for route in self.routes:
            route.loop = loop
        bound = [(route, bind(route.spec, self.settings.socket_buffer)) for route in self.routes]
        engine = self.engine = engines.create(engines.available(self.settings.engine), loop)
        try:
            for route, socks in bound:
                while socks:
                    await engine.listen(route, socks[0], BACKLOG)
                    socks.pop(0)  # the engine owns it now
                spec = route.spec
                log.info("relaying", extra={
                    "listen": spec.name, "target": spec.target, "proxy_protocol": spec.version,
                    "header_destination": format_hostport(
                        route.advertise_host or "<client-dialed address>", spec.header_port)})
            if self.settings.admin_listen:
                self.admin = AdminServer(self.registry, ready=self.ready,
                                         check_timeout=self.settings.connect_timeout + 1.0)
                try:
                    await self.admin.start(self.settings.admin_listen)
                except (OSError, ValueError) as exc:
                    raise StartupError(f"cannot serve the admin endpoint on "
                                       f"{self.settings.admin_listen}: {exc}") from None
                log.info("admin endpoint listening", extra={"listen": self.settings.admin_listen})
        except BaseException:
            engine.close()
            for _, socks in bound:
                for sock in socks:
                    sock.close()
            raise
        self._sweeper = loop.create_task(self._sweep_idle())

    async def _sweep_idle(self) -> None:
        """Close connections that outstay a timeout: no first byte from the client, silence
        after one side finished (half-close), or no byte either way (idle).

        One periodic pass instead of a timer per connection keeps the per-chunk path free
        of timer work; each timeout is honoured to within a quarter of the shortest one
        (at most 1 s).
        """
        settings = self.settings
        idle, first, half = (max(t, 0.0) for t in (settings.idle_timeout,
                                                   settings.first_byte_timeout,
                                                   settings.half_close_timeout))
        enabled = [t for t in (idle, first, half) if t > 0]
        if not enabled:
            return
        idle = idle or float("inf")
        loop = asyncio.get_running_loop()
        period = min(max(min(enabled) / 4, 0.05), 1.0)
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            for pipe in list(self.live):
                moved = pipe.moved()
                if moved != pipe.idle_bytes:
                    pipe.idle_bytes, pipe.idle_since = moved, now
                    if not first:
                        continue
                cause = expired(pipe, now, idle, first, half)
                if cause is not None:
                    pipe.abort(*cause)

    async def ready(self) -> Check:
        """Ready when every listener's target resolves and accepts a TCP connection.

        The probe only connects and closes: it sends no header, so it works whatever the
        target's PROXY settings and gives its logs no malformed request to report.
        """
        if self.draining:
            return Check(False, "draining: shutting down")
        targets = list(dict.fromkeys((r.spec.target_host, r.spec.target_port, r.spec.target)
                                     for r in self.routes))
        results = await asyncio.gather(*(self._probe(h, p) for h, p, _ in targets))
        failed = [f"target {t} not reachable ({err.cause}): {err.detail}"
                  for (_, _, t), err in zip(targets, results, strict=True) if err is not None]
        if failed:
            return Check(False, "\n".join(failed))
        return Check(True, "ok: " + ", ".join(t for _, _, t in targets) + " reachable")

    async def _probe(self, host: str, port: int) -> ConnectError | None:
        try:
            sock = await self.resolver.connect(host, port, self.settings.connect_timeout,
                                               rotate=False)
        except ConnectError as exc:
            return exc
        sock.close()
        return None

    async def drain(self, grace: float) -> None:
        """Stop accepting, let connections finish for ``grace`` seconds, then close the rest."""
        self.draining = True
        self.metrics.draining.set(1)
        if self.engine is not None:
            self.engine.stop_accepting()
        drained = asyncio.Event()
        for route in self.routes:
            route.drained = drained
        if self.live:
            log.info("draining", extra={"connections": len(self.live), "grace_period": grace})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(drained.wait(), grace)
        if self.live:
            # One line for all of them: a busy relay would otherwise log thousands.
            log.warning("grace period over; closing the remaining connections",
                        extra={"connections": len(self.live), "cause": "shutdown"})
            for pipe in list(self.live):
                pipe.abort("shutdown", "closed at the end of the grace period", quiet=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(drained.wait(), 2.0)
        await self.close()

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        if self.engine is not None:
            self.engine.stop_accepting()
        for pipe in list(self.live):
            pipe.abort("shutdown", "relay closed", quiet=True)
        if self.engine is not None:
            self.engine.close()
        if self.admin is not None:
            await self.admin.close()


def expired(conn: Connection, now: float, idle: float, first: float,
            half: float) -> tuple[str, str] | None:
    """(cause, detail) of the timeout ``conn`` has outstayed at ``now``, if any (0 disables
    ``first`` and ``half``; ``idle`` is infinite when disabled)."""
    if first and now - conn.accepted_at >= first and conn.client_bytes() == 0:
        return "first_byte_timeout", f"the client sent nothing for {first:g}s"
    quiet = now - conn.idle_since
    if half and quiet >= half and conn.half_closed():
        return "half_close_timeout", f"one side finished and the other was silent for {half:g}s"
    if quiet >= idle:
        return "idle_timeout", f"no data either way for {idle:g}s"
    return None


def max_connections(settings: ProxySettings) -> int:
    """--max-connections, or when 0 what the container's memory limit holds."""
    if settings.max_connections:
        return settings.max_connections
    # The transports engine buffers up to its high-water mark per direction besides a read.
    buffered = 256 * 1024 if engines.available(settings.engine) == "transports" else 0
    return connection_limit(*read_cgroup(), settings.socket_buffer, buffered)


async def serve(specs: tuple[ListenerSpec, ...], settings: ProxySettings) -> int:
    relay = Relay(specs, settings)
    try:
        await relay.start()
    except StartupError as exc:
        log.error(str(exc))
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("stopping: no new connections", extra={"grace_period": settings.grace_period})
    await relay.drain(settings.grace_period)
    log.info("stopped")
    return 0


def raise_fd_limit(max_connections: int) -> None:
    """Each connection holds two descriptors: lift the soft limit toward what that needs."""
    want = 2 * max_connections + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        if new > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
    if soft != resource.RLIM_INFINITY and soft < want:
        log.warning("the open-file limit is below what --max-connections needs; connections "
                    "beyond it fail to be accepted", extra={"limit": soft, "needed": want})


def loop_factory(name: str) -> tuple[str, Callable[[], asyncio.AbstractEventLoop] | None]:
    """The event loop to run: uvloop when asked for, or for ``auto`` when it is installed."""
    if name == "asyncio":
        return "asyncio", None
    try:
        import uvloop
    except ImportError:
        if name == "uvloop":
            raise StartupError("--loop uvloop: uvloop is not installed "
                               "(pip install 'hairpin-proxy[fast]')") from None
        return "asyncio", None
    new_loop: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return "uvloop", new_loop


def run(settings: ProxySettings) -> int:
    setup_logging(settings.log_level, settings.log_format)
    try:
        if settings.workers != 1:
            raise StartupError(f"--workers {settings.workers}: only 1 worker per process is "
                               "supported; run more replicas to scale out")
        for name in ("connect_timeout", "grace_period"):
            if getattr(settings, name) <= 0:
                raise StartupError(f"--{name.replace('_', '-')} must be positive")
        for name in ("max_connections", "max_connections_per_source", "socket_buffer"):
            if getattr(settings, name) < 0:
                raise StartupError(f"--{name.replace('_', '-')} must not be negative")
        for server in settings.dns_server:
            if not is_ip_literal(parse_hostport(server, default_port=53)[0]):
                raise StartupError(f"--dns-server {server!r}: not an IP address")
        if settings.advertise_address and not is_ip_literal(settings.advertise_address):
            raise StartupError(f"--advertise-address {settings.advertise_address!r}: not an "
                               "IP address")
        specs = parse_listeners(settings.listen, target_server=settings.target_server,
                                default_version=settings.proxy_protocol)
        loop_name, factory = loop_factory(settings.loop)
        engine = engines.available(settings.engine)
    except (StartupError, ListenerSpecError, ValueError) as exc:
        log.error(str(exc))
        return 2
    limit = max_connections(settings)
    if not settings.max_connections:
        log.info("connection limit from the memory limit", extra={"max_connections": limit})
    raise_fd_limit(limit)
    log.debug("event loop", extra={"loop": loop_name, "engine": engine})
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(serve(specs, settings))
