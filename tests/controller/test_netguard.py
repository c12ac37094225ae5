"""--guard-data-planes through the running controller against the fake API: the guard
NetworkPolicy of a data plane that expects PROXY is created, follows every change (the
Service's selector and ports, the Nodes' pod CIDRs, the proxy's selector), goes when the data
plane stops expecting PROXY and when we are uninstalled, and policies we did not make are never
touched."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from hairpin_proxy import corefile
from tests.controller.conftest import NAMESPACE, Controller, wait_until
from tests.fakeapi.fixtures import configmap, ingress, ingress_class, service
from tests.fakeapi.server import FakeApiServer
from tests.waiting import PATIENCE

Start = Callable[..., Controller]
NGINX_NS = "ingress-nginx"
POLICY = ("NetworkPolicy", NGINX_NS, "hairpin-proxy-guard-ingress-nginx-controller")
NGINX_LABELS = {"app.kubernetes.io/name": "ingress-nginx",
                "app.kubernetes.io/component": "controller"}
PROXY_PODS = {"app.kubernetes.io/name": "hairpin-proxy", "app.kubernetes.io/component": "proxy"}
PODS = {"app.kubernetes.io/name": "ingress-nginx", "app.kubernetes.io/instance": "main"}


def node(name: str, *cidrs: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "spec": {"podCIDR": cidrs[0], "podCIDRs": list(cidrs)}}


def foreign(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": NGINX_NS, "labels": labels},
            "spec": {"podSelector": {}, "ingress": [{}], "policyTypes": ["Ingress"]}}


def ingress_nginx(api: FakeApiServer, *, proxy: str = "true") -> None:
    """ingress-nginx as its Helm chart installs it (named target ports), expecting PROXY; our
    proxy Service selects our proxy pods."""
    ours = api.get("Service", NAMESPACE, "hairpin-proxy")
    assert ours is not None
    ours["spec"]["selector"] = PROXY_PODS
    api.update(ours)
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NGINX_NS}})
    api.create(ingress_class("nginx"))
    api.create(configmap(NGINX_NS, "ingress-nginx-controller", {"use-proxy-protocol": proxy}))
    api.create(service(NGINX_NS, "ingress-nginx-controller", type="LoadBalancer",
                       labels=NGINX_LABELS, selector=PODS, lb_ingress=[{"ip": "203.0.113.7"}],
                       ports=[{"name": "http", "port": 80, "protocol": "TCP",
                               "targetPort": "http"},
                              {"name": "https", "port": 443, "protocol": "TCP",
                               "targetPort": "https"}]))
    api.create({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "ingress-nginx-controller-x1", "namespace": NGINX_NS,
                             "labels": {"kubernetes.io/service-name":
                                        "ingress-nginx-controller"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["10.244.0.9"], "conditions": {"ready": True}}],
                "ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                          {"name": "https", "port": 443, "protocol": "TCP"}]})
    api.create(ingress("shop", "web", tls_hosts=["shop.example.com"], class_name="nginx"))


def policy(api: FakeApiServer) -> dict[str, Any] | None:
    return api.get(*POLICY)


def guarded_ports(p: dict[str, Any]) -> list[Any]:
    return [x["port"] for x in p["spec"]["ingress"][0]["ports"]]


def excepts(p: dict[str, Any]) -> list[list[str]]:
    return [peer["ipBlock"].get("except", []) for peer in p["spec"]["ingress"][0]["from"]
            if peer.get("ipBlock", {}).get("cidr") in ("0.0.0.0/0", "::/0")]


def test_the_guard_follows_every_change_and_goes_with_the_data_plane(
        cluster: FakeApiServer, start: Start) -> None:
    api = cluster
    api.create(node("n1", "10.244.0.0/24", "fd00:10:244::/64"))
    api.create(node("n2", "10.244.1.0/24", "fd00:10:244:1::/64"))
    ingress_nginx(api)
    api.create(foreign("default-deny", {}))
    api.create(foreign("hairpin-proxy-guard-other", {"hairpin-proxy.io/guard": "other"}))
    untouched = {n: copy.deepcopy(api.get("NetworkPolicy", NGINX_NS, n))
                 for n in ("default-deny", "hairpin-proxy-guard-other")}
    ctl = start("--guard-data-planes")
    ctl.wait_ready()

    wait_until(lambda: policy(api) is not None, what="guard created")
    p = policy(api)
    assert p is not None
    assert p["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "hairpin-proxy",
                                       "hairpin-proxy.io/guard": "ingress-nginx-controller"}
    assert p["metadata"]["annotations"] == {"hairpin-proxy.io/targets": "ingressclass/nginx"}
    assert p["spec"]["podSelector"] == {"matchLabels": PODS}
    # Named target ports, resolved through the EndpointSlice.
    assert guarded_ports(p) == [80, 443]
    assert excepts(p) == [["10.244.0.0/23"], ["fd00:10:244::/63"]]
    assert p["spec"]["ingress"][0]["from"][-1] == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
        "podSelector": {"matchLabels": PROXY_PODS}}
    assert p["spec"]["ingress"][1]["ports"][:3] == [
        {"protocol": "TCP", "port": 1, "endPort": 79},
        {"protocol": "TCP", "port": 81, "endPort": 442},
        {"protocol": "TCP", "port": 444, "endPort": 65535}]

    def svc_edit(edit: Callable[[dict[str, Any]], None]) -> None:
        svc = api.get("Service", NGINX_NS, "ingress-nginx-controller")
        assert svc is not None
        edit(svc)
        api.update(svc)

    # The Service's selector changes.
    svc_edit(lambda s: s["spec"].update(selector={"app": "edge"}))
    wait_until(lambda: (policy(api) or {})["spec"]["podSelector"] == {
        "matchLabels": {"app": "edge"}}, what="selector followed")
    # Its ports change: a numeric target port.
    svc_edit(lambda s: s["spec"]["ports"][0].update(targetPort=8080))
    wait_until(lambda: guarded_ports(policy(api) or {}) == [443, 8080], what="ports followed")
    # A new Node brings a pod CIDR, and (Calico) its tunnel address inside it, which
    # kube-proxy's SNAT may give the load balancer's traffic: admitted on its own.
    n3 = node("n3", "10.244.7.0/24")
    n3["metadata"]["annotations"] = {"projectcalico.org/IPv4IPIPTunnelAddr": "10.244.7.1"}
    api.create(n3)
    wait_until(lambda: excepts(policy(api) or {}) == [["10.244.0.0/23", "10.244.7.0/24"],
                                                      ["fd00:10:244::/63"]],
               what="pod CIDRs followed")
    assert {"ipBlock": {"cidr": "10.244.7.1/32"}} in (policy(api) or {})["spec"]["ingress"][0][
        "from"]
    # Our proxy pods' labels change (the proxy Service's selector).
    proxy = api.get("Service", NAMESPACE, "hairpin-proxy")
    assert proxy is not None
    proxy["spec"]["selector"] = {"app.kubernetes.io/component": "relay"}
    api.update(proxy)
    wait_until(lambda: (policy(api) or {})["spec"]["ingress"][0]["from"][-1]["podSelector"]
               == {"matchLabels": {"app.kubernetes.io/component": "relay"}},
               what="proxy selector followed")
    # Someone edits our policy: put back.
    mine = policy(api)
    assert mine is not None
    mine["spec"]["ingress"] = [{}]
    api.update(mine)
    wait_until(lambda: len((policy(api) or {})["spec"]["ingress"]) == 3, what="repaired")

    # The data plane stops expecting PROXY: its guard goes.
    cm = api.get("ConfigMap", NGINX_NS, "ingress-nginx-controller")
    assert cm is not None
    cm["data"]["use-proxy-protocol"] = "false"
    api.update(cm)
    wait_until(lambda: policy(api) is None, what="guard removed")
    cm = api.get("ConfigMap", NGINX_NS, "ingress-nginx-controller")
    assert cm is not None
    cm["data"]["use-proxy-protocol"] = "true"
    api.update(cm)
    wait_until(lambda: policy(api) is not None, what="guard back")

    # Uninstall: our namespace terminates, every guard goes.
    api.delete("Namespace", None, NAMESPACE)
    wait_until(lambda: policy(api) is None, what="guard removed on uninstall")
    for name, before in untouched.items():
        assert api.get("NetworkPolicy", NGINX_NS, name) == before, name
    writes = [r for r in api.requests() if "networkpolicies/" in r.path
              and r.method in ("PUT", "DELETE", "PATCH")]
    assert all("hairpin-proxy-guard-ingress-nginx-controller" in r.path for r in writes)
    # Only ever listed with our label selector.
    lists = [r for r in api.requests("GET") if r.path.endswith("/networkpolicies")]
    assert lists and all(r.query.get("labelSelector", "").startswith("hairpin-proxy.io/guard")
                         for r in lists)
    # The uninstall done, the controller exits.
    assert ctl.proc.wait(PATIENCE) == 0
    api.finalize_namespace(NAMESPACE)


def test_a_service_without_selector_gets_no_guard_but_an_event(cluster: FakeApiServer,
                                                               start: Start) -> None:
    api = cluster
    api.create(node("n1", "10.244.0.0/24"))
    ingress_nginx(api)
    svc = api.get("Service", NGINX_NS, "ingress-nginx-controller")
    assert svc is not None
    del svc["spec"]["selector"]
    api.update(svc)
    ctl = start("--guard-data-planes")
    ctl.wait_ready()
    wait_until(lambda: any(e.get("reason") == "DataPlaneNotGuarded"
                           for e in api.list("Event", NGINX_NS)), what="event")
    (event,) = [e for e in api.list("Event", NGINX_NS) if e.get("reason") == "DataPlaneNotGuarded"]
    assert "no selector" in event["message"]
    assert event["involvedObject"]["name"] == "ingress-nginx-controller"
    assert policy(api) is None


def test_unknown_pod_cidrs_need_the_flag(cluster: FakeApiServer, start: Start) -> None:
    api = cluster
    ingress_nginx(api)  # no Node has spec.podCIDRs (e.g. a CNI with its own IPAM)
    ctl = start("--guard-data-planes")
    ctl.wait_ready()
    wait_until(lambda: any(r.get("msg") == "data plane not guarded" and "--pod-cidr" in str(
        r.get("reason")) for r in ctl.records()), what="told")
    assert policy(api) is None
    ctl.stop()
    again = start("--guard-data-planes", "--pod-cidr", "100.64.0.0/16,fd00:64::/48")
    again.wait_ready()
    wait_until(lambda: policy(api) is not None, what="guard with --pod-cidr")
    assert excepts(policy(api) or {}) == [["100.64.0.0/16"], ["fd00:64::/48"]]


def test_a_refused_write_holds_back_nothing_else(cluster: FakeApiServer, start: Start) -> None:
    api = cluster
    api.create(node("n1", "10.244.0.0/24"))
    ingress_nginx(api)
    api.fail_requests(3, status=403, method="POST", path_re=r"/networkpolicies$")
    ctl = start("--guard-data-planes", "--target-settle", "0")
    ctl.wait_ready()
    # The DNS rules are written though the guard is refused; the guard follows on a retry.
    wait_until(lambda: "shop" in str((api.get("ConfigMap", "kube-system", "coredns") or {})
                                     .get("data")), what="rules written")
    wait_until(lambda: policy(api) is not None, what="guard after the refusals")
    assert any(r.get("msg") == "data-plane guard not in step; retried on the next pass"
               for r in ctl.records())


def test_a_bad_pod_cidr_is_refused_in_our_words(cluster: FakeApiServer, start: Start) -> None:
    ctl = start("--guard-data-planes", "--pod-cidr", "10.244.0.0/33")
    assert ctl.proc.wait(PATIENCE) == 2
    log = ctl.log()
    assert "--pod-cidr '10.244.0.0/33' is not a CIDR" in log and "Traceback" not in log


def test_without_the_flag_no_policy_or_node_is_asked_for(cluster: FakeApiServer,
                                                         start: Start) -> None:
    api = cluster
    ingress_nginx(api)
    ctl = start()
    ctl.wait_ready()
    time.sleep(0.5)
    assert not [r for r in api.requests() if "/networkpolicies" in r.path
                or r.path.endswith("/nodes")]


def test_a_guard_without_its_grant_holds_back_nothing_else(cluster: FakeApiServer,
                                                           start: Start) -> None:
    """The flag without the component's RBAC: the DNS rules are written, the guard waits and
    says why, and follows once the grant is there."""
    api = cluster
    api.create(node("n1", "10.244.0.0/24"))
    ingress_nginx(api)
    api.fail_requests(4, status=403, method="GET", path_re=r"/networkpolicies\?")
    ctl = start("--guard-data-planes", "--target-settle", "0")
    ctl.wait_ready()
    wait_until(lambda: "shop" in str((api.get("ConfigMap", "kube-system", "coredns") or {})
                                     .get("data")), what="rules written")
    wait_until(lambda: any(r.get("msg") == "data-plane guard waits for its caches"
                           and "403" in str(r.get("waiting")) for r in ctl.records()),
               what="told")
    wait_until(lambda: policy(api) is not None, timeout=60, what="guard once listed")


def _in_corefile(api: FakeApiServer, host: str) -> bool:
    cm = api.get("ConfigMap", "kube-system", "coredns") or {}
    return host in corefile.managed_hosts((cm.get("data") or {}).get("Corefile", ""))


def test_named_ports_are_not_asked_for_on_every_pass(cluster: FakeApiServer,
                                                     start: Start) -> None:
    api = cluster
    api.create(node("n1", "10.244.0.0/24"))
    ingress_nginx(api)
    ctl = start("--guard-data-planes", "--target-settle", "0")
    ctl.wait_ready()
    wait_until(lambda: policy(api) is not None, what="guard created")
    for i in range(5):  # five more passes, each writing a new host's rule
        api.create(ingress("shop", f"more-{i}", tls_hosts=[f"more{i}.example.com"],
                           class_name="nginx"))
        wait_until(partial(_in_corefile, api, f"more{i}.example.com"), what=f"pass {i}")
    slices = [r for r in api.requests("GET") if "/namespaces/ingress-nginx/endpointslices"
              in r.path]
    assert len(slices) == 1, [r.path for r in slices]
