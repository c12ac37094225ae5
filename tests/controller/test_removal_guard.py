"""The mass-removal guard: pure decisions, then end to end against the API."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy import corefile
from hairpin_proxy.controller.removal_guard import RemovalGuard
from hairpin_proxy.corefile.written import written
from hairpin_proxy.plan.change import Since
from tests.controller import test_plan_equivalence as corpus
from tests.controller.conftest import PROXY_IP, PUBLISH, Controller, corefile_text, wait_until
from tests.fakeapi.fixtures import ingress
from tests.fakeapi.server import FakeApiServer

Start = Callable[..., Controller]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_hosts_come_out_sorted_and_unique_whatever_their_order() -> None:
    guard = RemovalGuard(0.5, 60, False, Clock())
    assert guard.decide(["b", "a", "b"], []) == (("a", "b"), False)
    assert guard.decide(("a", "a", "b"), ["a", "b"]) == (("a", "b"), False)
    assert guard.decide(["c", "b", "a"], ["a", "b", "c"]) == (("a", "b", "c"), False)
    assert guard.decide(("a", "b", "c"), ["a", "b", "c"]) == (("a", "b", "c"), False)


def test_the_plans_sorted_hosts_come_out_as_the_very_tuple() -> None:
    """Hosts that come sorted and distinct as a tuple (the plan's) are written as that very
    tuple, even without the plan's change: the writers then take the plan's answer groups."""
    guard = RemovalGuard(0.5, 60, False, Clock())
    hosts = tuple(f"h{i}.example.com" for i in range(5))
    assert guard.decide(hosts, [])[0] is hosts
    assert guard.decide(hosts, hosts[:3])[0] is hosts
    assert guard.decide(list(hosts), [])[0] == hosts


def test_small_drops_and_growth_pass() -> None:
    guard = RemovalGuard(0.5, 60, False, Clock())
    assert guard.decide(["a", "b", "c"], []) == (("a", "b", "c"), False)
    assert guard.decide(["a", "b"], ["a", "b", "c", "d"]) == (("a", "b"), False)
    assert guard.decide(["a", "x"], ["a", "b"]) == (("a", "x"), False)


def test_drop_to_empty_is_held_until_the_grace_period() -> None:
    clock = Clock()
    guard = RemovalGuard(0.5, 60, False, clock)
    assert guard.decide([], ["a", "b"]) == (("a", "b"), True)
    clock.now += 59
    assert guard.decide([], ["a", "b"]) == (("a", "b"), True)
    assert 0 < guard.release_in() <= 1
    clock.now += 1
    assert guard.decide([], ["a", "b"]) == ((), False)


def test_large_drop_keeps_old_hosts_but_adds_new_ones() -> None:
    clock = Clock()
    guard = RemovalGuard(0.5, 60, False, clock)
    assert guard.decide(["a", "new"], ["a", "b", "c", "d"]) == (("a", "b", "c", "d", "new"),
                                                                True)


def test_withdrawn_drop_resets_the_timer() -> None:
    clock = Clock()
    guard = RemovalGuard(0.5, 60, False, clock)
    assert guard.decide([], ["a"])[1]
    clock.now += 50
    assert guard.decide(["a"], ["a"]) == (("a",), False)
    clock.now += 20
    assert guard.decide([], ["a"]) == (("a",), True)


def test_allow_mass_removal_applies_at_once() -> None:
    assert RemovalGuard(0.5, 60, True, Clock()).decide([], ["a", "b"]) == ((), False)


class OldGuard:
    """The guard's decisions as first written (a set of ``previous`` built on every call),
    against which the shortcuts are checked."""

    def __init__(self, fraction: float, grace: float, allow: bool, clock: Clock) -> None:
        self.fraction, self.grace, self.allow, self.clock = fraction, grace, allow, clock
        self.held_since: float | None = None

    def decide(self, desired: list[str] | tuple[str, ...], previous: list[str] | tuple[str, ...]
               ) -> tuple[tuple[str, ...], bool]:
        prev = set(previous)
        want = tuple(sorted(set(desired)))
        if self.allow or not prev:
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
        return tuple(sorted(prev | set(want))), True


NAMES = st.lists(st.sampled_from("abcdefgh"), max_size=8)


@settings(max_examples=300, deadline=None)
@given(fraction=st.sampled_from([0.0, 0.25, 0.5, 1.0, -0.5]), allow=st.booleans(),
       steps=st.lists(st.tuples(NAMES, st.sampled_from(["last", "written", "tuple", "list"]),
                                NAMES, st.integers(0, 40)), max_size=15))
def test_decisions_are_those_of_the_plain_algorithm(
        fraction: float, allow: bool, steps: list[tuple[list[str], str, list[str], int]]) -> None:
    """Whatever comes as ``previous`` (the same tuple again, the hosts just written, a fresh
    tuple or a list), the guard decides as the plain algorithm does."""
    clock = Clock()
    guard = RemovalGuard(fraction, 30, allow, clock)
    plain = OldGuard(fraction, 30, allow, clock)
    last: tuple[str, ...] = ()
    written: tuple[str, ...] = ()
    for desired, how, other, wait in steps:
        clock.now += wait
        choices: dict[str, list[str] | tuple[str, ...]] = {
            "last": last, "written": written, "tuple": tuple(sorted(set(other))),
            "list": list(other)}
        previous = choices[how]
        if isinstance(previous, tuple):
            last = previous
        desired_in: list[str] | tuple[str, ...] = (
            tuple(sorted(set(desired))) if len(desired) % 2 else desired)
        got = guard.decide(desired_in, previous)
        assert got == plain.decide(desired_in, previous)
        assert guard.held_since == plain.held_since
        written = got[0]


def test_allowed_drops_build_nothing_from_the_previous_hosts() -> None:
    guard = RemovalGuard(0.5, 60, True, Clock())

    def previous() -> Iterator[str]:
        raise AssertionError("previous hosts read although nothing can be held")
        yield ""

    assert guard.decide(["a"], previous()) == (("a",), False)


def keeps_no_hosts(guard: RemovalGuard) -> bool:
    """Whether the guard holds nothing of the hosts between passes (a set of 10,000 of them
    is half a megabyte)."""
    return not [v for v in vars(guard).values()
                if isinstance(v, (set, frozenset, list, tuple, dict))]


def test_nothing_of_the_hosts_is_kept_between_passes() -> None:
    """The same ``previous`` tuple again, the hosts just written coming back as ``previous``,
    a held drop: decided as ever, and no set of the hosts kept after any of them."""
    guard = RemovalGuard(0.5, 60, False, Clock())
    previous = ("a", "b", "c", "d")
    assert guard.decide(("a", "b", "c"), previous) == (("a", "b", "c"), False)
    assert keeps_no_hosts(guard)
    assert guard.decide(("a", "b", "x"), previous) == (("a", "b", "x"), False)
    assert guard.decide(("x",), previous) == (("a", "b", "c", "d", "x"), True)
    assert keeps_no_hosts(guard)
    assert guard.decide(("a", "b", "c", "d"), ("a", "b", "c", "d")) == (previous, False)
    assert guard.held_since is None
    written, _ = guard.decide(["c", "a", "b", "a"], ("a",))
    assert written == ("a", "b", "c")
    assert guard.decide(("a", "b", "c", "d"), written) == (("a", "b", "c", "d"), False)
    assert guard.decide(("d",), written) == (("a", "b", "c", "d"), True)
    assert keeps_no_hosts(guard)


def test_a_decision_from_the_plans_change_reads_only_the_change() -> None:
    guard = RemovalGuard(0.5, 60, False, Clock())
    written, _ = guard.decide(["a", "b", "c"], ())
    now = ("a", "b", "c", "d")
    since = Since(written, {}, corefile.Answers(), written, ("d",))
    assert guard.decide(now, written, since) == (now, False)
    assert keeps_no_hosts(guard)
    # Decided as before from then on, without a change to go by too.
    assert guard.decide(("d",), now) == (("a", "b", "c", "d"), True)
    # A drop the change tells: held as the plain algorithm holds it.
    gone = Since(now, {}, corefile.Answers(), now, ("a", "b", "c"))
    assert guard.decide(("d",), now, gone) == (("a", "b", "c", "d"), True)


@settings(max_examples=300, deadline=None)
@given(fraction=st.sampled_from([0.0, 0.25, 0.5, 1.0, -0.5]), allow=st.booleans(),
       steps=st.lists(st.tuples(NAMES, st.sampled_from(["last plan", "written", "tuple",
                                                        "list"]),
                                NAMES, st.booleans(), NAMES, st.integers(0, 40)),
                      max_size=15))
def test_decisions_from_the_plans_change_are_those_of_the_plain_algorithm(
        fraction: float, allow: bool,
        steps: list[tuple[list[str], str, list[str], bool, list[str], int]]) -> None:
    """Passes with the plan's change (the last plan's hosts, every host that came or went
    and others) or without, whatever ``previous`` is: the plain algorithm's decisions, and
    no set of the hosts kept after any pass."""
    clock = Clock()
    guard = RemovalGuard(fraction, 30, allow, clock)
    plain = OldGuard(fraction, 30, allow, clock)
    last_plan: tuple[str, ...] = ()
    written: tuple[str, ...] = ()
    for desired, how, other, told, extra, wait in steps:
        clock.now += wait
        want = tuple(sorted(set(desired)))
        choices: dict[str, list[str] | tuple[str, ...]] = {
            "last plan": last_plan, "written": written, "tuple": tuple(sorted(set(other))),
            "list": list(other)}
        previous = choices[how]
        since = None
        if told:
            touched = set(want).symmetric_difference(last_plan) | set(extra)
            since = Since(last_plan, {}, corefile.Answers(), last_plan,
                          tuple(sorted(touched)))
        got = guard.decide(want, previous, since)
        assert got == plain.decide(want, previous)
        assert guard.held_since == plain.held_since
        assert keeps_no_hosts(guard)
        last_plan, written = want, got[0]


class Limits:
    """A plan's size limits: ``refused`` the hosts a limit refused, and at most ``room``
    hosts fit."""

    def __init__(self, refused: Iterable[str] = (), room: int = 1000) -> None:
        self.refused, self.room = frozenset(refused), room
        self.measured: list[tuple[str, ...]] = []

    def limited(self) -> frozenset[str]:
        return self.refused

    def fits(self, hosts: Sequence[str]) -> bool:
        self.measured.append(tuple(hosts))
        return len(hosts) <= self.room


def test_hosts_a_size_limit_refused_are_no_drop() -> None:
    """Three of four hosts go, but a size limit refused them (an older object took the
    room): written at once, nothing held."""
    guard = RemovalGuard(0.5, 60, False, Clock())
    limits = Limits(refused={"b", "c", "d"})
    assert guard.decide(("a", "x"), ("a", "b", "c", "d"), None, limits) == (("a", "x"), False)
    assert guard.held_since is None
    # Whatever the previous hosts come as: the plan's change, or a list.
    since = Since(("a", "b", "c", "d"), {}, corefile.Answers(), ("a", "b", "c", "d"),
                  ("b", "c", "d", "x"))
    assert guard.decide(("a", "x"), ("a", "b", "c", "d"), since, limits) == (("a", "x"),
                                                                            False)
    assert guard.decide(["x", "a"], ["d", "c", "b", "a"], None, limits) == (("a", "x"), False)


def test_a_genuine_drop_beside_refused_hosts_is_held_without_them() -> None:
    """Judged on what the limits left: two of a, c, d go (more than half), so they are held;
    b, refused by a limit, goes at once."""
    guard = RemovalGuard(0.5, 60, False, Clock())
    got = guard.decide(("a",), ("a", "b", "c", "d"), None, Limits(refused={"b"}))
    assert got == (("a", "c", "d"), True)


def test_an_empty_list_is_held_with_the_limits_in_place() -> None:
    """The API answering with no object at all, a class gone: held as ever."""
    clock = Clock()
    guard = RemovalGuard(0.5, 60, False, clock)
    assert guard.decide((), ("a", "b"), None, Limits()) == (("a", "b"), True)
    assert guard.decide(("c",), ("a", "b"), None, Limits()) == (("a", "b", "c"), True)
    clock.now += 60
    assert guard.decide(("c",), ("a", "b"), None, Limits()) == (("c",), False)


def test_new_hosts_wait_where_they_do_not_fit_beside_the_held_ones() -> None:
    """a, b and c go; x, refused before, now fits the plan's room. With the held hosts it
    would not: the old rules stay and x waits for the hold to end."""
    clock = Clock()
    guard = RemovalGuard(0.5, 60, False, clock)
    limits = Limits(room=3)
    assert guard.decide(("x",), ("a", "b", "c"), None, limits) == (("a", "b", "c"), True)
    assert guard.waiting == 1
    assert limits.measured == [("a", "b", "c", "x"), ("a", "b", "c")]
    clock.now += 60
    assert guard.decide(("x",), ("a", "b", "c"), None, limits) == (("x",), False)
    assert guard.waiting == 0


def test_old_rules_past_a_limit_cannot_be_held() -> None:
    """The limits shrank below what the rules hold now: only the plan's hosts fit, and the
    drop goes through (said in the log)."""
    guard = RemovalGuard(0.5, 60, False, Clock())
    assert guard.decide(("x",), ("a", "b", "c"), None, Limits(room=2)) == (("x",), False)
    assert guard.too_big and guard.held_since is None


def test_limits_are_measured_only_for_a_drop_to_hold() -> None:
    guard = RemovalGuard(0.5, 60, False, Clock())
    limits = Limits(refused={"b"})
    assert guard.decide(("a", "b", "c"), ("a", "b"), None, limits) == (("a", "b", "c"), False)
    assert guard.decide(("a", "c"), ("a", "b", "c"), None, limits) == (("a", "c"), False)
    assert limits.measured == []


@settings(max_examples=300, deadline=None)
@given(fraction=st.sampled_from([0.0, 0.5, 1.0]), room=st.integers(0, 8),
       steps=st.lists(st.tuples(NAMES, NAMES, NAMES, st.integers(0, 40)), max_size=12))
def test_what_is_written_never_goes_past_a_limit(
        fraction: float, room: int, steps: list[tuple[list[str], list[str], list[str], int]]
        ) -> None:
    """Whatever the plan wants (within its limits) and refused, and whatever the rules hold:
    what is written fits wherever the plan's hosts do, and holds no host a limit refused."""
    clock = Clock()
    guard = RemovalGuard(fraction, 30, False, clock)
    for desired, refused, previous, wait in steps:
        clock.now += wait
        want = tuple(sorted(set(desired)))[:room]
        limits = Limits(set(refused).difference(want), room)
        got, held = guard.decide(want, tuple(sorted(set(previous))), None, limits)
        assert len(got) <= room
        assert not limits.refused.intersection(got)
        assert set(want) <= set(got) or held


def test_guard_holds_then_releases_end_to_end(cluster: FakeApiServer, start: Start) -> None:
    for name in ("a", "b", "c", "d"):
        cluster.create(ingress(name, name, tls_hosts=[f"{name}.example.com"]))
    everything = ("a.example.com", "b.example.com", "c.example.com", "d.example.com")
    ctl = start("--mass-removal-grace", "4")
    ctl.wait_ready()
    wait_until(lambda: corefile.managed_hosts(corefile_text(cluster)) == everything,
               what="four hosts")
    dropped = time.monotonic()  # before the controller can see the drop: a lower bound
    for name in ("a", "b", "c"):
        cluster.delete("Ingress", name, name)
    wait_until(lambda: ctl.metric("hairpin_controller_mass_removal_held") == 1,
               what="drop held")
    assert corefile.managed_hosts(corefile_text(cluster)) == everything
    assert any(str(r.get("msg")).startswith("large drop in hosts held back")
               for r in ctl.records())
    wait_until(lambda: corefile.managed_hosts(corefile_text(cluster)) == ("d.example.com",),
               timeout=30, what="drop released")
    assert time.monotonic() - dropped >= 4
    assert ctl.metric("hairpin_controller_mass_removal_held") == 0


def test_guard_starts_from_what_the_block_holds(cluster: FakeApiServer, start: Start) -> None:
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    cluster.create(ingress("b", "b", tls_hosts=["b.example.com"]))
    first = start()
    first.wait_ready()
    assert first.stop() == 0
    # Restarted while every Ingress is gone (say, a broken list filter): nothing is removed.
    cluster.delete("Ingress", "a", "a")
    cluster.delete("Ingress", "b", "b")
    ctl = start()
    ctl.wait_ready()
    wait_until(lambda: ctl.metric("hairpin_controller_mass_removal_held") == 1,
               what="drop held at start")
    assert corefile.managed_hosts(corefile_text(cluster)) == ("a.example.com", "b.example.com")


def import_hosts(api: FakeApiServer) -> tuple[str, ...]:
    cm = api.get("ConfigMap", "kube-system", "coredns-custom")
    snippet = ((cm or {}).get("data") or {}).get("hairpin-proxy.override", "")
    return corefile.managed_hosts(f".:53 {{\n{snippet}}}\n") if snippet else ()


@pytest.mark.parametrize("publish", [False, True], ids=["default", "published"])
def test_in_import_mode_the_guard_starts_from_what_the_key_holds(
        cluster: FakeApiServer, start: Start, publish: bool) -> None:
    """The imported key is read back where nothing is published; where the hosts are
    published, they tell what it holds (written right after it)."""
    flags = ("--mode", "coredns-import", *(PUBLISH if publish else ()))
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    cluster.create(ingress("b", "b", tls_hosts=["b.example.com"]))
    first = start(*flags)
    first.wait_ready()
    wait_until(lambda: import_hosts(cluster) == ("a.example.com", "b.example.com"),
               what="both hosts written")
    assert first.stop() == 0
    cluster.delete("Ingress", "a", "a")
    cluster.delete("Ingress", "b", "b")
    ctl = start(*flags)
    ctl.wait_ready()
    wait_until(lambda: ctl.metric("hairpin_controller_mass_removal_held") == 1,
               what="drop held at start")
    assert import_hosts(cluster) == ("a.example.com", "b.example.com")


def rules_written(api: FakeApiServer) -> list[tuple[tuple[str, ...], int]]:
    """Every Corefile the fake API was given, oldest first: the hosts our rules hold, and
    their bytes as the rules' limit measures them (as written)."""
    out = []
    for _, cm in api.changes("ConfigMap", "kube-system"):
        if cm["metadata"]["name"] != "coredns":
            continue
        groups: dict[corefile.Answers, list[str]] = {}
        for host, answers in corefile.managed_groups(cm["data"]["Corefile"]).items():
            groups.setdefault(answers, []).append(host)
        out.append((tuple(sorted(h for hs in groups.values() for h in hs)),
                    written({a: sorted(hs) for a, hs in groups.items()}).size))
    return out


def test_hosts_a_size_limit_takes_away_are_no_drop_to_hold(
        cluster: FakeApiServer, start: Start, tmp_path: Path) -> None:
    """Corpus case 26 at --rules-budget 700, the guard on: the first write holds the main
    Service's hosts (team1, 3, 5) while the slot's Service is made; once it has its address,
    the older team0 on the slot takes the room and the budget refuses team3 and team5. The
    budget took them away, not an accident: they go at once, the rules never go past the
    budget, and they end as render prints them."""
    case = {**corpus.load(corpus.CORPUS / "26-over-budget-two-targets.yaml"),
            "args": ["--rules-budget", "700"]}
    corpus.setup(cluster, case)
    ctl = start("--target-settle", "0", "--gateway-api", "off", *PUBLISH, *case["args"])
    ctl.wait_ready()
    want = tuple(sorted(f"host{i}.team{t}.example.com" for t in (0, 1) for i in range(8)))

    def settled() -> bool:
        wrote = corpus.written(cluster, "coredns")
        return (corefile.managed_hosts(wrote["rules"]) == want and wrote == corpus.rendered(
            tmp_path, case, corpus.inputs(cluster, case), "coredns"))

    wait_until(settled, 60, "the 16 hosts render prints", interval=0.2)
    history = rules_written(cluster)
    # The case is what it says: hosts written first were taken away by the budget.
    assert any("host0.team3.example.com" in hosts for hosts, _ in history), history
    assert max(size for _, size in history) <= 700, history
    assert ctl.metric("hairpin_controller_mass_removal_held") == 0
    assert not any(str(r.get("msg")).startswith("large drop") for r in ctl.records())


def test_a_held_drop_never_takes_the_rules_past_a_limit(cluster: FakeApiServer,
                                                        start: Start) -> None:
    """A genuine drop at the budget: the two older Ingresses go, which makes room for the
    newer one the budget refused. The old rules are held back, and the new hosts wait for
    the hold to end rather than take the rules past the budget with them."""
    def hosts(*names: str) -> list[str]:
        return sorted(f"host{i}.{n}.example.com" for n in names for i in range(4))

    answers = corefile.Answers.of((PROXY_IP,), 10)
    two, three = (written({answers: hosts(*ns)}).size for ns in (("a", "b"), ("a", "b", "c")))
    budget = (two + three) // 2
    for name in ("a", "b", "c"):
        if name == "c":
            cluster.next_second()  # newer: the one the budget refuses
        cluster.create(ingress(name, name, tls_hosts=hosts(name)))
    ctl = start("--mass-removal-grace", "4", "--rules-budget", str(budget))
    ctl.wait_ready()
    older = tuple(hosts("a", "b"))
    wait_until(lambda: ctl.metric("hairpin_controller_ingresses_over_budget") == 1
               and corefile.managed_hosts(corefile_text(cluster)) == older,
               what="a and b written, c refused")
    for name in ("a", "b"):
        cluster.delete("Ingress", name, name)
    wait_until(lambda: ctl.metric("hairpin_controller_mass_removal_held") == 1,
               what="drop held")
    assert corefile.managed_hosts(corefile_text(cluster)) == older
    wait_until(lambda: corefile.managed_hosts(corefile_text(cluster)) == tuple(hosts("c")),
               timeout=30, what="drop released, c written")
    assert max(size for _, size in rules_written(cluster)) <= budget
    assert ctl.metric("hairpin_controller_mass_removal_held") == 0
