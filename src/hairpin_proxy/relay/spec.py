"""Listener specs: ``ADDR:PORT[=TARGET_HOST:TARGET_PORT][/v1|/v2][@ADV_PORT]`` (the syntax of
``--listen``, whose help keeps the word TARGET) parsed: a listen address and the upstream it
relays to. Pure."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from hairpin_proxy.addresses import format_hostport, parse_hostport

Version = Literal["v1", "v2"]
VERSIONS: tuple[Version, ...] = ("v1", "v2")

# Plain HTTP and TLS passthrough, on the Service's own port numbers: the PROXY header then
# names the port the client dialed (the pod may bind them: net.ipv4.ip_unprivileged_port_start
# is 0 in its security context).
DEFAULT_PORTS = ((80, 80), (443, 443))


class ListenerSpecError(ValueError):
    """A listener spec could not be understood; the message names the offending text."""


def is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class ListenerSpec:
    listen_host: str
    listen_port: int
    upstream_host: str
    upstream_port: int
    version: Version
    # The destination port the PROXY header names (the port clients dialed, when a Service
    # maps it to another listen port); None: the listen port.
    advertise_port: int | None = None

    @property
    def name(self) -> str:
        """The listen address as written in logs and metric labels."""
        return format_hostport(self.listen_host, self.listen_port)

    @property
    def upstream(self) -> str:
        return format_hostport(self.upstream_host, self.upstream_port)

    @property
    def upstream_is_ip(self) -> bool:
        """True when the upstream needs no name resolution."""
        return is_ip_literal(self.upstream_host)

    @property
    def header_port(self) -> int:
        """The destination port every header of this listener carries."""
        return self.advertise_port or self.listen_port

    def __str__(self) -> str:
        adv = f"@{self.advertise_port}" if self.advertise_port else ""
        return f"{self.name}={self.upstream}/{self.version}{adv}"


def _bare_host(text: str) -> str:
    host = text.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host:
        raise ListenerSpecError("the target server is empty")
    if "/" in host or "=" in host or (":" in host and not is_ip_literal(host)):
        raise ListenerSpecError(f"target server {text!r} must be a host name or an IP address "
                                "without a port")
    return host


def parse_listener(text: str, *, target_server: str, default_version: Version) -> ListenerSpec:
    """Parse one spec; without ``=TARGET`` the upstream is ``target_server`` (the default
    target) on the same port.

    ``:PORT`` (no address) is ``[::]:PORT``: every address, IPv4 and IPv6 (IPv4 only where
    the host has no IPv6); ``=HOST`` without a port keeps the listen port. ``@PORT`` at the
    end (before or after the version) is the destination port the PROXY header advertises
    instead of the listen port.
    """
    raw = text.strip()
    if not raw:
        raise ListenerSpecError("empty listener spec")
    version = default_version
    advertise_port: int | None = None
    head, at, adv_text = raw.rpartition("@")
    if at:
        adv_text, slash, after = adv_text.partition("/")
        raw = head + slash + after
        if not (adv_text.isascii() and adv_text.isdigit()) or not 0 < int(adv_text) < 65536:
            raise ListenerSpecError(f"listener {text!r}: advertised port {adv_text!r} is not "
                                    "a port (1-65535)")
        advertise_port = int(adv_text)
    head, slash, suffix = raw.rpartition("/")
    if slash:
        if suffix not in VERSIONS:
            raise ListenerSpecError(f"listener {text!r}: unknown PROXY protocol version "
                                    f"{suffix!r} (expected v1 or v2)")
        version = suffix
        raw = head
    listen_text, eq, upstream_text = raw.partition("=")
    if listen_text.startswith(":"):
        listen_text = "[::]" + listen_text
    try:
        listen_host, listen_port = parse_hostport(listen_text)
    except ValueError as exc:
        raise ListenerSpecError(f"listener {text!r}: {exc}") from None
    if listen_port == 0:
        raise ListenerSpecError(f"listener {text!r}: port 0 is not a fixed port")
    if eq:
        if not upstream_text.strip():
            raise ListenerSpecError(f"listener {text!r}: empty target after '='")
        try:
            upstream_host, upstream_port = parse_hostport(upstream_text,
                                                          default_port=listen_port)
        except ValueError as exc:
            raise ListenerSpecError(f"listener {text!r}: target: {exc}") from None
    else:
        upstream_host, upstream_port = _bare_host(target_server), listen_port
    if upstream_port == 0:
        raise ListenerSpecError(f"listener {text!r}: target port 0 is not a port")
    return ListenerSpec(listen_host, listen_port, upstream_host, upstream_port, version,
                        advertise_port)


def default_specs(target_server: str) -> tuple[str, ...]:
    host = format_hostport(_bare_host(target_server), 1).rsplit(":", 1)[0]
    # [::]: one socket for IPv4 and IPv6 clients, so IPv6-only and dual-stack clusters work
    # with the defaults (where the host has no IPv6, the bind falls back to 0.0.0.0).
    return tuple(f"[::]:{listen}={host}:{upstream}" for listen, upstream in DEFAULT_PORTS)


def parse_listeners(texts: Iterable[str], *, target_server: str,
                    default_version: Version) -> tuple[ListenerSpec, ...]:
    """All listeners (the defaults when ``texts`` is empty); refuses one address used twice."""
    texts = tuple(texts) or default_specs(target_server)
    specs = tuple(parse_listener(t, target_server=target_server,
                                 default_version=default_version) for t in texts)
    seen: dict[tuple[str, int], ListenerSpec] = {}
    for spec in specs:
        key = (spec.listen_host, spec.listen_port)
        if key in seen:
            raise ListenerSpecError(f"listen address {spec.name} is given twice "
                                    f"({seen[key]} and {spec})")
        seen[key] = spec
    return specs
