"""route_hosts: accepted parents, attachable listeners, intersected names, and the notes."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.sources.gateway import hostnames
from hairpin_proxy.sources.gateway.model import (
    Gateway,
    GatewayClass,
    Route,
    parse_gateway,
    parse_gateway_class,
    parse_route,
)
from hairpin_proxy.sources.gateway.routes import index_gateways, route_hosts
from tests.sources.gateway import objects as o
from tests.sources.gateway.objects import CONTROLLER, accepted, listener, ref

KEY = "gateway/infra/gw"
LABELS = {"shop": {"env": "prod", "team": "web"}, "infra": {"env": "prod"}}


def _gw(obj: Any) -> Gateway:
    parsed = parse_gateway(obj)
    assert isinstance(parsed, Gateway), parsed
    return parsed


def _route(obj: Any) -> Route:
    parsed = parse_route(obj)
    assert isinstance(parsed, Route), parsed
    return parsed


def _classes(*objs: Any) -> dict[str, GatewayClass]:
    out = {}
    for obj in objs or (o.gateway_class(),):
        parsed = parse_gateway_class(obj)
        assert isinstance(parsed, GatewayClass)
        out[parsed.name] = parsed
    return out


def hosts_of(route: Any, *gateways: Any, classes: Mapping[str, GatewayClass] | None = None,
             served: tuple[str, ...] = (CONTROLLER,),
             labels: Mapping[str, Mapping[str, str]] = LABELS,
             ) -> tuple[dict[str, tuple[str, ...]], tuple[str, ...]]:
    gws = [_gw(g) for g in gateways] or [_gw(o.gateway())]
    return route_hosts(_route(route), index_gateways(gws),
                       _classes() if classes is None else classes, served, labels)


def test_plain_route() -> None:
    got, notes = hosts_of(o.route(hostnames=["b.example.com", "A.example.com"]))
    assert got == {KEY: ("a.example.com", "b.example.com")}
    assert notes == ()


def test_listener_hostname_alone() -> None:
    gw = o.gateway(listeners=[listener("http", hostname="*.example.com")])
    assert hosts_of(o.route(), gw) == ({KEY: ("*.example.com",)}, ())


def test_no_name_on_either_side() -> None:
    got, notes = hosts_of(o.route())
    assert got == {}
    assert len(notes) == 1
    assert "listener http has no hostname and the route no hostnames" in notes[0]
    assert notes[0].startswith("HTTPRoute shop/web: parent Gateway infra/gw")


@pytest.mark.parametrize(("status", "words"), [
    ([], "has not reported on it yet"),
    ([accepted(ref(), status="False", reason="NotAllowedByListeners")],
     "Accepted=False (NotAllowedByListeners)"),
    ([accepted(ref(), status="Unknown", reason="")], "Accepted=Unknown"),
    # Written by another controller: not the Gateway's word.
    ([accepted(ref(), controller="other.io/mesh")], "has not reported"),
    # For another parentRef of the route (a different listener).
    ([accepted(ref(sectionName="https"))], "has not reported"),
    ([{"parentRef": ref(), "controllerName": CONTROLLER,
       "conditions": [{"type": "ResolvedRefs", "status": "True"}]}], "no Accepted condition"),
])
def test_not_accepted(status: list[Any], words: str) -> None:
    got, notes = hosts_of(o.route(hostnames=["a.example.com"], status=status))
    assert got == {}
    assert len(notes) == 1 and "not accepted" in notes[0] and words in notes[0], notes


def test_first_status_entry_of_the_controller_decides() -> None:
    status = [accepted(ref(), controller="other.io/mesh", status="False"), accepted(ref())]
    assert hosts_of(o.route(hostnames=["a.example.com"], status=status))[0] == {
        KEY: ("a.example.com",)}


def test_status_parent_ref_defaults_match_spec_defaults() -> None:
    # The spec omits the namespace, the status spells out group and kind: the same reference.
    route = o.route(namespace="infra", hostnames=["a.example.com"],
                    parents=[ref(namespace=None)],
                    status=[accepted({"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                      "name": "gw", "namespace": "infra"})])
    assert hosts_of(route)[0] == {KEY: ("a.example.com",)}


def test_stale_acceptance_counts_with_a_note() -> None:
    route = o.route(hostnames=["a.example.com"], generation=5)
    got, notes = hosts_of(route)
    assert got == {KEY: ("a.example.com",)}
    assert len(notes) == 1 and "generation 1" in notes[0] and "at 5" in notes[0]
    # Without observedGeneration nothing can be said.
    fresh = o.route(hostnames=["a.example.com"], generation=5,
                    status=[accepted(ref(), observed=None)])
    assert hosts_of(fresh) == ({KEY: ("a.example.com",)}, ())


@pytest.mark.parametrize(("classes", "served", "words"), [
    ({}, (CONTROLLER,), "GatewayClass public does not exist"),
    (None, ("other.io/controller",), f"run by {CONTROLLER}, which is not served"),
    (None, (), "not served"),
])
def test_class_missing_or_not_served(classes: Any, served: tuple[str, ...], words: str) -> None:
    got, notes = hosts_of(o.route(hostnames=["a.example.com"]), classes=classes, served=served)
    assert got == {}
    assert len(notes) == 1 and words in notes[0], notes


def test_status_must_come_from_the_class_controller() -> None:
    # Both controllers are served, but the Gateway belongs to the first one's class.
    route = o.route(hostnames=["a.example.com"],
                    status=[accepted(ref(), controller="other.io/controller")])
    got, notes = hosts_of(route, served=(CONTROLLER, "other.io/controller"))
    assert got == {} and f"{CONTROLLER} has not reported" in notes[0]


def test_missing_gateway_and_other_parents() -> None:
    route = o.route(hostnames=["a.example.com"], parents=[
        ref(name="gone"), ref(group="", kind="Service", name="svc"),
        ref(kind="ListenerSet", name="ls"), ref()])
    got, notes = hosts_of(route)
    assert got == {KEY: ("a.example.com",)}
    assert len(notes) == 3
    assert "Gateway infra/gone: no such Gateway" in notes[0]
    assert "Service infra/svc: only Gateways and ListenerSets are followed" in notes[1]
    assert "ListenerSet infra/ls: no such ListenerSet" in notes[2]


LISTENERS = [
    listener("http", "HTTP", 80),
    listener("https", "HTTPS", 443),
    listener("tls", "TLS", 443),
    listener("tcp", "TCP", 9000),
    listener("alt", "HTTP", 8080, hostname="alt.example.com"),
]


@pytest.mark.parametrize(("kind", "extra", "names"), [
    ("HTTPRoute", {}, {"http", "https", "alt"}),
    ("GRPCRoute", {}, {"http", "https", "alt"}),
    ("TLSRoute", {}, {"tls"}),
    ("HTTPRoute", {"sectionName": "https"}, {"https"}),
    ("HTTPRoute", {"sectionName": "tls"}, set()),
    ("TLSRoute", {"sectionName": "tls"}, {"tls"}),
    ("HTTPRoute", {"port": 443}, {"https"}),
    ("HTTPRoute", {"port": 8080}, {"alt"}),
    ("TLSRoute", {"port": 443}, {"tls"}),
    ("HTTPRoute", {"port": 443, "sectionName": "https"}, {"https"}),
    ("HTTPRoute", {"port": 80, "sectionName": "https"}, set()),
    ("HTTPRoute", {"sectionName": "nope"}, set()),
])
def test_listener_selection(kind: str, extra: dict[str, Any], names: set[str]) -> None:
    # Each listener hostname-less except "alt"; give the route a host under alt's so every
    # attached listener yields a name, and tell listeners apart by a per-listener host.
    gw = o.gateway(listeners=[{**lst, "hostname": f"{lst['name']}.example.com"}
                              for lst in LISTENERS])
    got, notes = hosts_of(o.route(kind=kind, parents=[ref(**extra)]), gw)
    assert set(got.get(KEY, ())) == {f"{n}.example.com" for n in names}
    assert bool(notes) == (not names)
    if not names:
        assert "no listener takes it" in notes[0]


def test_refusal_reasons_are_listed() -> None:
    gw = o.gateway(listeners=[listener("tls", "TLS", 443),
                              listener("named", hostname="b.example.com"),
                              listener("kinds", kinds=[{"kind": "GRPCRoute"}])])
    _, notes = hosts_of(o.route(hostnames=["a.example.com"]), gw)
    (note,) = notes
    assert "listener tls: protocol TLS does not carry HTTPRoute" in note
    assert "listener named: hostname b.example.com matches none" in note
    assert "listener kinds: allowedRoutes.kinds does not list HTTPRoute" in note
    _, notes = hosts_of(o.route(hostnames=["a.example.com"], parents=[ref(port=1)]))
    assert "no listener matches its sectionName/port" in notes[0]


@pytest.mark.parametrize(("kinds", "ok"), [
    ([{"kind": "HTTPRoute"}], True),
    ([{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}], True),
    ([{"kind": "GRPCRoute"}, {"kind": "HTTPRoute"}], True),
    ([{"group": "other.io", "kind": "HTTPRoute"}], False),
    ([{"kind": "GRPCRoute"}], False),
    ([], True),  # empty: whatever the protocol carries
])
def test_allowed_kinds(kinds: list[Any], ok: bool) -> None:
    gw = o.gateway(listeners=[listener("http", kinds=kinds)])
    got, _ = hosts_of(o.route(hostnames=["a.example.com"]), gw)
    assert (got == {KEY: ("a.example.com",)}) is ok


@pytest.mark.parametrize(("origin", "selector", "namespace", "ok"), [
    ("All", None, "shop", True),
    ("Same", None, "shop", False),
    ("Same", None, "infra", True),
    (None, None, "shop", False),  # default: Same
    (None, None, "infra", True),
    ("None", None, "infra", False),
    ("Selector", {"matchLabels": {"team": "web"}}, "shop", True),
    ("Selector", {"matchLabels": {"team": "web"}}, "infra", False),
    ("Selector", {}, "shop", True),  # the empty selector selects every namespace
    ("Selector", {}, "unlabelled", False),  # labels unknown: refused, never guessed
    ("Selector", {"matchExpressions": [{"key": "team", "operator": "Exists"}]}, "shop", True),
    ("Selector", {"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]},
     "shop", False),
    ("Selector", {"matchExpressions": [{"key": "env", "operator": "In",
                                        "values": ["prod"]}]}, "infra", True),
    ("Selector", {"matchExpressions": [{"key": "env", "operator": "NotIn",
                                        "values": ["prod"]}]}, "infra", False),
    ("Selector", {"matchExpressions": [{"key": "env", "operator": "Bogus"}]}, "shop", False),
    ("Selector", None, "shop", False),
])
def test_allowed_namespaces(origin: str | None, selector: Any, namespace: str,
                            ok: bool) -> None:
    gw = o.gateway(listeners=[listener("http", origin=origin, selector=selector)])
    got, notes = hosts_of(o.route(namespace=namespace, hostnames=["a.example.com"]), gw)
    assert (got == {KEY: ("a.example.com",)}) is ok
    if not ok:
        assert "no listener takes it" in notes[-1]


def test_conformance_hostname_intersection() -> None:
    # The HTTPRoute hostname-intersection conformance case: one Gateway, three listeners.
    gw = o.gateway(name="hi", namespace="conf", listeners=[
        listener("listener-1", hostname="very.specific.com", origin="Same"),
        listener("listener-2", hostname="*.wildcard.io", origin="Same"),
        listener("listener-3", hostname="*.anotherwildcard.io", origin="Same")])
    everything = o.gateway(name="all", namespace="conf", listeners=[
        listener("listener-1", origin="Same")])
    cases = {
        ("hi", "r1"): (["non.matching.com", "*.nonmatchingwildcard.io", "very.specific.com"],
                       ("very.specific.com",)),
        ("hi", "r2"): (["non.matching.com", "wildcard.io", "foo.wildcard.io", "bar.wildcard.io",
                        "foo.bar.wildcard.io"],
                       ("bar.wildcard.io", "foo.bar.wildcard.io", "foo.wildcard.io")),
        ("hi", "r3"): (["non.matching.com", "*.specific.com"], ("very.specific.com",)),
        ("hi", "r4"): (["*.anotherwildcard.io"], ("*.anotherwildcard.io",)),
        ("hi", "r5"): (["specific.but.wrong.com", "wildcard.io"], ()),
        ("all", "r6"): (["first.com", "sub.first.com", "second.com", "sub.second.com"],
                        ("first.com", "second.com", "sub.first.com", "sub.second.com")),
    }
    for (parent, name), (names, expected) in cases.items():
        route = o.route(name=name, namespace="conf", hostnames=names,
                        parents=[ref(name=parent, namespace="conf")])
        got, _ = hosts_of(route, gw, everything)
        assert got == ({f"gateway/conf/{parent}": expected} if expected else {}), name


def test_several_parents_and_gateways() -> None:
    one = o.gateway(name="one", listeners=[listener("a", hostname="*.example.com"),
                                           listener("b", "HTTPS", 443,
                                                    hostname="x.example.org")])
    two = o.gateway(name="two", namespace="edge", listeners=[listener("a")])
    route = o.route(hostnames=["a.example.com", "x.example.org", "*.example.org"],
                    parents=[ref(name="one", sectionName="a"),
                             ref(name="one", sectionName="b"),
                             ref(name="two", namespace="edge")])
    got, notes = hosts_of(route, one, two)
    assert got == {"gateway/edge/two": ("*.example.org", "a.example.com", "x.example.org"),
                   "gateway/infra/one": ("a.example.com", "x.example.org")}
    assert notes == ()


def test_route_notes_are_passed_on() -> None:
    route = o.route(hostnames=["a.example.com"], parents=[ref(), {"kind": "Gateway"}],
                    status=[accepted(ref())])
    got, notes = hosts_of(route)
    assert got == {KEY: ("a.example.com",)}
    assert len(notes) == 1 and notes[0].startswith("HTTPRoute shop/web: spec.parentRefs[1]")


# --- properties ------------------------------------------------------------------------------

HOST = st.one_of(
    st.lists(st.sampled_from(("a", "b", "example")), min_size=1, max_size=3).map(".".join),
    st.lists(st.sampled_from(("a", "b", "example")), min_size=1, max_size=2).map(
        lambda xs: "*." + ".".join(xs)))
LISTENER = st.builds(
    lambda i, proto, port, host, origin, kinds: listener(
        f"l{i}", proto, port, hostname=host, origin=origin, kinds=kinds,
        selector={"matchLabels": {"team": "web"}} if origin == "Selector" else None),
    st.integers(0, 3), st.sampled_from(["HTTP", "HTTPS", "TLS", "TCP"]),
    st.sampled_from([80, 443]), st.one_of(st.none(), HOST),
    st.sampled_from(["All", "Same", "Selector", "None", None]),
    st.one_of(st.none(), st.sampled_from([[{"kind": "HTTPRoute"}], [{"kind": "TLSRoute"}]])))
PARENT = st.fixed_dictionaries({"name": st.just("gw")}, optional={
    "sectionName": st.sampled_from(["l0", "l1", "l2"]), "port": st.sampled_from([80, 443])})


@settings(max_examples=300, deadline=None)
@given(listeners=st.lists(LISTENER, max_size=4),
       kind=st.sampled_from(["HTTPRoute", "GRPCRoute", "TLSRoute"]),
       names=st.lists(HOST, max_size=3), parents=st.lists(PARENT, min_size=1, max_size=2),
       namespace=st.sampled_from(["shop", "infra"]), rnd=st.randoms())
def test_every_name_is_an_intersection(*, listeners: list[Any], kind: str, names: list[str],
                                       parents: list[Any], namespace: str,
                                       rnd: random.Random) -> None:
    gw_obj = o.gateway(listeners=listeners)
    for p in parents:
        p["namespace"] = "infra"
    route = o.route(kind=kind, namespace=namespace, hostnames=names, parents=parents)
    got, _ = hosts_of(route, gw_obj)
    assert set(got) <= {KEY}
    gw = _gw(gw_obj)
    for name in got.get(KEY, ()):
        assert name != hostnames.ANY
        # Within some listener's hostname (or a hostname-less listener) and within some route
        # hostname (or the route has none).
        assert any(x.hostname is None or hostnames.covers(x.hostname, name)
                   for x in gw.listeners)
        assert not names or any(hostnames.covers(n, name) for n in names)
    # Listener order and route hostname order do not matter.
    rnd.shuffle(listeners)
    rnd.shuffle(names)
    again, _ = hosts_of(o.route(kind=kind, namespace=namespace, hostnames=names,
                                parents=parents), o.gateway(listeners=listeners))
    assert again == got
    # Withdrawing acceptance withdraws every name.
    refused = o.route(kind=kind, namespace=namespace, hostnames=names, parents=parents,
                      status=[accepted(p, status="False") for p in parents])
    assert hosts_of(refused, gw_obj)[0] == {}
