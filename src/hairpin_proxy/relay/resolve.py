"""Per-connection resolution of a target and a TCP connect to it, round-robin over its addresses.

Service addresses change while the proxy runs, so every connection resolves anew (an IP literal
skips resolution). All A/AAAA answers take turns; an address that refuses or does not answer is
skipped in favour of the next one, all within one connect timeout.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from hairpin_proxy.addresses import format_hostport
from hairpin_proxy.relay.spec import is_ip_literal

Address = tuple[int, tuple[Any, ...]]  # (family, sockaddr)
GetAddrInfo = Callable[[str, int], Awaitable[list[Address]]]
T = TypeVar("T")


class ConnectError(Exception):
    """The target could not be reached; ``cause`` is a metric label, ``detail`` for humans."""

    def __init__(self, cause: str, detail: str) -> None:
        super().__init__(detail)
        self.cause = cause
        self.detail = detail


async def system_getaddrinfo(host: str, port: int) -> list[Address]:
    """The system resolver, run off the event loop."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [(family, sockaddr) for family, _, _, _, sockaddr in infos]


def literal_address(host: str, port: int) -> Address:
    if ":" in host:
        return socket.AF_INET6, (host, port, 0, 0)
    return socket.AF_INET, (host, port)


def _show(addr: Address) -> str:
    return format_hostport(str(addr[1][0]), int(addr[1][1]))


class _Expiry:
    """Cancels a task when its timer fires, and remembers that it did."""

    __slots__ = ("fired", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.fired = False

    def fire(self) -> None:
        self.fired = True
        self.task.cancel()


class Resolver:
    """Resolves targets and connects to them; ``getaddrinfo`` is the seam tests replace."""

    def __init__(self, getaddrinfo: GetAddrInfo = system_getaddrinfo) -> None:
        self._getaddrinfo = getaddrinfo
        self._turn: dict[tuple[str, int], int] = {}
        self._literals: dict[tuple[str, int], list[Address] | None] = {}

    async def resolve(self, host: str, port: int) -> list[Address]:
        if is_ip_literal(host):
            return [literal_address(host, port)]
        addrs = await self._getaddrinfo(host, port)
        unique: list[Address] = []
        for addr in addrs:
            if addr not in unique:
                unique.append(addr)
        return unique

    def _rotate(self, key: tuple[str, int], addrs: list[Address]) -> list[Address]:
        turn = self._turn.get(key, 0)
        self._turn[key] = turn + 1
        start = turn % len(addrs)
        return addrs[start:] + addrs[:start]

    def _skipped(self, key: tuple[str, int], count: int) -> None:
        # Move the turn past addresses that failed, so the one after a dead address does
        # not get the dead one's share too.
        if count:
            self._turn[key] = self._turn.get(key, 0) + count

    def literal(self, host: str, port: int) -> Address | None:
        """The one address of an IP-literal target (nothing to resolve or rotate), else None."""
        addrs = self._literal(host, port)
        return addrs[0] if addrs else None

    def _literal(self, host: str, port: int) -> list[Address] | None:
        # Listener targets are fixed, so whether one is an IP literal is worked out once.
        key = (host, port)
        if key in self._literals:
            return self._literals[key]
        known = [literal_address(host, port)] if is_ip_literal(host) else None
        if len(self._literals) < 1024:
            self._literals[key] = known
        return known

    async def connect(self, host: str, port: int, within: float, *,
                      rotate: bool = True) -> socket.socket:
        """A connected non-blocking socket, or ConnectError naming the cause."""
        loop = asyncio.get_running_loop()

        async def attempt(addr: Address) -> socket.socket:
            sock = socket.socket(addr[0], socket.SOCK_STREAM)
            try:
                sock.setblocking(False)
                await loop.sock_connect(sock, addr[1])
            except BaseException:
                sock.close()
                raise
            return sock

        return await self._first(host, port, within, rotate, attempt)

    async def open(self, host: str, port: int, within: float,
                   factory: Callable[[], asyncio.Protocol],
                   loop: asyncio.AbstractEventLoop | None = None) -> asyncio.BaseTransport:
        """Like ``connect``, but hands the connection to a transport for ``factory``'s protocol.

        The event loop connects and wraps the socket in one step (with uvloop all of it in C),
        which is measurably cheaper per connection than a socket, ``sock_connect`` and then
        ``create_connection(sock=...)``. The protocol sees ``connection_made`` only once an
        attempt has succeeded. ``loop`` is the running loop, when the caller has it at hand.
        """
        if loop is None:
            loop = asyncio.get_running_loop()

        async def attempt(addr: Address) -> asyncio.BaseTransport:
            sockaddr = addr[1]
            if len(sockaddr) > 3 and sockaddr[3]:
                # A scoped IPv6 address cannot be passed on as text without losing its zone.
                sock = socket.socket(addr[0], socket.SOCK_STREAM)
                try:
                    sock.setblocking(False)
                    await loop.sock_connect(sock, sockaddr)
                    transport, _ = await loop.create_connection(factory, sock=sock)
                except BaseException:
                    sock.close()
                    raise
                return transport
            transport, _ = await loop.create_connection(factory, sockaddr[0], sockaddr[1],
                                                        family=addr[0])
            return transport

        return await self._first(host, port, within, True, attempt, loop=loop)

    async def _first(self, host: str, port: int, within: float, rotate: bool,
                     attempt: Callable[[Address], Awaitable[T]], *,
                     loop: asyncio.AbstractEventLoop | None = None) -> T:
        """The result of the first address ``attempt`` succeeds with, in turn order.

        Each address gets an equal share of the time left, so one that does not answer
        cannot use up the whole timeout while another would accept at once.
        """
        if loop is None:
            loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        assert task is not None
        deadline = loop.time() + within
        addrs = self._literal(host, port)
        if addrs is None:
            try:
                async with asyncio.timeout_at(deadline):
                    addrs = await self.resolve(host, port)
            except TimeoutError:
                raise ConnectError("dns", f"resolving {host} timed out after {within:g}s"
                                   ) from None
            except OSError as exc:
                why = exc.strerror or str(exc)
                raise ConnectError("dns", f"cannot resolve {host}: {why}") from None
            except (UnicodeError, ValueError) as exc:  # a name that cannot even be asked for
                raise ConnectError("dns", f"cannot resolve {host}: {exc}") from None
            if not addrs:
                raise ConnectError("dns", f"{host} has no addresses")
        key = (host, port)
        rotate = rotate and len(addrs) > 1
        if rotate:
            addrs = self._rotate(key, addrs)
        failures: list[tuple[str, str]] = []
        for i, addr in enumerate(addrs):
            left = deadline - loop.time()
            if left <= 0:
                break
            # A bare timer rather than asyncio.timeout(): this runs once per relayed
            # connection, and the context manager's bookkeeping showed in profiles.
            expiry = _Expiry(task)
            handle = loop.call_at(loop.time() + left / (len(addrs) - i), expiry.fire)
            try:
                try:
                    result = await attempt(addr)
                finally:
                    handle.cancel()
            except asyncio.CancelledError:
                if not expiry.fired or task.uncancel() > 0:
                    raise  # cancelled from outside, not (only) by our timer
                failures.append(attempt_failure(addr, None))
            except OSError as exc:
                failures.append(attempt_failure(addr, exc))
            else:
                if rotate:
                    self._skipped(key, i)
                return result
        raise gave_up(host, port, failures)


def attempt_failure(addr: Address, exc: BaseException | None) -> tuple[str, str]:
    """(cause, detail) for one address that could not be connected to (``exc`` None: timed out)."""
    if exc is None:
        return "connect_timeout", f"{_show(addr)} timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connect_refused", f"{_show(addr)} refused"
    if isinstance(exc, OSError):
        return "connect_error", f"{_show(addr)}: {exc.strerror or exc}"
    return "connect_error", f"{_show(addr)}: {exc!r}"


def gave_up(host: str, port: int, failures: list[tuple[str, str]]) -> ConnectError:
    """The error once every address has failed (or the time ran out before one was tried)."""
    causes = {cause for cause, _ in failures}
    if not failures:
        cause = "connect_timeout"
    elif causes == {"connect_refused"}:
        cause = "connect_refused"
    elif "connect_timeout" in causes:
        cause = "connect_timeout"
    else:
        cause = "connect_error"
    target = format_hostport(host, port)
    tried = "; ".join(detail for _, detail in failures) or "no time left to try"
    return ConnectError(cause, f"cannot connect to {target}: {tried}")
