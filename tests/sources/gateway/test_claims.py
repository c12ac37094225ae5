"""Routes as host claims, through the host policy and the GatewayClass filter."""

from __future__ import annotations

from hairpin_proxy.policy import HostPolicy
from hairpin_proxy.sources.gateway.claims import claims_of_objects, route_claims, served_classes
from hairpin_proxy.sources.gateway.model import (
    Gateway,
    GatewayClass,
    Route,
    parse_gateway,
    parse_gateway_class,
    parse_route,
)
from tests.sources.gateway.objects import gateway, gateway_class, route


def _parsed() -> tuple[list[Route], list[Gateway], list[GatewayClass]]:
    r = parse_route(route(hostnames=["shop.example.com", "*.com", "svc.cluster.local"]))
    g = parse_gateway(gateway())
    c = parse_gateway_class(gateway_class())
    assert isinstance(r, Route) and isinstance(g, Gateway) and isinstance(c, GatewayClass)
    return [r], [g], [c]


def test_route_hosts_become_claims_for_the_gateway_and_bad_hosts_are_refused() -> None:
    routes, gateways, classes = _parsed()
    got = route_claims(routes, gateways, served_classes(classes, ()), HostPolicy(), {})
    assert [(c.host, c.target, str(c.origin)) for c in got.claims] == [
        ("shop.example.com", "gateway/infra/gw", "HTTPRoute shop/web")]
    assert got.claims[0].created == routes[0].meta.created
    refused = {r.host: r.reason for r in got.rejections}
    assert set(refused) == {"*.com", "svc.cluster.local"}
    assert "too broad" in refused["*.com"]


def test_gateway_class_filter_and_namespace_filter() -> None:
    routes, gateways, classes = _parsed()
    assert route_claims(routes, gateways, served_classes(classes, ("other",)), HostPolicy(),
                        {}).claims == ()
    assert route_claims(routes, gateways, served_classes(classes, ()),
                        HostPolicy(exclude_namespaces=("shop",)), {}).claims == ()
    assert route_claims(routes, gateways, served_classes(classes, ()),
                        HostPolicy(include_namespaces=("other",)), {}).claims == ()


def test_domain_allow_list_applies() -> None:
    routes, gateways, classes = _parsed()
    got = route_claims(routes, gateways, served_classes(classes, ()),
                       HostPolicy(domains=("example.org",)), {})
    assert got.claims == ()


def test_objects_are_parsed_and_an_unreadable_one_is_noted_while_the_rest_go_on() -> None:
    broken_class, broken_gateway, broken_route = gateway_class(), gateway(), route()
    broken_class["spec"] = broken_gateway["spec"] = broken_route["spec"] = "not an object"
    broken_gateway["metadata"]["name"] = "bad"
    broken_route["metadata"]["name"] = "bad"
    got = claims_of_objects(
        [gateway_class(), broken_class], [gateway(), broken_gateway],
        [("HTTPRoute", route(hostnames=["shop.example.com"])), ("HTTPRoute", broken_route)],
        wanted_classes=(), policy=HostPolicy(), namespace_labels={})
    routes, gateways, classes = _parsed()
    expected = route_claims(routes, gateways, served_classes(classes, ()), HostPolicy(), {})
    assert got.claims == expected.claims[:1] and got.claims
    unreadable = {n.split(":")[0] for n in got.notes if "spec must be an object" in n}
    assert unreadable == {"GatewayClass public", "Gateway infra/bad", "HTTPRoute shop/bad"}
