"""The published host list: a ConfigMap in our namespace that the etchosts node agents watch.

Keys (their format is ``hairpin_proxy.published``'s, shared with the agent): ``entries`` (every
host with the addresses of its own target's proxy Service), and for agents of earlier versions
``hosts`` (the default target's hosts only, so that none is pinned to the wrong Service) and
``addresses`` (the main proxy Service's ClusterIPs). Other keys are left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.controller.tracker import WriteTracker
from hairpin_proxy.controller.writers import Desired
from hairpin_proxy.controller.writers.configmap import Mutate, set_keys
from hairpin_proxy.kube.watch import Reflector
from hairpin_proxy.published import ADDRESSES_KEY, ENTRIES_KEY, HOSTS_KEY, entries_text
from hairpin_proxy.targets.discovery import service_addresses

log = logging.getLogger("hairpin_proxy.controller")


def lines(items: Sequence[str]) -> str:
    return "".join(f"{item}\n" for item in items)


@dataclass(frozen=True)
class PublishedEdit:
    namespace: str
    name: str

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.name}"

    def mutate(self, hosts: Sequence[str], addresses: Sequence[str],
               entries: Mapping[str, Sequence[str]]) -> Mutate:
        """``hosts``: the default target's; ``entries``: every host with its addresses."""
        return set_keys({HOSTS_KEY: lines(sorted(hosts)), ADDRESSES_KEY: lines(addresses),
                         ENTRIES_KEY: entries_text(entries)})


class PublishedWriter:
    """The pass's last step: the hosts and the proxy Service's addresses (``service`` watches
    it) in the published ConfigMap (``configmap`` watches it)."""

    # Our namespace, and the published hosts with it, is going away on uninstall.
    during_uninstall = False

    def __init__(self, edit: PublishedEdit, tracker: WriteTracker, metrics: ControllerMetrics,
                 *, configmap: Reflector, service: Reflector, service_key: str) -> None:
        self.edit = edit
        self.configmap = configmap
        self.service = service
        self.service_key = service_key  # "namespace/name" of the proxy Service
        self.tracker = tracker
        self.metrics = metrics

    async def write(self, desired: Desired) -> None:
        hosts = desired.hosts
        svc = self.service.get(self.service_key)
        pub = self.tracker.current(self.configmap, self.edit.namespace, self.edit.name)
        default = [h for h in hosts if h not in desired.routed]
        mutate = self.edit.mutate(default, service_addresses(svc), desired.entries())
        written = await self.tracker.write(self.edit.namespace, self.edit.name, mutate, pub)
        if written.changed:
            self.metrics.writes.labels("published").inc()
            log.info("published hosts updated", extra={"configmap": self.edit.where,
                                                       "hosts": len(hosts)})
