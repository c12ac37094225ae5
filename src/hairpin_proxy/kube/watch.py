"""The list+watch loop: a local cache of one kind of object kept in step with the API.

List, then watch from the list's resourceVersion with bookmarks; reconnect (from the last
resourceVersion seen) when a stream ends or falls silent; relist on 410 Gone; back off with
jitter on errors. After a relist the cache is replaced wholesale, so a deletion that happened
while the watch was down is not missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping
from dataclasses import dataclass

from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube.client import ApiError, KubeClient, ListPage

log = logging.getLogger("hairpin_proxy.kube.watch")

# Objects per list page. Each object is trimmed by ``transform`` as it is decoded, and a page's
# bytes are let go once it is digested: at most two pages' bytes (the one being digested, the
# next one arriving) and one whole object are alive at a time. Read whole, tens of thousands of
# Ingresses would take several times their trimmed size at once, and the heap keeps that
# high-water mark long after the whole objects are gone.
LIST_PAGE = 500
# Objects added between two reads of ``Reflector.values_list`` that it still notes one by one
# (a reader that stopped asking, a standby's, must not make it keep a list of all of them).
_MOST_ADDED = 4096
# Objects digested between two turns of the event loop during a list (a few milliseconds of
# work; each turn costs the turn and a read-ahead's setup): the Lease is renewed on time
# during a list of tens of thousands of objects, and the next page's answer, asked for as
# this page starts, is read while this one is digested.
DIGEST_TURN = 250


class Backoff:
    """Exponential backoff with full jitter, reset after a success."""

    def __init__(self, base: float = 0.5, cap: float = 10.0) -> None:
        self.base = base
        self.cap = cap
        self.failures = 0

    def next_delay(self) -> float:
        self.failures += 1
        ceiling = min(self.cap, self.base * 2 ** min(self.failures - 1, 20))
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.failures = 0


def object_key(obj: Mapping[str, object]) -> str:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return ""
    ns, name = meta.get("namespace") or "", meta.get("name") or ""
    return f"{ns}/{name}"


def _meta_str(obj: Mapping[str, object], field: str) -> str:
    # Spelled as ``object_key`` spells it: a malformed (non-string) namespace must still
    # match its own key, or a change would keep a second copy and a deletion leave one.
    meta = obj.get("metadata")
    return f"{meta.get(field) or ''}" if isinstance(meta, Mapping) else ""


def _name(obj: Mapping[str, object]) -> object:
    meta = obj.get("metadata")
    return meta.get("name") if isinstance(meta, Mapping) else None


def _strip(obj: JsonObj) -> JsonObj:
    # managedFields can be most of an object's size and nothing here reads it.
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


@dataclass(frozen=True)
class Trim:
    """What a Reflector keeps of each object: ``keep`` of the object decoded whole, or
    ``quick`` of a listed object's JSON, which decodes only what it keeps (None: not for this
    one, which is then decoded whole). A list of tens of thousands of objects spends most of
    its time decoding what is then dropped."""

    keep: Callable[[JsonObj], JsonObj]
    quick: Callable[[bytes], JsonObj | None]

    def __call__(self, obj: JsonObj) -> JsonObj:
        return self.keep(obj)


class _Gone(Exception):
    pass


class Reflector:
    """Keeps ``cache`` (key "namespace/name" → object) in step with one API collection.

    ``on_change`` is called (synchronously, cheaply) after every change to the cache;
    ``synced`` is set once the first list has been loaded.
    """

    def __init__(self, client: KubeClient, path: str, *, kind: str,
                 on_change: Callable[[], None],
                 params: Mapping[str, str] | None = None,
                 silence_timeout: float = 70.0,
                 on_restart: Callable[[str, str], None] | None = None,
                 backoff: Backoff | None = None,
                 transform: Callable[[JsonObj], JsonObj] | None = None) -> None:
        self.client = client
        self.path = path
        self.kind = kind
        self.params = dict(params or {})
        self.on_change = on_change
        self.silence_timeout = silence_timeout
        # Called with (kind, why) whenever a watch has to be re-established.
        self.on_restart = on_restart
        self.backoff = backoff or Backoff()
        # What is kept of each object: by default all but managedFields; a caller that reads
        # only a few fields keeps only those (tens of thousands of Ingresses).
        self.keep = transform or _strip
        self._quick = transform.quick if isinstance(transform, Trim) else None
        self.cache: dict[str, JsonObj] = {}
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.last_error: str = ""
        # Grows by at least the number of objects changed: readers skip recomputing while it
        # stands still, and can tell a few changes from many.
        self.generation = 0
        self._by_name = False
        self._name_of: Callable[[JsonObj], object] = _name
        # Told of the objects of a list as they are read, a few at a time, before the list
        # is whole (the cache holds them only then): a reader may work ahead on them. It is
        # given the objects and the place of the first in the list; it answers False when it
        # cannot take them yet, and is given them again with the next ones.
        self.on_listed: Callable[[list[JsonObj], int], bool] | None = None
        # For ``values_list``: the objects added after all others since it was last asked,
        # and the cache they were added to (None: not asked yet, or something else changed).
        self._added: list[JsonObj] | None = None
        self._added_to: dict[str, JsonObj] | None = None

    def key_by_name(self, name_of: Callable[[JsonObj], object] = _name) -> None:
        """Key ``cache`` by each object's own name (the very string it keeps, which
        ``name_of`` reads from a kept object) where no object of another namespace holds that
        key, by "namespace/name" otherwise: at 10,000 Ingresses, 10,000 key strings fewer.
        ``get`` and the relist's comparison find either key; the cache's values and their
        order are what they would be otherwise. Only for caches whose readers never read the
        keys themselves; call before ``run``."""
        self._by_name = True
        self._name_of = name_of

    def _key_of(self, cache: dict[str, JsonObj], key: str) -> str | None:
        """The key ``cache`` holds the object of "namespace/name" ``key`` under, or None."""
        if not self._by_name:
            return key if key in cache else None
        ns, slash, name = key.partition("/")
        if not slash:
            return None  # no "namespace/name" (a name alone is a key only inside)
        if key in cache:
            return key
        found = cache.get(name)
        return name if found is not None and _meta_str(found, "namespace") == ns else None

    def _new_key(self, cache: dict[str, JsonObj], kept: JsonObj, key: str) -> str:
        """Where ``kept`` (of "namespace/name" ``key``) goes in ``cache``: where it is, else
        under its name if that is free, else under ``key``."""
        if not self._by_name or key in cache:
            return key
        name = self._name_of(kept)
        # Only a name ``get`` tells from "namespace/name" ``key``: after its first "/" (as
        # every name the API server accepts is).
        if type(name) is not str or not name or key.find("/") != len(key) - len(name) - 1 \
                or not key.endswith(name):
            return key
        there = cache.get(name)
        return name if there is None or _meta_str(there, "namespace") == key[:-len(name) - 1] \
            else key

    def values_list(self, last: list[JsonObj] | None) -> list[JsonObj]:
        """The cached objects, in the cache's order, as a list: ``last`` (the list this gave
        the time before, unchanged since) with the objects added after them, where nothing
        but such additions happened since; else a new list. Extending the last list touches
        the new objects alone: a new one counts a reference to every object, a millisecond
        at 50,000 of them spread over the heap."""
        added, self._added = self._added, []
        same_cache, self._added_to = self._added_to is self.cache, self.cache
        if (last is None or added is None or not same_cache
                or len(last) + len(added) != len(self.cache)):
            return list(self.cache.values())
        last += added
        return last

    def _put(self, kept: JsonObj, key: str) -> None:
        """``kept`` into the cache where ``_new_key`` says; noted where it goes after the
        others (``values_list``)."""
        at = self._new_key(self.cache, kept, key)
        if self._added is not None:
            if at in self.cache or len(self._added) >= _MOST_ADDED:
                self._added = None
            else:
                self._added.append(kept)
        self.cache[at] = kept

    def get(self, key: str) -> JsonObj | None:
        if not self._by_name:
            return self.cache.get(key)
        there = self._key_of(self.cache, key)
        return None if there is None else self.cache[there]

    def _same(self, fresh: dict[str, JsonObj]) -> bool:
        """Whether a relist's ``fresh`` objects are the cached ones (keyed by name, the two
        may hold an object under different keys)."""
        if fresh == self.cache:
            return True
        if not self._by_name or len(fresh) != len(self.cache):
            return False
        for obj in fresh.values():
            there = self._key_of(self.cache, object_key(obj))
            if there is None or self.cache[there] != obj:
                return False
        return True

    def _restarted(self, why: str) -> None:
        if self.on_restart is not None:
            self.on_restart(self.kind, why)

    async def run(self) -> None:
        need_list = True
        while True:
            try:
                if need_list:
                    await self._list()
                    need_list = False
                await self._watch()
                self._restarted("closed")
                log.debug("watch ended; resuming", extra={"kind": self.kind})
            except _Gone:
                log.info("watch expired (410); relisting", extra={"kind": self.kind})
                self._restarted("gone")
                need_list = True
            except ApiError as exc:
                if exc.status == 410:
                    self._restarted("gone")
                    need_list = True
                    continue
                if exc.reason == "Silent":
                    # Quiet streams are normal; reconnect at once, no backoff.
                    log.debug("watch silent; reconnecting", extra={"kind": self.kind})
                    self._restarted("silent")
                    continue
                delay = self.backoff.next_delay()
                self.last_error = str(exc)
                # Loud at first, then a reminder now and then while it lasts; an unreachable
                # server is said once for every watch by the client (Reachability).
                n = self.backoff.failures
                loud = exc.reason != "Unreachable" and (n <= 3 or n % 20 == 0)
                level = logging.WARNING if loud else logging.DEBUG
                log.log(level, "list/watch failed; retrying",
                        extra={"kind": self.kind, "error": str(exc), "failures": n,
                               "retry_in": round(delay, 2)})
                self._restarted("error")
                await asyncio.sleep(delay)

    def _fetch(self, query: Mapping[str, str]) -> asyncio.Future[ListPage]:
        return asyncio.ensure_future(self.client.list_page(self.path, dict(query)))

    async def _pages(self) -> AsyncGenerator[tuple[Iterator[tuple[JsonObj, JsonObj]], str],
                                             None]:
        """((each item, what is kept of it), the list's resourceVersion so far) for each page
        of one consistent list.

        The next page is asked for as soon as this one's continue token is known, before its
        items are decoded: the server prepares it while this one is digested. A failed next
        page fails the list when it is reached; one not yet reached when the list stops is
        cancelled."""
        query = dict(self.params)
        query["limit"] = str(LIST_PAGE)
        ahead = self._fetch(query)
        try:
            while True:
                page = await ahead
                cont = page.continue_token
                if cont:
                    query["continue"] = cont
                    ahead = self._fetch(query)
                yield page.kept(self.keep, self._quick), page.resource_version
                # Not held while the next page is read.
                del page
                if not cont:
                    return
        finally:
            if not ahead.done():
                ahead.cancel()
            # Its outcome is nobody's now (a failure of its own is not to be logged as lost).
            await asyncio.gather(ahead, return_exceptions=True)

    def _tell_listed(self, read: list[JsonObj], at: int) -> tuple[list[JsonObj], int]:
        """``read`` (gathered only for an ``on_listed``; the first at place ``at`` of the
        list) to it; what to gather the next ones into, and the place of the first of them."""
        if not read or self.on_listed is None or not self.on_listed(read, at):
            return read, at
        return [], at + len(read)

    async def _list(self) -> None:
        fresh: dict[str, JsonObj] = {}
        rv = ""
        # Closed as soon as the list stops, so that a page asked for ahead does not outlive it.
        read: list[JsonObj] = []
        read_at = 0
        async with contextlib.aclosing(self._pages()) as pages:
            async for items, page_rv in pages:
                # The next page's request leaves before this one is digested.
                await asyncio.sleep(0)
                for n, (o, kept) in enumerate(items, 1):
                    fresh[self._new_key(fresh, kept, object_key(o))] = kept
                    if self.on_listed is not None:
                        read.append(kept)
                    if n % DIGEST_TURN == 0:
                        del o, kept
                        read, read_at = self._tell_listed(read, read_at)
                        await asyncio.sleep(0)
                read, read_at = self._tell_listed(read, read_at)
                rv = page_rv
        changed = not self._same(fresh) or not self.synced.is_set()
        self.cache = fresh
        self.resource_version = rv
        self.backoff.reset()
        self.last_error = ""
        log.debug("listed", extra={"kind": self.kind, "count": len(fresh),
                                   "resource_version": rv})
        self.synced.set()
        if changed:
            # A relist may replace every object: it counts as that many changes.
            self.generation += max(1, len(fresh))
            self.on_change()

    async def _watch(self) -> None:
        params = dict(self.params)
        params["resourceVersion"] = self.resource_version
        params["allowWatchBookmarks"] = "true"
        # Let the server end the stream now and then (as client-go does) so that a
        # half-dead connection is never trusted for long.
        params["timeoutSeconds"] = str(random.randint(300, 600))
        async for event in self.client.watch(self.path, params,
                                             silence_timeout=self.silence_timeout):
            etype = event.get("type")
            obj = event.get("object")
            if not isinstance(obj, dict):
                continue
            if etype == "ERROR":
                if obj.get("code") == 410:
                    raise _Gone()
                raise ApiError(int(obj.get("code") or 0), str(obj.get("reason") or "Error"),
                               str(obj.get("message") or "watch error"))
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv:
                self.resource_version = str(rv)
            self.backoff.reset()
            if etype == "BOOKMARK":
                continue
            key = object_key(obj)
            if etype in ("ADDED", "MODIFIED"):
                self._put(self.keep(obj), key)
            elif etype == "DELETED":
                there = self._key_of(self.cache, key)
                if there is not None:
                    del self.cache[there]
                    self._added = None
            else:
                continue
            self.generation += 1
            self.on_change()
