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

import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from hairpin_proxy.apis import GATEWAY_GROUP
from hairpin_proxy.claims import ObjectRef
from hairpin_proxy.controller.sources import MakeReflector, Source, same_object
from hairpin_proxy.controller.sources.optional import OptionalWatches
from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube.client import KubeClient
from hairpin_proxy.kube.watch import Reflector
from hairpin_proxy.sources.gateway.watched import ROUTE_PLURALS, WANTED

log = logging.getLogger("hairpin_proxy.controller")

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
