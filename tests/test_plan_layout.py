"""The incremental plan's per-object bookkeeping keeps each object's claims at its position:
for any old and new list of objects (replaced in place, one deleted, appended, or shuffled
at random), what ``_changes`` and ``_carried`` make holds every kept object's claims at its
new position, and tells every object that went and every position that is new."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.plan.incremental import _carried, _changes


class Obj:
    def __init__(self, n: int) -> None:
        self.n = n

    def __repr__(self) -> str:
        return f"Obj({self.n})"


POOL = 12


@st.composite
def lists(draw: st.DrawFn) -> tuple[list[Obj], list[Obj]]:
    pool = [Obj(i) for i in range(POOL)]
    old = draw(st.permutations(pool))[:draw(st.integers(0, POOL))]
    kind = draw(st.sampled_from(["shuffle", "replace", "delete", "append"]))
    if kind == "shuffle":
        return old, draw(st.permutations(pool))[:draw(st.integers(0, POOL))]
    if kind == "delete" and old:
        at = draw(st.integers(0, len(old) - 1))
        return old, old[:at] + old[at + 1:]
    now = list(old)
    extra = [o for o in pool if o not in old]
    if kind == "replace" and now and extra:
        now[draw(st.integers(0, len(now) - 1))] = extra.pop()
    return old, now + extra[:draw(st.integers(0, len(extra)))]


@settings(max_examples=1000, deadline=None)
@given(lists())
def test_each_kept_object_keeps_its_claims_at_its_new_position(
        lists: tuple[list[Obj], list[Obj]]) -> None:
    old, now = lists
    made = [("claims of", o.n) for o in old]
    gone, new, layout = _changes(list(old), list(now))
    went = [old[i] for i in gone]
    got = _carried(list(made), layout, len(now))
    assert len(got) == len(now)
    for at, obj in enumerate(now):
        if at in new:
            # New, or made again from what it had where it was (recycled by version).
            assert obj not in old or obj in went
        else:
            assert got[at] == ("claims of", obj.n)
    assert all(obj in went for obj in old if obj not in now)
    assert all(at in new for at, obj in enumerate(now) if obj not in old)
    assert all(now.index(obj) in new for obj in went if obj in now)
    assert len(set(gone)) == len(gone) and len(set(new)) == len(new)
