"""Gateway API routes as host claims: the route's names, for its Gateway's target, filtered by
the same host policy as Ingress hosts. Pure."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from hairpin_proxy.claims import Claim, ObjectRef
from hairpin_proxy.gateway.model import Gateway, GatewayClass, Route
from hairpin_proxy.gateway.routes import index_gateways, route_hosts
from hairpin_proxy.policy import HostPolicy, check_host


@dataclass(frozen=True)
class RouteRejection:
    origin: ObjectRef
    host: str
    reason: str


@dataclass(frozen=True)
class RouteClaims:
    claims: tuple[Claim, ...] = ()
    rejections: tuple[RouteRejection, ...] = ()
    # What was left out and why, in words (for logs: not every note is a problem).
    notes: tuple[str, ...] = ()


def served_classes(classes: Iterable[GatewayClass], wanted: Collection[str]
                   ) -> dict[str, GatewayClass]:
    """The GatewayClasses we serve by name: those named by --gateway-class, or all."""
    return {c.name: c for c in classes if not wanted or c.name in wanted}


def route_claims(routes: Iterable[Route], gateways: Iterable[Gateway],
                 classes: Mapping[str, GatewayClass], policy: HostPolicy,
                 namespace_labels: Mapping[str, Mapping[str, str]]) -> RouteClaims:
    """Claims of every route on the Gateways of ``classes`` (the served ones)."""
    index = index_gateways([g for g in gateways if g.class_name in classes])
    controllers = {c.controller_name for c in classes.values()}
    claims: list[Claim] = []
    rejections: list[RouteRejection] = []
    notes: list[str] = []
    for route in routes:
        meta = route.meta
        if (policy.include_namespaces and meta.namespace not in policy.include_namespaces) \
                or meta.namespace in policy.exclude_namespaces:
            continue
        by_gateway, route_notes = route_hosts(route, index, classes, controllers,
                                              namespace_labels)
        notes += route_notes
        origin = ObjectRef(route.kind, meta.namespace, meta.name, meta.uid)
        for target, hosts in by_gateway.items():
            for host in hosts:
                name, reason = check_host(host, policy)
                if name is None:
                    rejections.append(RouteRejection(origin, host, reason or "refused"))
                    continue
                claims.append(Claim(name, target, origin, meta.created))
    return RouteClaims(tuple(claims), tuple(rejections), tuple(notes))
