"""Which target each claimed host goes to."""

from __future__ import annotations

from hairpin_proxy.claims import Claim, ObjectRef
from hairpin_proxy.targets.mapping import parse_target_flags
from hairpin_proxy.targets.model import Target
from hairpin_proxy.targets.plan import plan
from hairpin_proxy.targets.resolve import ENVOY_GATEWAY, TargetFacts, Unresolved
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
             parse_target_flags(["nginx=ingress/missing:v1"]), {}, 8)
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
    m = parse_target_flags(["gateway:web/g1=web/g1:v1", "gateway:web/g2=web/g2:v2"])
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
