"""Slots: which listener pair and proxy Service each non-default target uses. Pure.

Slot 0 is the default target (ports 80/443, Service ``hairpin-proxy``) and is never handed
out here. Slot i ≥ 1 listens on ``20000 + 2i`` (plain HTTP) and ``20001 + 2i`` (TLS) and is
reached through the Service ``hairpin-proxy-t<i>``. A target keeps its slot for as long as it
exists, because DNS answers for its hosts point at that slot's Service and moving it would
send new connections to a listener that serves another data plane.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

from hairpin_proxy.targets.model import DEFAULT_KEY

BASE_PORT: Final = 20000
SERVICE_PREFIX: Final = "hairpin-proxy-t"
# The highest slot whose TLS port (20001 + 2i) still fits in 16 bits.
MAX_SLOT: Final = (65535 - BASE_PORT - 1) // 2
_SERVICE_NAME = re.compile(r"hairpin-proxy-t([1-9][0-9]*)")


def _check_slot(slot: int) -> None:
    if type(slot) is not int or not 1 <= slot <= MAX_SLOT:
        raise ValueError(f"slot {slot!r} is not in 1..{MAX_SLOT}")


def listen_ports(slot: int) -> tuple[int, int]:
    """(HTTP, TLS) pod ports of a slot."""
    _check_slot(slot)
    return BASE_PORT + 2 * slot, BASE_PORT + 2 * slot + 1


def service_name(slot: int) -> str:
    _check_slot(slot)
    return f"{SERVICE_PREFIX}{slot}"


def slot_of_service_name(name: str) -> int | None:
    """The slot a Service of ours serves, from its name; None for any other name."""
    m = _SERVICE_NAME.fullmatch(name)
    if m is None:
        return None
    slot = int(m.group(1))
    return slot if slot <= MAX_SLOT else None


def allocate(previous: Mapping[str, int], wanted: Iterable[str],
             max_slots: int) -> tuple[dict[str, int], list[str]]:
    """Slots for the ``wanted`` targets, given last time's allocation.

    A wanted target keeps its previous slot when that is still within ``max_slots``; the
    others, in key order, take the lowest free slots; those left over are returned, sorted,
    as the overflow. The result depends only on the *set* of wanted keys and on
    ``previous``, never on iteration order, so every controller replica computes the same
    table. Should ``previous`` give one slot to two keys, the smaller key keeps it.
    """
    if type(max_slots) is not int or not 0 <= max_slots <= MAX_SLOT:
        raise ValueError(f"max_slots {max_slots!r} is not in 0..{MAX_SLOT}")
    keys = set(wanted)
    if DEFAULT_KEY in keys:
        raise ValueError("the default target has slot 0 and is not allocated")
    out: dict[str, int] = {}
    taken: set[int] = set()
    for key, slot in sorted(previous.items(), key=lambda item: (item[1], item[0])):
        if (key in keys and type(slot) is int and 1 <= slot <= max_slots
                and slot not in taken):
            out[key] = slot
            taken.add(slot)
    free = (s for s in range(1, max_slots + 1) if s not in taken)
    overflow: list[str] = []
    for key in sorted(keys - out.keys()):
        new_slot = next(free, None)
        if new_slot is None:
            overflow.append(key)
        else:
            out[key] = new_slot
    return out, overflow
