"""Can a pod forge its client address? One request per data plane that expects PROXY, sent
straight to its Service from the doctor's pod (an ordinary pod, not our proxy), behind a
header naming a documentation address as the client (192.0.2.1 to 192.0.2.2; 2001:db8::1 to
2001:db8::2 over IPv6): addresses only ever written into the header, never connected to.

- ``forgeable``: the data plane answered, so it took the header from a pod; unless its answer
  shows our real address, it believes the forged one (what ingress-nginx does with its default
  ``proxy-real-ip-cidr: 0.0.0.0/0``), and allow-lists and logs by it;
- ``not-believed``: it answered, and the answer shows our own address as the client: the
  header was parsed, its address not trusted (seen only when the answer echoes addresses);
- ``guarded``: the connection was refused, dropped, reset or closed unanswered (a
  NetworkPolicy, or a data plane that accepts PROXY only from trusted addresses); an answer
  followed by a reset is an answer;
- ``unknown``: anything else (a TLS failure, a reply that is not HTTP).

``check`` is the only I/O; ``judge`` and ``fix_for`` are pure. docs/forged-proxy-header.md.
"""

from __future__ import annotations

import errno
import socket
import ssl
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final

from hairpin_proxy import proxyproto
from hairpin_proxy.doctor.facts import DataPlaneFacts, ForgedCheck, ForgedVerdict
from hairpin_proxy.doctor.probe import tls_context
from hairpin_proxy.targets.discovery import (
    HAPROXY_INGRESS,
    INGRESS_NGINX,
    TRAEFIK_INGRESS,
    controller_of,
)
from hairpin_proxy.targets.resolve import CILIUM, ENVOY_GATEWAY, ISTIO, NGINX_GATEWAY_FABRIC

FORGED_V4: Final = "192.0.2.1"
FORGED_V6: Final = "2001:db8::1"
# The destination the header names: a documentation address too, so that an answer naming
# our own address names the client as the data plane saw it, never the address we dialled
# (on one host those are the same).
NAMED_DESTINATION_V4: Final = "192.0.2.2"
NAMED_DESTINATION_V6: Final = "2001:db8::2"
FORGED_PORT: Final = 40000
MAX_ANSWER: Final = 65536
USER_AGENT: Final = "hairpin-proxy-doctor (forged PROXY header check)"



@dataclass(frozen=True)
class Answer:
    """What one forged connection saw: ``outcome`` as the probes name them, the status line's
    code, the start of the answer, and our own address on that connection."""

    outcome: str
    status: int | None = None
    body: str = ""
    own_address: str = ""
    detail: str = ""


GUARDED_OUTCOMES: Final = frozenset({"refused", "timeout", "reset", "empty", "unreachable"})


def judge(answer: Answer) -> tuple[ForgedVerdict, str]:
    """The verdict on one forged request, with what it rests on."""
    if answer.outcome == "http":
        own = answer.own_address
        if own and _mentions(answer.body, own):
            return "not-believed", (f"HTTP {answer.status}, and the answer names our own "
                                    f"address {own}: the header was parsed, its address not "
                                    "believed")
        return "forgeable", (f"HTTP {answer.status} to a request whose PROXY header names "
                             f"{FORGED_V6 if ':' in own else FORGED_V4}")
    if answer.outcome in GUARDED_OUTCOMES:
        return "guarded", f"{answer.outcome}{f' ({answer.detail})' if answer.detail else ''}"
    return "unknown", f"{answer.outcome}{f' ({answer.detail})' if answer.detail else ''}"


def _mentions(body: str, address: str) -> bool:
    """Whether ``address`` stands in ``body`` as a whole token (10.0.0.1 is not in 10.0.0.12)."""
    start = 0
    while (i := body.find(address, start)) >= 0:
        before = body[i - 1] if i else " "
        after = body[i + len(address)] if i + len(address) < len(body) else " "
        if not (before.isalnum() or before in ".:") and not (after.isalnum() or after in ".:"):
            return True
        start = i + 1
    return False


# Where each implementation decides whom it believes a PROXY header from.
_FIXES: Final = {
    INGRESS_NGINX: (
        "ingress-nginx: set `proxy-real-ip-cidr` in its ConfigMap to the load balancer's "
        "addresses (it defaults to 0.0.0.0/0, every sender), or install hairpin-proxy's "
        "guard (--guard-data-planes)"),
    ENVOY_GATEWAY: (
        "Envoy Gateway: list the load balancer's ranges as trusted CIDRs in the "
        "ClientTrafficPolicy that turns proxyProtocol on, or install hairpin-proxy's guard "
        "(--guard-data-planes)"),
    TRAEFIK_INGRESS: (
        "Traefik: set the entry points' `proxyProtocol.trustedIPs` to the load balancer's "
        "addresses (never `insecure: true`), or install hairpin-proxy's guard "
        "(--guard-data-planes)"),
    HAPROXY_INGRESS: (
        "HAProxy Ingress: restrict `proxy-protocol` in its ConfigMap to the load balancer's "
        "addresses, or install hairpin-proxy's guard (--guard-data-planes)"),
    NGINX_GATEWAY_FABRIC: (
        "NGINX Gateway Fabric: set `rewriteClientIP.trustedAddresses` in the NginxProxy to "
        "the load balancer's addresses, or install hairpin-proxy's guard "
        "(--guard-data-planes)"),
    CILIUM: "Cilium: install hairpin-proxy's guard (--guard-data-planes)",
    ISTIO: ("Istio: accept PROXY only from the load balancer (an AuthorizationPolicy on the "
            "gateway), or install hairpin-proxy's guard (--guard-data-planes)"),
}
_GENERIC: Final = ("accept the PROXY protocol only from the load balancer's addresses in the "
                   "data plane's own settings, or install hairpin-proxy's guard "
                   "(--guard-data-planes)")


def fix_for(controller: str) -> str:
    """How to close the hole for the implementation behind ``controller`` (an IngressClass
    ``spec.controller`` or a GatewayClass ``controllerName``)."""
    return _FIXES.get(controller_of(controller) or controller, _GENERIC)


def forged_header(version: str, destination: tuple[str, int]) -> bytes:
    """The header naming documentation addresses as the client and as ``destination``'s
    address (its port is kept)."""
    v6 = ":" in destination[0]
    source = (FORGED_V6 if v6 else FORGED_V4, FORGED_PORT)
    named = (NAMED_DESTINATION_V6 if v6 else NAMED_DESTINATION_V4, destination[1])
    if version == "v2":
        return proxyproto.encode_v2(source, named)
    return proxyproto.encode_v1(source, named)


def _read(conn: socket.socket | ssl.SSLSocket, deadline: float) -> bytes:
    data = b""
    while len(data) < MAX_ANSWER:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        conn.settimeout(left)
        try:
            chunk = conn.recv(MAX_ANSWER - len(data))
        except (TimeoutError, ConnectionResetError):
            if data:
                # A slow tail, or a reset after the answer: what came is an answer, and an
                # answer means the header was taken.
                break
            raise
        if not chunk:
            break
        data += chunk
    return data


def _answer(data: bytes, own: str) -> Answer:
    if not data:
        return Answer("empty", own_address=own)
    line, _, rest = data.partition(b"\r\n")
    parts = line.split(b" ", 2)
    if len(parts) >= 2 and parts[0].startswith(b"HTTP/") and parts[1].isdigit():
        return Answer("http", int(parts[1]), rest.decode("utf-8", "replace"), own)
    return Answer("garbage", own_address=own, detail=repr(line[:40])[2:-1])


def check(address: str, port: int, *, version: str, tls: bool, host: str,
          timeout: float) -> Answer:
    """One connection to address:port behind the forged header; never raises for network
    trouble. Bounded by ``timeout`` as a whole."""
    deadline = time.monotonic() + timeout
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    conn: socket.socket | ssl.SSLSocket = sock
    own = ""
    stage = "connect"
    try:
        sock.settimeout(timeout)
        sock.connect((address, port))
        own = str(sock.getsockname()[0])
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        sock.sendall(forged_header(version, (address, port)))
        if tls:
            stage = "tls"
            conn = tls_context().wrap_socket(sock, server_hostname=host or None)
        stage = "request"
        conn.settimeout(max(0.01, deadline - time.monotonic()))
        conn.sendall((f"GET / HTTP/1.1\r\nHost: {host or address}\r\nUser-Agent: "
                      f"{USER_AGENT}\r\nAccept: */*\r\nConnection: close\r\n\r\n")
                     .encode("ascii", "replace"))
        stage = "reply"
        return _answer(_read(conn, deadline), own)
    except TimeoutError:
        return Answer("timeout", own_address=own, detail=f"{stage}, {timeout:g}s")
    except ConnectionRefusedError:
        return Answer("refused", own_address=own)
    except (ConnectionResetError, BrokenPipeError):
        return Answer("reset", own_address=own, detail=stage)
    except ssl.SSLEOFError:
        return Answer("empty", own_address=own, detail="closed during the TLS handshake")
    except ssl.SSLError as exc:
        return Answer("tls-error", own_address=own, detail=exc.reason or str(exc))
    except OSError as exc:
        if exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL):
            return Answer("unreachable", own_address=own, detail=exc.strerror or "")
        return Answer("error", own_address=own, detail=f"{stage}: {exc.strerror or exc}")
    finally:
        conn.close()
        sock.close()


def start_checks(planes: tuple[DataPlaneFacts, ...], *, timeout: float,
                 pool: ThreadPoolExecutor, deadline: float) -> Callable[[], list[ForgedCheck]]:
    """Start one check per data plane (its first address; the HTTP port, else the TLS one);
    the returned call waits for them, at most until ``deadline``."""
    started: list[tuple[DataPlaneFacts, str, int, bool, Future[Answer] | None]] = []
    for plane in planes:
        address = plane.addresses[0] if plane.addresses else ""
        port, tls = (plane.http_port, False) if plane.http_port else (plane.https_port, True)
        fut = pool.submit(check, address, port, version=plane.proxy, tls=tls,
                          host=plane.host, timeout=timeout) if address and port else None
        started.append((plane, address, port, tls, fut))

    def wait() -> list[ForgedCheck]:
        out = []
        for plane, address, port, tls, fut in started:
            fix = fix_for(plane.controller)
            if fut is None:
                out.append(ForgedCheck(plane, address, port, tls, "not-probed",
                                       "its Service has no ClusterIP or web port", fix))
                continue
            try:
                answer = fut.result(timeout=max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                fut.cancel()
                answer = Answer("timeout", detail="not finished by the doctor's deadline")
            verdict, detail = judge(answer)
            out.append(ForgedCheck(plane, address, port, tls, verdict, detail,
                                   "" if verdict in ("guarded", "not-believed") else fix))
        return out
    return wait
