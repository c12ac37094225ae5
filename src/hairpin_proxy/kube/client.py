"""A small JSON client for the Kubernetes API: plain dicts in, plain dicts out.

The HTTP client (TLS, bearer token re-read from its file on 401, client certificates, exec
plugins) is built by lightkube's configuration layer. Requests and the watch stream are ours:
the controller needs exact control over resourceVersions, 409s, 410s and stream silence, and
works on generic objects (the policy takes mappings).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

import httpx2 as httpx
import msgspec
from lightkube.config.client_adapter import AsyncClient as _adapter_client
from lightkube.config.client_adapter import ConnectionParams

from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube.config import ClusterConfig

log = logging.getLogger("hairpin_proxy.kube")


def _plain(obj: Any) -> Any:
    # Bodies are built from mappings the policy and the edits hand over, not always dicts.
    if isinstance(obj, Mapping):
        return dict(obj)
    raise TypeError(f"cannot send a {type(obj).__name__} as JSON")


# The CoreDNS ConfigMap of a large cluster is half a megabyte of JSON, sent and read back on
# every write: msgspec does both several times faster than the standard library, and it is
# installed anyway (lightkube's own dependency).
_encode = msgspec.json.Encoder(enc_hook=_plain).encode
_decode = msgspec.json.Decoder().decode
# What a body that is not JSON raises (msgspec 0.18's DecodeError is no ValueError).
_NOT_JSON = (ValueError, msgspec.DecodeError)


# What went wrong, in words, by the transport error's type (the first match in this order).
_CAUSES: tuple[tuple[type[httpx.HTTPError], str], ...] = (
    (httpx.ConnectTimeout, "the connection timed out"),
    (httpx.ConnectError, "the connection failed"),
    (httpx.ReadTimeout, "no answer in time"),
    (httpx.RemoteProtocolError, "the server closed the connection"),
    (httpx.ReadError, "the connection broke"),
    (httpx.WriteError, "the connection broke"),
    (httpx.TimeoutException, "no answer in time"),
)


def cause_in_words(exc: httpx.HTTPError) -> str:
    """"the connection failed (Connection refused)" rather than a class name and its repr."""
    words = next((w for t, w in _CAUSES if isinstance(exc, t)), "the request failed")
    detail = str(exc).strip()
    if "] " in detail:  # "[Errno 111] Connection refused" → "Connection refused"
        detail = detail.split("] ", 1)[1]
    return f"{words} ({detail})" if detail else words


class Reachability:
    """Whether the API server answers, said once per outage: every watch and every request of
    a process fails together when the server is away, and one line says it all."""

    def __init__(self, server: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.server = server
        self.clock = clock
        self.down_since: float | None = None

    def failed(self, cause: str) -> None:
        if self.down_since is None:
            self.down_since = self.clock()
            log.warning("cannot reach the Kubernetes API; retrying until it answers",
                        extra={"server": self.server, "cause": cause})

    def answered(self) -> None:
        if self.down_since is not None:
            log.info("the Kubernetes API answers again",
                     extra={"server": self.server,
                            "outage_seconds": round(self.clock() - self.down_since, 1)})
            self.down_since = None


# The API server names the field manager of a write that names none after this prefix (up to
# the first "/"): our entries in managedFields are "hairpin-proxy", which is how a revert by
# another manager is told from our own writes.
USER_AGENT = "hairpin-proxy/1"


class ApiError(Exception):
    """A failed API call; ``status`` 0 means the server could not be reached or stopped talking."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}" if status else message)
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def retriable(self) -> bool:
        return self.status in (0, 429) or self.status >= 500


def resource_path(api: str, plural: str, namespace: str | None = None,
                  name: str | None = None) -> str:
    """``/api/v1/...`` for the core group ("v1"), ``/apis/<group>/<version>/...`` otherwise."""
    out = "/api/v1" if api == "v1" else f"/apis/{api}"
    if namespace:
        out += f"/namespaces/{namespace}"
    out += f"/{plural}"
    if name:
        out += f"/{name}"
    return out


def _error_from(resp: httpx.Response, body: bytes) -> ApiError:
    reason, message = resp.reason_phrase, body[:300].decode("utf-8", "replace")
    try:
        status = _decode(body)
        if isinstance(status, dict) and status.get("kind") == "Status":
            reason = str(status.get("reason") or reason)
            message = str(status.get("message") or message)
    except _NOT_JSON:
        pass
    return ApiError(resp.status_code, reason, message)


def _take_event(partial: bytearray, into: list[JsonObj], path: str) -> None:
    """The event on the line ``partial`` holds, appended to ``into`` unless the line is blank
    or holds no object; ``partial`` is emptied, which gives its room back (a bytearray
    cleared is reallocated to nothing)."""
    if partial and not partial.isspace():  # the white space bytes.strip() takes
        try:
            event = _decode(partial)
        except _NOT_JSON:
            raise ApiError(0, "BadResponse", f"watch {path}: bad line") from None
        if isinstance(event, dict):
            into.append(event)
    partial.clear()


class _ListBody(msgspec.Struct):
    """A list answer with its items left undecoded: one pass over the bytes finds where each
    item is, and its metadata (the continue token) is known before any item is decoded."""

    metadata: dict[str, Any] | None = None
    items: list[msgspec.Raw] | None = None


_decode_list = msgspec.json.Decoder(_ListBody).decode


class ListPage:
    """One page of a list: its metadata, and its items decoded one at a time as they are
    read, so that a page of 500 Ingresses is never 500 whole objects at once."""

    def __init__(self, metadata: JsonObj, items: list[Any], what: str) -> None:
        self.metadata = metadata
        # Undecoded items (msgspec.Raw), or already decoded ones (a body of another shape).
        self._items = items
        self._what = what

    @property
    def continue_token(self) -> str:
        return str(self.metadata.get("continue") or "")

    @property
    def resource_version(self) -> str:
        return str(self.metadata.get("resourceVersion") or "")

    def kept(self, keep: Callable[[Any], Any],
             quick: Callable[[bytes], Any] | None = None) -> Iterator[tuple[Any, Any]]:
        """(each item, what ``keep`` keeps of it), decoded as it is reached (a page is read
        once); where ``quick`` keeps an item straight from its JSON (not None), (that, that)."""
        raw, self._items = self._items, []
        for item in raw:
            if not isinstance(item, msgspec.Raw):
                yield item, keep(item)
                continue
            got = None if quick is None else quick(item)
            if got is None:
                whole = self._decoded(item)
                yield whole, keep(whole)
            else:
                yield got, got

    def _decoded(self, item: msgspec.Raw) -> Any:
        try:
            return _decode(item)
        except _NOT_JSON:
            raise ApiError(0, "BadResponse", f"{self._what}: an item is not JSON") from None


def _list_page(body: bytes, what: str) -> ListPage:
    """A list answer's page; ApiError when the answer is no list."""
    if not body:
        return ListPage({}, [], what)
    try:
        got = _decode_list(body)
    except msgspec.ValidationError:
        # JSON, but no list's shape: no object, or metadata or items of another type.
        raise ApiError(0, "BadResponse", f"{what}: response is not a list") from None
    except _NOT_JSON:
        raise ApiError(0, "BadResponse", f"{what}: response is not JSON") from None
    return ListPage(got.metadata or {}, got.items or [], what)


class KubeClient:
    def __init__(self, http: httpx.AsyncClient, *,
                 on_response: Callable[[str, int], None] | None = None) -> None:
        self.http = http
        # Called with (verb, status) for every request: the requests metric.
        self.on_response = on_response
        self.reach = Reachability(str(http.base_url).rstrip("/"))

    @classmethod
    def from_cluster(cls, cluster: ClusterConfig, *, timeout: float = 30.0,
                     on_response: Callable[[str, int], None] | None = None) -> KubeClient:
        params = ConnectionParams(timeout=httpx.Timeout(timeout))
        return cls(_adapter_client(cluster.config, params), on_response=on_response)

    async def close(self) -> None:
        await self.http.aclose()

    def _count(self, verb: str, status: int) -> None:
        if self.on_response is not None:
            self.on_response(verb, status)
        if status:
            self.reach.answered()

    def _unreachable(self, verb: str, what: str, exc: httpx.HTTPError) -> ApiError:
        self._count(verb, 0)
        cause = cause_in_words(exc)
        self.reach.failed(cause)
        return ApiError(0, "Unreachable", f"{what}: {cause}")

    async def _send(self, method: str, path: str, params: Mapping[str, str] | None,
                    content: bytes | None, headers: dict[str, str]) -> httpx.Response:
        """One request; an error status or no answer raises ApiError."""
        try:
            resp = await self.http.request(method, path, params=dict(params or {}),
                                           content=content, headers=headers)
        except httpx.HTTPError as exc:
            raise self._unreachable(method, f"{method} {path}", exc) from None
        self._count(method, resp.status_code)
        if resp.status_code >= 400:
            raise _error_from(resp, resp.content)
        return resp

    async def text(self, path: str, params: Mapping[str, str] | None = None) -> str:
        """A GET whose answer is plain text (a pod's log)."""
        resp = await self._send("GET", path, params, None,
                                {"Accept": "*/*", "User-Agent": USER_AGENT})
        return resp.content.decode("utf-8", "replace")

    async def request(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                      body: Mapping[str, Any] | None = None,
                      content_type: str = "application/json") -> JsonObj:
        content = None if body is None else _encode(body)
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if content is not None:
            headers["Content-Type"] = content_type
        resp = await self._send(method, path, params, content, headers)
        try:
            out = _decode(resp.content) if resp.content else {}
        except _NOT_JSON:
            raise ApiError(0, "BadResponse", f"{method} {path}: response is not JSON") from None
        if not isinstance(out, dict):
            raise ApiError(0, "BadResponse", f"{method} {path}: response is not an object")
        return out

    async def list_page(self, path: str, params: Mapping[str, str]) -> ListPage:
        """One page of a list (``limit`` and ``continue`` are the caller's), its items not
        yet decoded."""
        resp = await self._send("GET", path, params, None,
                                {"Accept": "application/json", "User-Agent": USER_AGENT})
        return _list_page(resp.content, f"GET {path}")

    async def get(self, path: str) -> JsonObj | None:
        """The object, or None when it does not exist."""
        try:
            return await self.request("GET", path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def create(self, path: str, body: Mapping[str, Any]) -> JsonObj:
        return await self.request("POST", path, body=body)

    async def replace(self, path: str, body: Mapping[str, Any]) -> JsonObj:
        """PUT; carries body.metadata.resourceVersion, so a stale write gets a 409."""
        return await self.request("PUT", path, body=body)

    async def merge_patch(self, path: str, body: Mapping[str, Any]) -> JsonObj:
        """PATCH with a JSON merge patch (RFC 7386)."""
        return await self.request("PATCH", path, body=body,
                                  content_type="application/merge-patch+json")

    async def delete(self, path: str, *, resource_version: str = "") -> bool:
        """True when deleted, False when it was already gone. With ``resource_version``, only
        that version is deleted (a precondition: 409 Conflict when it has changed since)."""
        body = ({"apiVersion": "v1", "kind": "DeleteOptions",
                 "preconditions": {"resourceVersion": resource_version}}
                if resource_version else None)
        try:
            await self.request("DELETE", path, body=body)
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def list(self, path: str, params: Mapping[str, str] | None = None, *,
                   limit: int = 500) -> tuple[list[JsonObj], str]:
        """Every item (following ``continue``), and the list's resourceVersion."""
        items: list[JsonObj] = []
        query = dict(params or {})
        query["limit"] = str(limit)
        while True:
            page = await self.request("GET", path, params=query)
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            cont = meta.get("continue")
            if not cont:
                return items, str(meta.get("resourceVersion") or "")
            query["continue"] = cont

    async def watch(self, path: str, params: Mapping[str, str], *,
                    silence_timeout: float) -> AsyncIterator[JsonObj]:
        """Yield watch events until the server ends the stream.

        Raises ApiError(0) when the stream falls silent for ``silence_timeout`` seconds or
        breaks, ApiError(status) when the server refuses the watch.
        """
        query = dict(params)
        query["watch"] = "true"
        timeout = httpx.Timeout(30.0, read=silence_timeout)
        try:
            async with self.http.stream("GET", path, params=query, timeout=timeout,
                                        headers={"Accept": "application/json",
                                                 "User-Agent": USER_AGENT}) as resp:
                self._count("WATCH", resp.status_code)
                if resp.status_code >= 400:
                    raise _error_from(resp, await resp.aread())
                # Events end at "\n" and nowhere else: a text line splitter also breaks at
                # U+0085 and other separators, which the API sends unescaped inside values,
                # and such an event would fail the same way on every reconnect, for ever.
                # Between events this frame keeps no event, line or chunk: the CoreDNS
                # ConfigMap's events are half a megabyte, and each watch would hold its last
                # for as long as the stream stays quiet.
                partial = bytearray()
                ready: list[JsonObj] = []
                async for chunk in resp.aiter_bytes():
                    start = 0
                    while (end := chunk.find(b"\n", start)) >= 0:
                        partial += chunk[start:end]
                        start = end + 1
                        _take_event(partial, ready, path)
                        if ready:
                            # Handed out of the list: no name here refers to it meanwhile.
                            yield ready.pop()
                    partial += chunk[start:]
                    del chunk
        except httpx.ReadTimeout:
            raise ApiError(0, "Silent", f"watch {path}: no data for {silence_timeout:g}s") \
                from None
        except httpx.HTTPError as exc:
            raise self._unreachable("WATCH", f"watch {path}", exc) from None
