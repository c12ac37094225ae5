"""The targets the proxies serve: the table in the ConfigMap they mount (which pod ports relay
where, with which PROXY version), and one ClusterIP Service per slot whose ports 80/443 lead to
the slot's pod ports. Written before the DNS rules, which answer with those Services.

Our Services carry the label ``hairpin-proxy.io/slot`` and are owned by the table ConfigMap
(a garbage collector removes them with it); those no slot needs any more are deleted.
"""

from __future__ import annotations

import logging
import time

from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.controller.tracker import WriteTracker
from hairpin_proxy.controller.writers import Desired
from hairpin_proxy.edits.configmap import MANAGED_BY, set_keys
from hairpin_proxy.edits.slot_table import SLOT_LABEL, TARGET_ANNOTATION, slot_service, table_data
from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube.client import ApiError, KubeClient, resource_path
from hairpin_proxy.kube.watch import Reflector
from hairpin_proxy.targets import table
from hairpin_proxy.targets.routing_plan import Plan
from hairpin_proxy.targets.slots import service_name
from hairpin_proxy.targets.table import PUBLISHED_KEY

log = logging.getLogger("hairpin_proxy.controller")

def _differs(have: JsonObj, want: JsonObj) -> bool:
    hm, wm = have.get("metadata") or {}, want["metadata"]
    hs, ws = have.get("spec") or {}, want["spec"]
    ports = [{k: p.get(k) for k in ("name", "port", "targetPort", "protocol")}
             for p in hs.get("ports") or ()]
    return ((hm.get("labels") or {}) != wm["labels"]
            or (hm.get("annotations") or {}).get(TARGET_ANNOTATION)
            != wm["annotations"][TARGET_ANNOTATION]
            or hs.get("selector") != ws["selector"] or ports != ws["ports"]
            or hs.get("type") != "ClusterIP")


class TargetsWriter:
    """Writes the table and the per-slot Services; fenced like every other write. First of a
    pass's writers; while uninstalling there is no plan and it writes nothing (the namespace,
    and all of this with it, is going away)."""

    during_uninstall = True

    def __init__(self, client: KubeClient, tracker: WriteTracker, metrics: ControllerMetrics,
                 *, namespace: str, configmap: str, table_cm: Reflector, services: Reflector,
                 proxy_service: Reflector, proxy_service_name: str) -> None:
        self.client = client
        self.tracker = tracker
        self.metrics = metrics
        self.namespace = namespace
        self.configmap = configmap
        self.table_cm = table_cm
        self.services = services
        self.proxy_service = proxy_service
        self.proxy_service_name = proxy_service_name

    def current(self) -> JsonObj | None:
        return self.tracker.current(self.table_cm, self.namespace, self.configmap)

    async def write(self, desired: Desired) -> None:
        if desired.plan is not None:
            await self.write_plan(desired.plan)

    async def write_plan(self, p: Plan) -> JsonObj | None:
        """Bring the table and our Services in step with ``p``; the table ConfigMap as
        written (or found right)."""
        cm = self.current()
        data = table_data(
            p, table.decode_published(((cm or {}).get("data") or {}).get(PUBLISHED_KEY)),
            time.time())
        written = await self.tracker.write(self.namespace, self.configmap, set_keys(data),
                                           cm)
        if written.changed:
            self.metrics.writes.labels("targets").inc()
            log.info("targets table updated", extra={"configmap": f"{self.namespace}/"
                                                                  f"{self.configmap}",
                                                     "targets": len(p.targets)})
        table_obj = written.obj if written.obj is not None else cm
        proxy = self.proxy_service.get(f"{self.namespace}/{self.proxy_service_name}")
        if table_obj is None or proxy is None:
            # Without the main Service there is no selector to copy (and the rules are
            # withdrawn anyway); the next pass creates them.
            return table_obj
        await self._services(p, proxy, table_obj)
        return table_obj

    async def _services(self, p: Plan, proxy: JsonObj, owner: JsonObj) -> None:
        base = resource_path("v1", "services", self.namespace)
        wanted = {service_name(slot): slot_service(self.namespace, slot, key, proxy, owner)
                  for key, slot in p.slots.items() if key in p.targets}
        for name, want in sorted(wanted.items()):
            have = self.services.get(f"{self.namespace}/{name}")
            self.tracker.fence()
            try:
                if have is None:
                    await self.client.create(base, want)
                elif _differs(have, want):
                    body = {**want, "metadata": {**want["metadata"],
                                                 "resourceVersion": (have.get("metadata") or {})
                                                 .get("resourceVersion")},
                            "spec": {**want["spec"],
                                     **{k: (have.get("spec") or {})[k]
                                        for k in ("clusterIP", "clusterIPs")
                                        if k in (have.get("spec") or {})}}}
                    await self.client.replace(f"{base}/{name}", body)
                else:
                    continue
            except ApiError as exc:
                if exc.status != 409:
                    raise
                # Someone else's write came first: the watch brings it, the next pass
                # compares again.
                continue
            self.metrics.writes.labels("target-service").inc()
            log.info("proxy Service for a target written",
                     extra={"service": f"{self.namespace}/{name}",
                            "target": want["metadata"]["annotations"][TARGET_ANNOTATION]})
        for key, svc in list(self.services.cache.items()):
            meta = svc.get("metadata") or {}
            labels = meta.get("labels") or {}
            if (meta.get("namespace") != self.namespace or SLOT_LABEL not in labels
                    or any(labels.get(k) != v for k, v in MANAGED_BY.items())
                    or meta.get("name") in wanted):
                continue
            self.tracker.fence()
            if await self.client.delete(f"{base}/{meta.get('name')}"):
                self.metrics.writes.labels("target-service").inc()
                log.info("proxy Service of a target no longer needed deleted",
                         extra={"service": key})
