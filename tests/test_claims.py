"""Host claims: the oldest origin wins a host, agreeing claims all stay origins, order never
matters."""

from __future__ import annotations

import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.claims import Claim, ObjectRef, age_key, origin_key, resolve
from hairpin_proxy.policy import Rejection


def claim(host: str, target: str, *, kind: str = "Ingress", namespace: str = "shop",
          name: str = "web", created: str = "2024-01-01T00:00:00Z", uid: str = "") -> Claim:
    return Claim(host=host, target=target, created=created,
                 origin=ObjectRef(kind=kind, namespace=namespace, name=name,
                                  uid=uid or f"{kind}-{namespace}-{name}"))


def test_no_claims() -> None:
    assert resolve([]) == ({}, [], {})


def test_oldest_wins() -> None:
    old = claim("a.example.com", "default", name="old", created="2023-05-01T00:00:00Z")
    new = claim("a.example.com", "gateway/infra/gw", kind="HTTPRoute", name="new",
                created="2024-05-01T00:00:00Z")
    for order in ([old, new], [new, old]):
        winners, losers, origins = resolve(order)
        assert winners == {"a.example.com": old}
        assert losers == [(new, old)]
        assert origins == {"a.example.com": (old,)}


@pytest.mark.parametrize(("first", "second"), [
    # Same instant: kind, then namespace, then name decide.
    (claim("h.example.com", "t1", kind="HTTPRoute"), claim("h.example.com", "t2")),
    (claim("h.example.com", "t1", namespace="a"), claim("h.example.com", "t2", namespace="b")),
    (claim("h.example.com", "t1", name="a"), claim("h.example.com", "t2", name="b")),
    # Time beats the names.
    (claim("h.example.com", "t1", name="z", created="2024-01-01T00:00:00Z"),
     claim("h.example.com", "t2", name="a", created="2024-01-01T00:00:01Z")),
    # One instant, two spellings: equal, so the names decide.
    (claim("h.example.com", "t1", name="a", created="2024-01-01T01:00:00+01:00"),
     claim("h.example.com", "t2", name="b", created="2024-01-01T00:00:00Z")),
    # Earlier in UTC even though the local clock reads later.
    (claim("h.example.com", "t1", name="z", created="2024-01-01T05:00:00+06:00"),
     claim("h.example.com", "t2", name="a", created="2024-01-01T00:00:00Z")),
    # Fractions of a second count.
    (claim("h.example.com", "t1", name="z", created="2024-01-01T00:00:00.5Z"),
     claim("h.example.com", "t2", name="a", created="2024-01-01T00:00:00.75Z")),
    # An unreadable or missing age never wins by it.
    (claim("h.example.com", "t1", name="z", created="2099-01-01T00:00:00Z"),
     claim("h.example.com", "t2", name="a", created="")),
    (claim("h.example.com", "t1", name="z", created="2099-01-01T00:00:00Z"),
     claim("h.example.com", "t2", name="a", created="yesterday")),
])
def test_tie_breaks(first: Claim, second: Claim) -> None:
    for order in ([first, second], [second, first]):
        winners, losers, _ = resolve(order)
        assert winners["h.example.com"] == first
        assert losers == [(second, first)]


def test_naive_timestamps_are_utc_whatever_the_local_zone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        naive = claim("h.example.com", "t1", name="a", created="2024-01-01T01:00:00")
        aware = claim("h.example.com", "t2", name="b", created="2024-01-01T00:30:00Z")
        assert resolve([naive, aware]).winners["h.example.com"] == aware
    finally:
        monkeypatch.undo()
        time.tzset()


def test_same_target_is_no_conflict() -> None:
    ingress = claim("a.example.com", "gateway/infra/gw", created="2024-03-01T00:00:00Z")
    route = claim("a.example.com", "gateway/infra/gw", kind="HTTPRoute",
                  created="2024-02-01T00:00:00Z")
    grpc = claim("a.example.com", "gateway/infra/gw", kind="GRPCRoute",
                 created="2024-02-01T00:00:00Z")
    winners, losers, origins = resolve([ingress, route, grpc, route])
    assert winners == {"a.example.com": grpc}
    assert losers == []
    assert origins == {"a.example.com": (grpc, route, ingress)}


def test_mixed_hosts_and_targets() -> None:
    a1 = claim("a.example.com", "default", name="i1", created="2024-01-01T00:00:00Z")
    a2 = claim("a.example.com", "default", name="i2", created="2024-02-01T00:00:00Z")
    a3 = claim("a.example.com", "gateway/x/y", kind="HTTPRoute", name="r",
               created="2024-01-15T00:00:00Z")
    a4 = claim("a.example.com", "gateway/x/y", kind="HTTPRoute", name="s",
               created="2024-03-15T00:00:00Z")
    b1 = claim("b.example.com", "gateway/x/y", kind="HTTPRoute", name="r",
               created="2024-01-15T00:00:00Z")
    winners, losers, origins = resolve([a4, b1, a2, a3, a1])
    assert winners == {"a.example.com": a1, "b.example.com": b1}
    assert list(winners) == ["a.example.com", "b.example.com"]
    assert losers == [(a3, a1), (a4, a1)]
    assert origins == {"a.example.com": (a1, a2), "b.example.com": (b1,)}


def test_age_key_is_total() -> None:
    # Only the uid differs: still an order, so the winner does not depend on input order.
    x = claim("h.example.com", "t1", uid="u1")
    y = claim("h.example.com", "t2", uid="u2")
    assert age_key(x) < age_key(y)
    assert resolve([y, x]).winners["h.example.com"] == x


def test_object_ref_text() -> None:
    assert str(ObjectRef("Ingress", "shop", "web")) == "Ingress shop/web"
    assert str(ObjectRef("GatewayClass", "", "public")) == "GatewayClass public"


CLAIM = st.builds(
    claim,
    host=st.sampled_from(["a.example.com", "b.example.com", "*.example.com", "**.example.com"]),
    target=st.sampled_from(["default", "ingressclass/nginx", "gateway/infra/gw"]),
    kind=st.sampled_from(["Ingress", "HTTPRoute", "TLSRoute"]),
    namespace=st.sampled_from(["a", "b"]),
    name=st.sampled_from(["x", "y"]),
    created=st.sampled_from(["2024-01-01T00:00:00Z", "2024-01-01T00:00:00+00:00",
                             "2023-12-31T23:00:00-01:00", "2024-06-01T00:00:00Z", "",
                             "not a time", "2024-01-01T00:00:00.000001Z"]),
    uid=st.sampled_from(["", "u1", "u2"]),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(CLAIM, max_size=12), st.randoms())
def test_any_order_gives_the_same_result(claims: list[Claim], rnd: random.Random) -> None:
    shuffled = list(claims)
    rnd.shuffle(shuffled)
    assert resolve(shuffled) == resolve(claims)
    assert resolve(claims + shuffled) == resolve(claims)  # repeats change nothing


@settings(max_examples=400, deadline=None)
@given(st.lists(CLAIM, max_size=12))
def test_partition(claims: list[Claim]) -> None:
    winners, losers, origins = resolve(claims)

    def name(host: str) -> str:
        # An Ingress's "*.d" and a route's "**.d" are one name to decide on.
        return host.removeprefix("*") if host.startswith("**.") else host
    assert set(winners) == set(origins)
    assert {name(h) for h in winners} == {name(c.host) for c in claims}
    assert len(winners) == len({name(h) for h in winners})
    listed = {c for group in origins.values() for c in group} | {loser for loser, _ in losers}
    # Every distinct claim is exactly once either an origin of its host or a loser.
    assert listed == set(claims)
    assert sum(len(g) for g in origins.values()) + len(losers) == len(set(claims))
    for host, winner in winners.items():
        mine = [c for c in claims if name(c.host) == name(host)]
        assert winner == min(mine, key=age_key)
        # Any depth exactly when a claim of the winning target asks for it.
        assert host.startswith("**.") == any(c.host.startswith("**.") for c in origins[host])
        assert origins[host][0] == winner
        assert all(c.target == winner.target for c in origins[host])
        assert list(origins[host]) == sorted(origins[host], key=age_key)
    by_name = {name(h): w for h, w in winners.items()}
    for loser, winner in losers:
        assert by_name[name(loser.host)] == winner
        assert loser.target != winner.target
        assert age_key(winner) < age_key(loser)


def test_origins_sort_oldest_first_and_unknown_ages_last() -> None:
    ing = ObjectRef("Ingress", "shop", "web", "u1", "networking.k8s.io")
    rt = ObjectRef("HTTPRoute", "shop", "web", "u2", "gateway.networking.k8s.io")
    assert ing != rt and len({ing, rt}) == 2
    assert origin_key(rt, "2026-01-01T00:00:00Z") < origin_key(ing, "2026-01-01T00:00:01Z")
    # One instant however spelled: then by kind, namespace, name.
    assert origin_key(rt, "2026-01-01T00:00:00+00:00") < origin_key(ing, "2026-01-01T00:00:00Z")
    assert origin_key(ing, "2030-01-01T00:00:00Z") < origin_key(rt, "") \
        < origin_key(rt, "garbage")
    assert str(rt) == "HTTPRoute shop/web"


def test_a_refusal_names_its_object() -> None:
    rt = ObjectRef("HTTPRoute", "shop", "web", "u2", "gateway.networking.k8s.io")
    refused = Rejection.of(rt, "a.example.com", "why")
    assert refused.ref == rt and (refused.namespace, refused.name) == ("shop", "web")
    assert str(refused) == "HTTPRoute shop/web: host a.example.com: why"
    # The Ingress policy names only namespace and name: its refusals are of Ingresses.
    plain = Rejection("shop", "web", "", "why")
    assert plain.ref == ObjectRef("Ingress", "shop", "web", group="networking.k8s.io")
    assert str(plain) == "shop/web: why"


def test_a_wildcard_is_one_name_whichever_source_claims_it() -> None:
    ingress = claim("*.example.com", "ingressclass/nginx", created="2023-01-01T00:00:00Z")
    route = claim("**.example.com", "gateway/infra/gw", kind="HTTPRoute",
                  created="2024-01-01T00:00:00Z")
    winners, losers, _ = resolve([route, ingress])
    assert winners == {"*.example.com": ingress} and losers == [(route, ingress)]
    # The same target: they agree, and the data plane serves every depth.
    same = claim("**.example.com", "ingressclass/nginx", kind="HTTPRoute")
    winners, losers, origins = resolve([same, ingress])
    assert winners == {"**.example.com": ingress} and losers == []
    assert origins["**.example.com"] == (ingress, same)


def test_an_ingress_claim_is_the_claim_it_stands_for() -> None:
    """The Planner's compact form of an Ingress's claim (its reference made when read) is
    equal, hashed, shown, matched, copied and frozen as the plain claim of the same fields,
    and a claim of another origin or field differs from it."""
    import copy
    import dataclasses
    import pickle

    from hairpin_proxy.apis import INGRESS_GROUP
    from hairpin_proxy.plan.claims import IngressClaim

    ref = ObjectRef("Ingress", "shop", "web", "uid-1", INGRESS_GROUP)
    plain = Claim("a.example.com", "default", ref, "2024-01-01T00:00:00Z")
    compact = IngressClaim("a.example.com", "default", ref, "2024-01-01T00:00:00Z")
    assert compact == plain and plain == compact and hash(compact) == hash(plain)
    assert repr(compact) == repr(plain)
    assert compact.origin == ref and compact.origin.group == INGRESS_GROUP
    # Made once, then kept: a pass over a size limit reads every origin.
    assert compact.origin is compact.origin
    assert dict[Claim, int]({compact: 1})[plain] == 1 and len({plain, compact}) == 1
    for other in (dataclasses.replace(ref, uid="uid-2"), dataclasses.replace(ref, kind="X"),
                  dataclasses.replace(ref, namespace="web")):
        assert IngressClaim("a.example.com", "default", other, plain.created) != plain \
            or other.kind != "Ingress"
        assert Claim("a.example.com", "default", other, plain.created) != compact
    assert compact != Claim("b.example.com", "default", ref, plain.created)
    assert compact != Claim("a.example.com", "other", ref, plain.created)
    assert compact != Claim("a.example.com", "default", ref, "2025-01-01T00:00:00Z")
    assert copy.deepcopy(compact) == plain and pickle.loads(pickle.dumps(compact)) == plain
    match compact:
        case Claim(host, target, origin, created):
            assert (host, target, origin, created) == ("a.example.com", "default", ref,
                                                       plain.created)
    with pytest.raises(dataclasses.FrozenInstanceError):
        compact.host = "b.example.com"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plain.target = "other"  # type: ignore[misc]
