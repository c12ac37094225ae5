"""From a target key to its data plane, or the reason there is none."""

from __future__ import annotations

from typing import Any

import pytest

from hairpin_proxy.sources.registry import KEY_KIND_SPECS
from hairpin_proxy.targets.mapping import parse_target_flags
from hairpin_proxy.targets.model import Target
from hairpin_proxy.targets.resolve import (
    CILIUM,
    ENVOY_GATEWAY,
    NGINX_GATEWAY_FABRIC,
    TargetFacts,
    Unresolved,
    resolve,
)


def svc(ns: str, name: str, labels: dict[str, str] | None = None, *,
        lb: str = "", ports: tuple[int, ...] = (80, 443)) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name, "labels": labels or {}},
            "spec": {"type": "LoadBalancer" if lb else "ClusterIP", "clusterIPs": ["10.0.0.9"],
                     "ports": [{"port": p, "protocol": "TCP"} for p in ports]},
            "status": {"loadBalancer": {"ingress": [{"ip": lb}] if lb else []}}}


def gateway(ns: str, name: str, cls: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name},
            "spec": {"gatewayClassName": cls, **spec}}


def gclass(name: str, controller: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"controllerName": controller, **spec}}


GEP = "gateway.networking.k8s.io/gateway-name"


def test_envoy_gateway_found_and_proxy_read_from_client_traffic_policy() -> None:
    facts = TargetFacts(
        services=[svc("envoy-gateway-system", "envoy-web-public-1234abcd",
                      {"gateway.envoyproxy.io/owning-gateway-name": "public",
                       "gateway.envoyproxy.io/owning-gateway-namespace": "web"},
                      lb="203.0.113.10")],
        gateways={"web/public": gateway("web", "public", "eg")},
        gateway_classes={"eg": gclass("eg", ENVOY_GATEWAY)},
        client_traffic_policies=[{
            "metadata": {"namespace": "web", "name": "pp",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                     "name": "public"}], "proxyProtocol": {}}}])
    got = resolve("gateway/web/public", facts, {})
    assert isinstance(got, Target)
    assert got.service == "envoy-gateway-system/envoy-web-public-1234abcd"
    assert got.upstream == "envoy-web-public-1234abcd.envoy-gateway-system.svc.cluster.local"
    assert got.proxy == "v2" and "ClientTrafficPolicy web/pp" in got.proxy_source
    assert got.advertise_address == "203.0.113.10"


def test_gateway_without_proxy_policy_is_not_redirected() -> None:
    facts = TargetFacts(services=[svc("web", "public-ngf", {GEP: "public"})],
                        gateways={"web/public": gateway("web", "public", "ngf")},
                        gateway_classes={"ngf": gclass("ngf", NGINX_GATEWAY_FABRIC)})
    got = resolve("gateway/web/public", facts, {})
    assert isinstance(got, Unresolved) and got.problem == "target-no-proxy"
    assert "web/public-ngf does not expect the PROXY protocol" in got.message


def test_unknown_implementation_asks_for_the_map_and_the_map_settles_it() -> None:
    facts = TargetFacts(services=[svc("web", "public", {GEP: "public"})],
                        gateways={"web/public": gateway("web", "public", "kg")},
                        gateway_classes={"kg": gclass("kg", "kgateway.dev/kgateway")})
    got = resolve("gateway/web/public", facts, {})
    assert isinstance(got, Unresolved) and got.problem == "target-proxy-unknown"
    assert "--target gateway:web/public=NAMESPACE/SERVICE" in got.message
    mapped = resolve("gateway/web/public", facts,
                     parse_target_flags(["gateway:web/public=web/public:v1"], KEY_KIND_SPECS))
    assert isinstance(mapped, Target) and mapped.proxy == "v1"
    assert mapped.found_by == "--target map" and mapped.proxy_source == "--target map"


def test_map_naming_a_missing_service_is_not_found() -> None:
    got = resolve("ingressclass/nginx", TargetFacts(),
                  parse_target_flags(["nginx=ingress/missing:v1"], KEY_KIND_SPECS))
    assert isinstance(got, Unresolved) and got.problem == "target-not-found"
    assert "ingress/missing" in got.message


def test_map_without_version_detects_it() -> None:
    facts = TargetFacts(services=[svc("kube-system", "cilium-gateway-public")],
                        gateways={"web/public": gateway("web", "public", "cilium")},
                        gateway_classes={"cilium": gclass("cilium", CILIUM)},
                        configmaps={"kube-system/cilium-config": {
                            "metadata": {"namespace": "kube-system", "name": "cilium-config"},
                            "data": {"enable-gateway-api-proxy-protocol": "true"}}})
    got = resolve("gateway/web/public", facts,
                  parse_target_flags(["gateway:web/public=kube-system/cilium-gateway-public"],
                                     KEY_KIND_SPECS))
    assert isinstance(got, Target) and got.proxy == "v2"


def test_ingress_nginx_class_reads_its_configmap() -> None:
    labels = {"app.kubernetes.io/name": "ingress-nginx",
              "app.kubernetes.io/component": "controller"}
    classes = {"nginx": {"metadata": {"name": "nginx"},
                         "spec": {"controller": "k8s.io/ingress-nginx"}}}
    cm = {"metadata": {"namespace": "ingress-nginx", "name": "ingress-nginx-controller"},
          "data": {"use-proxy-protocol": "true"}}
    facts = TargetFacts(services=[svc("ingress-nginx", "ingress-nginx-controller", labels,
                                      lb="198.51.100.7")],
                        ingress_classes=classes,
                        configmaps={"ingress-nginx/ingress-nginx-controller": cm})
    got = resolve("ingressclass/nginx", facts, {})
    assert isinstance(got, Target) and got.proxy == "v1"
    off = TargetFacts(services=facts.services, ingress_classes=classes, configmaps={
        "ingress-nginx/ingress-nginx-controller": {**cm, "data": {}}})
    got = resolve("ingressclass/nginx", off, {})
    assert isinstance(got, Unresolved) and got.problem == "target-no-proxy"


def test_missing_gateway_service_and_portless_service() -> None:
    facts = TargetFacts(gateways={"web/public": gateway("web", "public", "x")})
    got = resolve("gateway/web/public", facts, {})
    assert isinstance(got, Unresolved) and got.problem == "target-not-found"
    facts = TargetFacts(services=[svc("web", "odd", ports=(8080,))])
    got = resolve("ingressclass/x", facts, parse_target_flags(["x=web/odd:v1"], KEY_KIND_SPECS))
    assert isinstance(got, Unresolved) and got.problem == "target-not-found"
    assert "no port 80/443" in got.message


def test_default_key_is_refused() -> None:
    with pytest.raises(ValueError, match="--target-server"):
        resolve("default", TargetFacts(), {})
