"""The data-plane guard (``--guard-data-planes``): one NetworkPolicy per data-plane Service that
expects PROXY, so that only the load balancer's traffic and our proxies reach its PROXY ports
(``targets.netguard`` decides what they say; docs/forged-proxy-header.md).

Our policies carry ``hairpin-proxy.io/guard`` and ``app.kubernetes.io/managed-by:
hairpin-proxy``; they are watched with that label selector only, so a policy we did not make is
never read, let alone changed. Those no data plane needs any more (it stopped expecting PROXY,
its target went, we are being uninstalled) are deleted. A refused or failed write is this
writer's own problem: it is logged and retried on the next pass, and never holds back the DNS
rules written before it.

Every policy names the guard component's ClusterRole as its owner (read by name: ``owner``),
so that the garbage collector removes them whenever that ClusterRole goes (any uninstall,
the guard turned off), even with the controller gone or its RBAC deleted first. Where the
ClusterRole cannot be read (the grant of an older release, RBAC given another way), the
policies are made without an owner and said so once: the controller's withdrawal and
``hairpin-proxy cleanup`` then remove them. Once seen and then gone, none is written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from hairpin_proxy.controller.events import Reports
from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.controller.tracker import WriteTracker
from hairpin_proxy.controller.writers import Desired
from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube.client import ApiError, KubeClient, resource_path
from hairpin_proxy.kube.watch import Backoff, Reflector
from hairpin_proxy.targets import netguard
from hairpin_proxy.targets.model import split_service
from hairpin_proxy.targets.routing_plan import Plan

log = logging.getLogger("hairpin_proxy.controller")

POLICIES = resource_path(netguard.NETWORKPOLICY_API, "networkpolicies")
SELECTOR = f"{netguard.GUARD_LABEL},app.kubernetes.io/managed-by=hairpin-proxy"
NAMED_PORTS_TTL = 60.0


def slim_node(obj: JsonObj) -> JsonObj:
    """What the guard reads of a Node: its name, pod CIDRs and the annotations that name its
    own addresses inside them."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    notes = meta.get("annotations") or {}
    wanted = (*netguard.NODE_ADDRESS_ANNOTATIONS, netguard.FLANNEL_ANNOTATION)
    return {"metadata": {**{k: meta[k] for k in ("name", "resourceVersion") if k in meta},
                         "annotations": {k: notes[k] for k in wanted if k in notes}},
            "spec": {k: spec[k] for k in ("podCIDR", "podCIDRs") if k in spec}}


class DataPlaneGuard:
    """Keeps our NetworkPolicies in step with the plan's data planes. ``nodes`` and
    ``policies`` are its own reflectors (Nodes; NetworkPolicies with our label)."""

    during_uninstall = True

    def __init__(self, client: KubeClient, tracker: WriteTracker, metrics: ControllerMetrics,
                 reports: Reports, *, namespace: str, services: Reflector,
                 proxy_service: Callable[[], JsonObj | None], nodes: Reflector,
                 policies: Reflector, owner: Reflector,
                 pod_cidrs: tuple[netguard.Network, ...],
                 wake_in: Callable[[float], None]) -> None:
        self.client = client
        self.tracker = tracker
        self.metrics = metrics
        self.reports = reports
        self.namespace = namespace
        self.services = services
        self.proxy_service = proxy_service
        self.nodes = nodes
        self.policies = policies
        self.owner = owner
        self.pod_cidrs = pod_cidrs
        self.wake_in = wake_in
        self.backoff = Backoff(base=1.0, cap=60.0)
        self._told: dict[str, str] = {}
        self._waiting_for = ""
        self._owner_seen = False
        self._owner_told = ""
        # (Service, its resourceVersion) → (when, target port name → numbers).
        self._named_cache: dict[tuple[str, str], tuple[float, dict[str, tuple[int, ...]]]] = {}

    @property
    def reflectors(self) -> list[Reflector]:
        return [self.nodes, self.policies, self.owner]

    def _waiting(self) -> bool:
        """Whether its own caches are still unlisted (told once per cause): nothing is
        written from a partial view of our policies."""
        # The owner's cache is waited for only until a refusal: then policies go unowned.
        waiting = [r for r in self.reflectors if not r.synced.is_set()
                   and not (r is self.owner and r.last_error)]
        why = "; ".join(f"{r.kind}: {r.last_error or 'not listed yet'}" for r in waiting)
        if why and why != self._waiting_for:
            log.warning("data-plane guard waits for its caches", extra={"waiting": why})
        self._waiting_for = why
        return bool(waiting)

    async def write(self, desired: Desired) -> None:
        if self._waiting():
            return  # their first list wakes a pass
        try:
            owner, gone = self._owner()
            if desired.plan is None or gone:
                # Uninstalling, or the guard's ClusterRole went: every policy of ours goes.
                await self._apply({})
                return
            wanted = await self.wanted(desired.plan, owner)
            if wanted is not None:
                await self._apply(wanted)
        except ApiError as exc:
            log.warning("data-plane guard not in step; retried on the next pass",
                        extra={"error": str(exc)})
            self.wake_in(self.backoff.next_delay())
        else:
            self.backoff.reset()

    def _owner(self) -> tuple[dict[str, Any] | None, bool]:
        """(the ownerReference our policies carry or None, whether the guard's ClusterRole,
        seen before, is gone); told once per change."""
        role = self.owner.get(f"/{netguard.OWNER_ROLE}")
        if role is not None:
            self._owner_seen = True
            self._tell_owner("", "")
            return netguard.owner_reference(role), False
        if self._owner_seen and self.owner.synced.is_set():
            self._tell_owner("gone", "the guard's ClusterRole is gone; its policies go too")
            return None, True
        why = self.owner.last_error or "it does not exist"
        self._tell_owner(why, "data-plane guard policies made without an owner: they go with "
                              "the controller's withdrawal or `hairpin-proxy cleanup`, not "
                              "with the guard's ClusterRole")
        return None, False

    def _tell_owner(self, key: str, message: str) -> None:
        if key and key != self._owner_told:
            log.warning(message, extra={"clusterrole": netguard.OWNER_ROLE,
                                        **({"reason": key} if key != "gone" else {})})
        self._owner_told = key

    async def wanted(self, p: Plan, owner: Mapping[str, Any] | None = None
                     ) -> dict[tuple[str, str], Mapping[str, Any] | None] | None:
        """Our policies as they should be, None for one left as it is (None as a whole: the
        proxy Service is not there, so our pods cannot be named; nothing is changed until it
        is back)."""
        proxy = self.proxy_service()
        if proxy is None:
            return None
        selector = (proxy.get("spec") or {}).get("selector") or {}
        peer = netguard.ProxyPeer(self.namespace, {str(k): str(v) for k, v in selector.items()})
        keys: dict[str, list[str]] = {}
        # The data planes with a slot, and the one the main proxy Service relays to (the
        # default install's ingress-nginx), which needs the guard just as much.
        for key, target in (*p.targets.items(), *p.shared.items()):
            if target.redirected:
                keys.setdefault(target.service, []).append(key)
        planes: list[netguard.Guarded] = []
        for ref, of in sorted(keys.items()):
            svc = self.services.get(ref)
            if svc is not None:
                planes.append(netguard.Guarded(svc, tuple(of), await self._named(svc)))
        cidrs = self.pod_cidrs or netguard.node_pod_cidrs(self.nodes.cache.values())
        plan = netguard.plan_guards(
            planes, cidrs, peer, netguard.node_addresses_in_pod_cidrs(self.nodes.cache.values()),
            owner=owner)
        wanted: dict[tuple[str, str], Mapping[str, Any] | None] = dict(plan.policies)
        for skip in plan.skipped:
            self._tell(skip)
            ns, name = split_service(skip.service)
            have = self.policies.get(f"{ns}/{netguard.policy_name(name)}")
            if skip.keep and have is not None and netguard.is_ours(have):
                wanted[(ns, netguard.policy_name(name))] = None
        for ref in list(self._told):
            if ref not in {s.service for s in plan.skipped}:
                del self._told[ref]
        return wanted

    async def _named(self, svc: JsonObj) -> dict[str, tuple[int, ...]]:
        """Target port name → the numbers the Service's EndpointSlices give it (asked only
        when a target port is a name)."""
        ports = (svc.get("spec") or {}).get("ports") or []
        if not any(isinstance(p.get("targetPort"), str) and not p["targetPort"].isdigit()
                   for p in ports if isinstance(p, dict)):
            return {}
        meta = svc.get("metadata") or {}
        key = (f"{meta.get('namespace')}/{meta.get('name')}", str(meta.get("resourceVersion")))
        now = time.monotonic()
        cached = self._named_cache.get(key)
        if cached is not None and now - cached[0] < NAMED_PORTS_TTL:
            # A pass runs on every change anywhere in the cluster: the slices are asked for
            # again when the Service changes, else at most once a minute.
            return cached[1]
        try:
            slices, _ = await self.client.list(
                resource_path("discovery.k8s.io/v1", "endpointslices", meta.get("namespace")),
                {"labelSelector": f"kubernetes.io/service-name={meta.get('name')}"})
        except ApiError as exc:
            log.warning("cannot read a data plane's EndpointSlices",
                        extra={"service": f"{meta.get('namespace')}/{meta.get('name')}",
                               "error": str(exc)})
            return {}
        out: dict[str, set[int]] = {}
        for sl in slices:
            for port in sl.get("ports") or ():
                if isinstance(port, dict) and port.get("name") and type(port.get("port")) is int:
                    out.setdefault(str(port["name"]), set()).add(port["port"])
        # An EndpointSlice port carries the Service port's name, which names the target port.
        by_service_name = {str(p.get("name") or ""): p.get("targetPort") for p in ports
                           if isinstance(p, dict)}
        named = {str(target): tuple(sorted(out.get(name, ())))
                 for name, target in by_service_name.items() if isinstance(target, str)}
        self._named_cache = {k: v for k, v in self._named_cache.items()
                             if k[0] != key[0] and now - v[0] < NAMED_PORTS_TTL}
        if all(named.values()):
            # A name not resolved yet is asked for again on the next pass.
            self._named_cache[key] = (now, named)
        return named

    def _tell(self, skip: netguard.Skipped) -> None:
        if self._told.get(skip.service) == skip.reason:
            return
        self._told[skip.service] = skip.reason
        log.warning("data plane not guarded", extra={"service": skip.service,
                                                      "reason": skip.reason})
        svc = self.services.get(skip.service)
        if svc is not None:
            self.reports.event({"apiVersion": "v1", "kind": "Service", **svc},
                               "DataPlaneNotGuarded",
                               f"hairpin-proxy cannot guard this data plane against forged "
                               f"PROXY headers: {skip.reason}", "Warning")

    async def _apply(self, wanted: Mapping[tuple[str, str], Mapping[str, Any] | None]) -> None:
        for (ns, name), want in sorted(wanted.items()):
            have = self.policies.get(f"{ns}/{name}")
            if want is None:
                continue
            base = resource_path(netguard.NETWORKPOLICY_API, "networkpolicies", ns)
            if have is not None and not netguard.is_ours(have):
                continue  # never the case with our selector; never touched if it were
            self.tracker.fence()
            try:
                if have is None:
                    await self.client.create(base, want)
                elif netguard.differs(have, want):
                    rv = (have.get("metadata") or {}).get("resourceVersion")
                    await self.client.replace(f"{base}/{name}", {
                        **want, "metadata": {**want["metadata"], "resourceVersion": rv}})
                else:
                    continue
            except ApiError as exc:
                if exc.status != 409:
                    raise
                continue  # the watch brings the other write; the next pass compares again
            self.metrics.writes.labels("guard-policy").inc()
            log.info("data-plane guard written", extra={"networkpolicy": f"{ns}/{name}"})
        for obj in list(self.policies.cache.values()):
            meta = obj.get("metadata") or {}
            ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
            if (ns, name) in wanted or not netguard.is_ours(obj):
                continue
            self.tracker.fence()
            path = f"{resource_path(netguard.NETWORKPOLICY_API, 'networkpolicies', ns)}/{name}"
            if await self.client.delete(path):
                self.metrics.writes.labels("guard-policy").inc()
                log.info("data-plane guard no longer needed deleted",
                         extra={"networkpolicy": f"{ns}/{name}"})
