"""Free heap memory handed back to the system once the first sync is done.

The first sync parses every listed object and plans and writes them all at once; what it frees
afterwards stays in the C allocator's heaps (the main one, and one per thread that allocated,
such as the worker that ran the first plan), counted in the process's RSS although nothing
uses it. glibc's ``malloc_trim`` returns those pages: 2-4 MiB at 10,000 Ingresses, more than
importing ``ctypes`` costs (0.4 MiB), which is why it is imported only here.
"""

from __future__ import annotations

import logging

log = logging.getLogger("hairpin_proxy.controller")


def give_back() -> bool:
    """Return the C heaps' free pages to the system; False where the C library cannot (it is
    not glibc: musl has no ``malloc_trim``, and returns freed memory by itself)."""
    import ctypes

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return bool(trim(0))
