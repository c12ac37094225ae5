"""Every source's claims and refusals from the snapshot's objects. Pure."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, NamedTuple

from hairpin_proxy.apis import INGRESS_GROUP
from hairpin_proxy.claims import Claim, ObjectRef
from hairpin_proxy.plan.snapshot import Snapshot
from hairpin_proxy.policy import PolicyResult, Rejection
from hairpin_proxy.sources.gateway.claims import claims_of_objects
from hairpin_proxy.sources.ingress.policy import (
    ClassIndex,
    default_ingress_classes,
    evaluate,
    evaluate_ingress,
    ingress_target,
    merge,
)
from hairpin_proxy.sources.ingress.record import ABSENT, RECORDS
from hairpin_proxy.sources.registry import by_name


class IngressClaim(Claim):
    """An Ingress's claim, equal to ``Claim(host, target, ref, created)``: the reference is
    made on its first read from the namespace, name and uid kept here, then kept in place
    of the namespace (a pass reads few origins, but one over a size limit reads every one,
    again on every pass). Until then, one object less for each of tens of thousands of
    Ingresses. Its ``_origin`` is the namespace until then."""

    __slots__ = ("_name", "_uid")
    _name: str
    _uid: str

    def __init__(self, host: str, target: str, ref: ObjectRef, created: str) -> None:
        _set(self, "host", host)
        _set(self, "target", target)
        _set(self, "created", created)
        _set(self, "_origin", ref.namespace)
        _set(self, "_name", ref.name)
        _set(self, "_uid", ref.uid)

    @classmethod
    def of(cls, host: str, origin: IngressOrigin) -> IngressClaim:
        """The claim of the Ingress ``origin`` names: no reference made for it."""
        claim = cls.__new__(cls)
        _set(claim, "host", host)
        _set(claim, "target", origin.target)
        _set(claim, "created", origin.created)
        _set(claim, "_origin", origin.namespace)
        _set(claim, "_name", origin.name)
        _set(claim, "_uid", origin.uid)
        return claim

    @property
    def origin(self) -> ObjectRef:
        kept = self._origin
        if isinstance(kept, ObjectRef):
            return kept
        ref = ObjectRef("Ingress", kept, self._name, self._uid, INGRESS_GROUP)
        _set(self, "_origin", ref)
        return ref


_set = object.__setattr__


class IngressOrigin(NamedTuple):
    """An Ingress as the origin of its claims, as an IngressClaim keeps it."""

    namespace: str
    name: str
    uid: str
    # The target key its class asks for.
    target: str
    # Its creation time (the rules budget's order).
    created: str


def ingress_origin(obj: Mapping[str, Any], defaults: frozenset[str]
                   ) -> tuple[ObjectRef, str, str]:
    """An Ingress as the origin of its claims: (its reference, the target key its class asks
    for, its creation time)."""
    got = ingress_origin_fields(obj, defaults)
    return (ObjectRef("Ingress", got.namespace, got.name, got.uid, INGRESS_GROUP), got.target,
            got.created)


def ingress_origin_fields(obj: Mapping[str, Any], defaults: frozenset[str]) -> IngressOrigin:
    """``ingress_origin`` with no reference made: what an IngressClaim keeps. One string per
    target key for every Ingress of it, not one each."""
    target = sys.intern(ingress_target(obj, defaults))
    if type(obj) in RECORDS:
        # A cached record, read from its slots: this runs for every Ingress of a list.
        rec: Any = obj
        name = rec.name
        return IngressOrigin(_given(rec.namespace, "default"),
                             str(None if name is ABSENT else name), _given(rec.uid, ""),
                             target, _given(rec.creationTimestamp, ""))
    meta = obj.get("metadata") or {}
    return IngressOrigin(str(meta.get("namespace") or "default"), str(meta.get("name")),
                         str(meta.get("uid") or ""), target,
                         str(meta.get("creationTimestamp") or ""))


def _given(value: Any, default: str) -> str:
    """A record's field as ``str(meta.get(key) or default)`` reads it."""
    return default if value is ABSENT or not value else str(value)


def ingress_result(snap: Snapshot) -> PolicyResult:
    """The Ingresses through the host policy; with the IngressClasses unknown (None), class
    names are not held against the Ingresses."""
    policy = snap.settings.policy
    if snap.ingress_classes is None:
        unknown = ClassIndex(frozenset(), None)
        return merge(evaluate_ingress(i, policy, unknown) for i in snap.ingresses)
    return evaluate(snap.ingresses, snap.ingress_classes, policy)


def ingress_claims(result: PolicyResult, snap: Snapshot) -> tuple[Claim, ...]:
    """``result``'s hosts as claims, one per Ingress that asks for each."""
    defaults = default_ingress_classes(snap.ingress_classes or ())
    by_name: dict[str, tuple[ObjectRef, str, str]] = {}
    for obj in snap.ingresses:
        origin = ingress_origin(obj, defaults)
        by_name.setdefault(f"{origin[0].namespace}/{origin[0].name}", origin)
    out: list[Claim] = []
    for host, names in result.sources.items():
        for name in names:
            found = by_name.get(name)
            if found is not None:  # an Ingress no longer listed claims nothing
                out.append(Claim(host, found[1], found[0], found[2]))
    return tuple(out)


def registered_claims(snap: Snapshot) -> tuple[tuple[Claim, ...], tuple[Rejection, ...]]:
    """The claims and refusals of the registered sources with claims of their own."""
    claims: tuple[Claim, ...] = ()
    rejections: tuple[Rejection, ...] = ()
    for name, objects in snap.registered.items():
        claims_of = by_name(name).claims_of
        if claims_of is not None:
            got = claims_of(objects, snap.settings.policy)
            claims += got.claims
            rejections += got.rejections
    return claims, rejections


def source_claims(snap: Snapshot) -> tuple[tuple[Claim, ...], tuple[Rejection, ...],
                                            PolicyResult]:
    """Every claim and refusal of the Ingresses, (when on) the Gateway API routes and the
    registered sources."""
    result = ingress_result(snap)
    claims = ingress_claims(result, snap)
    rejections = result.rejections
    s = snap.settings
    if s.gateway_api:
        routes = claims_of_objects(snap.gateway_classes, snap.gateways, snap.routes,
                                   wanted_classes=s.gateway_classes, policy=s.policy,
                                   namespace_labels=snap.namespace_labels,
                                   listener_sets=snap.listener_sets)
        claims += routes.claims
        rejections += tuple(Rejection.of(r.origin, r.host, r.reason) for r in routes.rejections)
    more, refused = registered_claims(snap)
    return claims + more, rejections + refused, result
