"""Keeps a verdict for each host of a changing set, re-checking them in the background.

The controller calls ``update(hosts, lb)`` whenever its view changes and reads ``verdicts()``
when it renders; ``on_change`` tells it that a verdict changed in a way worth re-rendering for.
One background task (``run``) does the lookups:

* a new host is checked at once (at most ``concurrency`` lookups run together);
* a checked host is re-checked every ``interval`` seconds, jittered by ±10 % so that hosts added
  together do not stay in lock-step against the resolver;
* a failed lookup is retried after an exponential backoff (``backoff_base`` doubling up to
  ``backoff_max``), and the verdict rule keeps the last verdict that rests on an answer;
* a change of the load balancer index re-evaluates every verdict against its last answers at
  once, without a lookup;
* load balancer hostnames (AWS ELB style) are resolved on the same schedule and their addresses
  merged into the index; a failed re-resolve keeps the addresses learned before.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import heapq
import itertools
import logging
import operator
import random
import time
import types
from collections.abc import Callable, Iterable, Mapping

from hairpin_proxy.verify.lb import LbIndex
from hairpin_proxy.verify.resolver import Resolver
from hairpin_proxy.verify.verdict import (
    Answers,
    Code,
    ResolveError,
    Verdict,
    decide,
    normalize_host,
    pending,
    probe_name,
)

__all__ = ["CheckerStats", "HostChecker"]

log = logging.getLogger(__name__)

_JITTER = 0.1

# A scheduled lookup: ("host", host) or ("lb", load balancer hostname).
_Key = tuple[str, str]


@dataclasses.dataclass(frozen=True)
class CheckerStats:
    """Counters for metrics. ``checks``/``errors`` count host lookups since start."""

    checks: int
    errors: int
    lb_checks: int
    lb_errors: int
    hosts: int
    by_code: Mapping[str, int]
    # Age in seconds of the oldest answer a kept verdict rests on (None: none is kept).
    oldest_kept_age: float | None


class HostChecker:
    def __init__(self, resolver: Resolver, *, interval: float = 300.0, concurrency: int = 8,
                 backoff_base: float = 5.0, backoff_max: float | None = None,
                 on_change: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None) -> None:
        if interval <= 0 or concurrency < 1 or backoff_base <= 0:
            raise ValueError("interval and backoff_base must be positive, concurrency >= 1")
        self.resolver = resolver
        self.interval = interval
        self.concurrency = concurrency
        # A retry is never later than a regular re-check would be.
        self.backoff_max = min(backoff_max if backoff_max is not None else interval, interval)
        self.backoff_base = min(backoff_base, self.backoff_max)
        self.on_change = on_change
        self._clock = clock
        self._rng = rng or random.Random()
        self._hosts: frozenset[str] = frozenset()
        # Whether ``_hosts`` is exactly the last ``update``'s names, each already normal: the
        # next update then normalizes only the names it adds.
        self._hosts_as_given = True
        self._verdicts: dict[str, Verdict] = {}
        # Verdicts by code, and the hosts whose verdict is kept through failures: stats and
        # "settled" without walking every verdict (which a lookup result would otherwise do,
        # making the first round of checks quadratic in the hosts).
        self._by_code: dict[Code, int] = dict.fromkeys(Code, 0)
        self._kept: set[str] = set()
        self._static_lb = LbIndex()
        self._lb = LbIndex()
        self._learned: dict[str, tuple[str, ...]] = {}
        self._lb_errors_in_row: dict[str, int] = {}
        # When each key is due, and the same as a heap with stale entries left in (an entry
        # counts only while ``_due`` still says that time): the next due lookup without a walk.
        self._due: dict[_Key, float] = {}
        self._queue: list[tuple[float, int, _Key]] = []
        self._order = itertools.count()
        self._inflight: set[_Key] = set()
        self._wake = asyncio.Event()
        self._settled = asyncio.Event()
        self._settled.set()
        self._task: asyncio.Task[None] | None = None
        self._checks = self._errors = self._lb_checks = self._lb_error_count = 0

    # ------------------------------------------------------------------ what the controller uses

    def update(self, hosts: Iterable[str], lb: LbIndex) -> None:
        """The hosts to keep verdicts for and the current load balancer index.

        New hosts start ``pending`` and are checked at once; dropped hosts are forgotten. A
        changed ``lb`` re-evaluates every verdict now (``on_change`` may fire from here).
        """
        now = self._clock()
        wanted = self._wanted(hosts)
        if wanted is not self._hosts:
            for gone in self._hosts - wanted:
                self._set_verdict(gone, None)
                self._due.pop(("host", gone), None)
            for new in wanted - self._hosts:
                self._set_verdict(new, pending(new))
                self._schedule(("host", new), now)
            self._hosts = wanted
        changed = False
        if lb != self._static_lb:
            self._static_lb = lb
            names = set(lb.hostnames)
            for name in list(self._learned):
                if name not in names:
                    del self._learned[name]
            for key in [k for k in self._due if k[0] == "lb" and k[1] not in names]:
                del self._due[key]
            for name in names:
                if ("lb", name) not in self._due:
                    self._schedule(("lb", name), now)
            changed = self._rebuild_lb(now)
        self._update_settled()
        self._wake.set()
        if changed:
            self._notify()

    def _wanted(self, hosts: Iterable[str]) -> frozenset[str]:
        """The normal names of ``hosts``; ``_hosts`` itself when they are the same names."""
        given = hosts if isinstance(hosts, frozenset) else frozenset(hosts)
        if self._hosts_as_given:
            if given == self._hosts:
                return self._hosts
            added = given - self._hosts
            # The names kept are normal already: only the added ones need a look.
            if all(normalize_host(h) is h for h in added):
                return given
        normal = [normalize_host(h) for h in given]
        self._hosts_as_given = all(map(operator.is_, normal, given))
        wanted = frozenset(normal)
        return self._hosts if wanted == self._hosts else wanted

    def _set_verdict(self, host: str, verdict: Verdict | None) -> None:
        """The one place a verdict is set (or dropped, with None), keeping the counts."""
        old = self._verdicts.pop(host, None) if verdict is None else \
            self._verdicts.get(host)
        if old is not None:
            self._by_code[old.code] -= 1
        if verdict is None:
            self._kept.discard(host)
            return
        self._verdicts[host] = verdict
        self._by_code[verdict.code] += 1
        if verdict.kept:
            self._kept.add(host)
        else:
            self._kept.discard(host)

    def _schedule(self, key: _Key, when: float) -> None:
        self._due[key] = when
        heapq.heappush(self._queue, (when, next(self._order), key))
        if len(self._queue) > 2 * len(self._due) + 64:
            # Mostly stale entries (dropped hosts, rescheduled keys): keep only the live ones.
            self._queue = [(w, next(self._order), k) for k, w in self._due.items()]
            heapq.heapify(self._queue)

    def verdicts(self) -> Mapping[str, Verdict]:
        """A snapshot of the verdict of every host."""
        return types.MappingProxyType(dict(self._verdicts))

    def verdict(self, host: str) -> Verdict | None:
        return self._verdicts.get(normalize_host(host))

    @property
    def lb(self) -> LbIndex:
        """The index in use: the one given to ``update`` plus addresses learned from names."""
        return self._lb

    def stats(self) -> CheckerStats:
        now = self._clock()
        by_code = {c.value: n for c, n in self._by_code.items()}
        oldest: float | None = None
        for host in self._kept:
            age = self._verdicts[host].age(now)
            if age is not None and (oldest is None or age > oldest):
                oldest = age
        return CheckerStats(self._checks, self._errors, self._lb_checks, self._lb_error_count,
                            len(self._verdicts), by_code, oldest)

    def settled(self) -> bool:
        """Whether every host has been checked at least once (none is pending)."""
        return self._settled.is_set()

    async def wait_settled(self) -> None:
        """Return once no host is pending; bound it with ``asyncio.timeout``.

        A controller that has just started can wait for this before its first write, so that
        hosts it served before the restart are not withdrawn while they are being checked.
        """
        await self._settled.wait()

    def start(self) -> asyncio.Task[None]:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.run(), name="host-checker")
        return self._task

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # ------------------------------------------------------------------ the background loop

    async def run(self) -> None:
        """Schedule lookups until cancelled."""
        workers: set[asyncio.Task[None]] = set()
        try:
            while True:
                now = self._clock()
                # At most ``concurrency`` lookups at a time, the longest due first; the rest
                # wait in the queue, not as tasks (thousands of hosts are new at start).
                while len(self._inflight) < self.concurrency:
                    key = self._next_due(now)
                    if key is None:
                        break
                    self._inflight.add(key)
                    task = asyncio.create_task(self._check(key, self._due[key]))
                    workers.add(task)
                    task.add_done_callback(workers.discard)
                nxt = self._first_due()
                full = len(self._inflight) >= self.concurrency
                delay = None if nxt is None or full else max(0.0, nxt - now)
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._wake.wait()
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            self._inflight.clear()

    def _first_due(self) -> float | None:
        """When the earliest key not being looked up is due (stale entries dropped)."""
        queue = self._queue
        while queue:
            when, _, key = queue[0]
            if self._due.get(key) == when and key not in self._inflight:
                return when
            heapq.heappop(queue)
        return None

    def _next_due(self, now: float) -> _Key | None:
        when = self._first_due()
        if when is None or when > now:
            return None
        return heapq.heappop(self._queue)[2]

    async def _check(self, key: _Key, due: float) -> None:
        kind, name = key
        try:
            query = probe_name(name) if kind == "host" else name
            try:
                result = await self.resolver.resolve(query)
            except Exception as exc:  # a resolver bug must not end the checking
                log.warning("host check failed", exc_info=True,
                            extra={"host": name, "error": str(exc)})
                result = ResolveError(query, "error", str(exc) or type(exc).__name__)
            if kind == "host":
                self._host_result(name, result)
            else:
                self._lb_result(name, result)
        finally:
            self._inflight.discard(key)
            if self._due.get(key) == due:
                # Not rescheduled by a result (a defect, or cancelled): due again as it was.
                self._schedule(key, due)
            self._wake.set()

    def _delay(self, errors: int) -> float:
        if errors:
            base = min(self.backoff_max, self.backoff_base * 2.0 ** min(errors - 1, 30))
        else:
            base = self.interval
        return base * self._rng.uniform(1 - _JITTER, 1 + _JITTER)

    def _host_result(self, host: str, result: Answers | ResolveError) -> None:
        if host not in self._hosts:
            return  # dropped while being checked
        now = self._clock()
        previous = self._verdicts.get(host)
        verdict = decide(host, result, self._lb, previous, now)
        self._checks += 1
        failed = isinstance(result, ResolveError) or verdict.errors > 0
        if failed:
            self._errors += 1
        self._set_verdict(host, verdict)
        self._schedule(("host", host), now + self._delay(verdict.errors))
        self._update_settled()
        if previous is None or verdict.material() != previous.material():
            log.debug("host verdict", extra={"host": host, "verdict": verdict.code.value,
                                             "reason": verdict.reason})
            self._notify()

    def _lb_result(self, name: str, result: Answers | ResolveError) -> None:
        if name not in self._static_lb.hostnames:
            return
        now = self._clock()
        self._lb_checks += 1
        if isinstance(result, Answers) and not result.incomplete:
            self._lb_errors_in_row[name] = 0
            self._learned[name] = result.addresses
        elif isinstance(result, Answers):
            # One family failed: add what the other gave, drop nothing learned before.
            self._lb_error_count += 1
            self._lb_errors_in_row[name] = self._lb_errors_in_row.get(name, 0) + 1
            self._learned[name] = tuple(sorted({*self._learned.get(name, ()),
                                                *result.addresses}))
        else:
            self._lb_error_count += 1
            self._lb_errors_in_row[name] = self._lb_errors_in_row.get(name, 0) + 1
        self._schedule(("lb", name), now + self._delay(self._lb_errors_in_row.get(name, 0)))
        if self._rebuild_lb(now):
            self._notify()

    def _rebuild_lb(self, now: float) -> bool:
        """Recompute the index in use; re-evaluate every verdict if it changed.

        Returns whether any verdict changed materially.
        """
        lb = self._static_lb.with_resolved(self._learned)
        if lb == self._lb:
            return False
        self._lb = lb
        changed = False
        for host, previous in list(self._verdicts.items()):
            verdict = decide(host, None, lb, previous, now)
            if verdict.material() != previous.material():
                changed = True
                log.debug("host verdict", extra={"host": host, "verdict": verdict.code.value,
                                                 "reason": verdict.reason})
            self._set_verdict(host, verdict)
        return changed

    def _update_settled(self) -> None:
        if self._by_code[Code.PENDING]:
            self._settled.clear()
        else:
            self._settled.set()

    def _notify(self) -> None:
        if self.on_change is None:
            return
        try:
            self.on_change()
        except Exception:  # the controller's hook must not break the checking
            log.exception("on_change hook failed")
