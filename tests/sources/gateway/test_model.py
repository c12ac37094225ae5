"""Parsing Gateway API objects: what is read, the API's defaults, and malformed input."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.sources.gateway.listenersets import ListenerSet, parse_listener_set
from hairpin_proxy.sources.gateway.model import (
    Condition,
    Gateway,
    GatewayClass,
    LabelSelector,
    Listener,
    Malformed,
    Meta,
    ParentRef,
    ParentStatus,
    Requirement,
    Route,
    RouteKind,
    gateway_key,
    parse_gateway,
    parse_gateway_class,
    parse_route,
)
from tests.sources.gateway import objects as o
from tests.sources.gateway.objects import JSON, SAMPLES, paths, replace


def _gw(obj: Any) -> Gateway:
    parsed = parse_gateway(obj)
    assert isinstance(parsed, Gateway), parsed
    return parsed


def _route(obj: Any, kind: str | None = None) -> Route:
    parsed = parse_route(obj, kind)
    assert isinstance(parsed, Route), parsed
    return parsed


def _bad(parsed: object, *words: str) -> Malformed:
    assert isinstance(parsed, Malformed), parsed
    for word in words:
        assert word in parsed.reason, parsed.reason
    return parsed


def test_gateway_fields() -> None:
    gw = _gw(o.gateway(listeners=[
        o.listener("http", hostname="*.Example.com"),
        o.listener("tls", protocol="TLS", port=8443, origin="Selector",
                   selector={"matchLabels": {"env": "prod"},
                             "matchExpressions": [{"key": "tier", "operator": "In",
                                                   "values": ["b", "a", "a"]}]},
                   kinds=[{"kind": "TLSRoute"}, {"group": "other.io", "kind": "TLSRoute"}]),
        o.listener("plain", origin=None)]))
    assert gw.meta == Meta(namespace="infra", name="gw", uid="uid-gw-gw",
                           created="2024-02-01T00:00:00Z", generation=3)
    assert gw.class_name == "public"
    assert gw.key == gateway_key("infra", "gw") == "gateway/infra/gw"
    assert gw.listeners == (
        Listener(name="http", port=80, protocol="HTTP", hostname="*.example.com",
                 namespaces_from="All"),
        Listener(name="tls", port=8443, protocol="TLS", namespaces_from="Selector",
                 selector=LabelSelector(match_labels=(("env", "prod"),), match_expressions=(
                     Requirement("tier", "In", ("a", "b")),)),
                 kinds=(RouteKind("TLSRoute"), RouteKind("TLSRoute", "other.io"))),
        # allowedRoutes absent: the API's default, Same.
        Listener(name="plain", port=80, protocol="HTTP", namespaces_from="Same"))
    assert gw.notes == ()


def test_gateway_class_fields() -> None:
    assert parse_gateway_class(o.gateway_class()) == GatewayClass(
        name="public", controller_name=o.CONTROLLER, uid="uid-class-public")
    _bad(parse_gateway_class({"metadata": {"name": "x"}, "spec": {}}), "controllerName")
    _bad(parse_gateway_class({"metadata": {"name": "x"}}), "spec")
    _bad(parse_gateway_class("x"), "the object")


@pytest.mark.parametrize(("bad", "words"), [
    ({"port": 0}, ("port",)), ({"port": 65536}, ("port",)), ({"port": True}, ("port",)),
    ({"port": "80"}, ("port",)), ({"protocol": ""}, ("protocol",)),
    ({"name": 3}, ("name",)), ({"hostname": "*"}, ("hostname",)),
    ({"hostname": "10.0.0.1"}, ("IP address",)), ({"hostname": "a..b"}, ("hostname",)),
    ({"allowedRoutes": {"namespaces": {"from": "Everywhere"}}}, ("from",)),
    ({"allowedRoutes": {"namespaces": "All"}}, ("namespaces",)),
    ({"allowedRoutes": {"kinds": [{"group": "x"}]}}, ("kind",)),
    ({"allowedRoutes": {"kinds": "HTTPRoute"}}, ("kinds",)),
])
def test_bad_listener_is_dropped_with_a_note(bad: dict[str, Any], words: tuple[str, ...]) -> None:
    broken = {**o.listener("broken"), **bad}
    gw = _gw(o.gateway(listeners=[o.listener("good"), broken, "nonsense"]))
    assert [x.name for x in gw.listeners] == ["good"]
    assert len(gw.notes) == 2
    assert all(w in gw.notes[0] for w in words), gw.notes
    assert "ignored" in gw.notes[0] and "listeners[2]" in gw.notes[1]


@pytest.mark.parametrize(("selector", "words"), [
    (None, ("without a selector",)),
    ("env=prod", ("selector must be an object",)),
    ({"matchLabels": {"env": 1}}, ("matchLabels",)),
    ({"matchExpressions": [{"key": "env", "operator": "Equals", "values": ["a"]}]},
     ("operator",)),
    ({"matchExpressions": [{"key": "env", "operator": "In"}]}, ("needs values",)),
    ({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": []}]},
     ("needs values",)),
    ({"matchExpressions": [{"key": "env", "operator": "Exists", "values": ["x"]}]},
     ("takes no values",)),
    ({"matchExpressions": [{"operator": "Exists"}]}, ("key",)),
])
def test_bad_selector_selects_nothing(selector: Any, words: tuple[str, ...]) -> None:
    gw = _gw(o.gateway(listeners=[o.listener("s", origin="Selector", selector=selector)]))
    (only,) = gw.listeners
    assert only.namespaces_from == "Selector" and only.selector is None
    assert len(gw.notes) == 1 and "admits no namespace" in gw.notes[0]
    assert all(w in gw.notes[0] for w in words), gw.notes


@pytest.mark.parametrize(("mutate", "words"), [
    (lambda g: g.pop("metadata"), ("metadata",)),
    (lambda g: g["metadata"].pop("namespace"), ("metadata.namespace",)),
    (lambda g: g["metadata"].update(name=""), ("metadata.name",)),
    (lambda g: g.pop("spec"), ("spec",)),
    (lambda g: g["spec"].pop("gatewayClassName"), ("gatewayClassName",)),
    (lambda g: g["spec"].update(listeners={"name": "x"}), ("spec.listeners must be a list",)),
    (lambda g: g["spec"].update(listeners=[o.listener("x")] * 65), ("more than 64",)),
])
def test_malformed_gateway(mutate: Any, words: tuple[str, ...]) -> None:
    obj = o.gateway()
    mutate(obj)
    bad = _bad(parse_gateway(obj), *words)
    assert bad.kind == "Gateway"


def test_malformed_names_where_it_can() -> None:
    obj = o.gateway()
    obj["spec"]["gatewayClassName"] = None
    assert str(parse_gateway(obj)).startswith("Gateway infra/gw: spec.gatewayClassName")
    assert str(parse_gateway([])).startswith("Gateway ?: the object must be an object")


def test_route_fields_and_defaults() -> None:
    obj = o.route(hostnames=["A.example.com", "*.example.com", "a.example.com"], parents=[
        o.ref(namespace=None),
        o.ref(sectionName="https", port=443),
        o.ref(sectionName=""),  # empty means unset
        o.ref(group="", kind="Service", name="svc"),
        o.ref(namespace=None),  # a repeat
        {"name": "gw", "namespace": None, "group": None, "kind": None},  # null is unset
    ], status=[o.accepted(o.ref(namespace=None), observed=4)])
    route = _route(obj)
    assert route.kind == "HTTPRoute"
    assert route.meta == Meta(namespace="shop", name="web", uid="uid-HTTPRoute-web",
                              created="2024-03-01T00:00:00Z", generation=1)
    assert route.hostnames == ("a.example.com", "*.example.com")
    assert route.parent_refs == (
        ParentRef(name="gw", namespace="shop"),
        ParentRef(name="gw", namespace="infra", section_name="https", port=443),
        ParentRef(name="gw", namespace="infra"),
        ParentRef(name="svc", namespace="infra", group="", kind="Service"))
    assert route.parents == (ParentStatus(
        parent_ref=ParentRef(name="gw", namespace="shop"), controller_name=o.CONTROLLER,
        conditions=(Condition("Accepted", "True", 4, "Accepted"),
                    Condition("ResolvedRefs", "True"))),)
    assert route.parents[0].condition("Accepted") == route.parents[0].conditions[0]
    assert route.parents[0].condition("Programmed") is None
    assert str(route) == "HTTPRoute shop/web"
    assert route.notes == ()


def test_route_kind_from_argument_or_object() -> None:
    obj = o.route(kind="TLSRoute", hostnames=["a.example.com"])
    assert _route(obj).kind == "TLSRoute"
    del obj["kind"]
    assert _route(obj, "GRPCRoute").kind == "GRPCRoute"
    _bad(parse_route(obj), "kind")
    _bad(parse_route(o.route(kind="TCPRoute")), "kind must be one of")
    _bad(parse_route(obj, "UDPRoute"), "kind")


@pytest.mark.parametrize("host", ["*", "a.*.b", "example.com.", "10.0.0.1", "", 5, None,
                                  "a b.com", "ex ample.com"])
def test_route_with_a_bad_hostname_is_refused_whole(host: Any) -> None:
    # Dropping only that name could leave none, and no hostnames means "every name".
    bad = _bad(parse_route(o.route(hostnames=["ok.example.com", host])), "spec.hostnames[1]")
    assert bad.kind == "HTTPRoute" and (bad.namespace, bad.name) == ("shop", "web")


def test_route_bad_parts_are_dropped_with_notes() -> None:
    obj = o.route(hostnames=["a.example.com"],
                  parents=[o.ref(), {"namespace": "infra"}, o.ref(port=0), "gw"])
    obj["status"]["parents"] = [
        o.accepted(o.ref()),
        {"parentRef": o.ref(), "conditions": []},                     # no controllerName
        {"parentRef": o.ref(), "controllerName": o.CONTROLLER,
         "conditions": [{"type": "Accepted", "status": "True", "observedGeneration": -1}]},
        {"controllerName": o.CONTROLLER, "conditions": []},           # no parentRef
        None]
    route = _route(obj)
    assert route.parent_refs == (ParentRef(name="gw", namespace="infra"),)
    assert len(route.parents) == 1
    assert len(route.notes) == 7
    assert "spec.parentRefs[1].name" in route.notes[0]
    assert "observedGeneration" in route.notes[4]
    assert all("ignored" in n for n in route.notes)


@pytest.mark.parametrize("status", ["accepted", [], {"parents": "x"}, {"parents": [1] * 65}])
def test_route_unreadable_status(status: Any) -> None:
    obj = o.route()
    obj["status"] = status
    route = _route(obj)
    assert route.parents == ()
    assert route.parent_refs and route.notes


@pytest.mark.parametrize(("mutate", "words"), [
    (lambda r: r.pop("spec"), ("spec",)),
    (lambda r: r["spec"].update(hostnames="a.example.com"), ("spec.hostnames must be a list",)),
    (lambda r: r["spec"].update(parentRefs={}), ("spec.parentRefs must be a list",)),
    (lambda r: r["metadata"].update(namespace=3), ("metadata.namespace",)),
    (lambda r: r["spec"].update(hostnames=[f"h{i}.example.com" for i in range(1025)]),
     ("more than 1024",)),
])
def test_malformed_route(mutate: Any, words: tuple[str, ...]) -> None:
    obj = o.route()
    mutate(obj)
    _bad(parse_route(obj), *words)


def test_missing_optional_metadata() -> None:
    obj = o.route()
    obj["metadata"] = {"name": "web", "namespace": "shop", "uid": 3, "generation": -2,
                       "creationTimestamp": None}
    assert _route(obj).meta == Meta(namespace="shop", name="web")


@pytest.mark.parametrize(("labels", "expected"), [
    ({"env": "prod", "tier": "a"}, True),
    ({"env": "prod", "tier": "b"}, True),
    ({"env": "prod", "tier": "c"}, False),
    ({"env": "prod"}, False),
    ({"env": "dev", "tier": "a"}, False),
    ({"env": "prod", "tier": "a", "legacy": "yes"}, False),
    ({"env": "prod", "tier": "a", "region": "eu"}, True),
    ({"env": "prod", "tier": "a", "region": "us"}, False),
    ({"env": "prod", "tier": "a", "owner": "x", "region": "eu"}, True),
])
def test_label_selector(labels: dict[str, str], expected: bool) -> None:
    sel = LabelSelector(match_labels=(("env", "prod"),), match_expressions=(
        Requirement("tier", "In", ("a", "b")),
        Requirement("legacy", "DoesNotExist"),
        Requirement("region", "NotIn", ("us",)),
    ))
    assert sel.matches(labels) is expected
    assert LabelSelector().matches(labels)  # the empty selector selects everything
    assert LabelSelector(match_expressions=(Requirement("owner", "Exists"),)).matches(
        labels) is ("owner" in labels)


# --- never raises --------------------------------------------------------------------------

PARSERS: dict[str, Callable[[Any], object]] = {
    "gateway": parse_gateway, "class": parse_gateway_class, "route": parse_route,
    "listenerset": parse_listener_set}


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(SAMPLES)), st.data(), JSON)
def test_any_corruption_never_raises(which: str, data: st.DataObject, garbage: Any) -> None:
    sample = SAMPLES[which]
    path = data.draw(st.sampled_from(paths(sample)))
    parsed = PARSERS[which](replace(sample, path, garbage))
    assert isinstance(parsed, Gateway | GatewayClass | Route | ListenerSet | Malformed)
    if isinstance(parsed, Malformed):
        assert parsed.reason and str(parsed)


@settings(max_examples=200, deadline=None)
@given(JSON, st.sampled_from([None, "HTTPRoute", "Bogus"]))
def test_arbitrary_json_never_raises(value: Any, kind: str | None) -> None:
    for parsed in (parse_gateway(value), parse_gateway_class(value), parse_route(value, kind),
                   parse_listener_set(value)):
        assert isinstance(parsed, Gateway | GatewayClass | Route | ListenerSet | Malformed)


def test_null_means_the_default() -> None:
    raw = {**o.listener("n"), "allowedRoutes": {"namespaces": {"from": None},
                                                "kinds": [{"group": None, "kind": "HTTPRoute"}]}}
    (only,) = _gw(o.gateway(listeners=[raw])).listeners
    assert only.namespaces_from == "Same" and only.kinds == (RouteKind("HTTPRoute"),)
