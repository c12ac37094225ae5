"""Membership in a sorted sequence of host names, and equality of two, the one way every
module asks them: a pass's hosts come sorted and distinct, and a set of ten thousand of them
costs half a megabyte.

Standard library only: the published hosts' reader (the node agent) imports it too."""

from __future__ import annotations

import bisect
from collections.abc import Sequence


def has(ordered: Sequence[str], host: str) -> bool:
    """Whether ``host`` is in the sorted ``ordered``."""
    at = bisect.bisect_left(ordered, host)
    return at < len(ordered) and ordered[at] == host


def same(a: Sequence[str], b: Sequence[str]) -> bool:
    """``a == b``, telling sequences of other lengths apart at once: tuples compare item by
    item up to the first difference, and a pass's hosts differ from the last's by a host
    somewhere among tens of thousands."""
    return a is b or (len(a) == len(b) and a == b)
