"""The pure plan (src/hairpin_proxy/plan): answer sets while a slot settles, the grouping of
hosts by answer set, the verification rule, refusals with their object references, and what a
snapshot lacks. End to end against the controller: tests/controller/test_plan_equivalence.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from hairpin_proxy import corefile
from hairpin_proxy.claims import ObjectRef
from hairpin_proxy.plan import PlanSettings, answer_groups, plan, route_answers
from hairpin_proxy.plan.answers import Pending, Routed
from hairpin_proxy.plan.objects import snapshot_of
from hairpin_proxy.plan.snapshot import Rooms
from hairpin_proxy.plan.verification import judge_all
from hairpin_proxy.policy import HostPolicy
from hairpin_proxy.targets import table
from hairpin_proxy.targets.model import DEFAULT_KEY
from hairpin_proxy.targets.routing_plan import Plan
from hairpin_proxy.verify.verdict import Code, Verdict

CORPUS = Path(__file__).parent / "plan_corpus"
A = corefile.Answers.of(["10.96.0.50"])
B = corefile.Answers.of(["10.96.0.51"])
SETTINGS = PlanSettings(HostPolicy(), settle=0.0,
                        target_server="ingress-nginx-controller.ingress-nginx.svc.cluster.local")

hosts_st = st.lists(st.sampled_from([f"h{i}.example.com" for i in range(12)]), unique=True)


@given(hosts_st, st.dictionaries(st.sampled_from([f"h{i}.example.com" for i in range(12)]),
                                 st.sampled_from([A, B, corefile.Answers()])),
       st.sampled_from([A, corefile.Answers()]))
def test_every_host_with_an_answer_is_in_exactly_one_group(
        hosts: list[str], routed: dict[str, corefile.Answers],
        default: corefile.Answers) -> None:
    groups = answer_groups(hosts, default, routed)
    grouped = [h for members, _ in groups for h in members]
    assert len(grouped) == len(set(grouped))
    answered = {h for h in hosts if (routed.get(h, default) if routed else default)}
    assert set(grouped) == answered
    for members, answers in groups:
        assert answers
        assert all((routed.get(h, default) if routed else default) == answers for h in members)


def one_slot_plan() -> Plan:
    return Plan(routes={"a.example.com": "ingressclass/x", "b.example.com": "ingressclass/x",
                        "c.example.com": "default"},
                slots={"ingressclass/x": 1})


def test_a_settled_slot_answers_with_its_service() -> None:
    routed = route_answers(one_slot_plan(), slot_addresses={1: ("10.96.0.51",)},
                           published={"ingressclass/x": 100.0}, settle=90, now=200.0,
                           dns_ttl=10, held_answers=dict)
    assert routed.answers == {"a.example.com": B, "b.example.com": B}
    assert (routed.waiting, routed.pending, routed.wake_in) == (set(), {}, None)


def test_a_settling_slot_keeps_what_the_rules_hold_and_says_when() -> None:
    routed = route_answers(one_slot_plan(), slot_addresses={1: ("10.96.0.51",)},
                           published={"ingressclass/x": 150.0}, settle=90, now=200.0,
                           dns_ttl=10, held_answers=lambda: {"a.example.com": A})
    assert routed.answers == {"a.example.com": A}
    assert routed.waiting == {"b.example.com"}
    assert routed.pending["ingressclass/x"].rules_at == 240.0
    assert routed.wake_in is not None and 40 < routed.wake_in < 41


def test_a_slot_without_its_service_waits_for_it() -> None:
    routed = route_answers(one_slot_plan(), slot_addresses={}, published={}, settle=0,
                           now=200.0, dns_ttl=10, held_answers=dict)
    assert routed.waiting == {"a.example.com", "b.example.com"}
    assert routed.pending["ingressclass/x"].rules_at is None


def test_verification_keeps_held_hosts_until_their_first_verdict() -> None:
    verdicts = {"ok.example.com": Verdict("ok.example.com", Code.VERIFIED, ""),
                "far.example.com": Verdict("far.example.com", Code.NOT_THIS_CLUSTER, "")}
    got = judge_all(
        ("ok.example.com", "far.example.com", "held.example.com", "new.example.com"),
        verdicts, ["held.example.com", "far.example.com"])
    kept, refused, counts = got.hosts, got.unverified, got.counts
    assert kept == ("ok.example.com", "held.example.com")
    assert refused == {"far.example.com": "not-this-cluster", "new.example.com": "pending"}
    assert counts["pending"] == 2


def test_a_resolver_error_neither_withdraws_a_held_host_nor_adds_a_new_one() -> None:
    """A restart while the resolver fails: the first verdicts are errors, which say nothing of
    where a host's DNS leads, so the rules stay as they are."""
    verdicts = {h: Verdict(h, Code.RESOLVER_ERROR, "timeout")
                for h in ("held.example.com", "new.example.com")}
    got = judge_all(("held.example.com", "new.example.com"), verdicts, ["held.example.com"])
    kept, refused, counts = got.hosts, got.unverified, got.counts
    assert kept == ("held.example.com",)
    assert refused == {"new.example.com": "resolver-error"}
    assert counts["resolver-error"] == 2


def corpus(name: str) -> dict[str, Any]:
    case: dict[str, Any] = yaml.safe_load((CORPUS / f"{name}.yaml").read_text())
    return case


def with_ips(objects: list[dict[str, Any]], ips: Mapping[str, str]) -> list[dict[str, Any]]:
    """The objects, with these Services ("NAMESPACE/NAME" → ClusterIP) given addresses."""
    out = list(objects)
    for where, ip in ips.items():
        ns, name = where.split("/")
        found = [o for o in out if o["kind"] == "Service"
                 and (o["metadata"].get("namespace"), o["metadata"]["name"]) == (ns, name)]
        if found:
            found[0]["spec"].update(clusterIP=ip, clusterIPs=[ip])
        else:
            out.append({"apiVersion": "v1", "kind": "Service",
                        "metadata": {"namespace": ns, "name": name},
                        "spec": {"clusterIP": ip, "clusterIPs": [ip]}})
    return out


PLANES = {"ingress-nginx/ingress-nginx-controller": "10.96.1.1",
          "ingress-internal/ingress-nginx-controller": "10.96.1.2",
          "hairpin-proxy/hairpin-proxy": "10.96.0.50"}


def test_a_slot_service_the_snapshot_lacks_is_named() -> None:
    snap = snapshot_of(with_ips(corpus("04-two-classes")["objects"], PLANES), SETTINGS,
                       targets_configmap="hairpin-proxy-targets")
    desired = plan(snap)
    assert desired.missing_services == ("hairpin-proxy/hairpin-proxy-t1",)
    assert desired.target_of("wiki.example.com") == "ingressclass/nginx-internal"
    # Until its Service is known, the slot's hosts get no rule; the others do.
    assert desired.hosts == ("shop.example.com", "www.shop.example.com")
    snap = snapshot_of(with_ips(corpus("04-two-classes")["objects"],
                                {**PLANES, "hairpin-proxy/hairpin-proxy-t1": "10.96.0.51"}),
                       SETTINGS, targets_configmap="hairpin-proxy-targets")
    desired = plan(snap)
    assert desired.missing_services == ()
    assert desired.entries()["wiki.example.com"] == ("10.96.0.51",)
    assert desired.metrics["targets"]["relayed"] == 1


def test_refusals_carry_the_full_object_reference() -> None:
    snap = snapshot_of(with_ips(corpus("20-wildcards-and-refusals")["objects"], PLANES),
                       SETTINGS, targets_configmap="hairpin-proxy-targets")
    refs = {r.ref for r in plan(snap).refusals}
    assert refs == {ObjectRef("Ingress", "tenant", "sneaky", "", "networking.k8s.io")}


def over_budget(**verdicts: Code) -> tuple[tuple[str, ...], Any]:
    """The over-budget corpus case (six Ingresses of 8 hosts, --rules-budget 440: two fit
    as written), every host verified but those of the teams given: (every host, the plan of
    the snapshot)."""
    objs = with_ips(corpus("25-over-budget")["objects"], PLANES)
    snap = snapshot_of(objs, dataclasses.replace(SETTINGS, verify_hosts=True,
                                                 rules_budget=440),
                       targets_configmap="hairpin-proxy-targets")
    hosts = tuple(sorted(c.host for c in plan(snap).claims))
    given = {h: Verdict(h, verdicts.get(h.split(".")[1], Code.VERIFIED), "") for h in hosts}
    return hosts, plan(dataclasses.replace(
        snap, verdicts=given, rooms=Rooms(10**6, "kube-system/coredns")))


def test_the_size_limits_measure_only_what_verification_lets_through() -> None:
    """Verification, then the size limits, both in the plan: a host kept out by its verdict
    takes no room, so objects refused when every host is verified fit once two teams' hosts
    are not this cluster's; the candidates (what the checker is told to check) are every
    routed host either way, and the metrics follow."""
    hosts, every = over_budget()
    assert [str(r.ref) for r in every.refusals] == [
        "Ingress team2/web", "Ingress team3/web", "Ingress team4/web", "Ingress team5/web"]
    assert every.candidates == hosts and len(every.hosts) == 16
    assert every.fitted is not None and every.fitted.refused == tuple(
        r.ref for r in every.refusals)
    assert every.metrics["over_budget"] == {"": 4.0}
    assert every.metrics["hosts_rejected"] == {"": 4.0}
    assert every.metrics["rules_bytes"] == {"": float(every.fitted.sizes[0])}
    assert 0 < every.fitted.sizes[0] <= 440
    _, some = over_budget(team0=Code.NOT_THIS_CLUSTER, team1=Code.UNRESOLVED)
    assert [str(r.ref) for r in some.refusals] == ["Ingress team4/web", "Ingress team5/web"]
    assert some.candidates == hosts
    assert {h.split(".")[1] for h in some.hosts} == {"team2", "team3"}
    assert set(some.unverified.values()) == {"not-this-cluster", "unresolved"}
    assert some.metrics["verdicts"]["verified"] == 32.0


def test_the_plan_tells_the_removal_guard_what_the_size_limits_refused() -> None:
    """What the removal guard asks of a plan: the hosts a size limit refused (not those
    verification kept out), and whether hosts fit the limits its own were fitted to."""
    hosts, every = over_budget()
    assert every.limited() == {h for h in hosts if h.split(".")[1] in
                               ("team2", "team3", "team4", "team5")}
    assert every.fits(every.hosts) and not every.fits(hosts)
    _, some = over_budget(team0=Code.NOT_THIS_CLUSTER, team1=Code.UNRESOLVED)
    assert {h.split(".")[1] for h in some.limited()} == {"team4", "team5"}
    # A snapshot without rooms has no limit to fit.
    bare = snapshot_of(with_ips(corpus("25-over-budget")["objects"], PLANES), SETTINGS,
                       targets_configmap="hairpin-proxy-targets")
    assert plan(bare).fits(hosts) and not plan(bare).limited()


def test_held_hosts_keep_their_rule_until_their_first_verdict_whatever_their_answers() -> None:
    """The controller reads the hosts its rules hold apart from their answers (an import
    snippet's hosts without published answers): those, not the answers' keys, are what a
    host without a verdict keeps."""
    objs = with_ips(corpus("01-nginx-alone")["objects"], PLANES)
    snap = snapshot_of(objs, dataclasses.replace(SETTINGS, verify_hosts=True),
                       targets_configmap="hairpin-proxy-targets")
    hosts = plan(dataclasses.replace(snap, settings=SETTINGS)).hosts
    held, new = hosts[0], hosts[1:]
    state = plan(dataclasses.replace(snap, held={}, held_hosts=(held,)))
    assert state.hosts == (held,) and state.candidates == hosts
    assert state.unverified == dict.fromkeys(new, "pending")
    assert plan(dataclasses.replace(snap, held={held: A})).hosts == (held,)
    assert plan(dataclasses.replace(snap, held={held: A}, held_hosts=())).hosts == ()


def test_only_the_settings_objects_the_controller_reads_are_read() -> None:
    other = {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"namespace": "x", "name": "unrelated"}, "data": {}}
    snap = snapshot_of([*corpus("01-nginx-alone")["objects"], other], SETTINGS,
                       targets_configmap="hairpin-proxy-targets")
    assert set(snap.configmaps) == {"ingress-nginx/ingress-nginx-controller"}
    assert snap.targets_configmap is None


def test_every_kind_a_built_in_registration_reads_has_its_place_in_the_snapshot() -> None:
    """The registry is the one list of kinds: a kind added there that the snapshot has no
    field for would be silently dropped by render and doctor."""
    from hairpin_proxy.plan.objects import _FIELDS
    from hairpin_proxy.sources.registry import REGISTRATIONS
    for reg in REGISTRATIONS:
        if reg.claims_of is None:
            for r in reg.resources:
                assert r.kind == "ConfigMap" or r.plural in _FIELDS, (reg.name, r.plural)


def _route(group: str, name: str, host: str) -> dict[str, Any]:
    return {"apiVersion": f"{group}/v1alpha1", "kind": "IngressRoute",
            "metadata": {"namespace": "shop", "name": name, "uid": f"uid-{name}"},
            "spec": {"routes": [{"kind": "Rule", "match": f"Host(`{host}`)"}], "tls": {}}}


def test_ingressroutes_are_read_only_when_their_source_is_on() -> None:
    objs = [*corpus("27-traefik-ingressroute")["objects"],
            _route("traefik.containo.us", "old", "old.example.com"),
            {"apiVersion": "apps/v1", "kind": "Deployment",
             "metadata": {"namespace": "kube-system", "name": "other"}}]
    off = snapshot_of(objs, SETTINGS, targets_configmap="hairpin-proxy-targets")
    assert off.registered == {} and off.extra_facts == {}
    assert "shop.example.com" not in {c.host for c in plan(off).claims}
    on = snapshot_of(objs, dataclasses.replace(SETTINGS, sources_on=frozenset(
        {"ingress", "gateway", "traefik-ingressroute"})), targets_configmap="t")
    groups = on.registered["traefik-ingressroute"]
    assert [o["metadata"]["name"] for o in groups["traefik.io"]] == ["shop"]
    assert [o["metadata"]["name"] for o in groups["traefik.containo.us"]] == ["old"]
    # Only the Deployment the registration names, slimmed as the controller slims it.
    [deployment] = on.extra_facts["traefik-ingressroute/deployments"]
    assert deployment["metadata"]["name"] == "traefik" and "labels" not in deployment["metadata"]
    # traefik.io is served (it has objects): the legacy group's routes are not read.
    claims = {c.host: c for c in plan(on).claims}
    assert set(claims) == {"shop.example.com", "www.shop.example.com"}
    assert claims["shop.example.com"].origin == ObjectRef(
        "IngressRoute", "shop", "shop", "", "traefik.io")


def plain_groups(hosts: list[str], default: corefile.Answers,
                 routed: Mapping[str, corefile.Answers]) -> tuple[Any, ...]:
    """answer_groups as first written: host by host."""
    if not routed:
        return ((tuple(hosts), default),) if hosts and default else ()
    on_default = [h for h in hosts if h not in routed]
    by_answers: dict[corefile.Answers, list[str]] = {}
    for host in hosts:
        if host in routed:
            by_answers.setdefault(routed[host], []).append(host)
    out = [(tuple(on_default), default)] if on_default and default else []
    out += [(tuple(group), answers) for answers, group in by_answers.items() if answers]
    return tuple(out)


# Equal answer sets in distinct objects (two slots' Services with the same addresses, or
# a set made again), interleaved among the hosts.
A_AGAIN = corefile.Answers.of(["10.96.0.50"])


@given(st.lists(st.sampled_from([f"h{i}.example.com" for i in range(12)])),
       st.dictionaries(st.sampled_from([f"h{i}.example.com" for i in range(12)]),
                       st.sampled_from([A, A_AGAIN, B, corefile.Answers()])),
       st.sampled_from([A, corefile.Answers()]))
def test_answer_groups_are_those_of_the_plain_algorithm(
        hosts: list[str], routed: dict[str, corefile.Answers],
        default: corefile.Answers) -> None:
    assert A_AGAIN is not A
    assert answer_groups(hosts, default, routed) == plain_groups(hosts, default, routed)


def plain_route_answers(p: Plan, slot_addresses: Mapping[int, tuple[str, ...]],
                        published: Mapping[str, float], *, now: float,
                        held: Mapping[str, corefile.Answers],
                        slotted: Mapping[str, str] | None) -> Routed:
    """route_answers as first written: host by host, each target's answer made once."""
    routed = Routed(p)
    waits: dict[str, list[str]] = {}
    keys: dict[str, tuple[float, corefile.Answers | None]] = {}
    for host, key in (p.routes if slotted is None else slotted).items():
        if key == DEFAULT_KEY:
            continue
        if key not in keys:
            addresses = slot_addresses.get(p.slots[key], ())
            left = table.settles_at(published, key, 90, now) - now
            answers = None
            if left <= 0 and addresses:
                with contextlib.suppress(corefile.CorefileError):
                    answers = corefile.Answers.of(addresses, 10)
            keys[key] = (left, answers)
        left, answers = keys[key]
        if answers is not None:
            routed.answers[host] = answers
            continue
        waits.setdefault(key, []).append(host)
        if left > 0:
            due = left + 0.05
            routed.wake_in = due if routed.wake_in is None else min(routed.wake_in, due)
        if held.get(host):
            routed.answers[host] = held[host]
        else:
            routed.waiting.add(host)
    for key, hosts in waits.items():
        at = table.settles_at(published, key, 90, now)
        routed.pending[key] = Pending(p.slots[key], len(hosts), at if at > now else None)
    return routed


ROUTE_KEYS = [DEFAULT_KEY, "gateway/web/a", "gateway/web/b", "ingressclass/x"]
NAMES_12 = [f"h{i}.example.com" for i in range(12)]


@given(routes=st.dictionaries(st.sampled_from(NAMES_12), st.sampled_from(ROUTE_KEYS)),
       addresses=st.dictionaries(st.sampled_from([1, 2, 3]), st.sampled_from(
           [("10.96.0.51",), ("10.96.0.52", "fd00::52"), ("nope",), ()])),
       published=st.dictionaries(st.sampled_from(ROUTE_KEYS[1:]), st.sampled_from([0.0, 150.0])),
       held=st.dictionaries(st.sampled_from(NAMES_12), st.sampled_from([A, B, corefile.Answers()])),
       apart=st.booleans())
def test_route_answers_are_those_of_the_plain_algorithm(
        routes: dict[str, str], addresses: dict[int, tuple[str, ...]],
        published: dict[str, float], held: dict[str, corefile.Answers], apart: bool) -> None:
    """Settled, settling and Service-less slots, bad addresses, with and without the routes
    to other targets kept apart: the answers (in order), the waiting hosts, the pending
    targets and the wake-up are those of the host-by-host algorithm."""
    p = Plan(routes=routes, slots={k: i for i, k in enumerate(ROUTE_KEYS[1:], 1)})
    slotted = {h: k for h, k in routes.items() if k != DEFAULT_KEY} if apart else None
    got = route_answers(p, slot_addresses=addresses, published=published, settle=90,
                        now=200.0, dns_ttl=10, held_answers=lambda: held, slotted=slotted)
    want = plain_route_answers(p, addresses, published, now=200.0, held=held, slotted=slotted)
    assert list(got.answers.items()) == list(want.answers.items())
    assert (got.waiting, got.pending, got.wake_in) == (want.waiting, want.pending, want.wake_in)


@given(before=st.dictionaries(st.sampled_from(NAMES_12), st.sampled_from(ROUTE_KEYS)),
       moves=st.dictionaries(st.sampled_from(NAMES_12), st.sampled_from([*ROUTE_KEYS, None])),
       also=st.sets(st.sampled_from(NAMES_12)),
       addresses=st.sampled_from([{1: ("10.96.0.51",), 2: ("10.96.0.52",), 3: ("fd00::53",)},
                                  {1: ("10.96.0.51",), 2: ("10.96.0.52",)}]),
       readdressed=st.booleans())
def test_route_answers_from_the_last_pass_are_those_made_afresh(
        before: dict[str, str], moves: dict[str, str | None], also: set[str],
        addresses: dict[int, tuple[str, ...]], readdressed: bool) -> None:
    """Given the last pass's routing and every host whose route may have changed since (the
    moved ones, and any others), the answers are those made without it; where no such host
    is routed to a slot, then or now, and the slots answer as they did, they are the very
    map of the last pass."""
    slots = {k: i for i, k in enumerate(ROUTE_KEYS[1:], 1)}
    now = {h: k for h, k in {**before, **moves}.items() if k is not None}

    def routing(routes: dict[str, str], addresses: dict[int, tuple[str, ...]],
                last: tuple[Routed, set[str]] | None = None) -> Routed:
        slotted = {h: k for h, k in routes.items() if k != DEFAULT_KEY}
        return route_answers(Plan(routes=routes, slots=slots), slot_addresses=addresses,
                             published={}, settle=0, now=200.0, dns_ttl=10,
                             held_answers=dict, slotted=slotted, last=last)

    last = routing(before, addresses)
    now_addresses = {**addresses, 1: ("10.96.0.61",)} if readdressed else addresses
    changed = {h for h in {*before, *now} if before.get(h) != now.get(h)} | also
    got = routing(now, now_addresses, (last, changed))
    want = routing(now, now_addresses)
    assert got == want
    slotted = {h for routes in (before, now) for h, k in routes.items() if k != DEFAULT_KEY}
    if got.settled is not None and got.settled == last.settled and not changed & slotted:
        assert got.answers is last.answers
    else:
        assert got.answers is not last.answers
