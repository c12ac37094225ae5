"""Readings of API objects: PROXY-protocol annotations, ipMode, image tags, readiness."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.doctor import facts as f
from hairpin_proxy.wildcards import covers
from tests.doctor.objects import coredns_deployment, daemonset, endpoint_slice
from tests.fakeapi.fixtures import service


@pytest.mark.parametrize(("key", "value", "enabled"), [
    ("service.beta.kubernetes.io/aws-load-balancer-proxy-protocol", "*", True),
    ("service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol", "true", True),
    ("service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol", "false", False),
    ("load-balancer.hetzner.cloud/uses-proxyprotocol", "true", True),
    ("service.beta.kubernetes.io/linode-loadbalancer-default-proxy-protocol", "v2", True),
    ("service.beta.kubernetes.io/linode-loadbalancer-default-proxy-protocol", "none", False),
    ("service.beta.kubernetes.io/linode-loadbalancer-proxy-protocol", "v1", True),
    ("loadbalancer.openstack.org/proxy-protocol", "v2", True),
    ("service.beta.kubernetes.io/scw-loadbalancer-proxy-protocol-v2", "80,443", True),
    ("service.beta.kubernetes.io/scw-loadbalancer-proxy-protocol-v1", "false", False),
    ("oci-network-load-balancer.oraclecloud.com/is-ppv2-enabled", "true", True),
    ("loadbalancer.openstack.org/proxy-protocol", "sometimes", None),
])
def test_proxy_protocol_annotations(key: str, value: str, enabled: bool | None) -> None:
    (setting,) = f.proxy_protocol_settings({key: value, "unrelated": "true"})
    assert (setting.annotation, setting.value, setting.enabled) == (key, value, enabled)
    assert setting.provider


def test_aws_controller_target_group_attributes() -> None:
    key = "service.beta.kubernetes.io/aws-load-balancer-target-group-attributes"
    on = f.proxy_protocol_settings(
        {key: "deregistration_delay.timeout_seconds=30,proxy_protocol_v2.enabled=true"})
    assert [s.enabled for s in on] == [True]
    assert f.proxy_protocol_settings({key: "deregistration_delay.timeout_seconds=30"}) == ()
    assert [s.enabled for s in f.proxy_protocol_settings(
        {key: "proxy_protocol_v2.enabled=false"})] == [False]


def test_lb_service_reads_status_and_annotations() -> None:
    svc = service("ingress-nginx", "ingress-nginx-controller", type="LoadBalancer",
                  lb_ingress=[{"ip": "203.0.113.7", "ipMode": "Proxy"},
                              {"ip": "2001:db8::7"}])
    svc["metadata"]["annotations"] = {"load-balancer.hetzner.cloud/uses-proxyprotocol": "true"}
    lb = f.lb_service(svc)
    assert lb is not None
    assert lb.name == "ingress-nginx/ingress-nginx-controller"
    assert [(e.ip, e.ip_mode) for e in lb.entries] == [("203.0.113.7", "Proxy"),
                                                       ("2001:db8::7", "")]
    assert not lb.hostname_only
    assert [p.provider for p in lb.proxy_protocol] == ["Hetzner Cloud"]
    assert f.lb_service(service("default", "web")) is None
    only_name = f.lb_service(service("a", "b", type="LoadBalancer",
                                     lb_ingress=[{"hostname": "lb.example.net"}]))
    assert only_name is not None and only_name.hostname_only
    pending = f.lb_service(service("a", "c", type="LoadBalancer"))
    assert pending is not None and pending.entries == () and not pending.hostname_only


def test_lb_address_index_and_classification() -> None:
    lb = f.LbService("ns/lb", (f.LbEntry("ns/lb", "2001:DB8::7", "", "VIP"),
                               f.LbEntry("ns/lb", "", "lb.example.net", "")), ())
    index = f.lb_address_index([lb])
    assert set(index) == {"2001:db8::7"}
    assert f.classify_address("2001:db8::7", index, ["10.96.0.9"]) == "lb"
    assert f.classify_address("[2001:db8::7]", index, []) == "lb"
    assert f.classify_address("10.96.0.9", index, ["10.96.0.9"]) == "proxy"
    # The same address written differently is the same address.
    assert f.classify_address("2001:db8:0:0::7", index, []) == "lb"
    assert f.classify_address("fd00::9", index, ["FD00:0000::0009"]) == "proxy"
    assert f.classify_address("198.51.100.1", index, ["10.96.0.9"]) == "other"


def test_ready_endpoints_counts_unset_as_ready() -> None:
    slices: list[dict[str, Any]] = [
        endpoint_slice("hp", "hairpin-proxy", ["10.0.0.1", "10.0.0.2"], ready=True),
        endpoint_slice("hp", "hairpin-proxy", ["10.0.0.3"], ready=False),
        endpoint_slice("hp", "hairpin-proxy", ["10.0.0.4"], ready=None),
        {"endpoints": None}, {"endpoints": ["junk"]},
    ]
    assert f.ready_endpoints(slices) == 3
    assert f.ready_endpoints([]) == 0


@pytest.mark.parametrize(("image", "version"), [
    ("registry.k8s.io/coredns/coredns:v1.11.1", (1, 11, 1)),
    ("rancher/mirrored-coredns-coredns:1.12.0", (1, 12, 0)),
    ("602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/coredns:v1.8.4-eksbuild.1", (1, 8, 4)),
    ("localhost:5000/coredns:1.7.0", (1, 7, 0)),
    ("coredns/coredns:1.8.0@sha256:" + "0" * 64, (1, 8, 0)),
    ("coredns/coredns@sha256:" + "0" * 64, None),
    ("localhost:5000/coredns", None),
    ("coredns/coredns:latest", None),
])
def test_image_version(image: str, version: tuple[int, int, int] | None) -> None:
    assert f.image_version(image) == version


def test_coredns_version_threshold() -> None:
    assert f.ClusterFacts(coredns_version=(1, 5, 1)).coredns_ok is True
    assert f.ClusterFacts(coredns_version=(1, 5, 0)).coredns_ok is False
    assert f.ClusterFacts(coredns_version=(1, 10, 0)).coredns_ok is True
    assert f.ClusterFacts().coredns_ok is None


def test_coredns_image_prefers_the_coredns_container() -> None:
    dep = coredns_deployment("1.11.1")
    dep["spec"]["template"]["spec"]["containers"].insert(0, {"name": "sidecar",
                                                             "image": "busybox:1"})
    assert f.coredns_image(dep) == "registry.k8s.io/coredns/coredns:v1.11.1"
    assert f.coredns_image({"spec": {}}) is None


def test_node_local_dns_by_name_or_label() -> None:
    assert f.is_node_local_dns(daemonset("kube-system", "node-local-dns"))
    assert f.is_node_local_dns(daemonset("kube-system", "nodelocaldns"))
    assert f.is_node_local_dns(daemonset("kube-system", "dns-cache",
                                         {"k8s-app": "node-local-dns"}))
    assert not f.is_node_local_dns(daemonset("kube-system", "kube-proxy",
                                             {"k8s-app": "kube-proxy"}))


def test_ingress_hosts_and_status() -> None:
    ing = {"spec": {"rules": [{"host": "A.example.com"}, {"http": {}}],
                    "tls": [{"hosts": ["a.example.com", "b.example.com"]}]},
           "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"},
                                                   {"hostname": "lb.example.net"}, {}]}}}
    assert f.ingress_hosts_and_status(ing) == (("a.example.com", "b.example.com"),
                                               ("203.0.113.7", "lb.example.net"))
    assert f.ingress_hosts_and_status({"spec": "junk"}) == ((), ())


@pytest.mark.parametrize(("host", "rules", "covered"), [
    ("a.example.com", ["a.example.com"], True),
    ("A.Example.com.", ["a.example.com"], True),
    ("a.example.com", ["*.example.com"], True),
    ("x.a.example.com", ["*.example.com"], False),
    ("example.com", ["*.example.com"], False),
    ("_acme-challenge.example.com", ["*.example.com"], False),
    ("x.a.example.com", ["**.example.com"], True),
    ("a.example.com", ["**.example.com"], True),
    ("example.com", ["**.example.com"], False),
    ("_acme-challenge.x.example.com", ["**.example.com"], False),
    ("b.example.com", ["a.example.com"], False),
    ("a.example.com", [], False),
])
def test_rule_covers(host: str, rules: list[str], covered: bool) -> None:
    assert f.rule_covers(host, rules) is covered
    assert f.rule_covers(host, tuple(rules)) is covered


_LABELS = st.sampled_from(["a", "B", "_x", "", "ex", "com", "*", "**"])
_NAMES = st.builds(lambda labels, end: ".".join(labels) + end,
                   st.lists(_LABELS, min_size=1, max_size=5), st.sampled_from(["", ".", ".."]))


@settings(max_examples=300, deadline=None)
@given(rules=st.lists(_NAMES, max_size=6), hosts=st.lists(_NAMES, min_size=1, max_size=5))
def test_rule_covers_is_covers_of_any_rule(rules: list[str], hosts: list[str]) -> None:
    """The index ``rule_covers`` keeps answers as ``wildcards.covers`` of each rule does."""
    held = tuple(rules)
    for host in hosts:
        name = host.lower().rstrip(".")
        expected = any(r.lower().rstrip(".") == name or covers(r, name) for r in rules)
        assert f.rule_covers(host, held) is expected
        assert f.rule_covers(host, rules) is expected


@pytest.mark.parametrize(("host", "zones", "covered"), [
    ("a.example.com", ["a.example.com"], True),
    ("A.Example.com.", ["a.example.com."], True),
    ("a.example.com", ["example.com"], True),
    ("x.y.example.com", ["example.com"], True),
    ("example.com", ["example.com"], True),
    ("badexample.com", ["example.com"], False),
    ("example.com", ["a.example.com"], False),
    ("a.example.com", ["", "b.example.com"], False),
    ("a.example.com", [], False),
])
def test_zone_covers(host: str, zones: list[str], covered: bool) -> None:
    assert f.zone_covers(host, zones) is covered


def test_cluster_facts_know_nothing_about_node_local_dns_by_default() -> None:
    c = f.ClusterFacts()
    assert c.node_local_dns is None and c.node_local_configmap is None
    assert c.node_local_reconciled is None and c.node_local_zones is None


def test_attempt_descriptions() -> None:
    assert f.Attempt("http", 404).describe() == "HTTP 404"
    assert f.Attempt("empty").describe() == "empty reply"
    assert f.Attempt("timeout", detail="connect, 3s").describe() == "timed out (connect, 3s)"


def test_the_minimum_coredns_is_the_one_the_rules_need() -> None:
    """MIN_COREDNS is 1.5.1 because the AAAA stanza we write (for a proxy without IPv6) has no
    answer and no authority section, which CoreDNS refused before 1.5.1. If the rules stop
    writing such a stanza, the minimum (and its explanation) must be looked at again."""
    from hairpin_proxy import corefile

    text = corefile.apply(".:53 {\n    forward . /etc/resolv.conf\n}\n", ["a.example.com"],
                          answers=corefile.Answers.of(["10.96.0.20"], 10),
                          proxy_fqdn="hairpin-proxy.hairpin-proxy.svc.cluster.local.")
    aaaa = text[text.index("template IN AAAA"):]
    aaaa = aaaa[:aaaa.index("}")]
    assert "rcode NOERROR" in aaaa and "answer" not in aaaa and "authority" not in aaaa
    assert f.MIN_COREDNS == (1, 5, 1)
