"""Every host to the data plane that serves it: claims → targets → slots → answers.

The pure decisions live in ``targets.plan``; this shell feeds them the caches (data-plane
Services, IngressClasses, Gateways and the implementations' own settings), remembers the slot
table the proxies mount, and tells the pass which answer each host gets:

- a host of the default target answers with the proxy Service ``hairpin-proxy``;
- a host of slot ``i`` answers with ``hairpin-proxy-t<i>``'s ClusterIPs once that slot has
  been in the published table for ``--target-settle`` seconds (the proxies mount the table
  through the kubelet's ConfigMap volume sync); until then it keeps what the rules answer for
  it now, or gets no rule yet.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from hairpin_proxy import corefile
from hairpin_proxy.claims import Claim
from hairpin_proxy.controller.sources import MakeReflector
from hairpin_proxy.controller.sources.gateway import GatewaySource
from hairpin_proxy.controller.sources.ingress import IngressSource
from hairpin_proxy.controller.sources.registered import RegisteredSource
from hairpin_proxy.kube.client import JsonObj, resource_path
from hairpin_proxy.kube.watch import Reflector
from hairpin_proxy.plan.answers import Pending, Routed, route_answers
from hairpin_proxy.plan.core import slot_table
from hairpin_proxy.targets import table
from hairpin_proxy.targets.discovery import service_addresses, service_of_host
from hairpin_proxy.targets.mapping import MapEntry
from hairpin_proxy.targets.model import Target
from hairpin_proxy.targets.plan import Plan, plan
from hairpin_proxy.targets.resolve import (
    CILIUM_CONFIGMAP,
    INGRESS_NGINX_CONFIGMAP,
    TargetFacts,
    Unresolved,
)
from hairpin_proxy.targets.slots import service_name

log = logging.getLogger("hairpin_proxy.controller")

TABLE_KEY = table.TABLE_KEY
PUBLISHED_KEY = table.PUBLISHED_KEY


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


def read_published(cm: JsonObj | None) -> dict[str, float]:
    return table.decode_published(((cm or {}).get("data") or {}).get(PUBLISHED_KEY))


def read_slots(cm: JsonObj | None) -> dict[str, int]:
    slots, error = slot_table(cm)
    if error:
        log.warning("the published targets table is unreadable; slots start afresh",
                    extra={"error": error})
    return slots


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


class Routing:
    def __init__(self, reflector: MakeReflector, namespace: str, *,
                 target_map: Mapping[str, MapEntry], services: Reflector,
                 ingress: IngressSource, gateway: GatewaySource | None,
                 cluster_domain: str, max_targets: int, settle: float, dns_ttl: int,
                 table_configmap: str, wake_in: Callable[[float], None],
                 target_server: str = "",
                 registered: Sequence[RegisteredSource] = ()) -> None:
        self.namespace = namespace
        self.target_map = target_map
        self.services = services
        self.ingress = ingress
        self.gateway = gateway
        # Registered sources: the facts they add for their own key kinds.
        self.registered = tuple(registered)
        self.cluster_domain = cluster_domain
        self.target_server = target_server
        self.max_targets = max_targets
        self.settle = settle
        self.dns_ttl = dns_ttl
        self.table_configmap = table_configmap
        self.wake_in = wake_in
        self.nginx_configmaps = reflector(resource_path("v1", "configmaps"),
                                          "ingress-nginx-configmaps", INGRESS_NGINX_CONFIGMAP)
        self.cilium_configmap = reflector(resource_path("v1", "configmaps", CILIUM_CONFIGMAP[0]),
                                          "cilium-config", CILIUM_CONFIGMAP[1])
        self.table_cm = reflector(resource_path("v1", "configmaps", namespace),
                                  "targets-configmap", table_configmap)
        self._told: dict[str, str] = {}
        self._told_pending: dict[str, Pending] = {}
        # The last pass's hosts waiting for a new slot, for /readyz.
        self.pending: dict[str, Pending] = {}
        self._facts = TargetFacts()
        self._resolved: dict[str, Target | Unresolved | None] = {}
        self._facts_at: tuple[object, ...] | None = None

    @property
    def reflectors(self) -> list[Reflector]:
        return [self.nginx_configmaps, self.cilium_configmap, self.table_cm]

    def _facts_generation(self) -> tuple[object, ...]:
        g = self.gateway
        return (self.services.generation, self.ingress.classes.generation,
                self.nginx_configmaps.generation, self.cilium_configmap.generation,
                *(g.watches.generation() if g else ()), g.unreadable() if g else None,
                *(r.generation() for r in self.registered))

    def facts(self) -> TargetFacts:
        configmaps = {f"{(cm.get('metadata') or {}).get('namespace')}/"
                      f"{(cm.get('metadata') or {}).get('name')}": cm
                      for r in (self.nginx_configmaps, self.cilium_configmap)
                      for cm in r.cache.values()}
        g = self.gateway
        services = list(self.services.cache.values())
        return TargetFacts(
            services=services,
            ingress_classes={str((c.get("metadata") or {}).get("name")): c
                             for c in self.ingress.classes.cache.values()},
            gateways=g.gateways() if g else {},
            gateway_classes=g.gateway_classes_by_name() if g else {},
            configmaps=configmaps,
            client_traffic_policies=g.client_traffic_policies() if g else (),
            nginx_proxies=g.nginx_proxies() if g else {},
            cluster_domain=self.cluster_domain,
            unreadable=frozenset().union(g.unreadable() if g else (),
                                         *(r.unreadable() for r in self.registered)),
            extra={k: v for r in self.registered for k, v in r.facts().items()},
            default_service=service_of_host(self.target_server, self.cluster_domain, services))

    def route(self, claims: Iterable[Claim], table_cm: JsonObj | None,
              held_answers: Callable[[], Mapping[str, corefile.Answers]]) -> Routed:
        """The plan for ``claims`` and what each non-default host answers with now.
        ``table_cm`` is the targets ConfigMap as the pass knows it; ``held_answers`` reads
        what the rules answer for each host now (only asked when a target is settling)."""
        facts_at = self._facts_generation()
        if facts_at != self._facts_at:
            # Finding a data plane scans every Service of the cluster: done again only when
            # what it reads has changed, not on every pass.
            self._facts, self._resolved, self._facts_at = self.facts(), {}, facts_at
        p = plan(claims, self._facts, self.target_map, read_slots(table_cm),
                 self.max_targets, resolved=self._resolved)
        self._tell(p)
        slot_addresses = {slot: service_addresses(
            self.services.get(f"{self.namespace}/{service_name(slot)}"))
            for slot in p.slots.values()}
        routed = route_answers(p, slot_addresses=slot_addresses,
                               published=read_published(table_cm), settle=self.settle,
                               now=time.time(), dns_ttl=self.dns_ttl, held_answers=held_answers)
        if routed.wake_in is not None:
            self.wake_in(routed.wake_in)
        self.pending = routed.pending
        self._tell_pending(routed.pending)
        return routed

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
