"""The one wait-until helper for every test: poll a condition, bounded by time.

``wait_until`` (blocking) and ``until`` (in a coroutine) call ``predicate`` until it returns
something truthy and return that value. Past ``timeout`` seconds they raise ``WaitTimeout``,
an AssertionError naming what was awaited, how long, and the last value seen. The predicate
is always called at least once, and once more at the deadline, so a condition met just in
time is not reported as missed.

A bound is a guard against a hang, never a measure of speed: no wait gives up before
``PATIENCE`` seconds, whatever a test asks, so a busy machine (CI's, or the suite run with both
cores kept busy) slows a test down but does not fail it. Waits for a process to exit use
``PATIENCE`` too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["PATIENCE", "WaitTimeout", "until", "wait_until"]

T = TypeVar("T")

# Seconds: the least any wait allows before it gives up.
PATIENCE = 60.0


class WaitTimeout(AssertionError):
    """A condition a test waited for did not come about in time."""


def _message(what: str, timeout: float, last: object) -> str:
    return f"gave up waiting for {what or 'the condition'} after {timeout:g}s (last: {last!r})"


def wait_until(predicate: Callable[[], T], timeout: float = 30.0, what: str = "",
               interval: float = 0.05) -> T:
    """Poll ``predicate`` every ``interval`` seconds until it is truthy; WaitTimeout after
    ``timeout`` seconds (at least ``PATIENCE``)."""
    timeout = max(timeout, PATIENCE)
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(_message(what, timeout, value))
        time.sleep(min(interval, left))


async def until(predicate: Callable[[], T],
                timeout: float = 20.0,  # noqa: ASYNC109 - polls a condition, awaits no I/O
                what: str = "",
                interval: float = 0.02) -> T:
    """``wait_until`` for coroutines: sleeps with ``asyncio.sleep`` between polls."""
    timeout = max(timeout, PATIENCE)
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(_message(what, timeout, value))
        await asyncio.sleep(min(interval, left))
