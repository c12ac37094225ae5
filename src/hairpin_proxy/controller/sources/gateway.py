"""The Gateway API source: GatewayClasses, Gateways, ListenerSets and routes (HTTPRoute,
GRPCRoute, TLSRoute), watched only while the cluster serves them, plus the implementations' own
objects that say whether a Gateway expects the PROXY protocol (Envoy Gateway's
ClientTrafficPolicies, NGINX Gateway Fabric's NginxProxies).

Custom resources come and go: every ``--api-discovery-interval`` the served versions are looked
up again, watches start for resources that appeared (in their preferred version) and stop for
those that went, so a cluster without the CRDs works as before and CRDs installed later are
picked up without a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from hairpin_proxy.claims import ObjectRef
from hairpin_proxy.controller.sources import MakeReflector, Source, same_object
from hairpin_proxy.gateway.model import GROUP as GATEWAY_GROUP
from hairpin_proxy.gateway.slim import slim_namespace
from hairpin_proxy.gateway.watched import ROUTE_PLURALS, WANTED, Wanted
from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube.client import ApiError, KubeClient, resource_path
from hairpin_proxy.kube.discovery import served
from hairpin_proxy.kube.watch import Reflector

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


class GatewaySource:
    """Routes on Gateways of the served GatewayClasses, as host claims."""

    def __init__(self, client: KubeClient, reflector: MakeReflector, *, interval: float,
                 gateway_classes: Sequence[str], on_change: Callable[[], None]) -> None:
        self.watches = OptionalWatches(client, reflector, WANTED, interval, on_change,
                                       namespaces=True)
        self.gateway_classes = tuple(gateway_classes)
        self._logged: set[str] = set()

    def synced(self) -> bool:
        return self.watches.synced()

    def unreadable(self) -> frozenset[str]:
        return self.watches.unreadable()

    def note(self, note: str) -> None:
        # Notes repeat on every evaluation: each is told once per process.
        if note not in self._logged and len(self._logged) < 10_000:
            self._logged.add(note)
            log.info("gateway api: %s", note)

    @property
    def reflectors(self) -> Sequence[Reflector]:
        # Its watches come and go with the CRDs: started by its own discovery task.
        return ()

    def background(self) -> Sequence[Coroutine[Any, Any, None]]:
        return (self.watches.run(),)

    def waiting(self) -> list[str]:
        return self.watches.waiting()

    # -------------------------------------------------------------- what targets read

    def client_traffic_policies(self) -> list[JsonObj]:
        return self.watches.objects("gateway.envoyproxy.io", "clienttrafficpolicies")

    def nginx_proxies(self) -> dict[str, JsonObj]:
        return {f"{(p.get('metadata') or {}).get('namespace')}/"
                f"{(p.get('metadata') or {}).get('name')}": p
                for p in self.watches.objects("gateway.nginx.org", "nginxproxies")}

    def involved(self, ref: ObjectRef) -> JsonObj | None:
        """The route ``ref`` names as an Event's involved object, in the version the
        cluster serves, or None when it is gone (or not a route)."""
        plural = ROUTE_PLURALS.get(ref.kind)
        if plural is None or ref.group not in ("", GATEWAY_GROUP):
            return None
        entry = self.watches.active.get((GATEWAY_GROUP, plural))
        if entry is None:
            return None
        obj = same_object(ref, entry[1].get(f"{ref.namespace}/{ref.name}"))
        if obj is None:
            return None
        return {"apiVersion": entry[0], "kind": ref.kind, **obj}


if TYPE_CHECKING:
    # Proof for mypy that the class satisfies the protocol.
    _IS_A_SOURCE: type[Source] = GatewaySource
