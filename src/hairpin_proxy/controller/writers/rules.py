"""The pass's first step: the DNS rules, in the Corefile itself (``--mode coredns``) or in the
key of the ConfigMap the Corefile imports (``--mode coredns-import``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from hairpin_proxy import corefile
from hairpin_proxy.controller.background import Background
from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.controller.reverts import RevertWatch
from hairpin_proxy.controller.tracker import WriteTracker, resource_version
from hairpin_proxy.controller.writers import Desired, Held
from hairpin_proxy.controller.writers.nudge import CorednsNudge
from hairpin_proxy.edits.coredns import CorednsEdit, EditError
from hairpin_proxy.edits.coredns_import import ImportEdit
from hairpin_proxy.edits.published import PublishedEdit
from hairpin_proxy.jsonobj import JsonObj, Mutate
from hairpin_proxy.kube.watch import Reflector
from hairpin_proxy.published import ENTRIES_KEY, HOSTS_KEY, parse_entries, parse_lines

log = logging.getLogger("hairpin_proxy.controller")


@dataclass(frozen=True)
class RulesWriting:
    """What both modes write with."""

    tracker: WriteTracker
    metrics: ControllerMetrics
    background: Background
    nudge: CorednsNudge
    # --nudge-coredns: nudge after every write (without it, only the withdrawal on uninstall).
    nudge_always: bool
    uninstalling: Callable[[], bool]
    # Reverts of our writes noticed, named and backed off (None: written whatever happens).
    reverts: RevertWatch | None = None


class _Rules:
    """What both modes do once the edit is known: the fenced write, its log line and metric,
    and the nudge that makes CoreDNS see it sooner."""

    during_uninstall = True

    def __init__(self, what: str, writing: RulesWriting) -> None:
        self.what = what  # the writes_total label
        self.w = writing

    async def _write(self, where: str, namespace: str, name: str, mutate: Mutate,
                     desired: Desired, *, key: str) -> None:
        w = self.w
        hosts = desired.hosts
        reverts = w.reverts
        # Withdrawing our rules never fights anyone: only a repair waits out a backoff.
        if (reverts is not None and desired.groups() and not w.uninstalling()
                and not reverts.allow(f"{namespace}/{name}", key, desired.held.cm)):
            return
        written = await w.tracker.write(namespace, name, mutate, desired.held.cm)
        if reverts is not None:
            reverts.wrote(f"{namespace}/{name}", mutate, written)
        if written.changed:
            w.tracker.rules_written()
            w.metrics.writes.labels(self.what).inc()
            added, removed = desired.counts()
            log.info("rules updated", extra={"target": where,
                                              "action": written.outcome,
                                              "hosts": len(hosts),
                                              "added": added,
                                              "removed": removed})
            if (w.nudge_always or w.uninstalling()) and written.obj is not None:
                # On uninstall it is tried anyway: without the permission it is refused,
                # and the kubelet's own sync brings the withdrawal a minute or so later.
                w.background.spawn(w.nudge(resource_version(written.obj),
                                           quiet=not w.nudge_always))


class CorefileRules(_Rules):
    """Our managed block in the Corefile: the hosts it holds are read back from the text."""

    def __init__(self, edit: CorednsEdit, writing: RulesWriting) -> None:
        super().__init__("corefile", writing)
        self.edit = edit

    @property
    def where(self) -> str:
        return self.edit.where

    def held_answers(self, corefile_cm: JsonObj | None) -> Mapping[str, corefile.Answers]:
        try:
            return self.edit.held_answers(corefile_cm)
        except (EditError, corefile.CorefileError):
            return {}

    async def read(self, corefile_cm: JsonObj | None) -> Held:
        # Parsing and editing a large Corefile takes a while: off the event loop, so Lease
        # renewals and watches are never held up by it.
        previous = self.edit.remembered_hosts(corefile_cm)
        if previous is None:
            previous = await asyncio.to_thread(self.edit.current_hosts, corefile_cm)
        return Held(corefile_cm, previous)

    async def write(self, desired: Desired) -> None:
        cm = desired.held.cm
        # Off the event loop too; the write below then finds the edit remembered.
        groups = desired.groups()
        await asyncio.to_thread(self.edit.edit, self.edit.text(cm), groups, desired.hosts)
        await self._write(self.edit.where, self.edit.namespace, self.edit.name,
                          self.edit.mutate(groups), desired, key=self.edit.key)


class ImportRules(_Rules):
    """Our key in the imported ConfigMap. When the hosts are published (--publish-configmap),
    the hosts it holds are the published ones (written right after it by every pass), and
    the snippet is not read back; else it is, as the Corefile's block is."""

    def __init__(self, edit: ImportEdit, writing: RulesWriting, *, import_cm: Reflector,
                 published: PublishedEdit | None = None,
                 published_cm: Reflector | None = None) -> None:
        super().__init__("import", writing)
        self.edit = edit
        self.import_cm = import_cm
        self.published = published
        self.published_cm = published_cm

    @property
    def where(self) -> str:
        return self.edit.where

    def _published(self) -> dict[str, object] | None:
        """The published ConfigMap's data; None when nothing is published."""
        if self.published is None or self.published_cm is None:
            return None
        pub = self.w.tracker.current(self.published_cm, self.published.namespace,
                                     self.published.name)
        data = (pub or {}).get("data")
        return data if isinstance(data, dict) else {}

    def held_answers(self, corefile_cm: JsonObj | None) -> Mapping[str, corefile.Answers]:
        data = self._published()
        if data is None:
            cm = self.w.tracker.current(self.import_cm, self.edit.namespace, self.edit.name)
            try:
                return self.edit.held_answers(cm)
            except corefile.CorefileError:
                return {}
        # The snippet is not read back: the published entries say the same (written right
        # after it by every pass).
        out: dict[str, corefile.Answers] = {}
        for host, addresses in parse_entries(data.get(ENTRIES_KEY)).items():
            try:
                out[host] = corefile.Answers.of(addresses)
            except corefile.CorefileError:
                continue
        return out

    async def read(self, corefile_cm: JsonObj | None) -> Held:
        cm = self.w.tracker.current(self.import_cm, self.edit.namespace, self.edit.name)
        data = self._published()
        if data is None:
            return Held(cm, await self._snippet_hosts(cm))
        if ENTRIES_KEY in data:
            return Held(cm, tuple(parse_entries(data[ENTRIES_KEY])))
        return Held(cm, parse_lines(data.get(HOSTS_KEY)))

    async def _snippet_hosts(self, cm: JsonObj | None) -> tuple[str, ...]:
        """The hosts our key holds, read back from it (parsed off the event loop, as the
        Corefile is, unless it is our last write)."""
        known = self.edit.remembered_hosts(cm)
        if known is not None:
            return known
        try:
            return await asyncio.to_thread(self.edit.current_hosts, cm)
        except corefile.CorefileError:
            return ()

    async def write(self, desired: Desired) -> None:
        # Uninstalling, our key goes altogether, as cleanup removes it: a ConfigMap we made
        # is then empty, and the replica that lets go deletes it (Uninstall.finish). A
        # ConfigMap already gone is never made again to hold nothing.
        mutate = (self.edit.removal() if self.w.uninstalling()
                  else self.edit.mutate(desired.groups()))
        await self._write(self.edit.where, self.edit.namespace, self.edit.name, mutate,
                          desired, key=self.edit.key)
