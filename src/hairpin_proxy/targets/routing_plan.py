"""Which target each claimed host goes to. Pure; shared by the controller and doctor.

1. Every claim's target key is resolved once (resolve.py). An IngressClass that has no
   ``--target`` entry and whose data plane cannot be found or read falls back to the default
   target, the proxy's ``--target-server``: that is what every Ingress did before targets
   existed, and an upgrade must not stop redirecting a host that works today.
   A target whose data plane *is* the Service the proxy's ``--target-server`` names (the
   default install: ingress-nginx's class, found by discovery) is the default target too: its
   hosts use the main proxy Service and listeners at once, with no slot and no settle wait.
   Slots are for the second and later data planes. A ``--target`` entry is the operator's
   word and keeps its own slot.
2. Conflicts are decided on the final keys (two classes that both fall back to the default
   do not conflict): the oldest origin wins (claims.py).
3. A host whose winning target expects no PROXY header, or whose expectation or Service is
   unknown, is not redirected, with the reason.
4. Every resolved target that any claim names, winning or not, gets a slot: a Gateway that
   is still losing its hosts to an older Ingress is already listened for when the Ingress
   goes, so the host moves without a gap.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from hairpin_proxy.claims import Claim, ObjectRef
from hairpin_proxy.claims import resolve as resolve_claims
from hairpin_proxy.targets.mapping import MapEntry
from hairpin_proxy.targets.model import DEFAULT_KEY, Target, parse_key
from hairpin_proxy.targets.resolve import TargetFacts, Unresolved, resolve
from hairpin_proxy.targets.slots import allocate


@dataclass(frozen=True)
class Plan:
    # host → target key, for every host that gets a DNS rule.
    routes: Mapping[str, str] = field(default_factory=dict)
    # host → every origin that asked for it for its winning target (excluded hosts too).
    origins: Mapping[str, tuple[ObjectRef, ...]] = field(default_factory=dict)
    # key → Target, for the targets that relay (v1/v2), the default excluded.
    targets: Mapping[str, Target] = field(default_factory=dict)
    # key → why the hosts of that target are not redirected.
    unresolved: Mapping[str, Unresolved] = field(default_factory=dict)
    # host → why it is not redirected (its winning target's problem, or no free slot).
    excluded: Mapping[str, Unresolved] = field(default_factory=dict)
    # (losing claim, winning claim) for hosts claimed for two targets; a claim names the
    # target it asked for (``fallbacks`` says where an IngressClass's claims went instead).
    losers: tuple[tuple[Claim, Claim], ...] = ()
    slots: Mapping[str, int] = field(default_factory=dict)
    # Resolved targets left without a slot (more than --max-targets).
    overflow: tuple[str, ...] = ()
    # key the claims asked for → key they were given (an IngressClass falling back).
    fallbacks: Mapping[str, str] = field(default_factory=dict)
    # key → its data plane, for the keys in ``fallbacks`` whose data plane is the default
    # target's own Service (no fallback at all: the same data plane, reached without a slot).
    shared: Mapping[str, Target] = field(default_factory=dict)


def is_default_plane(got: Target | Unresolved | None, facts: TargetFacts) -> bool:
    """Whether a resolved target is the data plane the proxy's --target-server already
    relays to (with the PROXY header the main listeners send)."""
    return (isinstance(got, Target) and bool(facts.default_service)
            and got.service == facts.default_service)


def final_key(key: str, facts: TargetFacts, target_map: Mapping[str, MapEntry],
               memo: dict[str, Target | Unresolved | None]) -> tuple[str, Target | Unresolved |
                                                                      None]:
    if key == DEFAULT_KEY:
        return key, None
    if key not in memo:
        try:
            memo[key] = resolve(key, facts, target_map)
        except ValueError as exc:
            memo[key] = Unresolved(key, "target-not-found", f"{key} is not a target: {exc}")
    got = memo[key]
    if is_default_plane(got, facts) and key not in target_map:
        return DEFAULT_KEY, None
    if (isinstance(got, Unresolved) and got.problem != "target-no-proxy"
            and key not in target_map and parse_key(key).kind == "ingressclass"):
        return DEFAULT_KEY, None
    if (isinstance(got, Unresolved) and got.problem == "target-proxy-unknown"
            and key not in target_map and got.service and got.service == facts.default_service
            and (kind := facts.kinds.get(parse_key(key).kind)) is not None
            and kind.spec.default_when_shared):
        # A registered kind whose data plane is the proxy's own --target-server: the main
        # listeners already relay to it with the header it was installed with.
        return DEFAULT_KEY, None
    return key, got


@dataclass(frozen=True)
class KeyOutcomes:
    """What becomes of each target key the claims ask for (a handful, not per host)."""

    fallbacks: dict[str, str]
    targets: dict[str, Target]
    unresolved: dict[str, Unresolved]
    slots: dict[str, int]
    overflow: tuple[str, ...]
    shared: dict[str, Target]


def key_outcomes(asked_keys: Iterable[str], facts: TargetFacts,
                 target_map: Mapping[str, MapEntry], previous_slots: Mapping[str, int],
                 max_slots: int, *, memo: dict[str, Target | Unresolved | None]
                 ) -> KeyOutcomes:
    """Each asked key resolved once (``memo``: resolutions valid for ``facts``), its
    fallback, and the slots of the targets that relay."""
    asked = list(asked_keys)
    fallbacks: dict[str, str] = {}
    for key in asked:
        final, _ = final_key(key, facts, target_map, memo)
        if final != key:
            fallbacks[key] = final
    targets: dict[str, Target] = {}
    unresolved: dict[str, Unresolved] = {}
    for key in asked:
        got = memo.get(key)
        if fallbacks.get(key, key) != key:
            continue
        if isinstance(got, Target):
            targets[key] = got
        elif isinstance(got, Unresolved):
            unresolved[key] = got
    slots, overflow = allocate(previous_slots, targets, max_slots)
    shared = {k: t for k in fallbacks if isinstance(t := memo.get(k), Target)}
    return KeyOutcomes(fallbacks, {k: t for k, t in targets.items() if k in slots},
                       unresolved, slots, tuple(overflow), shared)


def plan(claims: Iterable[Claim], facts: TargetFacts, target_map: Mapping[str, MapEntry],
         previous_slots: Mapping[str, int], max_slots: int, *,
         resolved: dict[str, Target | Unresolved | None] | None = None) -> Plan:
    """``resolved``: the caller's cache of target resolutions, valid while ``facts`` and
    ``target_map`` stay the same (finding a data plane scans every Service)."""
    memo = resolved if resolved is not None else {}
    claims = claims if isinstance(claims, list | tuple) else list(claims)
    # Resolved once per key the claims name (a handful), not once per claim.
    keys = key_outcomes({c.target for c in claims}, facts, target_map, previous_slots,
                        max_slots, memo=memo)
    fallbacks, unresolved, slots = keys.fallbacks, keys.unresolved, keys.slots
    decided = resolve_claims(claims, fallbacks)
    routes: dict[str, str] = {}
    origins: dict[str, tuple[ObjectRef, ...]] = {}
    excluded: dict[str, Unresolved] = {}
    for host, winner in decided.winners.items():
        key = fallbacks.get(winner.target, winner.target)
        origins[host] = tuple(c.origin for c in decided.origins[host])
        if key in unresolved:
            excluded[host] = unresolved[key]
            continue
        if key != DEFAULT_KEY and key not in slots:
            excluded[host] = Unresolved(key, "target-not-found",
                                        f"no slot left for {key} (--max-targets {max_slots})")
            continue
        routes[host] = key
    return Plan(routes=routes, origins=origins, targets=keys.targets,
                unresolved=unresolved, excluded=excluded, losers=tuple(decided.losers),
                slots=slots, overflow=keys.overflow, fallbacks=fallbacks, shared=keys.shared)
