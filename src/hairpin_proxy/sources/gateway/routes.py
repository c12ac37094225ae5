"""Which host names a route gets on which Gateway. Pure.

A route's names are never taken from the route alone: the Gateway API defines them as the
*intersection* of each listener's hostname with the route's hostnames, for the listeners the
route actually attaches to. We only trust attachments the Gateway's own controller confirmed:

1. the parentRef points at a Gateway (group ``gateway.networking.k8s.io``, kind ``Gateway``)
   that exists, or at a ListenerSet attached to one (``listenersets``), whose GatewayClass
   exists and is run by a controller we serve;
2. the route's ``status.parents`` has an entry for exactly that parentRef, written by that
   class's controller, with condition ``Accepted`` ``True``;
3. then the listeners it attaches to are recomputed: the ones ``sectionName`` and ``port`` pick
   (all when neither is set), whose protocol carries the route's kind (HTTPRoute and GRPCRoute:
   HTTP or HTTPS; TLSRoute: TLS), whose ``allowedRoutes`` admit the route's namespace and kind,
   and whose hostname intersects the route's.

The status alone would say the route is attached *somewhere* on the Gateway, not with which
names; recomputing also keeps a route from claiming names through a listener its Gateway did not
let it use. Names that cannot be derived (no listener hostname and no route hostnames: every
name would do) are left out with a note.

An ``Accepted`` condition older than the route's generation still counts, with a note: the
controller has not looked at the latest edit yet, and dropping the route's names until it does
would make its DNS flap on every edit, while the recomputation above still bounds the names.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from hairpin_proxy.apis import GATEWAY_GROUP
from hairpin_proxy.sources.gateway import hostnames
from hairpin_proxy.sources.gateway.listenersets import KIND as LISTENER_SET
from hairpin_proxy.sources.gateway.listenersets import ListenerSet, attachment
from hairpin_proxy.sources.gateway.model import (
    ROUTE_RESOURCES,
    Gateway,
    GatewayClass,
    Listener,
    ParentRef,
    Route,
    RouteKind,
)

# Which listener protocols carry which route kinds.
PROTOCOLS: Mapping[str, frozenset[str]] = {
    ROUTE_RESOURCES["httproutes"]: frozenset({"HTTP", "HTTPS"}),
    ROUTE_RESOURCES["grpcroutes"]: frozenset({"HTTP", "HTTPS"}),
    ROUTE_RESOURCES["tlsroutes"]: frozenset({"TLS"}),
}

GatewayIndex = Mapping[tuple[str, str], Gateway]
ListenerSetIndex = Mapping[tuple[str, str], ListenerSet]


def index_gateways(gateways: Collection[Gateway]) -> dict[tuple[str, str], Gateway]:
    """Gateways by (namespace, name), as :func:`route_hosts` looks them up."""
    return {(g.meta.namespace, g.meta.name): g for g in gateways}


def refusal(route: Route, gateway: Gateway | ListenerSet, listener: Listener,
            namespace_labels: Mapping[str, Mapping[str, str]]) -> str | None:
    """Why ``listener`` (of ``gateway``, or of a ListenerSet: "Same" is its namespace) does
    not take ``route`` (hostnames aside), or None when it does."""
    allowed = PROTOCOLS.get(route.kind, frozenset())
    if listener.protocol not in allowed:
        return f"protocol {listener.protocol} does not carry {route.kind}"
    if listener.kinds and RouteKind(route.kind, GATEWAY_GROUP) not in listener.kinds:
        return f"allowedRoutes.kinds does not list {route.kind}"
    ns = route.meta.namespace
    origin = listener.namespaces_from
    if origin == "Same":
        if ns != gateway.meta.namespace:
            return f"it only admits routes of namespace {gateway.meta.namespace}"
    elif origin == "Selector":
        if listener.selector is None:
            return "its namespace selector is missing or malformed"
        labels = namespace_labels.get(ns)
        if labels is None:
            return f"the labels of namespace {ns} are not known"
        if not listener.selector.matches(labels):
            return f"its namespace selector does not select namespace {ns}"
    elif origin != "All":
        return "it admits routes of no namespace"
    return None


def _picked(ref: ParentRef, listener: Listener) -> bool:
    return (ref.section_name is None or ref.section_name == listener.name) \
        and (ref.port is None or ref.port == listener.port)


def _acceptance(route: Route, ref: ParentRef, controller: str) -> str | None:
    """Why the controller has not accepted ``route`` for ``ref``, or None if it has."""
    entries = [p for p in route.parents
               if p.parent_ref == ref and p.controller_name == controller]
    if not entries:
        return f"{controller} has not reported on it yet"
    accepted = entries[0].condition("Accepted")
    if accepted is None:
        return f"{controller} reports no Accepted condition"
    if accepted.status != "True":
        why = f" ({accepted.reason})" if accepted.reason else ""
        return f"{controller} reports Accepted={accepted.status}{why}"
    return None


def _parent(ref: ParentRef, gateways: GatewayIndex, listener_sets: ListenerSetIndex,
            namespace_labels: Mapping[str, Mapping[str, str]], *, notes: list[str],
            where: str) -> tuple[Gateway, Gateway | ListenerSet, tuple[Listener, ...]] | str:
    """(the Gateway whose data plane serves ``ref``, the object holding its listeners, the
    listeners) for a parentRef, or why it is not followed."""
    if (ref.group, ref.kind) == (GATEWAY_GROUP, "Gateway"):
        gateway = gateways.get((ref.namespace, ref.name))
        return "no such Gateway" if gateway is None else (gateway, gateway, gateway.listeners)
    if (ref.group, ref.kind) != (GATEWAY_GROUP, LISTENER_SET):
        return "only Gateways and ListenerSets are followed; ignored"
    ls = listener_sets.get((ref.namespace, ref.name))
    if ls is None:
        return "no such ListenerSet"
    got = attachment(ls, gateways, namespace_labels)
    if isinstance(got, str):
        return f"not attached: {got}"
    gateway, listeners, ls_notes = got
    notes.extend(f"{where}: {note}" for note in ls_notes)
    return gateway, ls, listeners


def route_hosts(route: Route, gateways: GatewayIndex, classes: Mapping[str, GatewayClass],
                served_controllers: Collection[str],
                namespace_labels: Mapping[str, Mapping[str, str]], *,
                listener_sets: ListenerSetIndex | None = None,
                ) -> tuple[dict[str, tuple[str, ...]], tuple[str, ...]]:
    """The names ``route`` gets, by target key ``gateway/NS/NAME`` (sorted, wildcards kept;
    gateways that give it none are absent), and notes in words on what was left out and why.
    A route on a ListenerSet (``listener_sets``, by namespace and name) gets its names for
    the ListenerSet's Gateway."""
    notes = [f"{route}: {note}" for note in route.notes]
    found: dict[str, set[str]] = {}
    for ref in route.parent_refs:
        where = f"{route}: parent {ref}"
        parent = _parent(ref, gateways, listener_sets or {}, namespace_labels, notes=notes,
                         where=where)
        if isinstance(parent, str):
            notes.append(f"{where}: {parent}")
            continue
        gateway, holder, listeners = parent
        cls = classes.get(gateway.class_name)
        if cls is None:
            notes.append(f"{where}: its GatewayClass {gateway.class_name} does not exist")
            continue
        if cls.controller_name not in served_controllers:
            notes.append(f"{where}: its GatewayClass {cls.name} is run by "
                         f"{cls.controller_name}, which is not served here")
            continue
        why = _acceptance(route, ref, cls.controller_name)
        if why is not None:
            notes.append(f"{where}: not accepted: {why}")
            continue
        entry = next(p for p in route.parents
                     if p.parent_ref == ref and p.controller_name == cls.controller_name)
        cond = entry.condition("Accepted")
        if cond is not None and cond.observed_generation is not None \
                and cond.observed_generation < route.meta.generation:
            notes.append(f"{where}: accepted at generation {cond.observed_generation}, the "
                         f"route is at {route.meta.generation}; using its current hostnames")
        names, attach_notes = _attach(route, ref, holder, listeners,
                                      namespace_labels=namespace_labels, where=where)
        notes += attach_notes
        if names:
            found.setdefault(gateway.key, set()).update(names)
    return {key: tuple(sorted(names)) for key, names in sorted(found.items())}, tuple(notes)


def _attach(route: Route, ref: ParentRef, holder: Gateway | ListenerSet,
            listeners: tuple[Listener, ...], *,
            namespace_labels: Mapping[str, Mapping[str, str]], where: str,
            ) -> tuple[set[str], list[str]]:
    """The names the listeners ``ref`` picks give ``route``, and notes."""
    names: set[str] = set()
    notes: list[str] = []
    refused: list[str] = []
    attached = 0
    for listener in listeners:
        if not _picked(ref, listener):
            continue
        reason = refusal(route, holder, listener, namespace_labels)
        got = () if reason is not None \
            else hostnames.intersect_all(listener.hostname, route.hostnames)
        if reason is None and not got:
            reason = f"hostname {listener.hostname} matches none of the route's hostnames"
        if reason is not None:
            refused.append(f"listener {listener.name}: {reason}")
            continue
        attached += 1
        if got == (hostnames.ANY,):
            notes.append(f"{where}: listener {listener.name} has no hostname and the route "
                         "no hostnames, so every name matches and none can be derived")
            continue
        names.update(got)
    if not attached:
        detail = "; ".join(refused) if refused else "no listener matches its sectionName/port"
        notes.append(f"{where}: accepted, but no listener takes it here: {detail}")
    return names, notes
