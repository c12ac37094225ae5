"""NodeLocal DNSCache mode's edit: our server block in node-local-dns's Corefile (see
``corefile.nodelocal``), and who would revert it. Pure; the controller's NodeLocalWriter applies
it, ``doctor`` and ``cleanup`` read it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hairpin_proxy.corefile.nodelocal import (
    DEFAULT_CLUSTER_DOMAIN,
    NODELOCAL_CONFIGMAPS,
    apply_nodelocal,
    nodelocal_hosts,
    remove_nodelocal,
)
from hairpin_proxy.edits.configmap import rewrite_key
from hairpin_proxy.edits.coredns import EditError
from hairpin_proxy.jsonobj import JsonObj, Mutate

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
