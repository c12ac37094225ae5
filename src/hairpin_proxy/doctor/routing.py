"""The doctor's reading, for a person, of what the controller's plan decided. Pure.

The decision is not made here: ``doctor.cluster`` builds a ``Snapshot`` of what it listed
and calls ``plan.plan`` once, as the controller and ``render`` do; the claims, the targets
``Plan`` (fallbacks, conflicts with the oldest winning, PROXY expectations, slots) and the
refusals are read from that ``DesiredState``. What the doctor adds is only the reading: per
host, where it goes, how the data plane was found, who lost the host to whom and when a
settling slot's rules come, and notes on Gateway API objects that cannot be read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hairpin_proxy.claims import Claim, ObjectRef
from hairpin_proxy.doctor.facts import HostTarget, LostClaim, TargetVerdict
from hairpin_proxy.jsonobj import Obj
from hairpin_proxy.plan import DesiredState
from hairpin_proxy.policy import HostPolicy
from hairpin_proxy.sources.gateway.claims import claims_of_objects
from hairpin_proxy.targets.discovery import (
    DataPlane,
    dataplane_of,
    find_gateway_service,
    find_ingressclass_service,
)
from hairpin_proxy.targets.mapping import MapEntry
from hairpin_proxy.targets.model import DEFAULT_KEY, parse_key, split_service
from hairpin_proxy.targets.resolve import TargetFacts, Unresolved
from hairpin_proxy.targets.resolve import resolve as resolve_target
from hairpin_proxy.targets.slots import service_name
from hairpin_proxy.targets.table import clock, settles_at


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


# --------------------------------------------------------------------------- notes


@dataclass(frozen=True)
class GatewayObjects:
    """The Gateway API objects as listed (route items paired with their kind)."""
    classes: Sequence[Obj] = ()
    gateways: Sequence[Obj] = ()
    routes: Sequence[tuple[str, Obj]] = ()
    namespace_labels: Mapping[str, Mapping[str, str]] | None = None
    listener_sets: Sequence[Obj] = ()


def gateway_notes(objects: GatewayObjects, policy: HostPolicy,
                  wanted_classes: Sequence[str]) -> tuple[str, ...]:
    """What a person is told of the Gateway API objects: those that cannot be read or are
    not accepted, and the hosts refused. Reporting only: which claims exist is the plan's
    (these notes are told even when the Ingresses, and so the plan, are unknown)."""
    got = claims_of_objects(objects.classes, objects.gateways, objects.routes,
                            wanted_classes=wanted_classes, policy=policy,
                            namespace_labels=objects.namespace_labels or {},
                            listener_sets=objects.listener_sets)
    rejected = [f"{r.origin}: host {r.host} refused: {r.reason}" for r in got.rejections]
    return (*got.notes, *rejected)


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class ProxyServices:
    """Our own Services: the main one and the per-slot ones, as found in the cluster."""
    namespace: str
    main: str
    main_found: bool | None
    main_addresses: tuple[str, ...]
    # Service name -> ClusterIPs, for the Services in our namespace (None: not listed).
    by_name: Mapping[str, tuple[str, ...]] | None


def _plane(key: str, facts: TargetFacts, target_map: Mapping[str, MapEntry]
           ) -> DataPlane | None:
    """The data-plane Service of a target that is not redirected, for the report only (the
    plan keeps just the reason)."""
    entry = target_map.get(key)
    if entry is not None:
        ns, name = split_service(entry.service)
        for svc in facts.services:
            meta = _dict(svc.get("metadata"))
            if meta.get("namespace") == ns and meta.get("name") == name:
                return dataplane_of(svc, "--target map")
        return None
    parts = parse_key(key)
    if parts.kind == "gateway":
        gateway = facts.gateways.get(f"{parts.namespace}/{parts.name}") or {}
        return find_gateway_service(facts.services, parts.namespace, parts.name,
                                    _str(_dict(gateway.get("spec")).get("gatewayClassName")))
    if parts.kind == "ingressclass":
        ingress_class = facts.ingress_classes.get(parts.name)
        if ingress_class is not None:
            return find_ingressclass_service(facts.services, ingress_class)
    return None


def _origin_target(claims: Sequence[Claim], host: str, origin: ObjectRef) -> str:
    """The target the first of ``claims`` (those of ``host``) by ``origin`` asks for."""
    for c in claims:
        if c.host == host and c.origin == origin:
            return c.target
    return ""


def _claims_by_host(claims: Sequence[Claim]) -> dict[str, list[Claim]]:
    """``claims`` by host, each host's in their order: one pass, rather than one per host."""
    by_host: dict[str, list[Claim]] = {}
    for c in claims:
        by_host.setdefault(c.host, []).append(c)
    return by_host


@dataclass(frozen=True)
class Settling:
    """What says when a new slot's hosts get their rules: the table's ``published.json``
    (key -> unix seconds), the controller's --target-settle, and the time of the report."""
    published: Mapping[str, float]
    settle: float
    now: float

    def rules_at(self, key: str, in_table: bool) -> str:
        """When the hosts of ``key`` get their rules ("HH:MM:SS UTC"), if that is still to
        come and known (a slot not in the table yet is said so otherwise)."""
        if not in_table or key not in self.published:
            return ""
        at = settles_at(self.published, key, self.settle, self.now)
        return f"{clock(at)} UTC" if at > self.now else ""


def refused_by_limits(state: DesiredState) -> dict[str, str]:
    """host -> why it gets no rule though it is routed: the first refusal by a size limit of
    an object asking for it (such a refusal names the object's hosts). A host another
    object keeps is not refused."""
    kept = set(state.hosts)
    out: dict[str, str] = {}
    for rejection in state.refusals:
        for host in rejection.hosts:
            if host not in kept and host not in out:
                who = rejection.origin or f"Ingress {rejection.namespace}/{rejection.name}"
                out[host] = f"{who}: {rejection.reason}"
    return out


def host_targets(state: DesiredState, facts: TargetFacts,
                 target_map: Mapping[str, MapEntry], table: Mapping[str, int] | None,
                 ours: ProxyServices, *, settling: Settling | None = None
                 ) -> dict[str, HostTarget]:
    """Every claimed host's target as the plan of ``state`` decided it (``facts``: the
    snapshot's ``target_facts``, to name the data plane of a target left alone). ``table``
    is the published targets table (key -> slot; None when unknown): whether a slot is
    published yet."""
    decided, claims = state.plan, state.claims
    losers: dict[str, list[LostClaim]] = {}
    for lost, won in decided.losers:
        lost_key = decided.fallbacks.get(lost.target, lost.target)
        won_key = decided.fallbacks.get(won.target, won.target)
        losers.setdefault(lost.host, []).append(
            LostClaim(str(lost.origin), lost_key, str(won.origin), won_key,
                      lost.target if lost.target != lost_key else ""))
    out: dict[str, HostTarget] = {}
    by_host = _claims_by_host(claims)
    refused = refused_by_limits(state)
    for host, key in decided.routes.items():
        origins = decided.origins.get(host, ())
        lost_here = tuple(losers.get(host, ()))
        if key == DEFAULT_KEY:
            asked = _origin_target(by_host.get(host, ()), host, origins[0]) if origins else ""
            message = ""
            shared = decided.shared.get(asked)
            if shared is not None:
                message = (f"{asked}'s data plane {shared.service} is the proxy's "
                           "--target-server: the main Service serves it, no slot")
            elif asked and asked != DEFAULT_KEY:
                why = resolve_target(asked, facts, target_map)
                reason = why.message if isinstance(why, Unresolved) else "no data plane"
                message = f"{asked} falls back to the proxy's default target: {reason}"
            else:
                asked = ""
            out[host] = HostTarget(
                key=key, verdict="redirected", message=message, asked=asked, slot=0,
                proxy_service=f"{ours.namespace}/{ours.main}",
                proxy_service_found=ours.main_found, proxy_addresses=ours.main_addresses,
                origins=tuple(map(str, origins)), losers=lost_here,
                refused=refused.get(host, ""))
            continue
        target = decided.targets[key]
        slot = decided.slots[key]
        name = service_name(slot)
        ips = None if ours.by_name is None else ours.by_name.get(name)
        out[host] = HostTarget(
            key=key, verdict="redirected", service=target.service, found_by=target.found_by,
            proxy=target.proxy, proxy_source=target.proxy_source, slot=slot,
            proxy_service=f"{ours.namespace}/{name}",
            proxy_service_found=None if ours.by_name is None else ips is not None,
            proxy_addresses=ips or (),
            published=None if table is None else table.get(key) == slot,
            rules_at="" if settling is None else settling.rules_at(
                key, table is not None and table.get(key) == slot),
            origins=tuple(map(str, origins)), losers=lost_here, refused=refused.get(host, ""))
    for host, u in decided.excluded.items():
        verdict: TargetVerdict = u.problem
        found = _plane(u.key, facts, target_map) if verdict != "target-not-found" else None
        out[host] = HostTarget(
            key=u.key, verdict=verdict, message=u.message,
            service=found.service if found else "", found_by=found.found_by if found else "",
            proxy={"target-no-proxy": "none", "target-proxy-unknown": "unknown"}.get(
                verdict, ""),
            losers=tuple(losers.get(host, ())))
    return out
