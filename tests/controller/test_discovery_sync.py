"""The end of the first API discovery asks for a pass even when it starts no watch: a pass that
ran before it found the caches waiting and did nothing, and no other change may follow."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from hairpin_proxy.controller.sources.optional import OptionalWatches
from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube import config as kconfig
from hairpin_proxy.kube.client import KubeClient
from hairpin_proxy.kube.watch import Reflector
from hairpin_proxy.sources.gateway.watched import WANTED
from tests.fakeapi.fixtures import fake_api, kubeconfig
from tests.fakeapi.server import FakeApiServer
from tests.waiting import until

__all__ = ["fake_api", "kubeconfig"]


def test_discovery_that_finds_nothing_still_asks_for_a_pass(fake_api: FakeApiServer,
                                                             kubeconfig: Path) -> None:
    changes: list[int] = []

    async def main() -> None:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))

        def reflector(path: str, kind: str, name: str | None = None,
                      labels: str | None = None,
                      transform: Callable[[JsonObj], JsonObj] | None = None) -> Reflector:
            return Reflector(client, path, kind=kind, on_change=lambda: None)

        watches = OptionalWatches(client, reflector, WANTED, 60.0,
                                  lambda: changes.append(1), namespaces=True)
        task = asyncio.create_task(watches.run())
        try:
            await until(watches.discovered.is_set, what="discovery done")
            # No Gateway API here: no watch started, and yet a pass was asked for.
            assert not [k for k in watches.active if k[0]]
            await until(lambda: changes, what="a pass asked for")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()

    asyncio.run(main())
