"""From a target key to the data plane behind it, or why there is none. Pure.

The ``--target`` map wins; otherwise the Service is found by the implementation's naming and
labelling conventions (discovery.py) and the PROXY expectation is read from the
implementation's own configuration (proxydetect.py), chosen by the GatewayClass's
``controllerName`` or the IngressClass's ``spec.controller``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from hairpin_proxy.targets import proxydetect
from hairpin_proxy.targets.discovery import (
    CILIUM_INGRESS,
    INGRESS_NGINX,
    DataPlane,
    controller_of,
    dataplane_of,
    find_gateway_service,
    find_ingressclass_service,
)
from hairpin_proxy.targets.mapping import MapEntry
from hairpin_proxy.targets.model import (
    DEFAULT_KEY,
    KeyKindSpec,
    KeyParts,
    Target,
    parse_declared_key,
    parse_key,
    split_service,
)

Problem = Literal["target-not-found", "target-proxy-unknown", "target-no-proxy"]

# GatewayClass spec.controllerName of the implementations whose PROXY setting we can read.
ENVOY_GATEWAY: Final = "gateway.envoyproxy.io/gatewayclass-controller"
NGINX_GATEWAY_FABRIC: Final = "gateway.nginx.org/nginx-gateway-controller"
CILIUM: Final = "io.cilium/gateway-controller"
ISTIO: Final = "istio.io/gateway-controller"

# The resource each implementation's PROXY setting lives in, when it is a custom resource.
_NEEDS: Final = {ENVOY_GATEWAY: "clienttrafficpolicies", NGINX_GATEWAY_FABRIC: "nginxproxies"}

# The ConfigMap names read for PROXY settings (the Helm charts' defaults; anything else is
# settled with the --target map).
INGRESS_NGINX_CONFIGMAP: Final = "ingress-nginx-controller"
CILIUM_CONFIGMAP: Final = ("kube-system", "cilium-config")


@dataclass(frozen=True)
class TargetFacts:
    """What the cluster says about its data planes (objects as slim dicts)."""

    services: Sequence[Mapping[str, Any]] = ()
    # IngressClass name → object; Gateway "NAMESPACE/NAME" → object; GatewayClass name → object.
    ingress_classes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    gateways: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    gateway_classes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # "NAMESPACE/NAME" → ConfigMap, for the ConfigMaps named above.
    configmaps: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    client_traffic_policies: Sequence[Mapping[str, Any]] = ()
    # "NAMESPACE/NAME" → NginxProxy.
    nginx_proxies: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    cluster_domain: str = "cluster.local"
    # Resources (plurals) the API serves but would not let us read: their silence is not
    # "no setting" but unknown.
    unreadable: frozenset[str] = frozenset()
    # The Service (NAMESPACE/NAME) the proxy's --target-server names ("" none): a data plane
    # found to be that Service is served by the main proxy Service, without a slot.
    default_service: str = ""
    # What registered sources add for their own key kinds: name → objects (e.g. Traefik's
    # Deployments, whose arguments say whether it expects the PROXY protocol).
    extra: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    # The key kinds the sources declare (registry.DECLARED_KINDS), by name.
    kinds: Mapping[str, DeclaredKind] = field(default_factory=dict)


@dataclass(frozen=True)
class Unresolved:
    """A target whose hosts are not redirected, and why (in words for Events and doctor)."""

    key: str
    problem: Problem
    message: str
    # The data plane's Service (NAMESPACE/NAME) when it was found ("" otherwise).
    service: str = ""


@dataclass(frozen=True)
class KindResolver:
    """How the data plane of a registered key kind is found (``find``) and whether it
    expects the PROXY protocol (``detect``, given the plane found)."""

    find: Callable[[KeyParts, TargetFacts], DataPlane | None]
    detect: Callable[[KeyParts, TargetFacts, DataPlane], proxydetect.Detected]


@dataclass(frozen=True)
class DeclaredKind:
    """A key kind a source declares in its registration: its form and how it resolves."""

    spec: KeyKindSpec
    resolver: KindResolver


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _service(facts: TargetFacts, ref: str) -> Mapping[str, Any] | None:
    namespace, name = split_service(ref)
    for svc in facts.services:
        meta = _dict(svc.get("metadata"))
        if meta.get("namespace") == namespace and meta.get("name") == name:
            return svc
    return None


def _gateway_detected(facts: TargetFacts, namespace: str, name: str
                      ) -> proxydetect.Detected:
    gateway = facts.gateways.get(f"{namespace}/{name}") or {}
    class_name = _dict(gateway.get("spec")).get("gatewayClassName")
    gateway_class = facts.gateway_classes.get(class_name) if isinstance(class_name, str) else None
    controller = _dict((gateway_class or {}).get("spec")).get("controllerName")
    if controller in _NEEDS and _NEEDS[controller] in facts.unreadable:
        return proxydetect.Detected("unknown", f"the {_NEEDS[controller]} that say whether "
                                    "it expects the PROXY protocol cannot be read")
    if controller == ENVOY_GATEWAY:
        labels = _dict(_dict(gateway.get("metadata")).get("labels"))
        return proxydetect.envoy_gateway(facts.client_traffic_policies, namespace, name,
                                         {str(k): str(v) for k, v in labels.items()})
    if controller == NGINX_GATEWAY_FABRIC:
        def nginx_proxy(ref: tuple[str, str] | None) -> Mapping[str, Any] | None:
            return facts.nginx_proxies.get(f"{ref[0]}/{ref[1]}") if ref else None
        return proxydetect.nginx_gateway_fabric(
            nginx_proxy(proxydetect.nginxproxy_ref_of_gateway(gateway)),
            nginx_proxy(proxydetect.nginxproxy_ref_of_gatewayclass(gateway_class or {})))
    if controller == CILIUM:
        return proxydetect.cilium_gateway(facts.configmaps.get("/".join(CILIUM_CONFIGMAP)))
    if controller == ISTIO:
        return proxydetect.istio(proxydetect.istio_annotations(gateway))
    if not gateway:
        return proxydetect.Detected("unknown", f"Gateway {namespace}/{name} is not known")
    what = f"controller {controller}" if isinstance(controller, str) else "its GatewayClass"
    return proxydetect.Detected("unknown", f"hairpin-proxy cannot read whether {what} "
                                "expects the PROXY protocol")


def _class_detected(facts: TargetFacts, name: str, plane: DataPlane
                    ) -> proxydetect.Detected:
    ingress_class = facts.ingress_classes.get(name) or {}
    controller = controller_of(str(_dict(ingress_class.get("spec")).get("controller") or ""))
    if controller == INGRESS_NGINX:
        namespace = split_service(plane.service)[0]
        return proxydetect.ingress_nginx(
            facts.configmaps.get(f"{namespace}/{INGRESS_NGINX_CONFIGMAP}"))
    if controller == CILIUM_INGRESS:
        return proxydetect.cilium_ingress(facts.configmaps.get("/".join(CILIUM_CONFIGMAP)))
    return proxydetect.Detected("unknown", f"hairpin-proxy cannot read whether IngressClass "
                                f"{name}'s controller expects the PROXY protocol")


def _how(key: str) -> str:
    parts = parse_key(key)
    if parts.kind == "gateway":
        return f"gateway:{parts.namespace}/{parts.name}"
    if parts.kind != "ingressclass":
        return f"{parts.kind}:{parts.namespace + '/' if parts.namespace else ''}{parts.name}"
    return parts.name


def resolve(key: str, facts: TargetFacts, target_map: Mapping[str, MapEntry]
            ) -> Target | Unresolved:
    """The data plane of ``key`` (an ``ingressclass/…`` or ``gateway/…`` key)."""
    if key == DEFAULT_KEY:
        raise ValueError("the default target is the proxy's own --target-server")
    parts = parse_declared_key(key, {k: d.spec for k, d in facts.kinds.items()})
    hint = f"set --target {_how(key)}=NAMESPACE/SERVICE:v1|v2|none"
    entry = target_map.get(key)
    plane: DataPlane | None
    declared = facts.kinds.get(parts.kind)
    kind = declared.resolver if declared is not None else None
    if entry is not None:
        svc = _service(facts, entry.service)
        if svc is None:
            return Unresolved(key, "target-not-found",
                              f"--target names Service {entry.service}, which does not exist")
        plane = dataplane_of(svc, "--target map")
    elif kind is not None:
        plane = kind.find(parts, facts)
    elif parts.kind == "gateway":
        gateway = facts.gateways.get(f"{parts.namespace}/{parts.name}") or {}
        class_name = _dict(gateway.get("spec")).get("gatewayClassName")
        plane = find_gateway_service(facts.services, parts.namespace, parts.name,
                                     class_name if isinstance(class_name, str) else "")
    else:
        ingress_class = facts.ingress_classes.get(parts.name)
        plane = (find_ingressclass_service(facts.services, ingress_class)
                 if ingress_class is not None else None)
    if plane is None:
        return Unresolved(key, "target-not-found",
                          f"no Service found for {key}; {hint}")
    if plane.http_port == 0 and plane.https_port == 0:
        return Unresolved(key, "target-not-found",
                          f"Service {plane.service} has no port 80/443 or http/https; {hint}")
    if entry is not None and entry.proxy is not None:
        detected = proxydetect.Detected(entry.proxy, "--target map")
    elif kind is not None:
        detected = kind.detect(parts, facts, plane)
    elif parts.kind == "gateway":
        detected = _gateway_detected(facts, parts.namespace, parts.name)
    else:
        detected = _class_detected(facts, parts.name, plane)
    target = plane.to_target(key, detected.mode, detected.reason, facts.cluster_domain)
    if detected.mode == "none":
        return Unresolved(key, "target-no-proxy",
                          f"{plane.service} does not expect the PROXY protocol "
                          f"({detected.reason}): its hosts do not hairpin-break")
    if detected.mode == "unknown":
        return Unresolved(key, "target-proxy-unknown", f"{detected.reason}; {hint}",
                          plane.service)
    return target
