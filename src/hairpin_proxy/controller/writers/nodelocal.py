"""NodeLocal DNSCache mode: our server block in node-local-dns's Corefile (see
``corefile.nodelocal``), so that pods asking the node cache reach CoreDNS's rules for our names.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hairpin_proxy import corefile
from hairpin_proxy.controller.events import Reports
from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.controller.tracker import WriteTracker
from hairpin_proxy.controller.writers import Desired
from hairpin_proxy.controller.writers.configmap import Mutate, rewrite_key
from hairpin_proxy.controller.writers.coredns import EditError
from hairpin_proxy.corefile.nodelocal import (
    DEFAULT_CLUSTER_DOMAIN,
    NODELOCAL_CONFIGMAPS,
    apply_nodelocal,
    nodelocal_hosts,
    remove_nodelocal,
)
from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube.client import ApiError, KubeClient, resource_path
from hairpin_proxy.kube.watch import Reflector

if TYPE_CHECKING:
    # Only a type here: doctor reads this module without the controller's machinery.
    from hairpin_proxy.controller.reverts import RevertWatch

log = logging.getLogger("hairpin_proxy.controller")

# Where NodeLocal DNSCache keeps its Corefile: upstream's ConfigMap, then kubespray's.
CANDIDATES: tuple[tuple[str, str], ...] = NODELOCAL_CONFIGMAPS

ADDON_MANAGER_MODE = "addonmanager.kubernetes.io/mode"


@dataclass(frozen=True)
class NodeLocalEdit:
    namespace: str
    name: str
    key: str = "Corefile"
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.name}[{self.key}]"

    def text(self, cm: JsonObj | None) -> str:
        if cm is None:
            raise EditError(f"NodeLocal DNSCache ConfigMap {self.namespace}/{self.name} not "
                            "found")
        text = (cm.get("data") or {}).get(self.key)
        if not isinstance(text, str):
            raise EditError(f"NodeLocal DNSCache ConfigMap {self.namespace}/{self.name} has no "
                            f"key {self.key!r}")
        return text

    def current_hosts(self, cm: JsonObj | None) -> tuple[str, ...]:
        """The zones our server block forwards now (``*.domain`` shows as ``domain``)."""
        return nodelocal_hosts(self.text(cm))

    def mutate(self, hosts: Sequence[str]) -> Mutate:
        wanted = tuple(hosts)
        return self._rewrite(
            lambda text: apply_nodelocal(text, wanted, cluster_domain=self.cluster_domain))

    def removal(self) -> Mutate:
        """The uninstall change: our block out, the rest byte for byte as it was."""
        return self._rewrite(
            lambda text: remove_nodelocal(text, cluster_domain=self.cluster_domain))

    def _rewrite(self, edit: Callable[[str], str]) -> Mutate:
        return rewrite_key(self.key, self.text, edit)

    @staticmethod
    def labelled_reconcile(cm: JsonObj | None) -> bool:
        """Whether the ConfigMap asks the addon manager to reconcile it (mode Reconcile, as
        upstream and GKE ship it). Only a running addon manager makes that label mean
        anything: on kubeadm, RKE or kubespray clusters nothing reads it. EnsureExists (as
        kubespray labels it) never keeps an edit from staying."""
        if cm is None:
            return False
        labels = (cm.get("metadata") or {}).get("labels") or {}
        return isinstance(labels, dict) and labels.get(ADDON_MANAGER_MODE) == "Reconcile"


# kube-up clusters (and GKE's hidden control plane) run the addon manager as a static pod
# from cluster/gce/manifests/kube-addon-manager.yaml: kube-system, label
# component=kube-addon-manager (its mirror pod is named kube-addon-manager-<node>).
ADDON_MANAGER_SELECTOR = "component=kube-addon-manager"


def reconciler_of(cm: JsonObj | None, addon_manager_pods: Sequence[JsonObj],
                  version: JsonObj | None) -> str:
    """Who reverts every edit of ``cm``, or "" when nobody is known to. Pure.

    The addon manager reconciles only objects labelled mode Reconcile, and only where it
    runs: an addon-manager pod in kube-system that has not ended, or GKE, whose addon manager
    runs on the control plane no pod list shows (``/version`` says ``-gke.``)."""
    if not NodeLocalEdit.labelled_reconcile(cm):
        return ""
    for pod in addon_manager_pods:
        phase = (pod.get("status") or {}).get("phase")
        if phase not in ("Succeeded", "Failed"):
            name = (pod.get("metadata") or {}).get("name")
            return f"the addon manager (pod kube-system/{name})"
    if "-gke." in str((version or {}).get("gitVersion") or ""):
        return "GKE's addon manager (a managed node-local-dns)"
    return ""


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
