"""Running a Reflector against the fake API for the length of a test's body."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from hairpin_proxy.kube.client import KubeClient
from hairpin_proxy.kube.watch import Reflector


async def synced_for(client: KubeClient, refl: Reflector,
                     body: Callable[[Reflector], Awaitable[None]]) -> None:
    """Run ``refl`` until its first list is in, then ``body``; stop it and close ``client``."""
    task = asyncio.create_task(refl.run())
    try:
        await asyncio.wait_for(refl.synced.wait(), 20)
        await body(refl)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()
