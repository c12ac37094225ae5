"""The default connection limit, from the container's memory limit and the open-file limit.
Pure but for ``read_cgroup``.

A stalled connection (a client that stops reading while its upstream keeps sending, or the
reverse) holds, per direction: one unsent read in the proxy (``READ_SIZE``) and the kernel
buffers of the two sockets on its path (the sender's receive buffer, the receiver's send
buffer). A cgroup v2 memory limit charges socket buffers to the pod as well, so the limit
divides what the memory limit leaves after the idle process by the worst case of both
directions stalled at once.

A spliced direction (relay/splice.py) holds its unsent bytes in a pipe instead of user space:
the pipe's bytes and its own kernel memory together stay within what the copying path's unsent
read may hold, so a stalled connection costs the same on either path. The pool's idle pipes
come out of the process's reserve, and each pipe's two descriptors out of the open-file limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

CGROUP_V2_MAX = Path("/sys/fs/cgroup/memory.max")
CGROUP_V1_LIMIT = Path("/sys/fs/cgroup/memory/memory.limit_in_bytes")
CGROUP_V2_CPU = Path("/sys/fs/cgroup/cpu.max")
CGROUP_V1_CPU = (Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
                 Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us"))

READ_SIZE = 256 * 1024  # one direction's unsent read (the epoll engine's READ_SIZE)
# The idle process (interpreter, event loop, admin endpoint) and its headroom.
RESERVE = 48 * 1024 * 1024
# Per connection besides buffers: socket and connection objects, epoll entries.
OVERHEAD = 16 * 1024
# A socket buffer the kernel autotunes (``--socket-buffer 0``) may grow to tcp_wmem/tcp_rmem's
# maximum: 4 MiB by default (measured: 3.5 MiB per stalled socket, see docs/benchmarks.md).
AUTOTUNED_BUFFER = 4 * 1024 * 1024
# One pipe's kernel memory besides the bytes it holds: its inode, two open files and the ring
# of buffer slots (40 bytes each), rounded up.
PIPE_OVERHEAD = 4 * 1024
PAGE = 4096
# The splice pool lends at most one pipe per PIPE_SHARE connections (HAProxy's default is one
# per four): streams beyond it copy. It keeps at most IDLE_PIPES of them idle for reuse.
PIPE_SHARE = 2
IDLE_PIPES = 64
# Without a memory limit (or one too large to mean anything).
UNLIMITED = 20000
# Descriptors the process holds besides its connections' two each (listeners, epoll, admin
# endpoint, targets file, the resolver's sockets).
FD_RESERVE = 64
# cgroup v1 reports "no limit" as the largest page-aligned 63-bit value.
_NO_LIMIT = 1 << 60


def memory_limit(v2_max: str | None, v1_limit: str | None) -> int | None:
    """Bytes the container may use, from the contents of cgroup v2 ``memory.max`` or, when
    that is absent, v1 ``memory.limit_in_bytes``; None when there is no limit."""
    for text in (v2_max, v1_limit):
        if text is None:
            continue
        value = text.strip()
        if value == "max" or not value.isdigit():
            return None
        limit = int(value)
        return limit if 0 < limit < _NO_LIMIT else None
    return None


def kernel_buffer(socket_buffer: int) -> int:
    """What one socket buffer may hold: the kernel doubles a SO_SNDBUF/SO_RCVBUF value for
    its bookkeeping; 0 is autotuned."""
    return 2 * socket_buffer if socket_buffer else AUTOTUNED_BUFFER


def unsent_read(socket_buffer: int) -> int:
    """What a stalled copying direction holds in user space: one read, which takes at most
    what the sender's receive buffer held."""
    return min(READ_SIZE, kernel_buffer(socket_buffer))


def pipe_bytes(socket_buffer: int) -> int:
    """Bytes one spliced direction may hold in its pipe: one socket buffer as set (at least a
    page), and never more than the copying path's unsent read less the pipe's own kernel
    memory. Spliced pages sit in the socket queues whole, so the sockets of a stalled spliced
    connection hold more than a copying one's; a pipe of one buffer keeps the whole within
    what a stalled copying connection holds."""
    cap = unsent_read(socket_buffer) - PIPE_OVERHEAD
    return max(PAGE, min(socket_buffer or cap, cap))


def per_connection(socket_buffer: int) -> int:
    """Worst-case bytes of one connection with both directions stalled, copying or spliced
    (784 KiB with the default 64 KiB buffers; measured with one direction stalled: 330 KiB)."""
    buffer = kernel_buffer(socket_buffer)
    held = max(unsent_read(socket_buffer), pipe_bytes(socket_buffer) + PIPE_OVERHEAD)
    return 2 * (held + 2 * buffer) + OVERHEAD


def pipe_limit(max_connections: int) -> int:
    """Pipes the splice pool of a process relaying ``max_connections`` may hold at once."""
    return max(1, max_connections // PIPE_SHARE)


def reserve(splice: bool) -> int:
    """Memory one process needs besides its connections: the idle process, and the splice
    pool's idle pipes."""
    return RESERVE + (IDLE_PIPES * PIPE_OVERHEAD if splice else 0)


def connection_limit(v2_max: str | None, v1_limit: str | None, socket_buffer: int,
                     processes: int = 1, *, splice: bool = False) -> int:
    """The default --max-connections: what fits in the memory limit (at least 1) beside
    ``processes`` idle relay processes (with their pipe pools when they ``splice``), else
    ``UNLIMITED``, which is also the most it gives."""
    limit = memory_limit(v2_max, v1_limit)
    if limit is None:
        return UNLIMITED
    fits = (limit - processes * reserve(splice)) // per_connection(socket_buffer)
    return max(1, min(UNLIMITED, fits))


@dataclass(frozen=True)
class DefaultLimit:
    """The default --max-connections and what set it, for the start-up log line."""

    connections: int
    bound_by: str  # "memory limit", "open-file limit" or "built-in maximum"


def default_limit(v2_max: str | None, v1_limit: str | None, socket_buffer: int,
                  open_files: int | None, processes: int = 1, *,
                  splice: bool = False) -> DefaultLimit:
    """The default --max-connections of ``processes`` worker processes together: the least of
    what fits in the memory limit, what the (already raised) soft open-file limit
    ``open_files`` allows at two descriptors a connection, and with ``splice`` two per pipe
    of the pool (None: no limit), and ``UNLIMITED``; at least 1."""
    by_memory = connection_limit(v2_max, v1_limit, socket_buffer, processes, splice=splice)
    bound = "memory limit" if memory_limit(v2_max, v1_limit) is not None else "built-in maximum"
    if open_files is not None:
        # The largest count whose descriptors fit (fds_needed is monotonic).
        per = 2 + (2 // PIPE_SHARE if splice else 0)
        by_files = max(1, (open_files - FD_RESERVE) // per)
        while by_files > 1 and fds_needed(by_files, splice) > open_files:
            by_files -= 1
        if by_files < by_memory:
            return DefaultLimit(by_files, "open-file limit")
    return DefaultLimit(by_memory, bound)


def fds_needed(max_connections: int, splice: bool = False) -> int:
    """Descriptors a process relaying ``max_connections`` connections may hold at once (two
    a connection; with ``splice``, two a pipe of the pool besides)."""
    pipes = 2 * pipe_limit(max_connections) if splice else 0
    return 2 * max_connections + pipes + FD_RESERVE


def read_cgroup() -> tuple[str | None, str | None]:
    """The contents of the v2 and v1 limit files (None for one that cannot be read)."""
    out: list[str | None] = []
    for path in (CGROUP_V2_MAX, CGROUP_V1_LIMIT):
        try:
            out.append(path.read_text())
        except OSError:
            out.append(None)
    return out[0], out[1]


def cpu_quota(v2_cpu_max: str | None, v1_quota: str | None, v1_period: str | None
              ) -> float | None:
    """CPUs the container may use, from cgroup v2 ``cpu.max`` ("QUOTA PERIOD" or "max
    PERIOD") or v1 ``cpu.cfs_quota_us``/``cpu.cfs_period_us`` (-1: no quota); None without."""
    if v2_cpu_max is not None:
        fields = v2_cpu_max.split()
    elif v1_quota is not None and v1_period is not None:
        fields = [v1_quota.strip(), v1_period.strip()]
    else:
        return None
    try:
        q, p = int(fields[0]), int(fields[1])
    except (ValueError, IndexError):
        return None
    return q / p if q > 0 and p > 0 else None


def auto_workers(quota: float | None, cpus: int) -> int:
    """``--workers 0``: one worker per CPU the container may use, as nginx's
    ``worker_processes auto``: the quota rounded up, never more than the CPUs it may run on,
    at least 1."""
    usable = max(1, cpus)
    if quota is None:
        return usable
    return max(1, min(usable, math.ceil(quota - 1e-9)))


def read_cpu_cgroup() -> tuple[str | None, str | None, str | None]:
    """The contents of v2 ``cpu.max`` and v1 quota and period (None for one not readable)."""
    out: list[str | None] = []
    for path in (CGROUP_V2_CPU, *CGROUP_V1_CPU):
        try:
            out.append(path.read_text())
        except OSError:
            out.append(None)
    return out[0], out[1], out[2]
