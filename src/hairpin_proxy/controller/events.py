"""What the controller tells about objects: rate-limited Kubernetes Events and log lines for
hosts it refuses, rules it withdraws and configurations it will not edit."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from hairpin_proxy.claims import ObjectRef
from hairpin_proxy.controller.background import Background
from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube.events import EventRecorder
from hairpin_proxy.policy import Rejection
from hairpin_proxy.wildcards import written

log = logging.getLogger("hairpin_proxy.controller")

# Entries kept for the log's rate limit before the expired ones are dropped.
_LOGGED_MAX = 50_000


class Reports:
    """``find(ref)`` gives the object a refusal is told on (with apiVersion and kind), or None
    when it is gone: the object of that kind (an Ingress and an HTTPRoute may share a
    namespace and name) and, when the reference has one, that uid (not a newer object of
    the same name)."""

    def __init__(self, events: EventRecorder, metrics: ControllerMetrics,
                 background: Background, interval: float,
                 find: Callable[[ObjectRef], JsonObj | None]) -> None:
        self.events = events
        self.metrics = metrics
        self.background = background
        self.interval = interval
        self.find = find
        self._logged: dict[tuple[ObjectRef, str, str], float] = {}

    def event(self, involved: JsonObj, reason: str, message: str, kind: str) -> None:
        """An Event on ``involved`` (sent in the background; the recorder rate-limits)."""
        if not (involved.get("metadata") or {}).get("name"):
            return

        async def send() -> None:
            if await self.events.warn(involved, reason=reason, message=message,
                                      key=f"{reason}|{message}", event_type=kind):
                self.metrics.events.labels(reason).inc()
        self.background.spawn(send())

    def _due(self, key: tuple[ObjectRef, str, str], now: float) -> bool:
        last = self._logged.get(key)
        if last is not None and now - last < self.interval:
            return False
        self._logged[key] = now
        if len(self._logged) > _LOGGED_MAX:
            self._logged = {k: t for k, t in self._logged.items() if now - t < self.interval}
        return True

    def notice(self, origin: ObjectRef, host: str, *, reason: str, message: str,
               event_type: str) -> None:
        """A log line and an Event ``reason`` on ``origin`` about ``host``, at most once per
        interval for the same message."""
        if not self._due((origin, host, f"{reason}|{message}"), time.monotonic()):
            return
        (log.info if event_type == "Normal" else log.warning)(
            "host not redirected", extra={"origin": str(origin), "host": host,
                                          "reason": reason, "detail": message})
        involved = self.find(origin)
        if involved is not None:
            # As the object writes it: "**.d" (any depth) is a route's "*.d".
            self.event(involved, reason, f"host {written(host)!r}: {message}", event_type)

    def rejections(self, rejections: Sequence[Rejection]) -> None:
        """A log line and a HostRejected Event per refused host (or object), at most once per
        interval."""
        now = time.monotonic()
        pending: list[tuple[JsonObj, Rejection]] = []
        for rej in rejections:
            ref = rej.ref
            if not self._due((ref, rej.host, rej.reason), now):
                continue
            log.warning("host rejected", extra={"object": str(ref), "host": rej.named,
                                                "reason": rej.reason})
            involved = self.find(ref)
            if involved is not None:
                pending.append((involved, rej))
        if pending:
            self.background.spawn(self._record(pending))

    async def _record(self, pending: Sequence[tuple[JsonObj, Rejection]]) -> None:
        for involved, rej in pending:
            what = f"host {rej.host!r}" if rej.host else str(involved.get("kind") or "object")
            message = f"{what} not redirected by hairpin-proxy: {rej.reason}"
            if await self.events.warn(involved, reason="HostRejected", message=message,
                                      key=f"{rej.host}|{rej.reason}"):
                self.metrics.events.labels("HostRejected").inc()
