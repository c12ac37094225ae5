"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics.

A candidate takes the Lease when it is free or when its record (holder, renewTime) has not
changed for leaseDurationSeconds as measured by OUR clock since we first saw it — clocks of
different nodes are never compared. Every update is a PUT with the resourceVersion read, so of
two racing candidates one gets a 409. A leader renews every retry period; once it has gone
``renew_deadline`` (< lease duration) without a successful renewal it stops leading, before
anybody else may take the Lease. A renewal refused because somebody else changed the Lease
(409, or 404 once deleted) ends the leadership at once, without waiting for the deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube.client import ApiError, KubeClient, resource_path

log = logging.getLogger("hairpin_proxy.kube.lease")


def micro_time(ts: float | None = None) -> str:
    """A metav1.MicroTime: RFC 3339 with microseconds, UTC."""
    dt = datetime.fromtimestamp(time.time() if ts is None else ts, UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(self, client: KubeClient, *, namespace: str, name: str, identity: str,
                 lease_duration: float, renew_deadline: float, retry_period: float,
                 on_change: Callable[[bool], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not retry_period < renew_deadline < lease_duration:
            raise ValueError("leader election needs retry period < renew deadline < "
                             "lease duration")
        self.client = client
        self.path = resource_path("coordination.k8s.io/v1", "leases", namespace, name)
        self.collection = resource_path("coordination.k8s.io/v1", "leases", namespace)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_change = on_change
        self.clock = clock
        self._leading = False
        self._announced = False
        self._last_renew = float("-inf")
        self._observed: tuple[str, str] | None = None
        self._observed_at = 0.0
        self._resource_version = ""
        self.holder = ""
        self._lease: JsonObj | None = None
        # Whether one attempt has got an answer: until then we do not know if we lead.
        self.decided = False

    @property
    def is_leader(self) -> bool:
        """True only while our last renewal is fresh: a leader cut off stops writing at once."""
        return self._leading and self.clock() - self._last_renew < self.renew_deadline

    @property
    def holds_lease(self) -> bool:
        """We hold the Lease as far as we know, even while a renewal is overdue."""
        return self._leading

    def others_may_lead(self) -> bool:
        """Whether another candidate held the Lease when last seen, less than a Lease duration
        ago (it may still be writing; once the Lease has lapsed it has stopped)."""
        return bool(self.holder) and self.holder != self.identity and \
            self.clock() < self._observed_at + self.lease_duration

    def _set_leading(self, leading: bool) -> None:
        self._leading = leading
        self._announce()

    def _announce(self) -> None:
        # is_leader also turns false by the clock alone (a renewal overdue while the loop was
        # busy); report every change of it, so the caller catches up when it turns true again.
        leading = self.is_leader
        if leading == self._announced:
            return
        self._announced = leading
        if leading:
            log.info("became leader", extra={"lease": f"{self.namespace}/{self.name}",
                                             "identity": self.identity})
        else:
            log.warning("stopped leading", extra={"lease": f"{self.namespace}/{self.name}",
                                                  "identity": self.identity})
        if self.on_change is not None:
            self.on_change(leading)

    async def run(self) -> None:
        failures = 0
        while True:
            # The Lease is valid from when we sent the renewal, not from when it returned.
            started = self.clock()
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
                # that arrives as the attempt completes, and this loop would then never end.
                async with asyncio.timeout(self.retry_period * 2):
                    ok = await self.try_acquire_or_renew()
                self.decided = True
            except (ApiError, TimeoutError) as exc:
                ok = False
                failures += 1
                # An unreachable server is said once per outage by the client.
                away = isinstance(exc, ApiError) and exc.reason == "Unreachable"
                level = logging.WARNING if not away and (
                    failures in (1, 3) or failures % 30 == 0) else logging.DEBUG
                log.log(level, "lease attempt failed", extra={
                    "lease": f"{self.namespace}/{self.name}", "error": str(exc) or "timeout",
                    "failures": failures})
            else:
                failures = 0
            now = self.clock()
            if ok:
                self._last_renew = started
                self._set_leading(True)
            elif self._leading and now - self._last_renew >= self.renew_deadline:
                self._set_leading(False)
            else:
                self._announce()
            await asyncio.sleep(self.retry_period)

    async def try_acquire_or_renew(self) -> bool:
        now_wall = time.time()
        if self._leading and self._lease is not None:
            # Renewing: our copy is current unless someone else wrote, which the PUT's
            # resourceVersion check reveals (409) — one request instead of two.
            renewed = dict(self._lease)
            renewed["spec"] = {**(self._lease.get("spec") or {}),
                               "renewTime": micro_time(now_wall)}
            try:
                self._remember(await self.client.replace(self.path, renewed))
                return True
            except ApiError as exc:
                if exc.status not in (404, 409):
                    raise
                # Someone else wrote the Lease (409) or deleted it (404): it may name another
                # holder by now, who may be writing already. Stop at once, before the GET
                # below and before anything the caller does meanwhile. If the Lease still
                # names us (an unrelated edit), the slow path below takes it back and the
                # caller hears "became leader" again.
                self._lease = None
                self._set_leading(False)
        lease = await self.client.get(self.path)
        if lease is None:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(now_wall, now_wall, 0)}
            try:
                created = await self.client.create(self.collection, body)
            except ApiError as exc:
                if exc.status != 409:
                    raise
                # Another candidate created it first: read who, or this attempt would have
                # decided we do not lead without knowing that another may.
                lease = await self.client.get(self.path)
                if lease is None:
                    return False
            else:
                self._remember(created)
                return True
        spec: dict[str, Any] = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        record = (holder, str(spec.get("renewTime") or ""))
        now = self.clock()
        if record != self._observed:
            self._observed = record
            self._observed_at = now
        self.holder = holder
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and now < self._observed_at + duration:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            acquire = str(spec.get("acquireTime") or micro_time(now_wall))
        else:
            acquire = micro_time(now_wall)
            transitions += 1
        new = dict(lease)
        new["spec"] = {**spec, **self._spec(None, now_wall, transitions)}
        new["spec"]["acquireTime"] = acquire
        try:
            updated = await self.client.replace(self.path, new)
        except ApiError as exc:
            if exc.status == 409:
                return False
            raise
        self._remember(updated)
        return True

    def _spec(self, acquire: float | None, renew: float, transitions: int) -> JsonObj:
        spec: JsonObj = {"holderIdentity": self.identity,
                         "leaseDurationSeconds": max(1, round(self.lease_duration)),
                         "renewTime": micro_time(renew),
                         "leaseTransitions": transitions}
        if acquire is not None:
            spec["acquireTime"] = micro_time(acquire)
        return spec

    def _remember(self, lease: JsonObj) -> None:
        self._lease = lease
        spec = lease.get("spec") or {}
        self._observed = (str(spec.get("holderIdentity") or ""), str(spec.get("renewTime") or ""))
        self._observed_at = self.clock()
        self.holder = self._observed[0]

    async def release(self) -> None:
        """Give the Lease up on a clean shutdown so a standby takes over at once."""
        if not self._leading:
            return
        self._set_leading(False)
        with contextlib.suppress(ApiError):
            lease = await self.client.get(self.path)
            if lease is None:
                return
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            lease["spec"] = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1,
                             "renewTime": micro_time()}
            await self.client.replace(self.path, lease)
            log.info("released the lease", extra={"lease": f"{self.namespace}/{self.name}"})
