"""The default connection limit from cgroup memory files and the open-file limit: pure functions
of their contents."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hairpin_proxy.relay import limits
from hairpin_proxy.relay.limits import (
    FD_RESERVE,
    connection_limit,
    default_limit,
    fds_needed,
    memory_limit,
    per_connection,
)

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


def test_default_limit_names_what_bounds_it() -> None:
    """The start-up line says what set the limit: never "memory limit" without one."""
    assert default_limit(None, None, 65536, None) == limits.DefaultLimit(
        limits.UNLIMITED, "built-in maximum")
    assert default_limit("max", None, 65536, 1 << 20).bound_by == "built-in maximum"
    assert default_limit("268435456", None, 65536, 1 << 20) == limits.DefaultLimit(
        271, "memory limit")
    # A soft limit of 1024 (a shell's default) holds (1024 - 64) // 2 connections.
    assert default_limit(None, None, 65536, 1024) == limits.DefaultLimit(
        (1024 - FD_RESERVE) // 2, "open-file limit")
    assert default_limit("268435456", None, 65536, 300) == limits.DefaultLimit(
        (300 - FD_RESERVE) // 2, "open-file limit")
    assert default_limit(None, None, 65536, 10).connections == 1


@given(st.one_of(st.none(), st.integers(1, 1 << 40).map(str)), st.integers(0, 1 << 22),
       st.one_of(st.none(), st.integers(0, 1 << 21)))
def test_default_limit_fits_both_limits(memory: str | None, buffer: int,
                                        open_files: int | None) -> None:
    got = default_limit(memory, None, buffer, open_files)
    assert 1 <= got.connections <= connection_limit(memory, None, buffer)
    if open_files is not None and got.connections > 1:
        assert fds_needed(got.connections) <= open_files


@pytest.mark.parametrize(("v2", "v1q", "v1p", "want"), [
    ("max 100000\n", None, None, None),
    ("200000 100000\n", None, None, 2.0),
    ("150000 100000\n", None, None, 1.5),
    ("50000 100000\n", None, None, 0.5),
    (None, "-1\n", "100000\n", None),
    (None, "300000\n", "100000\n", 3.0),
    (None, None, None, None),
    ("garbage", None, None, None),
])
def test_cpu_quota(v2: str | None, v1q: str | None, v1p: str | None,
                   want: float | None) -> None:
    assert limits.cpu_quota(v2, v1q, v1p) == want


@pytest.mark.parametrize(("quota", "cpus", "want"), [
    (None, 2, 2), (2.0, 8, 2), (1.5, 8, 2), (0.5, 8, 1), (4.0, 2, 2), (None, 0, 1),
    (2.0000000001, 8, 2),
])
def test_auto_workers_is_the_quota_rounded_up_within_the_cpus(quota: float | None, cpus: int,
                                                             want: int) -> None:
    assert limits.auto_workers(quota, cpus) == want


def test_each_worker_process_takes_its_reserve_from_the_memory_limit() -> None:
    one = connection_limit("268435456", None, 65536)
    two = connection_limit("268435456", None, 65536, processes=2)
    assert two == (256 * MIB - 2 * limits.RESERVE) // per_connection(65536) < one
    assert default_limit("268435456", None, 65536, None, processes=2).connections == two
