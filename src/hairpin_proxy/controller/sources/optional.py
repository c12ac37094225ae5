"""Watches of resources the cluster may or may not serve (custom resources come and go): every
``--api-discovery-interval`` the served versions are looked up again, watches start for
resources that appeared (in their preferred version) and stop for those that went. The Gateway
API source and the registered sources of custom resources share it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

from hairpin_proxy.apis import GATEWAY_GROUP
from hairpin_proxy.controller.sources import MakeReflector
from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube.api_discovery import served
from hairpin_proxy.kube.client import ApiError, KubeClient, resource_path
from hairpin_proxy.kube.watch import Reflector
from hairpin_proxy.sources.gateway.slim import slim_namespace
from hairpin_proxy.sources.gateway.watched import Wanted

log = logging.getLogger("hairpin_proxy.controller")


class OptionalWatches:
    """Watches of resources the cluster may or may not serve, following discovery."""

    def __init__(self, client: KubeClient, reflector: MakeReflector,
                 wanted: Sequence[Wanted], interval: float, on_change: Callable[[], None],
                 *, namespaces: bool) -> None:
        self.client = client
        self.reflector = reflector
        self.wanted = wanted
        self.interval = interval
        self.on_change = on_change
        self.with_namespaces = namespaces
        # (group, plural) → (group/version, its reflector, the task running it).
        self.active: dict[tuple[str, str], tuple[str, Reflector, asyncio.Task[None]]] = {}
        self.discovered = asyncio.Event()
        # Bumped whenever a watch starts or stops: caches appeared or vanished.
        self.epoch = 0

    def synced(self) -> bool:
        """Discovery done, and every watch listed or failing: a resource the API serves but
        refuses us (RBAC trimmed by hand) must not keep the Ingresses' rules from being
        written; what it would have said counts as unknown (``unreadable``)."""
        return self.discovered.is_set() and all(r.synced.is_set() or r.last_error
                                                for _, r, _ in self.active.values())

    def unreadable(self) -> frozenset[str]:
        """Plurals of served resources whose list keeps failing."""
        return frozenset(plural for (_, plural), (_, r, _) in self.active.items()
                         if not r.synced.is_set() and r.last_error)

    def waiting(self) -> list[str]:
        if not self.discovered.is_set():
            return ["api discovery"]
        return [r.kind for _, r, _ in self.active.values()
                if not r.synced.is_set() and not r.last_error]

    def objects(self, group: str, plural: str) -> list[JsonObj]:
        entry = self.active.get((group, plural))
        return list(entry[1].cache.values()) if entry else []

    def version(self, group: str, plural: str) -> str:
        entry = self.active.get((group, plural))
        return entry[0] if entry else ""

    def generation(self) -> tuple[int, ...]:
        return (self.epoch, *(r.generation for _, r, _ in self.active.values()))

    async def _discover(self) -> None:
        groups = {w.group for w in self.wanted}
        found: dict[str, dict[str, str]] = {}
        for group in sorted(groups):
            try:
                found[group] = await served(self.client, group)
            except ApiError as exc:
                # Keep what runs: an unanswered discovery says nothing about the CRDs.
                log.warning("API discovery failed; keeping the current watches",
                            extra={"group": group, "error": str(exc)})
                return
        wanted = [(w, found[w.group].get(w.plural, "")) for w in self.wanted]
        if self.with_namespaces:
            # allowedRoutes namespace selectors need the Namespaces' labels, only while the
            # Gateway API is there.
            on = bool(found.get(GATEWAY_GROUP))
            wanted.append((Wanted("", "namespaces", slim_namespace), "v1" if on else ""))
        changed = False
        for w, version in wanted:
            key = (w.group, w.plural)
            now = self.active.get(key)
            if now is not None and now[0] == version:
                continue
            if now is not None:
                now[2].cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await now[2]
                del self.active[key]
                changed = True
                log.info("stopped watching a resource the API no longer serves",
                         extra={"resource": f"{w.plural}.{w.group}", "version": now[0]})
            if version:
                kind = f"{w.plural}.{version}"
                made = self.reflector(resource_path(version, w.plural), kind,
                                      transform=w.transform)
                task = asyncio.create_task(made.run(), name=f"watch {kind}")
                self.active[key] = (version, made, task)
                changed = True
                log.info("watching a resource the API serves",
                         extra={"resource": f"{w.plural}.{w.group}", "version": version})
        if changed:
            self.epoch += 1
            self.on_change()

    async def run(self) -> None:
        try:
            while True:
                await self._discover()
                if not self.discovered.is_set():
                    self.discovered.set()
                    # A pass that found the caches waiting for discovery did nothing; with no
                    # watch to start, nothing else would ask for another, and the first sync
                    # (and readiness) would wait for an unrelated change.
                    self.on_change()
                await asyncio.sleep(self.interval)
        finally:
            tasks = [task for _, _, task in self.active.values()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
