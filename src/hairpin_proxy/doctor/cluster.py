"""The Kubernetes side of the doctor: read what the cluster says, write nothing.

Each question is asked on its own; a refusal (403 from a narrow service account) or a missing
object leaves that one fact unknown and is noted in ``problems``, never failing the rest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from hairpin_proxy import corefile
from hairpin_proxy.controller.sinks.coredns import SinkError
from hairpin_proxy.controller.sinks.nodelocal import CANDIDATES as NODE_LOCAL_CANDIDATES
from hairpin_proxy.controller.sinks.nodelocal import NodeLocalSink
from hairpin_proxy.doctor import facts as f
from hairpin_proxy.kube.client import ApiError, JsonObj, KubeClient, resource_path
from hairpin_proxy.policy import HostPolicy, PolicyResult, default_target, evaluate
from hairpin_proxy.settings import DoctorSettings
from hairpin_proxy.verify.lb import LbIndex, lb_addresses

T = TypeVar("T")


@dataclass(frozen=True)
class ClusterView:
    facts: f.ClusterFacts
    # The hosts the controller would manage (None when Ingresses could not be listed).
    managed: PolicyResult | None
    # This cluster's load balancer addresses as the controller gathers them, from every
    # Service and Ingress (None when either could not be listed: a partial index could call
    # a host of ours not this cluster's).
    lb: LbIndex | None = None


class _Notes:
    def __init__(self) -> None:
        self.problems: list[str] = []
        self.failed: set[str] = set()

    async def ask(self, what: str, call: Callable[[], Awaitable[T]]) -> T | None:
        try:
            return await call()
        except ApiError as exc:
            self.problems.append(f"{what}: {exc}")
            self.failed.add(what)
            return None


def _data(cm: JsonObj | None, key: str) -> str | None:
    if cm is None:
        return None
    value = (cm.get("data") or {}).get(key)
    return value if isinstance(value, str) else None


def _rules(text: str | None, imported: str | None, *, mode: str, key: str, dns_port: int,
           notes: _Notes) -> tuple[tuple[str, ...] | None, bool | None]:
    """(hosts whose rule is in effect, whether the Corefile has ``reload``)."""
    if text is None:
        return None, None
    try:
        reload = corefile.has_plugin(text, "reload", dns_port=dns_port)
        hosts = set(corefile.managed_hosts(text, dns_port=dns_port))
        if mode == "coredns-import":
            if not corefile.imports_key(text, key, dns_port=dns_port):
                notes.problems.append(f"the Corefile does not import the {key!r} key: rules "
                                      "written there are not in effect")
            elif imported is not None:
                hosts |= set(corefile.managed_hosts(".:53 {\n" + imported + "\n}\n"))
    except corefile.CorefileError as exc:
        notes.problems.append(f"cannot read the Corefile: {exc}")
        return None, None
    return tuple(sorted(hosts)), reload


async def gather(client: KubeClient, s: DoctorSettings, namespace: str,
                 policy: HostPolicy) -> ClusterView:
    """Ask every question at once and assemble the answers."""
    notes = _Notes()
    sys_ns = s.configmap_namespace

    async def lst(path: str, params: Mapping[str, str] | None = None) -> list[JsonObj]:
        return (await client.list(path, params))[0]

    def get(what: str, path: str) -> asyncio.Task[JsonObj | None]:
        return asyncio.ensure_future(notes.ask(what, lambda: client.get(path)))

    def many(what: str, path: str, selector: str = "") -> asyncio.Task[list[JsonObj] | None]:
        params = {"labelSelector": selector} if selector else None
        return asyncio.ensure_future(notes.ask(what, lambda: lst(path, params)))

    t_services = many("list Services", resource_path("v1", "services"))
    t_proxy = get("read the proxy Service",
                  resource_path("v1", "services", namespace, s.proxy_service))
    t_slices = many("list the proxy's EndpointSlices",
                    resource_path("discovery.k8s.io/v1", "endpointslices", namespace),
                    f"kubernetes.io/service-name={s.proxy_service}")
    t_cm = get("read the CoreDNS ConfigMap",
               resource_path("v1", "configmaps", sys_ns, s.configmap_name))
    t_import = get("read the import ConfigMap",
                   resource_path("v1", "configmaps", sys_ns, s.import_configmap_name)) \
        if s.mode == "coredns-import" else None
    # By name first (a narrow Role may allow just that); the controller's own Role reads no
    # DaemonSets at all, only node-local-dns's ConfigMaps, by name.
    t_nld = get("read the node-local-dns DaemonSet",
                resource_path("apps/v1", "daemonsets", "kube-system", "node-local-dns"))
    t_nl_cms = [(ns, name, get(f"read the node-local-dns ConfigMap {ns}/{name}",
                               resource_path("v1", "configmaps", ns, name)))
                for ns, name in NODE_LOCAL_CANDIDATES]
    t_daemonsets = many("list DaemonSets in kube-system",
                        resource_path("apps/v1", "daemonsets", "kube-system"))
    t_deployments = many("list the CoreDNS Deployments",
                         resource_path("apps/v1", "deployments", sys_ns), "k8s-app=kube-dns")
    t_ingresses = many("list Ingresses", resource_path("networking.k8s.io/v1", "ingresses"))
    t_classes = many("list IngressClasses",
                     resource_path("networking.k8s.io/v1", "ingressclasses"))
    services, proxy_svc, slices, cm = await t_services, await t_proxy, await t_slices, await t_cm
    import_cm = None if t_import is None else await t_import
    nld, daemonsets, deployments = await t_nld, await t_daemonsets, await t_deployments
    ingresses, classes = await t_ingresses, await t_classes
    node_local = await _node_local_configmap(t_nl_cms, notes)

    lb_services = None
    if services is not None:
        lb_services = tuple(x for x in (f.lb_service(svc) for svc in services) if x is not None)
    proxy_found = None if "read the proxy Service" in notes.failed else proxy_svc is not None
    if proxy_found is False:
        notes.problems.append(f"Service {namespace}/{s.proxy_service} not found: hairpin-proxy "
                              "is not installed there (see --namespace / --proxy-service)")
    text = _data(cm, s.configmap_key)
    if cm is not None and text is None:
        notes.problems.append(f"ConfigMap {sys_ns}/{s.configmap_name} has no "
                              f"{s.configmap_key!r} key")
    elif cm is None and "read the CoreDNS ConfigMap" not in notes.failed:
        notes.problems.append(f"ConfigMap {sys_ns}/{s.configmap_name} not found "
                              "(see --configmap-namespace / --configmap-name)")
    rule_hosts, reload = _rules(text, _data(import_cm, s.import_key), mode=s.mode,
                                key=s.import_key, dns_port=s.dns_port, notes=notes)
    image = None
    if deployments:
        image = f.coredns_image(deployments[0])
    elif deployments is not None:
        fallback = await notes.ask("read the coredns Deployment", lambda: client.get(
            resource_path("apps/v1", "deployments", sys_ns, "coredns")))
        image = None if fallback is None else f.coredns_image(fallback)
    addresses: dict[str, tuple[str, ...]] = {}
    for ing in ingresses or []:
        hosts, status = f.ingress_hosts_and_status(ing)
        for h in hosts:
            addresses[h] = tuple(dict.fromkeys(addresses.get(h, ()) + status))
    managed = None
    if ingresses is not None and classes is not None:
        managed = evaluate(ingresses, classes, policy)
    facts = f.ClusterFacts(
        lb_services=lb_services,
        proxy_service_found=proxy_found,
        proxy_addresses=_cluster_ips(proxy_svc),
        proxy_ready_endpoints=None if slices is None or proxy_svc is None
        else f.ready_endpoints(slices),
        rule_hosts=rule_hosts,
        reload_plugin=reload,
        node_local_dns=_node_local_dns(nld, daemonsets, notes),
        node_local_configmap=node_local.where,
        node_local_reconciled=node_local.reconciled,
        node_local_zones=node_local.zones,
        coredns_image=image,
        coredns_version=None if image is None else f.image_version(image),
        ingress_addresses=addresses,
        problems=tuple(notes.problems),
    )
    lb = None if services is None or ingresses is None else lb_addresses(services, ingresses)
    return ClusterView(facts, managed, lb)


def _node_local_dns(by_name: JsonObj | None, daemonsets: list[JsonObj] | None,
                    notes: _Notes) -> bool | None:
    if by_name is not None or (daemonsets and any(f.is_node_local_dns(d) for d in daemonsets)):
        return True
    if daemonsets is not None:
        return False
    if "read the node-local-dns DaemonSet" not in notes.failed:
        # Absent by its usual name; other names could not be looked for.
        return False
    return None


@dataclass(frozen=True)
class _NodeLocal:
    where: str | None = None
    reconciled: bool | None = None
    zones: frozenset[str] | None = None


async def _node_local_configmap(
        asked: list[tuple[str, str, asyncio.Task[JsonObj | None]]], notes: _Notes
) -> _NodeLocal:
    """node-local-dns's ConfigMap, under the first of the names the controller edits that
    exists: whether the addon manager owns it, and the zones of our server block there.

    None of them found (and none refused): no ConfigMap, so no block of ours anywhere. A
    refused read with none found: unknown, as the refused one may be the one that exists.
    """
    found: list[tuple[str, str, JsonObj]] = []
    refused = False
    for ns, name, task in asked:
        cm = await task
        if cm is not None:
            found.append((ns, name, cm))
        elif f"read the node-local-dns ConfigMap {ns}/{name}" in notes.failed:
            refused = True
    if not found:
        return _NodeLocal() if refused else _NodeLocal(reconciled=False, zones=frozenset())
    ns, name, cm = found[0]
    if len(found) > 1:
        others = ", ".join(f"{n}/{m}" for n, m, _ in found[1:])
        notes.problems.append(f"node-local-dns ConfigMaps {ns}/{name} and {others} both "
                              f"exist: {ns}/{name} was read")
    sink = NodeLocalSink(ns, name)
    reconciled = sink.reconciled_by_addon_manager(cm)
    try:
        zones: frozenset[str] | None = frozenset(sink.current_hosts(cm))
    except (SinkError, corefile.CorefileError) as exc:
        notes.problems.append(f"cannot read node-local-dns's Corefile in {sink.where}: {exc}")
        zones = None
    if reconciled:
        notes.problems.append(
            f"node-local-dns ConfigMap {ns}/{name} is reconciled by the addon manager "
            "(addonmanager.kubernetes.io/mode: Reconcile): the controller does not edit it")
    return _NodeLocal(f"{ns}/{name}", reconciled, zones)


def _cluster_ips(svc: JsonObj | None) -> tuple[str, ...]:
    if svc is None:
        return ()
    spec: Mapping[str, Any] = svc.get("spec") or {}
    ips = spec.get("clusterIPs") or [spec.get("clusterIP")]
    return tuple(ip for ip in ips if isinstance(ip, str) and ip and ip != "None")


def policy_for(s: DoctorSettings, namespace: str) -> HostPolicy:
    """The controller's policy, with its default target for our namespace and Service."""
    return HostPolicy.from_settings(
        s, default_target(s.cluster_domain, s.proxy_service, namespace))
