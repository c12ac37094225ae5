"""Worker threads that never hold the doctor's exit back, and event loops that use them.

``getaddrinfo`` cannot be cancelled: a lookup stuck on a nameserver that never answers keeps
its thread until the C library gives up, which with a few ``attempts`` in resolv.conf can be
minutes. ``concurrent.futures.ThreadPoolExecutor`` joins its workers when the interpreter
exits, so one such lookup would keep the doctor running long after its report was printed.
``DaemonPool`` runs the same work in daemon threads: the doctor stops waiting at its deadline,
prints the report, and the process exits with the lookup still in flight.

``DaemonPool`` subclasses ``ThreadPoolExecutor`` only so that asyncio takes it as a loop's
default executor (``loop.getaddrinfo`` runs there); none of the parent's machinery is used.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

__all__ = ["DaemonPool", "run_async"]

P = ParamSpec("P")
T = TypeVar("T")

_Work = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DaemonPool(ThreadPoolExecutor):
    """At most ``max_workers`` daemon threads, started as work arrives."""

    def __init__(self, max_workers: int, thread_name_prefix: str = "doctor") -> None:
        # The parent only records its settings here; it starts no thread and registers none.
        super().__init__(max_workers=max_workers, thread_name_prefix=thread_name_prefix)
        self._limit = max_workers
        self._prefix = thread_name_prefix
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._idle = 0
        self._guard = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[P, T], /, *args: P.args,
               **kwargs: P.kwargs) -> Future[T]:
        fut: Future[T] = Future()
        with self._guard:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._work.put((fut, fn, args, dict(kwargs)))
            if self._idle == 0 and len(self._workers) < self._limit:
                t = threading.Thread(target=self._run, daemon=True,
                                     name=f"{self._prefix}_{len(self._workers)}")
                self._workers.append(t)
                t.start()
            elif self._idle:
                self._idle -= 1  # an idle worker takes it
        return fut

    def _run(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            fut, fn, args, kwargs = item
            if fut.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:
                    fut.set_exception(exc)
                else:
                    fut.set_result(result)
            del item, fut, fn, args, kwargs
            with self._guard:
                self._idle += 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._guard:
            self._closed = True
            workers = list(self._workers)
        if cancel_futures:
            with contextlib.suppress(queue.Empty):
                while True:
                    item = self._work.get_nowait()
                    if item is not None:
                        item[0].cancel()
        for _ in workers:
            self._work.put(None)
        if wait:
            for t in workers:
                t.join()


def run_async(make: Callable[[], Coroutine[Any, Any, T]], limit: float, *,
              workers: int = 8) -> T:
    """Run ``make()`` on a new event loop for at most ``limit`` seconds (TimeoutError past
    it). Unlike ``asyncio.run`` it never waits for the loop's executor: a lookup still in
    flight stays behind in a daemon thread."""
    loop = asyncio.new_event_loop()
    loop.set_default_executor(DaemonPool(workers, "doctor-loop"))
    try:
        return loop.run_until_complete(asyncio.wait_for(make(), max(0.0, limit)))
    finally:
        try:
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            if left:
                loop.run_until_complete(asyncio.wait(left, timeout=1.0))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()  # shuts the executor down without waiting
