"""The default connection limit, from the container's memory limit and the open-file limit.
Pure but for ``read_cgroup``.

A stalled connection (a client that stops reading while its upstream keeps sending, or the
reverse) holds, per direction: one unsent read in the proxy (``READ_SIZE``) and the kernel
buffers of the two sockets on its path (the sender's receive buffer, the receiver's send
buffer). A cgroup v2 memory limit charges socket buffers to the pod as well, so the limit
divides what the memory limit leaves after the idle process by the worst case of both
directions stalled at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CGROUP_V2_MAX = Path("/sys/fs/cgroup/memory.max")
CGROUP_V1_LIMIT = Path("/sys/fs/cgroup/memory/memory.limit_in_bytes")

READ_SIZE = 256 * 1024  # one direction's unsent read (the epoll engine's READ_SIZE)
# The idle process (interpreter, event loop, admin endpoint) and its headroom.
RESERVE = 48 * 1024 * 1024
# Per connection besides buffers: socket and connection objects, epoll entries.
OVERHEAD = 16 * 1024
# A socket buffer the kernel autotunes (``--socket-buffer 0``) may grow to tcp_wmem/tcp_rmem's
# maximum: 4 MiB by default (measured: 3.5 MiB per stalled socket, see docs/benchmarks.md).
AUTOTUNED_BUFFER = 4 * 1024 * 1024
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


def per_connection(socket_buffer: int) -> int:
    """Worst-case bytes of one connection with both directions stalled (784 KiB with the
    default 64 KiB buffers; measured with one direction stalled: 330 KiB). The kernel doubles
    a SO_SNDBUF/SO_RCVBUF value for its bookkeeping."""
    buffer = 2 * socket_buffer if socket_buffer else AUTOTUNED_BUFFER
    # One read takes at most what the sender's receive buffer held.
    return 2 * (min(READ_SIZE, buffer) + 2 * buffer) + OVERHEAD


def connection_limit(v2_max: str | None, v1_limit: str | None, socket_buffer: int) -> int:
    """The default --max-connections: what fits in the memory limit (at least 1), else
    ``UNLIMITED``, which is also the most it gives."""
    limit = memory_limit(v2_max, v1_limit)
    if limit is None:
        return UNLIMITED
    fits = (limit - RESERVE) // per_connection(socket_buffer)
    return max(1, min(UNLIMITED, fits))


@dataclass(frozen=True)
class DefaultLimit:
    """The default --max-connections and what set it, for the start-up log line."""

    connections: int
    bound_by: str  # "memory limit", "open-file limit" or "built-in maximum"


def default_limit(v2_max: str | None, v1_limit: str | None, socket_buffer: int,
                  open_files: int | None) -> DefaultLimit:
    """The default --max-connections: the least of what fits in the memory limit, what the
    (already raised) soft open-file limit ``open_files`` allows at two descriptors a
    connection (None: no limit), and ``UNLIMITED``; at least 1."""
    by_memory = connection_limit(v2_max, v1_limit, socket_buffer)
    bound = "memory limit" if memory_limit(v2_max, v1_limit) is not None else "built-in maximum"
    if open_files is not None and (open_files - FD_RESERVE) // 2 < by_memory:
        return DefaultLimit(max(1, (open_files - FD_RESERVE) // 2), "open-file limit")
    return DefaultLimit(by_memory, bound)


def fds_needed(max_connections: int) -> int:
    """Descriptors a process relaying ``max_connections`` connections may hold at once."""
    return 2 * max_connections + FD_RESERVE


def read_cgroup() -> tuple[str | None, str | None]:
    """The contents of the v2 and v1 limit files (None for one that cannot be read)."""
    out: list[str | None] = []
    for path in (CGROUP_V2_MAX, CGROUP_V1_LIMIT):
        try:
            out.append(path.read_text())
        except OSError:
            out.append(None)
    return out[0], out[1]
