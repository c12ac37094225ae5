"""Interchangeable data paths: how listeners accept and how bytes move between the two sockets.

``epoll`` (Linux) drives plain sockets from one edge-triggered epoll set and is the fastest;
``transports`` uses asyncio protocols and runs wherever asyncio does. Both keep the same
promises (header first, half-close, resets passed on, bounded buffers, the same metrics and
log lines) and the same tests run against both.
"""

from __future__ import annotations

import asyncio
import select
import socket
from typing import Literal, Protocol

from hairpin_proxy.relay.route import Route

EngineName = Literal["auto", "epoll", "transports"]


class Engine(Protocol):
    name: str

    async def listen(self, route: Route, sock: socket.socket, backlog: int) -> None:
        """Start accepting connections for ``route`` on a bound socket (owned from now on)."""

    def stop_accepting(self) -> None:
        """Close every listener; connections already accepted go on."""

    def close(self) -> None:
        """Release what the engine holds, once its connections have ended."""


def available(name: EngineName) -> str:
    """The engine ``name`` stands for here; ValueError when it cannot run on this platform."""
    has_epoll = hasattr(select, "epoll")
    if name == "auto":
        return "epoll" if has_epoll else "transports"
    if name == "epoll" and not has_epoll:
        raise ValueError("--engine epoll needs Linux (select.epoll); use --engine transports")
    return name


def create(name: str, loop: asyncio.AbstractEventLoop) -> Engine:
    if name == "epoll":
        from hairpin_proxy.relay.engines.epoll import EpollEngine
        return EpollEngine(loop)
    from hairpin_proxy.relay.engines.transports import TransportEngine
    return TransportEngine(loop)
