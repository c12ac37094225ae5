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

    def moved(self) -> int:
        """Bytes relayed so far, both directions together."""

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

    def admit(self) -> bool:
        """Count a new connection; False (counted and logged) when over the limit."""
        stats = self.stats
        stats.total.value += 1
        if len(self.live) < self.max_connections:
            return True
        stats.errors["over_limit"].value += 1
        held = self.limit_log.allow()
        if held is not None:
            log.warning("connection refused: over the connection limit", extra={
                "listener": self.spec.name, "cause": "over_limit",
                "limit": self.max_connections, "suppressed": held})
        return False

    def opened(self, conn: Connection) -> None:
        self.live.add(conn)
        self.stats.active.value += 1

    def closed(self, conn: Connection, client: HostPort | None, up: int, down: int) -> None:
        self.live.discard(conn)
        self.stats.active.value -= 1
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


def client_text(client: HostPort | None) -> str:
    return format_hostport(*client) if client else "?"
