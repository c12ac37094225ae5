"""The mass-removal guard: a sudden large drop in the host set is held back for a while.

A broken IngressClass, a namespace deleted by mistake or a policy typo can take most hosts
away at once; holding the old rules for ``--mass-removal-grace`` leaves time to notice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Protocol

from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.plan.change import Since

# Every part of the controller logs under the one name its logs have always carried.
log = logging.getLogger("hairpin_proxy.controller")


class SizeLimits(Protocol):
    """What the pass's plan says of the size limits (``plan.DesiredState``)."""

    def limited(self) -> Collection[str]:
        """The hosts a size limit refused (a namespace's share, the rules budget, a
        ConfigMap's room)."""
        ...

    def fits(self, hosts: Sequence[str]) -> bool:
        """Whether the distinct ``hosts`` fit the rules budget and every ConfigMap's room."""
        ...


class RemovalGuard:
    """Holds back sudden large drops in the host set until they have persisted for ``grace``.

    ``previous`` is what the DNS rules hold now. While a drop is held the old hosts stay (new
    ones are still added where they fit beside them); once it has lasted ``grace`` seconds it
    goes through. Hosts a size limit refused are no drop: the plan took them away on purpose,
    and told each object why.
    """

    def __init__(self, fraction: float, grace: float, allow: bool,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.fraction = fraction
        self.grace = grace
        self.allow = allow
        self.clock = clock
        self.held_since: float | None = None
        # Of the last decision: the desired hosts left out for room while a drop is held,
        # and whether a drop went through because the hosts held now are past a size limit.
        self.waiting = 0
        self.too_big = False

    def decide(self, desired: Sequence[str], previous: Iterable[str],
               since: Since | None = None, limits: SizeLimits | None = None
               ) -> tuple[tuple[str, ...], bool]:
        """(hosts to write, whether a drop is being held back). ``since``: how ``desired``
        (then the plan's sorted, distinct hosts) differs from the last plan's, which counts
        the removed hosts when ``previous`` are those. ``limits``: the plan's size limits,
        which what is written never goes past (None: there are none)."""
        self.waiting, self.too_big = 0, False
        if since is not None and isinstance(desired, tuple) and since.starts_at(previous):
            if not self._large(len(since.split(desired)[1]), len(since.hosts), bool(desired)):
                self.held_since = None
                return desired, False
            return self._held(desired, frozenset(since.hosts), limits)
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
        if not self._large(len(prev.difference(present)), len(prev), bool(want)):
            self.held_since = None
            return want, False
        return self._held(want, prev, limits)

    def _held(self, want: tuple[str, ...], prev: frozenset[str], limits: SizeLimits | None
              ) -> tuple[tuple[str, ...], bool]:
        """``decide`` of a large drop from ``prev`` to ``want``: held back while it is one
        without the hosts a size limit refused, and never past a size limit."""
        refused = limits.limited() if limits is not None else ()
        if refused:
            # Judged again from what a size limit left: those hosts go whatever else does.
            prev = prev.difference(refused)
            if not self._large(len(prev.difference(want)), len(prev), bool(want)):
                self.held_since = None
                return want, False
        now = self.clock()
        if self.held_since is None:
            self.held_since = now
        if now - self.held_since >= self.grace:
            self.held_since = None
            return want, False
        both = tuple(sorted(prev.union(want)))
        if limits is None or limits.fits(both):
            return both, True
        # Not all of them fit: the rules held now stay (they were written, the new hosts
        # never were) and the new hosts wait for the hold to end.
        old = tuple(sorted(prev))
        if len(old) < len(both) and limits.fits(old):
            self.waiting = len(both) - len(old)
            return old, True
        # Nothing held fits the limits as they are now: only the plan's hosts can be written.
        self.held_since, self.too_big = None, True
        return want, False

    def _large(self, removed: int, before: int, want: bool) -> bool:
        """Whether a drop of ``removed`` of the ``before`` hosts written is one to hold
        back; ``want``: any host is left."""
        return not self.allow and before > 0 and (not want or removed / before > self.fraction)

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
              since: Since | None = None, limits: SizeLimits | None = None
              ) -> tuple[str, ...]:
        """The hosts to write: ``desired``, unless a large drop from ``previous`` is held
        (within ``limits``, the plan's size limits)."""
        hosts, held = self.guard.decide(desired, previous, since, limits)
        self.metrics.held.set(1 if held else 0)
        if held:
            if not self._held_logged:
                self._held_logged = True
                log.warning("large drop in hosts held back; keeping the old rules",
                            extra={"previous": len(set(previous)), "desired": len(desired),
                                   "waiting_for_room": self.guard.waiting,
                                   "release_in": round(self.guard.release_in(), 1),
                                   "hint": "--allow-mass-removal applies such drops at once"})
            if self._wakeup is not None:
                self._wakeup.cancel()
            self._wakeup = asyncio.get_running_loop().call_later(
                self.guard.release_in() + 0.05, self.wake)
        elif self.guard.too_big:
            self._held_logged = False
            log.warning("large drop in hosts not held back: the old rules are past a size "
                        "limit", extra={"previous": len(set(previous)), "hosts": len(hosts)})
        elif self._held_logged:
            self._held_logged = False
            log.info("held-back drop in hosts released or withdrawn",
                     extra={"hosts": len(hosts)})
        return hosts
