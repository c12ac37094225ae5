"""The relay's rules, decided once: what a listener's connections share, when a connection is
let in, which timeout ends it, how a failure is named (metric cause and log wording) and how
a reset is passed on.

The data path (``epoll.py``) moves bytes and calls in here for every decision that is not
about moving bytes; the readiness probe connects through the same resolver and names its
failures with the same causes. Nothing here runs per chunk: these calls happen once per
connection, per ending, or per sweep.
"""

from __future__ import annotations

import _socket
import asyncio
import contextlib
import errno
import logging
import os
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from hairpin_proxy import proxyproto
from hairpin_proxy.addresses import format_hostport
from hairpin_proxy.relay.lookup import Address, ConnectError, Resolver, attempt_failure, gave_up
from hairpin_proxy.relay.shared import OVER_LIMIT, OVER_SOURCE, SharedLimits
from hairpin_proxy.relay.spec import ListenerSpec
from hairpin_proxy.relay.stats import ListenerStats

log = logging.getLogger("hairpin_proxy.relay")

HostPort = tuple[str, int]
Encoder = Callable[[HostPort | None, HostPort | None], bytes]

ENCODERS: dict[str, Encoder] = {"v1": proxyproto.encode_v1, "v2": proxyproto.encode_v2}
VERSIONS: dict[str, Literal[1, 2]] = {"v1": 1, "v2": 2}
# Header encoders kept per listener, one per destination its headers name: a listener bound
# to one address has one; a wildcard one has one per local address clients reach it on.
MAX_TEMPLATES = 16

_MAPPED = "::ffff:"


def hostport(sockaddr: Any) -> HostPort | None:
    """(host, port) of a socket address, for a PROXY header and the logs.

    An IPv4 client of a dual-stack (``[::]``) socket shows up as ``::ffff:a.b.c.d``: it is an
    IPv4 connection all the same, so it is named by its IPv4 address, in the header (``TCP4``,
    as on an IPv4 socket), in the logs and for the per-source cap, which must count the same
    client once whichever kind of socket it reached.
    """
    if not isinstance(sockaddr, tuple) or len(sockaddr) < 2:
        return None
    host = str(sockaddr[0])
    if host.startswith(_MAPPED) and "." in host:
        host = host[len(_MAPPED):]
    elif "%" in host:
        # A link-local IPv6 address can carry a zone ("%eth0") that has no place in a header.
        host = host.split("%", 1)[0]
    return host, int(sockaddr[1])


class Connection(Protocol):
    """A relayed connection as the rules see it: for timeouts and shutdown."""

    idle_bytes: int
    idle_since: float
    accepted_at: float

    def moved(self) -> int:
        """Bytes relayed so far, both directions together."""

    def client_bytes(self) -> int:
        """Bytes the client has sent so far."""

    def half_closed(self) -> bool:
        """One side has finished sending (its EOF is passed on) while the other has not."""

    def abort(self, cause: str, detail: str, *, quiet: bool = False) -> None:
        """End both sides now, counted under ``cause``; ``quiet`` skips the log line."""


class RateLimit:
    """At most one line per ``interval`` for floods (over-limit refusals); counts the rest."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.next_at = 0.0
        self.suppressed = 0

    def allow(self) -> int | None:
        """None to stay quiet, else how many lines were held back since the last one."""
        now = time.monotonic()
        if now < self.next_at:
            self.suppressed += 1
            return None
        self.next_at = now + self.interval
        held, self.suppressed = self.suppressed, 0
        return held


class LiveConnections:
    """Every connection of the process, whichever listener took it: the connection limit and
    the per-source cap count them all, and shutdown waits for all of them (a listener the
    targets table removed or changed included: its connections still count)."""

    def __init__(self, max_connections: int, per_source: int = 0,
                 shared: SharedLimits | None = None) -> None:
        self.conns: set[Connection] = set()
        self.max_connections = max_connections
        # Concurrent connections one client address may hold (0: no cap), and how many each
        # address holds now.
        self.per_source = per_source
        self.sources: dict[str, int] = {}
        # One of several workers: both limits are counted for all of them together there.
        self.shared = shared
        self.drained: asyncio.Event | None = None  # set once ``conns`` empties, when draining

    def __len__(self) -> int:
        return len(self.conns)


@dataclass(frozen=True)
class Timeouts:
    """Which timeout a connection has outstayed; one periodic sweep asks, for every connection
    (a timer per connection would put timer work on the per-chunk path)."""

    idle: float  # no byte either way; 0: never
    first_byte: float  # connected, the client has sent nothing; 0: never
    half_close: float  # one side finished, silent since; 0: never

    @property
    def period(self) -> float | None:
        """Seconds between sweeps: each timeout is honoured to within a quarter of the shortest
        one (at most 1 s); None when every timeout is off."""
        enabled = [t for t in (self.idle, self.first_byte, self.half_close) if t > 0]
        if not enabled:
            return None
        return min(max(min(enabled) / 4, 0.05), 1.0)

    def expired(self, conn: Connection, now: float) -> tuple[str, str] | None:
        """(cause, detail) of the timeout ``conn`` has outstayed at ``now``, if any."""
        first, half = self.first_byte, self.half_close
        if first > 0 and now - conn.accepted_at >= first and conn.client_bytes() == 0:
            return "first_byte_timeout", f"the client sent nothing for {first:g}s"
        quiet = now - conn.idle_since
        if half > 0 and quiet >= half and conn.half_closed():
            return "half_close_timeout", f"one side finished and the other was silent for {half:g}s"
        if self.idle > 0 and quiet >= self.idle:
            return "idle_timeout", f"no data either way for {self.idle:g}s"
        return None

    def sweep(self, conns: set[Connection], now: float) -> None:
        """Abort every connection that has outstayed a timeout, noting progress first."""
        first = self.first_byte > 0
        for conn in list(conns):
            moved = conn.moved()
            if moved != conn.idle_bytes:
                conn.idle_bytes, conn.idle_since = moved, now
                if not first:  # bytes just moved: only the first-byte timeout could strike
                    continue
            cause = self.expired(conn, now)
            if cause is not None:
                conn.abort(*cause)


@dataclass(eq=False)
class Listener:
    """One listener at run time: its spec and what every connection it accepts shares.

    A connection keeps the Listener it was accepted under, so a listener the targets table
    changes gets a new Listener for new connections while established ones finish under the
    old one.
    """

    spec: ListenerSpec
    stats: ListenerStats
    resolver: Resolver
    connect_timeout: float
    live: LiveConnections
    # The running loop, set at start: asyncio.get_running_loop() costs a getpid() system call
    # per use on Python 3.11, several times per connection.
    loop: asyncio.AbstractEventLoop | None = None
    # The destination address every header names (``--advertise-address``, or the table's
    # per-target one); None: the address the client connected to.
    advertise_host: str | None = None
    # SO_SNDBUF/SO_RCVBUF of upstream sockets (listeners pass theirs on when accepting); 0:
    # the kernel's autotuning.
    socket_buffer: int = 0
    limit_log: RateLimit = field(default_factory=lambda: RateLimit(1.0))
    encode: Encoder = field(init=False)
    # Per destination, the encoder with everything but the source built once.
    templates: dict[HostPort | None, Callable[[HostPort | None], bytes]] = field(
        init=False, default_factory=dict)
    # The upstream's one address when it is an IP literal: connects then skip the resolver.
    address: Address | None = field(init=False)

    def __post_init__(self) -> None:
        self.encode = ENCODERS[self.spec.version]
        self.address = self.resolver.literal(self.spec.upstream_host, self.spec.upstream_port)

    # ------------------------------------------------------------------ the header

    def fixed_destination(self, bound: Any) -> HostPort | None:
        """The header's destination for every connection a socket bound to ``bound`` accepts,
        or None when only the accepted socket knows it (a wildcard address, not advertised)."""
        port = self.spec.header_port
        if self.advertise_host is not None:
            return self.advertise_host, port
        local = hostport(bound)
        if local is None or local[0] in ("0.0.0.0", "::"):
            return None
        return local[0], port

    def destination(self, sockname: Any) -> HostPort | None:
        """The header's destination for a connection whose local address is ``sockname``:
        that address, with the port the client dialed."""
        local = hostport(sockname)
        if local is None:
            return None
        port = self.spec.header_port
        return local if local[1] == port else (local[0], port)

    # ------------------------------------------------------------------ admission

    def admit(self, source: str | None = None) -> bool:
        """Count a new connection from client address ``source``; False (counted and logged)
        when over the connection limit or that address's cap. An admitted connection must
        be ``opened`` at once (with the same address)."""
        stats = self.stats
        stats.total.value += 1
        live = self.live
        if live.shared is not None:
            cause = live.shared.admit(source)
            if not cause:
                return True
        elif len(live.conns) >= live.max_connections:
            cause = OVER_LIMIT
        elif live.per_source and source is not None and \
                live.sources.get(source, 0) >= live.per_source:
            cause = OVER_SOURCE
        else:
            return True
        limit, why = ((live.max_connections, "the connection limit") if cause == OVER_LIMIT
                      else (live.per_source, "its address's cap"))
        stats.errors[cause].value += 1
        held = self.limit_log.allow()
        if held is not None:
            log.warning(f"connection refused: over {why}", extra={
                "listener": self.spec.name, "cause": cause, "client": source or "?",
                "limit": limit, "suppressed": held})
        return False

    def dropped(self, source: str | None) -> None:
        """A connection admitted from ``source`` (as given to ``admit``) went before it was
        opened."""
        if self.live.shared is not None:
            self.live.shared.release(source)

    def opened(self, conn: Connection, client: HostPort | None = None) -> None:
        live = self.live
        live.conns.add(conn)
        self.stats.active.value += 1
        if live.per_source and client is not None and live.shared is None:
            sources = live.sources
            sources[client[0]] = sources.get(client[0], 0) + 1

    def closed(self, conn: Connection, client: HostPort | None, up: int, down: int) -> None:
        live = self.live
        live.conns.discard(conn)
        self.stats.active.value -= 1
        if live.shared is not None:
            live.shared.release(client[0] if live.per_source and client is not None else None)
        elif live.per_source and client is not None:
            sources = live.sources
            left = sources.get(client[0], 0) - 1
            if left > 0:
                sources[client[0]] = left
            else:
                sources.pop(client[0], None)
        if live.drained is not None and not live.conns:
            live.drained.set()
        if log.isEnabledFor(logging.DEBUG):
            log.debug("connection closed", extra={
                "listener": self.spec.name, "client": client_text(client),
                "bytes_up": up, "bytes_down": down})

    # ------------------------------------------------------------------ connecting

    def connected(self, since: float, now: float) -> None:
        """The upstream accepted: ``since`` is when the client was accepted (loop time)."""
        self.stats.connect_seconds.observe(now - since)

    def deadline(self, accepted_at: float) -> float:
        """Loop time by which resolution and connect together must have succeeded."""
        return accepted_at + self.connect_timeout

    def cached_address(self, now: float) -> Address | None:
        """The upstream's one address when the resolver has it cached at loop time ``now``:
        the connection then connects to it at once, as to an IP literal, with the same
        timeout and error causes. None (resolve and connect through the resolver) when
        nothing is cached or the name has several addresses, which the resolver takes in
        turn and fails over between."""
        spec = self.spec
        addrs = self.resolver.cached(spec.upstream_host, spec.upstream_port, now)
        return addrs[0] if addrs is not None and len(addrs) == 1 else None

    async def connect(self) -> socket.socket:
        """A connected socket to the upstream (resolved, round robin, within the connect
        timeout), or ConnectError with the cause it is counted under."""
        spec = self.spec
        try:
            return await self.resolver.connect(spec.upstream_host, spec.upstream_port,
                                               self.connect_timeout,
                                               buffers=self.socket_buffer)
        except ConnectError:
            raise
        except Exception as exc:  # never expected; the client must not wait for nothing
            raise ConnectError("connect_error", f"cannot connect to {spec.upstream}: {exc!r}"
                               ) from None

    def connect_failed(self, addr: Address, exc: BaseException | None) -> ConnectError:
        """The error of a direct connect to the upstream's one address (``exc`` None: it did
        not answer within the connect timeout), named as the resolver names its own."""
        spec = self.spec
        return gave_up(spec.upstream_host, spec.upstream_port, [attempt_failure(addr, exc)])

    def header(self, source: HostPort | None, destination: HostPort | None) -> bytes | None:
        """The PROXY header, or None (counted and logged) for addresses it cannot carry."""
        try:
            template = self.templates.get(destination)
            if template is None:
                if len(self.templates) >= MAX_TEMPLATES:
                    return self.encode(source, destination)
                template = self.templates[destination] = proxyproto.encoder_to(
                    VERSIONS[self.spec.version], destination)
            return template(source)
        except ValueError as exc:  # never expected from addresses the kernel gave
            self.error("connect_error", f"cannot encode a PROXY header: {exc}", source)
            return None

    # ------------------------------------------------------------------ endings

    def lost(self, client: HostPort | None, side: str, exc: OSError) -> None:
        """A socket of an established connection failed: count and log it under ``reset``
        (the peer reset it) or ``io_error`` (anything else). The caller passes a reset on
        to the other side (``reset_on_close``)."""
        if exc.errno == errno.ENOTCONN:
            # A call such as shutdown() on a socket reset a moment ago fails with ENOTCONN,
            # which says nothing about why: the reset is what happened.
            exc = ConnectionResetError(errno.ECONNRESET, os.strerror(errno.ECONNRESET))
        cause = "reset" if isinstance(exc, ConnectionError) else "io_error"
        self.error(cause, f"{side} connection lost: {exc}", client, side)

    def error(self, cause: str, detail: str, client: HostPort | None, side: str = "", *,
              quiet: bool = False) -> None:
        """Count an ending under ``cause`` and, unless ``quiet``, log it."""
        counter = self.stats.errors.get(cause)
        if counter is not None:
            counter.value += 1
        if quiet:
            return
        # ``target``: the upstream, under the log field's older name.
        extra: dict[str, Any] = {"listener": self.spec.name, "client": client_text(client),
                                 "target": self.spec.upstream, "cause": cause}
        if side:
            extra["side"] = side
        log.warning(detail, extra=extra)


_LINGER_ZERO = struct.pack("ii", 1, 0)


def reset_on_close(sock: _socket.socket | None) -> None:
    """Make closing ``sock`` send a reset rather than a FIN (to pass a reset on)."""
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_ZERO)


def size_buffers(sock: _socket.socket, size: int) -> None:
    """Cap a socket's kernel send and receive buffers (``size`` 0: leave them autotuned)."""
    if size:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)


def client_text(client: HostPort | None) -> str:
    return format_hostport(*client) if client else "?"
