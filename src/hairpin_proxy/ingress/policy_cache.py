"""The policy's verdicts on every cached Ingress, kept up to date at the cost of the change."""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Iterable, Mapping

from hairpin_proxy.ingress.policy import ClassIndex, IngressResult, class_index, evaluate_ingress
from hairpin_proxy.kube.client import JsonObj
from hairpin_proxy.policy import HostPolicy, PolicyResult


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
        # key → (uid, resourceVersion, result): flat, one tuple per Ingress.
        self._results: dict[str, tuple[str, str, IngressResult]] = {}
        self._flagged: set[str] = set()  # keys whose result has rejections or ignored hosts
        # host → the sorted origins asking for it. Nearly every host has one Ingress, so only
        # the hosts asked for more than once are counted, in ``_contrib``: {origin: number of
        # Ingresses with that origin asking for it}; origins can coincide because long names
        # are shortened for display.
        self._sources: dict[str, tuple[str, ...]] = {}
        self._contrib: dict[str, dict[str, int]] = {}
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
        keys = list(ingresses)
        changed, removed = self._changes(ingresses, keys)
        touched: set[str] = set()
        evaluated = 0
        for key in removed:
            self._drop(self._results.pop(key)[2], touched)
            self._flagged.discard(key)
        for key in changed:
            obj = ingresses[key]
            uid, rv = _uid_rv(obj)
            known = self._results.get(key)
            # Without a resourceVersion only the identical object counts as unchanged.
            if known is not None and rv and known[0] == uid and known[1] == rv:
                self._results[key] = (uid, rv, known[2])
                continue
            result = evaluate_ingress(obj, policy, index)
            evaluated += 1
            if result.origin == key and result.origin is not key:
                # The origin is the cache key in all but odd names: keep one string.
                result = result._replace(origin=key)
            self._results[key] = (uid, rv, result)
            if known is None or known[2][:2] != result[:2]:
                if known is not None:
                    self._drop(known[2], touched)
                self._add(result, touched)
            if result.rejections or result.ignored:
                self._flagged.add(key)
            else:
                self._flagged.discard(key)
        self._objs, self._keys = dict(ingresses), keys
        self._resort(touched)
        flagged = [self._results[key][2] for key in sorted(self._flagged)]
        return PolicyResult(
            hosts=tuple(self._sorted),
            rejections=tuple(r for res in flagged for r in res.rejections),
            sources=dict(self._sources),
            ignored=tuple(r for res in flagged for r in res.ignored)), evaluated

    def _changes(self, ingresses: Mapping[str, JsonObj], keys: list[str]
                 ) -> tuple[list[str], Iterable[str]]:
        """(keys of new or replaced objects, keys gone) since the last pass; ``keys`` are
        those of ``ingresses``, in order."""
        old = self._objs
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
        origin = result.origin
        for host in result.hosts:
            sources = self._sources.get(host)
            if sources is None:
                self._sources[host] = (origin,)
                touched.add(host)
                continue
            origins = self._contrib.get(host)
            if origins is None:
                # Asked for once so far: its one source, counted once.
                origins = self._contrib[host] = {sources[0]: 1}
            count = origins.get(origin, 0)
            origins[origin] = count + 1
            if not count:
                self._sources[host] = tuple(sorted(origins))

    def _drop(self, result: IngressResult, touched: set[str]) -> None:
        origin = result.origin
        for host in result.hosts:
            origins = self._contrib.get(host)
            if origins is None:
                del self._sources[host]
                touched.add(host)
                continue
            count = origins[origin] - 1
            if count:
                origins[origin] = count
            else:
                del origins[origin]
                self._sources[host] = tuple(sorted(origins))
            if len(origins) == 1 and next(iter(origins.values())) == 1:
                del self._contrib[host]

    def _resort(self, touched: set[str]) -> None:
        """Bring the sorted host list in line with ``_sources`` for the hosts in ``touched``."""
        if len(touched) > 64:
            self._sorted = sorted(self._sources)
            return
        for host in touched:
            at = bisect.bisect_left(self._sorted, host)
            present = at < len(self._sorted) and self._sorted[at] == host
            if host in self._sources and not present:
                self._sorted.insert(at, host)
            elif host not in self._sources and present:
                del self._sorted[at]


def _uid_rv(obj: object) -> tuple[str, str]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return "", ""
    uid, rv = meta.get("uid"), meta.get("resourceVersion")
    return (uid if isinstance(uid, str) else "", rv if isinstance(rv, str) else "")
