"""The pass's change (plan/change.py) and what reads it: after every event of random sequences,
the incremental plan's ``Since`` keeps its promise, and the size limits, the removal guard
(its held drops and grace), the answer groups (content and order) and the log's counts decide
as their plain computation does, whether the rules hold what the last pass wrote or not (a
foreign edit, a failed write, a drop held back)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy import corefile
from hairpin_proxy.controller.removal_guard import RemovalGuard
from hairpin_proxy.controller.writers import Desired, Held
from hairpin_proxy.controller.writers.published import addresses_of, moved_since, routed_addresses
from hairpin_proxy.corefile.names import one_edit
from hairpin_proxy.plan import PlanSettings, Snapshot, plan
from hairpin_proxy.plan.answers import answer_groups
from hairpin_proxy.plan.core import DesiredState
from hairpin_proxy.plan.incremental import Planner, _carried, _changes
from hairpin_proxy.plan.snapshot import Rooms
from hairpin_proxy.policy import HostPolicy
from hairpin_proxy.published import EntriesText, entries_text
from hairpin_proxy.verify.verdict import Code, Verdict
from tests.test_plan_incremental import (
    HOSTS,
    RELIST,
    TIMES,
    Key,
    base_objects,
    events,
    ingress,
    same,
    snapshot,
)

# What the rules hold as the next pass starts: what this pass wrote, what it meant to write
# but did not (a failed write, a lost lease), or someone's edit of them.
HOW = st.sampled_from(["written", "written", "written", "failed", "foreign", "emptied"])


# Mostly Ingresses coming and going (the guard's drops need hosts to drop), among every event
# the incremental plan's own test makes.
NAMES = st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["x0", "x1", "x2", "x3", "x4"]))
CHANGES = st.one_of(
    st.builds(lambda n, h: (("Ingress", *n), ingress(n[0], n[1], [h], None, created=TIMES[0],
                                                      uid=0)),
              NAMES, st.sampled_from(HOSTS[:3])),
    st.builds(lambda n, h: (("Ingress", *n), ingress(n[0], n[1], h, None, created=TIMES[0],
                                                      uid=0)),
              NAMES, st.lists(st.sampled_from(HOSTS), min_size=1, max_size=2)),
    st.builds(lambda n: (("Ingress", *n), None), NAMES),
    events)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def with_rooms(snap: Snapshot, budget: int | None, node_local: bool) -> Snapshot:
    if budget is None:
        return snap
    others = [("published hosts", "published", budget * 2, "hairpin-proxy/published")]
    if node_local:
        others.append(("node-local-dns rules", "node-local", budget, "kube-system/nld"))
    return Snapshot(**{**snap.__dict__,
                       "rooms": Rooms(budget, "kube-system/coredns", tuple(others))})


def kept_promise(state: DesiredState, last: DesiredState | None) -> None:
    """Every host outside ``touched`` is in both passes' hosts or neither, answered alike."""
    since = state.since
    if since is None:
        return
    assert last is not None and since.hosts is last.hosts
    assert since.candidates is last.measured and since.answers is last.routed.answers
    before, now, touched = set(since.hosts), set(state.hosts), set(since.touched)
    for host in (before | now) - touched:
        assert (host in before) == (host in now), host
        if host in now:
            assert since.answers.get(host, since.default) == state.routed.answers.get(
                host, state.default_answers)


def previous_of(how: str, before: tuple[str, ...], hosts: tuple[str, ...]) -> tuple[str, ...]:
    """What the rules hold after a pass that meant to write ``hosts`` over ``before``."""
    if how == "failed":
        return before
    if how == "foreign":
        return tuple(sorted({*hosts[1:], "foreign.example.org"}))
    if how == "emptied":
        return ()
    return hosts


# A verdict's change between passes, as the host checker makes them: a host judged (again),
# or forgotten; the hosts it holds keep their order, new ones come last.
VERDICT = st.one_of(
    st.none(),
    st.tuples(st.sampled_from(HOSTS[:3]), st.sampled_from([Code.VERIFIED, Code.VERIFIED,
                                                          Code.NOT_THIS_CLUSTER])),
    st.tuples(st.sampled_from(HOSTS), st.sampled_from(list(Code))),
    st.tuples(st.sampled_from(HOSTS), st.none()))


def judged(verdicts: dict[str, Verdict], change: tuple[str, Code | None] | None
           ) -> Mapping[str, Verdict]:
    """The checker's verdicts after ``change``: a copy, as it hands them to each pass."""
    if change is not None:
        host, code = change
        if code is None:
            verdicts.pop(host, None)
        else:
            verdicts[host] = Verdict(host, code, f"{host} is {code}")
    return MappingProxyType(dict(verdicts))


def kept_groups(state: DesiredState, last: DesiredState | None) -> None:
    """What the answer groups say of how they were made is true: a step is one host
    inserted or deleted at its index (as ``one_edit`` finds it), and a group of the same
    hosts as the last pass's is that very tuple when the groups were updated."""
    groups = state.groups()
    if not isinstance(groups, corefile.Stepped):
        return
    assert last is not None
    before = {answers: hosts for hosts, answers in last.groups()}
    for old, new, i in ((o, n, groups.steps[id(o), id(n)]) for o, n in groups.held):
        assert one_edit(old, new) == i
    for hosts, answers in groups:
        if before.get(answers) == hosts:
            assert before[answers] is hosts


@settings(max_examples=200, deadline=None)
@given(st.tuples(st.sampled_from([0.0, 90.0]), st.sampled_from([0, 1, 32]),
                 st.one_of(st.none(), st.integers(150, 1500), st.just(1 << 20))),
       st.sampled_from([0.0, 0.25, 0.5, -0.5]), st.booleans(), st.booleans(),
       st.lists(st.tuples(CHANGES, HOW, st.booleans(), st.integers(0, 40), VERDICT),
                min_size=3, max_size=30))
def test_every_shortcut_decides_as_the_plain_computation(
        chosen: tuple[float, int, int | None], fraction: float, allow: bool, verify: bool,
        sequence: list[tuple[tuple[Key, dict[str, Any] | None], str, bool, int,
                             tuple[str, Code | None] | None]]) -> None:
    """With host verification on, the verdicts change between passes too, and what the rules
    hold decides for hosts whose verdict says nothing yet."""
    settle, slots, budget = chosen
    s = PlanSettings(HostPolicy(), settle=settle, max_targets=slots, verify_hosts=verify)
    verdicts: dict[str, Verdict] = {}
    base = base_objects()
    objects: dict[Key, dict[str, Any]] = {}
    planner, clock = Planner(), Clock()
    guard, plain = (RemovalGuard(fraction, 30, allow, clock) for _ in range(2))
    entries = EntriesText()
    written: tuple[str, ...] = ()
    last: DesiredState | None = None
    for version, ((key, obj), how, node_local, wait, verdict) in enumerate(sequence):
        if key == RELIST:
            objects = {k: copy.deepcopy(o) for k, o in objects.items()}
        elif obj is None:
            objects.pop(key, None)
        else:
            objects[key] = copy.deepcopy(obj)
            objects[key]["metadata"]["resourceVersion"] = str(version)
        snap = with_rooms(snapshot(base, objects, s, None), budget, node_local)
        if verify:
            snap = dataclasses.replace(snap, verdicts=judged(verdicts, verdict),
                                       held_hosts=written)
        state = planner.plan(snap)
        same(state, plan(snap))
        kept_promise(state, last)
        clock.now += wait
        got = guard.decide(state.hosts, written, state.since)
        assert got == plain.decide(state.hosts, written)
        assert guard.held_since == plain.held_since
        hosts = got[0]
        assert state.groups() == answer_groups(state.hosts, state.default_answers,
                                               state.routed.answers)
        kept_groups(state, last)
        desired = Desired(hosts, state.default_answers, Held(None, written),
                          routed=state.routed.answers,
                          since=state.since if hosts is state.hosts else None,
                          grouped=state.groups() if hosts is state.hosts else None)
        assert desired.groups() == answer_groups(hosts, state.default_answers,
                                                 state.routed.answers)
        had = set(written)
        kept = len(had.intersection(hosts))
        assert desired.counts() == (len(hosts) - kept, len(had) - kept)
        assert entries.text(hosts, addresses_of(state.default_answers),
                            routed_addresses(state.routed.answers),
                            moved_since(desired.since, entries, hosts)) \
            == entries_text(desired.entries())
        written = previous_of(how, written, hosts)
        last = state


def test_a_lone_new_ingress_is_planned_from_the_change() -> None:
    """The case the change is for: one more Ingress next to many is measured, grouped and
    guarded from that one host (the plain computations would give the same: above)."""
    s = PlanSettings(HostPolicy(), settle=0.0)
    objects = {("Ingress", "a", f"x{i}"): ingress("a", f"x{i}", [f"h{i}.example.com"], None,
                                                  created="2026-01-01T00:00:00Z", uid=0)
               for i in range(100)}
    planner = Planner()
    base = base_objects()
    first = planner.plan(with_rooms(snapshot(base, objects, s, None), 1 << 20, False))
    assert first.since is None
    objects[("Ingress", "a", "new")] = ingress("a", "new", ["new.example.com"], None,
                                               created="2026-01-02T00:00:00Z", uid=0)
    state = planner.plan(with_rooms(snapshot(base, objects, s, None), 1 << 20, False))
    assert state.since is not None and state.since.touched == ("new.example.com",)
    assert state.since.split(state.hosts) == (["new.example.com"], [])
    measures = planner._measures
    assert measures["rules"].hosts_of is state.candidates
    # The sums are of those hosts, and no set of them is kept (half a megabyte at 10,000).
    assert measures["published"].hosts_of is state.candidates
    assert measures["rules"].present is None and measures["published"].present is None
    assert measures["rules"].last_set() == set(state.hosts)
    guard = RemovalGuard(0.0, 30, False)
    # Every host was written by the last pass: the one new host is all the guard looks at.
    assert guard.decide(state.hosts, first.hosts, state.since) == (state.hosts, False)
    assert not [v for v in vars(guard).values() if isinstance(v, (set, frozenset, tuple))]


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 12), st.lists(st.tuples(st.sampled_from(["add", "delete", "replace",
                                                                "swap"]),
                                              st.integers(0, 20)), max_size=4))
def test_the_objects_that_changed_are_those_a_set_comparison_finds(
        size: int, edits: list[tuple[str, int]]) -> None:
    """``_changes`` (positions compared, a lone deletion as a shift) against sets of
    objects: what a cache's list looks like after adds, deletions, replacements and a
    reordering; ``_carried`` lays out what was kept per object as the objects went."""
    old: list[dict[str, object]] = [{"n": i} for i in range(size)]
    now = list(old)
    for what, at in edits:
        if what == "add":
            now.append({"n": "new"})
        elif now and what == "delete":
            del now[at % len(now)]
        elif now and what == "swap":
            # The same objects in another order (nothing new, nothing gone).
            i, j = at % len(now), (at + 1) % len(now)
            now[i], now[j] = now[j], now[i]
        elif now:
            now[at % len(now)] = {"n": "changed"}
    gone_at, new, layout = _changes(old, now)
    gone = [old[i] for i in gone_at]
    # Each object neither new nor gone is carried from where it was: ``made`` (one item per
    # object) follows the objects.
    carried = _carried(list(old), layout, len(now))
    assert len(carried) == len(now)
    assert all(carried[i] is now[i] for i in range(len(now)) if i not in new)
    before, after = {id(o) for o in old}, {id(o) for o in now}
    # Every object that went is told gone, every new one new; one told both (moved: the
    # positions compared) is forgotten and read again, which changes nothing.
    assert {id(o) for o in gone} >= before - after
    assert {id(now[i]) for i in new} >= after - before
    assert {id(o) for o in gone} & after == {id(now[i]) for i in new} & before
    assert len(new) == len(set(new)) and len(gone) == len({id(o) for o in gone})
    if len(before - after) == 1 and after <= before:
        # A lone deletion: that object alone.
        assert [id(o) for o in gone] == list(before - after) and new == []
