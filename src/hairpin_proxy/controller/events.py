"""What the controller tells about objects: rate-limited Kubernetes Events and log lines for
hosts it refuses, rules it withdraws and configurations it will not edit."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from hairpin_proxy.controller.background import Background
from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.kube.client import JsonObj
from hairpin_proxy.kube.events import EventRecorder
from hairpin_proxy.policy import Rejection

log = logging.getLogger("hairpin_proxy.controller")

# Entries kept for the log's rate limit before the expired ones are dropped.
_LOGGED_MAX = 50_000


class Reports:
    """``find(namespace, name)`` gives the object a rejection is told on (with apiVersion and
    kind), or None when it is gone."""

    def __init__(self, events: EventRecorder, metrics: ControllerMetrics,
                 background: Background, interval: float,
                 find: Callable[[str, str], JsonObj | None]) -> None:
        self.events = events
        self.metrics = metrics
        self.background = background
        self.interval = interval
        self.find = find
        self._logged: dict[tuple[str, str, str, str], float] = {}

    def event(self, involved: JsonObj, reason: str, message: str, kind: str) -> None:
        """An Event on ``involved`` (sent in the background; the recorder rate-limits)."""
        if not (involved.get("metadata") or {}).get("name"):
            return

        async def send() -> None:
            if await self.events.warn(involved, reason=reason, message=message,
                                      key=f"{reason}|{message}", event_type=kind):
                self.metrics.events.labels(reason).inc()
        self.background.spawn(send())

    def notice(self, namespace: str, name: str, host: str, *, reason: str, message: str,
               event_type: str) -> None:
        """A log line and an Event ``reason`` on the origin ``namespace/name`` of ``host``, at
        most once per interval for the same message."""
        now = time.monotonic()
        key = (namespace, name, host, f"{reason}|{message}")
        last = self._logged.get(key)
        if last is not None and now - last < self.interval:
            return
        self._logged[key] = now
        (log.info if event_type == "Normal" else log.warning)(
            "host not redirected", extra={"origin": f"{namespace}/{name}", "host": host,
                                          "reason": reason, "detail": message})
        involved = self.find(namespace, name)
        if involved is not None:
            self.event(involved, reason, f"host {host!r}: {message}", event_type)

    def rejections(self, rejections: Sequence[Rejection]) -> None:
        """A log line and a HostRejected Event per refused host, at most once per interval."""
        now = time.monotonic()
        interval = self.interval
        pending: list[tuple[JsonObj, Rejection]] = []
        for rej in rejections:
            key = (rej.namespace, rej.name, rej.host, rej.reason)
            last = self._logged.get(key)
            if last is not None and now - last < interval:
                continue
            self._logged[key] = now
            log.warning("host rejected", extra={"ingress": f"{rej.namespace}/{rej.name}",
                                                "host": rej.host, "reason": rej.reason})
            involved = self.find(rej.namespace, rej.name)
            if involved is not None:
                pending.append((involved, rej))
        if len(self._logged) > _LOGGED_MAX:
            self._logged = {k: t for k, t in self._logged.items() if now - t < interval}
        if pending:
            self.background.spawn(self._record(pending))

    async def _record(self, pending: Sequence[tuple[JsonObj, Rejection]]) -> None:
        for involved, rej in pending:
            what = f"host {rej.host!r}" if rej.host else "Ingress"
            message = f"{what} not redirected by hairpin-proxy: {rej.reason}"
            if await self.events.warn(involved, reason="HostRejected", message=message,
                                      key=f"{rej.host}|{rej.reason}"):
                self.metrics.events.labels("HostRejected").inc()
