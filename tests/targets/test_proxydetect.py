"""PROXY protocol detection from each implementation's own configuration."""
from __future__ import annotations

from typing import Any

import pytest

from hairpin_proxy.targets.proxydetect import (
    cilium_gateway,
    cilium_ingress,
    envoy_gateway,
    ingress_nginx,
    istio,
    istio_annotations,
    nginx_gateway_fabric,
    nginxproxy_ref_of_gateway,
    nginxproxy_ref_of_gatewayclass,
)


def cm(data: dict[str, Any] | None, name: str = "ingress-nginx-controller") -> dict[str, Any]:
    return {"metadata": {"namespace": "ingress-nginx", "name": name}, "data": data or {}}


@pytest.mark.parametrize(("value", "mode"), [
    ("true", "v1"), ("True", "v1"), ("1", "v1"), ("t", "v1"),
    ("false", "none"), ("0", "none"), ("F", "none"),
    ("", "none"), ("yes", "unknown"), (" true", "unknown")])
def test_ingress_nginx(value: str, mode: str) -> None:
    got = ingress_nginx(cm({"use-proxy-protocol": value}))
    assert got.mode == mode
    assert "ConfigMap ingress-nginx/ingress-nginx-controller" in got.reason


def test_ingress_nginx_default_and_missing() -> None:
    assert ingress_nginx(cm({})).mode == "none"
    assert "default false" in ingress_nginx(cm({})).reason
    assert ingress_nginx(None).mode == "unknown"


def test_cilium_keys_are_separate() -> None:
    assert cilium_gateway(cm({"enable-gateway-api-proxy-protocol": ""})).mode == "unknown"
    assert cilium_gateway(None).mode == "unknown"
    gw = cm({"enable-gateway-api-proxy-protocol": "true"}, "cilium-config")
    assert cilium_gateway(gw).mode == "v2" and cilium_ingress(gw).mode == "none"
    ing = cm({"enable-ingress-proxy-protocol": "true"}, "cilium-config")
    assert cilium_ingress(ing).mode == "v2" and cilium_gateway(ing).mode == "none"
    assert "enable-gateway-api-proxy-protocol=true" in cilium_gateway(gw).reason


def ctp(name: str, spec: dict[str, Any], ts: str = "2024-01-01T00:00:00Z",
        ns: str = "web") -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name, "creationTimestamp": ts},
            "spec": spec}


GW = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "public"}


def test_envoy_gateway_proxy_protocol_forms() -> None:
    assert envoy_gateway([], "web", "public").mode == "none"
    on = envoy_gateway([ctp("p", {"targetRefs": [GW], "proxyProtocol": {}})], "web", "public")
    assert on.mode == "v2" and on.reason == "ClientTrafficPolicy web/p proxyProtocol on"
    old = envoy_gateway([ctp("p", {"targetRef": GW, "enableProxyProtocol": True})],
                        "web", "public")
    assert old.mode == "v2" and "enableProxyProtocol" in old.reason
    # proxyProtocol wins over the deprecated field.
    both = ctp("p", {"targetRef": GW, "enableProxyProtocol": False,
                     "proxyProtocol": {"optional": True}})
    assert envoy_gateway([both], "web", "public").mode == "v2"
    off = ctp("p", {"targetRef": GW, "enableProxyProtocol": False})
    assert envoy_gateway([off], "web", "public").mode == "none"


def test_envoy_gateway_only_policies_for_this_gateway() -> None:
    policies = [ctp("other-ns", {"targetRef": GW, "proxyProtocol": {}}, ns="elsewhere"),
                ctp("other-gw", {"targetRef": dict(GW, name="x"), "proxyProtocol": {}}),
                ctp("wrong-kind", {"targetRef": dict(GW, kind="HTTPRoute"),
                                   "proxyProtocol": {}}),
                ctp("unrelated", {"targetRef": GW, "tcpKeepalive": {}})]
    assert envoy_gateway(policies, "web", "public").mode == "none"


def test_envoy_gateway_oldest_wins() -> None:
    newer = ctp("a", {"targetRef": GW, "enableProxyProtocol": False}, "2024-05-01T00:00:00Z")
    older = ctp("z", {"targetRef": GW, "proxyProtocol": {}}, "2024-01-01T00:00:00Z")
    assert envoy_gateway([newer, older], "web", "public").mode == "v2"
    same_time = ctp("b", {"targetRef": GW, "enableProxyProtocol": False})
    assert envoy_gateway([older, same_time], "web", "public").mode == "none"


def test_envoy_gateway_listener_only_is_unknown() -> None:
    one = ctp("p", {"targetRef": dict(GW, sectionName="https"), "proxyProtocol": {}})
    got = envoy_gateway([one], "web", "public")
    assert got.mode == "unknown" and "listener https" in got.reason
    whole = ctp("w", {"targetRef": GW, "proxyProtocol": {}}, "2023-01-01T00:00:00Z")
    assert envoy_gateway([one, whole], "web", "public").mode == "v2"


def test_envoy_gateway_selectors() -> None:
    sel = ctp("s", {"targetSelectors": [{"kind": "Gateway", "matchLabels": {"t": "x"}}],
                    "proxyProtocol": {}})
    assert envoy_gateway([sel], "web", "public").mode == "unknown"
    assert envoy_gateway([sel], "web", "public", {"t": "x"}).mode == "v2"
    assert envoy_gateway([sel], "web", "public", {"t": "y"}).mode == "none"
    expr = ctp("e", {"targetSelectors": [{"kind": "Gateway", "matchExpressions": [{}]}],
                     "proxyProtocol": {}})
    assert envoy_gateway([expr], "web", "public", {}).mode == "unknown"


def np(mode: str | None, name: str = "np") -> dict[str, Any]:
    spec = {"rewriteClientIP": {"mode": mode}} if mode else {}
    return {"metadata": {"namespace": "nginx-gateway", "name": name}, "spec": spec}


def test_nginx_gateway_fabric() -> None:
    assert nginx_gateway_fabric(None, None).mode == "none"
    assert nginx_gateway_fabric(None, np("ProxyProtocol")).mode == "v1"
    assert nginx_gateway_fabric(np("XForwardedFor"), np("ProxyProtocol")).mode == "none"
    assert nginx_gateway_fabric(np(None), np("ProxyProtocol")).mode == "v1"
    got = nginx_gateway_fabric(np("ProxyProtocol", "gw"), None)
    assert got.reason == "NginxProxy nginx-gateway/gw rewriteClientIP.mode=ProxyProtocol"
    assert nginx_gateway_fabric(np("Other"), None).mode == "unknown"


def test_nginxproxy_references() -> None:
    ref = {"group": "gateway.nginx.org", "kind": "NginxProxy", "name": "np"}
    assert nginxproxy_ref_of_gatewayclass({"spec": {"parametersRef": ref}}) is None
    assert nginxproxy_ref_of_gatewayclass(
        {"spec": {"parametersRef": dict(ref, namespace="ngf")}}) == ("ngf", "np")
    gw = {"metadata": {"namespace": "web"}, "spec": {"infrastructure": {"parametersRef": ref}}}
    assert nginxproxy_ref_of_gateway(gw) == ("web", "np")
    assert nginxproxy_ref_of_gateway({"metadata": {"namespace": "web"}, "spec": {
        "infrastructure": {"parametersRef": dict(ref, kind="ConfigMap")}}}) is None


def test_istio() -> None:
    on = {"proxy.istio.io/config": "gatewayTopology:\n  proxyProtocol: {}\n"}
    assert istio(on).mode == "v2"
    assert istio({"proxy.istio.io/config": '{"gatewayTopology": {"proxyProtocol": {}}}'}
                 ).mode == "v2"
    assert istio({}).mode == "unknown"
    assert istio({}, {}).mode == "none"
    assert istio({}, {"gatewayTopology": {"proxyProtocol": {}}}).mode == "v2"
    # The annotation leaving proxyProtocol out still lets the mesh default through.
    partial = {"proxy.istio.io/config": "gatewayTopology: {numTrustedProxies: 1}"}
    assert istio(partial, {"gatewayTopology": {"proxyProtocol": {}}}).mode == "v2"
    assert istio(partial, {}).mode == "none"
    assert istio({"proxy.istio.io/config": "[: bad"}).mode == "unknown"
    assert istio({"proxy.istio.io/config": "- a list"}).mode == "unknown"
    assert istio({"proxy.istio.io/config": "gatewayTopology: {proxyProtocol: 3}"}
                 ).mode == "unknown"


def test_istio_annotations_source() -> None:
    gw: dict[str, Any] = {"metadata": {"annotations": {"a": "1"}}, "spec": {}}
    assert istio_annotations(gw) == {"a": "1"}
    gw["spec"] = {"infrastructure": {"annotations": {"b": "2"}}}
    assert istio_annotations(gw) == {"b": "2"}
