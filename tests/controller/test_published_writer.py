"""The published hosts writer's entries, kept host by host between passes: the same text as
``entries_text`` of the pass's ``Desired.entries()``, whatever the passes. Through the
controller: tests/controller/test_published*.py and the etchosts tests."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy import corefile
from hairpin_proxy.controller.writers import Desired, Held
from hairpin_proxy.controller.writers.published import addresses_of, moved_since, routed_addresses
from hairpin_proxy.plan.change import Since
from hairpin_proxy.published import EntriesText, entries_text

NAMES = [f"h{i}.example.com" for i in range(10)] + ["*.w.example.com", "H1.example.com"]
A = corefile.Answers.of(["10.96.0.50"])
A_AGAIN = corefile.Answers.of(["10.96.0.50"])
B = corefile.Answers.of(["10.96.0.51", "fd00::51"])
NONE = corefile.Answers()
PASS = st.tuples(st.lists(st.sampled_from(NAMES), unique=True).map(sorted),
                 st.sampled_from([A, B, NONE]),
                 st.dictionaries(st.sampled_from(NAMES), st.sampled_from([A, A_AGAIN, B, NONE]),
                                 max_size=5))


@settings(max_examples=200, deadline=None)
@given(passes=st.lists(PASS, min_size=1, max_size=10))
def test_the_writers_entries_are_those_of_the_pass(
        passes: list[tuple[list[str], corefile.Answers, dict[str, corefile.Answers]]]) -> None:
    kept = EntriesText()
    for hosts, default, routed in passes:
        desired = Desired(tuple(hosts), default, Held(None, ()), routed=routed)
        assert kept.text(desired.hosts, addresses_of(default), routed_addresses(routed)) \
            == entries_text(desired.entries())


@settings(max_examples=200, deadline=None)
@given(passes=st.lists(st.tuples(PASS, st.lists(st.sampled_from(NAMES)), st.booleans()),
                       min_size=1, max_size=10))
def test_the_plans_change_gives_the_entries_of_the_pass(
        passes: list[tuple[tuple[list[str], corefile.Answers, dict[str, corefile.Answers]],
                           list[str], bool]]) -> None:
    """With the plan's change (``Since``: every host that came or went is among those it
    names, with others) the writer's entries are still those of the pass; a change that
    starts at other hosts than the last value's is not used."""
    kept = EntriesText()
    last: tuple[str, ...] = ()
    for (hosts, default, routed), extra, elsewhere in passes:
        now = tuple(hosts)
        start = (*last, "other.example.com") if elsewhere else last
        touched = tuple(sorted(set(now).symmetric_difference(last).union(extra)))
        since = Since(start, {}, default, start, touched)
        desired = Desired(now, default, Held(None, ()), routed=routed, since=since)
        moved = moved_since(since, kept, now)
        if elsewhere:
            assert moved is None
        elif "H1.example.com" not in last:
            # (Another spelling of a host makes the plain function's text, from afresh.)
            assert moved is not None
        assert kept.text(now, addresses_of(default), routed_addresses(routed), moved) \
            == entries_text(desired.entries())
        last = now
