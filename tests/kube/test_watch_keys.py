"""A cache keyed by name (as the Ingress caches are): every object found by "namespace/name"
whichever key it holds, in the order a "namespace/name" cache keeps them, and a relist of the
same objects seen as no change. Against the fake API server over HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube import config as kconfig
from hairpin_proxy.kube.client import KubeClient, resource_path
from hairpin_proxy.kube.watch import Backoff, Reflector, Trim
from hairpin_proxy.sources.ingress.record import IngressRecord
from hairpin_proxy.sources.ingress.slim import own_name, quick_ingress, slim_ingress
from tests.fakeapi.fixtures import configmap, ingress
from tests.fakeapi.server import FakeApiServer
from tests.kube.reflecting import synced_for
from tests.waiting import until


def with_ingresses(kubeconfig: Path, body: Callable[[Reflector], Awaitable[None]],
                   transform: Callable[[JsonObj], JsonObj] = slim_ingress) -> None:
    async def main() -> None:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        refl = Reflector(client, resource_path("networking.k8s.io/v1", "ingresses"),
                         kind="ingresses", on_change=lambda: None, silence_timeout=10.0,
                         backoff=Backoff(0.05, 0.2), transform=transform)
        refl.key_by_name(own_name)
        await synced_for(client, refl, body)

    asyncio.run(main())


def where(refl: Reflector) -> list[str]:
    """"namespace/name" of the cached objects, in the cache's order."""
    return [f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in refl.cache.values()]


def found(refl: Reflector, key: str) -> Any:
    obj = refl.get(key)
    return None if obj is None else f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


def host(refl: Reflector, key: str) -> Any:
    obj = refl.get(key)
    return None if obj is None else obj["spec"]["rules"][0]["host"]


async def relist(fake_api: FakeApiServer, refl: Reflector, change: Callable[[], object]
                 ) -> None:
    """Forget the history (with ``change`` made unseen first): the watch gets 410, the
    reflector lists again."""
    lists = fake_api.count("GET", r"/ingresses", watch=False)
    await asyncio.to_thread(fake_api.stall_watches)
    await asyncio.to_thread(change)
    await asyncio.to_thread(fake_api.compact)
    now = fake_api.resource_version
    await asyncio.to_thread(fake_api.drop_watches)
    await asyncio.to_thread(fake_api.unstall_watches)
    # Listed again, and the list taken in (its resourceVersion is the reflector's).
    await until(lambda: fake_api.count("GET", r"/ingresses", watch=False) > lists
                and refl.resource_version == now)


def test_listed_ingresses_are_kept_straight_from_their_json_or_else_decoded_whole(
        fake_api: FakeApiServer, kubeconfig: Path) -> None:
    """As the controller lists Ingresses: a well-formed one kept straight from its JSON, one
    of another shape (a host that is a number) decoded whole and trimmed; each as slim keeps
    the object the API holds, and a change by the watch kept as slim keeps it."""
    fake_api.create(ingress("shop", "web", rule_hosts=["web.example.com"],
                            tls_hosts=["web.example.com"]))
    odd = ingress("shop", "odd", rule_hosts=["odd.example.com"])
    odd["spec"]["rules"][0]["host"] = 7
    fake_api.create(odd)

    def slimmed(name: str) -> JsonObj:
        stored = fake_api.get("Ingress", "shop", name)
        assert stored is not None
        # As list items come: no apiVersion or kind.
        return slim_ingress({k: v for k, v in stored.items() if k not in ("apiVersion", "kind")})

    async def body(refl: Reflector) -> None:
        # The records, as they are (the cache is typed as the dicts they read as).
        web: Any = refl.get("shop/web")
        kept_odd: Any = refl.get("shop/odd")
        want_web: Any = slimmed("web")
        want_odd: Any = slimmed("odd")
        assert type(web) is IngressRecord and web == want_web
        assert web.fields() == want_web.fields()
        assert type(kept_odd) is IngressRecord and kept_odd == want_odd
        assert kept_odd.fields() == want_odd.fields()
        # The policy sees the odd host as it is, and refuses it.
        assert kept_odd["spec"] == {"rules": [{"host": 7}]}
        obj = fake_api.get("Ingress", "shop", "web")
        assert obj is not None
        obj["spec"]["rules"][0]["host"] = "changed.example.com"
        await asyncio.to_thread(fake_api.update, obj)
        await until(lambda: host(refl, "shop/web") == "changed.example.com")

    with_ingresses(kubeconfig, body, Trim(slim_ingress, quick_ingress))


def test_objects_are_found_by_namespace_and_name_whatever_their_key(
        fake_api: FakeApiServer, kubeconfig: Path) -> None:
    for ns, name in (("a", "web"), ("b", "web"), ("a", "api")):
        fake_api.create(ingress(ns, name, rule_hosts=[f"{name}.{ns}.example.com"]))

    async def body(refl: Reflector) -> None:
        # As the API lists them (etcd's order of keys).
        assert where(refl) == ["a/api", "a/web", "b/web"]
        # The first "web" keeps its own name string as its key; the other its full name.
        assert sorted(refl.cache) == ["api", "b/web", "web"]
        web = next(k for k in refl.cache if k == "web")
        assert web is refl.cache["web"]["metadata"]["name"]
        for key in ("a/web", "b/web", "a/api"):
            assert found(refl, key) == key
        for key in ("c/web", "b/api", "web", "/web", "a/", ""):
            assert refl.get(key) is None
        # A change replaces the object where it was; a new one comes last.
        obj = fake_api.get("Ingress", "b", "web")
        assert obj is not None
        obj["spec"]["rules"][0]["host"] = "changed.example.com"
        await asyncio.to_thread(fake_api.update, obj)
        await until(lambda: host(refl, "b/web") == "changed.example.com")
        assert where(refl) == ["a/api", "a/web", "b/web"]
        # The holder of the plain name goes; the other "web" stays found; a third takes it.
        await asyncio.to_thread(fake_api.delete, "Ingress", "a", "web")
        await until(lambda: refl.get("a/web") is None)
        assert found(refl, "b/web") == "b/web" and where(refl) == ["a/api", "b/web"]
        await asyncio.to_thread(fake_api.create,
                                ingress("c", "web", rule_hosts=["web.c.example.com"]))
        await until(lambda: found(refl, "c/web") == "c/web")
        assert found(refl, "b/web") == "b/web" and where(refl) == ["a/api", "b/web", "c/web"]
        assert "web" in refl.cache and "b/web" in refl.cache
        # Changes of the fully named one land on it, never on the plain-named one.
        obj = fake_api.get("Ingress", "b", "web")
        assert obj is not None
        obj["spec"]["rules"][0]["host"] = "again.example.com"
        await asyncio.to_thread(fake_api.update, obj)
        await until(lambda: host(refl, "b/web") == "again.example.com")
        assert host(refl, "c/web") == "web.c.example.com" and len(refl.cache) == 3
        await asyncio.to_thread(fake_api.delete, "Ingress", "b", "web")
        await until(lambda: refl.get("b/web") is None)
        assert where(refl) == ["a/api", "c/web"]

    with_ingresses(kubeconfig, body)


def test_a_relist_of_the_same_objects_under_other_keys_is_no_change(
        fake_api: FakeApiServer, kubeconfig: Path) -> None:
    for ns in ("a", "b"):
        fake_api.create(ingress(ns, "web", rule_hosts=[f"web.{ns}.example.com"]))
    fake_api.create(ingress("z", "gone", rule_hosts=["gone.example.com"]))

    async def body(refl: Reflector) -> None:
        await asyncio.to_thread(fake_api.delete, "Ingress", "a", "web")
        await until(lambda: refl.get("a/web") is None)
        # b/web is held under "b/web"; a list now would key it "web".
        assert "b/web" in refl.cache and "web" not in refl.cache
        generation = refl.generation
        # Another kind's change moves the resourceVersion on: ours is then history.
        await relist(fake_api, refl, lambda: fake_api.create(configmap("default", "other")))
        assert refl.generation == generation  # the same objects: nothing changed
        assert found(refl, "b/web") == "b/web" and found(refl, "z/gone") == "z/gone"
        # A relist that does bring a change says so.
        await relist(fake_api, refl, lambda: fake_api.delete("Ingress", "z", "gone"))
        assert refl.generation > generation
        assert refl.get("z/gone") is None and found(refl, "b/web") == "b/web"

    with_ingresses(kubeconfig, body)
