"""lightkube's AsyncClient, configured from a written kubeconfig, against the fake server."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx2 as httpx
import pytest
from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import DaemonSet, Deployment
from lightkube.resources.core_v1 import ConfigMap, Namespace, Service
from lightkube.resources.networking_v1 import Ingress, IngressClass
from lightkube.types import PatchType

from tests.fakeapi.fixtures import (
    configmap,
    corefile_configmap,
    daemonset,
    deployment,
    ingress,
    ingress_class,
    namespace,
    service,
)
from tests.fakeapi.server import FakeApiServer


def run(kubeconfig: Path, body: Callable[[AsyncClient], Awaitable[None]]) -> None:
    async def main() -> None:
        client = AsyncClient(KubeConfig.from_file(kubeconfig))
        try:
            await asyncio.wait_for(body(client), 30)
        finally:
            await client.close()

    asyncio.run(main())


def test_list_get_create_replace_patch_delete(fake_api: FakeApiServer, kubeconfig: Path) -> None:
    fake_api.create(ingress("default", "web", rule_hosts=["a.example.com"]))
    fake_api.create(ingress("team", "api", tls_hosts=["b.example.com"], class_name="nginx"))
    fake_api.create(ingress_class("nginx", default=True))
    fake_api.create(corefile_configmap(".:53 {\n    forward . /etc/resolv.conf\n}\n"))
    fake_api.create(service("ingress-nginx", "ingress-nginx-controller", type="LoadBalancer",
                            lb_ingress=[{"ip": "203.0.113.7", "ipMode": "Proxy"}]))

    async def body(c: AsyncClient) -> None:
        listing = c.list(Ingress, namespace="*")
        names = [i.metadata.name async for i in listing if i.metadata]
        assert names == ["web", "api"]
        assert listing.resourceVersion == fake_api.resource_version
        default_ns = [i.metadata.name async for i in c.list(Ingress) if i.metadata]
        assert default_ns == ["web"]
        classes = [i async for i in c.list(IngressClass)]
        assert classes[0].metadata and classes[0].metadata.annotations == {
            "ingressclass.kubernetes.io/is-default-class": "true"}

        cm = await c.get(ConfigMap, "coredns", namespace="kube-system")
        assert cm.data and "forward" in cm.data["Corefile"]
        svc = await c.get(Service, "ingress-nginx-controller", namespace="ingress-nginx")
        assert svc.status and svc.status.loadBalancer and svc.status.loadBalancer.ingress
        assert svc.status.loadBalancer.ingress[0].ip == "203.0.113.7"
        assert svc.spec and svc.spec.clusterIP

        made = await c.create(ConfigMap(metadata=ObjectMeta(name="x"), data={"a": "1"}))
        assert made.metadata and made.metadata.namespace == "default"
        made.data = {"a": "2"}
        replaced = await c.replace(made)
        assert replaced.metadata and made.metadata
        assert replaced.metadata.resourceVersion != made.metadata.resourceVersion
        patched = await c.patch(ConfigMap, "x", {"data": {"b": "3"}})
        assert patched.data == {"a": "2", "b": "3"}
        patched = await c.patch(ConfigMap, "x", {"data": {"a": None}}, patch_type=PatchType.MERGE)
        assert patched.data == {"b": "3"}
        patched = await c.patch(ConfigMap, "x", [{"op": "add", "path": "/data/c", "value": "4"}],
                                patch_type=PatchType.JSON)
        assert patched.data == {"b": "3", "c": "4"}
        await c.delete(ConfigMap, "x")
        with pytest.raises(ApiError) as err:
            await c.get(ConfigMap, "x")
        assert err.value.status.code == 404
        assert err.value.status.reason == "NotFound"

    run(kubeconfig, body)
    assert fake_api.count("PUT") == 1
    assert fake_api.count("PATCH") == 3


def test_builders_decode_as_lightkube_models(fake_api: FakeApiServer, kubeconfig: Path) -> None:
    fake_api.create(namespace("hairpin-proxy", labels={"team": "net"}))
    fake_api.create(deployment("hairpin-proxy", "hairpin-proxy", replicas=2))
    fake_api.create(daemonset("hairpin-proxy", "hairpin-proxy-etchosts"))

    async def body(c: AsyncClient) -> None:
        ns = await c.get(Namespace, "hairpin-proxy")
        assert ns.metadata and ns.metadata.labels == {"team": "net"}
        assert ns.status and ns.status.phase == "Active"
        dep = await c.get(Deployment, "hairpin-proxy", namespace="hairpin-proxy")
        assert dep.spec and dep.spec.replicas == 2
        assert dep.metadata and dep.metadata.generation == 1
        ds = [d async for d in c.list(DaemonSet, namespace="hairpin-proxy")]
        assert ds[0].metadata and ds[0].metadata.name == "hairpin-proxy-etchosts"

    run(kubeconfig, body)


def test_conflicts_surface_as_api_errors(fake_api: FakeApiServer, kubeconfig: Path) -> None:
    fake_api.create(configmap("default", "c", {"k": "v"}))

    async def body(c: AsyncClient) -> None:
        with pytest.raises(ApiError) as err:
            await c.create(ConfigMap(metadata=ObjectMeta(name="c"), data={}))
        assert err.value.status.code == 409
        assert err.value.status.reason == "AlreadyExists"
        mine = await c.get(ConfigMap, "c")
        fake_api.patch("configmaps", "default", "c", {"data": {"k": "theirs"}})
        mine.data = {"k": "mine"}
        with pytest.raises(ApiError) as err:
            await c.replace(mine)
        assert err.value.status.code == 409
        assert err.value.status.reason == "Conflict"
        with pytest.raises(ApiError) as err:
            await c.create(ConfigMap(metadata=ObjectMeta(name="Bad_Name"), data={}))
        assert err.value.status.code == 422

    run(kubeconfig, body)
    got = fake_api.get("configmaps", "default", "c")
    assert got is not None and got["data"] == {"k": "theirs"}


def test_paged_list(fake_api: FakeApiServer, kubeconfig: Path) -> None:
    for i in range(7):
        fake_api.create(configmap("default", f"c{i}"))

    async def body(c: AsyncClient) -> None:
        names = [i.metadata.name async for i in c.list(ConfigMap, chunk_size=3) if i.metadata]
        assert names == [f"c{i}" for i in range(7)]

    run(kubeconfig, body)
    assert fake_api.count("GET", path_re="limit=3") == 3


def test_list_then_watch_sees_each_change_once(fake_api: FakeApiServer, kubeconfig: Path) -> None:
    fake_api.create(ingress("default", "old"))
    seen: list[tuple[str, str, str]] = []

    async def body(c: AsyncClient) -> None:
        listing = c.list(Ingress, namespace="*")
        assert [i.metadata.name async for i in listing if i.metadata] == ["old"]

        async def watch() -> None:
            async for kind, obj in c.watch(Ingress, namespace="*",
                                           resource_version=listing.resourceVersion):
                assert obj.metadata and obj.metadata.name and obj.metadata.resourceVersion
                seen.append((kind, obj.metadata.name, obj.metadata.resourceVersion))
                if len(seen) == 6:
                    return

        task = asyncio.create_task(watch())
        await fake_api.async_wait_for(lambda: fake_api.open_watches == 1)
        new = Ingress.from_dict(ingress("default", "a"))
        assert isinstance(new, Ingress)
        await c.create(new)
        fake_api.create(ingress("team", "b"))
        await c.patch(Ingress, "a", {"metadata": {"labels": {"x": "1"}}})
        fake_api.patch("ingresses", "team", "b", {"spec": {"ingressClassName": "nginx"}})
        await c.delete(Ingress, "a")
        fake_api.delete("ingresses", "default", "old")
        await task

    run(kubeconfig, body)
    assert [(k, n) for k, n, _ in seen] == [
        ("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("MODIFIED", "b"),
        ("DELETED", "a"), ("DELETED", "old")]
    versions = [int(v) for _, _, v in seen]
    assert versions == sorted(set(versions))


def test_watch_from_compacted_version_raises_410(fake_api: FakeApiServer,
                                                 kubeconfig: Path) -> None:
    rv = fake_api.resource_version
    fake_api.create(ingress("default", "a"))
    fake_api.compact()

    async def body(c: AsyncClient) -> None:
        with pytest.raises(ApiError) as err:
            async for _ in c.watch(Ingress, namespace="*", resource_version=rv):
                pass
        assert err.value.status.code == 410
        assert err.value.status.reason == "Expired"

    run(kubeconfig, body)


def test_bearer_token_from_kubeconfig(tmp_path: Path) -> None:
    with FakeApiServer(tokens={"good"}) as server:
        server.create(configmap("default", "c"))
        good = server.write_kubeconfig(tmp_path / "good", token="good")
        bad = server.write_kubeconfig(tmp_path / "bad", token="bad")

        async def ok(c: AsyncClient) -> None:
            assert (await c.get(ConfigMap, "c")).metadata is not None

        async def refused(c: AsyncClient) -> None:
            with pytest.raises(ApiError) as err:
                await c.get(ConfigMap, "c")
            assert err.value.status.code == 401

        run(good, ok)
        run(bad, refused)
        server.set_tokens({"bad"})
        run(good, refused)
        run(bad, ok)


def test_rotated_token_file_is_reread_on_401(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one\n")
    with FakeApiServer(tokens={"one"}) as server:
        server.create(configmap("default", "c"))
        kc = server.write_kubeconfig(tmp_path / "kc", token_file=token)

        async def body(c: AsyncClient) -> None:
            await c.get(ConfigMap, "c")
            token.write_text("two\n")
            server.set_tokens({"two"})
            await c.get(ConfigMap, "c")

        run(kc, body)
        assert [r.status for r in server.requests()] == [200, 401, 200]


def test_dropped_watch_surfaces_as_transport_error(fake_api: FakeApiServer,
                                                   kubeconfig: Path) -> None:
    async def body(c: AsyncClient) -> None:
        async def watch() -> None:
            async for _ in c.watch(ConfigMap):
                pass

        task = asyncio.create_task(watch())
        await fake_api.async_wait_for(lambda: fake_api.open_watches == 1)
        fake_api.drop_watches()
        with pytest.raises(httpx.TransportError):
            await task

    run(kubeconfig, body)


def test_watch_resumes_after_server_timeout_without_repeats(fake_api: FakeApiServer,
                                                            kubeconfig: Path) -> None:
    fake_api.create(configmap("default", "a"))
    seen: list[tuple[str, str]] = []

    async def body(c: AsyncClient) -> None:
        async def watch() -> None:
            async for kind, obj in c.watch(ConfigMap, server_timeout=1):
                assert obj.metadata and obj.metadata.name
                seen.append((kind, obj.metadata.name))
                if len(seen) == 2:
                    return

        task = asyncio.create_task(watch())
        # The first stream ends after a second; the client reopens it from the last version.
        await fake_api.async_wait_for(lambda: fake_api.count(watch=True) == 2)
        fake_api.create(configmap("default", "b"))
        await task

    run(kubeconfig, body)
    assert seen == [("ADDED", "a"), ("ADDED", "b")]
    first, second = fake_api.requests(watch=True)[:2]
    a = fake_api.get("configmaps", "default", "a")
    assert a is not None
    assert "resourceVersion" not in first.query
    assert second.query["resourceVersion"] == a["metadata"]["resourceVersion"]
