"""The plan's shell: one snapshot of the caches per pass, the incremental plan
(``plan.Planner``, equal to ``plan.plan``), and what its outcome tells.

The decisions are the plan's (claims through the host policy, conflicts, targets, slots,
answer sets); this shell reads the caches (every source's objects, the data-plane Services,
IngressClasses, Gateways and the implementations' own settings, the slot table the proxies
mount, what the rules answer now), and tells the rest of the pass which answer each host gets:

- a host of the default target answers with the proxy Service ``hairpin-proxy``;
- a host of slot ``i`` answers with ``hairpin-proxy-t<i>``'s ClusterIPs once that slot has
  been in the published table for ``--target-settle`` seconds (the proxies mount the table
  through the kubelet's ConfigMap volume sync); until then it keeps what the rules answer for
  it now, or gets no rule yet.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from hairpin_proxy import corefile
from hairpin_proxy.apis import GATEWAY_GROUP
from hairpin_proxy.controller.sources import MakeReflector
from hairpin_proxy.controller.sources.gateway import GatewaySource
from hairpin_proxy.controller.sources.ingress import IngressSource
from hairpin_proxy.controller.sources.registered import RegisteredSource
from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube.client import resource_path
from hairpin_proxy.kube.watch import Reflector
from hairpin_proxy.plan import DesiredState, PlanSettings, Snapshot
from hairpin_proxy.plan.answers import Pending
from hairpin_proxy.plan.core import slot_table
from hairpin_proxy.plan.incremental import Planner
from hairpin_proxy.sources.gateway.model import ROUTE_RESOURCES
from hairpin_proxy.targets import table
from hairpin_proxy.targets.resolve import CILIUM_CONFIGMAP, INGRESS_NGINX_CONFIGMAP
from hairpin_proxy.targets.routing_plan import Plan
from hairpin_proxy.targets.slots import service_name

log = logging.getLogger("hairpin_proxy.controller")

def slim_service(obj: JsonObj) -> JsonObj:
    """What verification, discovery and our own per-target Services read of a Service."""
    out: JsonObj = {k: obj[k] for k in ("apiVersion", "kind") if k in obj}
    meta = obj.get("metadata")
    keep = ("name", "namespace", "uid", "resourceVersion", "labels", "annotations",
            "ownerReferences")
    out["metadata"] = {k: meta[k] for k in keep if k in meta} if isinstance(meta, dict) else {}
    spec = obj.get("spec")
    if isinstance(spec, dict):
        out["spec"] = {k: spec[k] for k in ("type", "ports", "clusterIP", "clusterIPs",
                                            "selector", "ipFamilies", "ipFamilyPolicy")
                       if k in spec}
    status = obj.get("status")
    if isinstance(status, dict) and isinstance(status.get("loadBalancer"), dict):
        out["status"] = {"loadBalancer": status["loadBalancer"]}
    return out


def pending_note(pending: Mapping[str, Pending]) -> str:
    """One clause for /readyz: how many hosts wait for which slot, and until when."""
    if not pending:
        return ""
    parts = [f"{key} {p.hosts} host{'s' if p.hosts != 1 else ''} "
             + (f"rules at {table.clock(p.rules_at)} UTC" if p.rules_at is not None
                else f"waiting for Service {service_name(p.slot)}")
             for key, p in sorted(pending.items())]
    total = sum(p.hosts for p in pending.values())
    return f"{total} host{'s' if total != 1 else ''} pending (slot settling: {', '.join(parts)})"


def _same(a: Pending, b: Pending) -> bool:
    # The first pass counts from its own clock, the next from the table's published time
    # (the same moment, a write later): not a change worth another line.
    if a.rules_at is None or b.rules_at is None:
        return a == b
    return a.slot == b.slot and a.hosts == b.hosts and abs(a.rules_at - b.rules_at) < 5


class _Held(Mapping[str, corefile.Answers]):
    """What the rules answer now, read only when the plan asks (a slot settling)."""

    def __init__(self, read: Callable[[], Mapping[str, corefile.Answers]]) -> None:
        self._read = read
        self._got: Mapping[str, corefile.Answers] | None = None

    def _held(self) -> Mapping[str, corefile.Answers]:
        if self._got is None:
            self._got = self._read()
        return self._got

    def __getitem__(self, host: str) -> corefile.Answers:
        return self._held()[host]

    def __iter__(self) -> Iterator[str]:
        return iter(self._held())

    def __len__(self) -> int:
        return len(self._held())


def _labels(namespaces: Sequence[JsonObj]) -> dict[str, dict[str, str]]:
    return {str((ns.get("metadata") or {}).get("name")):
            {str(k): str(v) for k, v in ((ns.get("metadata") or {}).get("labels") or {}).items()}
            for ns in namespaces}


def _by_key(objs: Sequence[JsonObj]) -> dict[str, JsonObj]:
    return {f"{(o.get('metadata') or {}).get('namespace')}/"
            f"{(o.get('metadata') or {}).get('name')}": o for o in objs}


class Routing:
    def __init__(self, reflector: MakeReflector, namespace: str, *, services: Reflector,
                 ingress: IngressSource, gateway: GatewaySource | None,
                 table_configmap: str, wake_in: Callable[[float], None],
                 registered: Sequence[RegisteredSource] = ()) -> None:
        self.namespace = namespace
        self.services = services
        self.ingress = ingress
        self.gateway = gateway
        # Registered sources: their claiming objects and the facts they add.
        self.registered = tuple(registered)
        self.table_configmap = table_configmap
        self.wake_in = wake_in
        self.nginx_configmaps = reflector(resource_path("v1", "configmaps"),
                                          "ingress-nginx-configmaps", INGRESS_NGINX_CONFIGMAP)
        self.cilium_configmap = reflector(resource_path("v1", "configmaps", CILIUM_CONFIGMAP[0]),
                                          "cilium-config", CILIUM_CONFIGMAP[1])
        self.table_cm = reflector(resource_path("v1", "configmaps", namespace),
                                  "targets-configmap", table_configmap)
        self.planner = Planner()
        self._told: dict[str, str] = {}
        self._told_pending: dict[str, Pending] = {}
        # The last pass's hosts waiting for a new slot, for /readyz.
        self.pending: dict[str, Pending] = {}
        # The Ingresses as the last snapshot listed them (one reflector of every namespace).
        self._ingresses: list[JsonObj] | None = None
        # The Gateway API objects as the last pass listed them, with the watches' generation.
        self._watched: tuple[tuple[int, ...], dict[str, Any]] | None = None

    @property
    def reflectors(self) -> list[Reflector]:
        return [self.nginx_configmaps, self.cilium_configmap, self.table_cm]

    def _gateway_fields(self) -> dict[str, Any]:
        g = self.gateway
        if g is None:
            return {}
        w = g.watches
        generation = w.generation()
        if self._watched is None or self._watched[0] != generation:
            # Listed again only when a watched object changed: 5,000 routes make a list of
            # pairs that a pass for an Ingress need not build.
            self._watched = (generation, {
                "gateway_classes": w.objects(GATEWAY_GROUP, "gatewayclasses"),
                "gateways": w.objects(GATEWAY_GROUP, "gateways"),
                "routes": [(kind, obj) for plural, kind in ROUTE_RESOURCES.items()
                           for obj in w.objects(GATEWAY_GROUP, plural)],
                "listener_sets": w.objects(GATEWAY_GROUP, "listenersets"),
                "namespace_labels": _labels(w.objects("", "namespaces"))})
        return {**self._watched[1], "client_traffic_policies": g.client_traffic_policies(),
                "nginx_proxies": g.nginx_proxies()}

    def snapshot(self, settings: PlanSettings, table_cm: JsonObj | None,
                 held: Callable[[], Mapping[str, corefile.Answers]], now: float) -> Snapshot:
        """The caches as one snapshot: lists of the cached objects themselves (the plan
        tells a changed object by its identity)."""
        reflectors = self.ingress.ingresses
        if len(reflectors) == 1:
            # The last pass's list, with the Ingresses added since where only such came: the
            # plan keeps lists of its own (of this one only how long it was), and a pass
            # reads it within itself.
            ingresses = self._ingresses = reflectors[0].values_list(self._ingresses)
        else:
            ingresses = [o for r in reflectors for o in r.cache.values()]
        g = self.gateway
        return Snapshot(
            settings, ingresses=ingresses,
            ingress_classes=list(self.ingress.classes.cache.values()),
            registered={r.registration.name: r.claiming() for r in self.registered},
            extra_facts={k: v for r in self.registered for k, v in r.facts().items()},
            services=list(self.services.cache.values()),
            configmaps=_by_key([cm for r in (self.nginx_configmaps, self.cilium_configmap)
                                for cm in r.cache.values()]),
            unreadable=frozenset().union(g.unreadable() if g else (),
                                         *(r.unreadable() for r in self.registered)),
            targets_configmap=table_cm, held=_Held(held), now=now,
            **self._gateway_fields())

    def read_routes_ahead(self, settings: PlanSettings) -> None:
        """The Gateway API routes as cached now through their reading, ahead of the first
        pass (``Planner.prime_routes``): their list ends long before 50,000 Ingresses' does,
        and the first pass then takes what they made. What the reading leaves out is told
        now."""
        if self.gateway is None:
            return
        read = self.planner.routes_read
        for note in self.planner.prime_routes(Snapshot(settings, **self._gateway_fields())):
            self.gateway.note(note)
        self.ingress.metrics.route_evaluations.inc(self.planner.routes_read - read)

    async def plan(self, snap: Snapshot) -> DesiredState:
        """The plan of ``snap``, and what it tells. Always in a thread: a plan may take
        seconds (the first over 50,000 Ingresses, or one that fits many hosts to a size
        limit), and the Lease must be renewed meanwhile, or the pass is not written and the
        next one starts over, for ever."""
        read, routes = self.planner.ingresses_read, self.planner.routes_read
        state = await asyncio.to_thread(self.planner.plan, snap)
        self.ingress.metrics.evaluations.inc(self.planner.ingresses_read - read)
        self.ingress.metrics.route_evaluations.inc(self.planner.routes_read - routes)
        if self.gateway is not None:
            for note in self.planner.notes:
                self.gateway.note(note)
        _, error = slot_table(snap.targets_configmap)
        if error:
            log.warning("the published targets table is unreadable; slots start afresh",
                        extra={"error": error})
        self._tell(state.plan)
        routed = state.routed
        if routed.wake_in is not None:
            self.wake_in(routed.wake_in)
        self.pending = routed.pending
        self._tell_pending(routed.pending)
        return state

    def _tell_pending(self, pending: Mapping[str, Pending]) -> None:
        """One line per target whose hosts start waiting for a slot (or whose count or time
        changes), not one per pass."""
        for key, p in sorted(pending.items()):
            told = self._told_pending.get(key)
            if told is not None and _same(told, p):
                continue
            extra: dict[str, object] = {"target": key, "slot": p.slot, "hosts": p.hosts}
            if p.rules_at is not None:
                extra["rules_at"] = f"{table.clock(p.rules_at)} UTC"
                log.info("hosts wait for their new slot to settle (--target-settle)",
                         extra=extra)
            else:
                extra["service"] = f"{self.namespace}/{service_name(p.slot)}"
                log.info("hosts wait for their slot's Service", extra=extra)
        self._told_pending = dict(pending)

    def _tell(self, p: Plan) -> None:
        """One log line per change of a target's state (not per pass)."""
        now: dict[str, str] = {}
        for key, target in p.targets.items():
            now[key] = (f"relayed to {target.service} (found by {target.found_by}), PROXY "
                        f"{target.proxy} (from {target.proxy_source}), slot {p.slots[key]}")
        for key, why in p.unresolved.items():
            now[key] = f"not redirected ({why.problem}): {why.message}"
        for key, target in p.shared.items():
            now[key] = (f"served by the main proxy Service, no slot: its data plane "
                        f"{target.service} (found by {target.found_by}) is the proxy's "
                        "--target-server")
        # A target that cannot be used is worth a warning; one that needs no PROXY is not.
        warn = {k for k, why in p.unresolved.items() if why.problem != "target-no-proxy"}
        for key, words in now.items():
            if self._told.get(key) != words:
                (log.warning if key in warn else log.info)(
                    "target", extra={"target": key, "state": words})
        self._told = now
