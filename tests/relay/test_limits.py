"""The default connection limit from cgroup memory files: a pure function of their contents."""

from __future__ import annotations

import pytest

from hairpin_proxy.relay import limits
from hairpin_proxy.relay.limits import connection_limit, memory_limit, per_connection

MIB = 1024 * 1024


@pytest.mark.parametrize(("v2", "v1", "want"), [
    ("268435456\n", None, 256 * MIB),
    ("max\n", None, None),
    (None, "268435456\n", 256 * MIB),
    (None, "9223372036854771712\n", None),  # cgroup v1's "no limit"
    (None, None, None),
    ("max\n", "268435456\n", None),  # v2 wins when both exist
    ("garbage", None, None),
    ("0", None, None),
])
def test_memory_limit_from_file_contents(v2: str | None, v1: str | None,
                                         want: int | None) -> None:
    assert memory_limit(v2, v1) == want


def test_the_default_256_mib_limit_with_64_kib_buffers() -> None:
    assert per_connection(65536) == 784 * 1024
    assert connection_limit("268435456", None, 65536) == (256 - 48) * MIB // per_connection(65536)
    assert connection_limit("268435456", None, 65536) == 271


def test_autotuned_buffers_cost_more_and_no_limit_means_the_old_default() -> None:
    assert connection_limit("268435456", None, 0) < connection_limit("268435456", None, 65536)
    assert connection_limit("max", None, 65536) == limits.UNLIMITED
    assert connection_limit(None, None, 0) == limits.UNLIMITED
    assert connection_limit(str(1 << 45), None, 65536) == limits.UNLIMITED  # capped
    assert connection_limit(str(10 * MIB), None, 65536) == 1  # below the reserve: still one
