"""Where the names to redirect come from: each source watches its objects; the plan
(``plan.Planner``, through the snapshot ``routing.Routing`` takes of the caches) turns them
into claims, ``host → (target key, origin object, created)``, through the host policy.

A source is one module satisfying ``Source``: ingress.py (Ingresses by class, claiming for
``ingressclass/<class>``), gateway.py (Gateway API routes, claiming for
``gateway/<namespace>/<name>``) and registered.py (the registry's other kinds). Their claims
are planned together: conflicts, budgets and verification see all sources alike.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

from hairpin_proxy.claims import Claim, ObjectRef
from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube.watch import Reflector
from hairpin_proxy.targets.model import DEFAULT_KEY

__all__ = ["DEFAULT_TARGET", "Claim", "MakeReflector", "ObjectRef", "Source", "same_object"]

# The proxy's own Service and listeners: the target of every Ingress whose class has no data
# plane of its own (what every Ingress did before targets existed).
DEFAULT_TARGET = DEFAULT_KEY


class MakeReflector(Protocol):
    """The controller's way of starting a watch: ``name`` watches one object, ``labels`` a
    label selector, ``transform`` keeps only the fields the source reads."""

    def __call__(self, path: str, kind: str, name: str | None = None,
                 labels: str | None = None,
                 transform: Callable[[JsonObj], JsonObj] | None = None) -> Reflector: ...


class Source(Protocol):
    """Objects that name hosts: the controller starts its watches and background tasks, waits
    for ``synced``, and each pass reads its caches."""

    @property
    def reflectors(self) -> Sequence[Reflector]:
        """Watches that run for the controller's whole life."""
        ...

    def background(self) -> Sequence[Coroutine[Any, Any, None]]:
        """Tasks of its own (e.g. API discovery that starts and stops watches)."""
        ...

    def synced(self) -> bool:
        """Whether its caches hold the first full state."""
        ...

    def waiting(self) -> list[str]:
        """What it still waits for (for /readyz)."""
        ...

    def involved(self, ref: ObjectRef) -> JsonObj | None:
        """An object of its kinds as an Event's involved object (with apiVersion and kind),
        or None when it is not one of its kinds, is gone, or (when ``ref`` has a uid) was
        replaced by another of that name."""
        ...


def same_object(ref: ObjectRef, obj: JsonObj | None) -> JsonObj | None:
    """``obj`` when it is the object ``ref`` names (by uid, when ``ref`` has one)."""
    if obj is None:
        return None
    uid = (obj.get("metadata") or {}).get("uid")
    return obj if not ref.uid or not uid or uid == ref.uid else None
