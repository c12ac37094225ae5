"""The shell of a registered source of custom resources (hairpin_proxy.sources.registry): its CRDs
watched while the cluster serves them (the Gateway API source's discovery), its named fact
objects watched for as long as it runs, and its claims from its registration's pure
``claims_of``. Nothing here knows any one source."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hairpin_proxy.claims import ObjectRef
from hairpin_proxy.controller.sources import MakeReflector, Source, same_object
from hairpin_proxy.controller.sources.optional import OptionalWatches
from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube.client import KubeClient, resource_path
from hairpin_proxy.kube.watch import Reflector
from hairpin_proxy.sources.gateway.watched import Wanted
from hairpin_proxy.sources.registry import Registration, Resource


def _api(r: Resource) -> str:
    return f"{r.group}/{r.versions[0]}" if r.group else r.versions[0]


def _as_is(obj: JsonObj) -> JsonObj:
    return obj


class RegisteredSource:
    """One registration's objects as host claims, and its facts for data-plane discovery."""

    def __init__(self, registration: Registration, client: KubeClient,
                 reflector: MakeReflector, *, interval: float,
                 on_change: Callable[[], None]) -> None:
        self.registration = registration
        crds = [r for r in registration.resources if r.crd]
        self.watches = OptionalWatches(
            client, reflector, [Wanted(r.group, r.plural, r.slim or _as_is) for r in crds],
            interval, on_change, namespaces=False)
        # Built-in fact objects, by name (cluster-wide): a refused list (RBAC not granted)
        # leaves the fact unknown and holds nothing back.
        self.named: dict[str, tuple[Resource, list[Reflector]]] = {
            r.plural: (r, [reflector(resource_path(_api(r), r.plural), f"{r.plural} {n}", n,
                                     transform=r.slim) for n in r.names])
            for r in registration.resources if not r.crd}

    @property
    def reflectors(self) -> Sequence[Reflector]:
        return ()

    def background(self) -> Sequence[Coroutine[Any, Any, None]]:
        return (self.watches.run(), *(r.run() for _, rs in self.named.values() for r in rs))

    def synced(self) -> bool:
        return self.watches.synced() and all(
            r.synced.is_set() or r.last_error for _, rs in self.named.values() for r in rs)

    def waiting(self) -> list[str]:
        return [*self.watches.waiting(), *(r.kind for _, rs in self.named.values() for r in rs
                                           if not r.synced.is_set() and not r.last_error)]

    def unreadable(self) -> frozenset[str]:
        return self.watches.unreadable() | {
            plural for plural, (_, rs) in self.named.items()
            if any(not r.synced.is_set() and r.last_error for r in rs)}

    def generation(self) -> tuple[object, ...]:
        return (*self.watches.generation(),
                *(r.generation for _, rs in self.named.values() for r in rs),
                self.unreadable())

    def facts(self) -> Mapping[str, Sequence[JsonObj]]:
        """``<registration>/<plural>`` → the objects of every resource it reads for facts."""
        out: dict[str, list[JsonObj]] = {}
        for r in self.registration.resources:
            if not r.fact:
                continue
            key = f"{self.registration.name}/{r.plural}"
            if r.crd:
                out.setdefault(key, []).extend(self.watches.objects(r.group, r.plural))
            else:
                out.setdefault(key, []).extend(
                    o for rr in self.named[r.plural][1] for o in rr.cache.values())
        return out

    def claiming(self) -> dict[str, list[JsonObj]]:
        out: dict[str, list[JsonObj]] = {}
        for r in self.registration.resources:
            if r.crd and r.plural in self.registration.claiming \
                    and self.watches.version(r.group, r.plural):
                out[r.group] = self.watches.objects(r.group, r.plural)
        return out

    def involved(self, ref: ObjectRef) -> JsonObj | None:
        for r in self.registration.resources:
            if not r.crd or r.kind != ref.kind or r.group != ref.group:
                continue
            entry = self.watches.active.get((r.group, r.plural))
            if entry is None:
                return None
            obj = same_object(ref, entry[1].get(f"{ref.namespace}/{ref.name}"))
            return None if obj is None else {"apiVersion": entry[0], "kind": r.kind, **obj}
        return None

if TYPE_CHECKING:
    _IS_A_SOURCE: type[Source] = RegisteredSource
