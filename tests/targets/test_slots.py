"""Stable slot allocation."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hairpin_proxy.targets.slots import (
    MAX_SLOT,
    allocate,
    listen_ports,
    service_name,
    slot_of_service_name,
)

keys = st.sets(st.from_regex(r"ingressclass/[a-z]{1,3}", fullmatch=True), max_size=12)


def test_ports_and_names() -> None:
    assert listen_ports(1) == (20002, 20003)
    assert listen_ports(MAX_SLOT)[1] <= 65535 < listen_ports(MAX_SLOT)[1] + 2
    assert service_name(7) == "hairpin-proxy-t7"
    assert slot_of_service_name("hairpin-proxy-t7") == 7
    for other in ("hairpin-proxy", "hairpin-proxy-t0", "hairpin-proxy-t07", "x-t1",
                  f"hairpin-proxy-t{MAX_SLOT + 1}"):
        assert slot_of_service_name(other) is None
    for bad in (0, -1, MAX_SLOT + 1, True):
        with pytest.raises(ValueError):
            listen_ports(bad)


def test_keeps_existing_and_fills_lowest_gap() -> None:
    got, overflow = allocate({"ingressclass/a": 1, "ingressclass/c": 3},
                             ["ingressclass/c", "ingressclass/b", "ingressclass/d"], 4)
    assert got == {"ingressclass/c": 3, "ingressclass/b": 1, "ingressclass/d": 2}
    assert overflow == []


def test_overflow_sorted_and_limit_lowered() -> None:
    got, overflow = allocate({"ingressclass/z": 5}, ["ingressclass/z", "ingressclass/b",
                                                      "ingressclass/a"], 2)
    assert got == {"ingressclass/a": 1, "ingressclass/b": 2}
    assert overflow == ["ingressclass/z"]


def test_conflicting_previous_smaller_key_keeps_slot() -> None:
    got, _ = allocate({"ingressclass/b": 1, "ingressclass/a": 1},
                      ["ingressclass/a", "ingressclass/b"], 3)
    assert got == {"ingressclass/a": 1, "ingressclass/b": 2}


def test_refuses_default_and_bad_limits() -> None:
    with pytest.raises(ValueError, match="default"):
        allocate({}, ["default"], 3)
    with pytest.raises(ValueError):
        allocate({}, [], -1)
    assert allocate({"ingressclass/a": 1}, ["ingressclass/a"], 0) == ({}, ["ingressclass/a"])


@given(keys, keys, st.integers(0, 8), st.randoms())
def test_properties(before: set[str], now: set[str], max_slots: int, rnd: object) -> None:
    previous, _ = allocate({}, before, max_slots)
    order = sorted(now)
    rnd.shuffle(order)  # type: ignore[attr-defined]
    got, overflow = allocate(previous, order, max_slots)
    assert (got, overflow) == allocate(previous, sorted(now), max_slots)  # order-free
    assert set(got) | set(overflow) == now and not set(got) & set(overflow)
    assert len(set(got.values())) == len(got)
    assert all(1 <= s <= max_slots for s in got.values())
    assert len(got) == min(len(now), max_slots)
    for key, slot in previous.items():
        if key in now:
            assert got[key] == slot  # stability
    assert overflow == sorted(overflow)
    # New targets fill the lowest free slots, so no gap sits below a new slot.
    new = [got[k] for k in got if k not in previous]
    if new:
        assert set(range(1, max(new) + 1)) <= set(got.values())
