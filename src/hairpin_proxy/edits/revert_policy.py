"""What to do about a ConfigMap where someone keeps undoing our change. Pure.

A revert is seen when the change of our last write would change the object again: someone
removed or altered what we wrote. Who did it is read from the object's ``managedFields``
(``reverter``). The repair waits an exponential backoff counted from that revert
(``first_delay`` doubling up to ``max_delay``); ``limit`` reverts within ``window`` suspend the
repairs: a reconciler owns the object, and fighting it makes the DNS server reload without
end. While suspended one probe is written every ``max_delay``; a probe left alone for
``max_delay`` ends the suspension (the other manager has stopped reverting) and the history
starts afresh.

The controller feeds this module (``record_revert``, ``record_repair``) and asks ``decide``
before each write; every answer is a value, times are the caller's monotonic clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

# The field manager of our own writes (the prefix of our User-Agent, as the API server takes
# it when a request names no fieldManager).
OUR_MANAGER = "hairpin-proxy"


@dataclass(frozen=True)
class RevertPolicy:
    first_delay: float = 5.0  # the repair after a first revert waits this long
    max_delay: float = 1800.0  # the longest wait; also the probe interval while suspended
    limit: int = 5  # reverts within the window that suspend the repairs
    window: float = 3600.0  # seconds a revert counts for

    def delay(self, reverts: int) -> float:
        """The wait after the ``reverts``-th revert in the window (1-based)."""
        if reverts <= 0:
            return 0.0
        # 2**60 already exceeds any cap; beyond it the float would overflow.
        return min(self.max_delay, self.first_delay * 2.0 ** min(reverts - 1, 60))


@dataclass(frozen=True)
class Revert:
    at: float
    manager: str  # "" when managedFields name nobody
    operation: str = ""  # Update or Apply


@dataclass(frozen=True)
class History:
    reverts: tuple[Revert, ...] = ()  # those that still count, oldest first
    repaired_at: float | None = None  # our last write after a revert (a repair or a probe)
    suspended_since: float | None = None
    # Whether that write came after the last revert (times may tie: order is what counts).
    repaired: bool = False

    @property
    def suspended(self) -> bool:
        return self.suspended_since is not None

    @property
    def last(self) -> Revert | None:
        return self.reverts[-1] if self.reverts else None


@dataclass(frozen=True)
class Decision:
    # write: now (nothing pending, or the backoff is over); wait: backing off;
    # suspended: repairs stopped until ``at``, when one probe is written.
    action: Literal["write", "wait", "suspended"]
    at: float  # when to ask again (now for "write")
    delay: float  # the backoff in force (0 without a pending revert)


def settle(policy: RevertPolicy, history: History, now: float) -> History:
    """``history`` at ``now``: a suspension whose probe was left alone for ``max_delay`` is
    over (everything is forgotten); otherwise reverts older than the window stop counting
    (during a suspension the last one is kept: the probe is timed from it)."""
    if history.suspended:
        if (history.repaired and history.repaired_at is not None
                and now - history.repaired_at >= policy.max_delay):
            return History()
        return history
    kept = tuple(r for r in history.reverts if now - r.at < policy.window)
    if kept == history.reverts:
        return history
    return replace(history, reverts=kept)


def record_revert(policy: RevertPolicy, history: History, now: float, manager: str,
                  operation: str = "") -> History:
    """A revert seen at ``now``; the limit reached within the window suspends the repairs."""
    history = settle(policy, history, now)
    # Only the last ``limit`` can matter (a suspension is timed from the last one).
    reverts = (*history.reverts, Revert(now, manager, operation))[-max(1, policy.limit):]
    suspended = history.suspended_since
    if suspended is None and len(reverts) >= policy.limit:
        suspended = now
    return History(reverts, history.repaired_at, suspended, repaired=False)


def record_repair(policy: RevertPolicy, history: History, now: float) -> History:
    """Our write at ``now`` (only what follows a revert matters)."""
    history = settle(policy, history, now)
    if not history.reverts:
        return history
    return replace(history, repaired_at=now, repaired=True)


def decide(policy: RevertPolicy, history: History, now: float) -> Decision:
    """Whether our change may be written at ``now``."""
    history = settle(policy, history, now)
    last = history.last
    if last is None or history.repaired:
        return Decision("write", now, 0.0)
    if history.suspended:
        at = last.at + policy.max_delay
        return Decision("write" if now >= at else "suspended", max(at, now), policy.max_delay)
    delay = policy.delay(len(history.reverts))
    at = last.at + delay
    return Decision("write" if now >= at else "wait", max(at, now), delay)


# ------------------------------------------------------------------ who reverted us


@dataclass(frozen=True)
class Reverter:
    manager: str  # "" when managedFields name nobody
    operation: str
    time: str
    # True when that manager owns the key now (it wrote the value that replaced ours); False
    # when nobody owns it (the key was deleted) and the manager is only the last other writer.
    owns_key: bool

    def describe(self) -> str:
        if not self.manager:
            return "an unknown manager (the object's managedFields name nobody)"
        how = f" ({self.operation})" if self.operation else ""
        if self.owns_key:
            return f"{self.manager}{how}"
        return f"{self.manager}{how}, the last other writer (nobody owns the key any more)"


def _owns(entry: Mapping[str, Any], key: str) -> bool:
    fields = entry.get("fieldsV1")
    data = fields.get("f:data") if isinstance(fields, Mapping) else None
    return isinstance(data, Mapping) and f"f:{key}" in data


def reverter(managed_fields: object, key: str, ours: str = OUR_MANAGER) -> Reverter:
    """Who replaced our ``data.<key>``, read from a ConfigMap's ``managedFields``.

    An update gives its manager the fields it changed and takes them from every other manager
    (the API server's field manager forces ownership on updates), so the manager that owns
    the key now wrote its current value; when several share it (appliers of the same value)
    the latest entry wins. A deleted key is owned by nobody: then the latest entry of another
    manager is named, as the likely author.
    """
    entries: Sequence[Mapping[str, Any]] = [
        e for e in (managed_fields if isinstance(managed_fields, list) else [])
        if isinstance(e, Mapping) and e.get("manager") != ours]

    def newest(found: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
        # RFC 3339 times in UTC compare as strings; the API lists entries oldest first.
        ordered = sorted(enumerate(found), key=lambda ie: (str(ie[1].get("time") or ""), ie[0]))
        return ordered[-1][1] if ordered else None

    owner = newest([e for e in entries if _owns(e, key)])
    chosen = owner if owner is not None else newest(entries)
    if chosen is None:
        return Reverter("", "", "", owns_key=False)
    return Reverter(str(chosen.get("manager") or ""), str(chosen.get("operation") or ""),
                    str(chosen.get("time") or ""), owns_key=owner is not None)


def advice(manager: str, where: str, key: str) -> str:
    """How to make ``manager`` leave our ``key`` of ``where`` alone, in its own configuration."""
    name = manager.lower()
    if "argocd" in name or "argo-cd" in name:
        return (f"exclude it in the Argo CD Application that manages {where}: "
                f"spec.ignoreDifferences with jsonPointers [/data/{key}] and the sync option "
                "RespectIgnoreDifferences=true")
    if "addon-manager" in name or "addonmanager" in name:
        return ("set addonmanager.kubernetes.io/mode: EnsureExists on the ConfigMap in the "
                "addon manager's manifest (usually under /etc/kubernetes/addons/), or use the "
                "platform's custom-DNS mechanism (kube-dns stubDomains; see "
                "docs/platforms/node-local-dns.md)")
    if "flux" in name or name in ("kustomize-controller", "helm-controller"):
        return ("exclude it from Flux's reconciliation (the annotation "
                "kustomize.toolkit.fluxcd.io/reconcile: disabled on that object in its source)")
    who = manager or "the tool that rewrites it"
    return (f"configure {who} to leave data.{key} of {where} alone (its own ignore or exclude "
            "setting), or use the platform's custom-DNS mechanism (see docs/platforms/)")
