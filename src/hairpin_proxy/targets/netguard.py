"""The data-plane guard: which NetworkPolicies keep forged PROXY headers out. Pure.

A data plane that expects the PROXY protocol believes the source address the header names. Any
pod that reaches its pods directly can name any address (docs/forged-proxy-header.md). For
each data-plane Service that expects PROXY, one NetworkPolicy in its namespace selects its pods
(the Service's selector) and admits, on the Service's TCP target ports, only

- addresses outside every pod CIDR (the load balancer's traffic arrives from node or client
  addresses), and the nodes' own addresses inside them where the CNI names them (tunnel and
  bridge interfaces, which kube-proxy's SNAT may put as the source), and
- our proxy pods (our namespace, the proxy Service's selector);

and, in a second rule, every other port and protocol from everywhere. The second rule is
needed because a pod selected by any Ingress policy is denied all ingress no policy admits:
without it, the guard would close the data plane's other ports (metrics, admission webhook).

Named target ports are resolved to numbers (from the EndpointSlices' ports): the other ports'
rule is a set of port ranges around the guarded numbers, and a name cannot be left out of a
range. A Service whose port cannot be resolved, that has no selector, or a cluster whose pod
CIDRs are unknown gets no policy, with the reason.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

GUARD_LABEL: Final = "hairpin-proxy.io/guard"
TARGETS_ANNOTATION: Final = "hairpin-proxy.io/targets"
MANAGED_BY: Final = {"app.kubernetes.io/managed-by": "hairpin-proxy"}
NAME_PREFIX: Final = "hairpin-proxy-guard-"
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"
MAX_PORT: Final = 65535
EVERYWHERE: Final = (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))
# The guard component's ClusterRole: every policy names it as its owner, so that the garbage
# collector removes the policies whenever it goes, whatever became of the controller
# (docs/forged-proxy-header.md, "Removed on uninstall").
OWNER_ROLE: Final = "hairpin-proxy-controller-guard"
NETWORKPOLICY_API: Final = "networking.k8s.io/v1"
RBAC_API: Final = "rbac.authorization.k8s.io/v1"


class CidrError(ValueError):
    """A pod CIDR that is not one."""


def parse_cidrs(items: Iterable[str]) -> tuple[Network, ...]:
    """``--pod-cidr`` values (commas or repeats), as networks; CidrError names a bad one."""
    out: list[Network] = []
    for item in items:
        for part in item.replace(",", " ").split():
            try:
                out.append(ipaddress.ip_network(part, strict=False))
            except ValueError:
                raise CidrError(f"--pod-cidr {part!r} is not a CIDR (10.244.0.0/16, "
                                "fd00:10:244::/56)") from None
    return tuple(out)


def node_pod_cidrs(nodes: Iterable[Mapping[str, Any]]) -> tuple[Network, ...]:
    """Every Node's ``spec.podCIDRs`` (or the older ``spec.podCIDR``); unreadable entries are
    skipped (the API validates them, a fake or an old object may not)."""
    out: list[Network] = []
    for node in nodes:
        spec = node.get("spec") if isinstance(node.get("spec"), Mapping) else {}
        assert isinstance(spec, Mapping)
        raw = spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else [])
        for text in raw if isinstance(raw, list) else []:
            try:
                out.append(ipaddress.ip_network(str(text), strict=False))
            except ValueError:
                continue
    return tuple(out)


# Node annotations naming the node's own address on an interface inside the pod CIDR (a
# tunnel, or the router address host-to-pod traffic leaves from). Traffic the node forwards
# (kube-proxy's SNAT on the load balancer's path) can carry these as its source.
NODE_ADDRESS_ANNOTATIONS: Final = (
    "projectcalico.org/IPv4IPIPTunnelAddr", "projectcalico.org/IPv4VXLANTunnelAddr",
    "projectcalico.org/IPv6VXLANTunnelAddr", "projectcalico.org/IPv4WireguardInterfaceAddr",
    "projectcalico.org/IPv6WireguardInterfaceAddr",
    "network.cilium.io/ipv4-cilium-host", "network.cilium.io/ipv6-cilium-host",
    "io.cilium.network.ipv4-cilium-host", "io.cilium.network.ipv6-cilium-host")
# Flannel gives its VXLAN interface the first address of the node's pod CIDR and its bridge
# (cni0, the pods' gateway) the second; host-local IPAM never hands either to a pod.
FLANNEL_ANNOTATION: Final = "flannel.alpha.coreos.com/backend-type"


def node_addresses_in_pod_cidrs(nodes: Iterable[Mapping[str, Any]]
                                ) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, ...]:
    """The nodes' own addresses inside their pod CIDRs, where the CNI names them."""
    out: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    for node in nodes:
        meta = node.get("metadata") if isinstance(node.get("metadata"), Mapping) else {}
        assert isinstance(meta, Mapping)
        notes = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
        assert isinstance(notes, Mapping)
        for key in NODE_ADDRESS_ANNOTATIONS:
            try:
                out.append(ipaddress.ip_address(str(notes.get(key) or "").split("/")[0]))
            except ValueError:
                continue
        if FLANNEL_ANNOTATION in notes:
            for cidr in node_pod_cidrs([node]):
                out += [a for a in (cidr.network_address, cidr.network_address + 1)
                        if a in cidr]
    return tuple(sorted(set(out), key=lambda a: (a.version, a)))


def collapse(cidrs: Iterable[Network]) -> tuple[Network, ...]:
    """The networks merged where they touch or overlap, IPv4 first, each family sorted."""
    v4 = [n for n in cidrs if isinstance(n, ipaddress.IPv4Network)]
    v6 = [n for n in cidrs if isinstance(n, ipaddress.IPv6Network)]
    return (*ipaddress.collapse_addresses(v4), *ipaddress.collapse_addresses(v6))


@dataclass(frozen=True)
class ProxyPeer:
    """Our proxy pods: their namespace and the labels the proxy Service selects."""

    namespace: str
    selector: Mapping[str, str]


@dataclass(frozen=True)
class Guarded:
    """One data-plane Service that expects PROXY, and the targets that relay to it."""

    service: Mapping[str, Any]
    keys: tuple[str, ...]
    # Target port name → the numbers its pods give it (from the EndpointSlices).
    named_ports: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Skipped:
    """A data plane left without a guard: why, and whether a policy we made before stays
    (a port that cannot be resolved right now is no reason to open the data plane again)."""

    service: str
    reason: str
    keep: bool = False


@dataclass(frozen=True)
class GuardPlan:
    # (namespace, name) → the NetworkPolicy we want there.
    policies: Mapping[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)
    skipped: tuple[Skipped, ...] = ()


def owner_reference(role: Mapping[str, Any]) -> dict[str, Any]:
    """The ownerReference naming the guard's ClusterRole (no blockOwnerDeletion: nothing
    waits for the policies, and setting it would need delete on the ClusterRole where
    OwnerReferencesPermissionEnforcement is on)."""
    meta = role.get("metadata") if isinstance(role.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    return {"apiVersion": RBAC_API, "kind": "ClusterRole", "name": str(meta.get("name") or ""),
            "uid": str(meta.get("uid") or "")}


def policy_name(service: str) -> str:
    """Our policy's name for a data-plane Service name (a label: at most 63 characters, so
    within the 253 a policy name may have)."""
    return NAME_PREFIX + service


def _meta(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def guarded_ports(service: Mapping[str, Any], named: Mapping[str, tuple[int, ...]]
                  ) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """(the TCP target port numbers, the names that could not be resolved)."""
    spec = service.get("spec") if isinstance(service.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    numbers: set[int] = set()
    missing: list[str] = []
    for port in spec.get("ports") or ():
        if not isinstance(port, Mapping) or (port.get("protocol") or "TCP") != "TCP":
            continue
        target = port.get("targetPort", port.get("port"))
        if isinstance(target, str) and target.isdigit():
            target = int(target)
        if type(target) is int and 1 <= target <= MAX_PORT:
            numbers.add(target)
        elif isinstance(target, str) and named.get(target):
            numbers.update(p for p in named[target] if 1 <= p <= MAX_PORT)
        elif isinstance(target, str):
            missing.append(target)
    return tuple(sorted(numbers)), tuple(missing)


def other_ports(guarded: Sequence[int]) -> list[dict[str, Any]]:
    """NetworkPolicy ports for every TCP port but ``guarded`` (ranges with ``endPort``), and
    all of UDP. SCTP has a rule of its own (``SCTP_RULE``): a CNI that does not support it
    may drop the rule that names it, and that must not close the other ports."""
    out: list[dict[str, Any]] = []
    start = 1
    for port in [*sorted(set(guarded)), MAX_PORT + 1]:
        if port > start:
            end = port - 1
            out.append({"protocol": "TCP", "port": start} if end == start
                       else {"protocol": "TCP", "port": start, "endPort": end})
        start = port + 1
    return [*out, {"protocol": "UDP"}]


SCTP_RULE: Final = {"ports": [{"protocol": "SCTP"}]}


def outside_blocks(pod_cidrs: Sequence[Network]) -> list[dict[str, Any]]:
    """ipBlock peers: every address of each family but the pod CIDRs."""
    out: list[dict[str, Any]] = []
    for everything in EVERYWHERE:
        excepts = [str(n) for n in pod_cidrs if n.version == everything.version]
        out.append({"ipBlock": {"cidr": str(everything), **({"except": excepts}
                                                           if excepts else {})}})
    return out


def guard_policy(service: Mapping[str, Any], keys: Sequence[str], ports: Sequence[int],
                 pod_cidrs: Sequence[Network], proxy: ProxyPeer, *,
                 nodes: Sequence[ipaddress.IPv4Address | ipaddress.IPv6Address] = (),
                 owner: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The NetworkPolicy for one data-plane Service (its selector must not be empty);
    ``nodes``: the nodes' own addresses inside the pod CIDRs, admitted one by one; ``owner``:
    the ownerReference it carries (owner_reference), if any."""
    namespace, name = _meta(service)
    spec = service.get("spec") if isinstance(service.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    selector = {str(k): str(v) for k, v in (spec.get("selector") or {}).items()}
    ours = {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: proxy.namespace}},
            "podSelector": {"matchLabels": dict(proxy.selector)}}
    return {
        "apiVersion": NETWORKPOLICY_API, "kind": "NetworkPolicy",
        "metadata": {"name": policy_name(name), "namespace": namespace,
                     "labels": {**MANAGED_BY, GUARD_LABEL: name},
                     "annotations": {TARGETS_ANNOTATION: ",".join(sorted(keys))},
                     **({"ownerReferences": [dict(owner)]} if owner else {})},
        "spec": {
            "podSelector": {"matchLabels": selector},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [*outside_blocks(pod_cidrs),
                          *({"ipBlock": {"cidr": f"{a}/{a.max_prefixlen}"}} for a in nodes
                            if any(a in n for n in pod_cidrs)),
                          ours],
                 "ports": [{"protocol": "TCP", "port": p} for p in ports]},
                {"ports": other_ports(ports)},
                dict(SCTP_RULE),
            ]}}


def _why_not(service: Mapping[str, Any], ports: Sequence[int], missing: Sequence[str],
             pod_cidrs: Sequence[Network], proxy: ProxyPeer) -> tuple[str, bool]:
    spec = service.get("spec") if isinstance(service.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    if not spec.get("selector"):
        return ("it has no selector (its endpoints are managed by hand or by another "
                "controller): no pods to select", False)
    if not proxy.selector:
        return "the proxy Service has no selector: our proxy pods cannot be named", False
    if not pod_cidrs:
        return ("the pod CIDRs are unknown (no Node has spec.podCIDRs): set --pod-cidr", False)
    if any(n.prefixlen == 0 for n in pod_cidrs):
        return "a pod CIDR covers every address: nothing is outside it", False
    if missing:
        return (f"its target port {', '.join(missing)} is a name no EndpointSlice resolves "
                "yet", True)
    if not ports:
        return "it has no TCP port", False
    return "", False


def plan_guards(dataplanes: Iterable[Guarded], pod_cidrs: Iterable[Network],
                proxy: ProxyPeer,
                nodes: Iterable[ipaddress.IPv4Address | ipaddress.IPv6Address] = (),
                owner: Mapping[str, Any] | None = None) -> GuardPlan:
    """Every guard policy we want, and the data planes left without one (with why);
    ``nodes``: the nodes' own addresses inside the pod CIDRs (node_addresses_in_pod_cidrs);
    ``owner``: the ownerReference every policy carries."""
    node_addresses = tuple(nodes)
    cidrs = collapse(pod_cidrs)
    policies: dict[tuple[str, str], Mapping[str, Any]] = {}
    skipped: list[Skipped] = []
    for d in dataplanes:
        namespace, name = _meta(d.service)
        ports, missing = guarded_ports(d.service, d.named_ports)
        why, keep = _why_not(d.service, ports, missing, cidrs, proxy)
        if why:
            skipped.append(Skipped(f"{namespace}/{name}", why, keep))
            continue
        policies[(namespace, policy_name(name))] = guard_policy(
            d.service, d.keys, ports, cidrs, proxy, nodes=node_addresses, owner=owner)
    return GuardPlan(policies, tuple(skipped))


def is_ours(obj: Mapping[str, Any]) -> bool:
    """A NetworkPolicy we made: our labels, both of them."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    labels = meta.get("labels") or {}
    return (isinstance(labels, Mapping) and GUARD_LABEL in labels
            and all(labels.get(k) == v for k, v in MANAGED_BY.items()))


def differs(have: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    """Whether a policy as stored needs our PUT (what we set: labels, annotation, owner,
    spec)."""
    hm = have.get("metadata") or {}
    wm = want["metadata"]
    return bool((hm.get("labels") or {}) != wm["labels"]
            or (hm.get("ownerReferences") or []) != (wm.get("ownerReferences") or [])
            or (hm.get("annotations") or {}).get(TARGETS_ANNOTATION)
            != wm["annotations"][TARGETS_ANNOTATION]
            or have.get("spec") != want["spec"])
