"""ListenerSets, pure: which attach to which Gateway, and the names routes get through them."""

from __future__ import annotations

import copy
from typing import Any

from hairpin_proxy.policy import HostPolicy
from hairpin_proxy.sources.gateway.claims import claims_of_objects
from hairpin_proxy.sources.gateway.listenersets import ListenerSet, parse_listener_set
from hairpin_proxy.sources.gateway.model import Malformed
from hairpin_proxy.sources.gateway.slim import slim_gateway, slim_listener_set
from tests.sources.gateway.objects import accepted, gateway, gateway_class, listener, route

GROUP = "gateway.networking.k8s.io"


def allowing(origin: str | None, selector: Any = None) -> dict[str, Any]:
    """Gateway infra/gw allowing ListenerSets ``origin`` (None: the field is absent)."""
    gw = gateway(listeners=[listener("http", hostname="www.example.com")])
    if origin is not None:
        spaces: dict[str, Any] = {"from": origin}
        if selector is not None:
            spaces["selector"] = selector
        gw["spec"]["allowedListeners"] = {"namespaces": spaces}
    return gw


def listener_set(name: str = "extra", namespace: str = "shop", *,
                 listeners: list[dict[str, Any]] | None = None, status: str | None = "True",
                 parent: dict[str, Any] | None = None,
                 refused: tuple[str, ...] = ()) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": f"{GROUP}/v1", "kind": "ListenerSet",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-ls-{name}",
                     "creationTimestamp": "2024-02-02T00:00:00Z", "generation": 2},
        "spec": {"parentRef": parent if parent is not None
                 else {"name": "gw", "namespace": "infra"},
                 "listeners": listeners if listeners is not None else [
                     listener("shop", hostname="*.shop.example.com", origin="Same")]}}
    if status is not None:
        obj["status"] = {
            "conditions": [{"type": "Accepted", "status": status, "reason": "Accepted",
                            "observedGeneration": 2}],
            "listeners": [{"name": n, "attachedRoutes": 0, "conditions": [
                {"type": "Conflicted", "status": "True", "reason": "HostnameConflict"}]}
                for n in refused]}
    return obj


def ls_ref(name: str = "extra", namespace: str = "shop", **extra: Any) -> dict[str, Any]:
    return {"group": GROUP, "kind": "ListenerSet", "name": name, "namespace": namespace,
            **extra}


def on_set(hostnames: list[str] | None = None, namespace: str = "shop",
           set_namespace: str = "shop", **ref: Any) -> dict[str, Any]:
    """An HTTPRoute of ``namespace`` on ListenerSet ``set_namespace``/extra, accepted."""
    parent = ls_ref(namespace=set_namespace, **ref)
    return route(namespace=namespace, hostnames=hostnames, parents=[parent],
                 status=[accepted(parent)])


def claimed(gw: dict[str, Any], sets: list[dict[str, Any]], routes: list[dict[str, Any]],
            labels: dict[str, dict[str, str]] | None = None) -> list[tuple[str, str, str]]:
    got = claims_of_objects([gateway_class()], [gw], [("HTTPRoute", r) for r in routes],
                            wanted_classes=(), policy=HostPolicy(),
                            namespace_labels=labels or {}, listener_sets=sets)
    return sorted((c.host, c.target, str(c.origin)) for c in got.claims)


def test_a_route_on_a_listener_set_gets_listener_and_route_names_for_the_gateway() -> None:
    got = claimed(allowing("All"), [listener_set()],
                  [on_set(["a.shop.example.com", "b.c.shop.example.com", "www.example.com"])])
    # The Gateway's own listener (www.example.com) is not the ListenerSet's: not attached.
    assert got == [("a.shop.example.com", "gateway/infra/gw", "HTTPRoute shop/web"),
                   ("b.c.shop.example.com", "gateway/infra/gw", "HTTPRoute shop/web")]
    # No route hostnames: the listener's wildcard, at every depth (a Gateway API wildcard).
    assert claimed(allowing("All"), [listener_set()], [on_set()]) == [
        ("**.shop.example.com", "gateway/infra/gw", "HTTPRoute shop/web")]


def test_the_gateway_must_allow_the_listener_set() -> None:
    routes = [on_set()]
    assert claimed(allowing(None), [listener_set()], routes) == []  # the default: None
    assert claimed(allowing("None"), [listener_set()], routes) == []
    assert claimed(allowing("Same"), [listener_set()], routes) == []  # shop is not infra
    selector = {"matchLabels": {"team": "shop"}}
    assert claimed(allowing("Selector", selector), [listener_set()], routes,
                   {"shop": {"team": "shop"}}) != []
    assert claimed(allowing("Selector", selector), [listener_set()], routes,
                   {"shop": {"team": "other"}}) == []
    assert claimed(allowing("Selector"), [listener_set()], routes,
                   {"shop": {"team": "shop"}}) == []  # no selector: none


def test_same_namespace_listener_sets_and_allowed_routes_of_the_set() -> None:
    ls = listener_set(namespace="infra", parent={"name": "gw"})  # namespace defaults to its own
    # allowedRoutes "Same" is the ListenerSet's namespace: a route of infra attaches...
    assert claimed(allowing("Same"), [ls], [on_set(namespace="infra", set_namespace="infra")]) \
        == [("**.shop.example.com", "gateway/infra/gw", "HTTPRoute infra/web")]
    # ...and one of shop does not.
    assert claimed(allowing("Same"), [ls], [on_set(namespace="shop", set_namespace="infra")]) \
        == []


def test_only_what_the_implementation_accepted_counts() -> None:
    routes = [on_set()]
    assert claimed(allowing("All"), [listener_set(status=None)], routes) == []
    assert claimed(allowing("All"), [listener_set(status="False")], routes) == []
    two = [listener("shop", hostname="*.shop.example.com"),
           listener("taken", hostname="www.example.com")]
    ls = listener_set(listeners=two, refused=("taken",))
    assert claimed(allowing("All"), [ls], [on_set(["a.shop.example.com",
                                                   "www.example.com"])]) == [
        ("a.shop.example.com", "gateway/infra/gw", "HTTPRoute shop/web")]
    # The route itself must be accepted for the ListenerSet parent.
    r = on_set()
    r["status"]["parents"][0]["conditions"][0]["status"] = "False"
    assert claimed(allowing("All"), [listener_set()], [r]) == []
    # A route accepted for the Gateway is not thereby on the ListenerSet's listeners.
    r = route(hostnames=["a.shop.example.com"])
    assert claimed(allowing("All"), [listener_set()], [r]) == []


def test_section_name_and_port_pick_the_listener() -> None:
    two = [listener("a", hostname="a.example.com"), listener("b", port=8080,
                                                              hostname="b.example.com")]
    ls = listener_set(listeners=two)
    assert [h for h, _, _ in claimed(allowing("All"), [ls], [on_set(sectionName="b")])] == [
        "b.example.com"]
    assert [h for h, _, _ in claimed(allowing("All"), [ls], [on_set(port=80)])] == [
        "a.example.com"]


def test_malformed_listener_sets_attach_nothing_and_slimming_keeps_the_verdict() -> None:
    bad = listener_set()
    bad["spec"]["parentRef"] = "gw"
    assert isinstance(parse_listener_set(bad), Malformed)
    assert claimed(allowing("All"), [bad], [on_set()]) == []
    gw = allowing("All")
    ls = listener_set()
    ls["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    ls["spec"]["listeners"][0]["tls"] = {"mode": "Terminate"}
    slim = slim_listener_set(copy.deepcopy(ls))
    assert "managedFields" not in slim["metadata"] and "tls" not in slim["spec"]["listeners"][0]
    assert parse_listener_set(slim) == parse_listener_set(ls)
    assert isinstance(parse_listener_set(slim), ListenerSet)
    assert claimed(slim_gateway(gw), [slim], [on_set()]) == claimed(gw, [ls], [on_set()])
