"""The Kubernetes side of the doctor: read what the cluster says, write nothing.

Each question is asked on its own; a refusal (403 from a narrow service account) or a missing
object leaves that one fact unknown and is noted in ``problems``, never failing the rest.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hairpin_proxy import corefile
from hairpin_proxy.doctor import facts as f
from hairpin_proxy.doctor import routing
from hairpin_proxy.doctor.deployed import controller_settings, with_controller
from hairpin_proxy.doctor.facts import DataPlaneFacts
from hairpin_proxy.edits.coredns import EditError
from hairpin_proxy.edits.nodelocal import ADDON_MANAGER_SELECTOR, NodeLocalEdit, reconciler_of
from hairpin_proxy.edits.nodelocal import CANDIDATES as NODE_LOCAL_CANDIDATES
from hairpin_proxy.edits.revert_policy import reverter
from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube.client import ApiError, KubeClient, resource_path
from hairpin_proxy.plan import Snapshot, plan
from hairpin_proxy.plan.budget import rooms_of
from hairpin_proxy.plan.core import target_facts
from hairpin_proxy.plan.objects import registered_of, snapshot_of
from hairpin_proxy.plan.snapshot import Rooms, plan_settings_of
from hairpin_proxy.policy import HostPolicy, proxy_service_fqdn
from hairpin_proxy.settings import DoctorSettings
from hairpin_proxy.sources.registry import (
    GATEWAY,
    INGRESS,
    KEY_KIND_SPECS,
    REGISTRATIONS,
    Registration,
    Resource,
    settings_objects,
    turned_on,
)
from hairpin_proxy.targets import table as targets_table
from hairpin_proxy.targets.discovery import CILIUM_INGRESS, NAME_LABEL, service_addresses
from hairpin_proxy.targets.mapping import MapEntry, parse_target_flags
from hairpin_proxy.targets.model import parse_key, split_service
from hairpin_proxy.targets.resolve import (
    CILIUM,
    CILIUM_CONFIGMAP,
    INGRESS_NGINX_CONFIGMAP,
    TargetFacts,
)
from hairpin_proxy.targets.routing_plan import Plan
from hairpin_proxy.targets.slots import slot_of_service_name
from hairpin_proxy.verify.lb import LbIndex, lb_addresses
from hairpin_proxy.wildcards import wildcard_base

T = TypeVar("T")


# The Gateway API source's kinds, as its registration names them: route kinds by plural,
# every plural of the group in the registry's order, and the implementations' settings
# objects that tell whether a Gateway expects the PROXY protocol.
ROUTE_KINDS = {r.plural: r.kind for r in GATEWAY.resources if r.plural in GATEWAY.claiming}
GATEWAY_GROUP = next(r.group for r in GATEWAY.resources if r.plural in GATEWAY.claiming)
GATEWAY_PLURALS = tuple(r.plural for r in GATEWAY.resources if r.group == GATEWAY_GROUP)
SETTINGS_OBJECTS = settings_objects(GATEWAY)


@dataclass(frozen=True)
class ClusterView:
    facts: f.ClusterFacts
    # The hosts the controller would write a rule for, as the plan says (None when the
    # Ingresses could not be listed; every claimed host when the Services could not be,
    # as which of them get a rule is then unknown).
    managed: tuple[str, ...] | None
    # This cluster's load balancer addresses as the controller gathers them, from every
    # Service and Ingress (None when either could not be listed: a partial index could call
    # a host of ours not this cluster's).
    lb: LbIndex | None = None
    # The hosts claimed that get no rule (yet): their data plane is left alone, or their
    # new slot is settling. Checked too, so that the report says why.
    unwritten: tuple[str, ...] = ()

    @property
    def checked(self) -> tuple[str, ...] | None:
        """The hosts to check: the managed ones, then those that get no rule."""
        return None if self.managed is None else (*self.managed, *self.unwritten)


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
                 policy: HostPolicy, target_map: dict[str, MapEntry] | None = None
                 ) -> ClusterView:
    """Ask every question at once and assemble the answers (``target_map``: the parsed
    ``--target`` flags)."""
    notes = _Notes()
    s, policy, target_map = await _controller_settings(client, s, namespace, notes,
                                                       policy=policy,
                                                       target_map=target_map or {})
    said = await _ask(_Asker(client, notes), s, namespace, target_map)
    proxy_found = None if "read the proxy Service" in notes.failed \
        else said.proxy_svc is not None
    if proxy_found is False:
        notes.problems.append(f"Service {namespace}/{s.proxy_service} not found: hairpin-proxy "
                              "is not installed there (see --namespace / --proxy-service)")
    rule_hosts, reload = _rules_in_effect(said, s, notes)
    image = await _coredns_image(client, said.deployments, s.configmap_namespace, notes)
    _note_unread(said, notes)
    slots = _table(said.table_cm, f"{namespace}/{s.targets_configmap}",
                   "read the targets table" in notes.failed, notes)
    gateway_notes = routing.gateway_notes(said.gateway.objects, policy, s.gateway_class)
    if said.registered.problem:
        notes.problems.append(said.registered.problem)
    # Without the Ingresses or their classes the plan would be wrong, not unknown.
    routed = _Routed(None, None, None) if said.ingresses is None or said.classes is None \
        else _route(said, s, namespace, policy, target_map, slots=slots,
                    proxy_found=proxy_found)
    facts = f.ClusterFacts(
        lb_services=_lb_services(said.services),
        proxy_service_found=proxy_found,
        proxy_addresses=service_addresses(said.proxy_svc),
        proxy_ready_endpoints=None if said.slices is None or said.proxy_svc is None
        else f.ready_endpoints(said.slices),
        rule_hosts=rule_hosts,
        reload_plugin=reload,
        node_local_dns=_node_local_dns(said.nld, said.daemonsets, notes),
        node_local_configmap=said.node_local.where,
        node_local_reconciled=said.node_local.reconciled,
        node_local_zones=said.node_local.zones,
        node_local_reverted_by=said.node_local.reverted_by,
        coredns_image=image,
        coredns_version=None if image is None else f.image_version(image),
        ingress_addresses=_ingress_addresses(said.ingresses),
        problems=tuple(notes.problems),
        host_targets=routed.targets,
        gateway_api=said.gateway.state,
        target_slots=slots,
        gateway_notes=gateway_notes,
        data_planes=routed.planes,
        cluster_dns=None if said.services is None
        else f.cluster_dns(said.services, s.configmap_namespace),
    )
    lb = None if said.services is None or said.ingresses is None \
        else lb_addresses(said.services, said.ingresses)
    return ClusterView(facts, routed.managed, lb, routed.unwritten)


class _Asker:
    """One question to the API server each, started at once; a refusal is noted."""

    def __init__(self, client: KubeClient, notes: _Notes) -> None:
        self.client, self.notes = client, notes

    async def _list(self, path: str, params: Mapping[str, str] | None = None) -> list[JsonObj]:
        return (await self.client.list(path, params))[0]

    def get(self, what: str, path: str) -> asyncio.Task[JsonObj | None]:
        return asyncio.ensure_future(self.notes.ask(what, lambda: self.client.get(path)))

    def many(self, what: str, path: str, selector: str = "", field: str = ""
             ) -> asyncio.Task[list[JsonObj] | None]:
        params = {"labelSelector": selector} if selector else \
            {"fieldSelector": field} if field else None
        return asyncio.ensure_future(self.notes.ask(what, lambda: self._list(path, params)))

    def named(self, what: str, namespace: str, name: str) -> asyncio.Task[JsonObj | None]:
        """One ConfigMap, listed by its name (None: absent, or refused and noted)."""
        async def one() -> JsonObj | None:
            items = await self._list(resource_path("v1", "configmaps", namespace),
                                     {"fieldSelector": f"metadata.name={name}"})
            return items[0] if items else None
        return asyncio.ensure_future(self.notes.ask(what, one))


def _path(reg: Registration, plural: str) -> str:
    """The list path of a built-in resource a registration reads, at its first version."""
    r = next(r for r in reg.resources if r.plural == plural)
    return resource_path(f"{r.group}/{r.versions[0]}" if r.group else r.versions[0], plural)


@dataclass(frozen=True)
class _Said:
    """What the cluster answered (None: not read)."""
    services: list[JsonObj] | None
    proxy_svc: JsonObj | None
    slices: list[JsonObj] | None
    cm: JsonObj | None
    import_cm: JsonObj | None
    nld: JsonObj | None
    daemonsets: list[JsonObj] | None
    deployments: list[JsonObj] | None
    ingresses: list[JsonObj] | None
    classes: list[JsonObj] | None
    node_local: _NodeLocal
    table_cm: JsonObj | None
    gateway: _GatewayRead
    # The implementations' settings objects (registry ``settings_objects``).
    settings: _SettingsRead
    # The ConfigMaps PROXY detection reads, by "namespace/name".
    detection_cms: dict[str, JsonObj]
    # The objects of the registered sources that are turned on.
    registered: _RegisteredRead


async def _ask(ask: _Asker, s: DoctorSettings, namespace: str,
               target_map: dict[str, MapEntry]) -> _Said:
    """Every question the doctor asks, all at once."""
    sys_ns, client, get, many = s.configmap_namespace, ask.client, ask.get, ask.many
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
    # Whether an addon manager runs (its pod, or GKE's hidden one: /version says so), and the
    # reverts the controller has told about (its ConfigMapReverted Events in kube-system).
    t_addon = many("look for the addon manager in kube-system",
                   resource_path("v1", "pods", "kube-system"), ADDON_MANAGER_SELECTOR)
    t_version = get("read the API server's version", "/version")
    t_reverts = many("list the controller's revert Events in kube-system",
                     resource_path("v1", "events", "kube-system"),
                     field="reason=ConfigMapReverted")
    t_daemonsets = many("list DaemonSets in kube-system",
                        resource_path("apps/v1", "daemonsets", "kube-system"))
    t_deployments = many("list the CoreDNS Deployments",
                         resource_path("apps/v1", "deployments", sys_ns), "k8s-app=kube-dns")
    t_ingresses = many("list Ingresses", _path(INGRESS, "ingresses"))
    t_classes = many("list IngressClasses", _path(INGRESS, "ingressclasses"))
    t_table = get("read the targets table",
                  resource_path("v1", "configmaps", namespace, s.targets_configmap))
    t_gateway = asyncio.ensure_future(_read_gateway_api(client, s))
    t_settings = asyncio.ensure_future(_read_settings(client, s))
    t_registered = asyncio.ensure_future(_read_registered(client, s))
    services, proxy_svc, slices, cm = await t_services, await t_proxy, await t_slices, await t_cm
    import_cm = None if t_import is None else await t_import
    nld, daemonsets, deployments = await t_nld, await t_daemonsets, await t_deployments
    ingresses, classes = await t_ingresses, await t_classes
    node_local = await _node_local_configmap(
        t_nl_cms, ask.notes, await t_addon or [], await t_version, await t_reverts)
    table_cm, gateway_read = await t_table, await t_gateway
    # PROXY detection reads a few ConfigMaps by name; which ones depends on the answers above.
    # Listed by name, as the controller reads them and as its RBAC grants them (list and
    # watch with resourceNames, no get).
    asked_cms = [(ns, name, ask.named(f"read ConfigMap {ns}/{name}", ns, name))
                 for ns, name in _detection_configmaps(services or [], classes or [],
                                                       list(gateway_read.objects.classes),
                                                       target_map)]
    read = [(f"{ns}/{name}", await task) for ns, name, task in asked_cms]
    detection_cms = {where: cm for where, cm in read if cm is not None}
    return _Said(services, proxy_svc, slices, cm, import_cm, nld, daemonsets, deployments,
                 ingresses, classes, node_local, table_cm, gateway_read, await t_settings,
                 detection_cms, await t_registered)


def _lb_services(services: list[JsonObj] | None) -> tuple[f.LbService, ...] | None:
    if services is None:
        return None
    return tuple(x for x in (f.lb_service(svc) for svc in services) if x is not None)


def _rules_in_effect(said: _Said, s: DoctorSettings, notes: _Notes
                     ) -> tuple[tuple[str, ...] | None, bool | None]:
    """The CoreDNS ConfigMap's rules in effect, and whether it has ``reload``."""
    sys_ns, cm = s.configmap_namespace, said.cm
    text = _data(cm, s.configmap_key)
    if cm is not None and text is None:
        notes.problems.append(f"ConfigMap {sys_ns}/{s.configmap_name} has no "
                              f"{s.configmap_key!r} key")
    elif cm is None and "read the CoreDNS ConfigMap" not in notes.failed:
        notes.problems.append(f"ConfigMap {sys_ns}/{s.configmap_name} not found "
                              "(see --configmap-namespace / --configmap-name)")
    return _rules(text, _data(said.import_cm, s.import_key), mode=s.mode,
                  key=s.import_key, dns_port=s.dns_port, notes=notes)


async def _coredns_image(client: KubeClient, deployments: list[JsonObj] | None, sys_ns: str,
                         notes: _Notes) -> str | None:
    if deployments:
        return f.coredns_image(deployments[0])
    if deployments is None:
        return None
    fallback = await notes.ask("read the coredns Deployment", lambda: client.get(
        resource_path("apps/v1", "deployments", sys_ns, "coredns")))
    return None if fallback is None else f.coredns_image(fallback)


def _ingress_addresses(ingresses: list[JsonObj] | None) -> dict[str, tuple[str, ...]]:
    addresses: dict[str, tuple[str, ...]] = {}
    for ing in ingresses or []:
        hosts, status = f.ingress_hosts_and_status(ing)
        for h in hosts:
            addresses[h] = tuple(dict.fromkeys(addresses.get(h, ()) + status))
    return addresses


def _note_unread(said: _Said, notes: _Notes) -> None:
    """What of the Gateway API and of the data planes' settings could not be read."""
    if said.gateway.problem:
        notes.problems.append(said.gateway.problem)
    for name, why in said.settings.refused.items():
        notes.problems.append(f"list {name}: {why}: the PROXY setting of the Gateways they "
                              "configure is unknown")


@dataclass(frozen=True)
class _Routed:
    managed: tuple[str, ...] | None
    targets: dict[str, f.HostTarget] | None
    planes: tuple[DataPlaneFacts, ...] | None
    unwritten: tuple[str, ...] = ()


def _snapshot(said: _Said, s: DoctorSettings, namespace: str, policy: HostPolicy,
              target_map: dict[str, MapEntry], *, now: float) -> Snapshot:
    """What doctor listed, and the controller's settings it read, as the plan reads them."""
    policy = dataclasses.replace(policy, served_zones=_served_zones(said, s))
    plan_settings = dataclasses.replace(
        plan_settings_of(s, policy, target_map, namespace), settle=s.target_settle,
        sources_on=turned_on(s), rules_budget=s.rules_budget,
        share_hosts=s.namespace_share_hosts, share_bytes=s.namespace_share_bytes)
    registered, extra = registered_of(said.registered.objects, plan_settings)
    for name, group in said.registered.served:
        registered.setdefault(name, {}).setdefault(group, [])
    # The settings objects land where the plan reads them, as render's snapshot puts them.
    settings = snapshot_of(said.settings.objects, plan_settings,
                           targets_configmap=s.targets_configmap)
    gw = said.gateway.objects
    return Snapshot(
        plan_settings, rooms=_rooms(said, s), ingresses=said.ingresses or [],
        ingress_classes=said.classes or [],
        gateway_classes=gw.classes, gateways=gw.gateways, routes=gw.routes,
        listener_sets=gw.listener_sets, namespace_labels=gw.namespace_labels or {},
        registered=registered, extra_facts=extra, services=said.services or [],
        unreadable=said.registered.unreadable | said.settings.unreadable,
        configmaps=said.detection_cms,
        client_traffic_policies=settings.client_traffic_policies,
        nginx_proxies=settings.nginx_proxies, targets_configmap=said.table_cm, now=now,
        held=_held(said, s, policy))


def _rooms(said: _Said, s: DoctorSettings) -> Rooms | None:
    """The room the rules' ConfigMap leaves, as the controller measures it (None when that
    ConfigMap could not be read: then no size limit is judged). The published hosts' and
    node-local-dns's rooms are not read here."""
    if s.mode == "coredns":
        cm, name, key = said.cm, s.configmap_name, s.configmap_key
    else:
        cm, name, key = said.import_cm, s.import_configmap_name, s.import_key
    if cm is None:
        return None
    return rooms_of(s.mode, cm, rules_key=key,
                    rules_where=f"{s.configmap_namespace}/{name}[{key}]")


def _served_zones(said: _Said, s: DoctorSettings) -> tuple[str, ...]:
    """The zones the Corefile serves itself, which the controller never redirects (none when
    it cannot be read)."""
    text = _data(said.cm, s.configmap_key)
    try:
        return corefile.served_zones(text, dns_port=s.dns_port) if text else ()
    except corefile.CorefileError:
        return ()


def _held(said: _Said, s: DoctorSettings, policy: HostPolicy) -> dict[str, corefile.Answers]:
    """What the rules answer for each host now (a host waiting for its slot keeps its rule,
    as the controller keeps it); nothing when they cannot be read."""
    text, port = _data(said.cm, s.configmap_key), s.dns_port
    if s.mode == "coredns-import":
        snippet = _data(said.import_cm, s.import_key)
        text, port = (None if snippet is None else ".:53 {\n" + snippet + "\n}\n"), 53
    if text is None:
        return {}
    try:
        return corefile.managed_groups(text, proxy_fqdn=policy.proxy_fqdn, dns_port=port)
    except corefile.CorefileError:
        return {}


def _route(said: _Said, s: DoctorSettings, namespace: str, policy: HostPolicy,
           target_map: dict[str, MapEntry], *, slots: dict[str, int] | None,
           proxy_found: bool | None) -> _Routed:
    """The hosts the controller would manage, and where each would go, as its plan says."""
    services = said.services
    now = time.time()
    snap = _snapshot(said, s, namespace, policy, target_map, now=now)
    state = plan(snap)
    # Every data plane is found among the Services: without them each target would read
    # as "not found", a wrong answer rather than an unknown one, and so would which hosts
    # get a rule: every claimed host is checked then.
    if services is None:
        return _Routed(tuple(sorted({c.host for c in state.claims})), None, None)
    decided = state.plan
    unwritten = set(decided.routes) | set(decided.excluded)
    unwritten.difference_update(state.hosts)
    facts_for_targets = target_facts(snap)
    ours = routing.ProxyServices(
        namespace=namespace, main=s.proxy_service,
        main_found=proxy_found, main_addresses=service_addresses(said.proxy_svc),
        by_name={str((svc.get("metadata") or {}).get("name")): service_addresses(svc)
                 for svc in services
                 if (svc.get("metadata") or {}).get("namespace") == namespace
                 and slot_of_service_name(
                     str((svc.get("metadata") or {}).get("name"))) is not None})
    targets = routing.host_targets(
        state, facts_for_targets, target_map, slots, ours,
        settling=routing.Settling(
            targets_table.decode_published(_data(said.table_cm, targets_table.PUBLISHED_KEY)),
            s.target_settle, now))
    return _Routed(state.hosts, targets, data_planes(decided, facts_for_targets),
                   tuple(sorted(unwritten)))


async def _served(client: KubeClient, group: str, plurals: tuple[str, ...]
                  ) -> dict[str, str] | None:
    """plural -> "group/version" at which the API serves each of ``plurals``: the first
    version, in the server's order of preference, that lists it (a TLSRoute may be served at
    v1alpha2 only while the rest of the group is at v1). None when the group is not served."""
    doc = await client.get(f"/apis/{group}")
    if doc is None:
        return None
    versions: list[str] = []
    preferred = doc.get("preferredVersion")
    if isinstance(preferred, dict) and isinstance(preferred.get("groupVersion"), str):
        versions.append(preferred["groupVersion"])
    for v in doc.get("versions") or []:
        gv = v.get("groupVersion") if isinstance(v, dict) else None
        if isinstance(gv, str) and gv not in versions:
            versions.append(gv)
    docs = await asyncio.gather(*(client.get(f"/apis/{gv}") for gv in versions))
    out: dict[str, str] = {}
    for gv, listing in zip(versions, docs, strict=True):
        names = {r.get("name") for r in (listing or {}).get("resources") or []
                 if isinstance(r, dict)}
        for plural in plurals:
            if plural in names and plural not in out:
                out[plural] = gv
    return out


def _why(exc: ApiError) -> str:
    """An API error, short: the status alone tells a refusal from a missing resource."""
    return f"{exc.status} {exc.reason}" if exc.status else exc.message


@dataclass(frozen=True)
class _GatewayRead:
    objects: routing.GatewayObjects
    # ClusterFacts.gateway_api (None: unknown).
    state: str | None
    # One line when something could not be read, else "".
    problem: str = ""


async def _read_gateway_api(client: KubeClient, s: DoctorSettings) -> _GatewayRead:
    """Gateway API objects at their preferred served versions, and the Namespaces' labels
    (for allowedRoutes selectors). Whatever is refused is named in one line."""
    if s.gateway_api == "off":
        return _GatewayRead(routing.GatewayObjects(), "off (--gateway-api off)")
    try:
        served = await _served(client, GATEWAY_GROUP, GATEWAY_PLURALS)
    except ApiError as exc:
        return _GatewayRead(routing.GatewayObjects(), None,
                            f"Gateway API: cannot tell which versions the API serves "
                            f"({_why(exc)}): routes and their hosts are unknown")
    if served is None:
        return _GatewayRead(routing.GatewayObjects(), "not served")

    async def lst(path: str) -> list[JsonObj] | ApiError:
        try:
            return (await client.list(path))[0]
        except ApiError as exc:
            return exc

    plurals = [p for p in GATEWAY_PLURALS if p in served]
    got = await asyncio.gather(*(lst(resource_path(served[p], p)) for p in plurals),
                               lst(resource_path("v1", "namespaces")))
    listed = dict(zip(plurals, got[:-1], strict=True))
    refused: dict[str, list[str]] = {}
    for plural, result in listed.items():
        if isinstance(result, ApiError):
            refused.setdefault(_why(result), []).append(plural)
    namespaces = got[-1]
    labels: dict[str, dict[str, str]] | None = None
    if isinstance(namespaces, ApiError):
        refused.setdefault(_why(namespaces), []).append("namespaces")
    else:
        labels = {}
        for ns in namespaces:
            meta = ns.get("metadata") or {}
            raw = meta.get("labels") or {}
            labels[str(meta.get("name") or "")] = {str(k): str(v) for k, v in raw.items()}

    def items(plural: str) -> list[JsonObj]:
        result = listed.get(plural)
        return result if isinstance(result, list) else []

    objects = routing.GatewayObjects(
        classes=items("gatewayclasses"), gateways=items("gateways"),
        routes=[(kind, obj) for plural, kind in ROUTE_KINDS.items() for obj in items(plural)],
        namespace_labels=labels, listener_sets=items("listenersets"))
    state = "served (" + ", ".join(f"{p} {served[p].split('/', 1)[1]}" for p in plurals) + ")"
    problem = ""
    if refused:
        parts = "; ".join(f"{', '.join(names)} ({why})" for why, names in refused.items())
        problem = (f"Gateway API: could not list {parts}: the hosts of those routes, and "
                   "what they would win or lose, are unknown")
    return _GatewayRead(objects, state, problem)


@dataclass(frozen=True)
class _RegisteredRead:
    """The objects of the registered sources with claims of their own (registry)."""
    objects: tuple[JsonObj, ...] = ()
    # (registration, API group) of each claiming resource the API serves: served and empty
    # is "none", as the controller reads it (the preferred group is chosen among these).
    served: tuple[tuple[str, str], ...] = ()
    # Plurals whose list was refused: what they would say is unknown.
    unreadable: frozenset[str] = frozenset()
    problem: str = ""


async def _list_resource(client: KubeClient, r: Resource) -> tuple[str, list[JsonObj]] | None:
    """(group/version, items with their apiVersion and kind) of one registered resource: a
    custom resource at its preferred served version (None: not served), a built-in one by
    the names the registration reads."""
    if r.crd:
        found = await _served(client, r.group, (r.plural,))
        if not found or r.plural not in found:
            return None
        gv = found[r.plural]
        items = (await client.list(resource_path(gv, r.plural)))[0]
    else:
        gv = f"{r.group}/{r.versions[0]}" if r.group else r.versions[0]
        items = [o for n in r.names for o in (await client.list(
            resource_path(gv, r.plural), {"fieldSelector": f"metadata.name={n}"}))[0]]
    return gv, [{**o, "apiVersion": gv, "kind": r.kind} for o in items]


async def _read_registered(client: KubeClient, s: DoctorSettings) -> _RegisteredRead:
    """What the registered sources that ``s`` turns on read, as the controller reads it."""
    objects: list[JsonObj] = []
    served: list[tuple[str, str]] = []
    refused: dict[str, list[str]] = {}
    for reg in REGISTRATIONS:
        if reg.claims_of is None or reg.name not in turned_on(s):
            continue
        for r in reg.resources:
            try:
                got = await _list_resource(client, r)
            except ApiError as exc:
                refused.setdefault(_why(exc), []).append(f"{r.plural}.{r.group or 'core'}")
                continue
            if got is not None:
                objects += got[1]
                if r.plural in reg.claiming:
                    served.append((reg.name, r.group))
    problem = ""
    if refused:
        parts = "; ".join(f"{', '.join(names)} ({why})" for why, names in refused.items())
        problem = f"could not list {parts}: the hosts or data planes they tell of are unknown"
    return _RegisteredRead(tuple(objects), tuple(served),
                           frozenset(n.split(".", 1)[0] for names in refused.values()
                                     for n in names), problem)


@dataclass(frozen=True)
class _SettingsRead:
    """The implementations' settings objects, with their apiVersion and kind."""
    objects: tuple[JsonObj, ...] = ()
    # "plural.group" → why its list was refused: its silence is unknown, not "none".
    refused: Mapping[str, str] = field(default_factory=dict)

    @property
    def unreadable(self) -> frozenset[str]:
        return frozenset(name.split(".", 1)[0] for name in self.refused)


async def _read_settings(client: KubeClient, s: DoctorSettings) -> _SettingsRead:
    """Every settings object the Gateway API source reads for PROXY detection, at its
    preferred served version (none when not served or the source is off)."""
    if GATEWAY.name not in turned_on(s):
        return _SettingsRead()
    objects: list[JsonObj] = []
    refused: dict[str, str] = {}
    for r in SETTINGS_OBJECTS:
        try:
            got = await _list_resource(client, r)
        except ApiError as exc:
            refused[f"{r.plural}.{r.group}"] = _why(exc)
            continue
        objects += got[1] if got is not None else []
    return _SettingsRead(tuple(objects), refused)


def _detection_configmaps(services: list[JsonObj], classes: list[JsonObj],
                          gateway_classes: list[Mapping[str, Any]],
                          target_map: dict[str, MapEntry]) -> list[tuple[str, str]]:
    """The ConfigMaps PROXY detection may read: ingress-nginx's, in the namespace of each of
    its Services (and of each --target Service), and cilium-config when Cilium serves a class."""
    namespaces = {str((svc.get("metadata") or {}).get("namespace") or "") for svc in services
                  if ((svc.get("metadata") or {}).get("labels") or {}).get(NAME_LABEL)
                  == "ingress-nginx"}
    namespaces |= {split_service(e.service)[0] for e in target_map.values()
                   if e.key.startswith("ingressclass/")}
    wanted = [(ns, INGRESS_NGINX_CONFIGMAP) for ns in sorted(namespaces) if ns]
    if any((c.get("spec") or {}).get("controller") == CILIUM_INGRESS for c in classes) or any(
            (c.get("spec") or {}).get("controllerName") == CILIUM for c in gateway_classes):
        wanted.append(CILIUM_CONFIGMAP)
    return wanted


def _table(cm: JsonObj | None, where: str, refused: bool,
           notes: _Notes) -> dict[str, int] | None:
    """The published targets table, key -> slot; {} when there is none yet."""
    if refused:
        return None
    text = _data(cm, targets_table.TABLE_KEY)
    if cm is None or text is None:
        return {}
    try:
        return {e.key: e.slot for e in targets_table.decode(text)}
    except targets_table.TableError as exc:
        notes.problems.append(f"the targets table in ConfigMap {where} cannot be read: {exc}")
        return None


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
    reverted_by: str | None = None


def _reverted_by(cm: JsonObj, name: str, events: list[JsonObj] | None) -> str | None:
    """Who removed our block, when the controller has told of a revert of this ConfigMap (a
    ConfigMapReverted Event on it) and our block is not whole: the manager that owns the
    Corefile key now, from its managedFields."""
    if not any(((e.get("involvedObject") or {}).get("name")) == name for e in events or ()):
        return None
    who = reverter((cm.get("metadata") or {}).get("managedFields"), NodeLocalEdit(
        "kube-system", name).key)
    return who.manager or "an unknown manager"


async def _node_local_configmap(
        asked: list[tuple[str, str, asyncio.Task[JsonObj | None]]], notes: _Notes,
        addon_pods: list[JsonObj], version: JsonObj | None, events: list[JsonObj] | None
) -> _NodeLocal:
    """node-local-dns's ConfigMap, under the first of the names the controller edits that
    exists: whether a running addon manager reconciles it, the zones of our server block
    there, and who removed that block when the controller has told of a revert.

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
    edit = NodeLocalEdit(ns, name)
    who = reconciler_of(cm, addon_pods, version)
    try:
        zones: frozenset[str] | None = frozenset(edit.current_hosts(cm))
    except (EditError, corefile.CorefileError) as exc:
        notes.problems.append(f"cannot read node-local-dns's Corefile in {edit.where}: {exc}")
        zones = None
    if who:
        notes.problems.append(
            f"node-local-dns ConfigMap {ns}/{name} is labelled addonmanager.kubernetes.io/mode: "
            f"Reconcile and {who} runs: the controller does not edit it")
    reverted = _reverted_by(cm, name, events)
    if reverted:
        notes.problems.append(
            f"node-local-dns ConfigMap {ns}/{name}: the controller's block was removed by "
            f"{reverted} (see its ConfigMapReverted Events)")
    return _NodeLocal(f"{ns}/{name}", bool(who), zones, reverted)


def data_planes(decided: Plan, facts: TargetFacts) -> tuple[DataPlaneFacts, ...]:
    """The data planes the plan relays to, with their ClusterIPs and implementation: those
    with a slot, and the one the main proxy Service relays to when it was found (``shared``:
    the default install's ingress-nginx)."""
    by_ref = {f"{(svc.get('metadata') or {}).get('namespace')}/"
              f"{(svc.get('metadata') or {}).get('name')}": svc for svc in facts.services}
    hosts: dict[str, str] = {}
    for host, key in sorted(decided.routes.items()):
        if wildcard_base(host) is None:
            hosts.setdefault(key, host)
    out = []
    for key, t in sorted({**decided.targets, **decided.shared}.items()):
        parts = parse_key(key)
        if parts.kind == "gateway":
            gw = facts.gateways.get(f"{parts.namespace}/{parts.name}") or {}
            cls = facts.gateway_classes.get(str((gw.get("spec") or {}).get(
                "gatewayClassName") or "")) or {}
            controller = str((cls.get("spec") or {}).get("controllerName") or "")
        else:
            cls = facts.ingress_classes.get(parts.name) or {}
            controller = str((cls.get("spec") or {}).get("controller") or "")
        out.append(DataPlaneFacts(key, t.service, service_addresses(by_ref.get(t.service)),
                                  t.http_port, t.https_port, t.proxy, controller,
                                  hosts.get(key) or hosts.get(decided.fallbacks.get(key, key), "")))
    return tuple(out)


async def _controller_settings(client: KubeClient, s: DoctorSettings, namespace: str,
                               notes: _Notes, *, policy: HostPolicy,
                               target_map: dict[str, MapEntry]
                               ) -> tuple[DoctorSettings, HostPolicy, dict[str, MapEntry]]:
    """The settings the controller really runs with, from its Deployment (doctor's own flags
    when there is none, or it cannot be read: said among the problems)."""
    if not s.controller_deployment:
        return s, policy, target_map
    where = f"Deployment {namespace}/{s.controller_deployment}"
    try:
        deployment = await client.get(resource_path("apps/v1", "deployments", namespace,
                                                    s.controller_deployment))
    except ApiError as exc:
        notes.problems.append(f"read the controller's {where}: {_why(exc)}; its settings "
                              "are taken from doctor's flags")
        return s, policy, target_map
    if deployment is None:
        return s, policy, target_map
    got = controller_settings(deployment)
    if isinstance(got, str):
        notes.problems.append(f"the controller's {where}: {got}; its settings are taken from "
                              "doctor's flags")
        return s, policy, target_map
    effective = with_controller(s, got)
    try:
        return (effective, policy_for(effective, namespace),
                parse_target_flags(effective.target, KEY_KIND_SPECS))
    except ValueError as exc:
        notes.problems.append(f"the controller's {where}: {exc}; its settings are taken from "
                              "doctor's flags")
        return s, policy, target_map


def policy_for(s: DoctorSettings, namespace: str) -> HostPolicy:
    """The controller's policy, with our namespace's proxy Service as its protected name."""
    return HostPolicy.from_settings(
        s, proxy_service_fqdn(s.cluster_domain, s.proxy_service, namespace))
