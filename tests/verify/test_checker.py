"""HostChecker end to end against a real DNS server (dnsmasq on loopback).

Every wait is bounded: ``settle`` and ``until`` give up after a few seconds.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable

from hairpin_proxy.verify.checker import HostChecker
from hairpin_proxy.verify.lb import LbIndex, lb_addresses
from hairpin_proxy.verify.resolver import make_resolver
from hairpin_proxy.verify.verdict import Answers, Code, ResolveError
from tests.verify.dnsmasq import ELB_IP, LB_IP, OTHER_IP, BlackHole, Dnsmasq
from tests.verify.objects import lb_service
from tests.waiting import until

LB = lb_addresses([lb_service("ingress-nginx", "ingress-nginx", {"ip": LB_IP})])
HOSTS = ["app.example.test", "other.example.test", "nope.example.test", "*.wild.example.test",
         "*.elsewhere-wild.example.test", "dual.example.test"]


class Counting:
    """A resolver that records when and what it was asked."""

    def __init__(self, servers: list[str], timeout: float = 0.3) -> None:
        self.inner = make_resolver(servers, timeout=timeout)
        self.calls: list[tuple[float, str]] = []

    async def resolve(self, name: str) -> Answers | ResolveError:
        self.calls.append((time.monotonic(), name))
        return await self.inner.resolve(name)

    def times(self, name: str) -> list[float]:
        return [t for t, n in self.calls if n == name]




def run(body: Callable[[], Awaitable[None]], timeout: float = 30.0) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(timeout):
            await body()
    asyncio.run(bounded())


def codes(checker: HostChecker) -> dict[str, str]:
    return {h: v.code.value for h, v in checker.verdicts().items()}


def test_verdicts_for_a_set_of_hosts(dnsmasq: Dnsmasq) -> None:
    changes: list[int] = []

    async def body() -> None:
        checker = HostChecker(Counting([dnsmasq.server]), interval=60,
                              on_change=lambda: changes.append(1))
        checker.update(HOSTS, LB)
        assert set(codes(checker).values()) == {"pending"} and not checker.settled()
        checker.start()
        try:
            async with asyncio.timeout(5):
                await checker.wait_settled()
        finally:
            await checker.stop()
        assert codes(checker) == {
            "app.example.test": "verified", "other.example.test": "not-this-cluster",
            "nope.example.test": "unresolved", "*.wild.example.test": "verified",
            "*.elsewhere-wild.example.test": "not-this-cluster",
            "dual.example.test": "verified"}
        assert checker.verdicts()["other.example.test"].reason == (
            f"other.example.test resolves to {OTHER_IP}, not to this cluster's load balancer "
            f"{LB_IP}")
        wild = checker.verdicts()["*.wild.example.test"]
        assert wild.queried == "hairpin-proxy-check-q7x2k9.wild.example.test"
        stats = checker.stats()
        assert stats.checks == len(HOSTS) and stats.errors == 0
        assert stats.by_code["verified"] == 3 and stats.oldest_kept_age is None
        assert len(changes) >= 1

    run(body)


def test_new_hosts_are_checked_at_once_and_dropped_ones_forgotten(dnsmasq: Dnsmasq) -> None:
    async def body() -> None:
        resolver = Counting([dnsmasq.server])
        checker = HostChecker(resolver, interval=60)
        checker.update(["app.example.test"], LB)
        checker.start()
        try:
            await until(checker.settled)
            checker.update(["other.example.test"], LB)
            assert list(checker.verdicts()) == ["other.example.test"]
            await until(checker.settled)
            assert codes(checker) == {"other.example.test": "not-this-cluster"}
        finally:
            await checker.stop()
        assert len(resolver.calls) == 2

    run(body)


def test_outage_keeps_verified_host_and_adds_none(dnsmasq: Dnsmasq) -> None:
    async def body() -> None:
        checker = HostChecker(Counting([dnsmasq.server], timeout=0.2), interval=0.3,
                              backoff_base=0.05, backoff_max=0.2)
        checker.update(["app.example.test", "other.example.test"], LB)
        checker.start()
        try:
            await until(checker.settled)
            dnsmasq.stop()
            await until(lambda: checker.stats().errors >= 4, what="resolver errors")
            # A host added during the outage cannot be verified.
            checker.update(["app.example.test", "other.example.test", "dual.example.test"], LB)
            await until(lambda: checker.stats().errors >= 6)
            verdicts = checker.verdicts()
            assert verdicts["app.example.test"].code is Code.VERIFIED
            assert verdicts["app.example.test"].redirect and verdicts["app.example.test"].kept
            assert verdicts["other.example.test"].code is Code.NOT_THIS_CLUSTER
            assert verdicts["dual.example.test"].code is Code.RESOLVER_ERROR
            assert not verdicts["dual.example.test"].redirect
            age = checker.stats().oldest_kept_age
            assert age is not None and age > 0
            dnsmasq.start()
            await until(lambda: not any(v.kept or v.code is Code.RESOLVER_ERROR
                                        for v in checker.verdicts().values()),
                        what="recovery after the outage")
            assert codes(checker)["dual.example.test"] == "verified"
            assert checker.stats().oldest_kept_age is None
        finally:
            await checker.stop()

    run(body)


def test_backoff_is_exponential_and_bounded(dnsmasq: Dnsmasq) -> None:
    # example.org is REFUSED at once (dnsmasq has no upstream): a fast, real resolver error.
    async def body() -> None:
        resolver = Counting([dnsmasq.server])
        checker = HostChecker(resolver, interval=30, backoff_base=0.02, backoff_max=0.16)
        checker.update(["example.org"], LB)
        checker.start()
        try:
            await until(lambda: len(resolver.times("example.org")) >= 9, timeout=10)
        finally:
            await checker.stop()
        times = resolver.times("example.org")
        gaps = [b - a for a, b in itertools.pairwise(times)]
        # Doubling from 0.02 (±10 % jitter), then capped at 0.16 (±10 %) — never the
        # 30 s interval, never faster than the base.
        assert gaps[0] >= 0.02 * 0.9 - 0.005
        assert gaps[2] > gaps[0]
        assert all(g <= 0.16 * 1.1 + 0.1 for g in gaps), gaps
        assert all(g >= 0.16 * 0.9 - 0.005 for g in gaps[4:]), gaps
        v = checker.verdicts()["example.org"]
        # Every answered query counts one error; a query the stop cancelled in flight (its
        # start is in ``times``) has no answer to count.
        assert v.code is Code.RESOLVER_ERROR and v.errors in (len(times), len(times) - 1)
        assert v.errors >= 8
        assert "refused" in v.reason
        assert checker.stats().errors == v.errors

    run(body)


def test_lb_change_flips_verdicts_without_resolving(dnsmasq: Dnsmasq) -> None:
    async def body() -> None:
        resolver = Counting([dnsmasq.server])
        changes: list[int] = []
        checker = HostChecker(resolver, interval=60, on_change=lambda: changes.append(1))
        checker.update(["app.example.test", "other.example.test"], LB)
        checker.start()
        try:
            await until(checker.settled)
            asked, changes_before = len(resolver.calls), len(changes)
            moved = lb_addresses([lb_service("ingress-nginx", "ingress-nginx",
                                             {"ip": OTHER_IP})])
            checker.update(["app.example.test", "other.example.test"], moved)
            # At once, from the last answers.
            assert codes(checker) == {"app.example.test": "not-this-cluster",
                                      "other.example.test": "verified"}
            assert len(changes) == changes_before + 1
            await asyncio.sleep(0.2)
            assert len(resolver.calls) == asked
            # The same index again changes nothing.
            checker.update(["app.example.test", "other.example.test"], moved)
            assert len(changes) == changes_before + 1
            # ipMode Proxy on our address: skipped, not redirected.
            proxied = lb_addresses([lb_service("ingress-nginx", "ingress-nginx",
                                               {"ip": OTHER_IP, "ipMode": "Proxy"})])
            checker.update(["app.example.test", "other.example.test"], proxied)
            assert codes(checker)["other.example.test"] == "ip-mode-proxy"
            assert len(resolver.calls) == asked
        finally:
            await checker.stop()

    run(body)


def test_load_balancer_hostnames_are_resolved(dnsmasq: Dnsmasq) -> None:
    elb = lb_addresses([lb_service("ing", "elb", {"hostname": "lb.elb.example.test"})])

    async def body() -> None:
        resolver = Counting([dnsmasq.server])
        checker = HostChecker(resolver, interval=60)
        checker.update(["direct.example.test", "alias.example.test", "app.example.test"], elb)
        checker.start()
        try:
            await until(lambda: checker.settled()
                        and "lb.elb.example.test" in [n for _, n in resolver.calls]
                        and checker.lb.lookup(ELB_IP) is not None)
            want = {"direct.example.test": "verified", "alias.example.test": "verified",
                    "app.example.test": "not-this-cluster"}
            await until(lambda: codes(checker) == want, what="the verdicts on the learned address")
            assert checker.stats().lb_checks == 1
            # The hostname leaves the index: its learned address is ours no more.
            checker.update(["direct.example.test", "alias.example.test"], LbIndex())
            assert codes(checker) == {"direct.example.test": "not-this-cluster",
                                      "alias.example.test": "not-this-cluster"}
        finally:
            await checker.stop()

    run(body)


def test_concurrency_is_bounded(black_hole: BlackHole) -> None:
    async def body() -> None:
        inner = make_resolver([black_hole.server], timeout=0.3)
        active = peak = tasks = 0

        class Gauge:
            async def resolve(self, name: str) -> Answers | ResolveError:
                nonlocal active, peak, tasks
                active += 1
                peak = max(peak, active)
                tasks = max(tasks, len([t for t in asyncio.all_tasks() if getattr(
                    t.get_coro(), "__qualname__", "") == "HostChecker._check"]))
                try:
                    return await inner.resolve(name)
                finally:
                    active -= 1

        checker = HostChecker(Gauge(), interval=60, concurrency=3, backoff_base=10)
        checker.update([f"h{i}.example.test" for i in range(20)], LB)
        checker.start()
        try:
            await until(checker.settled, timeout=10)
        finally:
            await checker.stop()
        assert peak == 3
        # Hosts waiting their turn are not tasks: one per lookup under way, no more.
        assert tasks == 3
        assert set(codes(checker).values()) == {"resolver-error"}

    run(body)
