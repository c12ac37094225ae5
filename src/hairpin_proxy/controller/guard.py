"""The mass-removal guard: a sudden large drop in the host set is held back for a while.

A broken IngressClass, a namespace deleted by mistake or a policy typo can take most hosts
away at once; holding the old rules for ``--mass-removal-grace`` leaves time to notice.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import operator
import time
from collections.abc import Callable, Iterable, Sequence

from hairpin_proxy.controller.metrics import ControllerMetrics

# Every part of the controller logs under the one name its logs have always carried.
log = logging.getLogger("hairpin_proxy.controller")


class RemovalGuard:
    """Holds back sudden large drops in the host set until they have persisted for ``grace``.

    ``previous`` is what the DNS rules hold now. While a drop is held the old hosts stay (new
    ones are still added); once it has lasted ``grace`` seconds it goes through.
    """

    def __init__(self, fraction: float, grace: float, allow: bool,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.fraction = fraction
        self.grace = grace
        self.allow = allow
        self.clock = clock
        self.held_since: float | None = None
        # The set of the last ``previous`` that was a tuple (immutable, so the set stays
        # right while the same object comes back: passes that write nothing see the same
        # held hosts).
        self._prev: tuple[tuple[str, ...], frozenset[str]] | None = None

    def decide(self, desired: Sequence[str], previous: Iterable[str]) -> tuple[tuple[str, ...],
                                                                              bool]:
        """(hosts to write, whether a drop is being held back)."""
        # The policy's hosts come sorted and unique: checking that (in C) is several times
        # cheaper than sorting a set of 10,000 names, which comes out in hash order.
        if all(map(operator.lt, desired, itertools.islice(desired, 1, None))):
            want = tuple(desired)
        else:
            want = tuple(sorted(set(desired)))
        if self.allow or (want == previous and self.fraction >= 0):
            # Nothing can be held: no host of ``previous`` is missing from ``want``.
            self.held_since = None
            return want, False
        prev = self._set_of(previous)
        if not prev:
            self.held_since = None
            return want, False
        removed = len(prev.difference(want))
        if want and removed / len(prev) <= self.fraction:
            self.held_since = None
            return want, False
        now = self.clock()
        if self.held_since is None:
            self.held_since = now
        if now - self.held_since >= self.grace:
            self.held_since = None
            return want, False
        return tuple(sorted(prev.union(want))), True

    def _set_of(self, previous: Iterable[str]) -> frozenset[str]:
        if not isinstance(previous, tuple):
            return frozenset(previous)
        if self._prev is None or self._prev[0] is not previous:
            self._prev = (previous, frozenset(previous))
        return self._prev[1]

    def release_in(self) -> float:
        if self.held_since is None:
            return 0.0
        return max(0.0, self.held_since + self.grace - self.clock())


class HeldDrops:
    """The pass's side of the guard: the metric, one log line per held drop, and a wake-up
    when the hold runs out (nothing else may change by then to start a pass)."""

    def __init__(self, guard: RemovalGuard, metrics: ControllerMetrics,
                 wake: Callable[[], None]) -> None:
        self.guard = guard
        self.metrics = metrics
        self.wake = wake
        self._held_logged = False
        self._wakeup: asyncio.TimerHandle | None = None

    def hosts(self, desired: Sequence[str], previous: Sequence[str]) -> tuple[str, ...]:
        """The hosts to write: ``desired``, unless a large drop from ``previous`` is held."""
        hosts, held = self.guard.decide(desired, previous)
        self.metrics.held.set(1 if held else 0)
        if held:
            if not self._held_logged:
                self._held_logged = True
                log.warning("large drop in hosts held back; keeping the old rules",
                            extra={"previous": len(set(previous)), "desired": len(desired),
                                   "release_in": round(self.guard.release_in(), 1),
                                   "hint": "--allow-mass-removal applies such drops at once"})
            if self._wakeup is not None:
                self._wakeup.cancel()
            self._wakeup = asyncio.get_running_loop().call_later(
                self.guard.release_in() + 0.05, self.wake)
        elif self._held_logged:
            self._held_logged = False
            log.info("held-back drop in hosts released or withdrawn",
                     extra={"hosts": len(hosts)})
        return hosts
