"""The Ingress source: Ingresses (all namespaces, or the --include-namespace ones) and
IngressClasses, evaluated incrementally by the policy cache. Each claim names its Ingress's
class as its target (``ingressclass/<class>``); routing decides which data plane that is."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.controller.sources import (
    Claim,
    MakeReflector,
    ObjectRef,
    Source,
    SourceClaims,
    same_object,
)
from hairpin_proxy.ingress.names import INGRESS_GROUP
from hairpin_proxy.ingress.policy import default_ingress_classes
from hairpin_proxy.ingress.policy_cache import PolicyCache
from hairpin_proxy.ingress.slim import slim_ingress
from hairpin_proxy.kube.client import JsonObj, resource_path
from hairpin_proxy.kube.watch import Reflector
from hairpin_proxy.plan.claims import ingress_origin
from hairpin_proxy.policy import HostPolicy, PolicyResult

INGRESS_API = "networking.k8s.io/v1"

# Ingress changes since the last pass that are evaluated on the event loop (more: in a thread).
_INLINE_CHANGES = 64


def _few_changes(key: tuple[int, ...], last: tuple[int, ...]) -> bool:
    """Whether the policy can catch up on the event loop: since ``last`` (the caches'
    generations, then the policy's and the IngressClasses') only a few Ingresses changed, and
    neither the policy nor any IngressClass."""
    return (len(key) == len(last) and key[-2:] == last[-2:]
            and sum(key) - sum(last) <= _INLINE_CHANGES)


class IngressSource:
    def __init__(self, reflector: MakeReflector, include_namespaces: Sequence[str],
                 policy: HostPolicy, metrics: ControllerMetrics) -> None:
        self.metrics = metrics
        if include_namespaces:
            # dict.fromkeys: a namespace given twice is watched once.
            self.ingresses = [reflector(resource_path(INGRESS_API, "ingresses", ns),
                                        f"ingresses/{ns}", transform=slim_ingress)
                              for ns in dict.fromkeys(include_namespaces)]
        else:
            self.ingresses = [reflector(resource_path(INGRESS_API, "ingresses"), "ingresses",
                                        transform=slim_ingress)]
        self.classes = reflector(resource_path(INGRESS_API, "ingressclasses"), "ingressclasses")
        self._cache = PolicyCache(policy)
        # Claims kept between passes (claims_of): the last result's, each host's with the
        # origins and their resourceVersions they came from, and each origin's facts.
        self._claims_memo: tuple[PolicyResult, int, tuple[Claim, ...]] | None = None
        self._claims_gen = -1
        self._by_host: dict[str, tuple[tuple[str, ...], tuple[str, ...],
                                       tuple[Claim, ...]]] = {}
        self._origin_info: dict[str, tuple[str, ObjectRef, str, str]] = {}
        self._result: PolicyResult | None = None
        self._result_key: tuple[int, ...] = ()

    @property
    def reflectors(self) -> Sequence[Reflector]:
        return [*self.ingresses, self.classes]

    async def evaluate(self, policy: HostPolicy, policy_generation: int) -> PolicyResult:
        key = (*(r.generation for r in self.ingresses), policy_generation,
               self.classes.generation)
        if self._result is None or key != self._result_key:
            # Copies taken on the event loop, where the watches change the caches (a C-level
            # dict copy, well under a millisecond for 10,000). A full pass (the first, or
            # after a change of IngressClasses) over 10,000 Ingresses takes 100-200 ms and
            # runs in a thread; a few changed Ingresses cost about a millisecond, less than
            # the trip to a thread and back.
            if len(self.ingresses) == 1:
                items = dict(self.ingresses[0].cache)
            else:
                items = {k: v for r in self.ingresses for k, v in r.cache.items()}
            classes = list(self.classes.cache.values())
            if _few_changes(key, self._result_key):
                result, evaluated = self._cache.update(items, classes, policy)
            else:
                result, evaluated = await asyncio.to_thread(self._cache.update, items,
                                                            classes, policy)
            self._result, self._result_key = result, key
            self.metrics.evaluations.inc(evaluated)
            return result
        return self._result

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

    async def claims(self, policy: HostPolicy, policy_generation: int) -> SourceClaims:
        result = await self.evaluate(policy, policy_generation)
        return SourceClaims(self.claims_of(result), result.rejections)

    def claims_of(self, result: PolicyResult) -> tuple[Claim, ...]:
        """``result``'s hosts as claims, one per origin. Every pass plans all of them, so
        they are kept: the same result (a pass for another reason) gives the same tuple,
        and a host whose origins are unchanged keeps its claims (a changed Ingress rebuilds
        only its own)."""
        gen = self.classes.generation
        memo = self._claims_memo
        if memo is not None and memo[0] is result and memo[1] == gen:
            return memo[2]
        if gen != self._claims_gen:
            # A class change may change every Ingress's target (the default class).
            self._by_host.clear()
            self._origin_info.clear()
            self._claims_gen = gen
        defaults = default_ingress_classes(self.classes.cache.values())
        info = self._origin_info
        by_host = self._by_host
        out: list[Claim] = []
        fresh: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[Claim, ...]]] = {}
        for host, names in result.sources.items():
            versions = []
            for origin in names:
                ns, _, name = origin.partition("/")
                obj = self.find(ns, name) or {}
                versions.append(str((obj.get("metadata") or {}).get("resourceVersion") or ""))
            rvs = tuple(versions)
            kept = by_host.get(host)
            if kept is not None and kept[0] == names and kept[1] == rvs:
                fresh[host] = kept
                out.extend(kept[2])
                continue
            made = []
            for origin, rv in zip(names, rvs, strict=True):
                known = info.get(origin)
                if known is None or known[0] != rv:
                    ns, _, name = origin.partition("/")
                    obj = self.find(ns, name) or {"metadata": {"namespace": ns, "name": name}}
                    known = info[origin] = (rv, *ingress_origin(obj, defaults))
                made.append(Claim(host, known[2], known[1], known[3]))
            fresh[host] = (names, rvs, tuple(made))
            out.extend(made)
        self._by_host = fresh
        if len(info) > 2 * len(fresh) + 1000:
            live = {o for names, _, _ in fresh.values() for o in names}
            self._origin_info = {o: v for o, v in info.items() if o in live}
        claims = tuple(out)
        self._claims_memo = (result, gen, claims)
        return claims


if TYPE_CHECKING:
    # Proof for mypy that the class satisfies the protocol.
    _IS_A_SOURCE: type[Source] = IngressSource
