"""Host verification (--verify-hosts): a host is redirected only when its public DNS answer is
one of this cluster's load balancers (every LoadBalancer Service's and Ingress's status).

What the operator sees: one summary line with the counts by verdict whenever they change (at
most one per pass, and while verdicts are still coming in at most one per ``SUMMARY_EVERY``
seconds, so 1,000 new hosts make a handful of lines, not thousands); per-host lines at debug
level; per-host Events (rate-limited) on the objects that asked. When no host resolves at all
(no public DNS from here), one warning names the ways out, and /readyz shows it.

Which hosts go is the plan's decision (plan/core.py ``verified``, from the verdicts in its
snapshot); this shell keeps the checker's hosts (the plan's candidates) and load balancers,
hands the plan the verdicts and tells what the plan kept out.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence

from hairpin_proxy.claims import ObjectRef
from hairpin_proxy.controller.events import Reports
from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.controller.sources.ingress import IngressSource
from hairpin_proxy.kube.watch import Reflector
from hairpin_proxy.plan import DesiredState
from hairpin_proxy.plan.core import VERDICTS
from hairpin_proxy.verify import (
    NO_PUBLIC_DNS,
    HostChecker,
    LbIndex,
    Verdict,
    lb_addresses,
    nothing_resolves,
)

log = logging.getLogger("hairpin_proxy.controller")

# Seconds between rebuilds of the load balancer index for Ingress status changes.
_LB_REBUILD = 10.0
# Least seconds between two summary lines while verdicts are still pending.
SUMMARY_EVERY = 10.0
# Verdicts that mean a host did resolve: public DNS is there.
_RESOLVING = frozenset({"verified", "ip-mode-proxy", "not-this-cluster"})
# Verdicts told on the Ingress: (Event reason, Event type).
_REPORTED = {"not-this-cluster": ("HostNotOnThisCluster", "Warning"),
             "unresolved": ("HostNotOnThisCluster", "Warning"),
             "ip-mode-proxy": ("HostBehindProxyLoadBalancer", "Normal")}


class Verification:
    """``services`` watches every Service (their load balancer status); the Ingresses'
    status comes from ``ingresses``."""

    def __init__(self, checker: HostChecker, services: Reflector, ingresses: IngressSource,
                 metrics: ControllerMetrics, reports: Reports, *,
                 wake: Callable[[], None]) -> None:
        self.checker = checker
        self.services = services
        self.ingresses = ingresses
        self.metrics = metrics
        self.reports = reports
        self.wake = wake
        self._lb = LbIndex()
        self._lb_key: tuple[int, int] | None = None
        self._lb_at = -1e9
        self._counts = (0, 0)
        self._logged: dict[tuple[str, str], float] = {}
        self._summary: dict[str, int] | None = None
        self._summary_at = -1e9
        self._summary_due: asyncio.TimerHandle | None = None
        # Whether the last pass found that no host resolves at all (warned once per spell).
        self.no_public_dns = False
        # Hosts the last pass had no verdict for yet (not redirected until they have one).
        self.pending = 0
        # The hosts the checker keeps verdicts for: the last plan's candidates.
        self._hosts: tuple[str, ...] = ()
        # The load balancer index the checker was last given.
        self._told_lb: LbIndex | None = None
        metrics.kept_age_source = lambda: checker.stats().oldest_kept_age or 0.0

    async def _lb_index(self) -> LbIndex:
        """This cluster's load balancer addresses. Rebuilt at once when a Service changes; for
        Ingress changes (their status rarely changes) at most every 10 s, off the event loop:
        at 10,000 Ingresses a rebuild takes tens of milliseconds."""
        key = (self.services.generation, self.ingresses.status_generation())
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._lb_key is None or key[0] != self._lb_key[0] or (
                key[1] != self._lb_key[1] and now - self._lb_at >= _LB_REBUILD):
            services = list(self.services.cache.values())
            ingresses = self.ingresses.status_objects()
            self._lb = await asyncio.to_thread(lb_addresses, services, ingresses)
            self._lb_key, self._lb_at = key, now
        elif key[1] != self._lb_key[1]:
            loop.call_later(self._lb_at + _LB_REBUILD - now + 0.05, self.wake)
        return self._lb

    async def verdicts(self) -> Mapping[str, Verdict]:
        """The verdicts for the plan's snapshot: the last pass's candidates judged against
        the load balancers as they are now (a moved address is followed in this pass)."""
        lb = await self._lb_index()
        if lb is not self._told_lb:
            # Only a new index is worth an update here (the hosts are the checker's already,
            # and each update walks every one of them).
            self.checker.update(self._hosts, lb)
            self._told_lb = lb
        return self.checker.verdicts()

    def planned(self, state: DesiredState, verdicts: Mapping[str, Verdict]) -> None:
        """After the plan (which decided with ``verdicts``): the checker keeps verdicts for
        the plan's candidates (a new one is checked at once: pending until then, it kept
        what the rules hold), and what verification kept out is told on the objects that
        asked for it."""
        self._hosts = state.candidates
        self.checker.update(state.candidates, self._lb)
        self._told_lb = self._lb
        origins = state.plan.origins
        for host, code in state.unverified.items():
            verdict = verdicts.get(host)
            if verdict is not None and code in _REPORTED:
                self._report(host, code, verdict.reason, origins.get(host, ()))
        counts = {code: int(n) for code, n in state.metrics.get("verdicts", {}).items() if n}
        self.pending = counts.get("pending", 0)
        self._summarize(counts)
        self._warn_no_public_dns(list(counts))
        stats = self.checker.stats()
        checks, errors = self._counts
        self.metrics.verify_checks.inc(max(0, stats.checks - checks))
        self.metrics.verify_errors.inc(max(0, stats.errors - errors))
        self._counts = (stats.checks, stats.errors)

    def note(self) -> str:
        """The /readyz clause: empty unless no host resolves at all."""
        return f"verification: {NO_PUBLIC_DNS}" if self.no_public_dns else ""

    def _summarize(self, counts: dict[str, int]) -> None:
        """One line with the counts by verdict when they changed; while some are pending, at
        most one every SUMMARY_EVERY seconds (the last counts are told when that is up)."""
        if counts == self._summary:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        wait = self._summary_at + SUMMARY_EVERY - now
        if counts.get("pending") and self._summary is not None and wait > 0:
            if self._summary_due is None:
                self._summary_due = loop.call_later(wait + 0.05, self._summary_wake)
            return
        self._summary, self._summary_at = dict(counts), now
        log.info("host verification", extra={
            "hosts": sum(counts.values()),
            **{code.replace("-", "_"): counts.get(code, 0) for code in VERDICTS}})

    def _summary_wake(self) -> None:
        self._summary_due = None
        self.wake()

    def _warn_no_public_dns(self, codes: list[str]) -> None:
        before = self.no_public_dns
        if nothing_resolves(codes):
            self.no_public_dns = True
        elif any(c in _RESOLVING for c in codes):
            self.no_public_dns = False
        # Otherwise some hosts are still pending: no news either way.
        if self.no_public_dns and not before:
            log.warning(NO_PUBLIC_DNS)
        elif before and not self.no_public_dns:
            log.info("host verification: hosts resolve in public DNS again")

    def _report(self, host: str, code: str, reason: str,
                origins: Sequence[ObjectRef]) -> None:
        reason_name, kind = _REPORTED[code]
        key = (host, code)
        now = time.monotonic()
        last = self._logged.get(key)
        if last is not None and now - last < self.reports.interval:
            return
        self._logged[key] = now
        # Per host at debug level: the summary line counts them, the Event tells the owner.
        log.debug("host not redirected", extra={"host": host, "verdict": code,
                                                "reason": reason})
        for origin in origins:
            involved = self.reports.find(origin)
            if involved is not None:
                self.reports.event(involved, reason_name,
                                   f"{reason}: not redirected by hairpin-proxy", kind)
