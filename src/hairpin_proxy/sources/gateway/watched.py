"""What the Gateway API source watches, and how it slims each object for its caches. Pure:
the resources (the Gateway API's own and the implementations' settings objects) and their
slims, read by the source registry and the controller's Gateway source alike."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hairpin_proxy.apis import GATEWAY_GROUP, ISTIO_PROXY_CONFIG
from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.sources.gateway.model import ROUTE_RESOURCES
from hairpin_proxy.sources.gateway.slim import (
    slim_gateway,
    slim_gateway_class,
    slim_listener_set,
    slim_route,
)

ROUTE_PLURALS = {kind: plural for plural, kind in ROUTE_RESOURCES.items()}


def _slim_gateway(obj: JsonObj) -> JsonObj:
    """What routes and target discovery read of a Gateway: the listeners, plus the labels,
    the Istio proxy annotation and ``spec.infrastructure`` that say how its data plane is
    named and configured."""
    out = slim_gateway(obj)
    meta, spec = obj.get("metadata"), obj.get("spec")
    if isinstance(meta, dict) and isinstance(out.get("metadata"), dict):
        if isinstance(meta.get("labels"), dict):
            out["metadata"]["labels"] = meta["labels"]
        annotations = meta.get("annotations")
        if isinstance(annotations, dict) and ISTIO_PROXY_CONFIG in annotations:
            out["metadata"]["annotations"] = {
                ISTIO_PROXY_CONFIG: annotations[ISTIO_PROXY_CONFIG]}
    if isinstance(spec, dict) and isinstance(out.get("spec"), dict) \
            and "infrastructure" in spec:
        out["spec"]["infrastructure"] = spec["infrastructure"]
    return out


def _slim_gateway_class(obj: JsonObj) -> JsonObj:
    """The controller's name, plus ``parametersRef``: NGINX Gateway Fabric's PROXY setting
    may hang off the class."""
    out = slim_gateway_class(obj)
    spec = obj.get("spec")
    if isinstance(spec, dict) and isinstance(out.get("spec"), dict) \
            and "parametersRef" in spec:
        out["spec"]["parametersRef"] = spec["parametersRef"]
    return out


def _slim_policy(obj: JsonObj) -> JsonObj:
    """An implementation's policy object: its identity, age and spec."""
    meta = obj.get("metadata")
    keep = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "labels")
    out: JsonObj = {k: obj[k] for k in ("apiVersion", "kind") if k in obj}
    out["metadata"] = {k: meta[k] for k in keep if k in meta} if isinstance(meta, dict) else {}
    if "spec" in obj:
        out["spec"] = obj["spec"]
    return out


@dataclass(frozen=True)
class Wanted:
    group: str
    plural: str
    transform: Callable[[JsonObj], JsonObj]


WANTED = (
    Wanted(GATEWAY_GROUP, "gatewayclasses", _slim_gateway_class),
    Wanted(GATEWAY_GROUP, "gateways", _slim_gateway),
    # Standard channel since Gateway API v1.5: more listeners for a Gateway that allows them.
    Wanted(GATEWAY_GROUP, "listenersets", slim_listener_set),
    *(Wanted(GATEWAY_GROUP, plural, slim_route) for plural in ROUTE_RESOURCES),
    Wanted("gateway.envoyproxy.io", "clienttrafficpolicies", _slim_policy),
    Wanted("gateway.nginx.org", "nginxproxies", _slim_policy),
)
