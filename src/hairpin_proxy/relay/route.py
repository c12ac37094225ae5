"""What every data path shares: a listener's route, the live-connection interface, error reports."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from hairpin_proxy.addresses import format_hostport
from hairpin_proxy.relay.resolve import Address, Resolver
from hairpin_proxy.relay.spec import ListenerSpec
from hairpin_proxy.relay.stats import ListenerStats

log = logging.getLogger("hairpin_proxy.relay")

HostPort = tuple[str, int]
Encoder = Callable[[HostPort | None, HostPort | None], bytes]


def hostport(sockaddr: Any) -> HostPort | None:
    """(host, port) of a socket address, for a PROXY header."""
    if not isinstance(sockaddr, tuple) or len(sockaddr) < 2:
        return None
    # A link-local IPv6 address can carry a zone ("%eth0") that has no place in a header.
    return str(sockaddr[0]).split("%", 1)[0], int(sockaddr[1])


class Connection(Protocol):
    """A relayed connection as the server sees it: for idle sweeping and shutdown."""

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


@dataclass
class Route:
    """What every connection of one listener shares."""

    spec: ListenerSpec
    stats: ListenerStats
    resolver: Resolver
    encode: Encoder
    connect_timeout: float
    max_connections: int
    live: set[Connection]
    limit_log: RateLimit = field(default_factory=lambda: RateLimit(1.0))
    drained: asyncio.Event | None = None  # set once ``live`` empties, while shutting down
    # The running loop, set at start: asyncio.get_running_loop() costs a getpid() system call
    # per use on Python 3.11, several times per connection.
    loop: asyncio.AbstractEventLoop | None = None
    # The target's one address when it is an IP literal: connects then skip the resolver.
    address: Address | None = None
    # The destination address every header names (``--advertise-address``); None: the
    # address the client connected to.
    advertise_host: str | None = None
    # Concurrent connections one client address may hold, across every listener sharing
    # ``sources`` (0: no cap).
    per_source: int = 0
    sources: dict[str, int] = field(default_factory=dict)
    # SO_SNDBUF/SO_RCVBUF of upstream sockets (listeners pass theirs on when accepting); 0:
    # the kernel's autotuning.
    socket_buffer: int = 0

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

    def admit(self, source: str | None = None) -> bool:
        """Count a new connection from client address ``source``; False (counted and logged)
        when over the connection limit or that address's cap. An admitted connection must
        be ``opened`` at once (with the same address)."""
        stats = self.stats
        stats.total.value += 1
        if len(self.live) >= self.max_connections:
            cause, limit, why = "over_limit", self.max_connections, "the connection limit"
        elif self.per_source and source is not None and \
                self.sources.get(source, 0) >= self.per_source:
            cause, limit, why = "over_source_limit", self.per_source, "its address's cap"
        else:
            return True
        stats.errors[cause].value += 1
        held = self.limit_log.allow()
        if held is not None:
            log.warning(f"connection refused: over {why}", extra={
                "listener": self.spec.name, "cause": cause, "client": source or "?",
                "limit": limit, "suppressed": held})
        return False

    def opened(self, conn: Connection, client: HostPort | None = None) -> None:
        self.live.add(conn)
        self.stats.active.value += 1
        if self.per_source and client is not None:
            sources = self.sources
            sources[client[0]] = sources.get(client[0], 0) + 1

    def closed(self, conn: Connection, client: HostPort | None, up: int, down: int) -> None:
        self.live.discard(conn)
        self.stats.active.value -= 1
        if self.per_source and client is not None:
            sources = self.sources
            left = sources.get(client[0], 0) - 1
            if left > 0:
                sources[client[0]] = left
            else:
                sources.pop(client[0], None)
        if self.drained is not None and not self.live:
            self.drained.set()
        if log.isEnabledFor(logging.DEBUG):
            log.debug("connection closed", extra={
                "listener": self.spec.name, "client": client_text(client),
                "bytes_up": up, "bytes_down": down})

    def error(self, cause: str, detail: str, client: HostPort | None, side: str = "", *,
              quiet: bool = False) -> None:
        """Count an ending under ``cause`` and, unless ``quiet``, log it."""
        counter = self.stats.errors.get(cause)
        if counter is not None:
            counter.value += 1
        if quiet:
            return
        extra: dict[str, Any] = {"listener": self.spec.name, "client": client_text(client),
                                 "target": self.spec.target, "cause": cause}
        if side:
            extra["side"] = side
        log.warning(detail, extra=extra)


_LINGER_ZERO = struct.pack("ii", 1, 0)


def reset_on_close(sock: socket.socket | None) -> None:
    """Make closing ``sock`` send a reset rather than a FIN (to pass a reset on)."""
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_ZERO)


def size_buffers(sock: socket.socket, size: int) -> None:
    """Cap a socket's kernel send and receive buffers (``size`` 0: leave them autotuned)."""
    if size:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)


def client_text(client: HostPort | None) -> str:
    return format_hostport(*client) if client else "?"
