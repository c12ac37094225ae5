"""Equality of sorted host sequences as ``ordered.same`` tells it: ``==``, whatever the sizes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hairpin_proxy.ordered import same

HOSTS = st.lists(st.sampled_from(["a.example.com", "b.example.com", "c.example.org", "x"]),
                 unique=True).map(sorted)


@given(a=HOSTS, b=HOSTS, as_list=st.booleans())
def test_same_is_equality(a: list[str], b: list[str], as_list: bool) -> None:
    left, right = tuple(a), (list(b) if as_list else tuple(b))
    assert same(left, right) == (left == right)
    assert same(left, tuple(list(left))) and same(left, left)
    # One host more, anywhere: not the same.
    for i in range(len(left) + 1):
        assert not same(left, (*left[:i], "new.example.net", *left[i:]))
