"""``plan``: a snapshot in, the desired state out. Pure.

    objects ──▶ claims (host policy; Ingress classes, Gateway API routes) ──▶ targets.routing_plan
    (conflicts, data planes, slots) ──▶ answer sets (slot settling) ──▶ verification
    ──▶ DesiredState (hosts and answer sets, slot table, refusals, metrics)
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hairpin_proxy import corefile
from hairpin_proxy.claims import Claim
from hairpin_proxy.plan.answers import Groups, Regrouper, Routed, answer_groups, route_answers
from hairpin_proxy.plan.budget import (
    AnswerSets,
    Limit,
    Measure,
    NodeLocalMeasure,
    PublishedMeasure,
    RulesMeasure,
    Share,
    Touched,
    Within,
    limits_of,
    measure,
    within,
    within_shares,
)
from hairpin_proxy.plan.change import Since
from hairpin_proxy.plan.claims import source_claims
from hairpin_proxy.plan.snapshot import Rooms, Snapshot
from hairpin_proxy.plan.verification import Judged, judge
from hairpin_proxy.policy import PolicyResult, Rejection
from hairpin_proxy.sources.registry import DECLARED_KINDS
from hairpin_proxy.targets import table
from hairpin_proxy.targets.discovery import service_addresses, service_of_host
from hairpin_proxy.targets.model import DEFAULT_KEY
from hairpin_proxy.targets.resolve import TargetFacts
from hairpin_proxy.targets.routing_plan import Plan
from hairpin_proxy.targets.routing_plan import plan as plan_targets
from hairpin_proxy.targets.slots import service_name

VERDICTS = ("verified", "ip-mode-proxy", "not-this-cluster", "unresolved", "pending",
            "resolver-error")
# The states a target's hosts can be in, as the metrics label them.
TARGET_STATES = ("no-proxy", "proxy-unknown", "not-found")


@dataclass(frozen=True)
class DesiredState:
    routed: Routed
    # Every host that gets a rule, sorted.
    hosts: tuple[str, ...]
    # What the default target's hosts answer with (the proxy Service's ClusterIPs).
    default_answers: corefile.Answers
    # Every claim, as often as made (a tuple; the incremental plan's is a read-only view of
    # what it keeps, read within the pass as its per-host maps are).
    claims: Sequence[Claim] = ()
    # Every refusal with its object reference and reason (policy, routes).
    refusals: tuple[Rejection, ...] = ()
    # Hosts verification keeps out, with their verdict code.
    unverified: Mapping[str, str] = field(default_factory=dict)
    # Slot Services ("NAMESPACE/NAME") whose ClusterIPs the snapshot lacks.
    missing_services: tuple[str, ...] = ()
    # Gauge name → {label: value} (label "" for an unlabelled gauge).
    metrics: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # The hosts routed before verification and the size limits: those verification checks.
    candidates: tuple[str, ...] = ()
    # What the size limits kept and refused (None: the snapshot has no rooms).
    fitted: Within | None = None
    # The limits the hosts were fitted to (``fits``): the rooms (None: none) and the budget.
    rooms: Rooms | None = field(default=None, compare=False)
    rules_budget: int = field(default=0, compare=False)
    # How ``hosts`` differ from the last pass's (None: not known; see plan/change.py).
    since: Since | None = field(default=None, compare=False)
    # The hosts the size limits were given (the verified candidates), and verification's
    # outcome: what the next pass's incremental plan starts from.
    measured: tuple[str, ...] = field(default=(), compare=False)
    judged: Judged | None = field(default=None, compare=False)
    # What keeps the last pass's answer groups (the incremental plan's; None: the groups are
    # made from every host).
    grouper: Regrouper | None = field(default=None, compare=False, repr=False)

    @property
    def plan(self) -> Plan:
        return self.routed.plan

    def groups(self) -> Groups:
        """The hosts by what they resolve to (``answer_groups``), made once."""
        return self._groups

    @functools.cached_property
    def _groups(self) -> Groups:
        if self.grouper is not None:
            return self.grouper.groups(self.hosts, self.default_answers, self.routed.answers,
                                       self.since)
        return answer_groups(self.hosts, self.default_answers, self.routed.answers)

    def entries(self) -> dict[str, tuple[str, ...]]:
        """Every host that has a rule → the addresses it resolves to."""
        return {host: (*answers.ipv4, *answers.ipv6) for hosts, answers in self.groups()
                for host in hosts}

    def target_of(self, host: str) -> str | None:
        return self.plan.routes.get(host)

    def limited(self) -> frozenset[str]:
        """The hosts a size limit refused (a namespace's share, the rules budget, a
        ConfigMap's room): verification let them through, and they get no rule."""
        before = self.judged.hosts if self.judged is not None else self.candidates
        # The limits only take hosts away: as many before as after is none taken.
        if len(before) == len(self.hosts):
            return frozenset()
        return frozenset(before).difference(self.hosts)

    def fits(self, hosts: Sequence[str]) -> bool:
        """Whether the distinct ``hosts`` fit the limits this plan's hosts were fitted to,
        each answering as it is written with (a host not routed: as the default target's)."""
        if self.rooms is None:
            return True
        return fits_rooms(self.rooms, self.rules_budget, hosts, routed=self.routed,
                          default=self.default_answers)


def _named(objs: Iterable[Mapping[str, Any]], namespaced: bool) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    for obj in objs:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name"))
        out[f"{meta.get('namespace')}/{name}" if namespaced else name] = obj
    return out


def target_facts(snap: Snapshot) -> TargetFacts:
    """What the snapshot says about the data planes."""
    s = snap.settings
    services = list(snap.services)
    return TargetFacts(
        services=services, ingress_classes=_named(snap.ingress_classes or (), False),
        gateways=_named(snap.gateways, True) if s.gateway_api else {},
        gateway_classes=_named(snap.gateway_classes, False) if s.gateway_api else {},
        configmaps=snap.configmaps, client_traffic_policies=snap.client_traffic_policies,
        nginx_proxies=snap.nginx_proxies, cluster_domain=s.cluster_domain,
        unreadable=snap.unreadable, extra=snap.extra_facts, kinds=DECLARED_KINDS,
        default_service=service_of_host(s.target_server, s.cluster_domain, services))


def routing_metrics(routed: Routed) -> dict[str, dict[str, float]]:
    """The gauges a plan implies: targets by state, hosts not routed by reason, conflicts."""
    p = routed.plan
    states = Counter(why.problem.removeprefix("target-") for why in p.unresolved.values())
    states["relayed"] = len(p.targets)
    reasons = Counter(why.problem.removeprefix("target-") for why in p.excluded.values())
    reasons["settling"] = len(routed.waiting)
    return {"targets": {k: float(states[k]) for k in (*TARGET_STATES, "relayed")},
            "hosts_unrouted": {k: float(reasons[k]) for k in (*TARGET_STATES, "settling")},
            "host_conflicts": {"": float(len(p.losers))}}


def routable(routed: Routed, routes_sorted: Sequence[str] | None = None) -> tuple[str, ...]:
    """The plan's routes less the hosts still waiting for their target, sorted
    (``routes_sorted``: the plan's routes sorted, where the caller has them)."""
    if routes_sorted is None:
        return tuple(sorted(h for h in routed.plan.routes if h not in routed.waiting))
    waiting = routed.waiting
    return tuple(routes_sorted) if not waiting else tuple(
        h for h in routes_sorted if h not in waiting)


def plan(snap: Snapshot) -> DesiredState:
    return plan_with_policy(snap)[0]


def plan_with_policy(snap: Snapshot) -> tuple[DesiredState, PolicyResult]:
    """``plan(snap)``, and the Ingresses through the host policy as it read them (whose
    ignored hosts ``render`` logs): the policy is not run twice."""
    s = snap.settings
    claims, refusals, result = source_claims(snap)
    p = plan_targets(claims, target_facts(snap), s.target_map,
                     slot_table(snap.targets_configmap)[0], s.max_targets)
    return desired(snap, claims, refusals, p), result


def desired(snap: Snapshot, claims: Sequence[Claim], refusals: Sequence[Rejection], p: Plan, *,
            routes_sorted: Sequence[str] | None = None, slotted: Mapping[str, str] | None = None,
            measures: Mapping[str, Measure] | None = None,
            last: tuple[DesiredState, Collection[str]] | None = None,
            grouper: Regrouper | None = None) -> DesiredState:
    """The desired state from the plan of ``claims``: answer sets, verification, the size
    limits, metrics. Where the caller keeps them: ``routes_sorted``, ``p.routes`` sorted;
    ``slotted``, the routes not to the default target; ``measures``, memoised measures
    (budget.py); ``last``, the last pass's state and every host whose route may have changed
    since; ``grouper``, the last pass's answer groups. Each is a cache only: the answer is the
    same without."""
    s = snap.settings
    published = table.decode_published(
        ((snap.targets_configmap or {}).get("data") or {}).get(table.PUBLISHED_KEY))
    services = _named(snap.services, True)
    slot_svcs = {slot: f"{s.namespace}/{service_name(slot)}" for slot in p.slots.values()}
    routed = route_answers(
        p, slot_addresses={slot: service_addresses(services.get(name))
                           for slot, name in slot_svcs.items()},
        published=published, settle=s.settle, now=snap.now, dns_ttl=s.dns_ttl,
        held_answers=lambda: snap.held, slotted=slotted,
        last=None if last is None or slotted is None else (last[0].routed, last[1]))
    hosts = candidates = routable(routed, routes_sorted)
    unverified: dict[str, str] = {}
    metrics = routing_metrics(routed)
    proxy = services.get(f"{s.namespace}/{s.proxy_service}")
    default = corefile.Answers.of(service_addresses(proxy), s.dns_ttl)
    share = Share(s.share_hosts, s.share_bytes)
    # The shares drop hosts by object, not by route: a pass with them is measured whole.
    since = None if share else _since(last, routed, default)
    judged = None
    if s.verify_hosts:
        judged, since = _verify(snap, candidates, last, since)
        hosts, unverified = judged.hosts, judged.unverified
        metrics["verdicts"] = {code: float(judged.counts[code]) for code in VERDICTS}
    if share:
        hosts, shared = within_shares(hosts, routed.plan.origins, claims, share,
                                      (measures or new_measures())["rules"])
        refusals = (*refusals, *shared)
    measured = hosts
    got = None
    if snap.rooms is not None:
        got = fit_rooms(snap.rooms, s.rules_budget, hosts, routed=routed, claims=claims,
                        default=default, measures=measures,
                        since=(since.candidates, since.touched,
                               AnswerSets(since.default, since.answers)) if since else None)
        hosts, refusals = got.hosts, (*refusals, *got.rejections)
        metrics["over_budget"] = {"": float(len(got.refused))}
        metrics["rules_bytes"] = {"": float(got.sizes[0])}
    metrics["hosts_rejected"] = {"": float(len(refusals))}
    metrics["hosts_managed"] = {"": float(len(hosts))}
    used = {p.slots[k] for k in set((p.routes if slotted is None else slotted).values())
            if k != DEFAULT_KEY}
    missing = sorted(slot_svcs[slot] for slot in used if not service_addresses(
        services.get(slot_svcs[slot])))
    if proxy is None or not service_addresses(proxy):
        missing.insert(0, f"{s.namespace}/{s.proxy_service}")
    if since is not None and (hosts is not measured or since.hosts is not since.candidates):
        # The size limits refused objects, this pass or the last: not known from the routes.
        since = None
    # A list may change after the pass: a copy. A tuple or a view is kept as it is.
    kept = tuple(claims) if isinstance(claims, list) else claims
    return DesiredState(routed, hosts, default, kept, tuple(refusals), unverified,
                        tuple(missing), metrics, candidates=candidates, fitted=got,
                        rooms=snap.rooms, rules_budget=s.rules_budget, since=since,
                        measured=measured, judged=judged, grouper=grouper)


def _verify(snap: Snapshot, candidates: tuple[str, ...],
            last: tuple[DesiredState, Collection[str]] | None, since: Since | None
            ) -> tuple[Judged, Since | None]:
    """Verification of the candidates, judged again only where something changed since the
    last pass; ``since`` widened by the hosts whose outcome changed (None where not known)."""
    held = snap.held if snap.held_hosts is None else snap.held_hosts
    previous = last[0].judged if last is not None and since is not None else None
    judged, moved = judge(candidates, snap.verdicts, held, previous,
                          since.touched if since is not None else None)
    if since is None or moved is None:
        return judged, None
    return judged, dataclasses.replace(since, touched=tuple(moved.union(since.touched)))


def _since(last: tuple[DesiredState, Collection[str]] | None, routed: Routed,
           default: corefile.Answers) -> Since | None:
    """How this pass's candidates differ from the last's: by the hosts whose route changed
    alone, when no host waits for a slot in either pass and every answer set is the same."""
    if last is None:
        return None
    state, touched = last
    if (routed.settled is None or state.routed.settled is None or routed.waiting
            or state.routed.waiting or routed.settled != state.routed.settled
            or default != state.default_answers):
        return None
    return Since(state.hosts, state.routed.answers, state.default_answers, state.measured,
                 tuple(touched))


def new_measures() -> dict[str, Measure]:
    """One measure per kind of destination (their memo of each host's bytes is a cache)."""
    return {"rules": RulesMeasure(), "published": PublishedMeasure(),
            "node-local": NodeLocalMeasure()}


def _limits(rooms: Rooms, budget: int, measures: Mapping[str, Measure]) -> list[Limit]:
    return limits_of(budget, measures["rules"], rooms.rules, rooms.rules_where,
                     [(what, measures[kind], room, where)
                      for what, kind, room, where in rooms.others])


def fit_rooms(rooms: Rooms, budget: int, hosts: Sequence[str], *, routed: Routed,
              claims: Sequence[Claim], default: corefile.Answers,
              measures: Mapping[str, Measure] | None = None,
              since: Touched | None = None) -> Within:
    """The hosts that fit the rules budget and every ConfigMap's room, measured in the
    answer sets they are written with; the newest objects that do not are refused."""
    measures = measures or new_measures()
    limits = _limits(rooms, budget, measures)
    used = {id(limit.measure) for limit in limits}
    for unused in measures.values():
        if id(unused) not in used:
            # Its set is the others' too, which they may now update in place.
            unused.forget()
    return within(hosts, routed.plan.origins, claims, AnswerSets(default, routed.answers),
                  limits, since=since)


def fits_rooms(rooms: Rooms, budget: int, hosts: Sequence[str], *, routed: Routed,
               default: corefile.Answers) -> bool:
    """Whether the distinct ``hosts`` fit the rules budget and every ConfigMap's room, as
    ``fit_rooms`` measures them (its measures' running sums stay the plan's own)."""
    sets = AnswerSets(default, routed.answers)
    limits = _limits(rooms, budget, new_measures())
    # The rules' limit is over the bytes as written, as in ``within``.
    return all((size if limit.written is None else limit.written.size(hosts, sets))
               <= limit.limit
               for size, limit in zip(measure(hosts, sets, limits), limits, strict=True))


def slot_table(cm: Mapping[str, Any] | None) -> tuple[dict[str, int], str]:
    """The slot table the targets ConfigMap publishes (key → slot), and why it could not be
    read ("" when it could; an unreadable table starts afresh)."""
    raw = ((cm or {}).get("data") or {}).get(table.TABLE_KEY)
    if not isinstance(raw, str):
        return {}, ""
    try:
        return {e.key: e.slot for e in table.decode(raw)}, ""
    except table.TableError as exc:
        return {}, str(exc)
