"""Where the names to redirect come from: each source watches its objects and turns them into
claims, ``host → (target key, origin object, created)``.

The Ingress source answers with the host policy's ``PolicyResult`` and its claims are a view
of that result that names the target (``ingressclass/<class>``) and the origin's age, which is
what budgets and conflicts between sources are decided on. The Gateway API source
(gateway.py) claims for ``gateway/<namespace>/<name>`` targets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from hairpin_proxy.claims import Claim, ObjectRef
from hairpin_proxy.kube.client import JsonObj
from hairpin_proxy.kube.watch import Reflector
from hairpin_proxy.policy import HostPolicy, PolicyResult
from hairpin_proxy.targets.model import DEFAULT_KEY

__all__ = ["DEFAULT_TARGET", "Claim", "MakeReflector", "ObjectRef", "Source"]

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
    @property
    def reflectors(self) -> Sequence[Reflector]:
        """The watches whose caches the source reads (started and awaited by the controller)."""
        ...

    async def evaluate(self, policy: HostPolicy, policy_generation: int) -> PolicyResult:
        """The hosts its objects ask for, filtered by ``policy`` (whose generation changes
        whenever the policy does, so that an unchanged result can be reused)."""
        ...

    def claims(self, result: PolicyResult) -> Iterator[Claim]:
        """``result``'s hosts as claims, one per origin that asked for the host."""
        ...

    def involved(self, namespace: str, name: str) -> JsonObj | None:
        """The origin as an Event's involved object (with apiVersion and kind), or None when it
        is gone."""
        ...
