"""Gateway API ListenerSets (``gateway.networking.k8s.io/v1``, standard channel since v1.5):
more listeners for an existing Gateway, written by someone who may not edit the Gateway. Pure.

A ListenerSet names its Gateway in ``spec.parentRef`` (group ``gateway.networking.k8s.io``,
kind ``Gateway``, namespace its own by default) and holds listeners of the same shape as a
Gateway's. Its listeners count only when all of these hold, so that no one can claim names
through a Gateway that did not let them:

1. the parent Gateway exists and its ``spec.allowedListeners.namespaces.from`` admits the
   ListenerSet's namespace: ``Same``, ``All``, or ``Selector`` over the Namespace's labels;
   ``None``, the default, admits none;
2. the Gateway's implementation accepted it (condition ``Accepted`` ``True`` in its status);
3. a listener its status reports as not accepted, or conflicted (a hostname or port the Gateway
   or an older ListenerSet already has), is left out.

Routes attach to a ListenerSet as their parent (parentRef kind ``ListenerSet``, optionally a
``sectionName`` or ``port``), and their names are the intersection of each listener's hostname
with theirs, exactly as on a Gateway's own listeners; a listener's ``allowedRoutes``
``Same`` means the ListenerSet's namespace. The names go to the parent Gateway's data plane.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hairpin_proxy.apis import GATEWAY_GROUP
from hairpin_proxy.sources.gateway.model import (
    MAX_CONDITIONS,
    MAX_LISTENERS,
    Condition,
    Gateway,
    Listener,
    Malformed,
    Meta,
    ParentRef,
    _Bad,
    _condition,
    _dict,
    _list,
    _meta,
    _parent_ref,
    _str,
    _where,
    listeners_of,
)

KIND = "ListenerSet"


@dataclass(frozen=True, slots=True)
class ListenerSet:
    meta: Meta
    parent: ParentRef
    listeners: tuple[Listener, ...]
    conditions: tuple[Condition, ...] = ()
    # Names of listeners its status reports as not accepted or conflicted.
    refused: frozenset[str] = frozenset()
    notes: tuple[str, ...] = field(default=(), compare=False)

    def __str__(self) -> str:
        return f"{KIND} {self.meta.namespace}/{self.meta.name}"

    def condition(self, kind: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == kind), None)


def _refused_listeners(status: dict[str, Any], notes: list[str]) -> frozenset[str]:
    out: set[str] = set()
    for i, raw in enumerate(_list(status.get("listeners"), "status.listeners", MAX_LISTENERS)):
        try:
            entry = _dict(raw, f"status.listeners[{i}]")
            name = _str(entry.get("name"), f"status.listeners[{i}].name")
            conds = {c.type: c.status for c in (
                _condition(c, f"status.listeners[{i}].conditions[{j}]") for j, c in
                enumerate(_list(entry.get("conditions"), f"status.listeners[{i}].conditions",
                                MAX_CONDITIONS)))}
        except _Bad as bad:
            notes.append(f"{bad}; that status entry is ignored")
            continue
        if conds.get("Accepted", "True") != "True" or conds.get("Conflicted") == "True":
            out.add(name)
    return frozenset(out)


def parse_listener_set(obj: Any) -> ListenerSet | Malformed:
    """A ListenerSet; listeners and status entries that cannot be read are dropped with a
    note (less attaches), an unreadable parentRef refuses the whole object."""
    try:
        _dict(obj, "the object")
        meta = _meta(obj, namespaced=True)
        spec = _dict(obj.get("spec"), "spec")
        parent = _parent_ref(spec.get("parentRef"), "spec.parentRef", meta.namespace)
        notes: list[str] = []
        listeners = listeners_of(spec, notes)
        conditions: list[Condition] = []
        refused: frozenset[str] = frozenset()
        status = obj.get("status")
        if status is not None:
            try:
                st = _dict(status, "status")
                for j, c in enumerate(_list(st.get("conditions"), "status.conditions",
                                            MAX_CONDITIONS)):
                    conditions.append(_condition(c, f"status.conditions[{j}]"))
                refused = _refused_listeners(st, notes)
            except _Bad as bad:
                notes.append(f"{bad}; the status is ignored")
                conditions, refused = [], frozenset()
        return ListenerSet(meta=meta, parent=parent, listeners=listeners,
                           conditions=tuple(conditions), refused=refused, notes=tuple(notes))
    except _Bad as bad:
        return Malformed(KIND, *_where(obj), str(bad))


def admits(gateway: Gateway, namespace: str,
           namespace_labels: Mapping[str, Mapping[str, str]]) -> str | None:
    """Why ``gateway``'s ``allowedListeners`` refuse ListenerSets of ``namespace``, or None."""
    origin = gateway.listeners_from
    if origin == "All":
        return None
    if origin == "Same":
        return None if namespace == gateway.meta.namespace else \
            f"it only allows ListenerSets of namespace {gateway.meta.namespace}"
    if origin == "Selector":
        labels = namespace_labels.get(namespace)
        if gateway.listeners_selector is None:
            return "its allowedListeners selector is missing or malformed"
        if labels is None:
            return f"the labels of namespace {namespace} are not known"
        return None if gateway.listeners_selector.matches(labels) else \
            f"its allowedListeners selector does not select namespace {namespace}"
    return "it allows no ListenerSets (spec.allowedListeners)"


def attachment(ls: ListenerSet, gateways: Mapping[tuple[str, str], Gateway],
               namespace_labels: Mapping[str, Mapping[str, str]]
               ) -> tuple[Gateway, tuple[Listener, ...], tuple[str, ...]] | str:
    """The parent Gateway of ``ls`` and the listeners that count, with notes, or why it does
    not attach (in words)."""
    ref = ls.parent
    if (ref.group, ref.kind) != (GATEWAY_GROUP, "Gateway"):
        return f"its parent {ref} is not a Gateway"
    gateway = gateways.get((ref.namespace, ref.name))
    if gateway is None:
        return f"no such Gateway {ref.namespace}/{ref.name} (or not of a served class)"
    why = admits(gateway, ls.meta.namespace, namespace_labels)
    if why is not None:
        return f"Gateway {ref.namespace}/{ref.name} does not take it: {why}"
    accepted = ls.condition("Accepted")
    if accepted is None or accepted.status != "True":
        state = "no Accepted condition" if accepted is None else \
            f"Accepted={accepted.status}" + (f" ({accepted.reason})" if accepted.reason else "")
        return f"its Gateway's implementation reports {state}"
    notes = list(ls.notes)
    if accepted.observed_generation is not None \
            and accepted.observed_generation < ls.meta.generation:
        notes.append(f"accepted at generation {accepted.observed_generation}, it is at "
                     f"{ls.meta.generation}; using its current listeners")
    kept = tuple(li for li in ls.listeners if li.name not in ls.refused)
    notes += [f"listener {name}: not accepted or conflicted in its status; ignored"
              for name in sorted(ls.refused & {li.name for li in ls.listeners})]
    return gateway, kept, tuple(notes)
