"""Gateway API objects as the API server would send them, for the tests."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

CONTROLLER = "example.net/gateway-controller"
JsonObj = dict[str, Any]


def gateway_class(name: str = "public", controller: str = CONTROLLER) -> JsonObj:
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": name, "uid": f"uid-class-{name}",
                         "creationTimestamp": "2024-01-01T00:00:00Z", "generation": 1},
            "spec": {"controllerName": controller, "description": "the public one"},
            "status": {"conditions": [{"type": "Accepted", "status": "True"}]}}


def listener(name: str, protocol: str = "HTTP", port: int = 80, *,
             hostname: str | None = None, origin: str | None = "All", selector: Any = None,
             kinds: list[JsonObj] | None = None) -> JsonObj:
    out: JsonObj = {"name": name, "protocol": protocol, "port": port}
    if hostname is not None:
        out["hostname"] = hostname
    if protocol in ("HTTPS", "TLS"):
        out["tls"] = {"mode": "Terminate", "certificateRefs": [{"name": "cert"}]}
    allowed: JsonObj = {}
    if origin is not None:
        allowed["namespaces"] = {"from": origin}
        if selector is not None:
            allowed["namespaces"]["selector"] = selector
    if kinds is not None:
        allowed["kinds"] = kinds
    if allowed:
        out["allowedRoutes"] = allowed
    return out


def gateway(name: str = "gw", namespace: str = "infra", class_name: str = "public",
            listeners: list[Any] | None = None) -> JsonObj:
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-gw-{name}",
                         "resourceVersion": "7", "creationTimestamp": "2024-02-01T00:00:00Z",
                         "generation": 3, "labels": {"team": "edge"},
                         "managedFields": [{"manager": "kubectl"}]},
            "spec": {"gatewayClassName": class_name,
                     "listeners": listeners if listeners is not None else [listener("http")],
                     "addresses": [{"type": "IPAddress", "value": "203.0.113.10"}]},
            "status": {"addresses": [{"type": "IPAddress", "value": "203.0.113.10"}]}}


def ref(name: str = "gw", namespace: str | None = "infra", **extra: Any) -> JsonObj:
    out: JsonObj = {"name": name, **extra}
    if namespace is not None:
        out["namespace"] = namespace
    return out


def accepted(parent: JsonObj, status: str = "True", controller: str = CONTROLLER,
             observed: int | None = 1, reason: str = "Accepted") -> JsonObj:
    cond: JsonObj = {"type": "Accepted", "status": status, "reason": reason,
                     "message": "", "lastTransitionTime": "2024-03-01T00:00:00Z"}
    if observed is not None:
        cond["observedGeneration"] = observed
    return {"parentRef": parent, "controllerName": controller,
            "conditions": [cond, {"type": "ResolvedRefs", "status": "True"}]}


def route(kind: str = "HTTPRoute", name: str = "web", namespace: str = "shop", *,
          hostnames: list[Any] | None = None, parents: list[Any] | None = None,
          status: list[JsonObj] | None = None, generation: int = 1) -> JsonObj:
    """A route; without ``status`` every parentRef is Accepted by CONTROLLER."""
    refs = parents if parents is not None else [ref()]
    spec: JsonObj = {"parentRefs": refs,
                     "rules": [{"backendRefs": [{"name": "web", "port": 8080}]}]}
    if hostnames is not None:
        spec["hostnames"] = hostnames
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": kind,
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{kind}-{name}",
                         "resourceVersion": "11", "creationTimestamp": "2024-03-01T00:00:00Z",
                         "generation": generation},
            "spec": spec,
            "status": {"parents": status if status is not None
                       else [accepted(r) for r in refs]}}


# Any JSON value, biased towards strings the parsers look for.
JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2, 70000), st.text(max_size=6),
              st.sampled_from(["All", "Same", "Selector", "HTTP", "TLS", "HTTPRoute",
                               "*.example.com", "a.example.com", "True", "Accepted", "In"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=12)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON value (the value itself included)."""
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(paths(v, (*prefix, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(paths(v, (*prefix, i)))
    return out


def replace(obj: Any, path: tuple[Any, ...], new: Any) -> Any:
    """``obj`` with the value at ``path`` replaced by ``new``; ``obj`` itself is unchanged."""
    if not path:
        return new
    obj = copy.copy(obj)
    obj[path[0]] = replace(obj[path[0]], path[1:], new)
    return obj


# One well-formed object of each kind, for corrupting one part at a time.
SAMPLES = {
    "gateway": gateway(listeners=[
        listener("a", hostname="*.example.com"),
        listener("b", "TLS", 443, origin="Selector",
                 selector={"matchExpressions": [{"key": "k", "operator": "In",
                                                 "values": ["v"]}]},
                 kinds=[{"kind": "TLSRoute"}])]),
    "class": gateway_class(),
    "route": route(hostnames=["a.example.com"], parents=[ref(sectionName="a", port=80)]),
    "listenerset": {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
        "metadata": {"name": "extra", "namespace": "shop", "uid": "uid-ls",
                     "creationTimestamp": "2024-02-02T00:00:00Z", "generation": 1},
        "spec": {"parentRef": {"name": "gw", "namespace": "infra"},
                 "listeners": [listener("c", hostname="*.shop.example.com")]},
        "status": {"conditions": [{"type": "Accepted", "status": "True",
                                   "observedGeneration": 1}],
                   "listeners": [{"name": "c", "conditions": [
                       {"type": "Conflicted", "status": "False"}]}]}},
}
SAMPLES["gateway"]["spec"]["allowedListeners"] = {"namespaces": {
    "from": "Selector", "selector": {"matchLabels": {"team": "shop"}}}}
