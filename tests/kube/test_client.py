"""The JSON client over real HTTP: errors, paging, and a rotated bearer token."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import AsyncGeneratorType, MappingProxyType
from typing import Any, cast

import httpx2 as httpx
import pytest

from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube import config as kconfig
from hairpin_proxy.kube.client import ApiError, KubeClient, resource_path
from tests.fakeapi.fixtures import configmap
from tests.fakeapi.server import FakeApiServer
from tests.waiting import until


def test_resource_paths() -> None:
    assert resource_path("v1", "configmaps", "kube-system", "coredns") == \
        "/api/v1/namespaces/kube-system/configmaps/coredns"
    assert resource_path("networking.k8s.io/v1", "ingresses") == \
        "/apis/networking.k8s.io/v1/ingresses"


def test_get_create_replace_delete(fake_api: FakeApiServer, kubeconfig: Path) -> None:
    async def main() -> None:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        path = resource_path("v1", "configmaps", "default", "x")
        try:
            assert await client.get(path) is None
            made = await client.create(resource_path("v1", "configmaps", "default"),
                                       configmap("default", "x", {"k": "1"}))
            stale = dict(made)
            made["data"] = {"k": "2"}
            await client.replace(path, made)
            stale["data"] = {"k": "3"}
            with pytest.raises(ApiError) as info:
                await client.replace(path, stale)
            assert info.value.status == 409 and info.value.reason == "Conflict"
            assert await client.delete(path) is True
            assert await client.delete(path) is False
        finally:
            await client.close()

    asyncio.run(main())


def test_text_and_mappings_travel_unchanged(fake_api: FakeApiServer, kubeconfig: Path) -> None:
    """Values the API keeps verbatim (non-ASCII, U+0085 and U+2028 inside a Corefile, quotes,
    backslashes) come back as sent, and a body built from read-only mappings is sent as JSON."""
    text = 'a.example.com {\n  answer "\\" é\u0085 \u2028 ☃\n}\n'
    body = MappingProxyType({**configmap("default", "t", {"Corefile": text}),
                             "metadata": MappingProxyType({"name": "t", "namespace": "default"})})

    async def main() -> None:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        try:
            made = await client.create(resource_path("v1", "configmaps", "default"), body)
            got = await client.get(resource_path("v1", "configmaps", "default", "t"))
        finally:
            await client.close()
        assert made["data"]["Corefile"] == text
        assert got is not None and got["data"]["Corefile"] == text

    asyncio.run(main())
    stored = fake_api.get("ConfigMap", "default", "t")
    assert stored is not None and stored["data"]["Corefile"] == text


def test_list_follows_continue(fake_api: FakeApiServer, kubeconfig: Path) -> None:
    for i in range(7):
        fake_api.create(configmap("default", f"cm{i}"))

    async def main() -> None:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        try:
            items, rv = await client.list(resource_path("v1", "configmaps", "default"), limit=3)
        finally:
            await client.close()
        assert {i["metadata"]["name"] for i in items} >= {f"cm{i}" for i in range(7)}
        assert rv

    asyncio.run(main())
    assert fake_api.count("GET", r"/configmaps", watch=False) >= 3


def test_a_gzipped_answer_reads_as_the_plain_one(fake_api: FakeApiServer,
                                                 kubeconfig: Path) -> None:
    # Past 128 KiB the real server gzips what the client offers to take: lists and the
    # Corefile's ConfigMap in a large cluster come that way.
    big = "a\u00e9\n" * 50_000
    fake_api.create(configmap("default", "big", {"Corefile": big}))

    async def main() -> None:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        try:
            items, _ = await client.list(resource_path("v1", "configmaps", "default"))
            got = await client.get(resource_path("v1", "configmaps", "default", "big"))
        finally:
            await client.close()
        assert [i["data"]["Corefile"] for i in items] == [big]
        assert got is not None and got["data"]["Corefile"] == big

    asyncio.run(main())
    assert [r.encoding for r in fake_api.requests("GET", r"/configmaps")] == ["gzip", "gzip"]


def test_unreachable_server_is_status_zero(tmp_path: Path, fake_api: FakeApiServer) -> None:
    path = fake_api.write_kubeconfig(tmp_path / "kc")
    fake_api.go_down()

    async def main() -> None:
        client = KubeClient.from_cluster(kconfig.load(path))
        try:
            with pytest.raises(ApiError) as info:
                await client.get("/api/v1/namespaces")
            assert info.value.status == 0 and info.value.retriable
            # In words, not an exception's repr.
            assert "the connection failed" in str(info.value)
            assert "Error(" not in str(info.value)
            assert client.reach.down_since is not None
        finally:
            await client.close()

    try:
        asyncio.run(main())
    finally:
        fake_api.come_up()


def test_rotated_token_file_is_reread(fake_api: FakeApiServer, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    fake_api.set_tokens({"first"})
    path = fake_api.write_kubeconfig(tmp_path / "kc", token_file=token)

    async def main() -> None:
        client = KubeClient.from_cluster(kconfig.load(path))
        try:
            assert await client.get(resource_path("v1", "namespaces", None, "default"))
            # The kubelet rotates the projected token; the old one stops working.
            token.write_text("second\n")
            fake_api.set_tokens({"second"})
            assert await client.get(resource_path("v1", "namespaces", None, "default"))
        finally:
            await client.close()

    asyncio.run(main())
    assert [r.status for r in fake_api.requests("GET", r"/namespaces/default$")] == \
        [200, 401, 200]


def test_an_answer_that_is_not_json_is_said_so() -> None:
    """A proxy's HTML page where the API's JSON should be (or a truncated body) is an
    ApiError in our words, whichever msgspec decodes it."""
    async def main() -> None:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            body = b"<html>502 Bad Gateway</html>"
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\n\r\n" + body)
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = KubeClient(httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}"))
        try:
            with pytest.raises(ApiError) as info:
                await client.get(resource_path("v1", "configmaps", "default", "x"))
            assert info.value.reason == "BadResponse"
            assert "not JSON" in str(info.value)
        finally:
            await client.close()
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def _event_bytes_held(events: AsyncGeneratorType[Any, None]) -> int:
    """Bytes of event data a watch's suspended generator holds by its own names: bytes and
    bytearrays (a line, a chunk), and the strings of any dict or list it keeps (an event)."""
    frame = events.ag_frame
    assert frame is not None, "the watch ended"
    seen: set[int] = set()

    def size(value: object, depth: int) -> int:
        if id(value) in seen or depth > 6:
            return 0
        seen.add(id(value))
        if isinstance(value, bytes | bytearray | str):
            return sys.getsizeof(value)
        if isinstance(value, dict):
            return sum(size(k, depth + 1) + size(v, depth + 1) for k, v in value.items())
        if isinstance(value, list | tuple):
            return sum(size(v, depth + 1) for v in value)
        return 0

    # Not the client, nor the response (the HTTP layer's buffers are not the watch's).
    held = 0
    for name, value in frame.f_locals.items():
        if name not in ("self", "resp"):
            held += size(value, 0)
    return held


def test_a_quiet_watch_keeps_no_event_behind(fake_api: FakeApiServer, kubeconfig: Path) -> None:
    """Between events a watch holds neither the last event, nor the line it was read from,
    nor (while it waits for data) the chunk that brought it: the CoreDNS ConfigMap's events
    are half a megabyte, and a watch is quiet most of the time."""
    big = "x" * 600_000

    async def main() -> None:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        path = resource_path("v1", "configmaps", "default")
        _, rv = await client.list(path)
        events = cast("AsyncGeneratorType[JsonObj, None]",
                      client.watch(path, {"resourceVersion": rv}, silence_timeout=30))

        async def next_event() -> JsonObj:
            return await anext(events)

        try:
            await asyncio.to_thread(fake_api.create,
                                    configmap("default", "big", {"Corefile": big}))
            event = await anext(events)
            assert event["object"]["data"]["Corefile"] == big
            del event
            # Suspended where it handed the event out: the rest of its chunk, at most.
            assert _event_bytes_held(events) < 100_000
            waiting = asyncio.create_task(next_event())
            await until(lambda: events.ag_await is not None, what="the watch to read on")
            assert _event_bytes_held(events) < 4096
            await asyncio.to_thread(fake_api.create, configmap("default", "small"))
            assert (await waiting)["object"]["metadata"]["name"] == "small"
        finally:
            await events.aclose()
            await client.close()

    asyncio.run(main())


def test_watch_lines_blank_foreign_and_bad() -> None:
    """A watch stream's lines as the client reads them, split anywhere by the network: blank
    and white-space lines are skipped, a JSON value that is not an object is skipped, an
    event cut across writes is one event, and a line that is not JSON ends the watch with a
    BadResponse after the events before it."""
    pieces = [b'\n \t\r\n[1, 2]\n{"type": "ADDED", "ob', b'ject": {"n": 1}}\n\x0b\n{"type":',
              b' "DELETED", "object": {"n": 2}}\n{not json\n{"type": "ADDED", "object": {}}\n']

    async def main() -> list[object]:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Connection: close\r\n\r\n")
            for piece in pieces:
                writer.write(piece)
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = KubeClient(httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}"))
        got: list[object] = []
        try:
            with pytest.raises(ApiError) as info:
                async for event in client.watch("/api/v1/configmaps", {},
                                                silence_timeout=30):
                    got.append(event)
            assert info.value.reason == "BadResponse"
            assert "bad line" in str(info.value)
        finally:
            await client.close()
            server.close()
            await server.wait_closed()
        return got

    assert asyncio.run(main()) == [{"type": "ADDED", "object": {"n": 1}},
                                   {"type": "DELETED", "object": {"n": 2}}]
