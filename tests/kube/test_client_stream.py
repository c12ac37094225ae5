"""A watch stream cut anywhere (inside an event, inside a UTF-8 character, between the
"\\r" and "\\n" of a blank line) gives the events sent, in order, each whole. The pieces
drawn are handed to the client as they are by its transport: over a socket, the network
joins them as it likes, and most cuts would never be seen (the loopback stream test in
test_client.py reads them from a real socket)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2 as httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.kube.client import KubeClient

# Values with the separators a text line splitter would break at, and multi-byte characters.
TEXT = st.text(alphabet=st.sampled_from(["a", "é", "\u0085", "\u2028", "\x1c", "\r", " ", "{",
                                         "\U0001f600"]), max_size=12)
EVENT = st.fixed_dictionaries({"type": st.sampled_from(["ADDED", "MODIFIED", "DELETED"]),
                               "object": st.fixed_dictionaries({"n": st.integers(),
                                                                "s": TEXT})})
BLANK = st.sampled_from([b"", b"\r", b" \t", b"\x0b\x0c"])


@settings(max_examples=60, deadline=None)
@given(events=st.lists(st.tuples(EVENT, BLANK), max_size=6), data=st.data())
def test_a_watch_stream_cut_anywhere_gives_the_events_sent(
        events: list[tuple[dict[str, Any], bytes]], data: st.DataObject) -> None:
    stream = b"".join(blank + b"\n" + json.dumps(e, ensure_ascii=False).encode() + b"\n"
                      for e, blank in events)
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(stream)), max_size=8))))
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]

    async def main() -> list[object]:
        async def body() -> AsyncIterator[bytes]:
            for piece in pieces:
                yield piece

        def answer(request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, headers={"Content-Type": "application/json"},
                                  content=body())

        client = KubeClient(httpx.AsyncClient(base_url="http://127.0.0.1:1",
                                              transport=httpx.MockTransport(answer)))
        got: list[object] = []
        try:
            async for event in client.watch("/api/v1/configmaps", {}, silence_timeout=30):
                got.append(event)
        finally:
            await client.close()
        return got

    assert asyncio.run(main()) == [e for e, _ in events]
