"""Finding a Gateway's or IngressClass's data-plane Service."""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hairpin_proxy.targets.discovery import (
    advertise_address,
    controller_of,
    dataplane_of,
    find_gateway_service,
    find_ingressclass_service,
    service_addresses,
    service_of_host,
    service_ports,
    usable,
)


def svc(ns: str, name: str, labels: dict[str, str] | None = None, *, type_: str = "ClusterIP",
        ports: list[dict[str, Any]] | None = None, lb: list[dict[str, str]] | None = None,
        cluster_ips: list[str] | None = None) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name, "labels": labels or {}},
            "spec": {"type": type_, "clusterIPs": cluster_ips or ["10.0.0.1"],
                     "ports": ports if ports is not None else [
                         {"name": "http", "port": 80}, {"name": "https", "port": 443}]},
            "status": {"loadBalancer": {"ingress": lb or []}}}


def test_ports_number_first_then_name_tcp_only() -> None:
    s = svc("a", "b", ports=[{"name": "https-443-h3", "port": 443, "protocol": "UDP"},
                             {"name": "http", "port": 8080}, {"name": "web", "port": 80},
                             {"name": "https", "port": 8443, "protocol": "TCP"}])
    assert service_ports(s) == (80, 8443)
    assert service_ports(svc("a", "b", ports=[{"name": "metrics", "port": 10254}])) == (0, 0)
    assert service_ports(svc("a", "b", ports=[{"port": True}, {"port": "80"}])) == (0, 0)
    assert service_ports({"spec": "junk"}) == (0, 0)


def test_advertise_address() -> None:
    s = svc("a", "b", lb=[{"hostname": "lb.example"}, {"ip": "nope"}, {"ip": "2001:DB8::1"},
                          {"ip": "203.0.113.1"}])
    assert advertise_address(s) == "2001:db8::1"
    assert advertise_address(svc("a", "b")) == ""
    assert advertise_address({"status": {"loadBalancer": {"ingress": "x"}}}) == ""


def test_usable() -> None:
    assert usable(svc("a", "b"))
    assert not usable(svc("a", "b", cluster_ips=["None"]))
    assert not usable(svc("a", "b", type_="ExternalName"))
    assert not usable(svc("a", "b", ports=[{"name": "metrics", "port": 9000}]))
    assert not usable({"metadata": {"name": "x"}, "spec": {"clusterIPs": ["1.2.3.4"]}})


def test_gep1762_label_in_gateway_namespace_only() -> None:
    services = [svc("other", "x", {"gateway.networking.k8s.io/gateway-name": "public"}),
                svc("web", "public-istio", {"gateway.networking.k8s.io/gateway-name": "public"},
                    type_="LoadBalancer", lb=[{"ip": "198.51.100.7"}])]
    dp = find_gateway_service(services, "web", "public")
    assert dp is not None and dp.service == "web/public-istio"
    assert dp.found_by == "label gateway.networking.k8s.io/gateway-name"
    assert dp.advertise_address == "198.51.100.7" and (dp.http_port, dp.https_port) == (80, 443)


def test_envoy_gateway_labels_any_namespace() -> None:
    labels = {"gateway.envoyproxy.io/owning-gateway-name": "public",
              "gateway.envoyproxy.io/owning-gateway-namespace": "web"}
    wrong_ns = dict(labels, **{"gateway.envoyproxy.io/owning-gateway-namespace": "other"})
    services = [svc("envoy-gateway-system", "envoy-other", wrong_ns),
                svc("envoy-gateway-system", "envoy-web-public-abc", labels,
                    ports=[{"name": "http-80", "port": 80}, {"name": "https-443", "port": 443},
                           {"name": "https-443-h3", "port": 443, "protocol": "UDP"}])]
    dp = find_gateway_service(services, "web", "public")
    assert dp is not None and dp.service == "envoy-gateway-system/envoy-web-public-abc"
    assert "owning-gateway-name" in dp.found_by


def test_envoy_merged_gateways_needs_class() -> None:
    services = [svc("envoy-gateway-system", "envoy-eg",
                    {"gateway.envoyproxy.io/owning-gatewayclass": "eg"})]
    assert find_gateway_service(services, "web", "public") is None
    dp = find_gateway_service(services, "web", "public", "eg")
    assert dp is not None and "merged" in dp.found_by


def test_cilium_name() -> None:
    services = [svc("web", "cilium-gateway-public", ports=[{"name": "port-80", "port": 80}]),
                svc("other", "cilium-gateway-public")]
    dp = find_gateway_service(services, "web", "public")
    assert dp is not None and dp.service == "web/cilium-gateway-public"
    assert dp.found_by == "name cilium-gateway-<name>" and dp.https_port == 0


def test_class_suffixed_name_for_ngf_and_istio() -> None:
    services = [svc("web", "public-nginx")]
    assert find_gateway_service(services, "web", "public") is None
    dp = find_gateway_service(services, "web", "public", "nginx")
    assert dp is not None and dp.found_by == "name <gateway>-<gatewayclass>"


def test_label_beats_name_and_load_balancer_beats_cluster_ip() -> None:
    lab = {"gateway.networking.k8s.io/gateway-name": "public"}
    services = [svc("web", "public-nginx"), svc("web", "b", lab),
                svc("web", "z", lab, type_="LoadBalancer"), svc("web", "a", lab)]
    dp = find_gateway_service(services, "web", "public", "nginx")
    assert dp is not None and dp.service == "web/z"
    assert "first of 3" in dp.found_by
    services[2]["spec"]["type"] = "ClusterIP"
    dp = find_gateway_service(services, "web", "public", "nginx")
    assert dp is not None and dp.service == "web/a"


def test_unusable_label_match_falls_through() -> None:
    services = [svc("web", "x", {"gateway.networking.k8s.io/gateway-name": "public"},
                    cluster_ips=["None"]),
                svc("web", "cilium-gateway-public")]
    dp = find_gateway_service(services, "web", "public")
    assert dp is not None and dp.service == "web/cilium-gateway-public"


NGINX_LABELS = {"app.kubernetes.io/name": "ingress-nginx",
                "app.kubernetes.io/component": "controller",
                "app.kubernetes.io/instance": "ingress-nginx"}


def ingressclass(controller: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "x", "labels": labels or {}},
            "spec": {"controller": controller}}


def test_ingress_nginx_prefers_load_balancer_and_skips_metrics() -> None:
    services = [
        svc("ingress-nginx", "ingress-nginx-controller-metrics", NGINX_LABELS,
            ports=[{"name": "metrics", "port": 10254}]),
        svc("ingress-nginx", "ingress-nginx-controller-admission",
            dict(NGINX_LABELS, **{"app.kubernetes.io/component": "admission-webhook"}),
            ports=[{"name": "https-webhook", "port": 443}]),
        svc("ingress-nginx", "ingress-nginx-controller", NGINX_LABELS, type_="LoadBalancer"),
        svc("ingress-nginx", "ingress-nginx-controller-internal", NGINX_LABELS),
    ]
    dp = find_ingressclass_service(services, ingressclass("k8s.io/ingress-nginx"))
    assert dp is not None and dp.service == "ingress-nginx/ingress-nginx-controller"
    assert "k8s.io/ingress-nginx" in dp.found_by and "first of 2" in dp.found_by


def test_instance_label_narrows_to_the_same_release() -> None:
    other = dict(NGINX_LABELS, **{"app.kubernetes.io/instance": "public"})
    services = [svc("a", "ingress-nginx-controller", NGINX_LABELS, type_="LoadBalancer"),
                svc("b", "public-controller", other)]
    cls = ingressclass("k8s.io/ingress-nginx", {"app.kubernetes.io/instance": "public"})
    dp = find_ingressclass_service(services, cls)
    assert dp is not None and dp.service == "b/public-controller"
    assert "app.kubernetes.io/instance=public" in dp.found_by
    cls["metadata"]["labels"]["app.kubernetes.io/instance"] = "gone"
    assert find_ingressclass_service(services, cls) is None


def test_traefik_haproxy_cilium_contour() -> None:
    traefik = svc("traefik", "traefik", {"app.kubernetes.io/name": "traefik",
                                         "app.kubernetes.io/instance": "traefik-traefik"},
                  type_="LoadBalancer", ports=[{"name": "web", "port": 80},
                                               {"name": "websecure", "port": 443}])
    haproxy = svc("haproxy", "haproxy-kubernetes-ingress",
                  {"app.kubernetes.io/name": "kubernetes-ingress"})
    cilium = svc("kube-system", "cilium-ingress", type_="LoadBalancer")
    contour = svc("projectcontour", "envoy", type_="LoadBalancer")
    pool = [traefik, haproxy, cilium, contour, svc("elsewhere", "envoy")]
    cases = {"traefik.io/ingress-controller": "traefik/traefik",
             "haproxy.org/ingress-controller/haproxy": "haproxy/haproxy-kubernetes-ingress",
             "haproxy.org/ingress-controller": "haproxy/haproxy-kubernetes-ingress",
             "cilium.io/ingress-controller": "kube-system/cilium-ingress",
             "projectcontour.io/ingress-controller": "projectcontour/envoy",
             "projectcontour.io/contour": "projectcontour/envoy"}
    for controller, want in cases.items():
        dp = find_ingressclass_service(pool, ingressclass(controller))
        assert dp is not None and dp.service == want, controller
    dp = find_ingressclass_service(pool, ingressclass("traefik.io/ingress-controller"))
    assert dp is not None and (dp.http_port, dp.https_port) == (80, 443)


def test_unknown_controller() -> None:
    assert controller_of("example.com/ingress") == ""
    assert controller_of("haproxy.org/ingress-controllerX") == ""
    assert find_ingressclass_service([svc("a", "b")], ingressclass("example.com/x")) is None
    assert find_ingressclass_service([svc("a", "b")], {"spec": None}) is None


def test_dataplane_to_target() -> None:
    dp = dataplane_of(svc("ns", "s", lb=[{"ip": "192.0.2.1"}]), "--target map")
    t = dp.to_target("ingressclass/nginx", "v1", "--target map", "cluster.local")
    assert t.upstream == "s.ns.svc.cluster.local" and t.advertise_address == "192.0.2.1"
    assert t.found_by == "--target map" and t.redirected


junk = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3)
                    | st.dictionaries(st.sampled_from(["metadata", "spec", "status", "ports",
                                                       "labels", "name", "namespace", "type",
                                                       "clusterIPs", "port", "ip"]), c,
                                      max_size=4), max_leaves=15)


@given(st.lists(junk, max_size=4))
def test_malformed_services_never_raise(services: list[Any]) -> None:
    find_gateway_service(services, "web", "public", "cls")
    find_ingressclass_service(services, ingressclass("k8s.io/ingress-nginx"))


@pytest.mark.parametrize("lbtype", ["LoadBalancer", "NodePort"])
def test_order_of_input_does_not_matter(lbtype: str) -> None:
    lab = {"gateway.networking.k8s.io/gateway-name": "g"}
    a, b = svc("n", "a", lab), svc("n", "b", lab, type_=lbtype)
    assert find_gateway_service([a, b], "n", "g") == find_gateway_service([b, a], "n", "g")


def test_service_addresses_are_its_cluster_ips() -> None:
    assert service_addresses({"spec": {"clusterIPs": ["10.0.0.1", "fd00::1"],
                                       "clusterIP": "10.0.0.1"}}) == ("10.0.0.1", "fd00::1")
    assert service_addresses({"spec": {"clusterIP": "10.0.0.2"}}) == ("10.0.0.2",)
    for none in (None, {}, {"spec": None}, {"spec": {"clusterIP": "None"}},
                 {"spec": {"clusterIPs": ["None"]}}, {"spec": {"clusterIPs": [7, ""]}}):
        assert service_addresses(none) == ()


NGINX_SVC = "ingress-nginx/ingress-nginx-controller"


@pytest.mark.parametrize(("server", "expected"), [
    ("ingress-nginx-controller.ingress-nginx.svc.cluster.local", NGINX_SVC),
    ("ingress-nginx-controller.ingress-nginx.svc.cluster.local.", NGINX_SVC),
    ("Traefik.Kube-System.svc", "kube-system/traefik"),
    ("traefik.kube-system", "kube-system/traefik"),
    # Another cluster domain, or a name outside the cluster: no Service of ours to match.
    ("traefik.kube-system.svc.other.local", ""),
    ("ingress.example.com", ""),
    ("localhost", ""),
    ("", ""),
    ("a_b.ns.svc.cluster.local", ""),
])
def test_service_of_host_reads_the_target_servers_name(server: str, expected: str) -> None:
    assert service_of_host(server, "cluster.local", []) == expected


def test_service_of_host_matches_an_address_to_a_cluster_ip() -> None:
    svcs = [{"metadata": {"namespace": "ingress-nginx", "name": "ingress-nginx-controller"},
             "spec": {"clusterIPs": ["10.96.0.10", "fd00::10"]}},
            {"metadata": {"namespace": "web", "name": "headless"},
             "spec": {"clusterIPs": ["None"]}}]
    assert service_of_host("10.96.0.10", "cluster.local", svcs) == (
        "ingress-nginx/ingress-nginx-controller")
    assert service_of_host("[fd00:0::10]", "cluster.local", svcs) == (
        "ingress-nginx/ingress-nginx-controller")
    assert service_of_host("10.96.0.11", "cluster.local", svcs) == ""


_LABELS = st.from_regex(r"[a-z]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)


# A namespace called "svc" makes NAME.svc (no namespace) ambiguous; the API allows it, but
# the spelling without a namespace does not exist, so the property leaves it out.
@given(_LABELS, _LABELS.filter(lambda n: n != "svc"),
       st.sampled_from(["cluster.local", "k8s.example"]),
       st.sampled_from(["", ".svc", ".svc.{domain}", ".svc.{domain}."]))
def test_service_of_host_names_the_service_in_every_spelling(
        name: str, namespace: str, domain: str, tail: str) -> None:
    server = f"{name}.{namespace}{tail.format(domain=domain)}"
    assert service_of_host(server, domain, []) == f"{namespace}/{name}"
    assert service_of_host(server.upper(), domain, []) == f"{namespace}/{name}"
    # One more label is a name outside the cluster (or in another one).
    assert service_of_host(f"{name}.{server}", domain, []) == ""
