"""NodeLocal DNSCache mode: our server block in node-local-dns's Corefile (see
``corefile.nodelocal``), so that pods asking the node cache reach CoreDNS's rules for our names.
"""

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
from hairpin_proxy.kube.client import JsonObj
from hairpin_proxy.sinks.configmap import Mutate, rewrite_key
from hairpin_proxy.sinks.coredns import SinkError

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
