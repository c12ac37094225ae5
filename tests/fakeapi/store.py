"""The object store behind the fake API server: one global resourceVersion, bounded per-resource
history, consistent snapshots for paginated lists, and watch fan-out.

The store is confined to one event loop (the server's): every method must run on that loop's
thread, which is what makes "register a watcher and read its backlog" atomic without locks.
"""

from __future__ import annotations

import asyncio
import copy
import ipaddress
import json
import random
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.fakeapi import status as st
from tests.fakeapi.resources import RESOURCES, ResourceType, resolve
from tests.fakeapi.validation import validate

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)
Match = Callable[[Obj], bool]

_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def key_of(obj: Obj) -> Key:
    md = obj.get("metadata", {})
    return (md.get("namespace") or "", md.get("name") or "")


@dataclass
class Event:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    obj: Obj
    prev: Obj | None


@dataclass(eq=False)
class Watcher:
    rt: ResourceType
    namespace: str | None
    match: Match
    queue: asyncio.Queue[tuple[str, Obj] | None] = field(default_factory=asyncio.Queue)
    dropped: bool = False

    def passes(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        return self.match(obj)

    def offer(self, ev: Event) -> None:
        cur = ev.type != "DELETED" and self.passes(ev.obj)
        old = self.passes(ev.prev)
        if cur and not old:
            self.queue.put_nowait(("ADDED", ev.obj))
        elif cur and old:
            self.queue.put_nowait(("MODIFIED", ev.obj))
        elif old:
            # Leaving the selection reads as a deletion: the last matching content, new version.
            gone = ev.obj if ev.type == "DELETED" else copy.deepcopy(ev.prev)
            assert gone is not None
            gone["metadata"]["resourceVersion"] = str(ev.rv)
            self.queue.put_nowait(("DELETED", gone))


def _strip_volatile(obj: Obj) -> Obj:
    out = copy.deepcopy(obj)
    out.get("metadata", {}).pop("resourceVersion", None)
    out.get("metadata", {}).pop("managedFields", None)
    return out


class Store:
    def __init__(self, history_size: int = 1000, rv_start: int = 1000) -> None:
        self.history_size = history_size
        self._rv = rv_start
        self._objects: dict[ResourceType, dict[Key, Obj]] = {rt: {} for rt in RESOURCES}
        self._history: dict[ResourceType, deque[Event]] = {rt: deque() for rt in RESOURCES}
        # A watch or continue from an RV below this for the type answers 410.
        self._compacted: dict[ResourceType, int] = {rt: rv_start for rt in RESOURCES}
        self._watchers: set[Watcher] = set()
        self._next_ip = 10

    # --- reading -------------------------------------------------------------------------

    @property
    def rv(self) -> int:
        return self._rv

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        obj = self._objects[rt].get(((namespace or "") if rt.namespaced else "", name))
        if obj is None:
            raise st.not_found(rt, name)
        return copy.deepcopy(obj)

    def find(self, rt: ResourceType, namespace: str | None, name: str) -> Obj | None:
        obj = self._objects[rt].get(((namespace or "") if rt.namespaced else "", name))
        return copy.deepcopy(obj) if obj is not None else None

    def snapshot(self, rt: ResourceType, at_rv: int | None = None) -> dict[Key, Obj]:
        """The type's objects as they were at `at_rv` (current when None); 410 if compacted."""
        objs = dict(self._objects[rt])
        if at_rv is None or at_rv >= self._rv:
            return objs
        if at_rv < self._compacted[rt]:
            raise st.expired(
                f"The resourceVersion for the provided list is too old: {at_rv} is older than "
                f"the oldest retained version {self._compacted[rt]}"
            )
        for ev in reversed(self._history[rt]):
            if ev.rv <= at_rv:
                break
            key = key_of(ev.obj)
            if ev.type == "ADDED":
                objs.pop(key, None)
            else:
                assert ev.prev is not None
                objs[key] = ev.prev
        return objs

    def history(self, rt: ResourceType) -> list[Event]:
        return list(self._history[rt])

    def check_continue(self, rt: ResourceType, at_rv: int) -> None:
        if at_rv < self._compacted[rt]:
            raise st.expired(
                "The provided continue parameter is too old to display a consistent list "
                "result. You can start a new list without the continue parameter, or use the "
                "continue token in this response to retrieve the remainder of the results. "
                "Continuing with the provided token results in an inconsistent list - objects "
                "that were created, modified, or deleted between the time the first chunk was "
                "returned and now may show up in the list."
            )

    # --- watching ------------------------------------------------------------------------

    def open_watch(
        self, rt: ResourceType, namespace: str | None, match: Match, since: int | None
    ) -> tuple[list[tuple[str, Obj]], Watcher]:
        """Register a watcher; return the events it must see first.

        since=None: synthetic ADDED for the current state. Otherwise every event after `since`
        from history, or a 410 ApiError when that part of history is gone.
        """
        w = Watcher(rt, namespace, match)
        backlog: list[tuple[str, Obj]] = []
        if since is None:
            for key in sorted(self._objects[rt]):
                obj = self._objects[rt][key]
                if w.passes(obj):
                    backlog.append(("ADDED", copy.deepcopy(obj)))
        else:
            if since < self._compacted[rt]:
                raise st.expired(f"too old resource version: {since} ({self._compacted[rt]})")
            for ev in self._history[rt]:
                if ev.rv > since:
                    w.offer(ev)
            while not w.queue.empty():
                item = w.queue.get_nowait()
                assert item is not None
                backlog.append((item[0], copy.deepcopy(item[1])))
        self._watchers.add(w)
        return backlog, w

    def close_watch(self, w: Watcher) -> None:
        self._watchers.discard(w)

    @property
    def watchers(self) -> list[Watcher]:
        return list(self._watchers)

    def drop_watchers(self) -> None:
        for w in list(self._watchers):
            w.dropped = True
            w.queue.put_nowait(None)
            self._watchers.discard(w)

    def compact(self) -> None:
        for rt in RESOURCES:
            self._history[rt].clear()
            self._compacted[rt] = self._rv

    # --- writing -------------------------------------------------------------------------

    def _bump(self) -> int:
        self._rv += 1
        return self._rv

    def _emit(self, rt: ResourceType, type_: str, obj: Obj, prev: Obj | None) -> None:
        ev = Event(int(obj["metadata"]["resourceVersion"]), type_, obj, prev)
        hist = self._history[rt]
        hist.append(ev)
        while len(hist) > self.history_size:
            self._compacted[rt] = hist.popleft().rv
        for w in list(self._watchers):
            if w.rt == rt:
                w.offer(ev)

    def _check_body(self, rt: ResourceType, obj: Any) -> Obj:
        if not isinstance(obj, dict):
            raise st.bad_request("the object provided is unrecognized: not a JSON object")
        api_version = obj.get("apiVersion") or rt.api_version
        kind = obj.get("kind") or rt.kind
        if api_version != rt.api_version:
            raise st.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({rt.api_version})"
            )
        if kind != rt.kind:
            raise st.bad_request(
                f"the object provided is unrecognized (must be of type {rt.kind}): "
                f"kind {kind!r} does not match"
            )
        out = copy.deepcopy(obj)
        out["apiVersion"], out["kind"] = rt.api_version, rt.kind
        md = out.get("metadata")
        if md is None:
            md = out["metadata"] = {}
        if not isinstance(md, dict):
            raise st.bad_request(f"{rt.kind} in version \"{rt.version}\" cannot be handled as a "
                                 f"{rt.kind}: metadata must be an object")
        return out

    def _allocate_ip(self) -> str:
        self._next_ip += 1
        return str(ipaddress.IPv4Address("10.96.0.0") + self._next_ip)

    def create(
        self,
        rt: ResourceType,
        namespace: str | None,
        body: Any,
        *,
        from_api: bool = True,
        dry_run: bool = False,
    ) -> Obj:
        obj = self._check_body(rt, body)
        md = obj["metadata"]
        if rt.namespaced:
            ns = namespace or md.get("namespace") or "default"
            if md.get("namespace") not in (None, "", ns):
                raise st.bad_request("the namespace of the provided object does not match the "
                                     "namespace sent on the request")
            md["namespace"] = ns
            if from_api and ("", ns) not in self._objects[resolve("namespaces")]:
                raise st.not_found(resolve("namespaces"), ns)
            owner = self._objects[resolve("namespaces")].get(("", ns))
            if from_api and owner is not None and owner["metadata"].get("deletionTimestamp"):
                raise st.forbidden(rt, md.get("name") or "",
                                   f"unable to create new content in namespace {ns} because "
                                   "it is being terminated")
        else:
            md.pop("namespace", None)
        if not md.get("name") and md.get("generateName"):
            suffix = "".join(random.choice(_GENERATE_ALPHABET) for _ in range(5))
            md["name"] = f"{md['generateName']}{suffix}"
        validate(rt, obj)
        if key_of(obj) in self._objects[rt]:
            raise st.already_exists(rt, md["name"])
        for server_owned in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
                             "deletionGracePeriodSeconds", "generation", "selfLink"):
            md.pop(server_owned, None)
        md["uid"] = str(uuid.uuid4())
        md["creationTimestamp"] = now_rfc3339()
        if rt.has_generation:
            md["generation"] = 1
        if from_api and rt.has_status:
            obj.pop("status", None)
        if rt.plural == "namespaces":
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj.setdefault("status", {"phase": "Active"})
        if rt.plural == "services":
            self._default_service(obj)
        if dry_run:
            return obj
        md["resourceVersion"] = str(self._bump())
        self._objects[rt][key_of(obj)] = obj
        self._emit(rt, "ADDED", obj, None)
        return copy.deepcopy(obj)

    def _default_service(self, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        if spec["type"] != "ExternalName":
            if not spec.get("clusterIP"):
                spec["clusterIP"] = (spec.get("clusterIPs") or [self._allocate_ip()])[0]
            spec.setdefault("clusterIPs", [spec["clusterIP"]])
        spec.setdefault("sessionAffinity", "None")
        obj.setdefault("status", {"loadBalancer": {}})

    def update(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        from_api: bool = True,
        subresource: str | None = None,
        check_rv: bool = True,
        dry_run: bool = False,
    ) -> tuple[Obj, bool]:
        """Replace an object; return (stored object, created)."""
        obj = self._check_body(rt, body)
        md = obj["metadata"]
        if md.get("name") and md["name"] != name:
            raise st.bad_request(f"the name of the object ({md['name']}) does not match the name "
                                 f"on the URL ({name})")
        md["name"] = name
        ns = (namespace or "default") if rt.namespaced else ""
        if rt.namespaced:
            if md.get("namespace") not in (None, "", ns):
                raise st.bad_request("the namespace of the provided object does not match the "
                                     "namespace sent on the request")
            md["namespace"] = ns
        old = self._objects[rt].get((ns, name))
        if old is None:
            if rt.create_on_update and subresource is None:
                if md.get("resourceVersion"):
                    # A precondition on an object that does not exist cannot hold.
                    raise st.not_found(rt, name)
                return self.create(rt, namespace, obj, from_api=from_api, dry_run=dry_run), True
            raise st.not_found(rt, name)
        given_rv = md.get("resourceVersion")
        if check_rv and given_rv and given_rv != old["metadata"]["resourceVersion"]:
            raise st.conflict(rt, name, st.STALE)
        given_uid = md.get("uid")
        if check_rv and given_uid and given_uid != old["metadata"]["uid"]:
            raise st.conflict(rt, name, f"Precondition failed: UID in precondition: {given_uid}, "
                                        f"UID in object meta: {old['metadata']['uid']}")
        if subresource == "status":
            new = copy.deepcopy(old)
            if "status" in obj:
                new["status"] = obj["status"]
            else:
                new.pop("status", None)
        else:
            new = obj
            if from_api and rt.has_status:
                if "status" in old:
                    new["status"] = copy.deepcopy(old["status"])
                else:
                    new.pop("status", None)
        nmd = new["metadata"]
        for immutable in ("uid", "creationTimestamp", "deletionTimestamp",
                          "deletionGracePeriodSeconds", "generation"):
            if immutable in old["metadata"]:
                nmd[immutable] = old["metadata"][immutable]
            else:
                nmd.pop(immutable, None)
        validate(rt, new, old)
        if rt.has_generation and new.get("spec") != old.get("spec"):
            nmd["generation"] = int(old["metadata"].get("generation", 0)) + 1
        if rt.plural == "services":
            self._default_service(new)
        nmd["resourceVersion"] = old["metadata"]["resourceVersion"]
        if _strip_volatile(new) == _strip_volatile(old):
            # The real server skips a write that changes nothing: no new version, no event.
            return copy.deepcopy(old), False
        if dry_run:
            return new, False
        nmd["resourceVersion"] = str(self._bump())
        if nmd.get("deletionTimestamp") and not nmd.get("finalizers"):
            del self._objects[rt][(ns, name)]
            self._emit(rt, "DELETED", new, old)
            return copy.deepcopy(new), False
        self._objects[rt][(ns, name)] = new
        self._emit(rt, "MODIFIED", new, old)
        return copy.deepcopy(new), False

    def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        *,
        precondition_rv: str | None = None,
        precondition_uid: str | None = None,
        dry_run: bool = False,
    ) -> tuple[Obj, bool]:
        """Delete an object; return (its last state, gone now). With finalizers it only gets a
        deletionTimestamp and stays until they are cleared, as on a real cluster."""
        ns = (namespace or "default") if rt.namespaced else ""
        old = self._objects[rt].get((ns, name))
        if old is None:
            raise st.not_found(rt, name)
        if precondition_rv and precondition_rv != old["metadata"]["resourceVersion"]:
            raise st.conflict(
                rt, name,
                f"Precondition failed: ResourceVersion in precondition: {precondition_rv}, "
                f"ResourceVersion in object meta: {old['metadata']['resourceVersion']}",
            )
        if precondition_uid and precondition_uid != old["metadata"]["uid"]:
            raise st.conflict(rt, name, f"Precondition failed: UID in precondition: "
                                        f"{precondition_uid}, UID in object meta: "
                                        f"{old['metadata']['uid']}")
        if dry_run:
            return copy.deepcopy(old), True
        if rt.plural == "namespaces" and (old.get("spec") or {}).get("finalizers"):
            # The namespace controller empties a Terminating namespace and then clears
            # spec.finalizers; until then it stays, phase Terminating (the fake has no such
            # controller: a test finishes the deletion with finalize_namespace()).
            if old["metadata"].get("deletionTimestamp"):
                return copy.deepcopy(old), False
            new = copy.deepcopy(old)
            new["metadata"]["deletionTimestamp"] = now_rfc3339()
            new.setdefault("status", {})["phase"] = "Terminating"
            new["metadata"]["resourceVersion"] = str(self._bump())
            self._objects[rt][(ns, name)] = new
            self._emit(rt, "MODIFIED", new, old)
            return copy.deepcopy(new), False
        if old["metadata"].get("finalizers"):
            if old["metadata"].get("deletionTimestamp"):
                return copy.deepcopy(old), False
            new = copy.deepcopy(old)
            new["metadata"]["deletionTimestamp"] = now_rfc3339()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            new["metadata"]["resourceVersion"] = str(self._bump())
            self._objects[rt][(ns, name)] = new
            self._emit(rt, "MODIFIED", new, old)
            return copy.deepcopy(new), False
        gone = copy.deepcopy(old)
        gone["metadata"]["resourceVersion"] = str(self._bump())
        del self._objects[rt][(ns, name)]
        self._emit(rt, "DELETED", gone, old)
        return copy.deepcopy(gone), True


def dumps(obj: Any) -> bytes:
    # UTF-8 as the real server sends it: non-ASCII text unescaped (U+0085 NEL included),
    # except U+2028 and U+2029, which Go's encoder always escapes.
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").encode()


__all__ = ["Event", "Store", "Watcher", "dumps"]
