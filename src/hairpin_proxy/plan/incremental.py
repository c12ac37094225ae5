"""``Planner``: ``plan`` kept up to date at the cost of the change. Pure (no I/O); one caller
at a time.

Each pass takes a whole ``Snapshot`` and returns what ``plan(snapshot)`` returns (the claims
and refusals as the same collections, in another order: nothing reads their order). Between
passes it keeps, per object, the claims and refusals it made (an object is unchanged while
the snapshot holds the very same one: caches replace objects, never edit them), and per
name the decision among its claims. A pass then

1. finds the new and gone objects by identity, and re-claims only those (every object of a
   kind again when what they are read against changes: the policy, the IngressClasses, the
   Gateways and their classes, ListenerSets or namespaces' labels);
2. re-decides only the names whose claims changed, and routes only those hosts, unless a
   target's outcome changed (another fallback, resolution or slot: every host again);
3. shares the rest with ``plan``: answer sets, verification, the size limits, metrics.

Preconditions: as the API guarantees for a cluster's objects, no two objects of one kind share
a namespace and name; and a snapshot's lists are not changed while it is planned, and
between passes only extended (the Planner keeps lists of its own: the very list of the last
pass, as long as it was, holds the same objects). The plan's per-host maps are read-only views
of the Planner's own: read a pass's answer before the next pass (the controller reads it
within its pass).
tests/test_plan_incremental.py checks the equality after every event of random sequences.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, overload

from hairpin_proxy.claims import Claim, Decision, ObjectRef, decide, renamer, resolve_key
from hairpin_proxy.jsonobj import Obj
from hairpin_proxy.plan.answers import Regrouper
from hairpin_proxy.plan.budget import Measure
from hairpin_proxy.plan.claims import IngressClaim, ingress_origin_fields, registered_claims
from hairpin_proxy.plan.core import (
    DesiredState,
    desired,
    new_measures,
    slot_table,
    target_facts,
)
from hairpin_proxy.plan.snapshot import PlanSettings, Snapshot
from hairpin_proxy.policy import HostPolicy, Rejection
from hairpin_proxy.sources.gateway.claims import RouteClaims, route_reader
from hairpin_proxy.sources.ingress.policy import (
    ClassIndex,
    class_index,
    default_ingress_classes,
    evaluate_ingress,
)
from hairpin_proxy.targets.model import DEFAULT_KEY, Target
from hairpin_proxy.targets.resolve import TargetFacts, Unresolved
from hairpin_proxy.targets.routing_plan import Plan, key_outcomes

Made = tuple[tuple[Claim, ...], tuple[Rejection, ...]]
_NONE: Made = ((), ())
# Where the objects of the last list went (see ``_changes``).
Layout = list[int] | int | None


def same_items(a: Sequence[Any] | None, b: Sequence[Any] | None) -> bool:
    """Whether two sequences hold the very same objects, in order."""
    if a is b:
        return True
    if a is None or b is None or len(a) != len(b):
        return False
    return all(map(operator.is_, a, b))


def ingress_made(obj: Obj, index: ClassIndex, defaults: frozenset[str], policy: HostPolicy
                 ) -> Made:
    """One Ingress's claims and refusals, as ``plan.claims`` makes them for it."""
    result = evaluate_ingress(obj, policy, index)
    origin = ingress_origin_fields(obj, defaults)
    if not result.hosts or result.origin != f"{origin.namespace}/{origin.name}":
        # A name shortened for display names no Ingress: it claims nothing (as plan.claims).
        return (), result.rejections
    if len(result.hosts) == 1:
        # Nearly every Ingress: no generator, no de-duplication to do.
        return (IngressClaim.of(result.hosts[0], origin),), result.rejections
    return (tuple(IngressClaim.of(h, origin) for h in dict.fromkeys(result.hosts)),
            result.rejections)


def route_reader_of(snap: Snapshot, notes: list[str]) -> Callable[[tuple[str, Obj]], Made]:
    """One Gateway API route's claims and refusals (the Gateways and their classes parsed
    once, on the first route read); what it leaves out, in words, goes to ``notes``."""
    s = snap.settings
    reader: list[Callable[[Iterable[tuple[str, Any]]], RouteClaims]] = []

    def made(pair: tuple[str, Obj]) -> Made:
        if not reader:
            reader.append(route_reader(snap.gateway_classes, snap.gateways,
                                       wanted_classes=s.gateway_classes, policy=s.policy,
                                       namespace_labels=snap.namespace_labels,
                                       listener_sets=snap.listener_sets))
        got = reader[0]([pair])
        notes.extend(got.notes)
        return got.claims, tuple(Rejection.of(r.origin, r.host, r.reason)
                                 for r in got.rejections)
    return made


def _selects(allowed: Any) -> bool:
    """Whether an ``allowedRoutes`` or ``allowedListeners`` may admit by namespace selector:
    ``namespaces.from`` is "Selector", or of a shape the parse would not expect."""
    if allowed is None:
        return False
    spaces = allowed.get("namespaces") if isinstance(allowed, dict) else ...
    if spaces is None:
        return False
    origin = spaces.get("from") if isinstance(spaces, dict) else ...
    return origin is not None and (not isinstance(origin, str) or origin == "Selector")


def _reads_labels(parents: Iterable[Obj]) -> bool:
    """Whether a Gateway or ListenerSet admits by namespace selector: only then do the
    namespaces' labels decide what a route claims, and a namespace made or relabelled need
    not read every route again."""
    for obj in parents:
        spec = obj.get("spec")
        if spec is None:
            continue
        listeners = spec.get("listeners") if isinstance(spec, dict) else ...
        if not isinstance(listeners, list | None):
            return True
        if _selects(spec.get("allowedListeners")) or any(
                _selects(x.get("allowedRoutes") if isinstance(x, dict) else ...)
                for x in listeners or ()):
            return True
    return False


def version_of(obj: Obj) -> tuple[str, str] | None:
    """(uid, resourceVersion): the same pair is the same content (None without a
    resourceVersion: then only the very same object is)."""
    meta = obj.get("metadata") or {}
    rv = meta.get("resourceVersion")
    return (str(meta.get("uid") or ""), str(rv)) if rv else None


def _changes(old: list[Any], now: list[Any]) -> tuple[list[int], list[int], Layout]:
    """(the positions in ``old`` of objects gone from ``now``, the positions in ``now`` of
    objects new to it, where the others went: None when each stayed at its position, an
    int when the one object at that position was deleted and the rest moved up, else for
    each position in ``now`` the position in ``old`` of its object, -1 when new).

    A cache replaces a changed object where it was and adds new ones at the end: then the
    lists are compared a slice at a time in C (``_differing``), and a deletion, which
    shifts the rest by one place, so too; anything else as sets of objects. An object equal
    to the one at its place (a relist brings the same objects anew) is no change: what it
    makes is the same, for it is read against the same context."""
    n = len(old)
    if len(now) >= n:
        moved = _differing(old, now, 64)
        if moved is not None:
            return moved, [*moved, *range(n, len(now))], None
    elif len(now) == n - 1:
        at = _first_differing(old, now)
        if now[at:] == old[at + 1:]:
            return [at], [], at
    before = {id(o): i for i, o in enumerate(old)}
    where = [before.get(id(o), -1) for o in now]
    kept = set(where)
    return ([i for i in range(n) if i not in kept],
            list(itertools.compress(range(len(now)), map((-1).__eq__, where))), where)


def _extended(old: list[Any], now: list[Any]) -> bool:
    """Whether ``now`` is ``old`` with more objects after them; if so, ``old`` is extended
    to hold them too. Compared whole, in C, identity first: no object is touched (a copy or
    a slice of the list would count a reference to each of them, and at 50,000 objects
    spread over the heap that costs a millisecond apiece). A relist brings every object
    anew, equal to the old: the ends and the middle tell, and ``_changes`` then keeps the
    new ones, so that later passes compare by identity again."""
    n = len(old)
    if len(now) <= n or not _kept_at_ends(old, now):
        return False
    old += now[n:]
    if old == now:
        return True
    del old[n:]
    return False


def _kept_at_ends(old: list[Any], now: list[Any]) -> bool:
    """Whether ``now`` holds the very objects of ``old`` at its first, middle and last place
    (not equal ones, as a relist brings)."""
    n = len(old)
    return not n or (n <= len(now) and now[0] is old[0] and now[n - 1] is old[-1]
                     and now[n // 2] is old[n // 2])


def _differing(old: list[Any], now: list[Any], most: int) -> list[int] | None:
    """The positions of ``old`` whose object differs from ``now``'s there, sorted; None when
    more than ``most`` do. Slices are compared whole (identity first, in C), and only the
    halves that differ are looked into: a few changes among 50,000 objects cost a few
    comparisons of the whole list, not a call per object."""
    n = len(old)
    # The whole list first, without a copy where the lengths allow (nearly every pass).
    if (now == old) if len(now) == n else (now[:n] == old):
        return []
    out: list[int] = []
    spans = [(n // 2, n), (0, n // 2)]
    while spans:
        lo, hi = spans.pop()
        if now[lo:hi] == old[lo:hi]:
            continue
        if hi - lo <= 8:
            out += (i for i in range(lo, hi) if now[i] != old[i])
            if len(out) > most:
                return None
            continue
        mid = (lo + hi) // 2
        spans += [(mid, hi), (lo, mid)]
    return out


def _first_differing(old: list[Any], now: list[Any]) -> int:
    """The first position where ``now`` (one object shorter) differs from ``old``, its
    length when it is ``old`` but the last: found by halves, each compared in C."""
    lo, hi = 0, len(now)
    while hi - lo > 8:
        mid = (lo + hi) // 2
        if now[lo:mid] == old[lo:mid]:
            lo = mid
        else:
            hi = mid
    return next((i for i in range(lo, hi) if now[i] != old[i]), hi)


def _shifted(flagged: dict[int, Any], layout: Layout) -> dict[int, Any]:
    """``flagged`` (position → refusals) with the positions moved as ``_changes`` says the
    objects went (the gone ones' taken out already)."""
    if layout is None:
        return flagged
    if isinstance(layout, int):
        return {k - (k > layout): v for k, v in flagged.items()}
    return {at: flagged[i] for at, i in enumerate(layout) if i in flagged}


def _carried(made: list[Any], layout: Layout, size: int) -> list[Any]:
    """``made`` (one item per object of the old list) laid out as ``_changes`` says the
    objects went (``size`` of them); a new object's place holds ``()`` for now."""
    if layout is None:
        made.extend(itertools.repeat((), size - len(made)))
        return made
    if isinstance(layout, int):
        del made[layout]
        return made
    return [made[i] if i >= 0 else () for i in layout]


def _tuple(claims: Claim | tuple[Claim, ...]) -> tuple[Claim, ...]:
    return (claims,) if isinstance(claims, Claim) else claims


class _PerObject:
    """Claims and refusals per object of one kind, made for new objects only while the
    context they are read against stays the same. A relist brings equal objects anew: one
    with the uid and resourceVersion of one gone keeps what that one made."""

    def __init__(self) -> None:
        self.context: tuple[Any, ...] | None = None
        # The objects in the order last given, and each one's claims at its position (a
        # lone claim as itself: nearly every object makes one, and tens of thousands of
        # one-claim tuples cost a megabyte; a list, not a map by id: ints and a hash table
        # for every object cost another).
        self.objs: list[Any] = []
        self.made: list[Claim | tuple[Claim, ...]] = []
        # The objects with refusals (few), by position.
        self.flagged: dict[int, tuple[Rejection, ...]] = {}
        # How many objects were read (made anew) so far.
        self.count = 0
        # The list last given (a caller's), and how long it was.
        self.given: list[Any] | None = None
        self.given_len = 0
        # Made ahead of the next pass (``prime``): the context, the objects in the order
        # given, and what each made (two lists: a map of 50,000 keys weighs megabytes).
        # None at a place nothing was made ahead for.
        self.primed: tuple[tuple[Any, ...], list[Obj | None], list[Made | None]] | None = None

    def prime(self, context: tuple[Any, ...], objs: Iterable[Any],
              make: Callable[[Any], Made], at: int, *, key: Any = None) -> None:
        """What ``make`` makes of each of ``objs`` (the first at place ``at`` of the list the
        next ``update`` is given; ``key`` as there), kept for that update in the same
        ``context`` (made for another, it is dropped first): taken for the very object at the
        same place."""
        if self.primed is None or self.primed[0] != context:
            self.primed = (context, [], [])
        _, given, made = self.primed
        if at != len(given):
            # Places skipped (or made again from an earlier one): nothing taken there.
            del given[at:], made[at:]
            given.extend([None] * (at - len(given)))
            made.extend([None] * (at - len(made)))
        for item in objs:
            given.append(item if key is None else key(item))
            made.append(make(item))
            self.count += 1

    def update(self, context: tuple[Any, ...], objs: Iterable[Any], key: Any, *, make: Any,
               added: list[Claim], removed: list[Claim]) -> None:
        """``key(item)`` is the object of an item of ``objs`` (None: the item itself);
        ``make(item)`` its claims and refusals."""
        if context != self.context:
            for claims in self.made:
                removed.extend(_tuple(claims))
            self.made, self.flagged, self.objs, self.context = [], {}, [], context
            self.given = None
        if type(objs) is list:
            if objs is self.given and len(objs) == self.given_len:
                # The very list of the last pass, as long: the same objects (a caller only
                # extends a list it gave), and none of them need be looked at.
                self.primed = None
                return
            self.given, self.given_len = objs, len(objs)
        else:
            self.given = None
        items = objs if type(objs) is list else list(objs)
        now = items if key is None else list(map(key, items))
        old, made = self.objs, self.made
        if _extended(old, now):
            # The last objects, and new ones after them: nearly every new object. ``old``
            # now holds them all, and no list of every object was made or freed.
            gone: list[int] = []
            new, layout = list(range(len(made), len(now))), None
        else:
            gone, new, layout = _changes(old, now)
            if gone or new or layout is not None or not _kept_at_ends(old, now):
                # A list of its own (a snapshot's is the caller's): the next pass may extend it.
                self.objs = now if now is not items else list(now)
        was = [(old[i], made[i], self.flagged.pop(i, ())) for i in gone]
        # Carried even when no object came or went: the same objects in another order.
        self.made = _carried(made, layout, len(now))
        self.flagged = _shifted(self.flagged, layout)
        primed, self.primed = self.primed, None
        if gone or new:
            self._apply(was, [(i, items[i]) for i in new], key or (lambda o: o), make=make,
                        added=added, removed=removed,
                        primed=primed[1:] if primed and primed[0] == context else ([], []))

    def _apply(self, gone: list[tuple[Any, Claim | tuple[Claim, ...], tuple[Rejection, ...]]],
               new: list[tuple[int, Any]], of: Any, *, make: Any, added: list[Claim],
               removed: list[Claim],
               primed: tuple[list[Obj | None], list[Made | None]]) -> None:
        made, flagged = self.made, self.flagged
        recycled: dict[tuple[str, str], Made] = {}
        for obj, claims, refused in gone:
            was = (_tuple(claims), refused)
            version = version_of(obj)
            if version is None:
                removed.extend(was[0])
            else:
                recycled[version] = was
        ahead, ahead_made = primed
        for at, item in new:
            obj = of(item)
            got: Made | None = None
            # Nothing recycled (a first list, or objects only added): no version to look up.
            if recycled:
                version = version_of(obj)
                got = recycled.pop(version) if version in recycled else None
            if got is None:
                got = ahead_made[at] if at < len(ahead) and ahead[at] is obj else None
                if got is None:
                    got = make(item)
                    self.count += 1
                added.extend(got[0])
            claims = got[0]
            made[at] = claims[0] if len(claims) == 1 else claims
            if got[1]:
                flagged[at] = got[1]
        for left in recycled.values():
            removed.extend(left[0])

    def refusals(self) -> list[Rejection]:
        return [r for refused in self.flagged.values() for r in refused]


def _key_of(host: str) -> str:
    """The name a decided host was decided under (``resolve_key`` of its claims)."""
    return host[1:] if host.startswith("**.") else host


class _Hosts:
    """targets.routing_plan's per-name work, kept: the claims of each name, its decision, the route
    (or exclusion) of its host. Each host's origins and route are read from its claims (see
    ``_Origins`` and ``_Routes``): kept apart, they cost more than their claims."""

    def __init__(self) -> None:
        # The claims of each name: a name with one claim (nearly all) has the claim alone
        # in ``single``, one with several all of them in ``several``; every claim is in one.
        self.single: dict[str, Claim] = {}
        self.several: dict[str, list[Claim]] = {}
        self.asked: Counter[str] = Counter()
        # The decisions of the names in ``several``; a name with one claim is decided by it
        # alone, and its host is the claim's.
        self.decided: dict[str, Decision] = {}
        # The routes to a target other than the default (a few thousand of ten); the other
        # routed hosts go to the default target.
        self.slotted: dict[str, str] = {}
        self.excluded: dict[str, Unresolved] = {}
        # The routed hosts, sorted.
        self.sorted: list[str] = []
        self.losing: set[str] = set()
        # The hosts the last ``route`` decided again (None: every host).
        self.changed: set[str] | None = None

    def claims(self) -> list[Claim]:
        """Every claim, as often as it was made."""
        return [*self.single.values(), *itertools.chain.from_iterable(self.several.values())]

    def host_of(self, key: str) -> str | None:
        """The host a name was decided as (None: no claim has it)."""
        one = self.single.get(key)
        if one is not None:
            return one.host
        got = self.decided.get(key)
        return None if got is None else got[0]

    def routed(self, host: str) -> bool:
        return host not in self.excluded and self.host_of(_key_of(host)) == host

    def change(self, added: Iterable[Claim], removed: Iterable[Claim]) -> dict[str, str | None]:
        """The names whose claims changed, each with the host it had been decided as."""
        touched: dict[str, str | None] = {}
        single, several, asked = self.single, self.several, self.asked
        for c in removed:
            key = resolve_key(c)
            if key not in touched:
                touched[key] = self.host_of(key)
            if single.pop(key, None) is None:
                found = several[key]
                found.remove(c)
                if len(found) == 1:
                    single[key] = found[0]
                    del several[key]
            asked[c.target] -= 1
            if not asked[c.target]:
                del asked[c.target]
        for c in added:
            key = resolve_key(c)
            if key not in touched:
                touched[key] = self.host_of(key)
            there = single.pop(key, None)
            if there is not None:
                several[key] = [there, c]
            elif key in several:
                several[key].append(c)
            else:
                single[key] = c
            asked[c.target] += 1
        return touched

    def route(self, keys: Mapping[str, str | None], outcome: tuple[Any, ...], *,
              full: bool) -> None:
        """Decide and route the names ``keys``, each with the host it had been decided as
        (``full``: every name, decided afresh)."""
        fallbacks, unresolved, slots, max_slots = outcome
        target = renamer(fallbacks)
        if full:
            for kept in (self.decided, self.slotted, self.excluded, self.losing):
                kept.clear()
        changed: set[str] = set()
        routed: list[str] = []
        for key in keys:
            old = keys[key]
            self.decided.pop(key, None)
            if old is not None:
                self.slotted.pop(old, None)
                self.excluded.pop(old, None)
                changed.add(old)
            self.losing.discard(key)
            found = self.single.get(key)
            if found is not None:
                host, winner = found.host, found
            elif key in self.several:
                got = self.decided[key] = decide(key, self.several[key], target)
                host, winner, _, lost = got
                if lost:
                    self.losing.add(key)
            else:
                continue
            changed.add(host)
            k = fallbacks.get(winner.target, winner.target)
            if k in unresolved:
                self.excluded[host] = unresolved[k]
            elif k != DEFAULT_KEY and k not in slots:
                self.excluded[host] = Unresolved(
                    k, "target-not-found", f"no slot left for {k} (--max-targets {max_slots})")
            else:
                routed.append(host)
                if k != DEFAULT_KEY:
                    self.slotted[host] = k
        self._resort(routed if full else changed, full)
        self.changed = None if full else changed

    def _resort(self, changed: Iterable[str], full: bool) -> None:
        """``sorted`` after ``route``: ``changed`` are every routed host when ``full``, else
        the hosts that may have come or gone."""
        if full:
            self.sorted = sorted(changed)
            return
        changed = list(changed)
        if len(changed) > 64:
            now = set(self.sorted).difference(changed)
            now.update(filter(self.routed, changed))
            self.sorted = sorted(now)
            return
        for host in changed:
            at = bisect.bisect_left(self.sorted, host)
            present = at < len(self.sorted) and self.sorted[at] == host
            routed = self.routed(host)
            if routed and not present:
                self.sorted.insert(at, host)
            elif not routed and present:
                del self.sorted[at]

    def losers(self) -> tuple[tuple[Claim, Claim], ...]:
        out: list[tuple[Claim, Claim]] = []
        for key in sorted(self.losing):
            out.extend(self.decided[key][3])
        return tuple(out)


class _Claims(Sequence[Claim]):
    """Every claim the ``_Hosts`` keep, as often as made (``DesiredState.claims``): a
    read-only view, valid until they change. A pass within its size limits and without
    shares reads none, and lists none of the tens of thousands."""

    __slots__ = ("_hosts", "_listed")

    def __init__(self, hosts: _Hosts) -> None:
        self._hosts = hosts
        self._listed: list[Claim] | None = None

    def __len__(self) -> int:
        return len(self._hosts.single) + sum(map(len, self._hosts.several.values()))

    def __iter__(self) -> Iterator[Claim]:
        yield from self._hosts.single.values()
        yield from itertools.chain.from_iterable(self._hosts.several.values())

    @overload
    def __getitem__(self, i: int) -> Claim: ...

    @overload
    def __getitem__(self, i: slice) -> list[Claim]: ...

    def __getitem__(self, i: int | slice) -> Claim | list[Claim]:
        if self._listed is None:
            self._listed = self._hosts.claims()
        return self._listed[i]


class _Origins(Mapping[str, tuple[ObjectRef, ...]]):
    """host → every origin that asked for it for its winning target (``Plan.origins``),
    read from the claims the ``_Hosts`` keep: a read-only view, valid until they change."""

    __slots__ = ("_hosts",)

    def __init__(self, hosts: _Hosts) -> None:
        self._hosts = hosts

    def get(self, host: str, default: Any = None) -> Any:
        # Read for every host when over a size limit: ``_key_of`` inlined.
        key = host[1:] if host.startswith("**.") else host
        one = self._hosts.single.get(key)
        if one is not None:
            return (one.origin,) if one.host == host else default
        got = self._hosts.decided.get(key)
        if got is None or got[0] != host:
            return default
        return tuple(c.origin for c in got[2])

    def __getitem__(self, host: str) -> tuple[ObjectRef, ...]:
        got: tuple[ObjectRef, ...] | None = self.get(host)
        if got is None:
            raise KeyError(host)
        return got

    def __contains__(self, host: object) -> bool:
        return isinstance(host, str) and self.get(host) is not None

    def __iter__(self) -> Iterator[str]:
        yield from (c.host for c in self._hosts.single.values())
        yield from (d[0] for d in self._hosts.decided.values())

    def __len__(self) -> int:
        return len(self._hosts.single) + len(self._hosts.decided)


class _Routes(Mapping[str, str]):
    """host → target key, for every routed host (``Plan.routes``): the sorted hosts, each
    to the default target unless slotted. A read-only view, as ``_Origins``."""

    __slots__ = ("_hosts",)

    def __init__(self, hosts: _Hosts) -> None:
        self._hosts = hosts

    def get(self, host: str, default: Any = None) -> Any:
        if not isinstance(host, str) or not self._hosts.routed(host):
            return default
        return self._hosts.slotted.get(host, DEFAULT_KEY)

    def __getitem__(self, host: str) -> str:
        got: str | None = self.get(host)
        if got is None:
            raise KeyError(host)
        return got

    def __contains__(self, host: object) -> bool:
        return self.get(host) is not None  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[str]:
        return iter(self._hosts.sorted)

    def __len__(self) -> int:
        return len(self._hosts.sorted)


class Planner:
    """``plan`` at the cost of the change (see the module's docstring)."""

    def __init__(self) -> None:
        self._start()

    def _start(self) -> None:
        """Nothing planned yet: the next plan is a whole one."""
        self._ingresses = _PerObject()
        self._routes = _PerObject()
        self._registered: tuple[Any, ...] | None = None
        self._registered_made: Made = _NONE
        self._hosts = _Hosts()
        self._facts_from: tuple[Any, ...] | None = None
        self._facts = TargetFacts()
        self._resolved: dict[str, Target | Unresolved | None] = {}
        self._outcome: tuple[Any, ...] | None = None
        self._measures: dict[str, Measure] = new_measures()
        self._grouper = Regrouper()
        self._last: DesiredState | None = None
        self._spent: list[DesiredState] = []
        # What the last pass's new routes and Gateways leave out, in words (for logs).
        self.notes: list[str] = []

    @property
    def ingresses_read(self) -> int:
        """How many Ingresses were read through the host policy so far."""
        return self._ingresses.count

    @property
    def routes_read(self) -> int:
        """How many Gateway API routes were read for their claims so far."""
        return self._routes.count

    def plan(self, snap: Snapshot) -> DesiredState:
        try:
            return self._pass(snap)
        except BaseException:
            # Cut short, the state is half updated (claims read, their names not yet
            # routed) and no later change would tell which names: the next plan starts
            # afresh, as a whole one, rather than from a state no pass made.
            self._start()
            raise

    def _pass(self, snap: Snapshot) -> DesiredState:
        self.notes = []
        added: list[Claim] = []
        removed: list[Claim] = []
        self._claim(snap, added, removed)
        touched = self._hosts.change(added, removed)
        p = self._plan(snap, touched)
        claims = _Claims(self._hosts)
        refusals = [*self._ingresses.refusals(), *self._routes.refusals(),
                    *self._registered_made[1]]
        changed, last = self._hosts.changed, self._last
        state = desired(snap, claims, refusals, p, routes_sorted=self._hosts.sorted,
                        slotted=self._hosts.slotted, measures=self._measures,
                        last=None if last is None or changed is None else (last, changed),
                        grouper=self._grouper)
        if last is not None:
            # Freed by ``let_go`` (or two passes on): its lists of every host are
            # milliseconds' work to free.
            self._spent = [*self._spent[-1:], last]
        self._last = state
        return state

    def let_go(self) -> None:
        """Free the states the last passes replaced: where the caller has the time (the
        controller, once its write is out)."""
        self._spent = []

    def prime(self, settings: PlanSettings, ingress_classes: Sequence[Obj] | None,
              ingresses: Iterable[Obj], at: int) -> None:
        """Read ``ingresses`` (the first at place ``at`` of the snapshot's Ingresses) through
        the host policy ahead of the pass that plans them (the controller does as their list
        comes in, page by page): that pass takes what each made where the very object is at
        its place and what it is read against is the same then, and reads the others anew;
        the rest is dropped with the pass. Only before the first pass: after it, a relist's
        objects are mostly those it holds."""
        if self._last is not None:
            return
        context, make = _ingress_reader(settings.policy, ingress_classes)
        self._ingresses.prime(context, ingresses, make, at)

    def prime_routes(self, snap: Snapshot) -> list[str]:
        """Read the Gateway API routes of ``snap`` (whose other fields this reading does not
        look at) ahead of the first pass, as ``prime`` does the Ingresses: that pass takes
        what each made where the very route is at its place and what it is read against is
        the same then. What the reading leaves out, in words (the pass tells only what it
        reads itself)."""
        notes: list[str] = []
        if self._last is None:
            context, routes, make = _route_reader(snap, notes)
            self._routes.prime(context, routes, make, 0, key=operator.itemgetter(1))
        return notes

    def _claim(self, snap: Snapshot, added: list[Claim], removed: list[Claim]) -> None:
        s = snap.settings
        context, make = _ingress_reader(s.policy, snap.ingress_classes)
        self._ingresses.update(context, snap.ingresses, None, make=make,
                               added=added, removed=removed)
        context, routes, made = _route_reader(snap, self.notes)
        self._routes.update(context, routes, operator.itemgetter(1), make=made,
                            added=added, removed=removed)
        registered = (s.policy, _Frozen(snap.registered))
        if registered != self._registered:
            removed.extend(self._registered_made[0])
            self._registered_made = registered_claims(snap)
            added.extend(self._registered_made[0])
            self._registered = registered

    def _target_facts(self, snap: Snapshot) -> TargetFacts:
        s = snap.settings
        fields = (snap.services, snap.ingress_classes, snap.gateways, snap.gateway_classes,
                  snap.client_traffic_policies)
        known = self._facts_from
        if (known is None or known[0] is not s or known[2] != snap.unreadable
                or known[3] != _Frozen(snap.configmaps)
                or known[4] != _Frozen(snap.nginx_proxies)
                or known[5] != _Frozen(snap.extra_facts)
                or not all(map(same_items, known[1], fields))):
            # Finding a data plane scans every Service: done again only when what it
            # reads has changed.
            self._facts, self._resolved = target_facts(snap), {}
            self._facts_from = (s, tuple(None if f is None else tuple(f) for f in fields),
                                snap.unreadable, _Frozen(snap.configmaps),
                                _Frozen(snap.nginx_proxies), _Frozen(snap.extra_facts))
        return self._facts

    def _plan(self, snap: Snapshot, touched: dict[str, str | None]) -> Plan:
        s = snap.settings
        facts = self._target_facts(snap)
        keys = key_outcomes(self._hosts.asked, facts, s.target_map,
                            slot_table(snap.targets_configmap)[0], s.max_targets,
                            memo=self._resolved)
        outcome = (keys.fallbacks, keys.unresolved, keys.slots, s.max_targets)
        hosts = self._hosts
        if outcome != self._outcome:
            hosts.route(dict.fromkeys([*hosts.single, *hosts.several]), outcome, full=True)
            self._outcome = outcome
        else:
            hosts.route(touched, outcome, full=False)
        # Read-only views of the Planner's own maps, not copies: a plan is read within its
        # pass (the next pass changes them).
        return Plan(routes=_Routes(hosts), origins=_Origins(hosts),
                    targets=keys.targets, unresolved=keys.unresolved,
                    excluded=MappingProxyType(hosts.excluded), losers=hosts.losers(),
                    slots=keys.slots, overflow=keys.overflow, fallbacks=keys.fallbacks,
                    shared=keys.shared)


def _ingress_reader(policy: HostPolicy, classes: Sequence[Obj] | None
                    ) -> tuple[tuple[Any, ...], Callable[[Obj], Made]]:
    """What an Ingress is read against, and its reader: the same for a pass and ahead of it."""
    index = ClassIndex(frozenset(), None) if classes is None else class_index(classes)
    defaults = default_ingress_classes(classes or ())
    return (policy, index, defaults), lambda o: ingress_made(o, index, defaults, policy)


def _route_reader(snap: Snapshot, notes: list[str]
                  ) -> tuple[tuple[Any, ...], Sequence[tuple[str, Obj]], Callable[..., Made]]:
    """What the routes are read against, the routes, and their reader (telling ``notes``):
    the same for a pass and ahead of it."""
    s = snap.settings
    parents = (*snap.gateways, *snap.listener_sets)
    context = (s.gateway_api, s.policy, s.gateway_classes, tuple(snap.gateway_classes),
               parents, _Frozen(snap.namespace_labels) if _reads_labels(parents) else None)
    return context, snap.routes if s.gateway_api else (), route_reader_of(snap, notes)


class _Frozen:
    """A mapping compared by what it holds, each value by identity first (cheap for the
    same objects) and by equality only when they differ."""

    __slots__ = ("items",)

    def __init__(self, mapping: Mapping[str, Any]) -> None:
        self.items = dict(mapping)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Frozen) or self.items.keys() != other.items.keys():
            return False
        theirs = other.items
        return all(v is theirs[k] or _same(v, theirs[k]) for k, v in self.items.items())

    __hash__ = None  # type: ignore[assignment]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Sequence) and isinstance(b, Sequence) and not isinstance(a, str):
        return same_items(a, b)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return _Frozen(a) == _Frozen(b)
    return bool(a == b)
