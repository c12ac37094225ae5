"""The rules' bytes as written (``corefile.written``): the bytes of the stanza pairs the
renderer writes, whatever steps led to the value, and the compact rules answer as the plain
ones also where a form takes many regexes (hypothesis)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.corefile import Answers, apply, managed_groups, rules
from hairpin_proxy.corefile.written import Written, _Edited, written
from tests.corefiles import BY_NAME
from tests.corefiles.oracle import plain
from tests.test_corefile_compact import ANSWERS, HOST, QTYPES, ask, probes

ROOT = BY_NAME["kubeadm"]
# Long first labels, few domains: a form of a few hundred of them takes several regexes, and
# some of its names start a regex of their own.
LONG = st.builds(lambda n, pad, domain: f"{pad}{n}-{'x' * 30}.{domain}",
                 st.integers(0, 5000), st.sampled_from(["c", "customer-", "pr-", "web"]),
                 st.sampled_from(["shop.example.com", "example.org", "a.b.example.net"]))
MANY = st.one_of(LONG, LONG, LONG, HOST, LONG.map(lambda n: "*." + n))


def owners(owned: list[tuple[str, int]]) -> dict[str, int]:
    """Each host (case aside) → the answer set that named it first."""
    out: dict[str, int] = {}
    for host, k in owned:
        out.setdefault(host.lower(), k)
    return out


def sets_of(owner: dict[str, int]) -> dict[Answers, list[str]]:
    out: dict[Answers, list[str]] = {}
    for host, k in sorted(owner.items()):
        out.setdefault(ANSWERS[k], []).append(host)
    return out


def groups_of(owned: list[tuple[str, int]]) -> dict[Answers, list[str]]:
    """Each host in one answer set (the first that named it, case aside), sorted."""
    return sets_of(owners(owned))


def rendered(groups: dict[Answers, list[str]]) -> int:
    """The bytes of every answer set's stanza pair as the renderer writes it."""
    return sum(len(rules.stanzas(hosts, answers, "    ", "    ", "\n").encode())
               for answers, hosts in groups.items())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(MANY, st.sampled_from(range(len(ANSWERS)))), max_size=700))
def test_the_bytes_are_those_the_renderer_writes(owned: list[tuple[str, int]]) -> None:
    groups = groups_of(owned)
    assert written(groups).size == rendered(groups)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(MANY, st.sampled_from(range(len(ANSWERS)))), max_size=600),
       st.lists(st.tuples(st.lists(st.tuples(MANY, st.sampled_from(range(len(ANSWERS)))),
                                   max_size=40),
                          st.integers(0, 40)), max_size=6))
def test_steps_give_what_a_fresh_rendering_gives(owned: list[tuple[str, int]],
                                                  steps: list[tuple[list[tuple[str, int]],
                                                                    int]]) -> None:
    """Hosts added, moved between answer sets and taken away, a few or many at a time: the
    value is the one a fresh rendering of the result gives, regex for regex."""
    current = owners(owned)
    value = written(sets_of(current))
    for new, drop in steps:
        before = {h: ANSWERS[k] for h, k in current.items()}
        for host in sorted(current)[:drop]:
            del current[host]
        current.update((h.lower(), k) for h, k in new)
        after = {h: ANSWERS[k] for h, k in current.items()}
        added: dict[Answers, list[str]] = {}
        removed: dict[Answers, list[str]] = {}
        for host in {*before, *after}:
            if before.get(host) != after.get(host):
                if host in before:
                    removed.setdefault(before[host], []).append(host)
                if host in after:
                    added.setdefault(after[host], []).append(host)
        value = value.grown(added, removed)
        assert value == written(sets_of(current))
        assert value.size == rendered(sets_of(current))


def test_nothing_written_takes_nothing() -> None:
    assert Written().size == 0
    assert written({}).size == 0


def generated(seed: int, count: int) -> list[tuple[str, int]]:
    """``count`` long names over three domains in three answer sets, made from ``seed``:
    several regexes per form (hypothesis would build lists this long slowly, one by one)."""
    rnd = random.Random(seed)
    heads = ["c", "customer-", "pr-", "web", "*.c", "*.web"]
    domains = ["shop.example.com", "example.org", "a.b.example.net"]
    return [(f"{rnd.choice(heads)}{rnd.randrange(5000)}-{'x' * 30}.{rnd.choice(domains)}",
             rnd.randrange(len(ANSWERS))) for _ in range(count)]


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 2**32), st.integers(500, 800))
def test_compact_rules_of_many_regexes_answer_as_the_plain_ones(seed: int, count: int) -> None:
    owned = generated(seed, count)
    groups = groups_of(owned)
    compact_text = apply(ROOT.text, [(hosts, a) for a, hosts in groups.items()])
    plain_text = plain(compact_text)
    assert managed_groups(compact_text) == managed_groups(plain_text)
    # A form takes several regexes (what the smaller cases of test_corefile_compact never see).
    assert any(len(rules.match_regexes(hosts)) > 1 for hosts in groups.values())
    names = sorted(probes([h for hosts in groups.values() for h in hosts]))
    # A sample of the names around the hosts (all of them would take minutes).
    for name in names[::7] + names[:20] + names[-20:]:
        for qtype in QTYPES:
            assert ask(compact_text, name, qtype) == ask(plain_text, name, qtype), (name, qtype)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 10_000), min_size=1, max_size=6), max_size=6),
       st.integers(0, 40), st.booleans(), st.data())
def test_a_steps_names_read_a_slice_at_a_time_are_the_edited_list(
        sizes: list[list[int]], at: int, inserted: bool, data: st.DataObject) -> None:
    """A step reads the names of a form with one put in or taken out through a view over its
    regexes (``_Edited``): every slice and item is the edited list's."""
    names = sorted({f"n{v:05}" for chunk in sizes for v in chunk})
    chunks, starts = [], [0]
    for size in (len(c) for c in sizes):
        if starts[-1] < len(names):
            chunks.append(tuple(names[starts[-1]:starts[-1] + size]))
            starts.append(starts[-1] + len(chunks[-1]))
    if not inserted and not names:
        return
    j = min(at, len(names) - (0 if inserted else 1))
    host = f"n{names[j - 1][1:] if j else ''}~" if inserted else names[j]
    edited = [*names[:j], host, *names[j:]] if inserted else names[:j] + names[j + 1:]
    view = _Edited(tuple(chunks), starts, j, host, inserted)
    assert len(view) == len(edited)
    lo = data.draw(st.integers(0, len(edited) + 2))
    hi = data.draw(st.integers(0, len(edited) + 2))
    assert view[lo:hi] == edited[lo:hi]
    assert [view[i] for i in range(len(edited))] == edited
