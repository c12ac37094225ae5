"""NodeLocal DNSCache mode: our server block in node-local-dns's Corefile (see
``corefile.nodelocal``), so that pods asking the node cache reach CoreDNS's rules for our names.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hairpin_proxy import corefile
from hairpin_proxy.controller.events import Reports
from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.controller.sinks import Desired
from hairpin_proxy.controller.sinks.configmap import Mutate, rewrite_key
from hairpin_proxy.controller.sinks.coredns import SinkError
from hairpin_proxy.controller.tracker import WriteTracker
from hairpin_proxy.corefile.nodelocal import (
    DEFAULT_CLUSTER_DOMAIN,
    NODELOCAL_CONFIGMAPS,
    apply_nodelocal,
    nodelocal_hosts,
    remove_nodelocal,
)
from hairpin_proxy.kube.client import JsonObj
from hairpin_proxy.kube.watch import Reflector

log = logging.getLogger("hairpin_proxy.controller")

# Where NodeLocal DNSCache keeps its Corefile: upstream's ConfigMap, then kubespray's.
CANDIDATES: tuple[tuple[str, str], ...] = NODELOCAL_CONFIGMAPS

ADDON_MANAGER_MODE = "addonmanager.kubernetes.io/mode"


@dataclass(frozen=True)
class NodeLocalSink:
    namespace: str
    name: str
    key: str = "Corefile"
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.name}[{self.key}]"

    def text(self, cm: JsonObj | None) -> str:
        if cm is None:
            raise SinkError(f"NodeLocal DNSCache ConfigMap {self.namespace}/{self.name} not "
                            "found")
        text = (cm.get("data") or {}).get(self.key)
        if not isinstance(text, str):
            raise SinkError(f"NodeLocal DNSCache ConfigMap {self.namespace}/{self.name} has no "
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
    def reconciled_by_addon_manager(cm: JsonObj | None) -> bool:
        """Whether the addon manager reverts edits of this ConfigMap (mode Reconcile, as
        upstream and GKE label it; kubespray's EnsureExists keeps them)."""
        if cm is None:
            return False
        labels = (cm.get("metadata") or {}).get("labels") or {}
        return isinstance(labels, dict) and labels.get(ADDON_MANAGER_MODE) == "Reconcile"


class NodeLocalWriter:
    """The pass's step (--node-local-dns auto): our hosts in NodeLocal DNSCache's Corefile,
    where it runs and is ours to edit. ``configmaps`` watch the CANDIDATES, in their order.

    Its problems are its own: CoreDNS's rules are written all the same, and ``notes`` tells
    them in the readiness answer.
    """

    during_uninstall = True

    def __init__(self, configmaps: Sequence[Reflector], cluster_domain: str,
                 tracker: WriteTracker, metrics: ControllerMetrics, reports: Reports) -> None:
        self.configmaps = configmaps
        self.cluster_domain = cluster_domain
        self.tracker = tracker
        self.metrics = metrics
        self.reports = reports
        # "namespace/name" → why that ConfigMap is not edited.
        self.notes: dict[str, str] = {}

    async def write(self, desired: Desired) -> None:
        hosts = desired.hosts
        for (ns, name), reflector in zip(CANDIDATES, self.configmaps, strict=True):
            cm = self.tracker.current(reflector, ns, name)
            where = f"{ns}/{name}"
            if cm is None:
                self.notes.pop(where, None)
                continue
            if NodeLocalSink.reconciled_by_addon_manager(cm):
                self._reconciled(cm, where)
                continue
            self.notes.pop(where, None)
            sink = NodeLocalSink(ns, name, cluster_domain=self.cluster_domain)
            try:
                # A lost Lease (NotLeading) is not caught here: it ends the pass.
                written = await self.tracker.write(ns, name, sink.mutate(hosts), cm)
            except (corefile.CorefileError, SinkError) as exc:
                self.notes[where] = f"node-local-dns {where} not edited: {exc}"
                log.error("cannot edit node-local-dns's Corefile; leaving it alone",
                          extra={"configmap": where, "error": str(exc)})
                continue
            if written.changed:
                self.tracker.rules_written()
                self.metrics.writes.labels("node-local-dns").inc()
                log.info("node-local-dns rules updated", extra={"configmap": where,
                                                                "hosts": len(hosts)})
        self.metrics.node_local_blocked.set(1 if any(
            "addon manager" in n for n in self.notes.values()) else 0)

    def _reconciled(self, cm: JsonObj, where: str) -> None:
        note = (f"node-local-dns {where} is reconciled by the addon manager "
                "(addonmanager.kubernetes.io/mode: Reconcile): not edited, so pods that resolve "
                "through it bypass our rules; see docs/platforms/node-local-dns.md")
        if self.notes.get(where) != note:
            log.warning(note)
            self.reports.event({"apiVersion": "v1", "kind": "ConfigMap", **cm},
                               "NodeLocalDNSReconciled", note, "Warning")
        self.notes[where] = note
