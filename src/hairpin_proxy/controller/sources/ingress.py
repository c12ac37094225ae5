"""The Ingress source: Ingresses (all namespaces, or the --include-namespace ones) and
IngressClasses, cached for the plan (plan.Planner reads them through the host policy, each
changed Ingress alone). Each claim names its Ingress's class as its target
(``ingressclass/<class>``); the plan decides which data plane that is."""

from __future__ import annotations

from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from hairpin_proxy.apis import INGRESS_API_VERSION, INGRESS_GROUP
from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.controller.sources import MakeReflector, ObjectRef, Source, same_object
from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube.client import resource_path
from hairpin_proxy.kube.watch import Reflector, Trim
from hairpin_proxy.policy import HostPolicy
from hairpin_proxy.sources.ingress.slim import own_name, quick_ingress, slim_ingress

INGRESS_API = INGRESS_API_VERSION
_KEEP = Trim(slim_ingress, quick_ingress)

class IngressSource:
    def __init__(self, reflector: MakeReflector, include_namespaces: Sequence[str],
                 policy: HostPolicy, metrics: ControllerMetrics) -> None:
        self.metrics = metrics
        if include_namespaces:
            # dict.fromkeys: a namespace given twice is watched once.
            self.ingresses = [reflector(resource_path(INGRESS_API, "ingresses", ns),
                                        f"ingresses/{ns}", transform=_KEEP)
                              for ns in dict.fromkeys(include_namespaces)]
        else:
            self.ingresses = [reflector(resource_path(INGRESS_API, "ingresses"), "ingresses",
                                        transform=_KEEP)]
        for r in self.ingresses:
            # Nothing reads these caches' keys (``find`` goes through ``get``).
            r.key_by_name(own_name)
        self.classes = reflector(resource_path(INGRESS_API, "ingressclasses"), "ingressclasses")

    @property
    def reflectors(self) -> Sequence[Reflector]:
        return [*self.ingresses, self.classes]

    def find(self, namespace: str, name: str) -> JsonObj | None:
        """The cached Ingress (slimmed), or None."""
        for r in self.ingresses:
            obj = r.get(f"{namespace}/{name}")
            if obj is not None:
                return obj
        return None

    def involved(self, ref: ObjectRef) -> JsonObj | None:
        if ref.kind != "Ingress" or ref.group not in ("", INGRESS_GROUP):
            return None
        obj = same_object(ref, self.find(ref.namespace, ref.name))
        if obj is None:
            return None
        return {"apiVersion": INGRESS_API, "kind": "Ingress", **obj}

    def status_objects(self) -> list[JsonObj]:
        """Every cached Ingress: their status names load balancers of this cluster."""
        return [obj for r in self.ingresses for obj in r.cache.values()]

    def status_generation(self) -> int:
        return sum(r.generation for r in self.ingresses)

    def background(self) -> Sequence[Coroutine[Any, Any, None]]:
        return ()

    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self.reflectors)

    def waiting(self) -> list[str]:
        return [r.kind for r in self.reflectors if not r.synced.is_set()]


if TYPE_CHECKING:
    # Proof for mypy that the class satisfies the protocol.
    _IS_A_SOURCE: type[Source] = IngressSource
