"""This cluster's load balancer addresses, gathered from Kubernetes objects. Pure.

``lb_addresses(services, ingresses)`` reads every ``status.loadBalancer.ingress[]`` entry of the
Services of type LoadBalancer and of the Ingresses. An entry gives an ``ip`` (canonicalised with
``ipaddress``, so ``2001:DB8::0:1`` and ``2001:db8::1`` are one address), a ``hostname``
(AWS ELB style: its addresses are learned by resolving it, see ``LbIndex.with_resolved``), or
both. A Service entry may carry ``ipMode`` (Kubernetes 1.30+): ``Proxy`` means kube-proxy does
not short-circuit in-cluster traffic to that address, so it really goes through the load
balancer and there is no hairpin to fix; ``VIP`` or no ``ipMode`` means it is short-circuited.

The objects come from the API server and a tenant may have written parts of them, so anything
malformed is skipped, never raised on.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

__all__ = [
    "LbAddress",
    "LbIndex",
    "LbName",
    "LbSource",
    "canonical_ip",
    "canonical_name",
    "lb_addresses",
]

_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")


def canonical_ip(text: object) -> str | None:
    """The canonical text of an IP address, or None when ``text`` is not one.

    IPv4-mapped IPv6 addresses become their IPv4 address: a resolver may hand either form for
    the same load balancer and they must compare equal.
    """
    if not isinstance(text, str) or not text or len(text) > 64:
        return None
    candidate = text.strip()
    if candidate.startswith("[") and candidate.endswith("]"):
        candidate = candidate[1:-1]
    try:
        addr = ipaddress.ip_address(candidate)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped)
    return addr.compressed


def canonical_name(text: object) -> str | None:
    """A DNS name lower-cased without its trailing dot, or None when it is not a valid one."""
    if not isinstance(text, str):
        return None
    name = text.strip().lower().removesuffix(".")
    if not name or len(name) > 253 or not name.isascii():
        return None
    if not all(_LABEL.match(label) for label in name.split(".")):
        return None
    if canonical_ip(name) is not None:  # "10.0.0.1" is an address, not a name to resolve
        return None
    return name


@dataclasses.dataclass(frozen=True, order=True)
class LbSource:
    """Where a load balancer address was reported: ``Service ns/name`` or ``Ingress ns/name``."""

    kind: Literal["Service", "Ingress"]
    namespace: str
    name: str
    # The Service entry's ipMode ("Proxy", "VIP") or "" when absent (always "" for Ingresses,
    # whose status has no such field).
    ip_mode: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclasses.dataclass(frozen=True)
class LbAddress:
    """One load balancer IP address and everything that reported it."""

    address: str
    sources: tuple[LbSource, ...]
    # Set when the address was learned by resolving a load balancer hostname.
    via: str = ""

    @property
    def proxy(self) -> bool:
        """Whether in-cluster traffic to this address goes through the load balancer.

        True only when every Service reporting it says ipMode Proxy. Redirecting a host that
        is ours is harmless (the proxy speaks for the load balancer), skipping one that needs
        it is not, so a mixed report (two Services sharing an IP with different modes) counts
        as VIP. Ingress statuses carry no ipMode and do not vote.
        """
        modes = [s.ip_mode for s in self.sources if s.kind == "Service"]
        return bool(modes) and all(m == "Proxy" for m in modes)

    @property
    def services(self) -> tuple[str, ...]:
        """``ns/name`` of the Services that reported this address."""
        return tuple(f"{s.namespace}/{s.name}" for s in self.sources if s.kind == "Service")

    def describe(self) -> str:
        """"Service ingress-nginx/ingress-nginx" (the sources, for reasons shown to people)."""
        shown = ", ".join(str(s) for s in self.sources)
        return f"{shown} via {self.via}" if self.via else shown


@dataclasses.dataclass(frozen=True)
class LbName:
    """A load balancer hostname (AWS ELB style), to be resolved to learn its addresses."""

    name: str
    sources: tuple[LbSource, ...]


@dataclasses.dataclass(frozen=True)
class LbIndex:
    """The load balancer addresses and hostnames of this cluster.

    Compare two indexes with ``==`` to tell whether verdicts need re-evaluating.
    """

    entries: tuple[LbAddress, ...] = ()
    names: tuple[LbName, ...] = ()
    _by_address: Mapping[str, LbAddress] = dataclasses.field(
        default_factory=dict, compare=False, repr=False)
    _by_name: Mapping[str, LbName] = dataclasses.field(
        default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_address", {e.address: e for e in self.entries})
        object.__setattr__(self, "_by_name", {n.name: n for n in self.names})

    def __bool__(self) -> bool:
        return bool(self.entries or self.names)

    @property
    def addresses(self) -> tuple[str, ...]:
        return tuple(e.address for e in self.entries)

    @property
    def hostnames(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.names)

    def lookup(self, address: str) -> LbAddress | None:
        """The load balancer entry for an IP address (any spelling), None when not ours."""
        canon = canonical_ip(address)
        return None if canon is None else self._by_address.get(canon)

    def lookup_name(self, name: str) -> LbName | None:
        """The load balancer hostname entry for a DNS name, None when not one of ours."""
        canon = canonical_name(name)
        return None if canon is None else self._by_name.get(canon)

    def with_resolved(self, learned: Mapping[str, Iterable[str]]) -> LbIndex:
        """This index plus the addresses learned by resolving its hostnames.

        ``learned`` maps a hostname to its addresses; names not in the index are ignored
        (a stale cache entry must not make an address ours). An address reported directly
        keeps its entry; one learned from a hostname is attributed to that hostname's sources.
        """
        merged: dict[str, LbAddress] = {e.address: e for e in self.entries}
        for name in sorted(learned):
            entry = self._by_name.get(name)
            if entry is None:
                continue
            for raw in learned[name]:
                addr = canonical_ip(raw)
                if addr is None or addr in merged:
                    continue
                merged[addr] = LbAddress(addr, entry.sources, via=name)
        return LbIndex(_sorted_entries(merged.values()), self.names)


def _sorted_entries(entries: Iterable[LbAddress]) -> tuple[LbAddress, ...]:
    return tuple(sorted(entries, key=lambda e: _ip_sort_key(e.address)))


def _ip_sort_key(address: str) -> tuple[int, int]:
    addr = ipaddress.ip_address(address)
    return addr.version, int(addr)


def _meta(obj: Mapping[Any, Any]) -> tuple[str, str]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return "", ""
    ns, name = meta.get("namespace"), meta.get("name")
    return (ns if isinstance(ns, str) else ""), (name if isinstance(name, str) else "")


def _status_entries(obj: Mapping[Any, Any]) -> list[Mapping[Any, Any]]:
    status = obj.get("status")
    lb = status.get("loadBalancer") if isinstance(status, Mapping) else None
    entries = lb.get("ingress") if isinstance(lb, Mapping) else None
    if not isinstance(entries, list):
        return []
    return [e for e in entries if isinstance(e, Mapping)]


def lb_addresses(services: Iterable[object], ingresses: Iterable[object] = ()) -> LbIndex:
    """Every load balancer address and hostname that Services and Ingresses report."""
    by_address: dict[str, list[LbSource]] = {}
    by_name: dict[str, list[LbSource]] = {}

    def add(obj: Mapping[Any, Any], kind: Literal["Service", "Ingress"]) -> None:
        ns, name = _meta(obj)
        for entry in _status_entries(obj):
            mode = entry.get("ipMode") if kind == "Service" else None
            source = LbSource(kind, ns, name, mode if isinstance(mode, str) else "")
            addr = canonical_ip(entry.get("ip"))
            if addr is not None:
                by_address.setdefault(addr, []).append(source)
            host = canonical_name(entry.get("hostname"))
            if host is not None:
                # ipMode is defined for ip entries only; a hostname's addresses are reached
                # by whatever path DNS gives, so it never counts as Proxy.
                by_name.setdefault(host, []).append(dataclasses.replace(source, ip_mode=""))

    for svc in services:
        if not isinstance(svc, Mapping):
            continue
        spec = svc.get("spec")
        if isinstance(spec, Mapping) and spec.get("type") == "LoadBalancer":
            add(svc, "Service")
    for ing in ingresses:
        if isinstance(ing, Mapping):
            add(ing, "Ingress")
    entries = _sorted_entries(LbAddress(a, tuple(sorted(set(s)))) for a, s in by_address.items())
    names = tuple(LbName(n, tuple(sorted(set(s)))) for n, s in sorted(by_name.items()))
    return LbIndex(entries, names)
