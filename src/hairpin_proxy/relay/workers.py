"""``--workers N``: N relay processes sharing the listeners, under one supervisor.

Each worker is the single-process relay (``server.serve``) with its listeners bound with
SO_REUSEPORT, so the kernel spreads new connections over the workers' sockets; the connection
limit and the per-source cap count the connections of all workers together, in counts they
share (relay/shared.py), however unevenly the kernel spreads them. The supervisor relays
nothing: it starts the workers, restarts one that dies (and only that one), forwards SIGTERM so
that all of them drain, and serves the pod's one admin endpoint, whose /metrics merges the
workers' (each sample labelled ``worker="<i>"``) and whose /readyz is ready when every worker
is.

Workers are started with the ``spawn`` method: a fresh interpreter each, nothing inherited
from the supervisor's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import multiprocessing
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from pathlib import Path

from hairpin_proxy.admin import UNIX_PREFIX, AdminServer, Check, get_unix
from hairpin_proxy.logs import setup_logging
from hairpin_proxy.metrics import Registry, WorkerFamilies
from hairpin_proxy.relay import shared
from hairpin_proxy.relay.server import loop_factory, serve
from hairpin_proxy.relay.shared import SharedLimits, SharedSpec
from hairpin_proxy.relay.spec import ListenerSpec
from hairpin_proxy.relay.stats import worker_metrics
from hairpin_proxy.settings import ProxySettings

log = logging.getLogger("hairpin_proxy.relay")

# Restart delays for a worker that keeps dying soon after it started.
RESTART_MIN, RESTART_MAX, STABLE = 0.1, 10.0, 10.0
ADMIN_TIMEOUT = 5.0


def worker_settings(settings: ProxySettings, admin: str, max_connections: int
                    ) -> ProxySettings:
    """One worker's settings: a private admin endpoint, and the whole connection limit (its
    pipe pool and descriptors sized for it: the kernel may hand one worker every
    connection)."""
    return dataclasses.replace(settings, workers=1, admin_listen=admin,
                               max_connections=max_connections)


def worker_main(specs: tuple[ListenerSpec, ...], settings: ProxySettings, index: int,
                limits: SharedSpec) -> None:
    """The entry point of one worker process."""
    setup_logging(settings.log_level, settings.log_format)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_tag(index))
    _, factory = loop_factory(settings.loop)
    counts = SharedLimits(limits, index)
    with asyncio.Runner(loop_factory=factory) as runner:
        sys.exit(runner.run(serve(specs, settings, shared=True, limits=counts)))


def _tag(index: int) -> Callable[[logging.LogRecord], bool]:
    def add(record: logging.LogRecord) -> bool:
        record.worker = index
        return True
    return add


@dataclasses.dataclass
class Worker:
    index: int
    admin: str  # unix:PATH
    process: BaseProcess | None = None
    started: float = 0.0
    delay: float = RESTART_MIN
    starts: int = 0

    @property
    def came_up(self) -> bool:
        """Whether it ever served: a worker binds its listeners before its admin socket."""
        return Path(self.admin[len(UNIX_PREFIX):]).exists()


class Supervisor:
    def __init__(self, specs: tuple[ListenerSpec, ...], settings: ProxySettings, count: int,
                 max_connections: int) -> None:
        self.specs = specs
        self.settings = settings
        self.max_connections = max_connections
        self.context = multiprocessing.get_context("spawn")
        self.workdir = Path(tempfile.mkdtemp(prefix="hairpin-proxy-workers-"))
        self.workers = [Worker(i, f"{UNIX_PREFIX}{self.workdir / f'worker-{i}.sock'}")
                        for i in range(count)]
        self.limits = shared.create(self.workdir, count, max_connections,
                                    settings.max_connections_per_source)
        # Only to forget what a worker that exited held.
        self.counts = SharedLimits(self.limits, 0)
        self.registry = Registry("proxy", standard=False)
        self.families = WorkerFamilies()
        self.registry.collectors.register(self.families)
        self.live, self.restarts = worker_metrics(self.registry)
        self.stopping = False
        self.failed: int | None = None  # a worker's status when it failed at start
        self.done = asyncio.Event()

    def start(self, worker: Worker) -> None:
        loop = asyncio.get_running_loop()
        settings = worker_settings(self.settings, worker.admin, self.max_connections)
        proc = self.context.Process(target=worker_main, args=(self.specs, settings,
                                                              worker.index, self.limits),
                                    name=f"hairpin-proxy-worker-{worker.index}")
        proc.start()
        worker.process, worker.started = proc, loop.time()
        worker.starts += 1
        loop.add_reader(proc.sentinel, self._exited, worker)
        self.live.set(sum(w.process is not None for w in self.workers))

    def _exited(self, worker: Worker) -> None:
        loop = asyncio.get_running_loop()
        proc = worker.process
        assert proc is not None
        loop.remove_reader(proc.sentinel)
        proc.join()
        worker.process = None
        # Its connections died with it: their places are free again, before a new worker
        # takes its index.
        self.counts.forget(worker.index)
        self.live.set(sum(w.process is not None for w in self.workers))
        code = proc.exitcode if proc.exitcode is not None else 1
        ran = loop.time() - worker.started
        if self.stopping:
            if all(w.process is None for w in self.workers):
                self.done.set()
            return
        if worker.starts == 1 and not worker.came_up:
            # Its first start failed (a port taken, say): so would every restart.
            log.error("a worker failed to start; stopping", extra={"worker": worker.index,
                                                                   "status": code})
            self.failed = code
            self.stop()
            return
        worker.delay = RESTART_MIN if ran >= STABLE else min(RESTART_MAX, worker.delay * 2)
        log.warning("a worker exited; restarting it", extra={
            "worker": worker.index, "status": code, "restart_in": worker.delay})
        self.restarts.inc()
        loop.call_later(worker.delay, self._restart, worker)

    def _restart(self, worker: Worker) -> None:
        if not self.stopping and worker.process is None:
            self.start(worker)

    def stop(self) -> None:
        """SIGTERM to every worker: each stops accepting and drains (--grace-period)."""
        if self.stopping:
            return
        self.stopping = True
        for w in self.workers:
            if w.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    w.process.terminate()
        if all(w.process is None for w in self.workers):
            self.done.set()

    async def refresh(self) -> None:
        """Gather every running worker's metrics for the next /metrics answer."""
        texts: dict[str, str] = {}
        for w, answer in zip(self.workers, await self._ask("/metrics"), strict=True):
            if answer is not None and answer[0] == 200:
                texts[str(w.index)] = answer[1]
        self.families.update(texts)

    async def ready(self) -> Check:
        """Ready when every worker is running and ready."""
        if self.stopping:
            return Check(False, "draining: shutting down")
        problems = []
        for w, answer in zip(self.workers, await self._ask("/readyz"), strict=True):
            if answer is None:
                problems.append(f"worker {w.index}: not running")
            elif answer[0] != 200:
                problems.append(f"worker {w.index}: {answer[1].strip()}")
        if problems:
            return Check(False, "\n".join(problems))
        return Check(True, f"ok: {len(self.workers)} workers ready")

    async def _ask(self, target: str) -> list[tuple[int, str] | None]:
        async def one(w: Worker) -> tuple[int, str] | None:
            if w.process is None:
                return None
            try:
                async with asyncio.timeout(ADMIN_TIMEOUT):
                    return await get_unix(w.admin[len(UNIX_PREFIX):], target)
            except (OSError, TimeoutError):
                return None
        return list(await asyncio.gather(*(one(w) for w in self.workers)))

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)
        admin = None
        try:
            if self.settings.admin_listen:
                admin = AdminServer(self.registry, ready=self.ready, refresh=self.refresh,
                                    check_timeout=ADMIN_TIMEOUT + 1.0)
                try:
                    await admin.start(self.settings.admin_listen)
                except (OSError, ValueError) as exc:
                    log.error(f"cannot serve the admin endpoint on "
                              f"{self.settings.admin_listen}: {exc}")
                    return 1
            log.info("starting workers", extra={"workers": len(self.workers),
                                                "max_connections": self.max_connections})
            for w in self.workers:
                self.start(w)
            await self.done.wait()
        finally:
            await self._reap()
            if admin is not None:
                await admin.close()
            self.counts.close()
            shutil.rmtree(self.workdir, ignore_errors=True)
        log.info("stopped")
        return self.failed if self.failed is not None else 0

    async def _reap(self) -> None:
        """Wait for the workers to drain; kill what outlives the grace period by far."""
        self.stop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.done.wait(), self.settings.grace_period + 10.0)
        for w in self.workers:
            if w.process is not None:
                w.process.kill()
                w.process.join(5)
