"""Connection limits all workers keep together (``--workers`` > 1): one count of connections
and one per client address, in a file every worker maps, changed under an ``flock`` on it.

Exact: a worker admits a connection only while it holds the lock, so two workers never both
take the last place. The kernel drops a dead process's ``flock``, so a worker that crashes
mid-change never blocks the others; the supervisor then forgets what that worker held (its
connections died with it) before it starts a new one.

The file holds 32-bit counts: first one per worker (its connections), then a table of client
addresses (open addressing, linear probing, backward-shift deletion: no tombstones), each slot
``[used, address (4 words), one count per worker]``. It has twice as many slots as the limit
allows connections, so it is never more than half full.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import socket
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

# Why admit refused: causes of hairpin_proxy_errors_total.
OVER_LIMIT, OVER_SOURCE = "over_limit", "over_source_limit"
_WORD = 4
_KEY = struct.Struct("4i")


@dataclass(frozen=True)
class SharedSpec:
    """What a worker needs to map the shared counts (picklable, for ``spawn``)."""

    path: str
    workers: int
    max_connections: int
    per_source: int  # 0: no cap

    @property
    def capacity(self) -> int:
        """Slots of the address table: a power of two at least twice the limit (none without
        a cap)."""
        if not self.per_source:
            return 0
        return 1 << (2 * max(1, self.max_connections)).bit_length()

    @property
    def slot(self) -> int:
        return 5 + self.workers

    @property
    def words(self) -> int:
        return self.workers + self.capacity * self.slot


def address_key(source: str) -> tuple[int, int, int, int]:
    """A client address as four words (an IPv4 address in its IPv4-mapped IPv6 form)."""
    if ":" in source:
        packed = socket.inet_pton(socket.AF_INET6, source.partition("%")[0])
    else:
        packed = b"\0" * 10 + b"\xff\xff" + socket.inet_pton(socket.AF_INET, source)
    return _KEY.unpack(packed)


def home(key: tuple[int, ...], mask: int) -> int:
    """The slot a key's probe starts from (the same in every process: no ``hash()``, which
    Python salts per process)."""
    return zlib.crc32(_KEY.pack(*key)) & mask


def create(directory: Path, workers: int, max_connections: int, per_source: int
           ) -> SharedSpec:
    """The zeroed file of the counts, in the supervisor's private ``directory``."""
    spec = SharedSpec(str(directory / "limits"), workers, max_connections, per_source)
    fd = os.open(spec.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, spec.words * _WORD)
    finally:
        os.close(fd)
    return spec


class SharedLimits:
    """One process's view of the shared counts; ``worker`` is its index (the supervisor, which
    only forgets, passes any)."""

    def __init__(self, spec: SharedSpec, worker: int) -> None:
        self.spec = spec
        self.worker = worker
        self.fd = os.open(spec.path, os.O_RDWR)
        self._map = mmap.mmap(self.fd, spec.words * _WORD)
        self.words = memoryview(self._map).cast("i")
        self.mask = spec.capacity - 1
        self._zeros = (0,) * spec.workers

    def close(self) -> None:
        self.words.release()
        self._map.close()
        os.close(self.fd)

    def _lock(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def _unlock(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)

    def admit(self, source: str | None) -> str:
        """Count a new connection from ``source`` (None: not capped) unless all workers
        together are at the limit or that address at its cap: "" when admitted, else why not
        (OVER_LIMIT, OVER_SOURCE)."""
        spec, w = self.spec, self.words
        key = address_key(source) if source is not None and spec.per_source else None
        self._lock()
        try:
            if sum(w[:spec.workers]) >= spec.max_connections:
                return OVER_LIMIT
            if key is not None:
                at = self._find(key)
                counts = at + 5
                if w[at]:
                    if sum(w[counts:counts + spec.workers]) >= spec.per_source:
                        return OVER_SOURCE
                else:
                    # A freed slot keeps its old counts: all of it is written anew.
                    w[at:at + spec.slot] = memoryview(struct.pack(
                        f"{spec.slot}i", 1, *key, *self._zeros)).cast("i")
                w[counts + self.worker] += 1
            w[self.worker] += 1
            return ""
        finally:
            self._unlock()

    def release(self, source: str | None) -> None:
        """A connection admitted with ``source`` has closed."""
        spec, w = self.spec, self.words
        if source is None or not spec.per_source:
            # Only this process writes its own count (the supervisor once it is dead), and an
            # aligned word is written whole: no lock, and so no system call.
            w[self.worker] = max(0, w[self.worker] - 1)
            return
        key = address_key(source)
        self._lock()
        try:
            w[self.worker] = max(0, w[self.worker] - 1)
            at = self._find(key)
            counts = at + 5
            if not w[at]:
                return
            w[counts + self.worker] = max(0, w[counts + self.worker] - 1)
            if not any(w[counts:counts + spec.workers]):
                self._delete(at)
        finally:
            self._unlock()

    def forget(self, worker: int) -> None:
        """Drop what ``worker`` held (it exited, and its connections with it); the table is
        built anew, which also mends one it left half changed."""
        spec, w = self.spec, self.words
        self._lock()
        try:
            w[worker] = 0
            held: dict[tuple[int, ...], list[int]] = {}
            for at in range(spec.workers, spec.words, spec.slot):
                if w[at]:
                    counts = list(w[at + 5:at + spec.slot])
                    counts[worker] = 0
                    key = tuple(w[at + 1:at + 5])
                    before = held.get(key)
                    held[key] = counts if before is None else [
                        a + b for a, b in zip(before, counts, strict=True)]
                    w[at] = 0
            for key, counts in held.items():
                if any(counts):
                    at = self._find(key)
                    w[at:at + spec.slot] = memoryview(
                        struct.pack(f"{spec.slot}i", 1, *key, *counts)).cast("i")
        finally:
            self._unlock()

    def active(self) -> int:
        """Connections of all workers together (read without the lock: for tests and
        logs)."""
        return sum(self.words[:self.spec.workers])

    def _find(self, key: tuple[int, ...]) -> int:
        """The word where ``key``'s slot starts, or the free slot it would take."""
        spec, w = self.spec, self.words
        i = home(key, self.mask)
        while True:
            at = spec.workers + i * spec.slot
            if not w[at] or tuple(w[at + 1:at + 5]) == key:
                return at
            i = (i + 1) & self.mask

    def _delete(self, at: int) -> None:
        """Free the slot at word ``at``, moving later slots of its probe run back into the
        gap so that every key stays reachable from its home slot."""
        spec, w, mask = self.spec, self.words, self.mask
        gap = (at - spec.workers) // spec.slot
        j = gap
        while True:
            j = (j + 1) & mask
            src = spec.workers + j * spec.slot
            if not w[src]:
                break
            start = home(tuple(w[src + 1:src + 5]), mask)
            # A slot whose home lies cyclically in (gap, j] stays where it is.
            if (gap < start <= j) if gap <= j else (gap < start or start <= j):
                continue
            dst = spec.workers + gap * spec.slot
            w[dst:dst + spec.slot] = w[src:src + spec.slot]
            gap = j
        w[spec.workers + gap * spec.slot] = 0
