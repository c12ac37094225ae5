"""The counts the workers share (relay/shared.py), on a real mapped file with real locks:
admission exactly as one process counting everything would decide, whatever the order of
admissions, closes and crashed workers."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.relay import shared
from hairpin_proxy.relay.shared import OVER_LIMIT, OVER_SOURCE, SharedLimits

WORKERS, LIMIT, CAP = 3, 6, 3
SOURCES = ["127.0.0.1", "127.0.0.2", "10.0.0.1", "::1", "fd00::1", "fe80::1%lo",
           "192.0.2.7", "2001:db8::7"]

Op = tuple[str, int, int]  # (what, worker, source index)
OPS = st.lists(st.tuples(st.sampled_from(["admit", "admit", "close", "crash"]),
                         st.integers(0, WORKERS - 1), st.integers(0, len(SOURCES) - 1)),
               max_size=120)


def model_admit(held: dict[int, list[str]], source: str) -> str:
    everything = [s for conns in held.values() for s in conns]
    if len(everything) >= LIMIT:
        return OVER_LIMIT
    if everything.count(source) >= CAP:
        return OVER_SOURCE
    return ""


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_admission_is_what_one_count_of_everything_decides(ops: list[Op]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        spec = shared.create(Path(tmp), WORKERS, LIMIT, CAP)
        views = [SharedLimits(spec, w) for w in range(WORKERS)]
        held: dict[int, list[str]] = {w: [] for w in range(WORKERS)}
        try:
            for what, w, i in ops:
                source = SOURCES[i]
                if what == "admit":
                    want = model_admit(held, source)
                    assert views[w].admit(source) == want
                    if not want:
                        held[w].append(source)
                elif what == "close" and held[w]:
                    views[w].release(held[w].pop(i % len(held[w])))
                elif what == "crash":
                    views[(w + 1) % WORKERS].forget(w)
                    held[w].clear()
                assert views[0].active() == sum(map(len, held.values()))
        finally:
            for view in views:
                view.close()


def test_without_a_cap_only_the_total_counts() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        spec = shared.create(Path(tmp), 2, 3, 0)
        assert spec.capacity == 0
        a, b = SharedLimits(spec, 0), SharedLimits(spec, 1)
        try:
            assert [a.admit("127.0.0.1"), b.admit("127.0.0.1"), a.admit(None)] == ["", "", ""]
            assert b.admit("127.0.0.1") == OVER_LIMIT
            a.release(None)
            assert b.admit("::1") == ""
        finally:
            a.close()
            b.close()


def test_an_address_whose_probe_passed_a_freed_slot_is_still_found() -> None:
    """Two addresses with one home slot: the first freed, the second (one slot on) must
    still be found, its count whole, rather than start afresh beside it."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = shared.create(Path(tmp), 1, LIMIT, 2)
        mask = spec.capacity - 1
        first = "10.0.0.1"
        start = shared.home(shared.address_key(first), mask)
        second = next(ip for ip in (f"10.0.{i // 256}.{i % 256}" for i in range(2, 5000))
                      if shared.home(shared.address_key(ip), mask) == start)
        view = SharedLimits(spec, 0)
        try:
            assert [view.admit(first), view.admit(second), view.admit(second)] == ["", "", ""]
            view.release(first)
            assert view.admit(second) == OVER_SOURCE
        finally:
            view.close()
