"""NetworkPolicies and Nodes as the real API server serves them: defaults, the validation the
guard's policies could trip over, label-selected lists, cluster-scoped Nodes."""

from __future__ import annotations

from typing import Any

import httpx2 as httpx

POLICIES = "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies"


def policy(name: str, ingress: list[dict[str, Any]], **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, **meta},
            "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "ingress": ingress}}


def test_defaults_protocol_and_policy_types(http: httpx.Client) -> None:
    r = http.post(POLICIES, json=policy("a", [{"ports": [{"port": 80}, {"protocol": "UDP"}]}]))
    assert r.status_code == 201, r.text
    spec = r.json()["spec"]
    assert spec["ingress"][0]["ports"] == [{"port": 80, "protocol": "TCP"}, {"protocol": "UDP"}]
    assert spec["policyTypes"] == ["Ingress"]
    assert r.json()["metadata"]["generation"] == 1


def test_port_ranges(http: httpx.Client) -> None:
    ok = http.post(POLICIES, json=policy("a", [{"ports": [
        {"protocol": "TCP", "port": 1, "endPort": 79}, {"protocol": "TCP", "port": 65535}]}]))
    assert ok.status_code == 201, ok.text
    for name, port, why in (
            ("b", {"port": 90, "endPort": 80}, "must be greater than or equal to `port`"),
            ("c", {"port": "http", "endPort": 80}, "may not be specified when `port` is "
                                                  "non-numeric"),
            ("d", {"endPort": 80}, "may not be specified when `port` is not specified"),
            ("e", {"port": 0}, "must be between 1 and 65535, inclusive"),
            ("f", {"port": 80, "protocol": "ICMP"}, 'Unsupported value: "ICMP"')):
        r = http.post(POLICIES, json=policy(name, [{"ports": [port]}]))
        assert r.status_code == 422 and why in r.json()["message"], (name, r.text)


def test_ip_blocks(http: httpx.Client) -> None:
    ok = http.post(POLICIES, json=policy("a", [{"from": [
        {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.244.0.0/16"]}},
        {"ipBlock": {"cidr": "::/0", "except": ["fd00:10:244::/56"]}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "x"}},
         "podSelector": {"matchLabels": {"app": "proxy"}}}]}]))
    assert ok.status_code == 201, ok.text
    for name, peer, why in (
            ("b", {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.0.0.0/8"]}},
             "must be a strict subset of `cidr`"),
            ("c", {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["192.168.0.0/16"]}},
             "must be a strict subset of `cidr`"),
            ("d", {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["fd00::/8"]}},
             "must be a strict subset of `cidr`"),
            ("e", {"ipBlock": {"cidr": "nonsense"}}, "must be a valid CIDR value"),
            ("f", {}, "must specify a peer"),
            ("g", {"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}},
             "may not specify both ipBlock and another peer")):
        r = http.post(POLICIES, json=policy(name, [{"from": [peer]}]))
        assert r.status_code == 422 and why in r.json()["message"], (name, r.text)


def test_label_selected_list_and_delete(http: httpx.Client) -> None:
    ours = {"hairpin-proxy.io/guard": "web", "app.kubernetes.io/managed-by": "hairpin-proxy"}
    assert http.post(POLICIES, json=policy("ours", [{}], labels=ours)).status_code == 201
    assert http.post(POLICIES, json=policy("theirs", [{}])).status_code == 201
    listed = http.get("/apis/networking.k8s.io/v1/networkpolicies", params={
        "labelSelector": "hairpin-proxy.io/guard,app.kubernetes.io/managed-by=hairpin-proxy"})
    assert [i["metadata"]["name"] for i in listed.json()["items"]] == ["ours"]
    assert http.delete(f"{POLICIES}/ours").status_code == 200
    assert http.get(f"{POLICIES}/ours").status_code == 404


def test_nodes_are_cluster_scoped(http: httpx.Client) -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
            "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24", "fd00::/64"]}}
    r = http.post("/api/v1/nodes", json=node)
    assert r.status_code == 201, r.text
    assert "namespace" not in r.json()["metadata"]
    got = http.get("/api/v1/nodes").json()["items"]
    assert [n["spec"]["podCIDRs"] for n in got] == [["10.244.1.0/24", "fd00::/64"]]
    assert http.get("/api/v1/namespaces/default/nodes").status_code == 404
