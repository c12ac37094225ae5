"""A fake kube-apiserver over real HTTP on loopback, for tests of code that talks to Kubernetes.

`FakeApiServer` runs an aiohttp application on its own event loop in a background thread, so
synchronous tests and asyncio tests (on their own loop) can both use it. Direct store access
(`create`, `update`, `patch`, `delete`, `get`, `list`) acts as another writer on the cluster:
it bumps the resourceVersion and feeds watches exactly as API writes do.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import builtins
import collections
import contextlib
import copy
import gzip
import json
import logging
import posixpath
import re
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import yaml
from aiohttp import web

from tests.fakeapi import crds, scale
from tests.fakeapi import managedfields as mf
from tests.fakeapi import resources as res
from tests.fakeapi import status as st
from tests.fakeapi.authz import Authz, ServiceAccountUser, attributes
from tests.fakeapi.lifecycle import collect_garbage, sweep_namespaces
from tests.fakeapi.patches import json_patch, merge_patch
from tests.fakeapi.resources import CrdSpec, ResourceType
from tests.fakeapi.selectors import matcher, parse_fields, parse_labels
from tests.fakeapi.status import ApiError
from tests.fakeapi.store import Obj, Store, Watcher, dumps
from tests.fakeapi.tls import ServingCert
from tests.waiting import until, wait_until

log = logging.getLogger(__name__)
T = TypeVar("T")

JSON = "application/json"
SERVER_VERSION: Obj = {
    "major": "1", "minor": "31", "gitVersion": "v1.31.0-fake", "gitCommit": "0" * 40,
    "gitTreeState": "clean", "buildDate": "2024-08-13T00:00:00Z", "goVersion": "go1.22.5",
    "compiler": "gc", "platform": "linux/amd64",
}
ANONYMOUS_PATHS = ("/healthz", "/livez", "/readyz", "/version")
MAX_BODY = 3 * 1024 * 1024  # the real server's request body limit
# The real server gzips, at level 1, an answer whose body passes 128 KiB when the request offers
# the token "gzip" (responsewriters: defaultGzipThresholdBytes, defaultGzipContentEncodingLevel;
# APIResponseCompression, on by default since 1.16). Watch streams are never compressed.
GZIP_THRESHOLD = 128 * 1024


@dataclass
class RequestRecord:
    """One request as the server saw it; `status` is set once the answer (or stream) starts."""

    method: str
    path: str
    query: dict[str, str]
    time: float
    watch: bool
    status: int | None = None
    # The answer's Content-Encoding ("gzip"), or None when it went out as it was.
    encoding: str | None = None
    # The answer's JSON body in bytes before any encoding; None for a stream (a watch).
    size: int | None = None


@dataclass(frozen=True)
class SentEvent:
    """One watch event as it left the server: written to the stream of the watch that
    ``request`` (its record) opened, at ``time``."""

    type: str
    kind: str
    namespace: str
    name: str
    time: float
    request: RequestRecord


RECORD: web.RequestKey[RequestRecord] = web.RequestKey("fakeapi_record", RequestRecord)
SA_USER: web.RequestKey[ServiceAccountUser] = web.RequestKey("fakeapi_sa_user",
                                                             ServiceAccountUser)


@dataclass
class _FailRule:
    remaining: int
    status: int
    method: str | None
    path_re: re.Pattern[str] | None


@dataclass
class _Hook:
    fn: Callable[[], object]
    method: str | None
    path_re: re.Pattern[str] | None


@dataclass
class _Hold:
    released: asyncio.Event
    method: str | None
    path_re: re.Pattern[str] | None


@dataclass
class _Route:
    rt: ResourceType
    namespace: str | None
    name: str | None = None
    sub: str | None = None


def _json(body: Obj, code: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    # Exactly "application/json", without a charset: some clients compare the header verbatim.
    return web.Response(body=dumps(body), status=code, headers={"Content-Type": JSON,
                                                                 **(headers or {})})


def _offers_gzip(request: web.Request) -> bool:
    """negotiateContentEncoding: a comma-separated token that is exactly "gzip" once trimmed
    (so "gzip;q=0.5" is not one)."""
    tokens = request.headers.get("Accept-Encoding", "").split(",")
    return any(token.strip() == "gzip" for token in tokens)


def _negotiated(request: web.Request, resp: web.StreamResponse) -> web.StreamResponse:
    """The answer as the real server sends it: a large JSON body gzipped if the client offers
    gzip. A streamed answer (a watch) has gone out already and is left as it is."""
    if type(resp) is not web.Response or resp.prepared or resp.content_type != JSON:
        return resp
    body = resp.body
    if isinstance(body, bytes):
        request[RECORD].size = len(body)
    if not isinstance(body, bytes) or len(body) <= GZIP_THRESHOLD or not _offers_gzip(request):
        return resp
    resp.body = gzip.compress(body, compresslevel=1, mtime=0)
    resp.headers["Content-Encoding"] = "gzip"
    resp.headers.add("Vary", "Accept-Encoding")
    request[RECORD].encoding = "gzip"
    return resp


def _target(path: str, query: dict[str, str]) -> str:
    """What `path_re` patterns are searched in: the path plus the decoded query string."""
    qs = "&".join(f"{k}={v}" for k, v in query.items())
    return f"{path}?{qs}" if qs else path


def _matches(method: str | None, path_re: re.Pattern[str] | None, request: web.Request) -> bool:
    if method is not None and method.upper() != request.method:
        return False
    return path_re is None or path_re.search(_target(request.path, dict(request.query))) is not None


def _encode_continue(rv: int, last: str) -> str:
    """The token of a page that ended at storage key `last` (relative to the list's prefix):
    the next page starts right after it (EncodeContinue, apiserver/pkg/storage)."""
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": last + "\x00"})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, str]:
    """(the list's resourceVersion, the key to start at, relative to the list's prefix), with
    DecodeContinue's checks: a version, a start key, and no path tricks in it."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
        if data.get("v") != "meta.k8s.io/v1":
            raise ValueError(f"server does not recognize this encoded version {data.get('v')}")
        rv, start = int(data["rv"]), str(data["start"])
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as e:
        raise st.bad_request(f"continue key is not valid: {e}") from e
    if rv == 0:
        raise st.bad_request("continue key is not valid: incorrect encoded start resourceVersion "
                             "(version meta.k8s.io/v1)")
    if not start:
        raise st.bad_request("continue key is not valid: encoded start key empty (version "
                             "meta.k8s.io/v1)")
    rooted = start if start.startswith("/") else "/" + start
    if posixpath.normpath(rooted) != rooted or rooted.startswith("//"):
        raise st.bad_request(f"continue key is not valid: {start}")
    return rv, rooted[1:]


def _parse_rv(value: str) -> int:
    try:
        rv = int(value)
    except ValueError:
        raise st.bad_request(f"invalid resource version: {value!r}") from None
    if rv < 0:
        raise st.bad_request(f"invalid resource version: {value!r}")
    return rv


def _parse_body(raw: bytes, content_type: str) -> Any:
    try:
        if "yaml" in content_type:
            return yaml.safe_load(raw.decode())
        return json.loads(raw)
    except (ValueError, yaml.YAMLError) as e:
        raise st.bad_request(f"couldn't get version/kind; json parse error: {e}") from e


def _negotiate_discovery(request: web.Request) -> None:
    """Refuse an Accept header that admits nothing served here, as the real server does with
    406. The aggregated form (`application/json;g=apidiscovery.k8s.io;v=v2;as=...`) is not
    implemented: offered beside plain JSON, the plain form is answered (clients tell them
    apart by the Content-Type, as they must with servers that predate it); offered alone, 406."""
    header = request.headers.get("Accept", "")
    if not header.strip():
        return
    for item in header.split(","):
        media, *params = [p.strip() for p in item.split(";")]
        names = {p.split("=", 1)[0].strip().lower() for p in params}
        if media.lower() in ("*/*", "application/*", "application/json") and \
                not names & {"g", "v", "as"}:
            return
    raise ApiError(st.status(406, "NotAcceptable",
                             "only the following media types are accepted: application/json, "
                             "application/yaml, application/vnd.kubernetes.protobuf"))


def _writer(request: web.Request, applied: Any = None) -> mf.Writer:
    """Whose write a request is: ``fieldManager``, else the User-Agent's prefix (as the real
    server names the manager); an apply patch is an Apply, forced only with ``force=true``."""
    manager = request.query.get("fieldManager") or mf.manager_from_user_agent(
        request.headers.get("User-Agent", ""))
    if applied is None:
        return mf.Writer(manager)
    return mf.Writer(manager, "Apply", force=request.query.get("force") == "true",
                     applied=applied if isinstance(applied, dict) else None)


def _list_item(rt: ResourceType, obj: Obj) -> Obj:
    """An object as a list answer carries it. A built-in type's items have no apiVersion or
    kind (the typed list's items are converted without their TypeMeta); a custom resource's
    list is unstructured, and its items keep both, as they are stored."""
    if rt.crd:
        return obj
    return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}


class FakeApiServer:
    """A fake API server on 127.0.0.1. Use as a context manager or call start()/stop()."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        tokens: Iterable[str] | None = None,
        history_size: int = 1000,
        bookmark_interval: float = 1.0,
        default_watch_timeout: float = 1800.0,
        seed_namespaces: Iterable[str] = ("default", "kube-system", "kube-public",
                                          "kube-node-lease"),
        service_cidrs: Iterable[str] = ("10.96.0.0/12",),
        tls: ServingCert | None = None,
    ) -> None:
        self.host = host
        # Served over HTTPS with this certificate, as a cluster's API server is; plain HTTP
        # when None.
        self.tls = tls
        self._port = port
        self._tokens: frozenset[str] | None = frozenset(tokens) if tokens is not None else None
        self.bookmark_interval = bookmark_interval
        self.default_watch_timeout = default_watch_timeout
        self._seed = tuple(seed_namespaces)
        self._history_size = history_size
        # One network, or an IPv4 and an IPv6 one (the first is the primary family): the
        # cluster's --service-cluster-ip-range, which decides single or dual stack.
        self._service_cidrs = tuple(service_cidrs)
        self._registry = res.Registry()
        # What /version answers; a test may describe another build (a managed platform's).
        self.version: Obj = dict(SERVER_VERSION)
        self._store: Store | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.AbstractServer | None = None
        self._unstalled: asyncio.Event | None = None
        self._log: list[RequestRecord] = []
        self._sent: list[SentEvent] = []
        self._fail_rules: list[_FailRule] = []
        self._hooks: list[_Hook] = []
        self._holds: list[_Hold] = []
        self._concurrent_edits = 0
        self._authz: Authz | None = None
        self._controllers: asyncio.Task[None] | None = None
        self.controller_passes = 0
        # What each container has written: (namespace, pod, container) -> text (pods/log).
        self._pod_logs: dict[tuple[str, str, str], str] = {}

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> FakeApiServer:
        if self._thread is not None:
            raise RuntimeError("already started")
        started: collections.deque[BaseException | None] = collections.deque()
        ready = threading.Event()

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._astart())
                started.append(None)
            except BaseException as e:
                started.append(e)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._astop())
                loop.close()

        self._thread = threading.Thread(target=main, name="fake-kube-apiserver", daemon=True)
        self._thread.start()
        ready.wait(30)
        err = started.popleft() if started else RuntimeError("fake API server did not start")
        if err is not None:
            self._thread.join(5)
            self._thread = None
            raise err
        return self

    def stop(self) -> None:
        if self._thread is None or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._thread = None

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    async def _astart(self) -> None:
        self._store = Store(history_size=self._history_size, service_cidrs=self._service_cidrs)
        self._store.on_drained = self._drop_definition
        self._registry = res.Registry()
        self._unstalled = asyncio.Event()
        self._unstalled.set()
        for ns in self._seed:
            self._ensure_namespace(ns)
        app = web.Application(middlewares=[self._middleware], client_max_size=MAX_BODY)
        app.on_response_prepare.append(self._add_warning)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        await self._listen()

    async def _listen(self) -> None:
        assert self._runner is not None and self._runner.server is not None
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._port))
        sock.listen(128)
        sock.setblocking(False)
        self._port = sock.getsockname()[1]
        loop = asyncio.get_running_loop()
        ssl_context = None
        if self.tls is not None:
            ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ssl_context.load_cert_chain(self.tls.cert, self.tls.key)
        self._listener = await loop.create_server(self._runner.server, sock=sock,
                                                  ssl=ssl_context)

    def _close_connections(self) -> None:
        assert self._store is not None and self._runner is not None
        self._store.drop_watchers()
        if self._runner.server is not None:
            for handler in self._runner.server.connections:
                if handler.transport is not None:
                    handler.transport.abort()

    async def _astop(self) -> None:
        if self._controllers is not None:
            self._controllers.cancel()
            self._controllers = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self._close_connections()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self._port}"

    def write_kubeconfig(
        self,
        path: str | Path,
        *,
        token: str | None = None,
        token_file: str | Path | None = None,
        namespace: str = "default",
    ) -> Path:
        """Write a kubeconfig (cluster, user, context; current-context set) for this server."""
        user: Obj = {}
        if token is not None:
            user["token"] = token
        if token_file is not None:
            user["tokenFile"] = str(token_file)
        cluster: Obj = {"server": self.url}
        if self.tls is not None:
            cluster["certificate-authority"] = str(self.tls.cert)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": cluster}],
            "users": [{"name": "fake-user", "user": user}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake-user",
                                                      "namespace": namespace}}],
            "current-context": "fake",
            "preferences": {},
        }
        out = Path(path)
        out.write_text(yaml.safe_dump(config, sort_keys=False))
        return out

    def set_tokens(self, tokens: Iterable[str] | None) -> None:
        """Accept exactly these bearer tokens from now on (None: no authentication)."""
        self._tokens = frozenset(tokens) if tokens is not None else None

    # --- running things on the server's loop -----------------------------------------------

    def _call(self, fn: Callable[[], T]) -> T:
        loop = self._loop
        if loop is None or self._thread is None:
            raise RuntimeError("fake API server is not running")
        if threading.current_thread() is self._thread:
            return fn()

        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), loop).result(30)

    @property
    def store(self) -> Store:
        assert self._store is not None, "fake API server is not running"
        return self._store

    # --- direct store access (another writer on the cluster) ----------------------------------

    def next_second(self) -> None:
        """Objects created from now on are a second younger than every earlier one
        (creationTimestamp has whole seconds): for tests of which object is older, with no
        wait on the machine's clock."""
        assert self._store is not None
        self._store.clock.next_second()

    def create(self, obj: Obj, *, manager: str | None = None) -> Obj:
        """Create `obj` (a dict with apiVersion/kind) as-is, status included; missing namespaces
        are created first. Returns the stored object. With `manager`, it is that field
        manager's write (managedFields recorded as the real server does)."""
        rt = self._type_of(obj)
        writer = mf.Writer(manager) if manager else None

        def run() -> Obj:
            ns = obj.get("metadata", {}).get("namespace") or "default"
            if rt.namespaced:
                self._ensure_namespace(ns)
            return self.store.create(rt, ns if rt.namespaced else None, obj, from_api=False,
                                     writer=writer)

        return self._call(run)

    def _ensure_namespace(self, ns: str) -> None:
        nsrt = res.resolve("namespaces")
        if self.store.find(nsrt, None, ns) is None:
            self.store.create(nsrt, None, {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": ns}}, from_api=False)

    def update(self, obj: Obj, *, manager: str | None = None) -> Obj:
        """Replace the object unconditionally (its resourceVersion is ignored), status included.
        With `manager`, an Update by that field manager (managedFields as the real server
        keeps them); without, managedFields stay as the body gives them."""
        rt = self._type_of(obj)
        md = obj.get("metadata", {})
        writer = mf.Writer(manager) if manager else None
        return self._call(lambda: self.store.update(
            rt, md.get("namespace"), md.get("name", ""), obj, from_api=False, check_rv=False,
            writer=writer)[0])

    def patch(self, kind: str, namespace: str | None, name: str, patch: Obj, *,
              manager: str | None = None) -> Obj:
        """Apply a JSON merge patch as another writer would (`manager`: as for update)."""
        rt = self._registry.resolve(kind)
        writer = mf.Writer(manager) if manager else None

        def run() -> Obj:
            cur = self.store.get(rt, namespace, name)
            new = merge_patch(cur, patch)
            return self.store.update(rt, namespace, name, new, from_api=False, check_rv=False,
                                     writer=writer)[0]

        return self._call(run)

    def delete(self, kind: str, namespace: str | None, name: str) -> Obj:
        """Delete (or, with finalizers, start deleting) an object; returns its last state."""
        rt = self._registry.resolve(kind)
        return self._call(lambda: self.store.delete(rt, namespace, name)[0])

    # --- service accounts, RBAC, the controller-manager's collectors (see authz, lifecycle) --

    @property
    def authz(self) -> Authz:
        if self._authz is None:
            # The server's clock: a token's leeway counts from the deletionTimestamp it gave.
            clock = self.store.clock
            self._authz = Authz(self.store.find,
                                lambda rt: builtins.list(self.store.snapshot(rt).values()),
                                clock=lambda: float(clock.now()))
        return self._authz

    def service_account_token(self, namespace: str, name: str) -> str:
        """A bound token for an existing ServiceAccount: requests with it are authenticated as
        claims.go does and authorized by the RBAC objects in the store."""
        return self._call(lambda: self.authz.issue(namespace, name))

    def start_controllers(self, interval: float = 0.05) -> None:
        """Run the garbage collector and the namespace controller every ``interval`` seconds
        (tests/fakeapi/lifecycle.py), asynchronously as kube-controller-manager does."""
        async def run() -> None:
            while True:
                collect_garbage(self.store, self._registry)
                sweep_namespaces(self.store, self._registry)
                self.controller_passes += 1
                await asyncio.sleep(interval)

        def begin() -> None:
            if self._controllers is None:
                self._controllers = asyncio.get_running_loop().create_task(run())
        self._call(begin)

    def finalize_namespace(self, name: str) -> None:
        """What the namespace controller does last: delete what is left in a Terminating
        namespace, clear its spec.finalizers, and so let it go."""
        def run() -> None:
            for rt in self._registry.storages():
                if rt.namespaced:
                    for (ns, obj_name) in list(self.store.snapshot(rt)):
                        if ns == name:
                            with contextlib.suppress(st.ApiError):
                                self.store.delete(rt, ns, obj_name)
            nsrt = res.resolve("namespaces")
            obj = self.store.get(nsrt, None, name)
            obj["spec"]["finalizers"] = []
            self.store.update(nsrt, None, name, obj, from_api=False, check_rv=False)
            if self.store.find(nsrt, None, name) is not None:
                self.store.delete(nsrt, None, name)
        self._call(run)

    # --- custom resource definitions ---------------------------------------------------------

    def install(self, *specs: CrdSpec) -> None:
        """Apply definitions, as `kubectl apply -f crds.yaml` would: their kinds are served
        (and discoverable) at once. Re-applying a changed definition keeps its objects and
        ends the watches open on it, as the real server rebuilds the storage then."""
        def run() -> None:
            for spec in specs:
                old, new = self._registry.install(spec, str(uuid.uuid4()))
                for rt in new.types:
                    self.store.add_storage(rt)
                if old is not None and old.spec != spec:
                    self.store.end_watchers(spec.name)
                    self.store.restore_version(self._registry.resolve(spec.name))

        self._call(run)

    def install_crd(self, group: str, versions: str | Iterable[str], plural: str, kind: str,
                    *, namespaced: bool = True, served: Iterable[str] | None = None,
                    storage: str | None = None, status: bool = True,
                    short_names: Iterable[str] = (), categories: Iterable[str] = (),
                    deprecated: Mapping[str, str] | None = None) -> CrdSpec:
        """Define and install one custom resource (see `resources.crd` for the arguments)."""
        spec = res.crd(group, versions, plural, kind, namespaced=namespaced, served=served,
                       storage=storage, status=status, short_names=short_names,
                       categories=categories, deprecated=deprecated)
        self.install(spec)
        return spec

    def uninstall_crd(self, group: str, plural: str) -> bool:
        """Delete a definition as the real server does: it turns Terminating (discovery shows
        only delete/get/list/watch verbs, creates are 405), every object of it is deleted
        (watchers see each DELETED), then the type is gone: its watches end, requests to it
        answer 404. Objects held by finalizers keep it Terminating until they are cleared;
        returns whether it is gone already."""
        name = f"{plural}.{group}"

        def run() -> bool:
            inst = self._registry.installed(name)
            if inst is None:
                raise KeyError(f"{name} is not installed")
            inst.terminating = True
            self.store.terminating.add(name)
            rt = self._registry.resolve(name)
            for ns, obj_name in self.store.keys(rt):
                with contextlib.suppress(ApiError):
                    self.store.delete(rt, ns or None, obj_name)
            if self._registry.installed(name) is not None and not self.store.keys(rt):
                self._drop_definition(name)
            return self._registry.installed(name) is None

        return self._call(run)

    def _drop_definition(self, name: str) -> None:
        self._registry.remove(name)
        self.store.drop_storage(name)

    def installed_crds(self) -> builtins.list[str]:
        """Names (`plural.group`) of the definitions installed now, Terminating ones included."""
        return self._call(lambda: sorted(self._registry.crds))

    def install_gateway_api(self, release: str = "1.4", channel: str = "standard") -> None:
        """The Gateway API definitions of a release ("1.2" … "1.6") and channel ("standard"
        or "experimental"), with the versions each really serves (see crds.py)."""
        self.install(*crds.gateway_api(release, channel))

    def uninstall_gateway_api(self) -> None:
        for name in self.installed_crds():
            if name.endswith("." + crds.GATEWAY_GROUP):
                plural, group = name.split(".", 1)
                self.uninstall_crd(group, plural)

    def set_pod_log(self, namespace: str, pod: str, container: str, text: str) -> None:
        """What ``GET .../pods/<pod>/log?container=<container>`` answers once the container
        has started (the kubelet's part: the fake has none)."""
        self._pod_logs[(namespace, pod, container)] = text

    def get(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        rt = self._registry.resolve(kind)
        return self._call(lambda: self.store.find(rt, namespace, name))

    def list(self, kind: str, namespace: str | None = None,
             label_selector: str | None = None) -> list[Obj]:
        """Objects of a type (all namespaces when None), sorted by namespace and name."""
        rt = self._registry.resolve(kind)
        sel = parse_labels(label_selector)

        def run() -> list[Obj]:
            snap = self.store.snapshot(rt)
            return [copy.deepcopy(o) for k, o in sorted(snap.items())
                    if (namespace is None or k[0] == namespace) and matcher(sel, ())(o)]

        return self._call(run)

    @property
    def resource_version(self) -> str:
        return str(self._call(lambda: self.store.rv))

    def changes(self, kind: str, namespace: str | None = None,
                name: str | None = None) -> builtins.list[tuple[str, Obj]]:
        """Retained history of a type, oldest first, as (ADDED|MODIFIED|DELETED, object): what a
        watcher from the oldest retained version would see (history_size bounds it)."""
        rt = self._registry.resolve(kind)

        def run() -> builtins.list[tuple[str, Obj]]:
            return [(ev.type, copy.deepcopy(ev.obj)) for ev in self.store.history(rt)
                    if (namespace is None or ev.obj["metadata"].get("namespace") == namespace)
                    and (name is None or ev.obj["metadata"]["name"] == name)]

        return self._call(run)

    @property
    def open_watches(self) -> int:
        return self._call(lambda: len(self.store.watchers))

    def _type_of(self, obj: Obj) -> ResourceType:
        rt = self._registry.by_api_version_kind(str(obj.get("apiVersion")), str(obj.get("kind")))
        if rt is None:
            raise KeyError(f"unserved apiVersion/kind {obj.get('apiVersion')}/{obj.get('kind')}")
        return rt

    def wait_for(self, predicate: Callable[[], object], timeout: float = 10.0,
                 interval: float = 0.02) -> None:
        """Poll `predicate` until truthy (tests.waiting: WaitTimeout after `timeout` s)."""
        wait_until(predicate, timeout, "a fake API condition", interval)

    async def async_wait_for(
        self,
        predicate: Callable[[], object],
        timeout: float = 10.0,  # noqa: ASYNC109 - mirrors wait_for; this polls, it never awaits I/O
        interval: float = 0.02,
    ) -> None:
        """As wait_for, without blocking the caller's event loop."""
        await until(predicate, timeout, "a fake API condition", interval)

    # --- request log -------------------------------------------------------------------------

    def requests(self, method: str | None = None, path_re: str | None = None,
                 watch: bool | None = None, since: float | None = None,
                 ) -> builtins.list[RequestRecord]:
        """Recorded requests, oldest first; `path_re` is searched in path plus query string."""
        pattern = re.compile(path_re) if path_re is not None else None
        out = []
        for r in list(self._log):
            if method is not None and r.method != method.upper():
                continue
            if watch is not None and r.watch != watch:
                continue
            if since is not None and r.time < since:
                continue
            if pattern is not None and not pattern.search(_target(r.path, r.query)):
                continue
            out.append(r)
        return out

    def count(self, method: str | None = None, path_re: str | None = None,
              watch: bool | None = None, since: float | None = None) -> int:
        return len(self.requests(method, path_re, watch, since))

    def clear_requests(self) -> None:
        """Forgets the requests recorded, and the watch events sent."""
        self._log.clear()
        self._sent.clear()

    def sent_events(self, kind: str | None = None, name: str | None = None
                    ) -> builtins.list[SentEvent]:
        """Watch events (not bookmarks) written to the streams since the log was last cleared,
        oldest first: when a watcher was told of a change, as the request log tells when a
        client acted."""
        return [e for e in list(self._sent)
                if (kind is None or e.kind == kind) and (name is None or e.name == name)]

    # --- fault injection ---------------------------------------------------------------------

    def drop_watches(self) -> None:
        """Abort every open watch connection mid-stream (no terminating chunk)."""
        self._call(self.store.drop_watchers)

    def stall_watches(self) -> None:
        """Keep watch connections open but send nothing (no events, no bookmarks, no timeout
        close) until unstall_watches(); events are delivered then."""
        assert self._unstalled is not None
        self._call(self._unstalled.clear)

    def unstall_watches(self) -> None:
        assert self._unstalled is not None
        self._call(self._unstalled.set)

    def fail_requests(self, n: int, status: int = 500, method: str | None = None,
                      path_re: str | None = None) -> None:
        """Answer the next `n` matching requests with `status` and a Status body."""
        rule = _FailRule(n, status, method, re.compile(path_re) if path_re else None)
        self._call(lambda: self._fail_rules.append(rule))

    def compact(self) -> None:
        """Forget all history: older resourceVersions now give 410 on watch and on continue."""
        self._call(self.store.compact)

    def go_down(self) -> None:
        """Stop listening and cut every connection: clients get connection refused."""

        def run() -> None:
            if self._listener is not None:
                self._listener.close()
                self._listener = None
            self._close_connections()

        self._call(run)

    def come_up(self) -> None:
        """Listen again on the same port."""
        assert self._loop is not None
        if self._listener is None:
            asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(30)

    def hold_requests(self, method: str | None = None,
                      path_re: str | None = None) -> Callable[[], None]:
        """Keep every matching request waiting, unanswered, while the server goes on with the
        others, until the function returned is called: then they are handled as they come."""
        pattern = re.compile(path_re) if path_re else None

        def add() -> _Hold:
            hold = _Hold(asyncio.Event(), method, pattern)
            self._holds.append(hold)
            return hold

        hold = self._call(add)

        def release() -> None:
            def run() -> None:
                hold.released.set()
                if hold in self._holds:
                    self._holds.remove(hold)

            self._call(run)

        return release

    def before_next_request(self, fn: Callable[[], object], method: str | None = None,
                            path_re: str | None = None) -> None:
        """Run `fn` (on the server's thread; it may use the direct store methods) just before
        the next matching request is handled: the hook for a concurrent edit."""
        hook = _Hook(fn, method, re.compile(path_re) if path_re else None)
        self._call(lambda: self._hooks.append(hook))

    def touch(self, kind: str, namespace: str | None, name: str) -> Obj:
        """Change an object trivially (an annotation), as an unrelated writer would: a new
        resourceVersion and a MODIFIED event. A write that changes nothing does neither."""
        rt = self._registry.resolve(kind)

        def run() -> Obj:
            obj = self.store.get(rt, namespace, name)
            self._concurrent_edits += 1
            annotations = obj["metadata"].get("annotations") or {}
            annotations["fakeapi.test/touched"] = str(self._concurrent_edits)
            obj["metadata"]["annotations"] = annotations
            return self.store.update(rt, namespace, name, obj, from_api=False,
                                     check_rv=False)[0]

        return self._call(run)

    def conflict_next_put(self, path_re: str | None = None) -> None:
        """Make the next matching PUT lose a race: another writer touches the object just
        before the PUT is applied, so a PUT carrying a resourceVersion gets 409."""

        def edit_target() -> None:
            req = self._current
            assert req is not None
            route = self._route(req.path)
            if route is not None and route.name is not None and \
                    self.store.find(route.rt, route.namespace, route.name) is not None:
                self.touch(route.rt.qualified, route.namespace, route.name)

        self.before_next_request(edit_target, "PUT", path_re)

    _current: web.Request | None = None

    # --- HTTP ----------------------------------------------------------------------------------

    @web.middleware
    async def _middleware(
        self, request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        q = request.query
        record = RequestRecord(request.method, request.path, dict(q), time.time(),
                               q.get("watch") in ("1", "true"))
        self._log.append(record)
        request[RECORD] = record
        try:
            resp = await self._guarded(request, handler)
        except ApiError as e:
            resp = _json(e.body, e.code, e.headers)
        except web.HTTPException as e:
            record.status = e.status
            raise
        except Exception as e:
            log.exception("fake API server failed on %s %s", request.method, request.path_qs)
            resp = _json(st.status(500, "InternalError", f"Internal error occurred: {e}"), 500)
        if record.status is None:
            record.status = resp.status
        return _negotiated(request, resp)

    async def _guarded(
        self, request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        for hold in list(self._holds):
            if _matches(hold.method, hold.path_re, request):
                await hold.released.wait()
        for rule in self._fail_rules:
            if rule.remaining > 0 and _matches(rule.method, rule.path_re, request):
                rule.remaining -= 1
                raise st.injected(rule.status)
        self._fail_rules = [r for r in self._fail_rules if r.remaining > 0]
        self._authenticate(request)
        for hook in self._hooks:
            if _matches(hook.method, hook.path_re, request):
                self._hooks.remove(hook)
                self._current = request
                try:
                    hook.fn()
                finally:
                    self._current = None
                break
        return await handler(request)

    def _authenticate(self, request: web.Request) -> None:
        header = request.headers.get("Authorization", "")
        scheme, _, bearer = header.partition(" ")
        if scheme.lower() == "bearer" and self.authz.knows(bearer.strip()):
            # A service account's token: checked as the real server does, then RBAC applies.
            request[SA_USER] = self.authz.authenticate(bearer.strip())
            return
        if self._tokens is None:
            return
        if not header and request.path in ANONYMOUS_PATHS:
            return
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or token.strip() not in self._tokens:
            raise st.unauthorized()

    def _route(self, path: str) -> _Route | None:
        parts = [p for p in path.split("/") if p]
        if len(parts) >= 2 and parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        ns: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
            ns, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            return None
        rt = self._registry.by_path(group, version, rest[0])
        if rt is None or (ns is not None and not rt.namespaced):
            return None
        name = rest[1] if len(rest) >= 2 else None
        sub = rest[2] if len(rest) == 3 else None
        if sub is not None and not ((sub == "status" and rt.has_status) or (
                sub == "scale" and (rt.group, rt.plural) in scale.SCALABLE) or (
                sub == "log" and (rt.group, rt.plural) == ("", "pods"))):
            return None
        if name is not None and rt.namespaced and ns is None:
            return None
        return _Route(rt, ns, name, sub)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        special = self._discovery(request, path)
        if special is not None:
            if request.method != "GET":
                raise st.method_not_allowed()
            return special
        route = self._route(path)
        if route is None:
            raise st.unknown_path()
        user = request.get(SA_USER)
        if user is not None:
            self.authz.authorize(user, attributes(
                request.method, dict(request.query), route.rt, namespace=route.namespace,
                name=route.name, subresource=route.sub))
        m = request.method
        if route.name is None:
            if m == "GET":
                if request.query.get("watch") in ("1", "true"):
                    return await self._watch(request, route)
                return self._list(request, route)
            if m == "POST" and (route.namespace is not None or not route.rt.namespaced):
                return await self._create(request, route)
            if m == "DELETE" and (route.namespace is not None or not route.rt.namespaced):
                return self._delete_collection(request, route)
            raise st.method_not_allowed()
        if route.sub == "scale":
            return await self._scale(request, route)
        if route.sub == "log":
            if m != "GET":
                raise st.method_not_allowed()
            return self._pod_log(request, route)
        if m == "GET":
            return _json(self.store.get(route.rt, route.namespace, route.name))
        if m == "PUT":
            return await self._replace(request, route)
        if m == "PATCH":
            return await self._patch(request, route)
        if m == "DELETE" and route.sub is None:
            return await self._delete(request, route)
        raise st.method_not_allowed()

    def _discovery(self, request: web.Request, path: str) -> web.StreamResponse | None:
        if path in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok", content_type="text/plain")
        if path == "/version":
            return _json(self.version)
        groups = self._registry.groups()
        parts = path.strip("/").split("/")
        gv: tuple[str, str] | None = None
        if len(parts) == 2 and parts[0] == "api":
            gv = ("", parts[1])
        elif len(parts) == 3 and parts[0] == "apis":
            gv = (parts[1], parts[2])
        known = path in ("/api", "/apis") or (
            len(parts) == 2 and parts[0] == "apis" and parts[1] in groups) or (
            gv is not None and gv[1] in groups.get(gv[0], []))
        if not known:
            return None
        _negotiate_discovery(request)
        if path == "/api":
            return _json({"kind": "APIVersions", "versions": groups[""],
                          "serverAddressByClientCIDRs": [
                              {"clientCIDR": "0.0.0.0/0",
                               "serverAddress": f"{self.host}:{self._port}"}]})
        if path == "/apis":
            return _json({"kind": "APIGroupList", "apiVersion": "v1",
                          "groups": [self._group(g, v) for g, v in groups.items() if g]})
        if gv is None:
            return _json({"kind": "APIGroup", "apiVersion": "v1",
                          **self._group(parts[1], groups[parts[1]])})
        items = []
        for rt in self._registry.types():
            if (rt.group, rt.version) != gv:
                continue
            if rt.crd:
                # The order the apiextensions server lists them in; fewer while terminating.
                verbs = ["delete", "deletecollection", "get", "list", "watch"] \
                    if self._registry.terminating(rt) else \
                    ["delete", "deletecollection", "get", "list", "patch", "create", "update",
                     "watch"]
            else:
                verbs = ["create", "delete", "deletecollection", "get", "list", "patch",
                         "update", "watch"]
            entry: Obj = {"name": rt.plural, "singularName": rt.singular,
                          "namespaced": rt.namespaced, "kind": rt.kind, "verbs": verbs}
            if rt.short_names:
                entry["shortNames"] = list(rt.short_names)
            if rt.categories:
                entry["categories"] = list(rt.categories)
            if rt.crd:
                entry["storageVersionHash"] = res.storage_version_hash(
                    rt.group, rt.storage_version, rt.kind)
            items.append(entry)
            if rt.has_status:
                items.append({"name": f"{rt.plural}/status", "singularName": "",
                              "namespaced": rt.namespaced, "kind": rt.kind,
                              "verbs": ["get", "patch", "update"]})
        return _json({"kind": "APIResourceList", "apiVersion": "v1",
                      "groupVersion": f"{gv[0]}/{gv[1]}" if gv[0] else gv[1],
                      "resources": items})

    @staticmethod
    def _group(name: str, versions: builtins.list[str]) -> Obj:
        vs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
        return {"name": name, "versions": vs, "preferredVersion": vs[0]}

    async def _add_warning(self, request: web.Request, response: web.StreamResponse) -> None:
        route = self._route(request.path.rstrip("/") or "/")
        if route is not None and route.rt.warning:
            # As the apiserver flags a deprecated custom resource version, on every answer.
            response.headers["Warning"] = f'299 - "{route.rt.warning}"'

    def _selection(self, request: web.Request, rt: ResourceType) -> Callable[[Obj], bool]:
        labels = parse_labels(request.query.get("labelSelector"))
        fields = parse_fields(request.query.get("fieldSelector"), rt.kind)
        return matcher(labels, fields)

    def _list(self, request: web.Request, route: _Route) -> web.StreamResponse:
        q = request.query
        rt = route.rt
        match = self._selection(request, rt)
        selective = bool(q.get("labelSelector") or q.get("fieldSelector"))
        limit = 0
        if q.get("limit"):
            try:
                limit = max(0, int(q["limit"]))
            except ValueError:
                raise st.bad_request(f"invalid limit: {q['limit']!r}") from None
        token = q.get("continue")
        start = ""
        rv_param = q.get("resourceVersion")
        rv_match = q.get("resourceVersionMatch")
        if token:
            if rv_param:
                raise st.bad_request("specifying resource version is not allowed when using "
                                     "continue")
            at, start = _decode_continue(token)
            self.store.check_continue(rt, at)
        elif rv_param and rv_param != "0" and rv_match == "Exact":
            at = _parse_rv(rv_param)
        else:
            at = self.store.rv
            if rv_param and rv_param != "0" and _parse_rv(rv_param) > at:
                raise ApiError(st.status(
                    504, "Timeout", f"Too large resource version: {rv_param}, current: {at}",
                    {"causes": [{"reason": "ResourceVersionTooLarge",
                                 "message": "Too large resource version"}],
                     "retryAfterSeconds": 1}))
        # The list's prefix under the resource's: a namespace's objects, or all of them.
        prefix = f"{route.namespace}/" if route.namespace is not None and rt.namespaced else ""
        page = self.store.page(rt, at, prefix=prefix, start=prefix + start if start else "",
                               limit=limit, match=match)
        meta: Obj = {"resourceVersion": str(at)}
        if page.last is not None:
            meta["continue"] = _encode_continue(at, page.last[len(prefix):])
            if not selective:
                meta["remainingItemCount"] = page.rest
        return _json({"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": meta,
                      "items": [_list_item(rt, obj) for obj in page.items]})

    def _bookmark(self, rt: ResourceType, rv: int, initial_end: bool = False) -> Obj:
        md: Obj = {"resourceVersion": str(rv)}
        if initial_end:
            md["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": md}

    async def _watch(self, request: web.Request, route: _Route) -> web.StreamResponse:
        q = request.query
        rt = route.rt
        match = self._selection(request, rt)
        bookmarks = q.get("allowWatchBookmarks") in ("1", "true")
        initial = q.get("sendInitialEvents") in ("1", "true")
        rv_param = q.get("resourceVersion")
        try:
            timeout = float(q["timeoutSeconds"]) if q.get("timeoutSeconds") else \
                self.default_watch_timeout
        except ValueError:
            raise st.bad_request(f"invalid timeoutSeconds: {q['timeoutSeconds']!r}") from None
        if initial and not bookmarks:
            raise st.invalid(rt, "", [("allowWatchBookmarks", "FieldValueRequired",
                                       "Required value: allowWatchBookmarks must be true if "
                                       "sendInitialEvents = true")])
        since = None if initial or rv_param in (None, "", "0") else _parse_rv(rv_param or "0")
        resp = web.StreamResponse(status=200, headers={"Content-Type": JSON})
        resp.enable_chunked_encoding()
        try:
            backlog, watcher = self.store.open_watch(rt, route.namespace, match, since)
        except ApiError as e:
            # As the watch cache does: a successful stream carrying one ERROR event.
            await resp.prepare(request)
            request[RECORD].status = 200
            await resp.write(dumps({"type": "ERROR", "object": e.body}) + b"\n")
            await resp.write_eof()
            return resp
        pending: collections.deque[tuple[str, Obj]] = collections.deque(backlog)
        if initial:
            pending.append(("BOOKMARK", self._bookmark(rt, self.store.rv, initial_end=True)))
        try:
            await resp.prepare(request)
            request[RECORD].status = 200
            await self._stream(request, resp, watcher, pending=pending, seconds=timeout,
                               bookmarks=bookmarks)
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            self.store.close_watch(watcher)
        return resp

    async def _stream(self, request: web.Request, resp: web.StreamResponse, w: Watcher, *,
                      pending: collections.deque[tuple[str, Obj]], seconds: float,
                      bookmarks: bool) -> None:
        assert self._unstalled is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        next_bookmark = loop.time() + self.bookmark_interval
        while True:
            transport = request.transport
            if w.dropped or transport is None or transport.is_closing():
                if transport is not None:
                    transport.abort()
                return
            if not self._unstalled.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._unstalled.wait(), 0.1)
                # The stall also holds back bookmarks that fell due meanwhile.
                next_bookmark = max(next_bookmark, loop.time() + self.bookmark_interval)
                continue
            if pending:
                type_, obj = pending.popleft()
                await resp.write(dumps({"type": type_, "object": obj}) + b"\n")
                if type_ != "BOOKMARK":
                    md = obj.get("metadata") or {}
                    self._sent.append(SentEvent(type_, str(obj.get("kind") or w.rt.kind),
                                                str(md.get("namespace") or ""),
                                                str(md.get("name") or ""), time.time(),
                                                request[RECORD]))
                continue
            if w.ended and w.queue.empty():
                # The storage went away: what was queued is sent, then the stream ends cleanly.
                await resp.write_eof()
                return
            now = loop.time()
            if now >= deadline:
                await resp.write_eof()
                return
            if bookmarks and now >= next_bookmark and w.queue.empty():
                # Every event up to the store's version has reached this watcher's queue
                # synchronously, and the queue is empty: this version is safe to announce.
                pending.append(("BOOKMARK", self._bookmark(w.rt, self.store.rv)))
                next_bookmark = now + self.bookmark_interval
                continue
            if not w.queue.empty():
                # Taken without waiting: on Python 3.11 a wait_for() whose timeout is already
                # over cancels queue.get() before it runs, so an event queued just as a
                # bookmark fell due was retried that way, and never sent, for ever.
                item = w.queue.get_nowait()
            else:
                wake = min(deadline, next_bookmark) if bookmarks else deadline
                try:
                    item = await asyncio.wait_for(w.queue.get(), min(wake - now, 0.25))
                except TimeoutError:
                    continue
            if item is None:
                continue  # dropped or ended: handled above
            pending.append(item)

    async def _read_body(self, request: web.Request, patch: bool = False) -> Any:
        ctype = request.content_type or JSON
        if not patch and ctype not in (JSON, "application/yaml", "application/octet-stream"):
            raise ApiError(st.status(
                415, "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f"include: application/json, application/yaml, "
                f"application/vnd.kubernetes.protobuf (got {ctype})"))
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise ApiError(st.status(413, "RequestEntityTooLarge",
                                     f"Request entity too large: limit is {MAX_BODY}")) from None
        return _parse_body(raw, ctype)

    @staticmethod
    def _dry_run(request: web.Request) -> bool:
        value = request.query.get("dryRun")
        if value not in (None, "All"):
            raise st.bad_request(f"Invalid dry run value: {value!r} (only All is supported)")
        return value == "All"

    async def _create(self, request: web.Request, route: _Route) -> web.StreamResponse:
        body = await self._read_body(request)
        obj = self.store.create(route.rt, route.namespace, body, dry_run=self._dry_run(request),
                                writer=_writer(request))
        return _json(obj, 201)

    async def _replace(self, request: web.Request, route: _Route) -> web.StreamResponse:
        assert route.name is not None
        body = await self._read_body(request)
        obj, created = self.store.update(route.rt, route.namespace, route.name, body,
                                         subresource=route.sub, dry_run=self._dry_run(request),
                                         writer=_writer(request))
        return _json(obj, 201 if created else 200)

    async def _patch(self, request: web.Request, route: _Route) -> web.StreamResponse:
        assert route.name is not None
        ctype = request.content_type
        patch = await self._read_body(request, patch=True)
        dry = self._dry_run(request)
        rt = route.rt
        writer = _writer(request)
        if ctype == "application/apply-patch+yaml":
            if not request.query.get("fieldManager"):
                raise st.bad_request("PATCH " + request.path + ": fieldManager is required "
                                     "for apply requests")
            if not isinstance(patch, dict):
                raise st.bad_request("apply patch must be an object")
            writer = _writer(request, patch)
            cur = self.store.find(rt, route.namespace, route.name)
            if cur is None:
                body = copy.deepcopy(patch)
                body.setdefault("metadata", {})["name"] = route.name
                return _json(self.store.create(rt, route.namespace, body, dry_run=dry,
                                               writer=writer), 201)
            new = merge_patch(cur, patch)
        elif ctype in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            if not isinstance(patch, dict):
                raise st.bad_request("json: cannot unmarshal non-object into a merge patch")
            new = merge_patch(self.store.get(rt, route.namespace, route.name), patch)
        elif ctype == "application/json-patch+json":
            new = json_patch(self.store.get(rt, route.namespace, route.name), patch)
        else:
            raise ApiError(st.status(
                415, "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f"include: application/json-patch+json, application/merge-patch+json, "
                f"application/apply-patch+yaml, application/strategic-merge-patch+json "
                f"(got {ctype})"))
        if not isinstance(new, dict):
            raise ApiError(st.status(422, "Invalid", "the patch produced a non-object"))
        obj, _ = self.store.update(rt, route.namespace, route.name, new, subresource=route.sub,
                                   dry_run=dry, writer=writer)
        return _json(obj)

    def _pod_log(self, request: web.Request, route: _Route) -> web.StreamResponse:
        """A container's log, as kube-apiserver's pod LogLocation and then the kubelet answer:
        the container named (or the pod's only one), on a scheduled pod, once it has started
        (running or terminated); text/plain."""
        assert route.name is not None and route.namespace is not None
        pod = self.store.get(route.rt, route.namespace, route.name)
        names = [str(c.get("name")) for c in (pod.get("spec") or {}).get("containers") or []]
        container = request.query.get("container", "")
        if not container:
            if len(names) != 1:
                raise st.bad_request(f"a container name must be specified for pod "
                                     f"{route.name}, choose one of: [{' '.join(names)}]")
            container = names[0]
        if container not in names:
            raise st.bad_request(f"container {container} is not valid for pod {route.name}")
        if not (pod.get("spec") or {}).get("nodeName"):
            raise st.bad_request(f"pod {route.name} does not have a host assigned")
        statuses = {str(c.get("name")): c.get("state") or {} for c in
                    (pod.get("status") or {}).get("containerStatuses") or []}
        state = statuses.get(container) or {"waiting": {"reason": "ContainerCreating"}}
        if "running" not in state and "terminated" not in state:
            reason = (state.get("waiting") or {}).get("reason") or "ContainerCreating"
            raise st.bad_request(f'container "{container}" in pod "{route.name}" is waiting '
                                 f"to start: {reason}")
        text = self._pod_logs.get((route.namespace, route.name, container), "")
        return web.Response(text=text, content_type="text/plain")

    async def _scale(self, request: web.Request, route: _Route) -> web.StreamResponse:
        """GET, PUT and PATCH (merge or JSON patch) of the Scale view (tests/fakeapi/scale)."""
        assert route.name is not None
        current = self.store.get(route.rt, route.namespace, route.name)
        if request.method == "GET":
            return _json(scale.scale_of(current))
        if request.method not in ("PUT", "PATCH"):
            raise st.method_not_allowed()
        body = await self._read_body(request, patch=request.method == "PATCH")
        view = scale.scale_of(current)
        if request.method == "PUT":
            wanted = body
        elif request.content_type == "application/json-patch+json":
            wanted = json_patch(view, body)
        else:
            wanted = merge_patch(view, body)
        try:
            new = scale.with_scale(current, wanted if isinstance(wanted, dict) else {})
        except ValueError as exc:
            raise ApiError(st.status(422, "Invalid", f"Scale.autoscaling {route.name!r} is "
                                                     f"invalid: {exc}")) from None
        obj, _ = self.store.update(route.rt, route.namespace, route.name, new,
                                   dry_run=self._dry_run(request))
        return _json(scale.scale_of(obj))

    async def _delete(self, request: web.Request, route: _Route) -> web.StreamResponse:
        assert route.name is not None
        pre_rv = pre_uid = None
        if request.can_read_body:
            opts = _parse_body(await request.read(), JSON)
            if isinstance(opts, dict):
                pre = opts.get("preconditions") or {}
                pre_rv, pre_uid = pre.get("resourceVersion"), pre.get("uid")
        rt = route.rt
        obj, gone = self.store.delete(rt, route.namespace, route.name, precondition_rv=pre_rv,
                                      precondition_uid=pre_uid, dry_run=self._dry_run(request))
        if not gone:
            # A Terminating namespace is answered 200 with the object, like the real API.
            return _json(obj, 200 if rt.plural == "namespaces" else 202)
        if rt.delete_returns_object:
            return _json(obj)
        details: Obj = {"name": route.name}
        if rt.group:
            details["group"] = rt.group
        details.update({"kind": rt.plural, "uid": obj["metadata"]["uid"]})
        return _json(st.success(details))

    def _delete_collection(self, request: web.Request, route: _Route) -> web.StreamResponse:
        rt = route.rt
        match = self._selection(request, rt)
        dry = self._dry_run(request)
        deleted = []
        for k, obj in sorted(self.store.snapshot(rt).items()):
            if (route.namespace is None or k[0] == route.namespace) and match(obj):
                deleted.append(_list_item(rt, self.store.delete(rt, k[0] or None, k[1],
                                                             dry_run=dry)[0]))
        return _json({"kind": f"{rt.kind}List", "apiVersion": rt.api_version,
                      "metadata": {"resourceVersion": str(self.store.rv)}, "items": deleted})
