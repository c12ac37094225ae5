"""The write tracker keeps our last write only while the cache lags behind it: a ConfigMap of
ten thousand hosts is half a megabyte, not to be held twice once the watch brings it back."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hairpin_proxy.controller.tracker import WriteTracker
from hairpin_proxy.jsonobj import JsonObj, Mutate
from hairpin_proxy.kube import config as kconfig
from hairpin_proxy.kube.client import KubeClient, resource_path
from hairpin_proxy.kube.watch import Backoff, Reflector
from tests.fakeapi.fixtures import configmap
from tests.fakeapi.server import FakeApiServer
from tests.waiting import until


def setting(value: str) -> Mutate:
    def mutate(cm: JsonObj | None) -> JsonObj | None:
        assert cm is not None
        return {**cm, "data": {"v": value}}
    return mutate


def test_our_write_is_let_go_once_the_watch_brings_it_back(fake_api: FakeApiServer,
                                                           kubeconfig: Path) -> None:
    fake_api.create(configmap("default", "cm", {"v": "1"}))

    async def main() -> None:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        refl = Reflector(client, resource_path("v1", "configmaps", "default"), kind="cm",
                         params={"fieldSelector": "metadata.name=cm"}, on_change=lambda: None,
                         backoff=Backoff(0.05, 0.2))
        tracker = WriteTracker(client, is_leader=lambda: True, on_conflict=lambda: None)
        task = asyncio.create_task(refl.run())
        try:
            await until(refl.synced.is_set, what="listed")
            # A cache that stops (its watch ended): it lags behind our write for good.
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await tracker.write("default", "cm", setting("2"),
                                tracker.current(refl, "default", "cm"))
            assert tracker.holding == 1
            assert (tracker.current(refl, "default", "cm") or {})["data"] == {"v": "2"}

            # A watching cache: once it holds our write, the tracker keeps nothing.
            task = asyncio.create_task(refl.run())
            await until(lambda: (refl.get("default/cm") or {}).get("data") == {"v": "2"},
                        what="the cache caught up")
            tracker.caught_up(refl)
            assert tracker.holding == 0
            await tracker.write("default", "cm", setting("3"),
                                tracker.current(refl, "default", "cm"))
            await until(lambda: (refl.get("default/cm") or {}).get("data") == {"v": "3"},
                        what="our next write came back")
            tracker.caught_up(refl)
            assert tracker.holding == 0
            assert tracker.current(refl, "default", "cm") is refl.get("default/cm")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()

    asyncio.run(main())
