"""The node agent: keep the controller's published hosts in this node's hosts file.

Watches one ConfigMap in our namespace (key ``entries``: one ``HOST ADDR [ADDR...]`` line per
host; or, from an older controller, only ``hosts`` and ``addresses``, one per line) and
rewrites the managed block of the hosts file through ``safefile`` whenever the published list
changes, on a periodic resync, and when the file's stat changes (someone else edited it), so
edits by others are merged and our block repaired. A deleted ConfigMap keeps the last state
unless ``--remove-on-delete``; SIGTERM leaves the block in place; ``--remove`` takes it out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hairpin_proxy import hostsfile
from hairpin_proxy.admin import AdminServer, Check, serve_admin
from hairpin_proxy.kube import config as kconfig
from hairpin_proxy.kube.client import KubeClient, resource_path
from hairpin_proxy.kube.watch import Reflector
from hairpin_proxy.logs import quiet_http, setup_logging
from hairpin_proxy.metrics import Registry
from hairpin_proxy.published import (
    ADDRESSES_KEY,
    ENTRIES_KEY,
    HOSTS_KEY,
    parse_lines,
    read_entries,
)
from hairpin_proxy.safefile import ConflictError, SafeFile, SafeFileError, StatKey, stat_key
from hairpin_proxy.settings import EtchostsSettings, usage_error

log = logging.getLogger("hairpin_proxy.etchosts")

# Seconds between retries after a failed apply: quick for a conflict, never hammering.
RETRY_MIN, RETRY_MAX = 1.0, 30.0
# After seeing the file change, wait until its stat holds still this long (at most 20 times):
# an editor that truncates and then writes must not be caught half-way.
SETTLE = 0.1
# Refused lines logged per change of the published entries: enough to find the mistake, and a
# ConfigMap full of garbage does not flood the log.
REFUSED_LOGGED = 20


# ---------------------------------------------------------------------- decisions (pure)

Entries = tuple[tuple[str, tuple[str, ...]], ...]


@dataclass(frozen=True)
class Published:
    """What the controller published: the hosts and the proxy addresses they resolve to.

    ``entries`` (host -> its own target's proxy addresses) is None when the ConfigMap has no
    ``entries`` key: an older controller, whose ``hosts`` all go to ``addresses``. When the
    key is there it is authoritative, and ``hosts``/``addresses`` (which then hold only the
    default target's hosts, for older agents) are not used.
    """

    hosts: tuple[str, ...]
    addresses: tuple[str, ...]
    entries: Entries | None = None
    # Why lines of ``entries`` were left out; for the log, not part of the state.
    refused: tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def from_configmap(cls, cm: Mapping[str, Any]) -> Published:
        data = cm.get("data") or {}
        hosts, addresses = parse_lines(data.get(HOSTS_KEY)), parse_lines(data.get(ADDRESSES_KEY))
        if ENTRIES_KEY not in data:
            return cls(hosts, addresses)
        reading = read_entries(data[ENTRIES_KEY])
        return cls(hosts, addresses, tuple(reading.entries.items()),
                   tuple(str(r) for r in reading.refused))

    @property
    def source(self) -> str:
        """Which keys the block follows, in words for the log."""
        return ENTRIES_KEY if self.entries is not None else f"{HOSTS_KEY}+{ADDRESSES_KEY}"


REMOVED = Published((), ())


def desired_state(cm: Mapping[str, Any] | None, previous: Published | None, *,
                  remove_on_delete: bool) -> Published | None:
    """What the file should hold next; None means "leave the file alone".

    An absent ConfigMap keeps the previous state (a deletion may be transient: a controller
    reinstall, a namespace being recreated), unless the operator asked for removal.
    """
    if cm is not None:
        return Published.from_configmap(cm)
    return REMOVED if remove_on_delete else previous


def block_inputs(want: Published) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The (hosts, addresses) to give ``hostsfile.apply`` when there are no ``entries``.

    Hosts without any proxy address cannot be pointed anywhere; the block is emptied so they
    resolve normally again rather than to an address that may be gone.
    """
    if not want.addresses:
        return (), ()
    return want.hosts, want.addresses


def transform_for(want: Published,
                  skipped: list[str] | None = None) -> Callable[[str], str]:
    """The text transformation ``SafeFile.update`` applies; records skipped hosts."""
    entries = want.entries
    hosts, addresses = block_inputs(want)

    def transform(text: str) -> str:
        # Without entries, exactly the older path (its address check included), so that an
        # agent fed by an older controller behaves as it always has.
        update = (hostsfile.apply(text, hosts, addresses) if entries is None
                  else hostsfile.apply_entries(text, entries))
        if skipped is not None:
            skipped[:] = list(update.skipped)
        return update.text
    return transform


# ---------------------------------------------------------------------- the agent

class EtchostsMetrics:
    def __init__(self, registry: Registry) -> None:
        p = "hairpin_etchosts_"
        self.applies = registry.counter(p + "applies_total", "Apply passes by trigger and "
                                        "result.", ("trigger", "result"))
        self.writes = registry.counter(p + "writes_total", "Hosts file rewrites by method.",
                                       ("method",))
        self.recoveries = registry.counter(p + "recoveries_total", "Interrupted in-place "
                                           "rewrites resolved, by outcome.", ("outcome",))
        self.hosts = registry.gauge(p + "hosts", "Hosts in the managed block after the last "
                                                 "successful apply.")
        self.published = registry.gauge(p + "published_present", "1 while the published "
                                                                 "ConfigMap exists.")
        self.last_success = registry.gauge(p + "last_success_timestamp_seconds",
                                           "Unix time of the last apply that left the file "
                                           "in step.")
        self.requests = registry.counter(p + "api_requests_total", "Kubernetes API requests "
                                         "by verb and status code (0: no answer).",
                                         ("verb", "code"))


def _stat_key(path: Path) -> StatKey | None:
    try:
        return stat_key(path.stat())
    except FileNotFoundError:
        return None


class Agent:
    """Applies the desired state to the file; fed by ``published_changed``."""

    def __init__(self, settings: EtchostsSettings, writer: SafeFile,
                 metrics: EtchostsMetrics) -> None:
        self.settings = settings
        self.writer = writer
        self.metrics = metrics
        self.desired: Published | None = None
        self.wake = asyncio.Event()
        self.applied_once = False
        self.last_error = ""
        self._file_key: StatKey | None = None
        self._skipped_logged: tuple[str, ...] = ()
        self._refused_logged: tuple[str, ...] = ()
        self._source_logged = ""
        self._present: bool | None = None

    def published_changed(self, cm: Mapping[str, Any] | None) -> None:
        self.metrics.published.set(1 if cm is not None else 0)
        want = desired_state(cm, self.desired, remove_on_delete=self.settings.remove_on_delete)
        if cm is None and self._present is not False:
            what = ("removing our block" if want == REMOVED else "keeping the last state"
                    if want is not None else "leaving the file alone")
            log.info(f"no published hosts; {what}",
                     extra={"configmap": self.settings.publish_configmap})
        self._present = cm is not None
        if cm is not None and want is not None:
            self._log_format(want)
        if want is not None and want != self.desired:
            if want.entries is None and want.hosts and not want.addresses:
                log.warning("published hosts have no proxy address; emptying our block",
                            extra={"hosts": len(want.hosts)})
            self.desired = want
            self.wake.set()

    def _log_format(self, want: Published) -> None:
        """Say once which keys the block follows, and each new set of refused lines."""
        if want.source != self._source_logged:
            self._source_logged = want.source
            log.info("following the published hosts", extra={
                "configmap": self.settings.publish_configmap, "keys": want.source})
        if want.refused != self._refused_logged:
            self._refused_logged = want.refused
            for reason in want.refused[:REFUSED_LOGGED]:
                log.warning("published entry refused", extra={
                    "configmap": self.settings.publish_configmap, "reason": reason})
            if len(want.refused) > REFUSED_LOGGED:
                log.warning("more published entries refused", extra={
                    "configmap": self.settings.publish_configmap,
                    "more": len(want.refused) - REFUSED_LOGGED})

    def _apply_sync(self, want: Published) -> StatKey | None:
        skipped: list[str] = []
        result = self.writer.update(transform_for(want, skipped))
        if result.recovered != "clean":
            self.metrics.recoveries.labels(result.recovered).inc()
        managed = len(hostsfile.managed_hosts(result.after.decode("utf-8", "surrogateescape")))
        if tuple(skipped) != self._skipped_logged:
            self._skipped_logged = tuple(skipped)
            if skipped:
                log.info("hosts a hosts file cannot hold were skipped",
                         extra={"skipped": ",".join(skipped)})
        if result.changed:
            assert result.method is not None
            self.metrics.writes.labels(result.method).inc()
            log.info("hosts file updated", extra={
                "path": str(self.writer.path), "hosts": managed, "method": result.method,
                "attempts": result.attempts})
        self.metrics.hosts.set(managed)
        return self._key_as_left(result.after)

    async def apply(self, trigger: str) -> bool:
        want = self.desired
        if want is None:
            return True
        left: list[StatKey | None] = []  # the key as we left the file, once applied
        try:
            left.append(await asyncio.to_thread(self._apply_sync, want))
        except hostsfile.HostsFileError as exc:
            self._failed(trigger, "refused", "hosts file not changed: our block cannot be "
                         "edited safely; fix it by hand", exc)
            return False
        except ConflictError as exc:
            self._failed(trigger, "conflict", "hosts file not changed", exc)
            return False
        except SafeFileError as exc:
            self._failed(trigger, "failed", "hosts file not changed (or restored)", exc)
            return False
        except OSError as exc:
            self._failed(trigger, "io-error", "hosts file not changed", exc)
            return False
        finally:
            self._file_key = left[0] if left else _stat_key(self.writer.path)
        self.metrics.applies.labels(trigger, "ok").inc()
        self.metrics.last_success.set(time.time())
        self.applied_once = True
        self.last_error = ""
        return True

    def _failed(self, trigger: str, result: str, message: str, exc: Exception) -> None:
        self.metrics.applies.labels(trigger, result).inc()
        self.last_error = f"{message}: {exc}"
        log.error(message, extra={"path": str(self.writer.path), "error": str(exc),
                                  "trigger": trigger})

    def _key_as_left(self, wrote: bytes) -> StatKey | None:
        """The file's stat key as we left it, read back with its bytes through one descriptor:
        an edit that lands right after our write must not be taken for ours (it would go
        unnoticed until the next resync); None makes the next poll look again."""
        back = self.writer.read()
        return back.key if back.data == wrote else None

    def file_changed(self) -> bool:
        return _stat_key(self.writer.path) != self._file_key

    async def _settle(self) -> None:
        key = _stat_key(self.writer.path)
        for _ in range(20):
            await asyncio.sleep(SETTLE)
            now = _stat_key(self.writer.path)
            if now == key:
                return
            key = now

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        resync = max(1.0, self.settings.resync_interval)
        poll = self.settings.poll_interval
        next_full = loop.time() + resync
        retry = RETRY_MIN
        while True:
            timeout = next_full - loop.time()
            if poll > 0:
                timeout = min(timeout, poll)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), max(0.0, timeout))
            if self.wake.is_set():
                self.wake.clear()
                trigger = "published"
            elif loop.time() >= next_full:
                trigger = "resync"
            elif poll > 0 and self.desired is not None and self.file_changed():
                trigger = "file-changed"
                await self._settle()
            else:
                continue
            if await self.apply(trigger):
                retry = RETRY_MIN
                next_full = loop.time() + resync
            else:
                next_full = loop.time() + retry
                retry = min(RETRY_MAX, retry * 2)

    async def ready(self) -> Check:
        if self.desired is None:
            return Check(False, "published hosts not seen yet")
        if not self.applied_once:
            return Check(False, self.last_error or "first apply pending")
        return Check(True)


# ---------------------------------------------------------------------- wiring

def _install_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
            loop.add_signal_handler(sig, stop.set)


def _writer(settings: EtchostsSettings) -> SafeFile:
    return SafeFile(settings.hosts_file, method=settings.write_method,
                    state_dir=settings.state_dir)


def remove_block(settings: EtchostsSettings) -> int:
    """The uninstall step: take our block (and the original tool's lines) out, keep the rest."""
    writer = _writer(settings)
    try:
        result = writer.update(transform_for(REMOVED))
    except (hostsfile.HostsFileError, SafeFileError, OSError) as exc:
        log.error("could not remove our block; hosts file not changed",
                  extra={"path": str(writer.path), "error": str(exc)})
        return 1
    log.info("removed our block" if result.changed else "no block to remove",
             extra={"path": str(writer.path)})
    return 0


async def _serve(settings: EtchostsSettings, stop: asyncio.Event | None = None) -> int:
    stop = stop or asyncio.Event()
    _install_signals(stop)
    try:
        cluster = kconfig.load(settings.kubeconfig)
    except kconfig.KubeConfigError as exc:
        log.error("cannot reach Kubernetes", extra={"error": str(exc)})
        return 1
    namespace = kconfig.own_namespace(settings.namespace, cluster)
    registry = Registry()
    metrics = EtchostsMetrics(registry)
    writer = _writer(settings)
    agent = Agent(settings, writer, metrics)
    try:
        outcome = await asyncio.to_thread(writer.recover)
    except (SafeFileError, OSError) as exc:
        log.error("an interrupted rewrite of the hosts file cannot be resolved",
                  extra={"path": str(writer.path), "error": str(exc)})
        return 1
    if outcome != "clean":
        metrics.recoveries.labels(outcome).inc()

    def count(verb: str, status: int) -> None:
        metrics.requests.labels(verb, str(status)).inc()

    client = KubeClient.from_cluster(cluster, on_response=count)
    key = f"{namespace}/{settings.publish_configmap}"
    reflector: Reflector

    def changed() -> None:
        agent.published_changed(reflector.get(key))

    # One cheap watch per node: only our ConfigMap, never the namespace's others.
    reflector = Reflector(client, resource_path("v1", "configmaps", namespace),
                          kind="published-configmap", on_change=changed,
                          params={"fieldSelector": f"metadata.name={settings.publish_configmap}"},
                          silence_timeout=settings.watch_timeout)
    log.info("etchosts agent starting", extra={
        "server": cluster.server, "config": cluster.source, "configmap": key,
        "path": str(writer.path), "method": settings.write_method})
    admin: AdminServer | None = None
    if settings.admin_listen:
        async def ready() -> Check:
            if not reflector.synced.is_set():
                return Check(False, "published hosts not listed yet")
            if agent.desired is None:
                return Check(True, "no hosts published yet; file left alone")
            return await agent.ready()
        admin = await serve_admin(registry, settings.admin_listen, ready=ready)
        if admin is None:
            await client.close()
            return 1
    tasks = [asyncio.create_task(reflector.run(), name="watch"),
             asyncio.create_task(agent.run(), name="apply")]
    stopper = asyncio.create_task(stop.wait())
    code = 0
    try:
        done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not stopper and not task.cancelled() and task.exception() is not None:
                log.critical("etchosts agent failed", exc_info=task.exception())
                code = 1
        if code == 0:
            log.info("stopping; our block stays in place")
    finally:
        for task in [*tasks, stopper]:
            task.cancel()
        await asyncio.gather(*tasks, stopper, return_exceptions=True)
        if admin is not None:
            await admin.close()
        await client.close()
    return code


def run(settings: EtchostsSettings) -> int:
    setup_logging(settings.log_level, settings.log_format)
    quiet_http()
    if settings.remove:
        return remove_block(settings)
    if settings.resync_interval <= 0 or settings.poll_interval < 0:
        return usage_error("etchosts", "--resync-interval must be positive and "
                                       "--poll-interval not negative")
    return asyncio.run(_serve(settings))
