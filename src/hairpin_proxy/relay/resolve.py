"""Per-connection resolution of a target and a TCP connect to it, round-robin over its addresses.

Service addresses change while the proxy runs, so every connection resolves anew (an IP literal
skips resolution). All A/AAAA answers take turns; an address that refuses or does not answer is
skipped in favour of the next one, all within one connect timeout.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from hairpin_proxy.addresses import format_hostport
from hairpin_proxy.relay.spec import is_ip_literal

Address = tuple[int, tuple[Any, ...]]  # (family, sockaddr)
GetAddrInfo = Callable[[str, int], Awaitable[list[Address]]]


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


class Resolver:
    """Resolves targets and connects to them; ``getaddrinfo`` is the seam tests replace."""

    def __init__(self, getaddrinfo: GetAddrInfo = system_getaddrinfo) -> None:
        self._getaddrinfo = getaddrinfo
        self._turn: dict[tuple[str, int], int] = {}

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

    async def connect(self, host: str, port: int, within: float, *,
                      rotate: bool = True) -> socket.socket:
        """A connected non-blocking socket, or ConnectError naming the cause.

        Each address gets an equal share of the time left, so one that does not answer
        cannot use up the whole timeout while another would accept at once.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        target = format_hostport(host, port)
        try:
            async with asyncio.timeout_at(deadline):
                addrs = await self.resolve(host, port)
        except TimeoutError:
            raise ConnectError("dns", f"resolving {host} timed out after {within:g}s") from None
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
            sock = socket.socket(addr[0], socket.SOCK_STREAM)
            try:
                sock.setblocking(False)
                async with asyncio.timeout(left / (len(addrs) - i)):
                    await loop.sock_connect(sock, addr[1])
            except TimeoutError:
                sock.close()
                failures.append(("connect_timeout", f"{_show(addr)} timed out"))
            except ConnectionRefusedError:
                sock.close()
                failures.append(("connect_refused", f"{_show(addr)} refused"))
            except OSError as exc:
                sock.close()
                failures.append(("connect_error", f"{_show(addr)}: {exc.strerror or exc}"))
            except BaseException:
                sock.close()
                raise
            else:
                if rotate:
                    self._skipped(key, i)
                return sock
        causes = {cause for cause, _ in failures}
        if not failures:
            cause = "connect_timeout"
        elif causes == {"connect_refused"}:
            cause = "connect_refused"
        elif "connect_timeout" in causes:
            cause = "connect_timeout"
        else:
            cause = "connect_error"
        tried = "; ".join(detail for _, detail in failures) or "no time left to try"
        raise ConnectError(cause, f"cannot connect to {target}: {tried}")
