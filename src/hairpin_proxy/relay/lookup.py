"""Resolution of an upstream and a TCP connect to it, round-robin over its addresses.

A host name is looked up as an absolute name (a trailing dot: the pod's ``ndots:5`` search
list would otherwise turn one lookup into up to six pairs of queries) with dnspython's async
resolver, and the answer is kept for its TTL; concurrent connections share one lookup. When a
lookup fails (timeout, SERVFAIL, no server) the last good answer is used, and the lookup is
retried after ``STALE_RETRY`` seconds; an authoritative "no such name" is an answer and ends
the cached one. Single-label names (``localhost``), names the DNS does not know but the system
does (``/etc/hosts``, the search list), and systems without a resolv.conf go through
getaddrinfo, whose answers carry no TTL and are not cached (the last good one is still kept).
IP literals skip resolution. All answers take turns; an address that refuses or does not
answer is skipped in favour of the next one, all within one connect timeout.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import dns.asyncresolver
import dns.exception
import dns.name
import dns.rdatatype
import dns.resolver

from hairpin_proxy.addresses import format_hostport, parse_hostport
from hairpin_proxy.relay.spec import is_ip_literal

log = logging.getLogger("hairpin_proxy.relay")

Address = tuple[int, tuple[Any, ...]]  # (family, sockaddr)
GetAddrInfo = Callable[[str, int], Awaitable[list[Address]]]
# Called once per failed lookup: (host, whether the last good answer is used instead, why).
FailureHook = Callable[[str, bool, str], None]
T = TypeVar("T")

# Seconds a failed lookup's stale answer is used before the name is asked for again.
STALE_RETRY = 5.0
# Cap on a cached answer's life, whatever its TTL says.
MAX_TTL = 300.0


class ConnectError(Exception):
    """The upstream could not be reached; ``cause`` is a metric label, ``detail`` for humans."""

    def __init__(self, cause: str, detail: str) -> None:
        super().__init__(detail)
        self.cause = cause
        self.detail = detail


class LookupError_(Exception):
    """A lookup gave no address; ``missing``: the DNS said the name has none (an answer,
    which ends a cached one), else the DNS could not be asked (a stale answer may serve)."""

    def __init__(self, detail: str, *, missing: bool) -> None:
        super().__init__(detail)
        self.detail = detail
        self.missing = missing


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


def dns_resolver(nameservers: Sequence[str] = (),
                 filename: str = "/etc/resolv.conf") -> dns.asyncresolver.Resolver | None:
    """dnspython's async resolver: the given servers (``ADDR[:PORT]``, one port for all),
    else the system's resolv.conf; None when there is none (getaddrinfo then)."""
    if nameservers:
        resolver = dns.asyncresolver.Resolver(configure=False)
        parsed = [parse_hostport(ns, default_port=53) for ns in nameservers]
        resolver.nameservers = [host for host, _ in parsed]
        resolver.port = parsed[0][1]
        return resolver
    try:
        return dns.asyncresolver.Resolver(filename=filename)
    except (dns.resolver.NoResolverConfiguration, OSError):
        return None


class _Expiry:
    """Cancels a task when its timer fires, and remembers that it did."""

    __slots__ = ("fired", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.fired = False

    def fire(self) -> None:
        self.fired = True
        self.task.cancel()


class _Answer:
    """An upstream's cached addresses and until when (loop time) they may be used."""

    __slots__ = ("addrs", "expires")

    def __init__(self, addrs: list[Address], expires: float) -> None:
        self.addrs = addrs
        self.expires = expires


class Resolver:
    """Resolves upstreams and connects to them.

    ``getaddrinfo`` replaces every lookup (a test seam: no TTL, so nothing is cached);
    ``dns_client`` is the DNS resolver to use (default: from the system's resolv.conf; None:
    getaddrinfo only), and ``on_failure`` hears of every failed lookup.
    """

    def __init__(self, getaddrinfo: GetAddrInfo | None = None, *,
                 dns_client: dns.asyncresolver.Resolver | bool | None = True,
                 on_failure: FailureHook | None = None) -> None:
        self._getaddrinfo = getaddrinfo or system_getaddrinfo
        self._dns: dns.asyncresolver.Resolver | None
        if getaddrinfo is not None or dns_client is False or dns_client is None:
            self._dns = None
        elif dns_client is True:
            self._dns = dns_resolver()
        else:
            self._dns = dns_client
        self.on_failure = on_failure
        self._turn: dict[tuple[str, int], int] = {}
        self._literals: dict[tuple[str, int], list[Address] | None] = {}
        self._answers: dict[tuple[str, int], _Answer] = {}
        self._lookups: dict[tuple[str, int], asyncio.Future[list[Address]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # lookups under way (strong references)

    def cached(self, host: str, port: int, now: float) -> list[Address] | None:
        """What ``resolve`` would return at loop time ``now`` without waiting (a fresh cached
        answer, or the last good one while a failed lookup is not retried yet), else None."""
        answer = self._answers.get((host, port))
        if answer is not None and now < answer.expires:
            return answer.addrs
        return None

    async def resolve(self, host: str, port: int, within: float = 5.0) -> list[Address]:
        """The upstream's addresses: cached while fresh, else looked up (one lookup for every
        connection that asks meanwhile), else the last good ones when the lookup fails."""
        known = self._literal(host, port)
        if known is not None:
            return known
        key = (host, port)
        loop = asyncio.get_running_loop()
        answer = self._answers.get(key)
        if answer is not None and loop.time() < answer.expires:
            return answer.addrs  # as ``cached`` says
        pending = self._lookups.get(key)
        if pending is None:
            # A lookup may not use up a connection's budget when a stale answer could serve.
            lifetime = within if answer is None else within / 2
            pending = self._lookups[key] = loop.create_future()
            self._tasks.add(loop.create_task(self._refresh(key, lifetime, answer, pending)))
        return await asyncio.shield(pending)

    async def _refresh(self, key: tuple[str, int], lifetime: float, stale: _Answer | None,
                       result: asyncio.Future[list[Address]]) -> None:
        task = asyncio.current_task()
        try:
            await self._refresh_once(key, lifetime, stale, result)
        finally:
            if self._lookups.get(key) is result:
                del self._lookups[key]
            self._tasks.discard(task)

    async def _refresh_once(self, key: tuple[str, int], lifetime: float,
                            stale: _Answer | None,
                            result: asyncio.Future[list[Address]]) -> None:
        host, port = key
        loop = asyncio.get_running_loop()
        try:
            addrs, ttl = await self._lookup(host, port, lifetime)
        except BaseException as exc:  # passed to the waiters
            missing = isinstance(exc, LookupError_) and exc.missing
            why = _why(exc, host, lifetime)
            if stale is not None and not missing and not isinstance(exc, asyncio.CancelledError):
                stale.expires = loop.time() + STALE_RETRY
                self._failed(host, True, why)
                if not result.done():
                    result.set_result(stale.addrs)
                return
            if missing:
                self._answers.pop(key, None)
            if not isinstance(exc, asyncio.CancelledError):
                self._failed(host, False, why)
            if not result.done():
                result.set_exception(exc)
                result.exception()  # retrieved: a lookup nobody waits for any more is fine
            return
        if ttl > 0 and len(self._answers) < 1024:
            self._answers[key] = _Answer(addrs, loop.time() + min(ttl, MAX_TTL))
        elif ttl <= 0:
            # No TTL (getaddrinfo): not cached, but kept as the last good answer.
            self._answers[key] = _Answer(addrs, 0.0)
        if not result.done():
            result.set_result(addrs)

    def _failed(self, host: str, stale: bool, why: str) -> None:
        if stale:
            log.warning("cannot resolve %s (%s); using its last good answer", host, why,
                        extra={"target": host, "cause": "dns"})
        if self.on_failure is not None:
            self.on_failure(host, stale, why)

    async def _lookup(self, host: str, port: int, lifetime: float) -> tuple[list[Address],
                                                                           float]:
        """(unique addresses, TTL in seconds; 0: unknown)."""
        resolver = self._dns
        if resolver is not None and "." in host.rstrip("."):
            try:
                return await _dns_lookup(resolver, host, port, lifetime)
            except LookupError_ as exc:
                if not exc.missing:
                    raise
                # Unknown as an absolute name: maybe a name relative to the search list or
                # one of the hosts file; the system resolver knows those.
        try:
            addrs = await self._getaddrinfo(host, port)
        except socket.gaierror as exc:
            missing = exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", -5))
            raise LookupError_(exc.strerror or str(exc), missing=missing) from None
        unique: list[Address] = []
        for addr in addrs:
            if addr not in unique:
                unique.append(addr)
        return unique, 0.0

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
        """The one address of an IP-literal upstream (nothing to resolve or rotate), else None."""
        addrs = self._literal(host, port)
        return addrs[0] if addrs else None

    def _literal(self, host: str, port: int) -> list[Address] | None:
        # Listener upstreams are fixed, so whether one is an IP literal is worked out once.
        key = (host, port)
        if key in self._literals:
            return self._literals[key]
        known = [literal_address(host, port)] if is_ip_literal(host) else None
        if len(self._literals) < 1024:
            self._literals[key] = known
        return known

    async def connect(self, host: str, port: int, within: float, *,
                      rotate: bool = True, buffers: int = 0) -> socket.socket:
        """A connected non-blocking socket, or ConnectError naming the cause; ``buffers``:
        its SO_SNDBUF/SO_RCVBUF (0: autotuned)."""
        loop = asyncio.get_running_loop()

        async def attempt(addr: Address) -> socket.socket:
            sock = socket.socket(addr[0], socket.SOCK_STREAM)
            try:
                sock.setblocking(False)
                if buffers:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffers)
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffers)
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
                    addrs = await self.resolve(host, port, within)
            except TimeoutError:
                raise ConnectError("dns", f"resolving {host} timed out after {within:g}s"
                                   ) from None
            except (LookupError_, OSError, UnicodeError, ValueError) as exc:
                raise ConnectError("dns", f"cannot resolve {host}: {_why(exc, host, within)}"
                                   ) from None
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
    upstream = format_hostport(host, port)
    tried = "; ".join(detail for _, detail in failures) or "no time left to try"
    return ConnectError(cause, f"cannot connect to {upstream}: {tried}")


def _why(exc: BaseException, host: str, lifetime: float) -> str:
    if isinstance(exc, LookupError_):
        return exc.detail
    if isinstance(exc, TimeoutError | dns.exception.Timeout):
        return f"timed out after {lifetime:g}s"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc) or type(exc).__name__


async def _dns_lookup(resolver: dns.asyncresolver.Resolver, host: str, port: int,
                      lifetime: float) -> tuple[list[Address], float]:
    """A and AAAA of the absolute name, together; (addresses, the smaller TTL)."""
    try:
        qname = dns.name.from_text(host if host.endswith(".") else host + ".")
    except dns.exception.DNSException as exc:
        raise LookupError_(str(exc), missing=True) from None
    results = await asyncio.gather(
        *(resolver.resolve(qname, rdtype, search=False, lifetime=lifetime,
                           raise_on_no_answer=False)
          for rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA)),
        return_exceptions=True)
    addrs: list[Address] = []
    ttl = MAX_TTL
    missing = 0
    failure: BaseException | None = None
    for family, got in zip((socket.AF_INET, socket.AF_INET6), results, strict=True):
        if isinstance(got, dns.resolver.NXDOMAIN):
            missing += 1
            continue
        if isinstance(got, BaseException):
            failure = got
            continue
        rrset = got.rrset
        if rrset is None:
            missing += 1
            continue
        ttl = min(ttl, float(rrset.ttl))
        for rdata in rrset:
            ip = rdata.to_text()
            addrs.append((family, (ip, port) if family == socket.AF_INET else (ip, port, 0, 0)))
    if addrs:
        return addrs, ttl
    if failure is not None:
        if isinstance(failure, dns.exception.Timeout):
            raise LookupError_(f"timed out after {lifetime:g}s", missing=False)
        if isinstance(failure, asyncio.CancelledError):
            raise failure
        raise LookupError_(str(failure) or type(failure).__name__, missing=False)
    raise LookupError_(f"{host} has no addresses", missing=True)
