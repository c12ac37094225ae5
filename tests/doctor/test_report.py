"""Rendering: the text blocks and the JSON document carry the same facts."""

from __future__ import annotations

import dataclasses
import json

from hairpin_proxy.doctor.facts import (
    AddressKind,
    Attempt,
    ClusterFacts,
    HostFacts,
    LbEntry,
    LbService,
    PortProbe,
    ProxyProtocolSetting,
    Resolution,
)
from hairpin_proxy.doctor.report import HostReport, Report, node_local_answer, to_json, to_text
from hairpin_proxy.doctor.verdict import verdict

LB = LbService("ingress-nginx/controller",
               (LbEntry("ingress-nginx/controller", "203.0.113.7", "", "VIP"),),
               (ProxyProtocolSetting("Hetzner Cloud",
                                     "load-balancer.hetzner.cloud/uses-proxyprotocol", "true",
                                     True),))
CLUSTER = ClusterFacts(lb_services=(LB,), proxy_service_found=False, proxy_ready_endpoints=None,
                       rule_hosts=(), reload_plugin=True, node_local_dns=False,
                       coredns_image="registry.k8s.io/coredns/coredns:v1.5.0",
                       coredns_version=(1, 5, 0), problems=("list the proxy's: 403",))


def host(name: str, resolution: Resolution, http: PortProbe | None) -> HostReport:
    lb_kind: AddressKind = "lb"
    kinds = (lb_kind,) * len(resolution.addresses)
    facts = HostFacts(name, resolution, kinds, http, None,
                      LB if resolution.addresses else None, CLUSTER)
    return HostReport(facts, verdict(facts))


HAIRPIN = PortProbe("http", "203.0.113.7", 80, Attempt("empty"), Attempt("http", 404),
                    Attempt("http", 404))
REPORT = Report((host("shop.example.com", Resolution(("203.0.113.7",)), HAIRPIN),
                 host("gone.example.com", Resolution(error="Name or service not known"),
                      None)),
                CLUSTER, "", ("a note",))


def test_text() -> None:
    text = to_text(REPORT)
    assert "shop.example.com  FAIL  hairpin-confirmed\n" in text
    assert "  advice   hairpin confirmed and not fixed: install hairpin-proxy\n" in text
    assert "  dns      203.0.113.7 (load balancer)\n" in text
    assert ("  http     203.0.113.7 port 80: bare empty reply; PROXY v1 HTTP 404; "
            "PROXY v2 HTTP 404 -> hairpin\n") in text
    assert "  rule     no\n" in text
    assert "gone.example.com  FAIL  dns-failed\n" in text
    assert "  dns      no address (Name or service not known)\n" in text
    assert ("load-balancer.hetzner.cloud/uses-proxyprotocol='true' (Hetzner Cloud: on)"
            in text)
    assert "  CoreDNS            1.5.0 (older than 1.5.1)" in text
    assert "  proxy Service      no; ready endpoints: unknown\n" in text
    assert "  note               list the proxy's: 403\n" in text
    assert "note: a note\n" in text
    assert "  DNS rules          0; reload plugin: yes\n" in text
    assert "  node-local-dns     DaemonSet: no; ConfigMap: unknown\n" in text
    assert text.endswith("2 host(s) checked, 2 need attention\n")


def test_node_local_dns_line() -> None:
    def line(**kw: object) -> str:
        text = to_text(Report((), ClusterFacts(**kw)))  # type: ignore[arg-type]
        (found,) = [ln for ln in text.splitlines() if ln.startswith("  node-local-dns ")]
        return found.split(None, 1)[1]
    assert line() == "DaemonSet: unknown; ConfigMap: unknown"
    assert line(node_local_dns=True, node_local_reconciled=False,
                node_local_zones=frozenset()) == "DaemonSet: yes; ConfigMap: none"
    assert line(node_local_configmap="kube-system/node-local-dns", node_local_reconciled=True,
                node_local_zones=frozenset({"a.example.com", "example.org"})) == (
        "DaemonSet: unknown; ConfigMap kube-system/node-local-dns (labelled Reconcile and an "
        "addon manager runs: not edited); our zones there: 2")
    assert line(node_local_configmap="kube-system/node-local-dns", node_local_reconciled=False,
                node_local_reverted_by="argocd-controller", node_local_zones=frozenset()) == (
        "DaemonSet: unknown; ConfigMap kube-system/node-local-dns (our block removed by "
        "argocd-controller); our zones there: 0")
    assert line(node_local_dns=True, node_local_configmap="kube-system/nodelocaldns",
                node_local_reconciled=False) == (
        "DaemonSet: yes; ConfigMap kube-system/nodelocaldns; our zones there: unknown")


def test_node_local_answer_per_host() -> None:
    """Per host: whether node-local-dns's ConfigMap holds our block for the host's zone, and
    who removed it or why it is not edited."""
    where = "kube-system/node-local-dns"
    zones = frozenset({"example.com"})
    assert node_local_answer("a.example.com", None) == (None, "")
    assert node_local_answer("a.example.com", ClusterFacts(node_local_dns=False)) == (None, "")
    assert node_local_answer("a.example.com", ClusterFacts(
        node_local_configmap=where, node_local_zones=zones)) == (
        True, f"yes: {where} forwards it to CoreDNS")
    assert node_local_answer("a.other.org", ClusterFacts(
        node_local_configmap=where, node_local_zones=zones,
        node_local_reverted_by="kube-addon-manager")) == (
        False, f"no: {where} has no block of ours for it (our block was removed by "
               "kube-addon-manager)")
    answers, why = node_local_answer("a.other.org", ClusterFacts(
        node_local_configmap=where, node_local_zones=frozenset(), node_local_reconciled=True))
    assert answers is False and "addon manager reconciles it" in why
    assert node_local_answer("x.org", ClusterFacts(node_local_configmap=where)) == (
        None, f"{where} could not be read")
    text = to_text(Report((), ClusterFacts(node_local_configmap=where, node_local_zones=zones)))
    assert "nodelocal" not in text  # no host, no host line
    cluster = dataclasses.replace(CLUSTER, node_local_dns=True, node_local_configmap=where,
                                  node_local_zones=frozenset(),
                                  node_local_reverted_by="argocd-controller")
    facts = HostFacts("shop.example.com", Resolution(("203.0.113.7",)), ("lb",), HAIRPIN,
                      None, LB, cluster)
    report = Report((HostReport(facts, verdict(facts)),), cluster)
    assert (f"  nodelocal no: {where} has no block of ours for it (our block was removed by "
            "argocd-controller)") in to_text(report).splitlines()
    assert json.loads(to_json(report))["hosts"][0]["node_local"] == {
        "answers": False, "configmap": where, "reverted_by": "argocd-controller",
        "message": f"no: {where} has no block of ours for it (our block was removed by "
                   "argocd-controller)"}
    assert json.loads(to_json(REPORT))["hosts"][0]["node_local"] is None


def test_json_node_local_facts() -> None:
    c = ClusterFacts(node_local_dns=None, node_local_configmap="kube-system/node-local-dns",
                     node_local_reconciled=True,
                     node_local_zones=frozenset({"b.example.com", "a.example.com"}))
    doc = json.loads(to_json(Report((), c)))["cluster"]
    assert doc["node_local_dns"] is None
    assert doc["node_local_configmap"] == "kube-system/node-local-dns"
    assert doc["node_local_reconciled"] is True
    assert doc["node_local_zones"] == ["a.example.com", "b.example.com"]
    empty = json.loads(to_json(Report((), ClusterFacts())))["cluster"]
    assert empty["node_local_zones"] is None and empty["node_local_reconciled"] is None


def test_text_without_cluster_or_hosts() -> None:
    text = to_text(Report((), None, "--no-api"))
    assert "cluster: not checked (--no-api)" in text and text.endswith("no hosts to check\n")


def test_json_has_the_same_facts() -> None:
    doc = json.loads(to_json(REPORT))
    assert doc["ok"] is False and doc["api"] == "ok" and doc["notes"] == ["a note"]
    shop, gone = doc["hosts"]
    assert shop["verdict"] == "hairpin-confirmed" and shop["ok"] is False
    assert shop["dns"] == {"addresses": [{"address": "203.0.113.7", "kind": "lb"}],
                           "error": None, "overridden": False, "resolver": None}
    assert shop["http"] == {"address": "203.0.113.7", "port": 80, "state": "hairpin",
                            "bare": {"outcome": "empty"},
                            "proxy_v1": {"outcome": "http", "status": 404},
                            "proxy_v2": {"outcome": "http", "status": 404}}
    assert shop["tls"] is None
    assert shop["load_balancer"]["proxy_protocol"][0]["enabled"] is True
    assert gone["verdict"] == "dns-failed" and gone["dns"]["error"]
    c = doc["cluster"]
    assert c["coredns_version"] == "1.5.0" and c["coredns_version_ok"] is False
    assert c["rule_hosts"] == [] and c["proxy_ready_endpoints"] is None
    assert c["load_balancers"][0]["ingress"] == [{"ip": "203.0.113.7", "hostname": "",
                                                  "ipMode": "VIP"}]


def test_ok_only_when_every_host_is() -> None:
    assert not REPORT.ok
    assert Report(()).ok
