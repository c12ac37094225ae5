"""The checker's kept counts (verdicts by code, kept verdicts, "settled") and its quick way
with host sets it has seen are equal to counting afresh, after any sequence of updates,
lookups, failures and load balancer changes.

The resolver here answers from a table in the test's own process: what is checked is the
bookkeeping, not DNS (tests/verify/test_checker.py does that against dnsmasq).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.verify.checker import HostChecker
from hairpin_proxy.verify.lb import LbIndex, lb_addresses
from hairpin_proxy.verify.verdict import (
    Answers,
    Code,
    ResolveError,
    normalize_host,
    probe_name,
)
from tests.verify.dnsmasq import LB_IP, OTHER_IP
from tests.verify.objects import lb_service
from tests.waiting import until

# Names in several spellings of the same host: the checker keeps one verdict per normal name.
NAMES = ["a.example.test", "A.Example.test", "a.example.test.", " b.example.test ",
         "b.example.test", "c.example.test", "*.w.example.test", "d.example.test",
         "e.example.test", "f.example.test"]
LBS = [LbIndex(), lb_addresses([lb_service("ingress", "nginx", {"ip": LB_IP})]),
       lb_addresses([lb_service("ingress", "nginx", {"ip": OTHER_IP})])]


class Table:
    """Answers by name, changed by the test between rounds; a missing name fails."""

    def __init__(self) -> None:
        self.answers: dict[str, str] = {}
        self.asked: list[str] = []

    async def resolve(self, name: str) -> Answers | ResolveError:
        self.asked.append(name)
        await asyncio.sleep(0)
        address = self.answers.get(name)
        if address is None:
            return ResolveError(name, "timeout", "no answer")
        return Answers(name, (address,))


def asked_since(table: Table, start: int, wanted: set[str]) -> Callable[[], bool]:
    return lambda: wanted <= set(table.asked[start:])


step = st.one_of(
    st.tuples(st.just("update"), st.frozensets(st.sampled_from(NAMES)),
              st.sampled_from(range(len(LBS)))),
    st.tuples(st.just("answers"), st.dictionaries(
        st.sampled_from([normalize_host(n) for n in NAMES if "*" not in n]
                        + ["hairpin-proxy-check-q7x2k9.w.example.test"]),
        st.sampled_from([LB_IP, OTHER_IP]))),
    st.tuples(st.just("check")),
)


def recount(checker: HostChecker) -> tuple[dict[str, int], bool, int]:
    verdicts = checker.verdicts()
    by_code = {c.value: 0 for c in Code}
    for v in verdicts.values():
        by_code[v.code.value] += 1
    kept = sum(1 for v in verdicts.values() if v.kept)
    return by_code, not any(v.code is Code.PENDING for v in verdicts.values()), kept


@settings(max_examples=60, deadline=None)
@given(st.lists(step, max_size=12))
def test_counts_equal_a_fresh_count(steps: list[tuple[object, ...]]) -> None:
    async def body() -> None:
        table = Table()
        # Re-checked all the time, so that a verdict on record meets a failed lookup (kept).
        checker = HostChecker(table, interval=0.01, backoff_base=0.01)
        given_last: frozenset[str] = frozenset()
        for s in steps:
            if s[0] == "update":
                names, lb = s[1], s[2]
                assert isinstance(names, frozenset) and isinstance(lb, int)
                # A list one time, the set the next: the same names in either form.
                checker.update(sorted(names) if lb % 2 else names, LBS[lb])
                given_last = names
            elif s[0] == "answers":
                assert isinstance(s[1], dict)
                table.answers = dict(s[1])
            else:
                start = len(table.asked)
                wanted = {probe_name(h) for h in checker.verdicts()}
                checker.start()
                try:
                    await until(asked_since(table, start, wanted),
                                what="every host looked up again")
                finally:
                    await checker.stop()
            by_code, settled, kept = recount(checker)
            stats = checker.stats()
            assert stats.by_code == by_code
            assert checker.settled() == settled
            assert stats.hosts == len(checker.verdicts())
            assert (stats.oldest_kept_age is None) == (kept == 0 or all(
                v.checked_at is None for v in checker.verdicts().values() if v.kept))
            assert set(checker.verdicts()) == {normalize_host(n) for n in given_last}

    asyncio.run(body())


def test_a_new_spelling_of_known_names_is_normalized() -> None:
    """The quick path (names as given, all normal) hands over to normalizing as soon as one
    name is not normal, and back once all are."""
    checker = HostChecker(Table(), interval=60)
    checker.update(["a.example.test", "b.example.test"], LbIndex())
    checker.update(["a.example.test", "B.example.test."], LbIndex())
    assert set(checker.verdicts()) == {"a.example.test", "b.example.test"}
    checker.update(["a.example.test", "B.example.test.", "c.example.test"], LbIndex())
    assert set(checker.verdicts()) == {"a.example.test", "b.example.test", "c.example.test"}
    checker.update(["c.example.test"], LbIndex())
    assert set(checker.verdicts()) == {"c.example.test"}
    checker.update(["c.example.test", "D.example.test"], LbIndex())
    assert set(checker.verdicts()) == {"c.example.test", "d.example.test"}


def test_the_due_queue_stays_bounded_under_host_churn() -> None:
    """Dropped hosts leave stale entries in the queue of due lookups; churn must not grow it
    without bound, and no stale entry may lead to a lookup of a host that went."""
    async def body() -> None:
        table = Table()
        checker = HostChecker(table, interval=60)
        for round_ in range(10):
            hosts = [f"h{round_}-{i}.example.test" for i in range(100)]
            checker.update(hosts, LbIndex())
            # Every live host is due once; the rest of the queue is stale and kept in check.
            assert len(checker._queue) <= 2 * len(hosts) + 64 + 1
        table.answers = {probe_name(h): LB_IP for h in hosts}
        checker.start()
        try:
            await until(asked_since(table, 0, {probe_name(h) for h in hosts}),
                        what="the last round's hosts looked up")
        finally:
            await checker.stop()
        assert set(table.asked) <= {probe_name(h) for h in hosts}

    asyncio.run(body())
