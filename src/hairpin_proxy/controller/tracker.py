"""The write tracker: every ConfigMap write of a pass goes through here.

It fences each write (a replica that has lost the Lease sends nothing more), remembers what
was written so that a cache lagging behind our own write is not mistaken for the truth, and
recognises our own writes when the watch echoes them back, so that they start no pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from hairpin_proxy.jsonobj import JsonObj, Mutate
from hairpin_proxy.kube.client import KubeClient
from hairpin_proxy.kube.configmap import WriteResult, write_configmap
from hairpin_proxy.kube.watch import Reflector


class NotLeading(Exception):
    """The Lease was lost during the pass: no further write."""


def resource_version(obj: JsonObj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class WriteTracker:
    def __init__(self, client: KubeClient, is_leader: Callable[[], bool],
                 on_conflict: Callable[[], None]) -> None:
        self.client = client
        self.is_leader = is_leader
        self.on_conflict = on_conflict
        # "namespace/name" → (resourceVersion our write replaced, the object it made), until
        # the cache has caught up with it (a CoreDNS ConfigMap of 10,000 hosts is half a
        # megabyte: not kept twice for longer than that).
        self._written: dict[str, tuple[str, JsonObj]] = {}
        # "namespace/name" → the cache a pass reads it from (``current``).
        self._caches: dict[str, Reflector] = {}
        # "namespace/name" → the data this pass wrote there, or found already right.
        self._sent: dict[str, object] = {}
        # Event-loop time of the last DNS ConfigMap write (--write-interval counts from it).
        self.last_rules_write = -1e9

    def new_pass(self) -> None:
        """What earlier passes sent says nothing once this one may end without writing (a
        Corefile that cannot be edited, a missing ConfigMap): the data they sent can come back
        later, restored by someone, while the Ingresses have changed since."""
        self._sent.clear()

    def forget_writes(self) -> None:
        """After a failed or crashed pass: trust the caches again."""
        self._written.clear()

    def rules_written(self) -> None:
        self.last_rules_write = asyncio.get_running_loop().time()

    def is_ours(self, obj: JsonObj) -> bool:
        """Whether ``obj`` holds the data this pass wrote there (our write coming back)."""
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        return key in self._sent and self._sent[key] == obj.get("data")

    def fence(self) -> None:
        if not self.is_leader():
            raise NotLeading

    def sending(self, namespace: str, name: str, mutate: Mutate) -> Mutate:
        """``mutate``, remembering the data it asks to write."""
        def run(cm: JsonObj | None) -> JsonObj | None:
            # Runs right before every POST/PUT, the retries after a 409 included: a replica
            # that has lost the Lease sends nothing more (fenced leadership).
            self.fence()
            out = mutate(cm)
            # Nothing to write: the data there now is what this pass wants.
            have = out if out is not None else cm
            if have is not None:
                self._sent[f"{namespace}/{name}"] = have.get("data")
            return out
        return run

    async def write(self, namespace: str, name: str, mutate: Mutate,
                    current: JsonObj | None) -> WriteResult:
        """Fenced read-modify-write of one ConfigMap, starting from ``current``; raises
        NotLeading when the Lease is lost before or during it."""
        self.fence()
        written = await write_configmap(self.client, namespace, name,
                                        self.sending(namespace, name, mutate), current=current,
                                        on_conflict=self.on_conflict)
        self.remember(written)
        return written

    def current(self, reflector: Reflector, namespace: str, name: str) -> JsonObj | None:
        """The freshest copy we know: our own last write until the watch has delivered it.

        While the cache still shows the version our write replaced, it lags behind us; once
        it shows anything else it has caught up (watch events arrive in order).
        """
        key = f"{namespace}/{name}"
        self._caches[key] = reflector
        cached = reflector.get(key)
        entry = self._written.get(key)
        if entry is None:
            return cached
        replaced, ours = entry
        if (cached is None and not replaced) or (cached is not None
                                                 and resource_version(cached) == replaced):
            return ours
        del self._written[key]
        return cached

    def remember(self, written: WriteResult) -> None:
        if written.changed and written.obj is not None:
            meta = written.obj.get("metadata") or {}
            namespace, name = str(meta.get("namespace")), str(meta.get("name"))
            self._written[f"{namespace}/{name}"] = (written.replaced, written.obj)
            cache = self._caches.get(f"{namespace}/{name}")
            if cache is not None:
                # The watch may have brought it back before the answer to the write came.
                self.current(cache, namespace, name)

    def caught_up(self, reflector: Reflector) -> None:
        """Let go of our writes ``reflector`` now holds (told by its watch)."""
        for key in [k for k in self._written if self._caches.get(k) is reflector]:
            self.current(reflector, *key.split("/", 1))

    @property
    def holding(self) -> int:
        """How many of our writes are kept because a cache lags behind them."""
        return len(self._written)
