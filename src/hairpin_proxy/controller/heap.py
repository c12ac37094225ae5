"""Free heap memory handed back to the system once the first sync is done.

The first sync parses every listed object and plans and writes them all at once; what it frees
afterwards stays in the C allocator's heaps (the main one, and one per thread that allocated,
such as the worker that ran the first plan), counted in the process's RSS although nothing
uses it. glibc's ``malloc_trim`` returns those pages: 2-4 MiB at 10,000 Ingresses, more than
importing ``ctypes`` costs (0.4 MiB), which is why it is imported only here.
"""

from __future__ import annotations

import logging
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
