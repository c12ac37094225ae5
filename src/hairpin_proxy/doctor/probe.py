"""DNS resolution and the HTTP/TLS probes, bare and behind a PROXY header.

Resolution asks what an ordinary pod asks: the cluster DNS Service (whatever DNS policy the
doctor's own pod has: the controller's is ``Default``, the node's resolver), else the system
resolver (getaddrinfo); each answer names the resolver that gave it.
Each probe is one short connection that asks for a random ACME HTTP-01 challenge path with the
host's Host header (and SNI on the TLS port, certificates unverified: reachability is the
question, not trust) and reads only the status line. Every step is bounded by ``timeout``.
"""

from __future__ import annotations

import asyncio
import errno
import secrets
import socket
import ssl
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Literal

from hairpin_proxy import proxyproto
from hairpin_proxy.doctor.facts import SYSTEM_RESOLVER, Attempt, PortProbe, Resolution, Resolver

Header = Literal["", "v1", "v2"]
HEADERS: tuple[Header, ...] = ("", "v1", "v2")
USER_AGENT = "hairpin-proxy-doctor"
_MAX_STATUS_LINE = 4096


def parse_overrides(items: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """``HOST:ADDR`` items (IPv6 as ``HOST:[::1]`` or ``HOST:::1``) to host -> addresses.

    HOST ``*`` stands for every name, as in curl's ``--resolve``; beyond curl, HOST may also
    be ``*.example.com``, every name under example.com (not example.com itself); see
    ``overridden``.
    """
    out: dict[str, list[str]] = {}
    for item in items:
        host, sep, addr = item.partition(":")
        addr = addr.strip().strip("[]")
        if not sep or not host or not addr:
            raise ValueError(f"--resolve {item!r}: expected HOST:ADDR")
        if "*" in host and host != "*" and (
                not host.startswith("*.") or "*" in host[1:] or len(host) < 3):
            raise ValueError(f"--resolve {item!r}: a wildcard is '*' alone or the whole first "
                             "label, as in *.example.com")
        try:
            socket.inet_pton(socket.AF_INET6 if ":" in addr else socket.AF_INET, addr)
        except OSError:
            raise ValueError(f"--resolve {item!r}: {addr!r} is not an IP address") from None
        out.setdefault(host.lower().rstrip("."), []).append(addr)
    return {h: tuple(a) for h, a in out.items()}


def overridden(host: str, overrides: Mapping[str, tuple[str, ...]]) -> tuple[str, ...] | None:
    """The ``--resolve`` addresses for ``host``: its own entry, else the closest wildcard
    above it (``*.b.example.com`` before ``*.example.com``), else ``*``'s, else None."""
    name = host.lower().rstrip(".")
    given = overrides.get(name)
    if given is not None:
        return given
    labels = name.split(".")
    for i in range(1, len(labels)):
        given = overrides.get("*." + ".".join(labels[i:]))
        if given is not None:
            return given
    return overrides.get("*")


def _ask_servers(host: str, resolver: Resolver, limit: float) -> tuple[str, ...]:
    """A and AAAA from the resolver's servers, as a pod's stub resolver asks them (the name
    absolute: the search domains of a pod's resolv.conf lead to the cluster's own zone,
    which answers NXDOMAIN for a public name). Raises LookupError with the reason."""
    from hairpin_proxy.verify.resolver import ServerResolver
    from hairpin_proxy.verify.verdict import ResolveError

    each = max(1.0, limit / (2 * len(resolver.servers)))
    got = asyncio.run(ServerResolver(resolver.servers, each).resolve(host))
    if isinstance(got, ResolveError):
        raise LookupError(str(got))
    if not got.addresses:
        raise LookupError(got.empty_reason or "no answer")
    return tuple(dict.fromkeys(got.addresses))


def start_resolve(host: str, overrides: Mapping[str, tuple[str, ...]], timeout: float,
                  pool: ThreadPoolExecutor, *, deadline: float | None = None,
                  resolver: Resolver = SYSTEM_RESOLVER) -> Callable[[], Resolution]:
    """Start looking up A and AAAA answers with ``resolver``; the returned call waits for
    them (resolver order, duplicates dropped), at most until ``deadline`` (a
    ``time.monotonic()`` instant) when given. A lookup given up on keeps running in
    ``pool``: getaddrinfo cannot be stopped."""
    given = overridden(host, overrides)
    if given is not None:
        result = Resolution(given, overridden=True)
        return lambda: result
    # The resolver has its own retries; give it a few probe timeouts before giving up.
    limit = max(3 * timeout, 5.0)

    def lookup() -> tuple[str, ...]:
        if resolver.servers:
            return _ask_servers(host, resolver, limit)
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        return tuple(dict.fromkeys(str(info[4][0]) for info in infos))

    fut: Future[tuple[str, ...]] = pool.submit(lookup)
    started = time.monotonic()
    give_up = started + limit if deadline is None else min(started + limit, deadline)
    who = resolver.described

    def wait() -> Resolution:
        try:
            return Resolution(fut.result(timeout=max(0.0, give_up - time.monotonic())),
                              resolver=who)
        except socket.gaierror as exc:
            return Resolution(error=exc.strerror or str(exc), resolver=who)
        except LookupError as exc:
            return Resolution(error=str(exc), resolver=who)
        except TimeoutError:
            fut.cancel()
            return Resolution(error=f"no answer within {give_up - started:.3g}s", resolver=who)
        except (OSError, UnicodeError) as exc:
            return Resolution(error=str(exc), resolver=who)
    return wait


def challenge_path() -> str:
    return f"/.well-known/acme-challenge/{secrets.token_urlsafe(24)}"


def _request(host: str, path: str) -> bytes:
    return (f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: {USER_AGENT}\r\n"
            "Accept: */*\r\nConnection: close\r\n\r\n").encode("ascii", "replace")


def _header(sock: socket.socket, version: Header) -> bytes:
    src, dst = sock.getsockname(), sock.getpeername()
    if version == "v1":
        return proxyproto.encode_v1(src, dst)
    return proxyproto.encode_v2(src, dst)


def _is_ip(text: str) -> bool:
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, text)
            return True
        except OSError:
            pass
    return False


def tls_context() -> ssl.SSLContext:
    """A client context for a probe: any certificate (the data plane's is not what is tested),
    HTTP/1.1 by ALPN."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def _read_status(sock: socket.socket | ssl.SSLSocket, deadline: float) -> Attempt:
    data = b""
    while b"\r\n" not in data and len(data) < _MAX_STATUS_LINE:
        left = deadline - time.monotonic()
        if left <= 0:  # a peer that trickles bytes gets no more time than a silent one
            raise TimeoutError
        sock.settimeout(left)
        chunk = sock.recv(_MAX_STATUS_LINE)
        if not chunk:
            break
        data += chunk
    if not data:
        return Attempt("empty")
    line = data.split(b"\r\n", 1)[0]
    parts = line.split(b" ", 2)
    if len(parts) >= 2 and parts[0].startswith(b"HTTP/") and parts[1].isdigit() \
            and len(parts[1]) == 3:
        return Attempt("http", int(parts[1]))
    return Attempt("garbage", detail=repr(line[:40])[2:-1])


def attempt(address: str, port: int, *, host: str, path: str, tls: bool, header: Header,
            timeout: float) -> Attempt:
    """One connection to address:port; never raises for network trouble."""
    deadline = time.monotonic() + timeout
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    conn: socket.socket | ssl.SSLSocket = sock
    stage = "connect"
    try:
        sock.settimeout(timeout)
        sock.connect((address, port))
        if header:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            sock.sendall(_header(sock, header))
        if tls:
            stage = "tls"
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            conn = tls_context().wrap_socket(
                sock, server_hostname=None if _is_ip(host) else host)
        stage = "request"
        conn.settimeout(max(0.01, deadline - time.monotonic()))
        conn.sendall(_request(host, path))
        stage = "reply"
        return _read_status(conn, deadline)
    except TimeoutError:
        return Attempt("timeout", detail=f"{stage}, {timeout:g}s")
    except ConnectionRefusedError:
        return Attempt("refused")
    except ConnectionResetError:
        return Attempt("reset", detail=stage)
    except BrokenPipeError:
        return Attempt("reset", detail=f"{stage}, broken pipe")
    except ssl.SSLEOFError:
        return Attempt("empty", detail="closed during the TLS handshake")
    except ssl.SSLError as exc:
        return Attempt("tls-error", detail=exc.reason or str(exc))
    except OSError as exc:
        if exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL):
            return Attempt("unreachable", detail=exc.strerror or "")
        return Attempt("error", detail=f"{stage}: {exc.strerror or exc}")
    finally:
        conn.close()
        sock.close()


def start_probe(address: str, port: int, *, host: str, tls: bool, timeout: float,
                pool: ThreadPoolExecutor, deadline: float | None = None
                ) -> Callable[[], PortProbe]:
    """Start the three attempts side by side; the returned call waits for them, at most until
    ``deadline`` (a ``time.monotonic()`` instant) when given: an attempt not finished by then
    is a timeout."""
    path = challenge_path()
    futures = {h: pool.submit(attempt, address, port, host=host, path=path, tls=tls, header=h,
                              timeout=timeout)
               for h in HEADERS}

    def result(fut: Future[Attempt]) -> Attempt:
        if deadline is None:
            return fut.result()
        try:
            return fut.result(timeout=max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            fut.cancel()
            return Attempt("timeout", detail="not finished by the doctor's deadline")

    def wait() -> PortProbe:
        r = {h: result(f) for h, f in futures.items()}
        return PortProbe("tls" if tls else "http", address, port, r[""], r["v1"], r["v2"])
    return wait
