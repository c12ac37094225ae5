"""The measures without a memo of every host: plain names (the usual cluster's) are measured
by a formula of their text, every other name is memoised, and the bytes are exactly
``corefile.rules_bytes`` (and the published and node-local shares) whichever way a host comes:
in one list, one by one, or added and removed through the running sums."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy import corefile
from hairpin_proxy.corefile.rules import plain_rules_bytes
from hairpin_proxy.plan.budget import (
    AnswerSets,
    Limit,
    Measure,
    NodeLocalMeasure,
    PublishedMeasure,
    RulesMeasure,
    measure,
)
from hairpin_proxy.wildcards import wildcard_base

# Characters of plain names, ones the regexes escape, non-ASCII ones, the character that joins
# names inside rules_bytes (\x80), and "\n" and "*" where no name has them.
TEXT = st.text(alphabet=st.sampled_from("ab-_zZ09.+()*\n\u00e9\u4e2d\x80"), max_size=12)
PLAIN_TEXT = st.text(alphabet=st.sampled_from("ab-_zZ09."), max_size=12)
PREFIX = st.sampled_from(["", "", "*.", "**.", "***.", "*", "**", "*.*.", "x*."])
NAME = st.one_of(st.builds(lambda p, t: p + t, PREFIX, TEXT),
                 st.builds(lambda p, t: f"{p}{t}.example.com", st.sampled_from(["", "*.", "**."]),
                           PLAIN_TEXT))
PLAIN = re.compile(r"(?:\*\*?\.)?[-.0-9A-Z_a-z]*")
DEFAULT = corefile.Answers.of(["10.96.0.50"])


def is_plain(host: str) -> bool:
    return PLAIN.fullmatch(host) is not None


def published(host: str) -> int:
    return 2 * (len(host.encode()) + 1)


def node_local(host: str) -> int:
    base = wildcard_base(host)
    return len((host if base is None else base).encode()) + len(":53 ")


def rules(host: str) -> int:
    return corefile.host_rules_bytes((host,))[0]


@settings(max_examples=300, deadline=None)
@given(hosts=st.lists(NAME, max_size=30))
def test_the_formula_is_the_sum_of_the_shares_of_plain_names(hosts: list[str]) -> None:
    got = plain_rules_bytes(hosts)
    if all(map(is_plain, hosts)):
        assert got == sum(corefile.host_rules_bytes(hosts)) == corefile.rules_bytes(hosts)
    else:
        assert got is None
    if hosts:
        # Over a thousand names: measured in parts, the same answer.
        many = hosts * (1100 // len(hosts) + 1)
        assert plain_rules_bytes(many) == (None if got is None else got * (len(many)
                                                                          // len(hosts)))


def memoised_only_what_the_formula_does_not_cover(m: Measure) -> bool:
    if isinstance(m, RulesMeasure):
        return not any(map(is_plain, m._hosts))
    return all(not h.isascii() for h in m._hosts)


@settings(max_examples=200, deadline=None)
@given(hosts=st.lists(NAME.filter(lambda h: "\n" not in h), max_size=40),
       order=st.randoms(use_true_random=False))
def test_each_measure_is_each_names_share_whatever_the_names(hosts: list[str], order: object
                                                             ) -> None:
    """In one list, one by one, or plain names with a few others among a thousand (halved
    until the parts are plain): each name's own share, and only names the formula does not
    cover are memoised."""
    crowd = [f"filler{i}.example.org" for i in range(1000)]
    mixed = [*crowd, *hosts]
    order.shuffle(mixed)  # type: ignore[attr-defined]
    for m, share in ((RulesMeasure(), rules), (PublishedMeasure(), published),
                     (NodeLocalMeasure(), node_local)):
        assert m.hosts(hosts) == sum(map(share, hosts))
        assert [m.host(h) for h in hosts] == [share(h) for h in hosts]
        # Again, from the memo where every name is in it.
        assert m.hosts(hosts) == sum(map(share, hosts))
        assert m.hosts(mixed) == sum(map(share, mixed))
        assert memoised_only_what_the_formula_does_not_cover(m)


def test_a_cluster_of_plain_names_memoises_nothing() -> None:
    hosts = tuple(sorted({f"app{i}.ns{i % 7}.example.com" for i in range(3000)}
                         | {f"*.w{i}.example.com" for i in range(50)}
                         | {f"**.gw{i}.example.net" for i in range(20)}))
    measures = [RulesMeasure(), PublishedMeasure(), NodeLocalMeasure()]
    limits = [Limit(m, 10**9, "") for m in measures]
    sets = AnswerSets(DEFAULT)
    assert measure(hosts, sets, limits, distinct=True)[0] == \
        corefile.rules_bytes([(hosts, DEFAULT)])
    # A pass that removes some and adds others, then a fit over a limit (host by host).
    later = tuple(sorted({*hosts[100:], "new.example.com", "*.new.example.com"}))
    assert measure(later, sets, limits, distinct=True)[0] == \
        corefile.rules_bytes([(later, DEFAULT)])
    half = [Limit(m, corefile.rules_bytes(later) // 2, "") for m in measures]
    assert measure(later, sets, half)[0] == corefile.rules_bytes([(later, DEFAULT)])
    assert all(m._hosts == {} for m in measures)


# A pass: names added, and names taken away (by index into the current ones).
STEP = st.tuples(st.lists(NAME, max_size=8), st.lists(st.integers(0, 1000), max_size=8))


@settings(max_examples=200, deadline=None)
@given(start=st.lists(NAME, max_size=30), steps=st.lists(STEP, max_size=10),
       prune=st.booleans())
def test_the_running_sums_are_rules_bytes_of_the_hosts_present(
        start: list[str], steps: list[tuple[list[str], list[int]]], prune: bool) -> None:
    """Names of every kind added and removed through ``advance``: the running bytes are
    ``rules_bytes`` of the hosts present (and the sum of their shares), the wildcard counts
    those of the hosts present, and only names the formula does not cover are memoised."""
    m = RulesMeasure()
    present: set[str] = set()
    for added, removed in [(start, []), *steps]:
        listed = sorted(present)
        now = (present - {listed[i % len(listed)] for i in removed if listed}) | set(added)
        size, wild, deep = m.advance(None, sorted(now - present), sorted(present - now),
                                     tuple(sorted(now)))
        present = now
        assert size == corefile.rules_bytes(sorted(present)) \
            == sum(corefile.host_rules_bytes(sorted(present)))
        assert wild == sum(h.startswith("*.") for h in present)
        assert deep == sum(h.startswith("**.") for h in present)
        assert memoised_only_what_the_formula_does_not_cover(m)
        if prune:
            m.keep_only(())
