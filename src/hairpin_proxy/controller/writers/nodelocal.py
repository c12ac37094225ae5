"""NodeLocal DNSCache mode: our server block in node-local-dns's Corefile (see
``corefile.nodelocal``), so that pods asking the node cache reach CoreDNS's rules for our names.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hairpin_proxy import corefile
from hairpin_proxy.controller.events import Reports
from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.controller.tracker import WriteTracker
from hairpin_proxy.controller.writers import Desired
from hairpin_proxy.edits.coredns import EditError
from hairpin_proxy.edits.nodelocal import (
    ADDON_MANAGER_SELECTOR,
    CANDIDATES,
    NodeLocalEdit,
    reconciler_of,
)
from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube.client import ApiError, KubeClient, resource_path
from hairpin_proxy.kube.watch import Reflector

if TYPE_CHECKING:
    from hairpin_proxy.controller.reverts import RevertWatch

log = logging.getLogger("hairpin_proxy.controller")

class Reconcilers:
    """What ``reconciler_of`` needs, read at most every ``interval`` seconds and only while a
    candidate ConfigMap is labelled Reconcile. Unreadable (no permission to list pods in
    kube-system) counts as no addon manager: reverts are then noticed by what they do."""

    def __init__(self, client: KubeClient, interval: float = 60.0) -> None:
        self.client = client
        self.interval = interval
        self.pods: list[JsonObj] = []
        self.version: JsonObj | None = None
        self._read_at = -1e9

    async def refresh(self) -> None:
        now = asyncio.get_running_loop().time()
        if now - self._read_at < self.interval:
            return
        self._read_at = now
        try:
            self.pods, _ = await self.client.list(
                resource_path("v1", "pods", "kube-system"),
                {"labelSelector": ADDON_MANAGER_SELECTOR})
        except ApiError as exc:
            log.debug("cannot look for the addon manager", extra={"error": str(exc)})
            self.pods = []
        if self.version is None:
            try:
                self.version = await self.client.request("GET", "/version")
            except ApiError as exc:
                log.debug("cannot read the API server's version", extra={"error": str(exc)})


class NodeLocalWriter:
    """The pass's step (--node-local-dns auto): our hosts in NodeLocal DNSCache's Corefile,
    where it runs and no reconciler is known to revert it. ``configmaps`` watch the
    CANDIDATES, in their order.

    Its problems are its own: CoreDNS's rules are written all the same, and ``notes`` tells
    them in the readiness answer.
    """

    during_uninstall = True

    def __init__(self, configmaps: Sequence[Reflector], cluster_domain: str,
                 tracker: WriteTracker, metrics: ControllerMetrics, reports: Reports, *,
                 reconcilers: Reconcilers | None = None,
                 reverts: RevertWatch | None = None) -> None:
        self.configmaps = configmaps
        self.cluster_domain = cluster_domain
        self.tracker = tracker
        self.metrics = metrics
        self.reports = reports
        self.reconcilers = reconcilers
        self.reverts = reverts
        # "namespace/name" → why that ConfigMap is not edited.
        self.notes: dict[str, str] = {}

    def edits(self, cm: JsonObj) -> bool:
        """Whether this ConfigMap gets our block (as far as the last look for a reconciler
        tells): what the rules budget must make room in."""
        rec = self.reconcilers
        return rec is None or not reconciler_of(cm, rec.pods, rec.version)

    async def write(self, desired: Desired) -> None:
        hosts = desired.hosts
        found = [(ns, name, self.tracker.current(reflector, ns, name))
                 for (ns, name), reflector in zip(CANDIDATES, self.configmaps, strict=True)]
        if self.reconcilers is not None and any(NodeLocalEdit.labelled_reconcile(cm)
                                                for _, _, cm in found):
            await self.reconcilers.refresh()
        blocked = False
        for ns, name, cm in found:
            where = f"{ns}/{name}"
            if cm is None:
                self.notes.pop(where, None)
                continue
            rec = self.reconcilers
            who = reconciler_of(cm, rec.pods, rec.version) if rec is not None else ""
            if who:
                blocked = True
                self._reconciled(cm, where, who)
                continue
            self.notes.pop(where, None)
            await self._edit(ns, name, cm, hosts)
        self.metrics.node_local_blocked.set(1 if blocked else 0)

    async def _edit(self, ns: str, name: str, cm: JsonObj, hosts: Sequence[str]) -> None:
        where = f"{ns}/{name}"
        edit = NodeLocalEdit(ns, name, cluster_domain=self.cluster_domain)
        change = edit.mutate(hosts)
        # Taking our block out never fights anyone: only a repair waits out a backoff.
        if hosts and self.reverts is not None and not self.reverts.allow(where, edit.key, cm):
            return
        try:
            # A lost Lease (NotLeading) is not caught here: it ends the pass.
            written = await self.tracker.write(ns, name, change, cm)
        except (corefile.CorefileError, EditError) as exc:
            self.notes[where] = f"node-local-dns {where} not edited: {exc}"
            log.error("cannot edit node-local-dns's Corefile; leaving it alone",
                      extra={"configmap": where, "error": str(exc)})
            return
        if self.reverts is not None:
            self.reverts.wrote(where, change, written)
        if written.changed:
            self.tracker.rules_written()
            self.metrics.writes.labels("node-local-dns").inc()
            log.info("node-local-dns rules updated", extra={"configmap": where,
                                                            "hosts": len(hosts)})

    def _reconciled(self, cm: JsonObj, where: str, who: str) -> None:
        note = (f"node-local-dns {where} is labelled addonmanager.kubernetes.io/mode: Reconcile "
                f"and {who} runs: it would revert every edit, so it is not edited and pods "
                "that resolve through it bypass our rules; see docs/platforms/node-local-dns.md")
        if self.notes.get(where) != note:
            log.warning(note)
            self.reports.event({"apiVersion": "v1", "kind": "ConfigMap", **cm},
                               "NodeLocalDNSReconciled", note, "Warning")
        self.notes[where] = note
