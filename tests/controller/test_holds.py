"""The hold's pure decisions (controller/holds.py); the mechanism itself is tested end to end in
test_uninstall.py."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from hairpin_proxy.controller.holds import FINALIZER, deleting, finalizers_after, held

Obj = dict[str, Any]

others = st.lists(st.sampled_from(["example.com/a", "example.com/b", "kubernetes",
                                   "foregroundDeletion"]), unique=True, max_size=3)


def obj(finalizers: list[str], deleted: bool = False) -> Obj:
    md: Obj = {"name": "x", "finalizers": finalizers}
    if deleted:
        md["deletionTimestamp"] = "2026-11-27T10:00:00Z"
    return {"metadata": md}


@given(others, st.integers(min_value=0, max_value=3))
def test_hold_then_release_gives_back_the_others_in_their_order(rest: list[str],
                                                                at: int) -> None:
    added = finalizers_after(obj(rest), hold=True)
    assert added is not None and added[-1] == FINALIZER and added[:-1] == rest
    assert held(obj(added))
    assert finalizers_after(obj(added), hold=True) is None  # nothing more to write
    with_ours = [*rest[:at], FINALIZER, *rest[at:]]
    assert finalizers_after(obj(with_ours), hold=False) == rest
    assert finalizers_after(obj(rest), hold=False) is None


@given(others)
def test_nothing_is_added_to_an_object_being_deleted(rest: list[str]) -> None:
    # The API server refuses new finalizers once the deletion has begun.
    assert finalizers_after(obj(rest, deleted=True), hold=True) is None
    assert finalizers_after(obj([*rest, FINALIZER], deleted=True), hold=False) == rest


def test_a_missing_object_needs_nothing() -> None:
    assert finalizers_after(None, hold=True) is None
    assert finalizers_after(None, hold=False) is None
    assert not held(None)


def test_deleting() -> None:
    assert not deleting([None, obj([]), obj([FINALIZER])])
    assert deleting([None, obj([FINALIZER], deleted=True)])
    assert not deleting([])
