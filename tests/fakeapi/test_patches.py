"""JSON merge patch and JSON patch semantics."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from tests.fakeapi.patches import json_patch, merge_patch
from tests.fakeapi.status import ApiError

json_values = hs.recursive(
    hs.none() | hs.booleans() | hs.integers() | hs.text(max_size=5),
    lambda inner: hs.lists(inner, max_size=3) | hs.dictionaries(hs.text(max_size=3), inner,
                                                                 max_size=3),
    max_leaves=10,
)


def test_merge_patch_rfc7386_examples() -> None:
    assert merge_patch({"a": "b"}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": "b"}, {"b": "c"}) == {"a": "b", "b": "c"}
    assert merge_patch({"a": "b"}, {"a": None}) == {}
    assert merge_patch({"a": [{"b": "c"}]}, {"a": [1]}) == {"a": [1]}
    assert merge_patch({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}) == {"a": {"b": "d"}}
    assert merge_patch([1, 2], {"a": "b"}) == {"a": "b"}
    assert merge_patch({"e": None}, {"a": 1}) == {"e": None, "a": 1}


@given(json_values, json_values)
def test_merge_patch_does_not_mutate_inputs(target: Any, patch: Any) -> None:
    before = (repr(target), repr(patch))
    merge_patch(target, patch)
    assert (repr(target), repr(patch)) == before


def test_json_patch_operations() -> None:
    doc = {"a": {"b": [1, 2]}, "c": "x"}
    out = json_patch(doc, [
        {"op": "add", "path": "/a/b/1", "value": 9},
        {"op": "add", "path": "/a/b/-", "value": 3},
        {"op": "remove", "path": "/c"},
        {"op": "copy", "from": "/a/b", "path": "/d"},
        {"op": "move", "from": "/d", "path": "/e~1f"},
        {"op": "replace", "path": "/a/b/0", "value": 0},
        {"op": "test", "path": "/e~1f", "value": [1, 9, 2, 3]},
    ])
    assert out == {"a": {"b": [0, 9, 2, 3]}, "e/f": [1, 9, 2, 3]}
    assert doc == {"a": {"b": [1, 2]}, "c": "x"}


@pytest.mark.parametrize(("ops", "code"), [
    ([{"op": "remove", "path": "/missing"}], 422),
    ([{"op": "replace", "path": "/missing", "value": 1}], 422),
    ([{"op": "test", "path": "/a", "value": 2}], 422),
    ([{"op": "frobnicate", "path": "/a"}], 400),
    ({"op": "add"}, 400),
])
def test_json_patch_failures(ops: Any, code: int) -> None:
    with pytest.raises(ApiError) as err:
        json_patch({"a": 1}, ops)
    assert err.value.code == code
