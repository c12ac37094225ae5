"""Leader election against the fake API: one leader, takeover, step-down, the Lease record."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hairpin_proxy.kube import config as kconfig
from hairpin_proxy.kube.client import KubeClient
from hairpin_proxy.kube.lease import LeaderElector
from tests.fakeapi.server import FakeApiServer


def elector(client: KubeClient, identity: str) -> LeaderElector:
    return LeaderElector(client, namespace="default", name="lock", identity=identity,
                         lease_duration=2.0, renew_deadline=1.5, retry_period=0.2)


async def until(predicate: Callable[[], object], limit: float = 20.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < deadline, "condition not met"
        await asyncio.sleep(0.02)


def test_timings_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaderElector(KubeClient.__new__(KubeClient), namespace="n", name="l", identity="i",
                      lease_duration=5, renew_deadline=5, retry_period=1)


def test_one_leader_then_takeover_after_the_lease_expires(fake_api: FakeApiServer,
                                                         kubeconfig: Path) -> None:
    async def main() -> float:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        a, b = elector(client, "a"), elector(client, "b")
        ta = asyncio.create_task(a.run())
        await until(lambda: a.is_leader)
        tb = asyncio.create_task(b.run())
        await asyncio.sleep(1.0)
        assert a.is_leader and not b.is_leader and b.holder == "a"
        # "a" dies without a word: its task simply stops renewing.
        ta.cancel()
        died = time.monotonic()
        await until(lambda: b.is_leader, limit=20)
        took = time.monotonic() - died
        tb.cancel()
        await asyncio.gather(ta, tb, return_exceptions=True)
        await client.close()
        return took

    took = asyncio.run(main())
    assert 2.0 - 0.3 <= took <= 2.0 + 0.2 + 2.0, took
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


def test_leader_that_cannot_renew_steps_down_before_expiry(fake_api: FakeApiServer,
                                                           kubeconfig: Path) -> None:
    changes: list[bool] = []

    async def main() -> float:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        a = LeaderElector(client, namespace="default", name="lock", identity="a",
                          on_change=changes.append, lease_duration=2.0, renew_deadline=1.5,
                          retry_period=0.2)
        task = asyncio.create_task(a.run())
        await until(lambda: a.is_leader)
        await asyncio.to_thread(fake_api.fail_requests, 1000, 500, None, r"/leases")
        cut = time.monotonic()
        await until(lambda: not a.is_leader)
        took = time.monotonic() - cut
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()
        return took

    took = asyncio.run(main())
    # Strictly before anyone else could take the Lease (2 s after our last renewal).
    assert took < 2.0, took
    assert changes[0] is True


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
