"""Two replicas: exactly one writes; a killed leader is replaced within the lease duration."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from pathlib import Path

from hairpin_proxy import corefile
from hairpin_proxy.controller import Controller as Reconciler
from hairpin_proxy.controller import ControllerMetrics
from hairpin_proxy.kube import config as kconfig
from hairpin_proxy.kube.client import KubeClient
from hairpin_proxy.metrics import Registry
from hairpin_proxy.settings import ControllerSettings
from tests.controller.conftest import NAMESPACE, Controller, corefile_text, wait_until
from tests.fakeapi.fixtures import ingress
from tests.fakeapi.server import FakeApiServer

Start = Callable[..., Controller]
LEASE = "hairpin-proxy-controller"
LEASE_DURATION = 3.0
RETRY_PERIOD = 0.5


def holder(api: FakeApiServer) -> str:
    lease = api.get("Lease", NAMESPACE, LEASE)
    return str((lease or {}).get("spec", {}).get("holderIdentity") or "")


def leader_of(ctls: list[Controller]) -> list[Controller]:
    return [c for c in ctls if c.metric("hairpin_controller_leader") == 1]


def test_only_the_leader_writes_and_a_killed_leader_is_replaced(cluster: FakeApiServer,
                                                                start: Start) -> None:
    a, b = start(), start()
    a.wait_ready()
    b.wait_ready()
    wait_until(lambda: len(leader_of([a, b])) == 1, what="one leader")
    (leader,) = leader_of([a, b])
    standby = b if leader is a else a
    assert standby.get("/readyz") == (200, "ok (standby)\n")
    first = holder(cluster)
    assert first

    cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    wait_until(lambda: corefile.managed_hosts(corefile_text(cluster)) == ("a.example.com",),
               what="leader writes")
    time.sleep(1.0)
    assert leader.metric('hairpin_controller_writes_total{target="corefile"}') == 1
    assert standby.metric("hairpin_controller_writes_total") == 0
    assert standby.metric("hairpin_controller_leader") == 0

    leader.proc.send_signal(signal.SIGKILL)
    leader.proc.wait(10)
    killed = time.monotonic()
    wait_until(lambda: holder(cluster) not in ("", first), timeout=30, what="takeover")
    took = time.monotonic() - killed
    # client-go semantics: the standby waits one lease duration from when it last saw the
    # record change, which it notices within a retry period (plus scheduling slack).
    assert took <= LEASE_DURATION + RETRY_PERIOD + 2.0, took
    lease = cluster.get("Lease", NAMESPACE, LEASE)
    assert lease is not None
    assert lease["spec"]["leaseTransitions"] >= 1

    cluster.create(ingress("b", "b", tls_hosts=["b.example.com"]))
    wait_until(lambda: corefile.managed_hosts(corefile_text(cluster))
               == ("a.example.com", "b.example.com"), what="new leader writes")
    assert standby.metric("hairpin_controller_leader") == 1


def test_a_stopped_leader_releases_the_lease(cluster: FakeApiServer, start: Start) -> None:
    a = start()
    a.wait_ready()
    wait_until(lambda: holder(cluster) != "", what="lease taken")
    assert a.stop() == 0
    assert holder(cluster) == ""
    b = start()
    began = time.monotonic()
    b.wait_ready()
    wait_until(lambda: b.metric("hairpin_controller_leader") == 1, what="b leads")
    # Released: no need to wait out the old lease.
    assert time.monotonic() - began < LEASE_DURATION + 5


def test_a_leader_that_cannot_renew_stops_writing(cluster: FakeApiServer,
                                                  start: Start) -> None:
    a = start()
    a.wait_ready()
    wait_until(lambda: a.metric("hairpin_controller_leader") == 1, what="a leads")
    # Every Lease request fails: the leader must step down within its renew deadline.
    cluster.fail_requests(1000, status=500, path_re=r"/leases")
    failing = time.monotonic()
    wait_until(lambda: a.metric("hairpin_controller_leader") == 0, timeout=20, what="step down")
    assert time.monotonic() - failing < LEASE_DURATION + 2.0
    puts = cluster.count("PUT", r"/configmaps/coredns$")
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    time.sleep(1.5)
    assert cluster.count("PUT", r"/configmaps/coredns$") == puts
    assert a.get("/readyz")[0] == 200


def test_overdue_renewal_defers_the_write_instead_of_dropping_it(cluster: FakeApiServer,
                                                                 kubeconfig: Path) -> None:
    """A leader whose renewal is late (busy loop) must retry, not forget, pending work."""
    settings = ControllerSettings(kubeconfig=kubeconfig, namespace=NAMESPACE,
                                  admin_listen="", lease_duration=3, renew_deadline=2,
                                  retry_period=0.5)

    async def main() -> tuple[bool, bool]:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        try:
            ctl = Reconciler(settings, client, NAMESPACE, ControllerMetrics(Registry()))
            for r in ctl.reflectors:
                r.synced.set()
            assert ctl.elector is not None
            ctl.elector._leading = True
            ctl.elector._last_renew = float("-inf")
            assert not ctl.is_leader()
            overdue = await ctl.reconcile()
            ctl.elector._leading = False
            standby = await ctl.reconcile()
            return overdue, standby
        finally:
            await client.close()

    overdue, standby = asyncio.run(main())
    assert overdue is False  # retried after a backoff
    assert standby is True  # nothing to do for a standby
    assert cluster.count("PUT", r"/configmaps/coredns$") == 0
