"""The incremental plan (plan/incremental.py) equals the full plan after every event: random
sequences of objects added, changed and deleted (Ingresses, HTTPRoutes, the Gateway, the
IngressClass), hosts shared and conflicting between them, data planes with and without a
slot, too few slots, a rules budget, each snapshot given to one ``Planner`` in turn and to
``plan`` afresh."""

from __future__ import annotations

import copy
import dataclasses
import gc
import json
import operator
import weakref
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.plan import PlanSettings, Snapshot, plan
from hairpin_proxy.plan.core import DesiredState
from hairpin_proxy.plan.incremental import Planner, _changes
from hairpin_proxy.plan.objects import snapshot_of
from hairpin_proxy.plan.snapshot import Rooms
from hairpin_proxy.policy import HostPolicy
from hairpin_proxy.targets import table
from hairpin_proxy.targets.slots import listen_ports

CORPUS = Path(__file__).parent / "plan_corpus"
ENVOY = "gateway.envoyproxy.io/gatewayclass-controller"
HOSTS = [*(f"h{i}.example.com" for i in range(6)), "*.example.com", "a.b.example.com",
         "localhost", "h1.other.org"]
TIMES = ["2026-01-01T00:00:00Z", "2026-01-01T00:00:00+00:00", "2026-01-02T00:00:00Z",
         "not a time"]
Key = tuple[str, str, str]
RELIST: Key = ("", "", "relist")


def corpus_object(kind: str) -> dict[str, Any]:
    case = yaml.safe_load((CORPUS / "10-gateway-envoy.yaml").read_text())
    found: dict[str, Any] = next(o for o in case["objects"] if o["kind"] == kind)
    return found


def base_objects() -> list[dict[str, Any]]:
    """ingress-nginx's and Envoy Gateway's Services, the proxy's Service and its first slot's;
    what the events add, change and delete (the IngressClass, the Gateway, the settings that
    turn PROXY on) left out."""
    case = yaml.safe_load((CORPUS / "10-gateway-envoy.yaml").read_text())
    objs = [o for o in case["objects"] if o["kind"] not in (
        "IngressClass", "Gateway", "HTTPRoute", "ConfigMap", "ClientTrafficPolicy")]
    for i, svc in enumerate(o for o in objs if o["kind"] == "Service"):
        # As the cluster holds them: with their ClusterIPs.
        svc["spec"]["clusterIPs"] = [f"10.96.1.{i + 1}"]
    proxy = {"apiVersion": "v1", "kind": "Service",
             "metadata": {"namespace": "hairpin-proxy", "name": "hairpin-proxy"},
             "spec": {"clusterIP": "10.96.0.50", "clusterIPs": ["10.96.0.50"]}}
    slot = {"apiVersion": "v1", "kind": "Service",
            "metadata": {"namespace": "hairpin-proxy", "name": "hairpin-proxy-t1"},
            "spec": {"clusterIP": "10.96.0.51", "clusterIPs": ["10.96.0.51"]}}
    return [*objs, proxy, slot]


def meta(ns: str | None, name: str, created: str, uid: int) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "uid": f"{name}-{uid}", "creationTimestamp": created}
    if ns is not None:
        out["namespace"] = ns
    return out


def ingress(ns: str, name: str, hosts: list[str], cls: str | None, *, created: str,
            uid: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"tls": [{"hosts": hosts}],
                            "rules": [{"host": h} for h in hosts[:1]]}
    if cls is not None:
        spec["ingressClassName"] = cls
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": meta(ns, name, created, uid), "spec": spec}


def route(ns: str, name: str, hosts: list[str], created: str, uid: int) -> dict[str, Any]:
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": meta(ns, name, created, uid),
            "spec": {"hostnames": hosts, "parentRefs": [{"name": "public", "namespace": "web"}]},
            "status": {"parents": [{
                "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                              "name": "public", "namespace": "web"},
                "controllerName": ENVOY,
                "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                                "observedGeneration": 1}]}]}}


def gateway(hostname: str | None, selector: bool = False) -> dict[str, Any]:
    """The Gateway every route attaches to: admitting routes of every namespace, or (with
    ``selector``) of namespaces labelled team=web."""
    spaces: dict[str, Any] = {"from": "All"}
    if selector:
        spaces = {"from": "Selector", "selector": {"matchLabels": {"team": "web"}}}
    listener: dict[str, Any] = {"name": "http", "port": 80, "protocol": "HTTP",
                                "allowedRoutes": {"namespaces": spaces}}
    if hostname is not None:
        listener["hostname"] = hostname
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": meta("web", "public", TIMES[0], 0),
            "spec": {"gatewayClassName": "eg", "listeners": [listener]}}


def namespace(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": f"ns-{name}", "labels": labels}}


def nginx_settings(proxy: str) -> dict[str, Any]:
    cm = corpus_object("ConfigMap")
    cm["data"] = {"use-proxy-protocol": proxy}
    return cm


def slot_table(key: str | None) -> dict[str, Any]:
    """The targets ConfigMap with ``key`` (if any) in slot 2, published long ago."""
    entries = [] if key is None else [table.TableEntry(
        key, 2, listen_ports(2), "web.example.svc.cluster.local", (80, 443), (80, 443), "",
        "v1")]
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": "hairpin-proxy", "name": "hairpin-proxy-targets"},
            "data": {table.TABLE_KEY: table.encode(entries),
                     table.PUBLISHED_KEY: json.dumps({key: 1.0} if key else {})}}


def ingress_class(default: bool) -> dict[str, Any]:
    cls = copy.deepcopy(corpus_object("IngressClass"))
    cls["metadata"]["annotations"] = {
        "ingressclass.kubernetes.io/is-default-class": "true" if default else "false"}
    return cls


names = st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["x0", "x1", "x2", "x3"]))
hosts = st.lists(st.sampled_from(HOSTS), min_size=0, max_size=3)
times = st.sampled_from(TIMES)
uids = st.integers(0, 2)
events = st.one_of(
    st.builds(lambda n, h, c, t, u: (("Ingress", *n), ingress(n[0], n[1], h, c, created=t, uid=u)),
              names, hosts, st.sampled_from([None, "nginx", "other"]), times, uids),
    st.builds(lambda n, h, t, u: (("HTTPRoute", *n), route(n[0], n[1], h, t, u)),
              names, hosts, times, uids),
    st.builds(lambda n: (("Ingress", *n), None), names),
    st.builds(lambda n: (("HTTPRoute", *n), None), names),
    st.builds(lambda h, sel: (("Gateway", "web", "public"), gateway(h, sel)),
              st.sampled_from([None, "*.example.com", "h1.example.com"]), st.booleans()),
    # Namespaces made, relabelled and deleted: they decide only under a selector.
    st.builds(lambda n, lb: (("Namespace", "", n), namespace(n, lb)),
              st.sampled_from(["a", "b"]), st.sampled_from([{}, {"team": "web"}])),
    st.builds(lambda n: (("Namespace", "", n), None), st.sampled_from(["a", "b"])),
    st.builds(lambda d: (("IngressClass", "", "nginx"), ingress_class(d)), st.booleans()),
    st.just((("IngressClass", "", "nginx"), None)),
    st.just((("Gateway", "web", "public"), None)),
    # What changes a target's outcome without changing any claim.
    st.builds(lambda v: (("ConfigMap", "ingress-nginx", "settings"), nginx_settings(v)),
              st.sampled_from(["true", "false"])),
    st.just((("ConfigMap", "ingress-nginx", "settings"), None)),
    st.just((("ClientTrafficPolicy", "web", "proxy"), corpus_object("ClientTrafficPolicy"))),
    st.just((("ClientTrafficPolicy", "web", "proxy"), None)),
    st.builds(lambda k: (("ConfigMap", "hairpin-proxy", "targets"), slot_table(k)),
              st.sampled_from([None, "gateway/web/public", "ingressclass/nginx"])),
    # A relist: every object anew, equal to the one before.
    st.just((RELIST, None)),
)
plan_settings = st.builds(
    lambda server, slots, budget, settle: (PlanSettings(
        HostPolicy(), settle=settle, max_targets=slots,
        target_server="ingress-nginx-controller.ingress-nginx.svc.cluster.local" if server
        else ""), budget),
    st.booleans(), st.sampled_from([0, 1, 32]), st.sampled_from([None, 2000, 1 << 20]),
    st.sampled_from([0.0, 90.0]))


def snapshot(base: list[dict[str, Any]], state: dict[Key, dict[str, Any]], s: PlanSettings,
             budget: int | None) -> Snapshot:
    snap = snapshot_of([*base, *state.values()], s, targets_configmap="hairpin-proxy-targets",
                       now=1000.0)
    if budget is None:
        return snap
    return Snapshot(**{**snap.__dict__, "rooms": Rooms(budget, "kube-system/coredns")})


def numbered(stop: int, start: int = 0, created: str = TIMES[0]) -> dict[Key, dict[str, Any]]:
    """Ingresses ``x<i>`` in namespace ``a``, each asking for ``h<i>.example.com``."""
    return {("Ingress", "a", f"x{i}"): ingress("a", f"x{i}", [f"h{i}.example.com"], None,
                                               created=created, uid=i)
            for i in range(start, stop)}


def same(inc: DesiredState, full: DesiredState) -> None:
    assert inc.routed == full.routed
    # The incremental plan's per-host maps are views read from its claims: each host asked
    # (those it has, those the other has, and the forms a wildcard may take) as the dicts.
    wild = [f"*{h}" for h in HOSTS if h.startswith("*.")]
    for host in {*inc.plan.origins, *full.plan.origins, *inc.plan.routes, *HOSTS, *wild}:
        assert inc.plan.origins.get(host) == full.plan.origins.get(host)
        assert inc.plan.routes.get(host) == full.plan.routes.get(host)
        assert (host in inc.plan.origins, host in inc.plan.routes) == \
            (host in full.plan.origins, host in full.plan.routes)
    assert len(inc.plan.origins) == len(full.plan.origins)
    assert list(inc.plan.routes) == sorted(full.plan.routes)
    assert inc.hosts == full.hosts
    assert inc.default_answers == full.default_answers
    assert inc.unverified == full.unverified
    assert inc.missing_services == full.missing_services
    assert inc.metrics == full.metrics
    assert inc.candidates == full.candidates
    assert inc.fitted == full.fitted
    # Sets in all but type: compared as such.
    assert Counter(map(repr, inc.claims)) == Counter(map(repr, full.claims))
    # The incremental plan's claims are a view: its length and items are those it iterates.
    assert len(inc.claims) == len(full.claims)
    assert [inc.claims[i] for i in range(len(inc.claims))] == list(inc.claims) == [*inc.claims[:]]
    assert Counter(map(repr, inc.refusals)) == Counter(map(repr, full.refusals))


@settings(max_examples=200, deadline=None)
@given(plan_settings, st.lists(events, min_size=3, max_size=40))
def test_the_incremental_plan_equals_the_full_plan_after_every_event(
        chosen: tuple[PlanSettings, int | None],
        sequence: list[tuple[Key, dict[str, Any] | None]]) -> None:
    s, budget = chosen
    base = base_objects()
    state: dict[Key, dict[str, Any]] = {}
    planner = Planner()
    for version, (key, obj) in enumerate(sequence):
        if key == RELIST:
            state = {k: copy.deepcopy(o) for k, o in state.items()}
        elif obj is None:
            state.pop(key, None)
        else:
            # Each change its own resourceVersion, as the API gives it.
            state[key] = copy.deepcopy(obj)
            state[key]["metadata"]["resourceVersion"] = str(version)
        snap = snapshot(base, state, s, budget)
        same(planner.plan(snap), plan(snap))


def test_an_unchanged_snapshot_re_plans_no_host() -> None:
    """The second pass over the same objects makes no claim again (what the incremental
    form is for), and still gives the same answer."""
    s = PlanSettings(HostPolicy(), settle=0.0)
    state: dict[Key, dict[str, Any]] = {
        ("Ingress", "a", f"x{i}"): ingress("a", f"x{i}", [f"h{i}.example.com"], None,
                                           created=TIMES[0], uid=0) for i in range(3)}
    base = base_objects()
    planner = Planner()
    first = planner.plan(snapshot(base, state, s, None))
    made, read = list(planner._ingresses.made), planner.ingresses_read
    again = planner.plan(snapshot(base, state, s, None))
    assert all(map(operator.is_, planner._ingresses.made, made))
    assert planner.ingresses_read == read
    assert again.hosts == first.hosts == ("h0.example.com", "h1.example.com", "h2.example.com")


def test_namespaces_re_read_routes_only_under_a_namespace_selector() -> None:
    """A namespace made or relabelled reads no route again while no Gateway admits routes
    by namespace selector; under one, it decides which routes attach."""
    s = PlanSettings(HostPolicy(), settle=0.0)
    state: dict[Key, dict[str, Any]] = {
        ("HTTPRoute", ns, f"r{i}"): route(ns, f"r{i}", [f"h{i}.example.com"], TIMES[0], 0)
        for i, ns in enumerate(["a", "b", "a"])}
    state[("Gateway", "web", "public")] = gateway(None)
    # Envoy Gateway with PROXY on: the routes' hosts are redirected.
    state[("ClientTrafficPolicy", "web", "proxy")] = corpus_object("ClientTrafficPolicy")
    base = base_objects()
    planner = Planner()
    first = planner.plan(snapshot(base, state, s, None))
    assert len(first.hosts) == 3
    read = planner.routes_read
    state[("Namespace", "", "a")] = namespace("a", {"team": "web"})
    again = planner.plan(snapshot(base, state, s, None))
    assert planner.routes_read == read
    assert again.hosts == first.hosts == plan(snapshot(base, state, s, None)).hosts
    state[("Gateway", "web", "public")] = gateway(None, selector=True)
    selected = planner.plan(snapshot(base, state, s, None))
    assert selected.hosts == plan(snapshot(base, state, s, None)).hosts
    read = planner.routes_read
    state[("Namespace", "", "b")] = namespace("b", {"team": "web"})
    both = planner.plan(snapshot(base, state, s, None))
    assert planner.routes_read > read
    assert set(both.hosts) - set(selected.hosts) == {"h1.example.com"}
    assert both.hosts == plan(snapshot(base, state, s, None)).hosts


def test_a_host_whose_claims_go_from_one_to_several_and_back() -> None:
    """A name's claims move between the lone-claim form and the several-claims form (with
    its decision) as objects come and go: its origins, route and losers are the full
    plan's at each step, and the host an Ingress's "*.d" and a route's "**.d" are decided
    as follows the winner."""
    s = PlanSettings(HostPolicy(), settle=0.0)
    base = base_objects()
    state: dict[Key, dict[str, Any]] = {
        ("Gateway", "web", "public"): gateway(None),
        ("ClientTrafficPolicy", "web", "proxy"): corpus_object("ClientTrafficPolicy"),
        ("Ingress", "a", "x0"): ingress("a", "x0", ["h0.example.com", "*.example.com"], None,
                                        created=TIMES[2], uid=0)}
    steps: list[tuple[Key, dict[str, Any] | None]] = [
        # The same name for the same target: two origins.
        (("Ingress", "b", "x1"), ingress("b", "x1", ["h0.example.com"], None,
                                         created=TIMES[2], uid=1)),
        # Older, for another target: it wins, both Ingresses lose.
        (("HTTPRoute", "a", "r0"), route("a", "r0", ["h0.example.com", "*.example.com"],
                                         TIMES[0], 0)),
        (("Ingress", "a", "x0"), None),
        (("HTTPRoute", "a", "r0"), None),
        (("Ingress", "b", "x1"), None),
    ]
    planner = Planner()
    origins = []
    for version, (key, obj) in enumerate([(None, None), *steps]):
        if key is not None and obj is None:
            del state[key]
        elif key is not None and obj is not None:
            state[key] = {**obj, "metadata": {**obj["metadata"],
                                              "resourceVersion": str(version)}}
        snap = snapshot(base, state, s, None)
        inc, full = planner.plan(snap), plan(snap)
        same(inc, full)
        origins.append((len(inc.plan.origins.get("h0.example.com") or ()),
                        len(inc.plan.losers), "**.example.com" in inc.plan.origins))
    # (h0's origins, the losing claims, whether the wildcard is the route's any-depth one)
    assert origins == [(1, 0, False), (2, 0, False), (1, 3, True), (1, 1, True),
                       (1, 0, False), (0, 0, False)]


def test_objects_in_another_order_keep_what_they_made() -> None:
    """More objects than the positions are compared for, reordered with one gone and one
    changed: what each made follows it (none is read again but the changed one), and the
    plan is the full plan's."""
    s = PlanSettings(HostPolicy(), settle=0.0)
    base = base_objects()
    state: dict[Key, dict[str, Any]] = {}
    for i in range(80):
        state[("Ingress", "a", f"x{i}")] = ingress("a", f"x{i}", [f"h{i % 70}.example.com"],
                                                   None, created=TIMES[i % 3], uid=i)
        state[("Ingress", "a", f"x{i}")]["metadata"]["resourceVersion"] = "1"
    planner = Planner()
    same(planner.plan(snapshot(base, state, s, None)), plan(snapshot(base, state, s, None)))
    read = planner.ingresses_read
    order = list(reversed(state))
    del state[order.pop(3)]
    state[order[10]] = ingress("a", order[10][2], ["new.example.com"], None, created=TIMES[0],
                               uid=99)
    state[order[10]]["metadata"]["resourceVersion"] = "2"
    state = {k: state[k] for k in order}
    snap = snapshot(base, state, s, None)
    same(planner.plan(snap), plan(snap))
    assert planner.ingresses_read == read + 1


def test_changes_are_found_a_slice_at_a_time() -> None:
    """Where the objects of a list went (``_changes``): an object equal to the one at its
    place is none (a relist), one replaced or added is, a deletion shifts the rest, and past
    64 changes the objects are matched as a set."""
    old = [{"n": i} for i in range(1000)]
    assert _changes(old, copy.deepcopy(old)) == ([], [], None)
    now = copy.deepcopy(old)
    now[3], now[700] = {"n": -3}, {"n": -700}
    assert _changes(old, [*now, {"n": 1000}]) == ([3, 700], [3, 700, 1000], None)
    for at in (0, 5, 500, 998, 999):
        assert _changes(old, old[:at] + old[at + 1:]) == ([at], [], at)
    many = [{"n": -i} if i % 10 == 0 else o for i, o in enumerate(old)]
    gone, new, layout = _changes(old, many)
    assert gone == new == list(range(0, 1000, 10)) and layout == list(
        -1 if i % 10 == 0 else i for i in range(1000))


def test_a_relist_keeps_the_new_objects_and_the_refusals_where_they_are() -> None:
    """After a relist (every object anew, equal) the planner holds the new objects, not the
    old ones beside them; a refused Ingress deleted from the middle takes its refusal with
    it, and one refused after it keeps its own."""
    s = PlanSettings(HostPolicy(), settle=0.0)
    base = base_objects()
    state: dict[Key, dict[str, Any]] = {}
    for i in range(40):
        # Every tenth asks for a name the policy refuses.
        host = "localhost" if i % 10 == 5 else f"h{i}.example.com"
        state[("Ingress", "a", f"x{i}")] = ingress("a", f"x{i}", [host], None,
                                                   created=TIMES[0], uid=i)
    planner = Planner()
    planner.plan(snapshot(base, state, s, None))
    state = copy.deepcopy(state)
    snap = snapshot(base, state, s, None)
    same(planner.plan(snap), plan(snap))
    assert all(map(operator.is_, planner._ingresses.objs, snap.ingresses))
    del state[("Ingress", "a", "x15")]
    snap = snapshot(base, state, s, None)
    got = planner.plan(snap)
    same(got, plan(snap))
    assert sorted(r.name for r in got.refusals) == ["x25", "x35", "x5"]
    # x25 moved up a place: deleted now, its refusal goes with it.
    del state[("Ingress", "a", "x25")]
    snap = snapshot(base, state, s, None)
    got = planner.plan(snap)
    same(got, plan(snap))
    assert sorted(r.name for r in got.refusals) == ["x35", "x5"]


def test_new_objects_after_the_last_are_read_alone_and_no_snapshot_changes() -> None:
    """Objects added after the last ones (as a cache adds them) are the only ones read; the
    planner's own list grows in place, never a snapshot's; and a relist that brings one more
    object still leaves the planner holding the new objects, not the old ones."""
    s = PlanSettings(HostPolicy(), settle=0.0)
    base = base_objects()
    state: dict[Key, dict[str, Any]] = numbered(30)
    planner = Planner()
    first = snapshot(base, state, s, None)
    given = list(first.ingresses)
    planner.plan(first)
    kept = planner._ingresses.objs
    for i in range(30, 33):
        state[("Ingress", "a", f"x{i}")] = ingress("a", f"x{i}", [f"h{i}.example.com"], None,
                                                   created=TIMES[1], uid=i)
        snap = snapshot(base, state, s, None)
        read = planner.ingresses_read
        same(planner.plan(snap), plan(snap))
        assert planner.ingresses_read == read + 1
        assert planner._ingresses.objs is kept
        assert all(map(operator.is_, kept, snap.ingresses)) and len(kept) == len(snap.ingresses)
    assert first.ingresses == given and len(first.ingresses) == 30
    state = copy.deepcopy(state)
    state[("Ingress", "a", "x40")] = ingress("a", "x40", ["h40.example.com"], None,
                                             created=TIMES[1], uid=40)
    snap = snapshot(base, state, s, None)
    same(planner.plan(snap), plan(snap))
    assert all(map(operator.is_, planner._ingresses.objs, snap.ingresses))
    assert planner._ingresses.objs is not snap.ingresses


def test_a_plan_cut_short_leaves_the_next_one_whole(monkeypatch: Any) -> None:
    """A pass that fails after reading the claims (here: routing them) must not leave the
    next pass to start from claims read but never routed: the next plan equals the full one."""
    s = PlanSettings(HostPolicy(), settle=0.0)
    base = base_objects()
    state: dict[Key, dict[str, Any]] = {
        ("Ingress", "a", "x"): ingress("a", "x", ["one.example.com"], None, created=TIMES[0],
                                       uid=0)}
    planner = Planner()
    planner.plan(snapshot(base, state, s, None))
    state[("Ingress", "a", "x")] = ingress("a", "x", ["two.example.com"], None,
                                           created=TIMES[0], uid=0)
    state[("Ingress", "a", "x")]["metadata"]["resourceVersion"] = "2"
    changed = snapshot(base, state, s, None)

    def broken(self: Planner, snap: Snapshot, touched: object) -> object:
        raise RuntimeError("cut short")

    with monkeypatch.context() as m:
        m.setattr(Planner, "_plan", broken)
        try:
            planner.plan(changed)
        except RuntimeError:
            pass
        else:
            raise AssertionError("the broken pass did not fail")
    again = planner.plan(changed)
    same(again, plan(changed))
    assert again.hosts == ("two.example.com",)


def test_ingresses_read_ahead_are_not_read_again_by_the_first_pass() -> None:
    """Ingresses read ahead of the first pass (``prime``, as their list comes in, in its
    order) are taken by it where the very object is at its place and its IngressClasses are
    the same, and the plan is the plain one; an Ingress changed since, or one read against
    other classes, is read anew; after the first pass nothing is read ahead."""
    s = PlanSettings(HostPolicy(), settle=0.0)
    base = base_objects()
    state: dict[Key, dict[str, Any]] = numbered(10)
    listed = snapshot(base, state, s, None)
    planner = Planner()
    planner.prime(s, listed.ingress_classes, listed.ingresses[:6], 0)
    planner.prime(s, listed.ingress_classes, listed.ingresses[6:], 6)
    assert planner.ingresses_read == 10
    changed = copy.deepcopy(listed.ingresses[1])
    changed["spec"]["tls"][0]["hosts"] = ["other.example.com"]
    now = [*listed.ingresses[:1], changed, *listed.ingresses[2:]]
    snap = dataclasses.replace(listed, ingresses=now)
    same(planner.plan(snap), plan(snap))
    # x1 changed since: read again; the others taken.
    assert planner.ingresses_read == 10 + 1
    planner.prime(s, listed.ingress_classes, [ingress("a", "late", ["late.example.com"], None,
                                                      created=TIMES[0], uid=99)], 0)
    assert planner.ingresses_read == 11

    other = Planner()
    other.prime(s, [ingress_class(True)], listed.ingresses, 0)
    same(other.plan(listed), plan(listed))
    assert other.ingresses_read == 20


def test_routes_read_ahead_are_taken_by_the_first_pass_where_nothing_changed() -> None:
    """Routes read ahead of the first pass (``prime_routes``, from a snapshot of the Gateway
    API objects alone) are taken by it where the very route is at its place and its Gateways
    are the same, and the plan is the plain one; a route changed since is read anew, and
    routes read against another Gateway are all read again; after the first pass nothing is
    read ahead."""
    s = PlanSettings(HostPolicy(), settle=0.0)
    state: dict[Key, dict[str, Any]] = {
        ("HTTPRoute", "a", f"r{i}"): route("a", f"r{i}", [f"h{i}.example.com"], TIMES[0], i)
        for i in range(4)}
    state[("Gateway", "web", "public")] = gateway(None)
    state[("ClientTrafficPolicy", "web", "proxy")] = corpus_object("ClientTrafficPolicy")
    base = base_objects()
    listed = snapshot(base, state, s, None)
    gateway_api = {f: getattr(listed, f) for f in (
        "gateway_classes", "gateways", "routes", "listener_sets", "namespace_labels")}
    planner = Planner()
    assert planner.prime_routes(Snapshot(s, **gateway_api)) == []
    assert planner.routes_read == 4
    changed = copy.deepcopy(listed.routes[1][1])
    changed["spec"]["hostnames"] = ["moved.example.com"]
    now = [*listed.routes[:1], (listed.routes[1][0], changed), *listed.routes[2:]]
    snap = dataclasses.replace(listed, routes=now)
    first = planner.plan(snap)
    same(first, plan(snap))
    assert "moved.example.com" in first.hosts and len(first.hosts) == 4
    assert planner.routes_read == 4 + 1
    planner.prime_routes(Snapshot(s, **gateway_api))
    assert planner.routes_read == 5

    other = Planner()
    other.prime_routes(Snapshot(s, **{**gateway_api, "gateways": [gateway(None, selector=True)]}))
    same(other.plan(listed), plan(listed))
    assert other.routes_read == 4 + 4


@pytest.mark.parametrize("parts", [
    # (from, to) of each prime, in the order given: a gap, a part read again, a late start.
    [(3, 10)], [(0, 4), (6, 10)], [(0, 6), (2, 10)], [(0, 10), (0, 3)], [(5, 8), (0, 2)]])
def test_what_is_read_ahead_is_taken_at_its_place_in_the_list(
        parts: list[tuple[int, int]]) -> None:
    """Each part read ahead says where in the list its first object is: the first pass takes
    what was made for the objects at those places, reads the others (the places skipped, or
    cut off by a part that starts earlier), and its plan is the plain one."""
    s = PlanSettings(HostPolicy(), settle=0.0)
    listed = snapshot(base_objects(), numbered(10), s, None)
    planner = Planner()
    held: list[int | None] = []
    for start, end in parts:
        planner.prime(s, listed.ingress_classes, listed.ingresses[start:end], start)
        del held[start:]
        held.extend([None] * (start - len(held)))
        held.extend(range(start, end))
    read_ahead = planner.ingresses_read
    same(planner.plan(listed), plan(listed))
    taken = sum(1 for at, i in enumerate(held) if i == at)
    assert planner.ingresses_read == read_ahead + 10 - taken



def test_a_replaced_state_is_freed_when_the_caller_lets_it_go() -> None:
    """The state a pass replaces stays until ``let_go`` (the controller calls it once its
    write is out), or two passes on where nobody does."""
    s = PlanSettings(HostPolicy(), settle=0.0)
    base = base_objects()
    state: dict[Key, dict[str, Any]] = {}
    planner = Planner()
    refs = []
    for i in range(4):
        state[("Ingress", "a", f"x{i}")] = ingress("a", f"x{i}", [f"h{i}.example.com"], None,
                                                   created=TIMES[0], uid=i)
        refs.append(weakref.ref(planner.plan(snapshot(base, state, s, None))))
    gc.collect()
    assert [r() is None for r in refs] == [True, False, False, False]
    planner.let_go()
    gc.collect()
    assert [r() is None for r in refs] == [True, True, True, False]


def test_the_very_list_of_the_last_pass_extended_or_not() -> None:
    """A caller may hand the same list again, extended since (as the controller's Ingress
    cache grows): the new objects alone are read; handed again as long, nothing is."""
    s = PlanSettings(HostPolicy(), settle=0.0)
    base = base_objects()
    state: dict[Key, dict[str, Any]] = numbered(5)
    snap = snapshot(base, state, s, None)
    kept = list(snap.ingresses)
    snap = dataclasses.replace(snap, ingresses=kept)
    planner = Planner()
    planner.plan(snap)
    read = planner.ingresses_read
    for i in range(5, 8):
        kept.append(ingress("a", f"x{i}", [f"h{i}.example.com"], None, created=TIMES[0], uid=i))
        fresh = dataclasses.replace(snap, ingresses=list(kept))
        same(planner.plan(snap), plan(fresh))
        assert planner.ingresses_read == read + i - 4
        same(planner.plan(snap), plan(fresh))
        assert planner.ingresses_read == read + i - 4
