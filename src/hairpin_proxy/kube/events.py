"""Kubernetes Events on the objects we judge, rate-limited so a bad Ingress cannot flood.

Each (object, key) pair gets at most one Event per ``interval``; on top of that a global token
bucket caps the rate across all objects. Failures to record are logged, never raised: an
Event is a courtesy to the Ingress owner, not part of the reconcile.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube.client import ApiError, KubeClient, resource_path
from hairpin_proxy.kube.lease import micro_time

log = logging.getLogger("hairpin_proxy.kube.events")

COMPONENT = "hairpin-proxy-controller"


class TokenBucket:
    def __init__(self, rate: float, burst: int, clock: Callable[[], float]) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self.tokens = float(burst)
        self.stamp = clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class EventRecorder:
    def __init__(self, client: KubeClient, *, instance: str, interval: float = 600.0,
                 rate: float = 0.2, burst: int = 25,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.instance = instance
        self.interval = interval
        self.clock = clock
        self.bucket = TokenBucket(rate, burst, clock)
        self._last: dict[tuple[str, str], float] = {}
        self.sent = 0
        self.suppressed = 0

    def due(self, uid: str, key: str) -> bool:
        """Whether an Event for (object, key) may be sent now; consumes the allowance."""
        now = self.clock()
        last = self._last.get((uid, key))
        if last is not None and now - last < self.interval:
            return False
        if not self.bucket.take():
            self.suppressed += 1
            return False
        self._last[(uid, key)] = now
        if len(self._last) > 50_000:
            # Forget stale entries so the table cannot grow without bound.
            self._last = {k: t for k, t in self._last.items() if now - t < self.interval}
        return True

    async def warn(self, involved: Mapping[str, Any], *, reason: str, message: str,
                   key: str, event_type: str = "Warning") -> bool:
        """Record an Event (Warning unless told) on ``involved`` unless rate-limited; True
        when sent."""
        meta = involved.get("metadata") or {}
        uid = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
        if not self.due(uid, key):
            return False
        namespace = str(meta.get("namespace") or "default")
        now = micro_time()
        stamp = now[:19] + "Z"
        event: JsonObj = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta.get('name')}.{secrets.token_hex(8)}",
                         "namespace": namespace},
            "involvedObject": {
                "apiVersion": str(involved.get("apiVersion") or "networking.k8s.io/v1"),
                "kind": str(involved.get("kind") or "Ingress"),
                "namespace": namespace, "name": str(meta.get("name") or ""),
                "uid": str(meta.get("uid") or ""),
                "resourceVersion": str(meta.get("resourceVersion") or ""),
            },
            "reason": reason, "message": message[:1024], "type": event_type,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT, "reportingInstance": self.instance,
            "firstTimestamp": stamp, "lastTimestamp": stamp, "eventTime": None, "count": 1,
        }
        try:
            await self.client.create(resource_path("v1", "events", namespace), event)
        except ApiError as exc:
            log.debug("could not record an Event",
                      extra={"error": str(exc), "object": f"{namespace}/{meta.get('name')}"})
            return False
        self.sent += 1
        return True
