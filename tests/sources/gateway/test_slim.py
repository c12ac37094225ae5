"""Slimmed Gateway API objects parse exactly like the originals, and carry much less."""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.sources.gateway.listenersets import parse_listener_set
from hairpin_proxy.sources.gateway.model import parse_gateway, parse_gateway_class, parse_route
from hairpin_proxy.sources.gateway.slim import (
    slim_gateway,
    slim_gateway_class,
    slim_listener_set,
    slim_namespace,
    slim_route,
)
from tests.sources.gateway import objects as o
from tests.sources.gateway.objects import JSON, SAMPLES, paths, replace


def test_gateway_keeps_what_is_read() -> None:
    obj = o.gateway(listeners=[o.listener("tls", "TLS", 443, hostname="a.example.com",
                                          origin="Selector", selector={"matchLabels": {"a": "b"}},
                                          kinds=[{"group": "g", "kind": "TLSRoute"}])])
    assert slim_gateway(obj) == {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "gw", "namespace": "infra", "uid": "uid-gw-gw",
                     "resourceVersion": "7", "creationTimestamp": "2024-02-01T00:00:00Z",
                     "generation": 3},
        "spec": {"gatewayClassName": "public", "listeners": [
            {"name": "tls", "protocol": "TLS", "port": 443, "hostname": "a.example.com",
             "allowedRoutes": {"namespaces": {"from": "Selector",
                                              "selector": {"matchLabels": {"a": "b"}}},
                               "kinds": [{"group": "g", "kind": "TLSRoute"}]}}]}}


def test_route_keeps_what_is_read() -> None:
    obj = o.route(hostnames=["a.example.com"], parents=[o.ref(sectionName="s")])
    slim = slim_route(obj)
    assert slim["spec"] == {"hostnames": ["a.example.com"], "parentRefs": [
        {"name": "gw", "namespace": "infra", "sectionName": "s"}]}
    assert slim["status"] == {"parents": [{
        "parentRef": {"name": "gw", "namespace": "infra", "sectionName": "s"},
        "controllerName": o.CONTROLLER,
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                        "observedGeneration": 1},
                       {"type": "ResolvedRefs", "status": "True"}]}]}
    assert "rules" not in slim["spec"]


def test_class_and_namespace() -> None:
    assert slim_gateway_class(o.gateway_class()) == {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": {"name": "public", "uid": "uid-class-public",
                     "creationTimestamp": "2024-01-01T00:00:00Z", "generation": 1},
        "spec": {"controllerName": o.CONTROLLER}}
    ns = {"apiVersion": "v1", "kind": "Namespace",
          "metadata": {"name": "shop", "uid": "u", "labels": {"env": "prod"},
                       "annotations": {"big": "x" * 1000}, "managedFields": [{}]},
          "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}
    assert slim_namespace(ns) == {"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": "shop", "uid": "u",
                                               "labels": {"env": "prod"}}}


def test_much_smaller() -> None:
    obj = o.route(hostnames=["a.example.com"])
    obj["spec"]["rules"] = [{"matches": [{"path": {"type": "PathPrefix", "value": f"/{i}"}}],
                             "backendRefs": [{"name": f"svc{i}", "port": 80}]}
                            for i in range(16)]
    assert len(json.dumps(slim_route(obj))) * 3 < len(json.dumps(obj))


def test_slim_does_not_touch_its_input() -> None:
    obj = o.gateway()
    before = copy.deepcopy(obj)
    slim_gateway(obj)
    slim_route(o.route())
    assert obj == before


SLIMS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], object]]] = {
    "gateway": (slim_gateway, parse_gateway),
    "class": (slim_gateway_class, parse_gateway_class),
    "route": (slim_route, parse_route),
    "listenerset": (slim_listener_set, parse_listener_set)}


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(sorted(SAMPLES)), st.data(), JSON)
def test_same_verdict_after_slimming(which: str, data: st.DataObject, garbage: Any) -> None:
    sample = SAMPLES[which]
    path = data.draw(st.sampled_from(paths(sample)))
    obj = replace(sample, path, garbage)
    if not isinstance(obj, dict):
        return
    slim, parse = SLIMS[which]
    slimmed = slim(obj)
    assert parse(slimmed) == parse(obj)
    assert slim(slimmed) == slimmed  # idempotent
    # Notes on dropped parts are not part of equality; they must match too.
    assert getattr(parse(slimmed), "notes", ()) == getattr(parse(obj), "notes", ())


def test_equal_parent_references_and_statuses_are_one_object() -> None:
    def make(name: str, generation: object = 1) -> dict[str, Any]:
        obj = o.route(hostnames=[f"{name}.example.com"], parents=[o.ref(sectionName="s")])
        obj["metadata"]["name"] = name
        obj["status"]["parents"][0]["conditions"][0]["observedGeneration"] = generation
        return json.loads(json.dumps(obj))  # type: ignore[no-any-return]

    a, b, c, d = (slim_route(make("a")), slim_route(make("b")), slim_route(make("c", 2)),
                  slim_route(make("d", True)))
    assert a["spec"]["parentRefs"] is b["spec"]["parentRefs"] is c["spec"]["parentRefs"]
    assert a["status"] is b["status"]
    # Only equal content is shared: another generation, or true for 1 (equal in Python, not
    # in JSON), keeps its own.
    assert c["status"] is not a["status"] and d["status"] is not a["status"]
    assert c["status"]["parents"][0]["conditions"][0]["observedGeneration"] == 2
    assert d["status"]["parents"][0]["conditions"][0]["observedGeneration"] is True
    assert a["spec"]["hostnames"] == ["a.example.com"]
    assert parse_route(a) == parse_route(make("a"))


def test_a_route_is_plain_dicts_with_shared_keys() -> None:
    """The top level, metadata and spec of every cached route share their keys tables: plain
    dicts to every reader, smaller than dicts of their own."""
    obj = json.loads(json.dumps(o.route(hostnames=["a.example.com"], parents=[o.ref()])))
    slim = slim_route(obj)
    for part in (slim, slim["metadata"], slim["spec"]):
        assert type(part) is dict
        assert sys.getsizeof(part) < sys.getsizeof(dict(part))
    assert json.loads(json.dumps(slim)) == slim
    assert slim == {k: dict(v) if k in ("metadata", "spec") else v for k, v in slim.items()}
    # A malformed part is kept as it came (the parser reports it).
    odd = slim_route({**obj, "metadata": "x", "spec": ["y"]})
    assert odd["metadata"] == "x" and odd["spec"] == ["y"]
