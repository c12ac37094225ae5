"""A cache keyed by name against the plain "namespace/name" cache, for random sequences of
watch events and relists over a few namespaces sharing a few names: the same objects in the
same order, each found by "namespace/name" and nothing else, no object under two keys, and a
relist seen as a change exactly when the plain cache sees one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.kube.client import ListPage
from hairpin_proxy.kube.watch import Reflector
from hairpin_proxy.sources.ingress.slim import own_name, slim_ingress

NAMESPACES = ("a", "b", "c")
NAMES = ("web", "api")


def ingress(ns: str, name: str, host: str) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"namespace": ns, "name": name, "uid": f"{ns}-{name}",
                         "resourceVersion": "1"},
            "spec": {"rules": [{"host": host}]}}


def list_item(ns: str, name: str, host: str) -> dict[str, Any]:
    obj = ingress(ns, name, host)
    del obj["apiVersion"], obj["kind"]  # list items of a built-in type carry neither
    return obj


class StubClient:
    """Serves one list (the current objects, in etcd's key order) and one batch of events."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], str] = {}
        self.events: list[dict[str, Any]] = []

    async def list_page(self, path: str, params: Mapping[str, str]) -> ListPage:
        items = [list_item(ns, name, host) for (ns, name), host in sorted(self.objects.items())]
        return ListPage({"resourceVersion": "1"}, items, f"GET {path}")

    async def watch(self, path: str, params: Mapping[str, str], *,
                    silence_timeout: float) -> AsyncIterator[dict[str, Any]]:
        events, self.events = self.events, []
        for event in events:
            yield event


ops = st.lists(st.one_of(
    st.tuples(st.sampled_from(("ADDED", "MODIFIED", "DELETED")),
              st.sampled_from(NAMESPACES), st.sampled_from(NAMES), st.sampled_from("xyz")),
    st.just(("RELIST", "", "", ""))), max_size=30)


def seen(refl: Reflector) -> list[tuple[str, str, str]]:
    return [(o["metadata"]["namespace"], o["metadata"]["name"], o["spec"]["rules"][0]["host"])
            for o in refl.cache.values()]


@settings(max_examples=300, deadline=None)
@given(ops)
def test_a_cache_keyed_by_name_reads_as_the_plain_one(sequence: list[tuple[str, ...]]) -> None:
    async def main() -> None:
        client = StubClient()
        changes = {"plain": 0, "named": 0}

        def make(which: str) -> Reflector:
            def bump() -> None:
                changes[which] += 1
            return Reflector(client, "/x", kind="ingresses",  # type: ignore[arg-type]
                             on_change=bump, transform=slim_ingress)

        plain, named = make("plain"), make("named")
        named.key_by_name(own_name)
        for refl in (plain, named):
            await refl._list()
        for etype, ns, name, host in sequence:
            if etype == "RELIST":
                for refl in (plain, named):
                    await refl._list()
            else:
                if etype == "DELETED":
                    client.objects.pop((ns, name), None)
                else:
                    client.objects[(ns, name)] = host
                event = {"type": etype, "object": ingress(ns, name, host)}
                for refl in (plain, named):
                    client.events = [event]
                    await refl._watch()
            assert seen(named) == seen(plain)
            assert changes["named"] == changes["plain"]
            assert len(named.cache) == len(plain.cache)
            for ns_ in NAMESPACES:
                for name_ in NAMES:
                    key = f"{ns_}/{name_}"
                    assert named.get(key) == plain.get(key)
                    if named.get(key) is not None:
                        assert named.get(key) is named.cache[
                            key if key in named.cache else name_]
            for key in ("web", "api", "", "/web", "a/"):
                assert named.get(key) is None

    asyncio.run(main())


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(("ADDED", "MODIFIED", "DELETED")),
                          st.sampled_from((5, True, "5", "b")), st.sampled_from(NAMES)),
                max_size=12))
def test_a_malformed_namespace_is_found_under_its_own_key(
        sequence: list[tuple[str, object, str]]) -> None:
    """A namespace that is not a string (no API server sends one, but the cache must not
    keep a deleted object for it): the cache holds what the plain cache holds."""
    async def main() -> None:
        client = StubClient()
        plain = Reflector(client, "/x", kind="ingresses",  # type: ignore[arg-type]
                          on_change=lambda: None, transform=slim_ingress)
        named = Reflector(client, "/x", kind="ingresses",  # type: ignore[arg-type]
                          on_change=lambda: None, transform=slim_ingress)
        named.key_by_name(own_name)
        for etype, ns, name in sequence:
            obj = ingress("", name, "h")
            obj["metadata"]["namespace"] = ns
            for refl in (plain, named):
                client.events = [{"type": etype, "object": dict(obj)}]
                await refl._watch()
            assert [(o["metadata"]["namespace"], o["metadata"]["name"])
                    for o in named.cache.values()] == \
                [(o["metadata"]["namespace"], o["metadata"]["name"])
                 for o in plain.cache.values()]

    asyncio.run(main())
