"""After the first sync the controller hands the heap's free pages back to the system, and
after each pass the cyclic collector takes what the pass left."""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
import weakref
from collections.abc import Callable
from pathlib import Path

import pytest

from hairpin_proxy.controller import heap
from tests.controller.conftest import Controller
from tests.waiting import wait_until

Start = Callable[..., Controller]


def test_after_the_first_sync_the_free_heap_goes_back(start: Start) -> None:
    ctl = start("--log-level", "debug")
    ctl.wait_ready()

    def told() -> list[dict[str, object]]:
        return [r for r in ctl.records()
                if r.get("msg") == "freed heap memory returned to the system"]

    wait_until(told, what="the heap handed back")
    # Once: after the first sync, not after every pass.
    (line,) = told()
    before, after = line["rss_kib_before"], line["rss_kib_after"]
    assert isinstance(before, int) and isinstance(after, int)
    assert before > 0 and after > 0


def test_a_c_library_without_malloc_trim_keeps_its_memory(
        monkeypatch: pytest.MonkeyPatch) -> None:
    class NoTrim:
        def __init__(self, name: object) -> None:
            pass

    monkeypatch.setattr(ctypes, "CDLL", NoTrim)
    assert heap.give_back() is False


def test_rss_is_read_from_the_status_file(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmRSS:\t   73120 kB\nThreads:\t3\n")
    assert heap.rss_kib(status) == 73120
    assert heap.rss_kib(tmp_path / "missing") == 0
    assert heap.give_back() is True


# Allocates a megabyte, frees it (glibc then raises its mapping threshold to that size, unless
# it was fixed), and reports whether a block of half a megabyte is then mapped on its own.
_PROBE = """
import ctypes, sys
from hairpin_proxy.controller import heap
fixed = heap.map_large_blocks() if sys.argv[1] == "fixed" else None
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks",
                "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.free(libc.malloc(1 << 20))
before = libc.mallinfo2().hblks
block = libc.malloc(1 << 19)
print(fixed, libc.mallinfo2().hblks - before)
libc.free(block)
"""


@pytest.mark.parametrize("mode, mapped", [("fixed", "1"), ("glibc", "0")])
def test_large_blocks_stay_mapped_after_a_larger_one_was_freed(mode: str, mapped: str) -> None:
    # A process of its own: the setting lasts for the life of the process.
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True,
                         check=True, env={k: v for k, v in os.environ.items()
                                          if not k.startswith("MALLOC_")})
    fixed, count = out.stdout.split()
    assert fixed == ("True" if mode == "fixed" else "None")
    # Without the fixed threshold the half-megabyte block comes from the heap: this checks
    # that the probe tells the two apart on this C library.
    assert count == mapped


class _Cycle:
    """An object in a reference cycle with itself: freed by the cyclic collector alone."""

    def __init__(self) -> None:
        self.me = self


def test_after_a_pass_its_cycles_are_collected_and_the_rest_frozen() -> None:
    now = [0.0]
    collector = heap.Collector(clock=lambda: now[0])
    # Only the collector's own collections: an automatic one would free the cycles too.
    gc.disable()
    try:
        frozen = gc.get_freeze_count()
        dead = weakref.ref(_Cycle())
        kept = _Cycle()
        collector.after_pass()
        assert dead() is None
        assert gc.get_freeze_count() > frozen  # what survived is out of later passes' way
        # A cycle that dies once frozen is found by the next thaw, not before.
        gone = weakref.ref(kept)
        del kept
        now[0] = heap.THAW_EVERY - 1
        collector.after_pass()
        assert gone() is not None
        now[0] = heap.THAW_EVERY + 1
        collector.after_pass()
        assert gone() is None
    finally:
        gc.unfreeze()
        gc.enable()


def test_the_first_list_is_frozen_as_it_comes_its_cycles_collected_first() -> None:
    collector = heap.Collector()
    before = gc.get_threshold()
    gc.disable()
    try:
        dead = weakref.ref(_Cycle())
        kept = _Cycle()
        frozen = gc.get_freeze_count()
        collector.listed(heap.FREEZE_LISTED - 1)
        # Raised from the first objects on; nothing frozen before FREEZE_LISTED of them.
        assert gc.get_threshold() == (heap.FIRST_LIST_YOUNG, *before[1:])
        assert gc.get_freeze_count() == frozen and dead() is not None
        collector.listed(1)
        assert dead() is None  # collected, not frozen
        assert gc.get_freeze_count() > frozen
        assert kept.me is kept
        again = gc.get_freeze_count()
        collector.listed(heap.FREEZE_LISTED - 1)
        assert gc.get_freeze_count() == again
        later = _Cycle()
        # Once every cache is filled (a standby never writes, so never syncs first).
        collector.first_list_done()
        assert gc.get_threshold() == before
        collector.listed(1)
        collector.first_sync()
        assert gc.get_threshold() == before
        # Whatever came since the last freeze is frozen too.
        assert gc.get_freeze_count() > again
        assert later.me is later
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
        gc.enable()
