"""Host claims from every source, and which one wins a host. Pure.

Ingresses and Gateway API routes each claim host names for a target (the data plane that
serves them). When one host is claimed for two different targets only one can get the DNS
rule, and the answer must not depend on the order objects arrived in (or every controller
restart could move a name): the OLDEST origin wins, by creationTimestamp, then kind, namespace
and name, the order the Gateway API prescribes for conflicts between routes. Several claims
of one host for the SAME target agree; they all stay listed as origins of the host.

A wildcard is one host whichever source claims it: an Ingress's ``*.example.com`` (one label)
and a route's ``**.example.com`` (any depth, see ``wildcards``) conflict as the same name
written twice would. When the winning target's claims hold both, the host is the any-depth
one: that data plane serves the deeper names too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import FrozenInstanceError, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """One object of the API, as Events and refusals name it: a kind alone is not enough (an
    Ingress and an HTTPRoute may share a namespace and name), and the uid tells a deleted
    object from a new one of the same name."""

    kind: str
    namespace: str
    name: str
    uid: str = ""
    # The API group ("" for the core group and where it is not known).
    group: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace \
            else f"{self.kind} {self.name}"


class Claim:
    """``origin`` asks for ``host`` for the data plane ``target``. A frozen value: equal,
    hashed and shown by its four fields whatever its class (a subclass may keep its origin
    in another form and make it when read: one object per Ingress is worth it)."""

    __slots__ = ("_origin", "created", "host", "target")
    __match_args__ = ("host", "target", "origin", "created")
    if TYPE_CHECKING:
        # Read-only to the type checker, as the frozen fields they are (slots at run time).
        @property
        def host(self) -> str: ...
        @property
        def target(self) -> str: ...
        # The origin's creationTimestamp (RFC 3339); anything unreadable counts as newest.
        @property
        def created(self) -> str: ...
    # The origin (a subclass's own form of it).
    _origin: Any

    def __init__(self, host: str, target: str, origin: ObjectRef, created: str) -> None:
        _set(self, "host", host)
        _set(self, "target", target)
        _set(self, "created", created)
        _set(self, "_origin", origin)

    @property
    def origin(self) -> ObjectRef:
        got: ObjectRef = self._origin
        return got

    def _fields(self) -> tuple[str, str, ObjectRef, str]:
        return (self.host, self.target, self.origin, self.created)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Claim):
            return NotImplemented
        return self is other or self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (f"Claim(host={self.host!r}, target={self.target!r}, origin={self.origin!r}, "
                f"created={self.created!r})")

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple[type[Claim], tuple[str, str, ObjectRef, str]]:
        # Copied or pickled as the plain claim it equals.
        return (Claim, self._fields())


_set = object.__setattr__


class Resolution(NamedTuple):
    # host -> the oldest claim of the winning target.
    winners: dict[str, Claim]
    # (losing claim, the claim that beat it), by host then age.
    losers: list[tuple[Claim, Claim]]
    # host -> every claim of the winning target, oldest first.
    origins: dict[str, tuple[Claim, ...]]


@functools.lru_cache(maxsize=65536)
def _instant(created: str) -> tuple[int, str]:
    """A sortable form of a timestamp: UTC with microseconds, so "…Z" and "+00:00" spellings
    of one instant compare equal and string order is time order. Unreadable ones sort after
    every readable one (an object whose age we cannot tell must not win by it)."""
    try:
        moment = datetime.fromisoformat(created)
    except (TypeError, ValueError):
        return (1, created if isinstance(created, str) else "")
    if moment.tzinfo is None:
        # Kubernetes always writes UTC; a naive value is taken as UTC rather than local time,
        # which would make the winner depend on the machine's time zone.
        moment = moment.replace(tzinfo=UTC)
    return (0, moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f"))


def origin_key(origin: ObjectRef, created: str
               ) -> tuple[tuple[int, str], str, str, str, str, str]:
    """Oldest object first (creationTimestamp ``created``), then kind, namespace, name, uid
    and group: the order in which objects keep what they ask for."""
    o = origin
    return (_instant(created), o.kind, o.namespace, o.name, o.uid, o.group)


def age_key(claim: Claim) -> tuple[tuple[tuple[int, str], str, str, str, str, str], str, str,
                                   str]:
    """Oldest first; uid, target, the timestamp's spelling and the host's form (``*.d`` or
    ``**.d``, one name to decide on) only break ties between otherwise identical origins, so
    the order is total and the result does not depend on input order."""
    return (origin_key(claim.origin, claim.created), claim.target, claim.created, claim.host)


def resolve_key(claim: Claim) -> str:
    """The name a claim is decided under: "**.d" and "*.d" are one name ("*.d")."""
    host = claim.host
    return host[1:] if host.startswith("**.") else host


Decision = tuple[str, Claim, tuple[Claim, ...], tuple[tuple[Claim, Claim], ...]]


def decide(key: str, found: Collection[Claim], target: Callable[[Claim], str]) -> Decision:
    """One name's claims (``key`` as ``resolve_key`` gives it): (the host that gets the rule,
    the oldest claim of the winning target, every claim of that target oldest first, each
    losing claim with the claim that beat it, by age)."""
    if len(found) == 1:
        # Most hosts have one claim: nothing to order (a pass plans tens of thousands).
        only = next(iter(found))
        return only.host, only, (only,), ()
    ordered = sorted(set(found), key=age_key)
    first = ordered[0]
    won = target(first)
    agree = tuple(c for c in ordered if target(c) == won)
    host = "*" + key if any(c.host != key for c in agree) else key
    return host, first, agree, tuple((c, first) for c in ordered if target(c) != won)


def renamer(rename: Mapping[str, str] | None) -> Callable[[Claim], str]:
    """The target a claim counts for, ``rename`` applied."""
    if rename:
        def target(c: Claim) -> str:
            return rename.get(c.target, c.target)
    else:
        def target(c: Claim) -> str:
            return c.target
    return target


def resolve(claims: Iterable[Claim], rename: Mapping[str, str] | None = None) -> Resolution:
    """Which target each host goes to, who lost, and every origin of each winner.
    ``rename`` maps a claim's target to the one it counts for (an IngressClass falling back
    to the default target); the claims returned are the ones given."""
    target = renamer(rename)
    by_host: dict[str, list[Claim]] = {}
    for claim in claims:
        key = resolve_key(claim)
        same = by_host.get(key)
        if same is None:
            by_host[key] = [claim]
        else:
            same.append(claim)
    winners: dict[str, Claim] = {}
    losers: list[tuple[Claim, Claim]] = []
    origins: dict[str, tuple[Claim, ...]] = {}
    for key in sorted(by_host):
        host, first, agree, lost = decide(key, by_host[key], target)
        winners[host] = first
        origins[host] = agree
        losers.extend(lost)
    return Resolution(winners, losers, origins)
