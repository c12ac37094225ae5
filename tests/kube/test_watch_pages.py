"""A paged list against the fake API server over HTTP: the next page is asked for while one
is digested, and whatever fails on the way (an error, an expired continue token, the reflector
stopped) leaves the cache as the last whole list left it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from pathlib import Path

import pytest

from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube import config as kconfig
from hairpin_proxy.kube import watch
from hairpin_proxy.kube.client import ApiError, KubeClient, ListPage, resource_path
from hairpin_proxy.kube.watch import Backoff, Reflector
from tests.fakeapi.fixtures import configmap
from tests.fakeapi.server import FakeApiServer
from tests.waiting import PATIENCE, until

PATH = resource_path("v1", "configmaps", "default")
PAGE = 2
# The requests for a page after the first (the continue token is in the query).
NEXT_PAGE = r"/namespaces/default/configmaps\?.*continue="


@pytest.fixture(autouse=True)
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    # Pages of two: a handful of objects make several pages; a turn of the loop after every
    # object, as after every DIGEST_TURN objects of a real list.
    monkeypatch.setattr(watch, "LIST_PAGE", PAGE)
    monkeypatch.setattr(watch, "DIGEST_TURN", 1)


def names(cache: Mapping[str, JsonObj]) -> frozenset[str]:
    return frozenset(k.split("/", 1)[1] for k in cache)


def create(fake_api: FakeApiServer, *which: str) -> frozenset[str]:
    for name in which:
        fake_api.create(configmap("default", name, {"v": name}))
    return frozenset(which)


class Seen:
    """A reflector on the default namespace's ConfigMaps and every cache it published."""

    def __init__(self, client: KubeClient) -> None:
        self.caches: list[frozenset[str]] = []
        self.refl = Reflector(client, PATH, kind="cm", on_change=self.changed,
                              silence_timeout=10.0, backoff=Backoff(0.02, 0.05))

    def changed(self) -> None:
        self.caches.append(names(self.refl.cache))


def run_seen(kubeconfig: Path, body: object) -> Seen:
    """Run a ``Seen`` reflector for the length of ``body(seen)`` (a coroutine function);
    closed, with no task of it left, when this returns."""
    assert callable(body)
    out: list[Seen] = []

    async def main() -> None:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        seen = Seen(client)
        out.append(seen)
        task = asyncio.create_task(seen.refl.run())
        try:
            await body(seen)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()
        left = asyncio.all_tasks() - {asyncio.current_task()}
        assert not left, f"tasks outlive the reflector: {left}"

    asyncio.run(main())
    return out[0]


def expire_lists(fake_api: FakeApiServer) -> None:
    """History forgotten past a write elsewhere: a continue token of a list begun before
    names a version gone (410 Expired)."""
    fake_api.touch("ConfigMap", "kube-system", "elsewhere")
    fake_api.compact()


async def relist(fake_api: FakeApiServer) -> None:
    """Make the reflector list again: its watch is dropped, and resuming it answers 410."""
    await asyncio.to_thread(fake_api.compact)
    await asyncio.to_thread(fake_api.drop_watches)


def test_every_page_is_read_and_each_continues_the_last(fake_api: FakeApiServer,
                                                        kubeconfig: Path) -> None:
    want = create(fake_api, *(f"cm{i}" for i in range(7)))

    async def body(seen: Seen) -> None:
        await until(seen.refl.synced.is_set, what="the first list")

    seen = run_seen(kubeconfig, body)
    assert seen.caches == [want]
    lists = fake_api.requests("GET", r"/namespaces/default/configmaps", watch=False)
    assert [r.query.get("limit") for r in lists] == [str(PAGE)] * 4
    assert "continue" not in lists[0].query
    assert all(r.query.get("continue") for r in lists[1:])
    assert len({r.query["continue"] for r in lists[1:]}) == 3


def test_a_failed_next_page_keeps_the_whole_cache_until_a_list_succeeds(
        fake_api: FakeApiServer, kubeconfig: Path) -> None:
    old = create(fake_api, "a", "b", "c", "d", "e")

    async def body(seen: Seen) -> None:
        await until(seen.refl.synced.is_set, what="the first list")
        await asyncio.to_thread(fake_api.stall_watches)
        await asyncio.to_thread(fake_api.delete, "ConfigMap", "default", "e")
        await asyncio.to_thread(create, fake_api, "f")
        # The relist's second page fails, twice: its first page is digested meanwhile.
        await asyncio.to_thread(fake_api.fail_requests, 2, 500, "GET", NEXT_PAGE)
        await relist(fake_api)
        await asyncio.to_thread(fake_api.unstall_watches)
        await until(lambda: names(seen.refl.cache) == new, what="the relist")

    new = frozenset({"a", "b", "c", "d", "f"})
    seen = run_seen(kubeconfig, body)
    failed = [r for r in fake_api.requests("GET", NEXT_PAGE) if r.status == 500]
    assert len(failed) == 2
    # Never half a list: the old whole one until the new whole one.
    assert seen.caches == [old, new]


def test_an_expired_continue_token_starts_the_list_again(fake_api: FakeApiServer,
                                                         kubeconfig: Path) -> None:
    want = create(fake_api, "a", "b", "c", "d", "e")
    fake_api.create(configmap("kube-system", "elsewhere"))
    # As the second page is asked for, its token comes to name a version gone.
    fake_api.before_next_request(lambda: expire_lists(fake_api), "GET", NEXT_PAGE)

    async def body(seen: Seen) -> None:
        await until(seen.refl.synced.is_set, what="the list after the 410")

    seen = run_seen(kubeconfig, body)
    assert seen.caches == [want]
    lists = fake_api.requests("GET", r"/namespaces/default/configmaps", watch=False)
    assert next(r.status for r in lists if "continue" in r.query) == 410
    firsts = [r for r in lists if "continue" not in r.query]
    assert len(firsts) == 2, "the list did not start over"


def test_an_expired_token_in_a_relist_keeps_the_cache_until_one_succeeds(
        fake_api: FakeApiServer, kubeconfig: Path) -> None:
    old = create(fake_api, "a", "b", "c", "d", "e")
    fake_api.create(configmap("kube-system", "elsewhere"))

    async def body(seen: Seen) -> None:
        await until(seen.refl.synced.is_set, what="the first list")
        await asyncio.to_thread(fake_api.stall_watches)
        await asyncio.to_thread(fake_api.delete, "ConfigMap", "default", "a")
        await asyncio.to_thread(fake_api.before_next_request, lambda: expire_lists(fake_api),
                                "GET", NEXT_PAGE)
        await relist(fake_api)
        await asyncio.to_thread(fake_api.unstall_watches)
        await until(lambda: names(seen.refl.cache) == old - {"a"}, what="the relist")

    seen = run_seen(kubeconfig, body)
    assert 410 in [r.status for r in fake_api.requests("GET", NEXT_PAGE)]
    assert seen.caches == [old, old - {"a"}]


def test_a_reflector_stopped_mid_list_leaves_no_request_behind(fake_api: FakeApiServer,
                                                               kubeconfig: Path) -> None:
    create(fake_api, "a", "b", "c", "d", "e")
    release = threading.Event()
    # The server holds the second page's request (and everything else) until released.
    fake_api.before_next_request(lambda: release.wait(PATIENCE), "GET", NEXT_PAGE)

    async def body(seen: Seen) -> None:
        try:
            await until(lambda: fake_api.count("GET", NEXT_PAGE) >= 1,
                        what="the second page asked for")
            # run_seen cancels the reflector, then checks that no task of it is left.
        finally:
            release.set()

    seen = run_seen(kubeconfig, body)
    assert seen.caches == []
    assert not seen.refl.synced.is_set()


def test_a_digest_that_fails_lets_go_of_the_page_asked_for_ahead(
        fake_api: FakeApiServer, kubeconfig: Path) -> None:
    create(fake_api, "a", "b", "c", "d", "e")

    def keep(obj: JsonObj) -> JsonObj:
        if obj["metadata"]["name"] == "b":
            # The loop has had a turn since "a": the second page is asked for by now.
            raise RuntimeError("cannot keep b")
        return obj

    async def main() -> None:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        refl = Reflector(client, PATH, kind="cm", on_change=lambda: None, transform=keep)
        try:
            with pytest.raises(RuntimeError, match="cannot keep b"):
                await refl._list()
            left = asyncio.all_tasks() - {asyncio.current_task()}
            assert not left, f"the page asked for ahead outlives the list: {left}"
            assert refl.cache == {} and not refl.synced.is_set()
        finally:
            await client.close()

    asyncio.run(main())


class PagedStub:
    """Serves pages of one list, and notes the order of what happens: each page asked for,
    each object digested."""

    def __init__(self, pages: list[list[JsonObj]]) -> None:
        self.pages = pages
        self.log: list[str] = []

    async def list_page(self, path: str, params: Mapping[str, str]) -> ListPage:
        k = int(params.get("continue") or 0)
        self.log.append(f"page {k}")
        await asyncio.sleep(0)
        meta = {"resourceVersion": "7", **({"continue": str(k + 1)}
                                           if k + 1 < len(self.pages) else {})}
        return ListPage(meta, list(self.pages[k]), f"GET {path}")


def stub_object(name: str) -> JsonObj:
    return {"metadata": {"namespace": "default", "name": name}}


def test_the_next_page_is_asked_for_before_this_one_is_digested() -> None:
    stub = PagedStub([[stub_object(f"p{k}-{i}") for i in range(3)] for k in range(3)])

    def keep(obj: JsonObj) -> JsonObj:
        stub.log.append(obj["metadata"]["name"])
        return obj

    async def main() -> None:
        refl = Reflector(stub, PATH, kind="cm",  # type: ignore[arg-type]
                         on_change=lambda: None, transform=keep)
        await refl._list()
        assert refl.resource_version == "7" and len(refl.cache) == 9

    asyncio.run(main())
    log = stub.log
    for k in (1, 2):
        # Asked for before the first object of the page before it was digested: the
        # server prepares it meanwhile.
        assert log.index(f"page {k}") < log.index(f"p{k - 1}-0"), log
    assert log.index("page 1") > log.index("page 0")


def test_a_page_that_is_no_list_is_a_bad_response() -> None:
    from hairpin_proxy.kube.client import _list_page

    page = _list_page(b'{"metadata":{"continue":"c","resourceVersion":"9"},'
                      b'"items":[{"a":1},null]}', "GET /x")
    assert (page.continue_token, page.resource_version) == ("c", "9")
    def items(listed: ListPage) -> list[object]:
        return [item for item, _ in listed.kept(lambda o: o)]

    assert items(page) == [{"a": 1}, None]
    assert items(page) == []  # read once
    assert items(_list_page(b"", "GET /x")) == []
    for body, words in ((b"[1]", "not a list"), (b'{"items":{}}', "not a list"),
                        (b'{"metadata":[]}', "not a list"), (b'{"items":[{]}', "not JSON")):
        with pytest.raises(ApiError, match=words) as got:
            _list_page(body, "GET /x")
        assert got.value.reason == "BadResponse"


def test_a_reader_is_told_of_each_listed_object_before_the_cache_holds_them(
        fake_api: FakeApiServer, kubeconfig: Path) -> None:
    """``on_listed`` hears of every object of a list as it is read, a few at a time, while
    the cache still holds the last whole list; then of a relist's objects too."""
    want = create(fake_api, *(f"cm{i}" for i in range(7)))
    told: list[tuple[frozenset[str], frozenset[str]]] = []

    async def body(seen: Seen) -> None:
        def listed(objs: list[JsonObj], at: int) -> bool:
            told.append((names({f"default/{o['metadata']['name']}": o for o in objs}),
                         names(seen.refl.cache)))
            return True

        seen.refl.on_listed = listed
        await until(seen.refl.synced.is_set, what="the first list")
        assert frozenset().union(*(got for got, _ in told)) == want
        assert all(cache == frozenset() for _, cache in told)
        assert all(len(got) <= PAGE for got, _ in told)
        told.clear()
        await asyncio.to_thread(fake_api.stall_watches)
        await asyncio.to_thread(create, fake_api, "late")
        await relist(fake_api)
        await asyncio.to_thread(fake_api.unstall_watches)
        await until(lambda: "default/late" in seen.refl.cache, what="the relist")
        assert frozenset().union(*(got for got, _ in told)) == want | {"late"}
        assert all(cache == want for _, cache in told)

    run_seen(kubeconfig, body)


def test_a_reader_that_cannot_take_objects_yet_is_given_them_again_with_their_places(
        fake_api: FakeApiServer, kubeconfig: Path) -> None:
    """A reader that answers False is given the same objects again with the next ones; each
    time it is told the place of the first in the list, so what it takes lines up with the
    cache's order whenever it starts taking."""
    create(fake_api, *(f"cm{i}" for i in range(7)))
    calls: list[tuple[list[str], int]] = []
    taken: list[str] = []

    async def body(seen: Seen) -> None:
        def listed(objs: list[JsonObj], at: int) -> bool:
            calls.append(([str(o["metadata"]["name"]) for o in objs], at))
            # Not taken on the first three calls (with DIGEST_TURN 1: past the first page).
            if len(calls) < 4:
                return False
            assert len(taken) == at
            taken.extend(str(o["metadata"]["name"]) for o in objs)
            return True

        seen.refl.on_listed = listed
        await until(seen.refl.synced.is_set, what="the first list")
        assert taken == [str(o["metadata"]["name"]) for o in seen.refl.cache.values()]

    run_seen(kubeconfig, body)
    listed_names = [f"cm{i}" for i in range(7)]
    # Each call: the objects from its place on, in the list's order; the ones not taken
    # come again from the start, so the first taken begin there too.
    assert all(got == listed_names[at:at + len(got)] for got, at in calls)
    assert [at for _, at in calls[:4]] == [0, 0, 0, 0]
    assert len(calls[3][0]) > PAGE
    assert taken == listed_names
