"""The doctor's reading of claims and targets (pure): the class an Ingress claims, the notes
on Gateway API objects that cannot be read, and the host targets read from the plan."""

from __future__ import annotations

from typing import Any

import pytest

from hairpin_proxy.claims import Claim, ObjectRef
from hairpin_proxy.doctor import routing
from hairpin_proxy.doctor.facts import HostTarget
from hairpin_proxy.plan import DesiredState, PlanSettings, Snapshot, plan
from hairpin_proxy.plan.claims import ingress_claims
from hairpin_proxy.plan.core import desired
from hairpin_proxy.policy import HostPolicy, PolicyResult
from hairpin_proxy.sources.ingress.policy import ingress_target
from hairpin_proxy.sources.registry import KEY_KIND_SPECS
from hairpin_proxy.targets.mapping import MapEntry, parse_target_flags
from hairpin_proxy.targets.resolve import TargetFacts
from hairpin_proxy.targets.routing_plan import plan as plan_targets
from tests.fakeapi.fixtures import gateway, gateway_class, ingress, ingress_class, route, service


def with_class_annotation(obj: dict[str, Any], name: str) -> dict[str, Any]:
    obj["metadata"]["annotations"] = {"kubernetes.io/ingress.class": name}
    return obj


@pytest.mark.parametrize(("obj", "defaults", "key"), [
    (ingress("a", "b", class_name="nginx"), frozenset({"traefik"}), "ingressclass/nginx"),
    (with_class_annotation(ingress("a", "b"), "haproxy"), frozenset(), "ingressclass/haproxy"),
    # The field wins over the legacy annotation.
    (with_class_annotation(ingress("a", "b", class_name="nginx"), "haproxy"), frozenset(),
     "ingressclass/nginx"),
    (ingress("a", "b"), frozenset({"traefik"}), "ingressclass/traefik"),
    # No class and no single default: the proxy's own target, as before targets.
    (ingress("a", "b"), frozenset(), "default"),
    (ingress("a", "b"), frozenset({"nginx", "traefik"}), "default"),
    (with_class_annotation(ingress("a", "b"), "Not A Name"), frozenset(), "default"),
])
def test_ingress_target(obj: dict[str, Any], defaults: frozenset[str], key: str) -> None:
    assert ingress_target(obj, defaults) == key


def test_ingress_claims_carry_origin_and_age() -> None:
    ing = ingress("shop", "web", class_name="nginx")
    ing["metadata"].update(uid="u1", creationTimestamp="2024-01-02T03:04:05Z")
    result = PolicyResult(hosts=("a.example.com",), rejections=(),
                          sources={"a.example.com": ("shop/web", "gone/away")})
    snap = Snapshot(PlanSettings(HostPolicy()), ingresses=[ing],
                    ingress_classes=[ingress_class("nginx")])
    claims = ingress_claims(result, snap)
    # An origin no longer listed claims nothing.
    assert claims == (Claim("a.example.com", "ingressclass/nginx",
                            ObjectRef("Ingress", "shop", "web", "u1", "networking.k8s.io"),
                            "2024-01-02T03:04:05Z"),)


def test_unreadable_gateway_objects_are_named() -> None:
    broken = gateway("web", "bad", "eg")
    broken["spec"] = "not an object"
    objects = routing.GatewayObjects(
        classes=[gateway_class("eg")], gateways=[gateway("web", "public", "eg"), broken],
        routes=[("HTTPRoute", route("HTTPRoute", "web", "shop", hostnames=["a.example.com"],
                                    parent="public"))],
        namespace_labels={})
    notes = routing.gateway_notes(objects, HostPolicy(), ())
    # Not accepted by its controller (no status): no claim, and a note saying why.
    assert plan(gateway_snapshot(objects)).claims == ()
    assert any(n.startswith("Gateway web/bad: ") for n in notes), notes
    assert any("HTTPRoute web/shop" in n and "not accepted" in n for n in notes), notes


def gateway_snapshot(objects: routing.GatewayObjects) -> Snapshot:
    """The Gateway API objects as doctor puts them in its snapshot."""
    return Snapshot(PlanSettings(HostPolicy()), gateway_classes=objects.classes,
                    gateways=objects.gateways, routes=objects.routes,
                    listener_sets=objects.listener_sets,
                    namespace_labels=objects.namespace_labels or {})


def test_routes_on_listener_sets_are_read_as_the_controller_reads_them() -> None:
    gw = gateway("web", "public", "eg")
    gw["spec"]["allowedListeners"] = {"namespaces": {"from": "All"}}
    ls = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
          "metadata": {"namespace": "shop", "name": "extra"},
          "spec": {"parentRef": {"name": "public", "namespace": "web"},
                   "listeners": [{"name": "l", "port": 80, "protocol": "HTTP",
                                  "hostname": "*.shop.example.com"}]},
          "status": {"conditions": [{"type": "Accepted", "status": "True"}]}}
    parent = {"group": "gateway.networking.k8s.io", "kind": "ListenerSet", "name": "extra",
              "namespace": "shop"}
    r = route("HTTPRoute", "shop", "web")
    r["spec"]["parentRefs"] = [parent]
    r["status"] = {"parents": [{"parentRef": parent, "controllerName": "example.net/eg",
                                "conditions": [{"type": "Accepted", "status": "True"}]}]}
    objects = routing.GatewayObjects(classes=[gateway_class("eg", "example.net/eg")],
                                     gateways=[gw], routes=[("HTTPRoute", r)],
                                     namespace_labels={}, listener_sets=[ls])
    got = plan(gateway_snapshot(objects))
    assert [(c.host, c.target) for c in got.claims] == [("**.shop.example.com",
                                                         "gateway/web/public")]
    assert plan(gateway_snapshot(routing.GatewayObjects(
        classes=objects.classes, gateways=[gw], routes=objects.routes,
        namespace_labels={}))).claims == ()


def ours() -> routing.ProxyServices:
    return routing.ProxyServices("hairpin-proxy", "hairpin-proxy", True, ("10.0.0.1",),
                                 {"hairpin-proxy-t1": ("10.0.0.11",)})


def host_targets(claims: list[Claim], facts: TargetFacts, target_map: dict[str, MapEntry],
                 table: dict[str, int] | None) -> tuple[dict[str, HostTarget], DesiredState]:
    """The doctor's reading of the plan of ``claims`` (the targets step of ``plan.plan``,
    fed the claims directly: the sources' step is tested on its own)."""
    decided = plan_targets(claims, facts, target_map, table or {}, 32)
    state = desired(Snapshot(PlanSettings(HostPolicy())), claims, (), decided)
    return routing.host_targets(state, facts, target_map, table, ours()), state


def test_host_targets_from_the_plan() -> None:
    plane = service("web", "public-eg", labels={"gateway.networking.k8s.io/gateway-name":
                                                 "public"}, cluster_ips=["10.0.0.20"])
    facts = TargetFacts(services=[plane],
                        gateways={"web/public": gateway("web", "public", "eg")},
                        gateway_classes={"eg": gateway_class("eg", "example.com/gw")})
    route_ref = ObjectRef("HTTPRoute", "web", "shop")
    ingress_ref = ObjectRef("Ingress", "shop", "web")
    claims = [Claim("a.example.com", "gateway/web/public", route_ref, "2024-01-01T00:00:00Z"),
              Claim("a.example.com", "default", ingress_ref, "2024-06-01T00:00:00Z"),
              Claim("b.example.com", "default", ingress_ref, "2024-06-01T00:00:00Z")]
    # The implementation is unknown: its host is left alone, the flag named.
    unknown, _ = host_targets(claims, facts, {}, {})
    a = unknown["a.example.com"]
    assert (a.key, a.verdict, a.proxy, a.service) == (
        "gateway/web/public", "target-proxy-unknown", "unknown", "web/public-eg")
    assert "--target gateway:web/public=" in a.message
    (lost,) = a.losers
    assert (lost.origin, lost.target, lost.winner) == (
        "Ingress shop/web", "default", "HTTPRoute web/shop")
    b = unknown["b.example.com"]
    assert (b.key, b.verdict, b.slot, b.proxy_addresses) == (
        "default", "redirected", 0, ("10.0.0.1",))
    # The map settles it: slot 1, our Service for it and its addresses.
    target_map = parse_target_flags(["gateway:web/public=web/public-eg:v1"], KEY_KIND_SPECS)
    mapped, state = host_targets(claims, facts, target_map, {})
    a = mapped["a.example.com"]
    assert (a.verdict, a.proxy, a.proxy_source, a.slot) == ("redirected", "v1", "--target map", 1)
    assert (a.proxy_service, a.proxy_service_found, a.proxy_addresses, a.published) == (
        "hairpin-proxy/hairpin-proxy-t1", True, ("10.0.0.11",), False)
    assert state.plan.slots == {"gateway/web/public": 1}
    # A slot already published is kept; without the table it is unknown whether it is.
    kept, _ = host_targets(claims, facts, target_map, {"gateway/web/public": 3})
    assert (kept["a.example.com"].slot, kept["a.example.com"].published) == (3, True)
    assert kept["a.example.com"].proxy_service_found is False
    blind, _ = host_targets(claims, facts, target_map, None)
    assert blind["a.example.com"].published is None
