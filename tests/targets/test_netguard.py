"""The guard's NetworkPolicies, computed from Services, pod CIDRs and our proxy's selector."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hairpin_proxy.targets import netguard as ng

PROXY = ng.ProxyPeer("hairpin-proxy", {"app.kubernetes.io/name": "hairpin-proxy"})
V4 = (ipaddress.ip_network("10.244.0.0/24"), ipaddress.ip_network("10.244.1.0/24"))
V6 = (ipaddress.ip_network("fd00:10:244::/64"), ipaddress.ip_network("fd00:10:244:1::/64"))


def svc(name: str = "edge", *, selector: dict[str, str] | None = None,
        ports: list[dict[str, Any]] | None = None, namespace: str = "ingress") -> dict[str, Any]:
    spec: dict[str, Any] = {"ports": ports if ports is not None else [
        {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
        {"name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP"}]}
    if selector != {}:
        spec["selector"] = selector or {"app": name}
    return {"metadata": {"namespace": namespace, "name": name}, "spec": spec}


def blocks(policy: dict[str, Any]) -> list[dict[str, Any]]:
    return [p["ipBlock"] for p in policy["spec"]["ingress"][0]["from"] if "ipBlock" in p]


@pytest.mark.parametrize(("cidrs", "want"), [
    (V4, [{"cidr": "0.0.0.0/0", "except": ["10.244.0.0/23"]}, {"cidr": "::/0"}]),
    (V6, [{"cidr": "0.0.0.0/0"}, {"cidr": "::/0", "except": ["fd00:10:244::/63"]}]),
    (V4 + V6, [{"cidr": "0.0.0.0/0", "except": ["10.244.0.0/23"]},
               {"cidr": "::/0", "except": ["fd00:10:244::/63"]}]),
    ((ipaddress.ip_network("10.244.0.0/24"), ipaddress.ip_network("10.244.5.0/24"),
      ipaddress.ip_network("10.244.0.0/16")),
     [{"cidr": "0.0.0.0/0", "except": ["10.244.0.0/16"]}, {"cidr": "::/0"}]),
], ids=["ipv4", "ipv6", "dual-stack", "overlapping"])
def test_outside_every_pod_cidr(cidrs: tuple[ng.Network, ...], want: list[Any]) -> None:
    plan = ng.plan_guards([ng.Guarded(svc(), ("ingressclass/nginx",))], cidrs, PROXY)
    (policy,) = plan.policies.values()
    assert blocks(dict(policy)) == want


def test_the_whole_policy() -> None:
    plan = ng.plan_guards([ng.Guarded(svc(), ("gateway/web/public", "ingressclass/nginx"))],
                          V4, PROXY)
    assert plan.skipped == ()
    assert plan.policies == {("ingress", "hairpin-proxy-guard-edge"): {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "hairpin-proxy-guard-edge", "namespace": "ingress",
                     "labels": {"app.kubernetes.io/managed-by": "hairpin-proxy",
                                "hairpin-proxy.io/guard": "edge"},
                     "annotations": {"hairpin-proxy.io/targets":
                                     "gateway/web/public,ingressclass/nginx"}},
        "spec": {
            "podSelector": {"matchLabels": {"app": "edge"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.244.0.0/23"]}},
                          {"ipBlock": {"cidr": "::/0"}},
                          {"namespaceSelector": {"matchLabels": {
                              "kubernetes.io/metadata.name": "hairpin-proxy"}},
                           "podSelector": {"matchLabels": {
                               "app.kubernetes.io/name": "hairpin-proxy"}}}],
                 "ports": [{"protocol": "TCP", "port": 8080},
                           {"protocol": "TCP", "port": 8443}]},
                {"ports": [{"protocol": "TCP", "port": 1, "endPort": 8079},
                           {"protocol": "TCP", "port": 8081, "endPort": 8442},
                           {"protocol": "TCP", "port": 8444, "endPort": 65535},
                           {"protocol": "UDP"}]},
                {"ports": [{"protocol": "SCTP"}]}]}}}


@pytest.mark.parametrize(("ports", "named", "want"), [
    # No targetPort: the port itself; UDP ports are not guarded (PROXY is TCP).
    ([{"port": 80}, {"port": 443, "protocol": "UDP"}], {}, ((80,), ())),
    # A named target port, resolved; one not resolved.
    ([{"name": "http", "port": 80, "targetPort": "web"}], {"web": (8000,)}, ((8000,), ())),
    ([{"name": "http", "port": 80, "targetPort": "web"}], {}, ((), ("web",))),
    # Pods that give one name two numbers: both guarded.
    ([{"port": 80, "targetPort": "web"}], {"web": (8000, 8001)}, ((8000, 8001), ())),
    ([{"port": 80, "targetPort": "80"}, {"port": 81, "targetPort": 80}], {}, ((80,), ())),
])
def test_guarded_ports(ports: list[dict[str, Any]], named: dict[str, tuple[int, ...]],
                       want: tuple[tuple[int, ...], tuple[str, ...]]) -> None:
    assert ng.guarded_ports(svc(ports=ports), named) == want


@pytest.mark.parametrize(("service", "cidrs", "proxy", "why", "keep"), [
    (svc(selector={}), V4, PROXY, "no selector", False),
    (svc(), (), PROXY, "set --pod-cidr", False),
    (svc(), V4, ng.ProxyPeer("hairpin-proxy", {}), "proxy Service has no selector", False),
    (svc(ports=[{"port": 80, "targetPort": "web"}]), V4, PROXY, "web", True),
    (svc(ports=[{"port": 53, "protocol": "UDP"}]), V4, PROXY, "no TCP port", False),
    (svc(), (ipaddress.ip_network("0.0.0.0/0"),), PROXY, "covers every address", False),
], ids=["no-selector", "no-pod-cidrs", "no-proxy-selector", "unresolved-port", "udp-only",
        "everything-is-pods"])
def test_left_without_a_guard(service: dict[str, Any], cidrs: tuple[ng.Network, ...],
                              proxy: ng.ProxyPeer, why: str, keep: bool) -> None:
    plan = ng.plan_guards([ng.Guarded(service, ("ingressclass/nginx",))], cidrs, proxy)
    assert plan.policies == {}
    (skipped,) = plan.skipped
    assert skipped.service == "ingress/edge" and why in skipped.reason
    assert skipped.keep is keep


def test_node_pod_cidrs() -> None:
    nodes: list[dict[str, Any]] = [{"spec": {"podCIDRs": ["10.244.0.0/24", "fd00::/64"]}},
             {"spec": {"podCIDR": "10.244.1.0/24"}},  # an old Node: the single field
             {"spec": {}}, {"spec": {"podCIDRs": ["bogus"]}}, {}]
    assert [str(n) for n in ng.node_pod_cidrs(nodes)] == [
        "10.244.0.0/24", "fd00::/64", "10.244.1.0/24"]


def test_parse_cidrs() -> None:
    assert [str(n) for n in ng.parse_cidrs(["10.244.0.0/16,fd00::/48", "100.64.0.1/10"])] == [
        "10.244.0.0/16", "fd00::/48", "100.64.0.0/10"]
    with pytest.raises(ng.CidrError, match=r"--pod-cidr '10\.0\.0\.0/33' is not a CIDR"):
        ng.parse_cidrs(["10.0.0.0/33"])


def test_ours_and_differs() -> None:
    (policy,) = ng.plan_guards([ng.Guarded(svc(), ("k",))], V4, PROXY).policies.values()
    assert ng.is_ours(policy)
    assert not ng.is_ours({"metadata": {"labels": {"hairpin-proxy.io/guard": "edge"}}})
    assert not ng.is_ours({"metadata": {"labels": dict(ng.MANAGED_BY)}})
    stored = {**policy, "metadata": {**policy["metadata"], "resourceVersion": "7",
                                     "uid": "u", "generation": 1}}
    assert not ng.differs(stored, policy)
    assert ng.differs({**stored, "spec": {**policy["spec"], "ingress": [{}]}}, policy)
    assert ng.differs({**stored, "metadata": {**stored["metadata"], "labels": {}}}, policy)


# --------------------------------------------------------------------------- properties

ports_st = st.lists(st.integers(1, 65535), max_size=6)
v4_st = st.builds(lambda a, p: ipaddress.ip_network(f"{a}/{p}", strict=False),
                  st.ip_addresses(v=4), st.integers(1, 32))
v6_st = st.builds(lambda a, p: ipaddress.ip_network(f"{a}/{p}", strict=False),
                  st.ip_addresses(v=6), st.integers(1, 128))


def _covered(rule_ports: list[dict[str, Any]]) -> set[int]:
    out: set[int] = set()
    for p in rule_ports:
        if p["protocol"] == "TCP":
            out.update(range(p["port"], p.get("endPort", p["port"]) + 1))
    return out


@given(ports_st)
def test_other_ports_are_exactly_the_rest(guarded: list[int]) -> None:
    rule = ng.other_ports(guarded)
    covered = _covered(rule)
    assert covered.isdisjoint(guarded)
    assert covered | set(guarded) == set(range(1, 65536))
    tcp = [p for p in rule if p["protocol"] == "TCP"]
    # What the API server demands of a range (tests/fakeapi/netpol.py).
    assert all(1 <= p["port"] <= p.get("endPort", p["port"]) <= 65535 for p in tcp)
    assert {"protocol": "UDP"} in rule


@given(st.lists(st.one_of(v4_st, v6_st), min_size=1, max_size=8), ports_st.filter(bool))
def test_every_pod_address_is_kept_from_the_guarded_ports(cidrs: list[ng.Network],
                                                          guarded: list[int]) -> None:
    ports = [{"port": p, "protocol": "TCP"} for p in guarded]
    plan = ng.plan_guards([ng.Guarded(svc(ports=ports), ("k",))], cidrs, PROXY)
    if plan.skipped:
        assert "covers every address" in plan.skipped[0].reason
        return
    (policy,) = plan.policies.values()
    got = blocks(dict(policy))
    assert [b["cidr"] for b in got] == ["0.0.0.0/0", "::/0"]
    excepted = [ipaddress.ip_network(e) for b in got for e in b.get("except", [])]
    # Every pod CIDR is inside an except; every except is a strict subset of its block.
    for n in cidrs:
        assert any(n.version == e.version and n.subnet_of(e) for e in excepted  # type: ignore[arg-type]
                   ), n
    assert all(e.prefixlen > 0 for e in excepted)
    assert sorted(p["port"] for p in policy["spec"]["ingress"][0]["ports"]) == sorted(
        set(guarded))


def test_nodes_own_addresses_inside_the_pod_cidrs() -> None:
    nodes: list[dict[str, Any]] = [
        {"metadata": {"annotations": {"projectcalico.org/IPv4IPIPTunnelAddr": "10.244.0.1",
                                      "projectcalico.org/IPv6VXLANTunnelAddr": "fd00::1"}}},
        {"metadata": {"annotations": {"network.cilium.io/ipv4-cilium-host": "10.244.5.17",
                                      "network.cilium.io/ipv6-cilium-host": "bogus"}}},
        {"metadata": {"annotations": {"flannel.alpha.coreos.com/backend-type": "vxlan"}},
         "spec": {"podCIDRs": ["10.244.1.0/24"]}},
        {"metadata": {}}, {}]
    found = ng.node_addresses_in_pod_cidrs(nodes)
    assert [str(a) for a in found] == ["10.244.0.1", "10.244.1.0", "10.244.1.1",
                                       "10.244.5.17", "fd00::1"]
    cidrs = (ipaddress.ip_network("10.244.0.0/22"),)
    (policy,) = ng.plan_guards([ng.Guarded(svc(), ("k",))], cidrs, PROXY,
                               found).policies.values()
    # One /32 per node address inside a pod CIDR (10.244.5.17 and fd00::1 are not).
    assert blocks(dict(policy)) == [
        {"cidr": "0.0.0.0/0", "except": ["10.244.0.0/22"]}, {"cidr": "::/0"},
        {"cidr": "10.244.0.1/32"}, {"cidr": "10.244.1.0/32"}, {"cidr": "10.244.1.1/32"}]


def test_every_policy_names_the_guards_cluster_role_as_its_owner() -> None:
    role = {"metadata": {"name": ng.OWNER_ROLE, "uid": "u-1", "resourceVersion": "3"}}
    owner = ng.owner_reference(role)
    assert owner == {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                     "name": "hairpin-proxy-controller-guard", "uid": "u-1"}
    plan = ng.plan_guards([ng.Guarded(svc("a"), ("k",)), ng.Guarded(svc("b"), ("k",))], V4,
                          PROXY, owner=owner)
    assert [p["metadata"]["ownerReferences"] for p in plan.policies.values()] == [[owner]] * 2
    (unowned,) = ng.plan_guards([ng.Guarded(svc(), ("k",))], V4, PROXY).policies.values()
    assert "ownerReferences" not in unowned["metadata"]
    # A policy made before (no owner), or for a ClusterRole since re-created (another UID),
    # is written again.
    (owned,) = ng.plan_guards([ng.Guarded(svc(), ("k",))], V4, PROXY,
                              owner=owner).policies.values()
    assert ng.differs(unowned, owned) and not ng.differs(owned, owned)
    assert ng.differs(owned, {**owned, "metadata": {**owned["metadata"], "ownerReferences": [
        {**owner, "uid": "u-2"}]}})
