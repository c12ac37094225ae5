"""Reverts of our changes to other people's ConfigMaps (CoreDNS's, the imported one,
node-local-dns's): noticed, named, told, and repaired with backoff (edits.revert_policy
decides; this is its thin shell: the clock, the log, Events, metrics, the wake-up)."""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass

from hairpin_proxy.controller.events import Reports
from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.controller.tracker import resource_version
from hairpin_proxy.corefile import CorefileError
from hairpin_proxy.edits.coredns import EditError
from hairpin_proxy.edits.revert_policy import (
    History,
    RevertPolicy,
    advice,
    decide,
    record_repair,
    record_revert,
    reverter,
    settle,
)
from hairpin_proxy.jsonobj import JsonObj, Mutate
from hairpin_proxy.kube.configmap import WriteResult

log = logging.getLogger("hairpin_proxy.controller")


@dataclass(frozen=True)
class _Ours:
    version: str  # resourceVersion of the object when our change was last found in it
    change: Mutate  # that change: re-applied to a later version, it tells whether it holds


class RevertWatch:
    """``allow`` before each write of ``namespace/name``, ``wrote`` after it. ``wake_in`` asks
    for a pass when a backoff or a suspension ends."""

    def __init__(self, policy: RevertPolicy, metrics: ControllerMetrics, reports: Reports,
                 wake_in: Callable[[float], None]) -> None:
        self.policy = policy
        self.metrics = metrics
        self.reports = reports
        self.wake_in = wake_in
        self._ours: dict[str, _Ours] = {}
        self._history: dict[str, History] = {}
        # "namespace/name" → what /readyz says about it while repairs wait or are suspended.
        self.notes: dict[str, str] = {}

    def allow(self, where: str, key: str, cm: JsonObj | None) -> bool:
        """Whether our change may be written to ``where`` now (``cm`` as the pass read it)."""
        now = asyncio.get_running_loop().time()
        self._notice(where, key, cm, now)
        before = self._history.get(where, History())
        history = settle(self.policy, before, now)
        self._history[where] = history
        if before.suspended and not history.suspended:
            self._resumed(where, cm)
        decision = decide(self.policy, history, now)
        if decision.action == "write":
            return True
        self.wake_in(decision.at - now)
        if decision.action == "suspended":
            self._suspended(where, key, cm, history)
        return False

    def wrote(self, where: str, change: Mutate, written: WriteResult) -> None:
        """Our change is in ``written.obj`` now (written, or found there already)."""
        if written.obj is None:
            self._ours.pop(where, None)
            return
        self._ours[where] = _Ours(resource_version(written.obj), change)
        if written.changed and where in self._history:
            now = asyncio.get_running_loop().time()
            history = record_repair(self.policy, self._history[where], now)
            self._history[where] = history
            if history.suspended:
                # A probe: if it is left alone this long, the next pass says so and resumes.
                self.wake_in(self.policy.max_delay)
            else:
                self.notes.pop(where, None)

    def _notice(self, where: str, key: str, cm: JsonObj | None, now: float) -> None:
        """Record a revert when the object changed since our change was in it and re-applying
        that change would alter it again."""
        ours = self._ours.get(where)
        if ours is None or cm is None or resource_version(cm) == ours.version:
            return
        try:
            undone = ours.change(copy.deepcopy(cm)) is not None
        except CorefileError:
            return  # told by the pass that cannot edit it; not a revert we can name
        except EditError:
            undone = True  # our key, or the data, is gone
        if not undone:
            self._ours[where] = _Ours(resource_version(cm), ours.change)
            return
        del self._ours[where]
        who = reverter((cm.get("metadata") or {}).get("managedFields"), key)
        history = record_revert(self.policy, self._history.get(where, History()), now,
                                who.manager, who.operation)
        self._history[where] = history
        self.metrics.reverts.labels(where, who.manager or "unknown").inc()
        decision = decide(self.policy, history, now)
        counted = f"revert {len(history.reverts)} of {self.policy.limit} within " \
                  f"{self.policy.window:g}s"
        log.warning("our change was reverted", extra={
            "configmap": where, "key": key, "manager": who.manager or "unknown",
            "operation": who.operation, "reverts": len(history.reverts),
            "repair_in": round(decision.at - now, 3)})
        self.reports.event(_involved(cm), "ConfigMapReverted",
                           f"hairpin-proxy's change to data.{key} was removed by "
                           f"{who.describe()}; repaired in {decision.at - now:g}s ({counted})",
                           "Warning")
        self.notes[where] = (f"{where}: our change was removed by {who.manager or 'unknown'}; "
                             "repair backs off")

    def _suspended(self, where: str, key: str, cm: JsonObj | None, history: History) -> None:
        last = history.last
        manager = last.manager if last is not None else ""
        note = (f"{where}: our change was removed {len(history.reverts)} times within "
                f"{self.policy.window:g}s (last by {manager or 'an unknown manager'}); "
                f"repairs suspended, one try every {self.policy.max_delay:g}s. To fix it, "
                f"{advice(manager, where, key)}")
        self.metrics.repairs_suspended.labels(where).set(1)
        if self.notes.get(where) == note:
            return
        self.notes[where] = note
        log.error("repairs suspended", extra={"configmap": where, "manager": manager,
                                              "reverts": len(history.reverts),
                                              "detail": note})
        if cm is not None:
            self.reports.event(_involved(cm), "RepairSuspended", note, "Warning")

    def _resumed(self, where: str, cm: JsonObj | None) -> None:
        self.metrics.repairs_suspended.labels(where).set(0)
        self.notes.pop(where, None)
        message = (f"{where}: our change has held for {self.policy.max_delay:g}s; repairs "
                   "resumed")
        log.info("repairs resumed", extra={"configmap": where})
        if cm is not None:
            self.reports.event(_involved(cm), "RepairResumed", message, "Normal")


def as_is(obj: JsonObj) -> JsonObj:
    """What a Reflector keeps of a ConfigMap we edit: all of it, managedFields included."""
    return obj


def _involved(cm: JsonObj) -> JsonObj:
    return {"apiVersion": "v1", "kind": "ConfigMap", **cm}
