"""Leader election against the fake API: one leader, takeover, step-down, the Lease record."""

from __future__ import annotations

import asyncio
import datetime
import time
from pathlib import Path

import pytest

from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube import config as kconfig
from hairpin_proxy.kube.client import KubeClient
from hairpin_proxy.kube.lease import LeaderElector, micro_time
from tests.fakeapi.server import FakeApiServer
from tests.waiting import until


def elector(client: KubeClient, identity: str) -> LeaderElector:
    return LeaderElector(client, namespace="default", name="lock", identity=identity,
                         lease_duration=2.0, renew_deadline=1.5, retry_period=0.2)


def stamp(micro: str) -> float:
    """A Lease's MicroTime as seconds since the epoch."""
    return datetime.datetime.strptime(micro, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.UTC).timestamp()


async def attempts(api: FakeApiServer, n: int) -> None:
    """Return once ``n`` more requests for the Lease have reached the server."""
    seen = await asyncio.to_thread(api.count, None, r"/leases/lock$")
    await until(lambda: api.count(None, r"/leases/lock$") >= seen + n, what=f"{n} attempts")


def test_timings_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaderElector(KubeClient.__new__(KubeClient), namespace="n", name="l", identity="i",
                      lease_duration=5, renew_deadline=5, retry_period=1)


def test_one_leader_then_takeover_after_the_lease_expires(fake_api: FakeApiServer,
                                                         kubeconfig: Path) -> None:
    async def main() -> None:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        a, b = elector(client, "a"), elector(client, "b")
        ta = asyncio.create_task(a.run())
        await until(lambda: a.is_leader)
        tb = asyncio.create_task(b.run())
        await until(lambda: b.holder == "a", what="b to see a's Lease")
        assert not b.is_leader
        # "a" dies without a word: its task simply stops renewing.
        ta.cancel()
        await until(lambda: b.is_leader, 20, "b to lead")
        tb.cancel()
        await asyncio.gather(ta, tb, return_exceptions=True)
        await client.close()

    asyncio.run(main())
    # "b" took over no sooner than a Lease duration after a's last renewal (the standby counts
    # from when it saw the record change, after the renewal was written): each stamped its
    # renewTime when it sent its write.
    versions = [obj["spec"] for _, obj in fake_api.changes("Lease", "default", "lock")]
    last_by_a = max(stamp(v["renewTime"]) for v in versions if v["holderIdentity"] == "a")
    taken = min(stamp(v["renewTime"]) for v in versions if v["holderIdentity"] == "b")
    assert taken - last_by_a >= 2.0, versions
    lease = fake_api.get("Lease", "default", "lock")
    assert lease is not None
    spec = lease["spec"]
    assert spec["holderIdentity"] == "b"
    assert spec["leaseDurationSeconds"] == 2
    assert spec["leaseTransitions"] == 1
    assert spec["acquireTime"].endswith("Z") and spec["renewTime"].endswith("Z")


def test_racing_candidates_get_one_winner(fake_api: FakeApiServer, kubeconfig: Path) -> None:
    async def main() -> list[bool]:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        try:
            results = await asyncio.gather(*(elector(client, f"c{i}").try_acquire_or_renew()
                                              for i in range(5)))
        finally:
            await client.close()
        return list(results)

    assert sum(asyncio.run(main())) == 1


def test_a_candidate_that_loses_the_race_to_create_knows_who_leads(
        fake_api: FakeApiServer, kubeconfig: Path) -> None:
    """Its create refused (409: another candidate created the Lease first), it has decided it
    does not lead, and knows another may: an uninstall's standby must not let go of what the
    leader may still need."""
    now = micro_time()
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "lock", "namespace": "default"},
             "spec": {"holderIdentity": "a", "leaseDurationSeconds": 2, "acquireTime": now,
                      "renewTime": now, "leaseTransitions": 0}}
    fake_api.before_next_request(lambda: fake_api.create(lease), method="POST",
                                 path_re=r"/leases$")

    async def main() -> None:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        try:
            b = elector(client, "b")
            assert not await b.try_acquire_or_renew()
            assert b.holder == "a" and b.others_may_lead()
        finally:
            await client.close()

    asyncio.run(main())


def test_leader_that_cannot_renew_steps_down_before_expiry(fake_api: FakeApiServer,
                                                           kubeconfig: Path) -> None:
    changes: list[bool] = []

    async def main() -> LeaderElector:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        # The wall clock, so that the elector's readings compare with the server's log.
        a = LeaderElector(client, namespace="default", name="lock", identity="a",
                          on_change=changes.append, lease_duration=2.0, renew_deadline=1.5,
                          retry_period=0.2, clock=time.time)
        task = asyncio.create_task(a.run())
        await until(lambda: a.is_leader)
        await asyncio.to_thread(fake_api.fail_requests, 1000, 500, None, r"/leases")
        await until(lambda: not a.is_leader)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()
        return a

    a = asyncio.run(main())
    assert changes[0] is True
    # Strictly before anyone else could take the Lease: that is a Lease duration after the
    # last renewal reached the server at the soonest; our leadership counts from before we
    # sent it, and ends a renew deadline (shorter) after that, by the clock, not by the loop.
    renewed = [r.time for r in fake_api.requests(None, r"/leases(/lock)?$")
               if r.method in ("PUT", "POST") and r.status in (200, 201)]
    last = a._last_renew
    assert renewed and last <= max(renewed)
    assert a.renew_deadline < a.lease_duration
    a._leading = True  # as if no step-down had been announced: the clock alone decides
    a.clock = lambda: last + a.renew_deadline
    assert not a.is_leader
    a.clock = lambda: last + a.renew_deadline - 0.01
    assert a.is_leader


def test_release_lets_a_standby_in_at_once(fake_api: FakeApiServer, kubeconfig: Path) -> None:
    async def main() -> None:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        a, b = elector(client, "a"), elector(client, "b")
        ta = asyncio.create_task(a.run())
        await until(lambda: a.is_leader)
        assert not await b.try_acquire_or_renew()
        ta.cancel()
        await asyncio.gather(ta, return_exceptions=True)
        await a.release()
        assert not a.is_leader
        assert await b.try_acquire_or_renew()
        await client.close()

    asyncio.run(main())


def slow_elector(client: KubeClient, identity: str, changes: list[bool]) -> LeaderElector:
    """Deadline 15 s: losing the Lease within a second can only be the 409, not the clock."""
    return LeaderElector(client, namespace="default", name="lock", identity=identity,
                         on_change=changes.append, lease_duration=20.0, renew_deadline=15.0,
                         retry_period=0.2)


def test_a_renewal_refused_because_another_took_the_lease_ends_leadership_at_once(
        fake_api: FakeApiServer, kubeconfig: Path) -> None:
    changes: list[bool] = []
    # What the elector says at the moment its next request after the refusal (the GET of the
    # slow path) reaches the server: it must have stopped before sending anything more.
    at_next_request: list[tuple[bool, list[bool]]] = []

    async def main() -> float:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        a = slow_elector(client, "a", changes)

        def noted(leading: bool) -> None:
            changes.append(leading)
            if not leading:
                # How far into its renew deadline it was: short of it, so the 409 ended it.
                into.append(a.clock() - a._last_renew)

        into: list[float] = []
        a.on_change = noted
        task = asyncio.create_task(a.run())
        await until(lambda: a.is_leader)

        def hijack() -> None:
            # Another candidate wrote the Lease just before our renewal is handled: it is
            # answered 409.
            fake_api.patch("Lease", "default", "lock", {"spec": {
                "holderIdentity": "b", "renewTime": micro_time(), "leaseDurationSeconds": 20}})
            fake_api.before_next_request(
                lambda: at_next_request.append((a.is_leader, list(changes))), "GET",
                r"/leases/lock$")

        await asyncio.to_thread(fake_api.before_next_request, hijack, "PUT", r"/leases/lock$")
        await until(lambda: not a.is_leader)
        await attempts(fake_api, 3)  # a few more attempts: it stays a standby
        assert not a.is_leader and not a.holds_lease and a.holder == "b"
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()
        return into[0]

    into = asyncio.run(main())
    assert changes == [True, False]
    assert at_next_request == [(False, [True, False])]
    # Ended by the 409, with most of the 15 s renew deadline still to go.
    assert into < 15.0, into
    puts = fake_api.requests("PUT", r"/leases/lock$")
    assert [r.status for r in puts].count(409) == 1
    # A standby: no further writes of the Lease, which "b" holds for 20 s.
    assert puts[-1].status == 409
    lease = fake_api.get("Lease", "default", "lock")
    assert lease is not None and lease["spec"]["holderIdentity"] == "b"


def test_two_electors_the_ousted_one_stops_before_its_deadline(fake_api: FakeApiServer,
                                                               kubeconfig: Path) -> None:
    """The Lease is handed to "b" (as `kubectl edit` or a forced takeover would): "b" leads at
    its next attempt, "a" stops at its next renewal, well before its deadline."""
    a_changes: list[bool] = []
    b_changes: list[bool] = []

    async def main() -> None:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        a, b = slow_elector(client, "a", a_changes), slow_elector(client, "b", b_changes)
        ta = asyncio.create_task(a.run())
        await until(lambda: a.is_leader)
        tb = asyncio.create_task(b.run())
        await until(lambda: b.holder == "a", what="b to see a's Lease")
        assert not b.is_leader
        await asyncio.to_thread(fake_api.patch, "Lease", "default", "lock", {"spec": {
            "holderIdentity": "b", "renewTime": micro_time()}})
        await until(lambda: b.is_leader and not a.is_leader, 3.0, "b to take over from a")
        await attempts(fake_api, 4)  # both look again: nothing changes
        assert b.is_leader and not a.is_leader
        for t in (ta, tb):
            t.cancel()
        await asyncio.gather(ta, tb, return_exceptions=True)
        await client.close()

    asyncio.run(main())
    assert a_changes == [True, False]
    assert b_changes == [True]


@pytest.mark.parametrize("how", ["touched", "injected 409", "deleted"])
def test_a_refused_renewal_while_the_lease_still_names_us_is_taken_back(
        fake_api: FakeApiServer, kubeconfig: Path, how: str) -> None:
    """An unrelated edit of the Lease (or its deletion) also makes the renewal fail: the
    leader stops, then takes the Lease back in the same attempt, as client-go's slow path
    does: same holder, same acquireTime, no new transition (a new Lease when deleted)."""
    changes: list[bool] = []

    async def main() -> JsonObj | None:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        a = slow_elector(client, "a", changes)
        task = asyncio.create_task(a.run())
        await until(lambda: a.is_leader)
        first = await asyncio.to_thread(fake_api.get, "Lease", "default", "lock")
        if how == "touched":
            await asyncio.to_thread(fake_api.touch, "Lease", "default", "lock")
        elif how == "deleted":
            await asyncio.to_thread(fake_api.delete, "Lease", "default", "lock")
        else:
            await asyncio.to_thread(fake_api.fail_requests, 1, 409, "PUT", r"/leases/lock$")
        await until(lambda: len(changes) == 3)
        assert a.is_leader
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()
        return first

    first = asyncio.run(main())
    assert changes == [True, False, True]
    lease = fake_api.get("Lease", "default", "lock")
    assert first is not None and lease is not None
    assert lease["spec"]["holderIdentity"] == "a"
    assert lease["spec"]["leaseTransitions"] == 0
    if how != "deleted":
        assert lease["spec"]["acquireTime"] == first["spec"]["acquireTime"]
        assert lease["metadata"]["uid"] == first["metadata"]["uid"]


def test_only_conflicts_end_leadership_early(fake_api: FakeApiServer,
                                             kubeconfig: Path) -> None:
    """A renewal failing for any other reason (500, timeout) keeps the leader until its
    deadline, as in client-go: the API being unavailable is not a sign of a new holder."""
    changes: list[bool] = []

    async def main() -> None:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        a = slow_elector(client, "a", changes)
        task = asyncio.create_task(a.run())
        await until(lambda: a.is_leader)
        await asyncio.to_thread(fake_api.fail_requests, 5, 500, None, r"/leases/lock$")
        await until(lambda: fake_api.count(None, r"/leases/lock$") >= 7)
        assert a.is_leader
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()

    asyncio.run(main())
    assert changes == [True]
