"""Membership in a sorted sequence of host names, the one way every module asks it: a pass's
hosts come sorted and distinct, and a set of ten thousand of them costs half a megabyte.

Standard library only: the published hosts' reader (the node agent) imports it too."""

from __future__ import annotations

import bisect
from collections.abc import Sequence


def has(ordered: Sequence[str], host: str) -> bool:
    """Whether ``host`` is in the sorted ``ordered``."""
    at = bisect.bisect_left(ordered, host)
    return at < len(ordered) and ordered[at] == host
