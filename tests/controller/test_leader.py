"""Two replicas: exactly one writes; a killed leader is replaced within the lease duration."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from hairpin_proxy import corefile
from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.controller.reconciler import Controller as Reconciler
from hairpin_proxy.kube import config as kconfig
from hairpin_proxy.kube.client import KubeClient
from hairpin_proxy.kube.lease import micro_time
from hairpin_proxy.metrics import Registry
from hairpin_proxy.settings import ControllerSettings
from tests.controller.conftest import NAMESPACE, Controller, corefile_text, wait_until
from tests.fakeapi.fixtures import ingress
from tests.fakeapi.server import RECORD, FakeApiServer, RequestRecord
from tests.waiting import PATIENCE, until

Start = Callable[..., Controller]
LEASE = "hairpin-proxy-controller"
LEASE_DURATION = 3.0


COREDNS_PUT = r"/namespaces/kube-system/configmaps/coredns$"


class AttributedApi(FakeApiServer):
    """The fake API, also noting who sent each request (the bearer token of the client's
    kubeconfig: one per replica) and when its answer was ready. The request log alone cannot
    tell two replicas apart."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sender: dict[int, str] = {}
        self.answered: dict[int, float] = {}

    @web.middleware
    async def _middleware(
        self, request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        token = request.headers.get("Authorization", "").partition(" ")[2].strip()
        try:
            return await super()._middleware(request, handler)
        finally:
            record = request.get(RECORD)
            if record is not None:
                self.sender[id(record)] = token
                self.answered[id(record)] = time.time()

    def by(self, record: RequestRecord) -> str:
        return self.sender.get(id(record), "")


@pytest.fixture
def fake_api() -> Iterator[FakeApiServer]:
    """This module's fake API tells the replicas' requests apart (no authentication)."""
    with AttributedApi(bookmark_interval=0.5) as server:
        yield server


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
    wait_until(lambda: leader.metric('hairpin_controller_writes_total{target="corefile"}') == 1,
               what="the write counted")
    assert standby.metric("hairpin_controller_writes_total") == 0
    assert standby.metric("hairpin_controller_leader") == 0

    leader.proc.send_signal(signal.SIGKILL)
    leader.proc.wait(PATIENCE)
    killed = time.time()
    wait_until(lambda: holder(cluster) not in ("", first), timeout=30, what="takeover")
    # client-go semantics: the standby waits one lease duration from when it saw the record
    # change, which was after the leader's last renewal reached the server: never sooner.
    writes = [r for r in cluster.requests(None, r"/leases") if r.method in ("POST", "PUT")
              and r.status in (200, 201)]  # the leader's acquisition and renewals, the takeover
    last_renewal = max(r.time for r in writes if r.time < killed)
    takeover = min(r.time for r in writes if r.time >= killed)
    assert takeover - last_renewal >= LEASE_DURATION, writes
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
    released = time.time()
    b = start()
    b.wait_ready()
    wait_until(lambda: b.metric("hairpin_controller_leader") == 1, what="b leads")
    # Released: no need to wait out the old lease. b's first look at the Lease finds it free
    # and takes it; one still held would have been read again every retry period until expiry.
    looks = cluster.requests("GET", rf"/leases/{LEASE}$", since=released)
    (taken,) = [r for r in cluster.requests("PUT", rf"/leases/{LEASE}$", since=released)
                if r.status == 200][:1]
    assert len([r for r in looks if r.time < taken.time]) == 1, looks


def test_a_leader_that_cannot_renew_stops_writing(cluster: FakeApiServer,
                                                  start: Start) -> None:
    a = start()
    a.wait_ready()
    wait_until(lambda: a.metric("hairpin_controller_leader") == 1, what="a leads")
    # Every Lease request fails: the leader must step down within its renew deadline.
    cluster.fail_requests(1000, status=500, path_re=r"/leases")
    failing = time.time()
    wait_until(lambda: a.metric("hairpin_controller_leader") == 0, timeout=20, what="step down")
    # It stepped down because renewals failed: it tried, and none went through.
    assert cluster.requests("PUT", r"/leases", since=failing)
    assert not [r for r in cluster.requests(None, r"/leases", since=failing) if r.status == 200]
    puts = cluster.count("PUT", r"/configmaps/coredns$")
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    time.sleep(1.5)
    assert cluster.count("PUT", r"/configmaps/coredns$") == puts
    assert a.get("/readyz")[0] == 200


def quick_lease(kubeconfig: Path) -> ControllerSettings:
    """An in-process controller's settings: a Lease of seconds, no verification."""
    return ControllerSettings(kubeconfig=kubeconfig, namespace=NAMESPACE, admin_listen="",
                              lease_duration=3, renew_deadline=2, retry_period=0.5,
                              verify_hosts="off")


@contextlib.asynccontextmanager
async def watching(settings: ControllerSettings, *, renewing: bool = False
                   ) -> AsyncIterator[Reconciler]:
    """An in-process controller whose caches are synced (its watches running, and its
    Lease's renewals when ``renewing``), with no reconcile loop: the test runs its passes."""
    client = KubeClient.from_cluster(kconfig.load(settings.kubeconfig))
    ctl = Reconciler(settings, client, NAMESPACE, ControllerMetrics(Registry()))
    assert ctl.gateway is not None and ctl.elector is not None
    jobs = [*(r.run() for r in ctl.reflectors), ctl.gateway.watches.run(),
            *([ctl.elector.run()] if renewing else [])]
    tasks = [asyncio.create_task(job) for job in jobs]
    try:
        await asyncio.wait_for(asyncio.gather(*(r.synced.wait() for r in ctl.reflectors),
                                              ctl.gateway.watches.discovered.wait()), PATIENCE)
        yield ctl
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.close()


def test_overdue_renewal_defers_the_write_instead_of_dropping_it(
        cluster: FakeApiServer, kubeconfig: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A leader whose renewal is late (busy loop) must retry, not forget, pending work."""
    settings = quick_lease(kubeconfig)

    metrics = ControllerMetrics(Registry())

    async def main() -> tuple[bool, bool]:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        try:
            ctl = Reconciler(settings, client, NAMESPACE, metrics)
            for r in ctl.reflectors:
                r.synced.set()
            assert ctl.gateway is not None
            ctl.gateway.watches.discovered.set()
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

    with caplog.at_level(logging.WARNING, "hairpin_proxy.controller"):
        overdue, standby = asyncio.run(main())
    assert overdue is False  # retried after a backoff
    assert standby is True  # nothing to do for a standby
    # Told and counted once: the leader whose renewal is overdue, not the standby.
    assert metrics.reconciles.value("lease_overdue") == 1
    assert [r.getMessage() for r in caplog.records] == [
        "pass not written: the Lease's renewal is overdue; will retry"]
    assert cluster.count("PUT", r"/configmaps/coredns$") == 0


def identity_of(ctl: Controller) -> str:
    for record in ctl.records():
        if record.get("msg") == "controller starting":
            return str(record["identity"])
    raise AssertionError(f"no identity logged:\n{ctl.log()}")


# A PUT the old leader sent before it read the 409 may reach the server after the 409 was
# answered (two connections, one loop on each side; a busy machine stretches the gap without
# bound): the in-flight allowance is that one PUT, counted, not timed. The reconcile loop sends
# one PUT at a time, and checks the lease before the next.
IN_FLIGHT = 1


def test_an_ousted_leader_stops_writing_at_its_next_renewal(cluster: FakeApiServer,
                                                            tmp_path: Path) -> None:
    """Mid-burst, the Lease is handed to the standby (as a forced takeover, or a leader
    elected while ours was partitioned, would): the old leader's next renewal gets a 409, and
    from that answer on not one PUT of the Corefile comes from it; the new one converges."""
    api = cluster
    assert isinstance(api, AttributedApi)
    ctls: dict[str, Controller] = {}
    stop = threading.Event()
    hosts: list[str] = []

    def burst() -> None:
        while not stop.is_set():
            i = len(hosts)
            api.create(ingress("apps", f"app{i}", tls_hosts=[f"app{i}.example.com"]))
            hosts.append(f"app{i}.example.com")
            time.sleep(0.15)

    writer = threading.Thread(target=burst, name="ingress burst")
    try:
        for token in ("replica-a", "replica-b"):
            kc = api.write_kubeconfig(tmp_path / f"kubeconfig-{token}", token=token)
            ctls[token] = Controller(api, kc, tmp_path / f"{token}.log")
        for ctl in ctls.values():
            ctl.wait_ready()
        wait_until(lambda: len(leader_of(list(ctls.values()))) == 1, what="one leader")
        old = next(t for t, c in ctls.items() if c.metric("hairpin_controller_leader") == 1)
        new = next(t for t in ctls if t != old)
        assert holder(api) == identity_of(ctls[old])
        successor = identity_of(ctls[new])

        writer.start()
        wait_until(lambda: any(api.by(r) == old for r in api.requests("PUT", COREDNS_PUT)),
                   what="the old leader writes")
        handed_over: list[float] = []

        def hand_over() -> None:
            # Just before the old leader's next renewal is handled: that renewal gets a 409.
            api.patch("Lease", NAMESPACE, LEASE, {"spec": {"holderIdentity": successor,
                                                           "renewTime": micro_time()}})
            handed_over.append(time.time())

        api.before_next_request(hand_over, "PUT", rf"/leases/{LEASE}$")
        wait_until(lambda: handed_over, what="hand-over")
        wait_until(lambda: ctls[new].metric("hairpin_controller_leader") == 1,
                   what="the successor leads")
        assert ctls[old].metric("hairpin_controller_leader") == 0
        # The burst goes on under the new leader until it has written twice.
        wait_until(lambda: len([r for r in api.requests("PUT", COREDNS_PUT, since=handed_over[0])
                                if api.by(r) == new]) >= 2, what="the successor writes")
        stop.set()
        writer.join()
        wait_until(lambda: set(corefile.managed_hosts(corefile_text(api))) == set(hosts),
                   what="the new leader converges the Corefile")
        # The old leader looks at the Lease again, and stays a standby.
        converged = time.time()
        wait_until(lambda: [r for r in api.requests("GET", rf"/leases/{LEASE}$", since=converged)
                            if api.by(r) == old], what="the old leader's next look")
        assert ctls[old].metric("hairpin_controller_leader") == 0
        assert holder(api) == successor
    finally:
        stop.set()
        if writer.is_alive():
            writer.join()
        for ctl in ctls.values():
            ctl.stop()

    lost = handed_over[0]
    (refused,) = [r for r in api.requests("PUT", rf"/leases/{LEASE}$", since=lost - 1)
                  if api.by(r) == old and r.status == 409]
    told = api.answered[id(refused)]  # the earliest the old leader can know
    puts = api.requests("PUT", COREDNS_PUT)
    assert {api.by(r) for r in puts} == {old, new}, "every Corefile PUT is attributed"
    before = [r for r in puts if api.by(r) == old and r.time < lost]
    late = [(round(r.time - told, 3), r.status) for r in puts
            if api.by(r) == old and r.time >= lost]
    assert before, "the old leader wrote during the burst"
    # The successor is the only writer from the hand-over on (bar the one PUT in flight then).
    assert len(late) <= IN_FLIGHT, f"the old leader wrote after the hand-over (s after its 409, " \
        f"status): {late}"
    mine = [r for r in puts if api.by(r) == new and r.time >= lost]
    assert mine and all(r.status == 200 for r in mine[-1:])


def test_a_write_refused_after_the_lease_is_lost_is_not_retried(cluster: FakeApiServer,
                                                                  kubeconfig: Path) -> None:
    """The leader checks is_leader(), sends its PUT; while it is in flight the new leader
    writes the ConfigMap (our PUT: 409) and our Lease is lost. The retry must not happen."""
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    settings = quick_lease(kubeconfig)

    async def main() -> None:
        async with watching(settings) as ctl:
            elector = ctl.elector
            assert elector is not None
            elector._leading = True
            elector._last_renew = elector.clock()
            assert ctl.is_leader()

            def lose() -> None:
                cluster.touch("ConfigMap", "kube-system", "coredns")  # the successor's write
                elector._leading = False  # ... and our renewal's 409, both while in flight

            await asyncio.to_thread(cluster.before_next_request, lose, "PUT", COREDNS_PUT)
            await ctl.reconcile()

    asyncio.run(main())
    statuses = [r.status for r in cluster.requests("PUT", COREDNS_PUT)]
    assert statuses == [409], statuses


def test_the_lease_is_renewed_while_a_pass_plans(cluster: FakeApiServer,
                                                 kubeconfig: Path) -> None:
    """A plan may take longer than the renew deadline (the first over 50,000 Ingresses, one
    that fits thousands of hosts to a size limit on a starved node). It must not keep the
    Lease from being renewed meanwhile: a pass planned on the event loop would find its
    renewal overdue at the write, not write, and start over for ever. Here the plan lasts
    until the Lease has been renewed twice and past the renew deadline, by the clock the
    elector reads; the pass still writes."""
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    settings = quick_lease(kubeconfig)

    async def main() -> bool:
        async with watching(settings, renewing=True) as ctl:
            elector, planner = ctl.elector, ctl.routing.planner
            assert elector is not None
            plan = planner.plan

            def slow_plan(snap: Any) -> Any:
                since = time.time()
                began = elector.clock()
                wait_until(lambda: cluster.count("PUT", rf"/leases/{LEASE}$", since=since) >= 2
                           and elector.clock() - began > settings.renew_deadline,
                           what="the Lease renewed during the plan")
                return plan(snap)

            await until(ctl.is_leader, what="leading")
            planner.plan = slow_plan  # type: ignore[method-assign]
            return await ctl.reconcile()

    assert asyncio.run(main()) is True
    assert cluster.count("PUT", COREDNS_PUT) == 1
    assert corefile.managed_hosts(corefile_text(cluster)) == ("a.example.com",)


@pytest.mark.parametrize("task", ["reconcile", "leader election"])
def test_a_controller_whose_loop_or_lease_task_ends_stops(cluster: FakeApiServer,
                                                          kubeconfig: Path, task: str) -> None:
    """Cancelled by something stray, the reconcile loop or the Lease's renewal is gone for
    good: the controller must stop (and be restarted), not go on answering ready and writing
    nothing."""
    settings = quick_lease(kubeconfig)

    async def main() -> BaseException | None:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        ctl = Reconciler(settings, client, NAMESPACE, ControllerMetrics(Registry()))
        running = asyncio.create_task(ctl.run())
        try:
            victim = await until(lambda: next((t for t in asyncio.all_tasks()
                                               if t.get_name() == task), None),
                                 what=f"the task {task!r}")
            await until(ctl.is_leader, what="leading")
            assert victim is not None
            victim.cancel()
            done, _ = await asyncio.wait([running], timeout=PATIENCE)
            return running.exception() if done else None
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
            await client.close()

    error = asyncio.run(main())
    assert isinstance(error, RuntimeError), error
    assert str(error) == f"the task {task!r} was cancelled; the controller stops"
