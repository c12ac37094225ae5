"""The list+watch loop against a real (fake) API server over HTTP."""

from __future__ import annotations

import asyncio
import operator
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from hairpin_proxy.kube import config as kconfig
from hairpin_proxy.kube.client import KubeClient, resource_path
from hairpin_proxy.kube.watch import Backoff, Reflector
from tests.fakeapi.fixtures import configmap
from tests.fakeapi.server import FakeApiServer
from tests.kube.reflecting import synced_for
from tests.waiting import until


def with_reflector(kubeconfig: Path, body: Callable[[Reflector], Awaitable[None]], *,
                   name: str | None = None, silence: float = 10.0,
                   backoff: Backoff | None = None) -> list[int]:
    changes: list[int] = []

    async def main() -> None:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        params = {"fieldSelector": f"metadata.name={name}"} if name else {}
        refl = Reflector(client, resource_path("v1", "configmaps", "default"), kind="cm",
                         params=params, on_change=lambda: changes.append(1),
                         silence_timeout=silence, backoff=backoff or Backoff(0.05, 0.2))
        await synced_for(client, refl, body)

    asyncio.run(main())
    return changes


async def relisted_after(fake_api: FakeApiServer, *, deleted: str, created: str) -> None:
    """ConfigMap ``deleted`` gone and ``created`` made where the open watch never tells,
    then history forgotten: resuming from the reflector's resourceVersion gets 410, and only
    a relist tells."""
    await asyncio.to_thread(fake_api.stall_watches)
    await asyncio.to_thread(fake_api.delete, "ConfigMap", "default", deleted)
    await asyncio.to_thread(fake_api.create, configmap("default", created))
    await asyncio.to_thread(fake_api.compact)
    await asyncio.to_thread(fake_api.drop_watches)
    await asyncio.to_thread(fake_api.unstall_watches)


def names(refl: Reflector) -> set[str]:
    return {k.split("/", 1)[1] for k in refl.cache}


def test_list_then_watch_follows_changes(fake_api: FakeApiServer, kubeconfig: Path) -> None:
    fake_api.create(configmap("default", "one", {"v": "1"}))

    async def body(refl: Reflector) -> None:
        assert names(refl) == {"one"}
        await asyncio.to_thread(fake_api.create, configmap("default", "two"))
        await until(lambda: names(refl) == {"one", "two"})
        obj = fake_api.get("ConfigMap", "default", "one")
        assert obj is not None
        obj["data"] = {"v": "2"}
        await asyncio.to_thread(fake_api.update, obj)
        await until(lambda: (refl.get("default/one") or {}).get("data") == {"v": "2"})
        await asyncio.to_thread(fake_api.delete, "ConfigMap", "default", "two")
        await until(lambda: names(refl) == {"one"})

    changes = with_reflector(kubeconfig, body)
    assert len(changes) >= 4
    watches = fake_api.requests("GET", r"/configmaps", watch=True)
    assert watches and watches[0].query.get("allowWatchBookmarks") == "true"


def test_field_selector_limits_to_one_object(fake_api: FakeApiServer,
                                             kubeconfig: Path) -> None:
    fake_api.create(configmap("default", "coredns"))
    fake_api.create(configmap("default", "other"))

    async def body(refl: Reflector) -> None:
        assert names(refl) == {"coredns"}
        await asyncio.to_thread(fake_api.create, configmap("default", "third"))
        obj = fake_api.get("ConfigMap", "default", "coredns")
        assert obj is not None
        obj["data"] = {"x": "y"}
        await asyncio.to_thread(fake_api.update, obj)
        await until(lambda: (refl.get("default/coredns") or {}).get("data") == {"x": "y"})
        assert names(refl) == {"coredns"}

    with_reflector(kubeconfig, body, name="coredns")


def test_relist_after_gone_forgets_deleted_objects(fake_api: FakeApiServer,
                                                   kubeconfig: Path) -> None:
    fake_api.create(configmap("default", "doomed"))

    async def body(refl: Reflector) -> None:
        assert names(refl) == {"doomed"}
        await relisted_after(fake_api, deleted="doomed", created="born")
        await until(lambda: names(refl) == {"born"})

    with_reflector(kubeconfig, body)
    assert fake_api.count("GET", r"/configmaps", watch=False) >= 2


def test_generation_counts_changes_and_a_relist_as_one_per_object(
        fake_api: FakeApiServer, kubeconfig: Path) -> None:
    for i in range(5):
        fake_api.create(configmap("default", f"cm{i}"))

    async def body(refl: Reflector) -> None:
        listed = refl.generation
        assert listed >= 5  # the first list: one per object
        await asyncio.to_thread(fake_api.create, configmap("default", "one-more"))
        await until(lambda: "one-more" in names(refl))
        assert refl.generation == listed + 1
        # A relist may have replaced everything: it counts as a change per object.
        await asyncio.to_thread(fake_api.stall_watches)
        await asyncio.to_thread(fake_api.create, configmap("default", "after"))
        await asyncio.to_thread(fake_api.compact)
        await asyncio.to_thread(fake_api.drop_watches)
        await asyncio.to_thread(fake_api.unstall_watches)
        await until(lambda: "after" in names(refl))
        assert refl.generation == listed + 1 + len(refl.cache)

    with_reflector(kubeconfig, body)


def test_silent_watch_is_replaced(fake_api: FakeApiServer, kubeconfig: Path) -> None:
    async def body(refl: Reflector) -> None:
        before = fake_api.count("GET", r"/configmaps", watch=True)
        await asyncio.to_thread(fake_api.stall_watches)
        try:
            await until(lambda: fake_api.count("GET", r"/configmaps", watch=True) >= before + 2)
        finally:
            await asyncio.to_thread(fake_api.unstall_watches)
        await asyncio.to_thread(fake_api.create, configmap("default", "later"))
        await until(lambda: names(refl) == {"later"})

    with_reflector(kubeconfig, body, silence=0.5)


def test_errors_back_off_and_recover(fake_api: FakeApiServer, kubeconfig: Path) -> None:
    """Each failed request is followed by the backoff's delay before the next try: with base
    0.2 s and cap 0.8 s the n-th failure waits within [c/2, c], c = min(0.8, 0.2 * 2^(n-1)),
    so 0.1, 0.2, 0.4 and 0.4 s at least, and then the reflector recovers."""
    failures = 4
    base, cap = 0.2, 0.8
    since = time.time()

    async def body(refl: Reflector) -> None:
        await asyncio.to_thread(fake_api.fail_requests, failures, 503, "GET")
        await asyncio.to_thread(fake_api.drop_watches)
        await asyncio.to_thread(fake_api.create, configmap("default", "after"))
        await until(lambda: names(refl) == {"after"}, what="recovery after the errors")

    with_reflector(kubeconfig, body, backoff=Backoff(base, cap))
    gets = fake_api.requests("GET", r"/configmaps", since=since)
    failed = [i for i, r in enumerate(gets) if r.status == 503]
    assert len(failed) == failures, [(r.status, r.watch) for r in gets]
    assert failed[-1] + 1 < len(gets), "no request after the last failure"
    for n, i in enumerate(failed, start=1):
        ceiling = min(cap, base * 2 ** (n - 1))
        gap = gets[i + 1].time - gets[i].time
        # The server's clock, not ours: a little slack for scheduling, none for skipping.
        assert ceiling / 2 - 0.02 <= gap <= ceiling + 1.0, (n, gap, ceiling)


def test_backoff_grows_to_its_cap() -> None:
    b = Backoff(base=1.0, cap=8.0)
    delays = [b.next_delay() for _ in range(8)]
    assert all(0.5 <= d <= 8.0 for d in delays)
    assert delays[-1] >= 4.0
    b.reset()
    assert b.next_delay() <= 1.0


def test_line_separators_inside_values_do_not_split_events(fake_api: FakeApiServer,
                                                           kubeconfig: Path) -> None:
    # Watch events are separated by "\n" alone; U+0085, form feed and friends are data (the
    # API sends NEL unescaped) and must not cut an event in two.
    odd = "a\u0085b\u2028c\x0cd\re"

    async def body(refl: Reflector) -> None:
        await asyncio.to_thread(fake_api.create, configmap("default", "odd", {"v": odd}))
        await asyncio.to_thread(fake_api.create, configmap("default", "next"))
        await until(lambda: names(refl) == {"odd", "next"})
        assert refl.cache["default/odd"]["data"] == {"v": odd}
        assert refl.last_error == ""

    with_reflector(kubeconfig, body)


def test_the_values_list_grows_in_place_only_when_objects_were_only_added(
        fake_api: FakeApiServer, kubeconfig: Path) -> None:
    """``values_list`` is always the cache's objects in its order; the list given before,
    extended, where objects were only added since (through the watch), a new one after a
    change in place, a deletion or a relist."""
    for i in range(3):
        fake_api.create(configmap("default", f"c{i}"))

    def is_cache(got: list[dict[str, object]], refl: Reflector) -> bool:
        return len(got) == len(refl.cache) and all(map(operator.is_, got,
                                                       refl.cache.values()))

    async def body(refl: Reflector) -> None:
        first = refl.values_list(None)
        assert is_cache(first, refl)
        for i in (3, 4):
            await asyncio.to_thread(fake_api.create, configmap("default", f"c{i}"))
        await until(lambda: len(refl.cache) == 5)
        grown = refl.values_list(first)
        assert grown is first and is_cache(grown, refl)
        assert refl.values_list(grown) is grown
        obj = fake_api.get("ConfigMap", "default", "c1")
        assert obj is not None
        obj["data"] = {"v": "2"}
        await asyncio.to_thread(fake_api.update, obj)
        await asyncio.to_thread(fake_api.create, configmap("default", "c5"))
        await until(lambda: len(refl.cache) == 6)
        replaced = refl.values_list(grown)
        assert replaced is not grown and is_cache(replaced, refl)
        await asyncio.to_thread(fake_api.delete, "ConfigMap", "default", "c0")
        await asyncio.to_thread(fake_api.create, configmap("default", "c6"))
        await until(lambda: "default/c6" in refl.cache and len(refl.cache) == 6)
        after_delete = refl.values_list(replaced)
        assert after_delete is not replaced and is_cache(after_delete, refl)
        # A relist (the watch's history gone) brings every object anew: as many as before.
        await relisted_after(fake_api, deleted="c6", created="c7")
        await until(lambda: "default/c7" in refl.cache and len(refl.cache) == 6)
        relisted = refl.values_list(after_delete)
        assert relisted is not after_delete and is_cache(relisted, refl)

    with_reflector(kubeconfig, body)
