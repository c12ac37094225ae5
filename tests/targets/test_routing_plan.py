"""Which target each claimed host goes to."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.claims import Claim, ObjectRef
from hairpin_proxy.sources.registry import KEY_KIND_SPECS
from hairpin_proxy.targets.mapping import parse_target_flags
from hairpin_proxy.targets.model import Target
from hairpin_proxy.targets.resolve import ENVOY_GATEWAY, TargetFacts, Unresolved
from hairpin_proxy.targets.routing_plan import plan
from tests.targets.test_resolve import gateway, gclass, svc

GEP = "gateway.networking.k8s.io/gateway-name"


def ing(host: str, cls: str, name: str, created: str) -> Claim:
    return Claim(host, f"ingressclass/{cls}", ObjectRef("Ingress", "web", name), created)


def route(host: str, gw: str, name: str, created: str) -> Claim:
    return Claim(host, f"gateway/web/{gw}", ObjectRef("HTTPRoute", "web", name), created)


T0, T1, T2 = "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"

# Envoy Gateway "public" expects PROXY v2 through a ClientTrafficPolicy; "plain" expects none.
FACTS = TargetFacts(
    services=[svc("web", "public-eg", {GEP: "public"}), svc("web", "plain-eg", {GEP: "plain"})],
    gateways={"web/public": gateway("web", "public", "eg"),
              "web/plain": gateway("web", "plain", "eg")},
    gateway_classes={"eg": gclass("eg", ENVOY_GATEWAY)},
    client_traffic_policies=[{
        "metadata": {"namespace": "web", "name": "pp", "creationTimestamp": T0},
        "spec": {"targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                 "name": "public"}], "proxyProtocol": {}}}])


def test_unknown_ingress_class_falls_back_to_the_default_target() -> None:
    p = plan([ing("a.example.com", "nginx", "a", T0)], FACTS, {}, {}, 8)
    assert p.routes == {"a.example.com": "default"}
    assert p.fallbacks == {"ingressclass/nginx": "default"} and not p.slots


def test_mapped_class_that_is_missing_is_not_a_fallback() -> None:
    p = plan([ing("a.example.com", "nginx", "a", T0)], FACTS,
             parse_target_flags(["nginx=ingress/missing:v1"], KEY_KIND_SPECS), {}, 8)
    assert p.routes == {} and p.excluded["a.example.com"].problem == "target-not-found"


def test_gateway_hosts_get_a_slot_and_no_proxy_gateways_are_left_alone() -> None:
    p = plan([route("a.example.com", "public", "r1", T0),
              route("b.example.com", "plain", "r2", T0)], FACTS, {}, {}, 8)
    assert p.routes == {"a.example.com": "gateway/web/public"}
    assert p.slots == {"gateway/web/public": 1}
    assert p.targets["gateway/web/public"].proxy == "v2"
    assert p.excluded["b.example.com"].problem == "target-no-proxy"


def test_oldest_claim_wins_and_the_loser_target_still_gets_its_slot() -> None:
    p = plan([ing("a.example.com", "nginx", "old", T0),
              route("a.example.com", "public", "new", T1)], FACTS, {}, {}, 8)
    assert p.routes == {"a.example.com": "default"}
    assert [(lo.origin.name, win.origin.name) for lo, win in p.losers] == [("new", "old")]
    assert p.slots == {"gateway/web/public": 1}
    # The Ingress goes: the route's target is already there.
    p = plan([route("a.example.com", "public", "new", T1)], FACTS, {}, p.slots, 8)
    assert p.routes == {"a.example.com": "gateway/web/public"}
    assert p.slots["gateway/web/public"] == 1


def test_two_classes_falling_back_to_the_default_do_not_conflict() -> None:
    p = plan([ing("a.example.com", "nginx", "x", T0), ing("a.example.com", "other", "y", T2)],
             FACTS, {}, {}, 8)
    assert p.routes == {"a.example.com": "default"} and p.losers == ()
    assert [o.name for o in p.origins["a.example.com"]] == ["x", "y"]


def test_slots_run_out() -> None:
    facts = TargetFacts(services=[svc("web", "g1", {GEP: "g1"}), svc("web", "g2", {GEP: "g2"})],
                        gateways={})
    m = parse_target_flags(["gateway:web/g1=web/g1:v1", "gateway:web/g2=web/g2:v2"], KEY_KIND_SPECS)
    p = plan([route("a.example.com", "g1", "r1", T0), route("b.example.com", "g2", "r2", T0)],
             facts, m, {}, 1)
    assert p.routes == {"a.example.com": "gateway/web/g1"}
    assert p.overflow == ("gateway/web/g2",)
    assert "no slot left" in p.excluded["b.example.com"].message


def test_a_resolution_cache_is_used_and_filled() -> None:
    claims = [route("a.example.com", "public", "r1", T0)]
    cache: dict[str, Target | Unresolved | None] = {}
    first = plan(claims, FACTS, {}, {}, 8, resolved=cache)
    assert set(cache) == {"gateway/web/public"}
    # With the cache, the facts are not read again: empty facts give the same plan.
    again = plan(claims, TargetFacts(), {}, {}, 8, resolved=cache)
    assert again.routes == first.routes and again.targets == first.targets
    # A cached key no claim names is not planned.
    assert plan([], TargetFacts(), {}, {}, 8, resolved=cache).targets == {}


# ---------------------------------------------------------------- the default install

NGINX_LABELS = {"app.kubernetes.io/name": "ingress-nginx",
                "app.kubernetes.io/component": "controller"}


def nginx_install(namespace: str, release: str, cls: str) -> tuple[dict[str, Any], ...]:
    """An ingress-nginx release: its IngressClass, Service and ConfigMap (PROXY on)."""
    labels = {**NGINX_LABELS, "app.kubernetes.io/instance": release}
    return ({"metadata": {"name": cls, "labels": labels},
             "spec": {"controller": "k8s.io/ingress-nginx"}},
            {**svc(namespace, "ingress-nginx-controller", labels)},
            {"metadata": {"namespace": namespace, "name": "ingress-nginx-controller"},
             "data": {"use-proxy-protocol": "true"}})


def two_nginx(default_service: str) -> TargetFacts:
    first = nginx_install("ingress-nginx", "ingress-nginx", "nginx")
    second = nginx_install("ingress-internal", "internal", "internal")
    return TargetFacts(
        services=[first[1], second[1]],
        ingress_classes={"nginx": first[0], "internal": second[0]},
        configmaps={"ingress-nginx/ingress-nginx-controller": first[2],
                    "ingress-internal/ingress-nginx-controller": second[2]},
        default_service=default_service)


def test_the_default_installs_data_plane_uses_the_main_service_and_no_slot() -> None:
    claims = [ing("a.example.com", "nginx", "a", T0), ing("b.example.com", "internal", "b", T0)]
    p = plan(claims, two_nginx("ingress-nginx/ingress-nginx-controller"), {}, {}, 8)
    # ingress-nginx is what --target-server names: its hosts take the main Service at once.
    assert p.routes == {"a.example.com": "default", "b.example.com": "ingressclass/internal"}
    assert p.fallbacks == {"ingressclass/nginx": "default"}
    assert p.shared["ingressclass/nginx"].service == "ingress-nginx/ingress-nginx-controller"
    # Slots are for the second data plane, which gets the first one.
    assert p.slots == {"ingressclass/internal": 1}
    # A table written by an earlier version that gave ingress-nginx slot 1 lets it go.
    p = plan(claims, two_nginx("ingress-nginx/ingress-nginx-controller"), {},
             {"ingressclass/nginx": 1}, 8)
    assert p.slots == {"ingressclass/internal": 1}


def test_without_a_matching_target_server_every_data_plane_gets_a_slot() -> None:
    claims = [ing("a.example.com", "nginx", "a", T0), ing("b.example.com", "internal", "b", T0)]
    p = plan(claims, two_nginx(""), {}, {}, 8)
    assert set(p.slots) == {"ingressclass/nginx", "ingressclass/internal"} and not p.shared
    p = plan(claims, two_nginx("traefik/traefik"), {}, {}, 8)
    assert set(p.slots) == {"ingressclass/nginx", "ingressclass/internal"} and not p.shared


def test_a_target_entry_for_the_same_service_keeps_its_slot() -> None:
    # --target is the operator's word (e.g. another PROXY version than the main listeners').
    m = parse_target_flags(["nginx=ingress-nginx/ingress-nginx-controller:v2"], KEY_KIND_SPECS)
    p = plan([ing("a.example.com", "nginx", "a", T0)],
             two_nginx("ingress-nginx/ingress-nginx-controller"), m, {}, 8)
    assert p.routes == {"a.example.com": "ingressclass/nginx"} and p.slots == {
        "ingressclass/nginx": 1}


def test_a_class_on_the_default_plane_and_a_classless_ingress_do_not_conflict() -> None:
    classless = Claim("a.example.com", "default", ObjectRef("Ingress", "web", "old"), T0)
    p = plan([classless, ing("a.example.com", "nginx", "new", T1)],
             two_nginx("ingress-nginx/ingress-nginx-controller"), {}, {}, 8)
    assert p.routes == {"a.example.com": "default"} and p.losers == () and not p.slots


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d"]),
                          st.sampled_from(["nginx", "internal", "other"])), max_size=12),
       st.sampled_from(["ingress-nginx/ingress-nginx-controller",
                        "ingress-internal/ingress-nginx-controller", ""]))
def test_no_slot_is_ever_given_to_the_target_servers_own_data_plane(
        pairs: list[tuple[str, str]], default_service: str) -> None:
    facts = two_nginx(default_service)
    claims = [ing(f"{h}.example.com", cls, f"i{n}", T0) for n, (h, cls) in enumerate(pairs)]
    p = plan(claims, facts, {}, {}, 8)
    for key in p.slots:
        assert p.targets[key].service != default_service
    # A host only classes on the default plane (or falling back to it) ask for is routed,
    # at once, to the main Service.
    for c in claims:
        if all(o.target in p.fallbacks for o in claims if o.host == c.host):
            assert p.routes[c.host] == "default"
