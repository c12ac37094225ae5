"""How the controller's C heap gives memory back to the system.

Large blocks are mapped on their own from the start (``map_large_blocks``): glibc otherwise
raises its threshold for that each time such a block is freed, up to 32 MiB, so that after
the first list the half-megabyte bodies and JSON buffers of every ConfigMap write and every
list page are carved from the main heap, whose pages they leave in pieces too small to give
back (2-3 MiB of RSS at 10,000 Ingresses). A mapped block goes back to the system when freed,
for the cost of a map and an unmap per write, microseconds beside the write.

The first sync parses every listed object and plans and writes them all at once; what it frees
afterwards stays in the C allocator's heaps (the main one, and one per thread that allocated,
such as the worker that ran the first plan), counted in the process's RSS although nothing
uses it. glibc's ``malloc_trim`` returns those pages: 2-4 MiB at 10,000 Ingresses.

``ctypes`` (0.4 MiB) is imported by these functions, so only by the controller.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("hairpin_proxy.controller")


def rss_kib(status: Path = Path("/proc/self/status")) -> int:
    """The process's resident set in KiB (0 where the system does not say)."""
    try:
        for line in status.read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


# glibc's mallopt parameter for the size from which a block is mapped on its own.
_M_MMAP_THRESHOLD = -3
# glibc's own starting value: blocks of a list page or a ConfigMap body are above it, the
# objects a cache keeps are far below it.
LARGE_BLOCK = 128 * 1024


def map_large_blocks(threshold: int = LARGE_BLOCK) -> bool:
    """Map every block of ``threshold`` bytes or more on its own, for the life of the process;
    False where the C library has no ``mallopt`` for it (musl maps large blocks anyway)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))


def give_back() -> bool:
    """Return the C heaps' free pages to the system; False where the C library cannot (it is
    not glibc: musl has no ``malloc_trim``, and returns freed memory by itself)."""
    import ctypes

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        log.debug("no malloc_trim in this C library; freed heap memory stays with it")
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    before = rss_kib()
    trim(0)
    log.debug("freed heap memory returned to the system",
              extra={"rss_kib_before": before, "rss_kib_after": rss_kib()})
    return True


# Seconds between two collections of everything, the frozen objects too: cycles among objects
# that were alive when frozen and died since are found only then.
THAW_EVERY = 600.0
# Objects of the first list kept between two freezes (``Collector.listed``): a collection of
# what is new since the last one walks some thousands of objects, a millisecond or two.
FREEZE_LISTED = 2500
# The youngest generation's threshold meanwhile (Python's is 700 new containers): the
# freezes do the collecting, and what a list leaves in between is still collected.
FIRST_LIST_YOUNG = 20_000


class Collector:
    """Python's cyclic collector, kept off the path from an event to its write.

    After the first sync the caches are frozen (out of the collector's sight), but every
    object made since counts towards its next full collection, which walks all of them in the
    middle of some later pass (tens of milliseconds at 50,000 Ingresses). So after each pass
    what it left is collected at once, while it is small, and frozen in turn; and every
    THAW_EVERY seconds everything is thawed and collected, so that cycles that died among
    frozen objects are found too."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.thawed_at = clock()
        self.unfrozen_listed = 0
        # The collector's thresholds before the first list (None: not raised).
        self.thresholds: tuple[int, int, int] | None = None

    def listed(self, count: int) -> None:
        """``count`` more objects of the first list kept. The list's objects live as long
        as the caches, yet each collection on the way to the first write walks them again:
        every FREEZE_LISTED objects, what came since is collected (its cycles are found now,
        not frozen) and frozen, and until every cache is filled (``first_list_done``) the
        automatic collections come FIRST_LIST_YOUNG new containers apart."""
        if self.thresholds is None:
            self.thresholds = gc.get_threshold()
            gc.set_threshold(max(FIRST_LIST_YOUNG, self.thresholds[0]), *self.thresholds[1:])
        self.unfrozen_listed += count
        if self.unfrozen_listed >= FREEZE_LISTED:
            self.unfrozen_listed = 0
            gc.collect()
            gc.freeze()

    def first_list_done(self) -> None:
        """The collector's thresholds as before the first list, once every cache is filled
        (a standby's too, which never writes)."""
        if self.thresholds is not None:
            gc.set_threshold(*self.thresholds)
            self.thresholds = None

    def first_sync(self) -> None:
        """The caches now hold most of what this process will keep (tens of thousands of
        objects): out of the collector's sight, so that its full collections no longer walk
        them in the middle of later passes."""
        gc.freeze()
        self.first_list_done()

    def after_pass(self) -> None:
        now = self.clock()
        if now - self.thawed_at >= THAW_EVERY:
            gc.unfreeze()
            self.thawed_at = now
        gc.collect()
        gc.freeze()
