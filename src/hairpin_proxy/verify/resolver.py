"""Resolve a name's A and AAAA records: the configured DNS servers, or the system resolver.

``make_resolver(servers)`` returns a ``ServerResolver`` (dnspython, asking exactly those
servers) when ``--verify-resolver`` names any, else a ``SystemResolver`` (getaddrinfo, the
node's resolv.conf since the controller runs with dnsPolicy: Default). Either way
``resolve(name)`` returns ``Answers`` (possibly empty: NXDOMAIN/NODATA) or a ``ResolveError``
and never raises for DNS trouble. Names are always queried as absolute names: a search domain
from resolv.conf must never turn ``example.com`` into ``example.com.corp.internal``.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from hairpin_proxy.addresses import format_hostport, parse_hostport
from hairpin_proxy.verify.lb import canonical_ip
from hairpin_proxy.verify.verdict import Answers, ResolveError

if TYPE_CHECKING:
    import dns.name
    import dns.rdatatype

# dnspython (several megabytes once imported) is imported by ServerResolver alone: it is only
# needed when --verify-resolver names servers, and not at all with verification off.

__all__ = [
    "DEFAULT_TIMEOUT",
    "Resolver",
    "ServerResolver",
    "SystemResolver",
    "combine",
    "from_gaierror",
    "make_resolver",
    "parse_servers",
]

DEFAULT_TIMEOUT = 2.0
# getaddrinfo has its own retries (resolv.conf ``timeout``/``attempts``, 5 s x 2 by default);
# this bounds how long a check may hold a worker when the system resolver hangs.
SYSTEM_TIMEOUT = 12.0


class Resolver(Protocol):
    async def resolve(self, name: str) -> Answers | ResolveError: ...


def parse_servers(servers: Sequence[str]) -> tuple[tuple[str, int], ...]:
    """``ADDR[:PORT]`` / ``[V6]:PORT`` strings → (address, port); ValueError names the bad one.

    Addresses only: a server given by name would need a resolver to find the resolver.
    """
    parsed: list[tuple[str, int]] = []
    for text in servers:
        host, port = parse_hostport(text, default_port=53)
        addr = canonical_ip(host)
        if addr is None:
            raise ValueError(f"verify resolver {text!r}: not an IP address")
        if port == 0:
            raise ValueError(f"verify resolver {text!r}: port 0")
        parsed.append((addr, port))
    return tuple(parsed)


def _absolute(name: str) -> str:
    return name.strip().rstrip(".") + "."


def _bare(name: str) -> str:
    return name.strip().rstrip(".").lower()


_Part = tuple[tuple[str, ...], str, str]  # addresses, empty reason, canonical name


def combine(name: str, a: _Part | ResolveError, aaaa: _Part | ResolveError) -> \
        Answers | ResolveError:
    """One result from the A and the AAAA lookups.

    One failed family does not hide the other's addresses (they can prove a host ours: the
    ``incomplete`` mark keeps them from proving it is not). NXDOMAIN is about the name, not a
    type, so it stands even when the other query failed; NODATA beside a failure does not.
    """
    parts = [p for p in (a, aaaa) if not isinstance(p, ResolveError)]
    failed = [p for p in (a, aaaa) if isinstance(p, ResolveError)]
    addresses = tuple(x for p in parts for x in p[0])
    canonical = next((p[2] for p in parts if p[2]), "")
    if not failed:
        reasons = {p[1] for p in parts}
        empty = "NXDOMAIN" if "NXDOMAIN" in reasons else "NODATA"
        return Answers(name, addresses, "" if addresses else empty, canonical)
    if addresses:
        return Answers(name, addresses, canonical=canonical, incomplete=str(failed[0]))
    if any(p[1] == "NXDOMAIN" for p in parts):
        return Answers(name, (), "NXDOMAIN", canonical)
    return failed[0]


class ServerResolver:
    """Asks the given servers (UDP, TCP on truncation) with dnspython; no cache, no search."""

    def __init__(self, servers: Sequence[tuple[str, int]], timeout: float = DEFAULT_TIMEOUT):
        if not servers:
            raise ValueError("ServerResolver needs at least one server")
        import dns.asyncresolver
        import dns.nameserver

        self.servers = tuple(servers)
        res = dns.asyncresolver.Resolver(configure=False)
        # Each server carries its own port (Do53Nameserver), so "[::1]:5353" and "10.0.0.2"
        # can be mixed; the resolver-wide ``port`` would apply one port to all.
        res.nameservers = [dns.nameserver.Do53Nameserver(addr, port) for addr, port in servers]
        res.timeout = timeout
        # Every server gets its try before the lookup is given up on.
        res.lifetime = timeout * len(servers)
        res.cache = None  # a re-check must see the current answer
        res.search = []
        res.use_search_by_default = False
        self._res = res

    def __repr__(self) -> str:
        return f"ServerResolver({', '.join(format_hostport(a, p) for a, p in self.servers)})"

    async def _query(self, qname: dns.name.Name, rdtype: dns.rdatatype.RdataType) -> \
            _Part | ResolveError:
        import dns.exception
        import dns.resolver

        name = qname.to_text(omit_final_dot=True)
        try:
            answer = await self._res.resolve(qname, rdtype, raise_on_no_answer=False,
                                             search=False)
        except dns.resolver.NXDOMAIN:
            return (), "NXDOMAIN", ""
        except dns.resolver.LifetimeTimeout as exc:
            return ResolveError(name, "timeout", _first_line(exc))
        except dns.resolver.NoNameservers as exc:
            # Every server answered SERVFAIL/REFUSED (or failed at once): the text says which.
            kind = "refused" if "REFUSED" in str(exc) else "servfail"
            return ResolveError(name, kind, _first_line(exc))
        except (dns.exception.DNSException, OSError) as exc:
            return ResolveError(name, "error", _first_line(exc) or type(exc).__name__)
        addresses: list[str] = []
        if answer.rrset is not None:
            addresses = [str(getattr(rd, "address", "")) for rd in answer.rrset]
        canonical = answer.canonical_name
        alias = canonical.to_text(omit_final_dot=True) if canonical != qname else ""
        return tuple(addresses), "" if addresses else "NODATA", alias

    async def resolve(self, name: str) -> Answers | ResolveError:
        import dns.exception
        import dns.name
        import dns.rdatatype

        bare = _bare(name)
        try:
            qname = dns.name.from_text(_absolute(name))
        except dns.exception.DNSException as exc:
            return ResolveError(bare, "error", f"bad name: {exc}")
        a, aaaa = await asyncio.gather(self._query(qname, dns.rdatatype.A),
                                       self._query(qname, dns.rdatatype.AAAA))
        return combine(bare, a, aaaa)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def from_gaierror(name: str, exc: socket.gaierror) -> Answers | ResolveError:
    """What a getaddrinfo failure means: no such name/no data are answers, the rest errors."""
    code = exc.errno
    if code == socket.EAI_NONAME:
        # glibc reports both NXDOMAIN and "no A/AAAA" this way.
        return Answers(name, (), "no such name")
    if code == getattr(socket, "EAI_NODATA", None):
        return Answers(name, (), "NODATA")
    if code == socket.EAI_AGAIN:
        # Timeouts and SERVFAIL from every server land here.
        return ResolveError(name, "temporary", exc.strerror or str(exc))
    return ResolveError(name, "error", exc.strerror or str(exc))


class SystemResolver:
    """getaddrinfo (in the loop's thread pool) for A and AAAA at once (AF_UNSPEC)."""

    def __init__(self, timeout: float = SYSTEM_TIMEOUT) -> None:
        self.timeout = timeout

    def __repr__(self) -> str:
        return "SystemResolver()"

    async def resolve(self, name: str) -> Answers | ResolveError:
        bare = _bare(name)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.timeout):
                infos = await loop.getaddrinfo(_absolute(name), None, family=socket.AF_UNSPEC,
                                               type=socket.SOCK_STREAM,
                                               flags=socket.AI_CANONNAME)
        except socket.gaierror as exc:
            return from_gaierror(bare, exc)
        except TimeoutError:
            return ResolveError(bare, "timeout", f"no answer within {self.timeout:g}s")
        except (OSError, UnicodeError) as exc:
            return ResolveError(bare, "error", str(exc) or type(exc).__name__)
        addresses = tuple(str(info[4][0]) for info in infos
                          if info[0] in (socket.AF_INET, socket.AF_INET6))
        canonical = _bare(infos[0][3]) if infos and infos[0][3] else ""
        return Answers(bare, addresses, "" if addresses else "NODATA",
                       canonical if canonical != bare else "")


def make_resolver(servers: Sequence[str] = (), *, timeout: float = DEFAULT_TIMEOUT) -> Resolver:
    """The resolver ``--verify-resolver`` asks for (ValueError on a bad server string)."""
    parsed = parse_servers(servers)
    if parsed:
        return ServerResolver(parsed, timeout)
    return SystemResolver()
