"""The few fields of Gateway API objects the controller reads, as small frozen values. Pure.

Objects come from the API server, but whoever may create a route in any namespace writes these
fields, and custom resources are only as well-formed as their installed CRD version makes them.
So nothing here raises on malformed input: a parse returns either the value or
:class:`Malformed` with the reason in words, and a malformed *part* is dropped with a note,
choosing the direction that can only ever name FEWER hosts:

- a malformed listener, parentRef or status entry is left out (less attaches);
- a route with any malformed hostname is refused as a whole, because dropping that one name
  could leave the list empty, and an empty list means "every name the listener has";
- a malformed namespace selector selects no namespace.

Defaults are the API's own (parentRef group ``gateway.networking.k8s.io``, kind ``Gateway``,
namespace the route's; ``allowedRoutes.namespaces.from`` ``Same``), applied here so that two
spellings of the same reference compare equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from hairpin_proxy.apis import GATEWAY_GROUP
from hairpin_proxy.policy import show
from hairpin_proxy.sources.gateway import hostnames

# The route resources (plural → kind) whose hostnames are claimed.
ROUTE_RESOURCES: Final = {"httproutes": "HTTPRoute", "grpcroutes": "GRPCRoute",
                          "tlsroutes": "TLSRoute"}
ROUTE_KINDS: Final = tuple(ROUTE_RESOURCES.values())
NAMESPACES_FROM: Final = ("All", "Same", "Selector", "None")
SELECTOR_OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist")
# Bounds far above what the CRDs admit (64 listeners, 16 or 1024 hostnames, 32 parentRefs and
# status parents): a hostile object cannot make the controller do unbounded work per event.
MAX_LISTENERS: Final = 64
MAX_HOSTNAMES: Final = 1024
MAX_PARENTS: Final = 64
MAX_CONDITIONS: Final = 32
MAX_SELECTOR_TERMS: Final = 64
MAX_KINDS: Final = 64


@dataclass(frozen=True, slots=True)
class Meta:
    namespace: str
    name: str
    uid: str = ""
    # RFC 3339 as the API server writes it; "" when absent.
    created: str = ""
    generation: int = 0


@dataclass(frozen=True, slots=True)
class Malformed:
    """An object that cannot be used at all, and why (in words, safe to log)."""
    kind: str
    namespace: str
    name: str
    reason: str

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name or "?"
        return f"{self.kind} {where}: {self.reason}"


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str  # one of SELECTOR_OPERATORS
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LabelSelector:
    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Kubernetes label selector semantics: every label and every requirement must hold;
        the empty selector selects everything."""
        if any(labels.get(k) != v for k, v in self.match_labels):
            return False
        for req in self.match_expressions:
            present = req.key in labels
            if req.operator == "In":
                ok = present and labels[req.key] in req.values
            elif req.operator == "NotIn":
                ok = not present or labels[req.key] not in req.values
            elif req.operator == "Exists":
                ok = present
            else:
                ok = not present
            if not ok:
                return False
        return True


@dataclass(frozen=True, slots=True)
class RouteKind:
    kind: str
    group: str = GATEWAY_GROUP


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    port: int
    protocol: str
    # Normalized; None when the listener names no host (it then accepts every name).
    hostname: str | None = None
    namespaces_from: str = "Same"  # one of NAMESPACES_FROM
    # Only read when namespaces_from is "Selector"; None there means "selects nothing"
    # (missing or malformed), which the note on the Gateway explains.
    selector: LabelSelector | None = None
    kinds: tuple[RouteKind, ...] = ()


@dataclass(frozen=True, slots=True)
class Gateway:
    meta: Meta
    class_name: str
    listeners: tuple[Listener, ...]
    # Parts dropped while parsing, in words.
    notes: tuple[str, ...] = field(default=(), compare=False)
    # spec.allowedListeners.namespaces: which ListenerSets may attach ("None": none).
    listeners_from: str = "None"
    listeners_selector: LabelSelector | None = None

    @property
    def key(self) -> str:
        return gateway_key(self.meta.namespace, self.meta.name)


@dataclass(frozen=True, slots=True)
class GatewayClass:
    name: str
    controller_name: str
    uid: str = ""


@dataclass(frozen=True, slots=True)
class ParentRef:
    """A reference with the API's defaults applied (namespace: the route's)."""
    name: str
    namespace: str
    group: str = GATEWAY_GROUP
    kind: str = "Gateway"
    section_name: str | None = None
    port: int | None = None

    def __str__(self) -> str:
        text = f"{self.kind} {self.namespace}/{self.name}"
        if self.section_name is not None:
            text += f" section {self.section_name}"
        if self.port is not None:
            text += f" port {self.port}"
        return text


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str
    observed_generation: int | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ParentStatus:
    parent_ref: ParentRef
    controller_name: str
    conditions: tuple[Condition, ...] = ()

    def condition(self, kind: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == kind), None)


@dataclass(frozen=True, slots=True)
class Route:
    kind: str  # one of ROUTE_KINDS
    meta: Meta
    parent_refs: tuple[ParentRef, ...]
    # Normalized, valid, in the route's order without repeats; empty: "every name".
    hostnames: tuple[str, ...]
    parents: tuple[ParentStatus, ...] = ()
    notes: tuple[str, ...] = field(default=(), compare=False)

    def __str__(self) -> str:
        return f"{self.kind} {self.meta.namespace}/{self.meta.name}"


def gateway_key(namespace: str, name: str) -> str:
    """The target key of a Gateway's data plane."""
    return f"gateway/{namespace}/{name}"


# --- parsing -------------------------------------------------------------------------------


class _Bad(Exception):
    """Internal only: unwinds a parse to the one place that turns it into Malformed."""


def _get(obj: dict[str, Any], key: str, default: Any) -> Any:
    """``obj[key]``, or the API's default when the field is absent or null (both mean unset)."""
    value = obj.get(key)
    return default if value is None else value


def _str(value: Any, what: str, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value):
        raise _Bad(f"{what} must be a non-empty string, got {show(value)}")
    return value


def _opt_str(value: Any, what: str) -> str | None:
    return None if value is None else _str(value, what, empty=True)


def _int(value: Any, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _Bad(f"{what} must be a whole number from {low} to {high}, got {show(value)}")
    return value


def _dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Bad(f"{what} must be an object, got {show(value)}")
    return value


def _list(value: Any, what: str, limit: int) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Bad(f"{what} must be a list, got {show(value)}")
    if len(value) > limit:
        raise _Bad(f"{what} has {len(value)} entries, more than {limit}")
    return value


def _meta(obj: Any, namespaced: bool) -> Meta:
    meta = _dict(obj.get("metadata"), "metadata")
    name = _str(meta.get("name"), "metadata.name")
    namespace = _str(meta.get("namespace"), "metadata.namespace") if namespaced else ""
    uid = meta.get("uid", "")
    created = meta.get("creationTimestamp", "")
    generation = meta.get("generation", 0)
    return Meta(namespace=namespace, name=name,
                uid=uid if isinstance(uid, str) else "",
                created=created if isinstance(created, str) else "",
                generation=generation if isinstance(generation, int)
                and not isinstance(generation, bool) and generation >= 0 else 0)


def _where(obj: Any) -> tuple[str, str]:
    """Namespace and name for a Malformed, as far as they can be read."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return "", ""
    ns, name = meta.get("namespace"), meta.get("name")
    return (show(ns) if isinstance(ns, str) else "", show(name) if isinstance(name, str) else "")


def _hostname(value: Any, what: str) -> str:
    why = hostnames.problem(value)
    if why is not None:
        raise _Bad(f"{what} {show(value)} {why}")
    assert isinstance(value, str)
    return hostnames.normalize(value)


def _selector(value: Any) -> LabelSelector:
    sel = _dict(value, "selector")
    labels = _dict(sel.get("matchLabels") or {}, "selector.matchLabels")
    if len(labels) > MAX_SELECTOR_TERMS:
        raise _Bad(f"selector.matchLabels has more than {MAX_SELECTOR_TERMS} entries")
    pairs = tuple(sorted((_str(k, "a matchLabels key"), _str(v, f"matchLabels[{show(k)}]",
                                                             empty=True))
                         for k, v in labels.items()))
    reqs: list[Requirement] = []
    for i, raw in enumerate(_list(sel.get("matchExpressions"), "selector.matchExpressions",
                                  MAX_SELECTOR_TERMS)):
        expr = _dict(raw, f"matchExpressions[{i}]")
        key = _str(expr.get("key"), f"matchExpressions[{i}].key")
        op = expr.get("operator")
        if op not in SELECTOR_OPERATORS:
            raise _Bad(f"matchExpressions[{i}].operator must be one of "
                       f"{', '.join(SELECTOR_OPERATORS)}, got {show(op)}")
        values = tuple(_str(v, f"matchExpressions[{i}].values[]", empty=True)
                       for v in _list(expr.get("values"), f"matchExpressions[{i}].values",
                                      MAX_SELECTOR_TERMS))
        # Kubernetes refuses In/NotIn without values and Exists/DoesNotExist with values;
        # guessing what such a selector meant could select namespaces nobody chose.
        if (op in ("In", "NotIn")) != bool(values):
            raise _Bad(f"matchExpressions[{i}]: operator {op} "
                       + ("needs values" if op in ("In", "NotIn") else "takes no values"))
        reqs.append(Requirement(key=key, operator=op, values=tuple(sorted(set(values)))))
    return LabelSelector(match_labels=pairs, match_expressions=tuple(reqs))


def _listener(raw: Any, i: int, notes: list[str]) -> Listener:
    obj = _dict(raw, f"listeners[{i}]")
    name = _str(obj.get("name"), f"listeners[{i}].name")
    port = _int(obj.get("port"), f"listener {name}: port", 1, 65535)
    protocol = _str(obj.get("protocol"), f"listener {name}: protocol")
    host = obj.get("hostname")
    hostname = None if host is None else _hostname(host, f"listener {name}: hostname")
    allowed = _dict(obj.get("allowedRoutes") or {}, f"listener {name}: allowedRoutes")
    spaces = _dict(allowed.get("namespaces") or {}, f"listener {name}: allowedRoutes.namespaces")
    origin = _get(spaces, "from", "Same")
    if origin not in NAMESPACES_FROM:
        raise _Bad(f"listener {name}: allowedRoutes.namespaces.from must be one of "
                   f"{', '.join(NAMESPACES_FROM)}, got {show(origin)}")
    selector: LabelSelector | None = None
    if origin == "Selector":
        if spaces.get("selector") is None:
            notes.append(f"listener {name}: namespaces from Selector without a selector "
                         "admits no namespace")
        else:
            try:
                selector = _selector(spaces["selector"])
            except _Bad as bad:
                notes.append(f"listener {name}: {bad}; it admits no namespace")
    kinds: list[RouteKind] = []
    for j, k in enumerate(_list(allowed.get("kinds"), f"listener {name}: allowedRoutes.kinds",
                                MAX_KINDS)):
        entry = _dict(k, f"listener {name}: allowedRoutes.kinds[{j}]")
        group = _get(entry, "group", GATEWAY_GROUP)
        kinds.append(RouteKind(kind=_str(entry.get("kind"), f"listener {name}: kinds[{j}].kind"),
                               group=_str(group, f"listener {name}: kinds[{j}].group",
                                          empty=True)))
    return Listener(name=name, port=port, protocol=protocol, hostname=hostname,
                    namespaces_from=origin, selector=selector, kinds=tuple(kinds))


def _allowed_listeners(raw: Any, notes: list[str]) -> tuple[str, LabelSelector | None]:
    """``spec.allowedListeners.namespaces`` (from, selector); anything unreadable allows
    no ListenerSet."""
    try:
        spaces = _dict(_dict(raw or {}, "spec.allowedListeners").get("namespaces") or {},
                       "spec.allowedListeners.namespaces")
        origin = _get(spaces, "from", "None")
        if origin not in NAMESPACES_FROM:
            raise _Bad(f"spec.allowedListeners.namespaces.from must be one of "
                       f"{', '.join(NAMESPACES_FROM)}, got {show(origin)}")
        if origin != "Selector":
            return origin, None
        return origin, _selector(spaces.get("selector"))
    except _Bad as bad:
        notes.append(f"{bad}; no ListenerSet may attach")
        return "None", None


def listeners_of(spec: dict[str, Any], notes: list[str]) -> tuple[Listener, ...]:
    """``spec.listeners`` of a Gateway or ListenerSet; a listener that cannot be read is
    dropped with a note."""
    listeners: list[Listener] = []
    for i, raw in enumerate(_list(spec.get("listeners"), "spec.listeners", MAX_LISTENERS)):
        try:
            listeners.append(_listener(raw, i, notes))
        except _Bad as bad:
            notes.append(f"{bad}; that listener is ignored")
    return tuple(listeners)


def parse_gateway(obj: Any) -> Gateway | Malformed:
    """A Gateway; listeners that cannot be read are dropped with a note."""
    try:
        _dict(obj, "the object")
        meta = _meta(obj, namespaced=True)
        spec = _dict(obj.get("spec"), "spec")
        class_name = _str(spec.get("gatewayClassName"), "spec.gatewayClassName")
        notes: list[str] = []
        listeners = listeners_of(spec, notes)
        origin, selector = _allowed_listeners(spec.get("allowedListeners"), notes)
        return Gateway(meta=meta, class_name=class_name, listeners=listeners,
                       notes=tuple(notes), listeners_from=origin, listeners_selector=selector)
    except _Bad as bad:
        return Malformed("Gateway", *_where(obj), str(bad))


def parse_gateway_class(obj: Any) -> GatewayClass | Malformed:
    try:
        _dict(obj, "the object")
        meta = _meta(obj, namespaced=False)
        spec = _dict(obj.get("spec"), "spec")
        return GatewayClass(name=meta.name, uid=meta.uid,
                            controller_name=_str(spec.get("controllerName"),
                                                 "spec.controllerName"))
    except _Bad as bad:
        return Malformed("GatewayClass", *_where(obj), str(bad))


def _parent_ref(raw: Any, what: str, namespace: str) -> ParentRef:
    ref = _dict(raw, what)
    port = ref.get("port")
    return ParentRef(
        name=_str(ref.get("name"), f"{what}.name"),
        namespace=_str(_get(ref, "namespace", namespace), f"{what}.namespace"),
        group=_str(_get(ref, "group", GATEWAY_GROUP), f"{what}.group", empty=True),
        kind=_str(_get(ref, "kind", "Gateway"), f"{what}.kind"),
        section_name=_opt_str(ref.get("sectionName"), f"{what}.sectionName") or None,
        port=None if port is None else _int(port, f"{what}.port", 1, 65535))


def _condition(raw: Any, what: str) -> Condition:
    cond = _dict(raw, what)
    gen = cond.get("observedGeneration")
    reason = cond.get("reason", "")
    return Condition(reason=reason if isinstance(reason, str) else "",
                     type=_str(cond.get("type"), f"{what}.type"),
                     status=_str(cond.get("status"), f"{what}.status"),
                     observed_generation=None if gen is None
                     else _int(gen, f"{what}.observedGeneration", 0, 2**63 - 1))


def _parent_status(raw: Any, i: int, namespace: str) -> ParentStatus:
    what = f"status.parents[{i}]"
    entry = _dict(raw, what)
    conditions = tuple(_condition(c, f"{what}.conditions[{j}]") for j, c in
                       enumerate(_list(entry.get("conditions"), f"{what}.conditions",
                                       MAX_CONDITIONS)))
    return ParentStatus(parent_ref=_parent_ref(entry.get("parentRef"), f"{what}.parentRef",
                                               namespace),
                        controller_name=_str(entry.get("controllerName"),
                                             f"{what}.controllerName"),
                        conditions=conditions)


def parse_route(obj: Any, kind: str | None = None) -> Route | Malformed:
    """An HTTPRoute, GRPCRoute or TLSRoute (``kind`` when the object does not say, as in items
    of a list). parentRefs and status entries that cannot be read are dropped with a note; a
    malformed hostname refuses the whole route."""
    raw_kind = obj.get("kind", kind) if isinstance(obj, dict) else kind
    label = raw_kind if isinstance(raw_kind, str) and raw_kind in ROUTE_KINDS else "Route"
    try:
        _dict(obj, "the object")
        if raw_kind not in ROUTE_KINDS:
            raise _Bad(f"kind must be one of {', '.join(ROUTE_KINDS)}, got {show(raw_kind)}")
        meta = _meta(obj, namespaced=True)
        spec = _dict(obj.get("spec"), "spec")
        notes: list[str] = []
        names: dict[str, None] = {}
        for i, host in enumerate(_list(spec.get("hostnames"), "spec.hostnames", MAX_HOSTNAMES)):
            names.setdefault(_hostname(host, f"spec.hostnames[{i}]"))
        refs: dict[ParentRef, None] = {}
        for i, raw in enumerate(_list(spec.get("parentRefs"), "spec.parentRefs", MAX_PARENTS)):
            try:
                refs.setdefault(_parent_ref(raw, f"spec.parentRefs[{i}]", meta.namespace))
            except _Bad as bad:
                notes.append(f"{bad}; that parentRef is ignored")
        parents: list[ParentStatus] = []
        status = obj.get("status")
        if status is not None:
            try:
                entries = _list(_dict(status, "status").get("parents"), "status.parents",
                                MAX_PARENTS)
            except _Bad as bad:
                notes.append(f"{bad}; the route's status is ignored")
                entries = []
            for i, raw in enumerate(entries):
                try:
                    parents.append(_parent_status(raw, i, meta.namespace))
                except _Bad as bad:
                    notes.append(f"{bad}; that status entry is ignored")
        return Route(kind=raw_kind, meta=meta, parent_refs=tuple(refs), hostnames=tuple(names),
                     parents=tuple(parents), notes=tuple(notes))
    except _Bad as bad:
        return Malformed(label, *_where(obj), str(bad))
