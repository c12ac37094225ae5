"""Fire-and-forget work of a pass (Events, the CoreDNS nudge): never awaited by the pass, so a
slow API answer cannot hold up the rules; kept here so that stopping cancels it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any


class Background:
    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Awaitable[None]) -> None:
        async def wrapped() -> None:
            await coro
        task = asyncio.create_task(wrapped())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
