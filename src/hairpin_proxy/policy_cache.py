"""The policy's verdicts on every cached Ingress, kept up to date at the cost of the change."""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Iterable, Mapping

from hairpin_proxy.kube.client import JsonObj
from hairpin_proxy.policy import (
    ClassIndex,
    HostPolicy,
    IngressResult,
    PolicyResult,
    class_index,
    evaluate_ingress,
)


class PolicyCache:
    """The policy's verdict on every cached Ingress, kept up to date at the cost of the change.

    Each Ingress's ``IngressResult`` is remembered with the object it came from. A pass finds
    the new, changed and deleted Ingresses by object identity (in C when the keys kept their
    order, about a millisecond for 10,000), evaluates only those whose uid or resourceVersion
    differs (a relist brings equal content in new objects), and applies just the differences
    to the merged host set (host → contributing Ingresses). A change in the IngressClasses'
    ``ClassIndex`` (which classes exist: an Ingress naming a missing one is refused; which are
    the default: they decide whether a class-less Ingress is selected) or in the policy drops
    everything. ``update`` returns what ``policy.evaluate`` gives for the same Ingresses taken
    in key order. One caller at a time (the reconcile loop).
    """

    def __init__(self, policy: HostPolicy) -> None:
        self.policy = policy
        self._reset()

    def _reset(self) -> None:
        self._index: ClassIndex | None = None
        # The objects last seen, by key, in the caller's order; an object is unchanged while
        # the caller still holds the very same one (the watch replaces, never edits).
        self._objs: dict[str, JsonObj] = {}
        self._keys: list[str] = []
        self._results: dict[str, tuple[tuple[str, str], IngressResult]] = {}
        self._flagged: set[str] = set()  # keys whose result has rejections or ignored hosts
        # host → {origin: number of Ingresses with that origin asking for it}; origins can
        # coincide because long names are shortened for display.
        self._contrib: dict[str, dict[str, int]] = {}
        self._sources: dict[str, tuple[str, ...]] = {}
        self._sorted: list[str] = []

    def update(self, ingresses: Mapping[str, JsonObj], classes: Iterable[JsonObj],
               policy: HostPolicy | None = None) -> tuple[PolicyResult, int]:
        """(the result for these Ingresses by key, how many Ingresses were evaluated).

        ``ingresses`` must not change during the call: pass a copy of a live cache.
        """
        try:
            return self._update(ingresses, classes, policy or self.policy)
        except BaseException:
            # Half-applied bookkeeping must not outlive a failure: start over next time.
            self._reset()
            raise

    def _update(self, ingresses: Mapping[str, JsonObj], classes: Iterable[JsonObj],
                policy: HostPolicy) -> tuple[PolicyResult, int]:
        index = class_index(classes)
        if policy is not self.policy or index != self._index:
            self._reset()
            self.policy, self._index = policy, index
        changed, removed = self._changes(ingresses)
        touched: set[str] = set()
        evaluated = 0
        for key in removed:
            self._drop(self._results.pop(key)[1], touched)
            self._flagged.discard(key)
        for key in changed:
            obj = ingresses[key]
            version = _uid_rv(obj)
            known = self._results.get(key)
            # Without a resourceVersion only the identical object counts as unchanged.
            if known is not None and version[1] and known[0] == version:
                self._results[key] = (version, known[1])
                continue
            result = evaluate_ingress(obj, policy, index)
            evaluated += 1
            self._results[key] = (version, result)
            if known is None or known[1][:2] != result[:2]:
                if known is not None:
                    self._drop(known[1], touched)
                self._add(result, touched)
            if result.rejections or result.ignored:
                self._flagged.add(key)
            else:
                self._flagged.discard(key)
        self._objs, self._keys = dict(ingresses), list(ingresses)
        self._resort(touched)
        flagged = [self._results[key][1] for key in sorted(self._flagged)]
        return PolicyResult(
            hosts=tuple(self._sorted),
            rejections=tuple(r for res in flagged for r in res.rejections),
            sources=dict(self._sources),
            ignored=tuple(r for res in flagged for r in res.ignored)), evaluated

    def _changes(self, ingresses: Mapping[str, JsonObj]) -> tuple[list[str], Iterable[str]]:
        """(keys of new or replaced objects, keys gone) since the last pass."""
        old = self._objs
        keys = list(ingresses)
        if keys[:len(old)] == self._keys:
            # The usual case, a watch cache after updates and additions: the old keys are
            # still its first ones, in order. Compared pairwise in C, under a millisecond
            # for 10,000.
            kept = itertools.compress(keys, map(operator.is_not, ingresses.values(), old.values()))
            return [*kept, *keys[len(old):]], ()
        # Deletions or another order (a relist): a Python-level pass, a few milliseconds.
        return ([k for k, v in ingresses.items() if old.get(k) is not v],
                old.keys() - ingresses.keys())

    def _add(self, result: IngressResult, touched: set[str]) -> None:
        for host in result.hosts:
            origins = self._contrib.get(host)
            if origins is None:
                self._contrib[host] = {result.origin: 1}
                self._sources[host] = (result.origin,)
                touched.add(host)
            else:
                count = origins.get(result.origin, 0)
                origins[result.origin] = count + 1
                if not count:
                    self._sources[host] = tuple(sorted(origins))

    def _drop(self, result: IngressResult, touched: set[str]) -> None:
        for host in result.hosts:
            origins = self._contrib[host]
            count = origins[result.origin] - 1
            if count:
                origins[result.origin] = count
                continue
            del origins[result.origin]
            if origins:
                self._sources[host] = tuple(sorted(origins))
            else:
                del self._contrib[host], self._sources[host]
                touched.add(host)

    def _resort(self, touched: set[str]) -> None:
        """Bring the sorted host list in line with ``_contrib`` for the hosts in ``touched``."""
        if len(touched) > 64:
            self._sorted = sorted(self._contrib)
            return
        for host in touched:
            at = bisect.bisect_left(self._sorted, host)
            present = at < len(self._sorted) and self._sorted[at] == host
            if host in self._contrib and not present:
                self._sorted.insert(at, host)
            elif host not in self._contrib and present:
                del self._sorted[at]


def _uid_rv(obj: object) -> tuple[str, str]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return "", ""
    uid, rv = meta.get("uid"), meta.get("resourceVersion")
    return (uid if isinstance(uid, str) else "", rv if isinstance(rv, str) else "")
