"""Gateway API routes as host claims: the route's names, for its Gateway's target, filtered by
the same host policy as Ingress hosts. Pure.

A wildcard name is claimed as ``**.domain``: a Gateway serves every depth under its
``*.domain`` (one or more labels), so the DNS rule must redirect them all, where an Ingress's
``*.domain`` stands for one label only (``wildcards``)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from hairpin_proxy.apis import GATEWAY_GROUP
from hairpin_proxy.claims import Claim, ObjectRef
from hairpin_proxy.policy import HostPolicy, check_host
from hairpin_proxy.sources.gateway.listenersets import ListenerSet, parse_listener_set
from hairpin_proxy.sources.gateway.model import (
    Gateway,
    GatewayClass,
    Malformed,
    Route,
    parse_gateway,
    parse_gateway_class,
    parse_route,
)
from hairpin_proxy.sources.gateway.routes import index_gateways, route_hosts
from hairpin_proxy.wildcards import any_depth

T = TypeVar("T")


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


def _parse_all(objs: Iterable[Any], parse: Callable[[Any], T | Malformed],
               notes: list[str]) -> list[T]:
    """The objects ``parse`` reads; one it cannot is named in ``notes``."""
    out: list[T] = []
    for obj in objs:
        parsed = parse(obj)
        if isinstance(parsed, Malformed):
            notes.append(str(parsed))
        else:
            out.append(parsed)
    return out


def claims_of_objects(classes: Iterable[Any], gateways: Iterable[Any],
                      routes: Iterable[tuple[str, Any]], *, wanted_classes: Collection[str],
                      policy: HostPolicy,
                      namespace_labels: Mapping[str, Mapping[str, str]],
                      listener_sets: Iterable[Any] = ()) -> RouteClaims:
    """``route_claims`` over the objects as the API lists them (routes paired with their
    kind), for the served classes among ``classes``: each object is parsed first, and one that
    cannot be read is named in the notes, beside the Gateways' own notes, while the rest go on.
    """
    return route_reader(classes, gateways, wanted_classes=wanted_classes, policy=policy,
                        namespace_labels=namespace_labels, listener_sets=listener_sets)(routes)


def route_reader(classes: Iterable[Any], gateways: Iterable[Any], *,
                 wanted_classes: Collection[str], policy: HostPolicy,
                 namespace_labels: Mapping[str, Mapping[str, str]],
                 listener_sets: Iterable[Any] = ()
                 ) -> Callable[[Iterable[tuple[str, Any]]], RouteClaims]:
    """``claims_of_objects`` with the classes, Gateways and ListenerSets parsed and indexed
    once, for routes read a few at a time (one by one, ahead of a pass)."""
    notes: list[str] = []
    parsed_classes = _parse_all(classes, parse_gateway_class, notes)
    parsed_gateways: list[Gateway] = []
    for gateway in _parse_all(gateways, parse_gateway, notes):
        parsed_gateways.append(gateway)
        notes.extend(f"Gateway {gateway.meta.namespace}/{gateway.meta.name}: {note}"
                     for note in gateway.notes)
    set_notes: list[str] = []
    parsed_sets = _parse_all(listener_sets, parse_listener_set, set_notes)
    parents = _Parents.of(parsed_gateways, served_classes(parsed_classes, wanted_classes),
                          parsed_sets)

    def read(routes: Iterable[tuple[str, Any]]) -> RouteClaims:
        mine: list[str] = []
        parsed_routes = _parse_all(routes, lambda pair: parse_route(pair[1], pair[0]), mine)
        got = _claims(parsed_routes, parents, policy, namespace_labels)
        return RouteClaims(got.claims, got.rejections,
                           (*notes, *mine, *set_notes, *got.notes))
    return read


@dataclass(frozen=True)
class _Parents:
    """What routes attach to: the Gateways of the served classes by (namespace, name), the
    ListenerSets likewise, the served classes and their controllers."""

    gateways: dict[tuple[str, str], Gateway]
    listener_sets: dict[tuple[str, str], ListenerSet]
    classes: Mapping[str, GatewayClass]
    controllers: frozenset[str]

    @classmethod
    def of(cls, gateways: Iterable[Gateway], classes: Mapping[str, GatewayClass],
           listener_sets: Iterable[ListenerSet]) -> _Parents:
        return cls(index_gateways([g for g in gateways if g.class_name in classes]),
                   {(ls.meta.namespace, ls.meta.name): ls for ls in listener_sets},
                   classes, frozenset(c.controller_name for c in classes.values()))


def route_claims(routes: Iterable[Route], gateways: Iterable[Gateway],
                 classes: Mapping[str, GatewayClass], policy: HostPolicy,
                 namespace_labels: Mapping[str, Mapping[str, str]], *,
                 listener_sets: Iterable[ListenerSet] = ()) -> RouteClaims:
    """Claims of every route on the Gateways of ``classes`` (the served ones), directly or
    through the ``listener_sets`` attached to them."""
    return _claims(routes, _Parents.of(gateways, classes, listener_sets), policy,
                   namespace_labels)


def _claims(routes: Iterable[Route], parents: _Parents, policy: HostPolicy,
            namespace_labels: Mapping[str, Mapping[str, str]]) -> RouteClaims:
    claims: list[Claim] = []
    rejections: list[RouteRejection] = []
    notes: list[str] = []
    for route in routes:
        meta = route.meta
        if (policy.include_namespaces and meta.namespace not in policy.include_namespaces) \
                or meta.namespace in policy.exclude_namespaces:
            continue
        by_gateway, route_notes = route_hosts(route, parents.gateways, parents.classes,
                                              parents.controllers, namespace_labels,
                                              listener_sets=parents.listener_sets)
        notes += route_notes
        origin = ObjectRef(route.kind, meta.namespace, meta.name, meta.uid, GATEWAY_GROUP)
        for target, hosts in by_gateway.items():
            for host in hosts:
                name, reason = check_host(host, policy)
                if name is None:
                    rejections.append(RouteRejection(origin, host, reason or "refused"))
                    continue
                claims.append(Claim(any_depth(name), target, origin, meta.created))
    return RouteClaims(tuple(claims), tuple(rejections), tuple(notes))
