"""Paginated lists as the watch cache serves them: in etcd key order ("namespace/name"), each
page from the snapshot of the first page's version, in the time of the page."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx2 as httpx
from hypothesis import given, settings
from hypothesis import strategies as hs

from tests.fakeapi.fixtures import configmap
from tests.fakeapi.resources import resolve
from tests.fakeapi.server import FakeApiServer
from tests.fakeapi.store import Store, storage_key

CMS = "/api/v1/configmaps"
CONFIGMAPS = resolve("configmaps")


def names(page: dict[str, Any]) -> list[tuple[str, str]]:
    return [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in page["items"]]


def token(page: dict[str, Any]) -> dict[str, Any]:
    raw = page["metadata"]["continue"]
    return dict(json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))))


def test_lists_follow_the_storage_keys_order(http: httpx.Client,
                                             fake_api: FakeApiServer) -> None:
    # "a-b/x" sorts before "a/x" in etcd ("-" before "/"), although "a" < "a-b".
    for ns in ("a", "a-b", "a0"):
        fake_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        fake_api.create(configmap(ns, "x"))
    whole = names(http.get(CMS).json())
    assert whole == [("a-b", "x"), ("a", "x"), ("a0", "x")]
    paged: list[tuple[str, str]] = []
    page = http.get(CMS, params={"limit": 1}).json()
    paged += names(page)
    assert token(page)["start"] == "a-b/x\x00"
    while "continue" in page["metadata"]:
        page = http.get(CMS, params={"limit": 1, "continue": page["metadata"]["continue"]}).json()
        paged += names(page)
    assert paged == whole


def test_a_namespaces_token_is_relative_to_its_prefix(http: httpx.Client,
                                                     fake_api: FakeApiServer) -> None:
    for name in ("c0", "c1", "c2"):
        fake_api.create(configmap("default", name))
    path = "/api/v1/namespaces/default/configmaps"
    page = http.get(path, params={"limit": 2}).json()
    assert token(page)["start"] == "c1\x00" and page["metadata"]["remainingItemCount"] == 1
    rest = http.get(path, params={"continue": page["metadata"]["continue"]}).json()
    assert names(rest) == [("default", "c2")] and "continue" not in rest["metadata"]


def test_bad_continue_tokens_are_refused(http: httpx.Client, fake_api: FakeApiServer) -> None:
    fake_api.create(configmap("default", "c0"))

    def encoded(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    rv = int(fake_api.resource_version)
    for bad in ({"v": "meta.k8s.io/v1", "rv": 0, "start": "a\x00"},
                {"v": "meta.k8s.io/v1", "rv": rv, "start": ""},
                {"v": "meta.k8s.io/v1", "rv": rv, "start": "../kube-system/a\x00"},
                {"v": "meta.k8s.io/v2", "rv": rv, "start": "a\x00"}):
        r = http.get(CMS, params={"limit": 1, "continue": encoded(bad)})
        assert r.status_code == 400, bad
        assert "continue key is not valid" in r.json()["message"]


# (create or delete, namespace, name) steps, a list's first page between them.
_NS = hs.sampled_from(["a", "a-b", "b"])
_STEP = hs.tuples(hs.booleans(), _NS, hs.sampled_from(["x", "x-1", "y"]))


@settings(max_examples=150, deadline=None)
@given(before=hs.lists(_STEP, max_size=12), during=hs.lists(_STEP, max_size=12),
       limit=hs.integers(1, 4), namespace=hs.none() | _NS, pages_first=hs.integers(0, 3))
def test_pages_are_the_snapshot_of_the_first(before: list[tuple[bool, str, str]],
                                             during: list[tuple[bool, str, str]], limit: int,
                                             namespace: str | None, pages_first: int) -> None:
    """Read page by page while objects come and go: the pages together are the first page's
    snapshot in key order, and each page's count of what follows is exact."""
    store = Store()

    def apply(steps: list[tuple[bool, str, str]]) -> None:
        for create, ns, name in steps:
            exists = store.find(CONFIGMAPS, ns, name) is not None
            if create and not exists:
                store.create(CONFIGMAPS, ns, configmap(ns, name), from_api=False)
            elif not create and exists:
                store.delete(CONFIGMAPS, ns, name)

    apply(before)
    at = store.rv
    prefix = f"{namespace}/" if namespace else ""
    expected = sorted(storage_key(k) for k in store.snapshot(CONFIGMAPS)
                      if storage_key(k).startswith(prefix))
    got: list[str] = []
    start = ""
    for n in range(len(expected) + 1):
        if n == pages_first:
            apply(during)
        page = store.page(CONFIGMAPS, at, prefix=prefix, start=start, limit=limit,
                          match=lambda _: True)
        got += [storage_key((o["metadata"]["namespace"], o["metadata"]["name"]))
                for o in page.items]
        if page.last is None:
            break
        assert page.rest == len(expected) - len(got)
        start = page.last + "\x00"
    assert got == expected
