"""The JSON client over real HTTP: errors, paging, and a rotated bearer token."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import MappingProxyType

import httpx2 as httpx
import pytest

from hairpin_proxy.kube import config as kconfig
from hairpin_proxy.kube.client import ApiError, KubeClient, resource_path
from tests.fakeapi.fixtures import configmap
from tests.fakeapi.server import FakeApiServer


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
