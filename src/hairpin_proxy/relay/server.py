"""One relay process: listeners, the admin endpoint, idle sweeping and graceful shutdown. The
``proxy`` command (main.py) runs it alone or as each worker of the supervisor (workers.py)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import resource
import signal
import socket
from collections.abc import Callable
from typing import Any

from hairpin_proxy.addresses import format_hostport
from hairpin_proxy.admin import AdminServer, Check, bind_stream
from hairpin_proxy.metrics import Registry
from hairpin_proxy.relay.epoll import Acceptor, Poller
from hairpin_proxy.relay.limits import (
    DefaultLimit,
    default_limit,
    fds_needed,
    pipe_bytes,
    pipe_limit,
    read_cgroup,
)
from hairpin_proxy.relay.listener import Listener, LiveConnections, Timeouts, size_buffers
from hairpin_proxy.relay.lookup import ConnectError, Resolver, dns_resolver
from hairpin_proxy.relay.shared import SharedLimits
from hairpin_proxy.relay.spec import (
    ListenerSpec,
)
from hairpin_proxy.relay.splice import PipePool, probe
from hairpin_proxy.relay.stats import RelayMetrics, dns_failures, table_metrics
from hairpin_proxy.relay.upstreams import (
    REASONS,
    TableError,
    TableSlot,
    TableWatcher,
    slot_listeners,
)
from hairpin_proxy.settings import ProxySettings

log = logging.getLogger("hairpin_proxy.relay")

BACKLOG = socket.SOMAXCONN


class StartupError(Exception):
    """The relay cannot start (a listener cannot bind, an option cannot work)."""


def bind(spec: ListenerSpec, buffers: int = 0, *, shared: bool = False) -> list[socket.socket]:
    """Bound (not yet listening) sockets for a listener; ``[::]`` also accepts IPv4 (or is
    0.0.0.0 where there is no IPv6). ``buffers``: SO_SNDBUF/SO_RCVBUF, which accepted sockets
    inherit (0: autotuned). ``shared``: SO_REUSEPORT, so that every worker process binds the
    same port and the kernel spreads new connections over them."""
    def prepare(sock: socket.socket) -> None:
        # Accepted sockets inherit it: small writes (TLS handshakes) go out at once.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        size_buffers(sock, buffers)
        if shared:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)

    try:
        return bind_stream(spec.listen_host, spec.listen_port, prepare)
    except OSError as exc:
        raise StartupError(f"cannot listen on {spec.name}: {exc.strerror or exc}") from None


class Relay:
    """Every listener of one process, the connections they carry and their metrics.

    The listeners of ``--listen`` (or the defaults) live as long as the process; those of the
    targets table (``--targets-file``) come and go with it.
    """

    def __init__(self, specs: tuple[ListenerSpec, ...], settings: ProxySettings, *,
                 resolver: Resolver | None = None, registry: Registry | None = None,
                 shared: bool = False, limits: SharedLimits | None = None) -> None:
        self.specs = specs
        self.settings = settings
        # One of several worker processes: listeners are bound with SO_REUSEPORT.
        self.shared = shared
        self.registry = registry or Registry()
        self.metrics = RelayMetrics(self.registry)
        self.resolver = resolver or Resolver(dns_client=dns_resolver(settings.dns_server))
        self.dns_failures = dns_failures(self.registry)
        if self.resolver.on_failure is None:
            self.resolver.on_failure = self._dns_failed
        self.max_connections = max_connections(settings)
        self.live = LiveConnections(self.max_connections, settings.max_connections_per_source,
                                    limits)
        self.timeouts = Timeouts(idle=max(settings.idle_timeout, 0.0),
                                 first_byte=max(settings.first_byte_timeout, 0.0),
                                 half_close=max(settings.half_close_timeout, 0.0))
        advertise = settings.advertise_address or None
        self.listeners = [self.listener(spec, advertise) for spec in specs]
        self.acceptors: list[Acceptor] = []
        self.poller: Poller | None = None
        self.table = TableListeners(self)
        self.admin: AdminServer | None = None
        self.draining = False
        self._tasks: list[asyncio.Task[None]] = []

    def listener(self, spec: ListenerSpec, advertise: str | None) -> Listener:
        """The run-time state of one listener spec; ``advertise``: the header's destination
        address (None: the address the client connected to)."""
        return Listener(spec=spec, stats=self.metrics.for_listener(spec.name),
                        resolver=self.resolver, connect_timeout=self.settings.connect_timeout,
                        live=self.live, advertise_host=advertise,
                        socket_buffer=self.settings.socket_buffer)

    def accept(self, listener: Listener, socks: list[socket.socket]) -> list[Acceptor]:
        """Start accepting on bound sockets (owned from now on) for ``listener``."""
        assert self.poller is not None
        listener.loop = self.poller.loop
        acceptors = []
        try:
            while socks:
                socks[0].listen(BACKLOG)
                acceptors.append(Acceptor(self.poller, listener, socks[0]))
                socks.pop(0)
        except BaseException:
            for sock in socks:
                sock.close()
            for acceptor in acceptors:
                acceptor.close()
            raise
        return acceptors

    def pipe_pool(self) -> PipePool | None:
        """The pipes streams splice through (``--splice``; run() has probed the kernel)."""
        settings = self.settings
        if settings.splice == "off" or not hasattr(os, "splice"):
            return None
        return PipePool(pipe_bytes(settings.socket_buffer), pipe_limit(self.max_connections),
                        settings.splice_threshold)

    def _dns_failed(self, host: str, stale: bool, why: str) -> None:
        del why  # logged by the resolver (stale) or with each failed connection
        self.dns_failures.labels(host, "stale" if stale else "error").inc()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        bound = [(listener, bind(listener.spec, self.settings.socket_buffer,
                                 shared=self.shared))
                 for listener in self.listeners]
        self.poller = Poller(loop, self.pipe_pool())
        try:
            for listener, socks in bound:
                self.acceptors += self.accept(listener, socks)
                log_listening(listener)
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
            self.stop_accepting()
            self.poller.close()
            for _, socks in bound:
                for sock in socks:
                    sock.close()
            raise
        period = self.timeouts.period
        if period is not None:
            self._tasks.append(loop.create_task(self._sweep(period)))
        if self.settings.targets_file is not None:
            watcher = TableWatcher(self.settings.targets_file, self.table.apply,
                                   self.table.refused)
            self._tasks.append(loop.create_task(watcher.run(self.settings.targets_poll)))

    async def _sweep(self, period: float) -> None:
        """Close connections that outstay a timeout (see Timeouts)."""
        loop = asyncio.get_running_loop()
        timeouts, live = self.timeouts, self.live
        while True:
            await asyncio.sleep(period)
            timeouts.sweep(live.conns, loop.time())

    def stop_accepting(self) -> None:
        """Close every listening socket; connections already accepted go on."""
        for acceptor in self.acceptors:
            acceptor.close()
        self.table.stop_accepting()

    async def ready(self) -> Check:
        """Ready when every ``--listen`` listener's upstream resolves and accepts a TCP
        connection.

        The probe only connects and closes: it sends no header, so it works whatever the
        upstream's PROXY settings and gives its logs no malformed request to report. The
        targets table's listeners are left out on purpose: one unreachable Gateway must not
        take every proxy pod out of its Service, the default target's traffic with it.
        """
        if self.draining:
            return Check(False, "draining: shutting down")
        upstreams = list(dict.fromkeys(
            (r.spec.upstream_host, r.spec.upstream_port, r.spec.upstream)
            for r in self.listeners))
        results = await asyncio.gather(*(self._probe(h, p) for h, p, _ in upstreams))
        failed = [f"target {u} not reachable ({err.cause}): {err.detail}"
                  for (_, _, u), err in zip(upstreams, results, strict=True) if err is not None]
        if failed:
            return Check(False, "\n".join(failed))
        return Check(True, "ok: " + ", ".join(u for _, _, u in upstreams) + " reachable")

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
        self.table.frozen = True  # a table that changes now must not open new listeners
        self.stop_accepting()
        live = self.live
        drained = live.drained = asyncio.Event()
        if live.conns:
            log.info("draining", extra={"connections": len(live), "grace_period": grace})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(drained.wait(), grace)
        if live.conns:
            # One line for all of them: a busy relay would otherwise log thousands.
            log.warning("grace period over; closing the remaining connections",
                        extra={"connections": len(live), "cause": "shutdown"})
            for conn in list(live.conns):
                conn.abort("shutdown", "closed at the end of the grace period", quiet=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(drained.wait(), 2.0)
        await self.close()

    async def close(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.table.frozen = True
        self.stop_accepting()
        for conn in list(self.live.conns):
            conn.abort("shutdown", "relay closed", quiet=True)
        if self.poller is not None:
            self.poller.close()
            self.poller = None
        if self.admin is not None:
            await self.admin.close()


class TableListeners:
    """The listeners of the targets table, changed in place as the table changes.

    Keyed by listen port. A new port is bound before anything else changes, so a table whose
    ports cannot be bound is refused whole and the last good one keeps serving. A removed
    port's sockets are closed (its established connections go on to their end); a changed
    one keeps its sockets and serves new connections under a new Listener, while established
    ones finish under the one they were accepted with.
    """

    def __init__(self, relay: Relay) -> None:
        self.relay = relay
        self.served: dict[int, tuple[Listener, list[Acceptor]]] = {}
        self.frozen = False  # shutting down: tables are no longer applied
        self.slots, errors = table_metrics(relay.registry)
        self.errors = {reason: errors.labels(reason) for reason in REASONS}

    def apply(self, slots: tuple[TableSlot, ...]) -> None:
        """Serve exactly ``slots`` from now on, or TableError (nothing changed)."""
        if self.frozen:
            return
        relay = self.relay
        fixed = {spec.listen_port: spec for spec in relay.specs}
        wanted: dict[int, tuple[ListenerSpec, str | None, TableSlot]] = {}
        for slot in slots:
            for spec, advertise in slot_listeners(slot, self.relay.settings.targets_address):
                if spec.listen_port in fixed:
                    raise TableError("conflict", f"target {slot.key}: listen port "
                                                 f"{spec.listen_port} is --listen "
                                                 f"{fixed[spec.listen_port].name}'s")
                wanted[spec.listen_port] = (spec, advertise, slot)
        bound: dict[int, list[socket.socket]] = {}
        try:
            for port, (spec, _, _) in wanted.items():
                if port not in self.served:
                    bound[port] = bind(spec, relay.settings.socket_buffer, shared=relay.shared)
        except StartupError as exc:
            for socks in bound.values():
                for sock in socks:
                    sock.close()
            raise TableError("conflict", str(exc)) from None
        for port in [p for p in self.served if p not in wanted]:
            listener, acceptors = self.served.pop(port)
            for acceptor in acceptors:
                acceptor.close()
            log.info("stopped relaying; established connections go on",
                     extra={"listen": listener.spec.name})
        for port, (spec, advertise, slot) in wanted.items():
            served = self.served.get(port)
            if served is not None:
                old, acceptors = served
                if (old.spec, old.advertise_host) == (spec, advertise):
                    continue
                listener = relay.listener(spec, advertise)
                listener.loop = old.loop
                for acceptor in acceptors:
                    acceptor.serve(listener)
            else:
                listener = relay.listener(spec, advertise)
                acceptors = relay.accept(listener, bound.pop(port))
            self.served[port] = (listener, acceptors)
            log_listening(listener, target_key=slot.key, slot=slot.slot)
        self.slots.set(len(slots))

    def refused(self, reason: str, detail: str) -> None:
        """Count and log a table that was not applied."""
        self.errors[reason].inc()
        log.error(f"targets table refused, the last good one stays: {detail}", extra={
            "targets_file": str(self.relay.settings.targets_file), "reason": reason})

    def stop_accepting(self) -> None:
        for _, acceptors in self.served.values():
            for acceptor in acceptors:
                acceptor.close()


def log_listening(listener: Listener, **extra: Any) -> None:
    """The start-up line (or the table's) saying what listens where and how it relays."""
    spec = listener.spec
    # The upstream's log field keeps its older name, ``target`` (log queries rely on it).
    log.info("relaying", extra={
        "listen": spec.name, "target": spec.upstream, "proxy_protocol": spec.version,
        "header_destination": format_hostport(
            listener.advertise_host or "<client-dialed address>", spec.header_port), **extra})


def max_connections(settings: ProxySettings) -> int:
    """--max-connections, or when 0 the default that fits this container (default_limit)."""
    if settings.max_connections:
        return settings.max_connections
    return derived_limit(settings).connections


def derived_limit(settings: ProxySettings, processes: int = 1) -> DefaultLimit:
    """The default connection limit from the cgroup's memory limit and the open-file limit."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    open_files = None if soft == resource.RLIM_INFINITY else soft
    return default_limit(*read_cgroup(), settings.socket_buffer, open_files, processes,
                         splice=settings.splice != "off")


def decide_splice(settings: ProxySettings) -> ProxySettings:
    """``--splice auto`` probed once for the process and its workers: the settings to run
    with (``off`` when the kernel refuses), said in one log line."""
    if settings.splice == "off":
        log.info("copying every byte (--splice off)")
        return settings
    size = pipe_bytes(settings.socket_buffer)
    why = probe(size)
    if why is not None:
        log.info(f"cannot splice, copying every byte instead: {why}")
        return dataclasses.replace(settings, splice="off")
    log.info("splicing streams through pipes", extra={
        "splice_threshold": settings.splice_threshold, "pipe_bytes": size})
    return settings


async def serve(specs: tuple[ListenerSpec, ...], settings: ProxySettings, *,
                shared: bool = False, limits: SharedLimits | None = None) -> int:
    """``shared``: one of several workers, whose connections ``limits`` counts together."""
    relay = Relay(specs, settings, shared=shared, limits=limits)
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


def raise_fd_limit() -> None:
    """Lift the soft open-file limit to the hard one, as HAProxy and nginx do at start: each
    connection holds two descriptors, and the soft limit (often 1024) is a default meant for
    interactive shells, not for a proxy."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            log.debug("could not raise the open-file limit", extra={"error": str(exc)})


def check_fd_limit(max_connections: int, splice: bool = False) -> None:
    """Warn once when an explicit --max-connections needs more descriptors than allowed."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    want = fds_needed(max_connections, splice)
    if soft != resource.RLIM_INFINITY and soft < want:
        log.warning("the open-file limit is below what --max-connections needs; connections "
                    "beyond it fail to be accepted (raise the container's nofile limit or "
                    "lower --max-connections)", extra={"limit": soft, "needed": want})


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
