"""The published host list: a ConfigMap in our namespace that the etchosts node agents watch.

Keys (their format is ``hairpin_proxy.published``'s, shared with the agent): ``entries`` (every
host with the addresses of its own target's proxy Service), and for agents of earlier versions
``hosts`` (the default target's hosts only, so that none is pinned to the wrong Service) and
``addresses`` (the main proxy Service's ClusterIPs). Other keys are left alone.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, Sequence

from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.controller.tracker import WriteTracker
from hairpin_proxy.controller.writers import Desired
from hairpin_proxy.corefile import Answers
from hairpin_proxy.edits.published import PublishedEdit
from hairpin_proxy.kube.watch import Reflector
from hairpin_proxy.plan.change import Since
from hairpin_proxy.published import (
    EntriesText,
    Moved,
)
from hairpin_proxy.targets.discovery import service_addresses

log = logging.getLogger("hairpin_proxy.controller")


def addresses_of(answers: Answers) -> tuple[str, ...]:
    """What a host of ``answers`` is published with (Desired.entries' tuple)."""
    return (*answers.ipv4, *answers.ipv6)


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
        # The last pass's ``entries`` value, which the next changes where its hosts did.
        self.entries = EntriesText()

    async def write(self, desired: Desired) -> None:
        hosts = desired.hosts
        svc = self.service.get(self.service_key)
        pub = self.tracker.current(self.configmap, self.edit.namespace, self.edit.name)
        routed = desired.routed
        default = list(itertools.filterfalse(routed.__contains__, hosts)) if routed else hosts
        mutate = self.edit.mutate(default, service_addresses(svc),
                                  self.entries_text(hosts, desired.answers, routed,
                                                    desired.since))
        written = await self.tracker.write(self.edit.namespace, self.edit.name, mutate, pub)
        if written.changed:
            self.metrics.writes.labels("published").inc()
            log.info("published hosts updated", extra={"configmap": self.edit.where,
                                                       "hosts": len(hosts)})

    def entries_text(self, hosts: Sequence[str], answers: Answers,
                     routed: Mapping[str, Answers], since: Since | None = None) -> str:
        """``entries_text(Desired.entries())``, from the value of the last pass; ``since``:
        how ``hosts`` (the plan's) differ from the last plan's, which tells the hosts that
        came and went when the last value was made for those."""
        return self.entries.text(hosts, addresses_of(answers), routed_addresses(routed),
                                 moved_since(since, self.entries, hosts))


def moved_since(since: Since | None, entries: EntriesText, hosts: Sequence[str]
                ) -> Moved | None:
    """The hosts that came and went since the last value of ``entries``, where the plan's
    change tells them: it starts at the hosts that value was made for (``hosts``: the
    plan's, sorted)."""
    if since is None or not since.starts_at(entries.hosts):
        return None
    return since.split(hosts)


def routed_addresses(routed: Mapping[str, Answers]) -> dict[str, tuple[str, ...]]:
    """Each routed host's addresses, one tuple per answer set (a slot's thousand hosts share
    one object)."""
    tuples: dict[int, tuple[str, ...]] = {}
    out: dict[str, tuple[str, ...]] = {}
    for host, its in routed.items():
        got = tuples.get(id(its))
        if got is None:
            got = tuples[id(its)] = addresses_of(its)
        out[host] = got
    return out
