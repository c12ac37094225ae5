"""The mass-removal guard: a sudden large drop in the host set is held back for a while.

A broken IngressClass, a namespace deleted by mistake or a policy typo can take most hosts
away at once; holding the old rules for ``--mass-removal-grace`` leaves time to notice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence

from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.plan.change import Since

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

    def decide(self, desired: Sequence[str], previous: Iterable[str],
               since: Since | None = None) -> tuple[tuple[str, ...], bool]:
        """(hosts to write, whether a drop is being held back). ``since``: how ``desired``
        (then the plan's sorted, distinct hosts) differs from the last plan's, which counts
        the removed hosts when ``previous`` are those."""
        if since is not None and isinstance(desired, tuple) and since.starts_at(previous):
            return self._decide_since(desired, since)
        # Sorted in C (a pass's hosts come sorted: linear); their set tells duplicates.
        ordered = sorted(desired)
        present = set(ordered)
        want = tuple(ordered) if len(present) == len(ordered) else tuple(dict.fromkeys(ordered))
        if isinstance(desired, tuple) and want == desired:
            # The plan's very tuple: the writers then take the plan's answer groups, and the
            # next pass regroups from them (not every host again, at the first event).
            want = desired
        if self.allow or (want == previous and self.fraction >= 0):
            # Nothing can be held: no host of ``previous`` is missing from ``want``.
            self.held_since = None
            return want, False
        # Made in each pass that gets here, never kept: a set of every host held between
        # passes (half a megabyte at 10,000 hosts) weighs more than making it again in the
        # few passes that cannot go by the plan's change.
        prev = frozenset(previous)
        if not self._holds(len(prev.difference(present)), len(prev), bool(want)):
            return want, False
        return tuple(sorted(prev.union(want))), True

    def _decide_since(self, want: tuple[str, ...], since: Since) -> tuple[tuple[str, ...],
                                                                          bool]:
        """``decide`` of the plan's hosts from the last plan's: the same decisions, from the
        count of the hosts that went."""
        previous = since.hosts
        if not self._holds(len(since.split(want)[1]), len(previous), bool(want)):
            return want, False
        return tuple(sorted(set(previous).union(want))), True

    def _holds(self, removed: int, before: int, want: bool) -> bool:
        """Whether a drop of ``removed`` of the ``before`` hosts written is held back now (its
        grace starts with the first pass that sees it); ``want``: any host is left."""
        if self.allow or not before or (want and removed / before <= self.fraction):
            self.held_since = None
            return False
        now = self.clock()
        if self.held_since is None:
            self.held_since = now
        if now - self.held_since >= self.grace:
            self.held_since = None
            return False
        return True

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

    def hosts(self, desired: Sequence[str], previous: Sequence[str],
              since: Since | None = None) -> tuple[str, ...]:
        """The hosts to write: ``desired``, unless a large drop from ``previous`` is held."""
        hosts, held = self.guard.decide(desired, previous, since)
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
