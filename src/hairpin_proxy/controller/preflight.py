"""Start-up checks: configurations that keep our rules from working, each worth a warning (a
log line and the warnings metric) once per start. Missing permissions skip them."""

from __future__ import annotations

import logging
from typing import Any

from hairpin_proxy import corefile
from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.edits.coredns import CorednsEdit, EditError
from hairpin_proxy.edits.nodelocal import CANDIDATES as NODE_LOCAL_CANDIDATES
from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube.client import ApiError, KubeClient, resource_path
from hairpin_proxy.kube.watch import Reflector
from hairpin_proxy.settings import ControllerSettings

log = logging.getLogger("hairpin_proxy.controller")


class Preflight:
    """``coredns`` watches the CoreDNS ConfigMap, ``services`` every Service: the checks wait
    for their first lists."""

    def __init__(self, settings: ControllerSettings, client: KubeClient, coredns: Reflector,
                 corefile_edit: CorednsEdit, metrics: ControllerMetrics, *,
                 services: Reflector) -> None:
        self.settings = settings
        self.services = services
        self.client = client
        self.coredns = coredns
        self.corefile_edit = corefile_edit
        self.metrics = metrics

    def _warn(self, kind: str, message: str, **fields: Any) -> None:
        self.metrics.warnings.labels(kind).set(1)
        log.warning(message, extra={"warning": kind, **fields})

    async def run(self) -> None:
        try:
            await self._checks()
        except Exception as exc:
            log.debug("start-up checks failed", extra={"error": repr(exc)})

    async def _checks(self) -> None:
        await self.coredns.synced.wait()
        s = self.settings
        cm = self.coredns.get(f"{s.configmap_namespace}/{s.configmap_name}")
        try:
            text = self.corefile_edit.text(cm)
            if not corefile.has_plugin(text, "reload", dns_port=s.dns_port):
                self._warn("no-reload", "the Corefile has no reload plugin: CoreDNS will not "
                           "pick up rule changes until it restarts",
                           configmap=self.corefile_edit.where)
            if s.mode == "coredns-import" and not corefile.imports_key(text, s.import_key,
                                                                       dns_port=s.dns_port):
                self._warn("import-not-imported", "the Corefile does not import our key; the "
                           "rules written there have no effect",
                           configmap=self.corefile_edit.where, key=s.import_key)
        except (EditError, corefile.CorefileError) as exc:
            log.debug("Corefile checks skipped", extra={"error": str(exc)})
        await self._check_node_local_dns()
        await self._check_proxy_ip_mode()

    async def _optional_get(self, path: str) -> JsonObj | None:
        try:
            return await self.client.get(path)
        except ApiError as exc:
            log.debug("optional check skipped", extra={"path": path, "error": str(exc)})
            return None

    async def _check_node_local_dns(self) -> None:
        if self.settings.node_local_dns != "off":
            return  # kept in step by every pass
        for ns, name in NODE_LOCAL_CANDIDATES:
            if await self._optional_get(resource_path("v1", "configmaps", ns, name)):
                self._warn("node-local-dns", "node-local-dns is present and --node-local-dns "
                           "is off: pods that resolve through it bypass our rules",
                           configmap=f"{ns}/{name}")

    async def _check_proxy_ip_mode(self) -> None:
        # The Services are watched anyway (data planes are found among them).
        await self.services.synced.wait()
        for svc in list(self.services.cache.values()):
            if (svc.get("spec") or {}).get("type") != "LoadBalancer":
                continue
            lb = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
            if any(isinstance(i, dict) and i.get("ipMode") == "Proxy" for i in lb):
                meta = svc.get("metadata") or {}
                self._warn("ip-mode-proxy", "a LoadBalancer Service reports ipMode Proxy: "
                           "in-cluster traffic to it goes through the load balancer, so the "
                           "hairpin problem does not occur for it",
                           service=f"{meta.get('namespace')}/{meta.get('name')}")
