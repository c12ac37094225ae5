"""After the first sync the controller hands the heap's free pages back to the system."""

from __future__ import annotations

import ctypes
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
