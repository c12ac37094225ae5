"""Only what the controller reads of Gateway API objects and Namespaces, for its caches.

Same idea as for Ingresses: rules, filters, backends, TLS settings, addresses and managedFields
are dropped as each object arrives, and the result keeps the shape of the original so the
parsers in ``model`` read either and reach the same verdict. Parts that are not of the expected
type are kept untouched so that the parser still reports them.

Cached objects are read, never edited (the watch replaces an object when it changes), so parts
that are equal across objects are shared: a route's parent references and status are usually
the same for every route of a Gateway, and a JSON parser gives each route its own copy.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable
from typing import Any

import msgspec

from hairpin_proxy.jsonobj import JsonObj

# One object per distinct shared part, keyed by its content; bounded, as what is in it comes
# from the API (cleared when full: sharing is an economy, never a meaning).
_SHARED: dict[Hashable, Any] = {}
_SHARED_MAX = 4096
# Metadata values that repeat across objects (a namespace, a second of creation).
_REPEATED = ("namespace", "creationTimestamp")

_META = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "generation")
_REF = ("group", "kind", "namespace", "name", "sectionName", "port")


def _pick(src: Any, keys: tuple[str, ...]) -> Any:
    """The ``keys`` of a dict; anything else as it is."""
    return {k: src[k] for k in keys if k in src} if isinstance(src, dict) else src


def _each(src: Any, fn: Callable[[Any], Any]) -> Any:
    """``fn`` over a list's items; anything else as it is."""
    return [fn(item) for item in src] if isinstance(src, list) else src


_encode = msgspec.msgpack.Encoder().encode


def _content(value: Any) -> Hashable | None:
    """A hashable stand-in for a value read from JSON, equal for equal values written in the
    same order (None: not plain JSON). MessagePack keeps apart what Python's equality would
    not (1, 1.0 and true; the key "1" and the key 1), in C."""
    if type(value) not in (dict, list):
        return None
    try:
        return _encode(value)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return None


def _shared(value: Any) -> Any:
    """``value``, or an equal one already kept: one copy for every object that has it."""
    key = _content(value)
    if key is None:
        return value
    found = _SHARED.get(key)
    if found is None:
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        found = _SHARED[key] = value
    return found


def _str(value: Any) -> Any:
    return sys.intern(value) if type(value) is str else value


class _Route:
    """Instances only lend their ``__dict__``: a dict made so is a "split" dict, whose keys
    live in one table shared by all of them (PEP 412), 60 to 140 bytes less than a dict of
    its own, and a plain dict to every reader. A cached route takes its top level from here,
    its ``metadata`` and ``spec`` from the two below (about 280 bytes less per route)."""


class _RouteMeta:
    pass


class _RouteSpec:
    pass


def _into(out: JsonObj, src: Any, keys: tuple[str, ...]) -> Any:
    """``_pick`` into ``out`` (a split dict)."""
    if not isinstance(src, dict):
        return src
    for key in keys:
        if key in src:
            out[key] = src[key]
    return out


def _head(obj: JsonObj, meta_keys: tuple[str, ...] = _META, *, split: bool = False) -> JsonObj:
    out: JsonObj = _Route().__dict__ if split else {}
    for key in ("apiVersion", "kind"):
        if key in obj:
            out[key] = _str(obj[key])
    if "metadata" in obj:
        meta = _into(_RouteMeta().__dict__, obj["metadata"], meta_keys) if split else \
            _pick(obj["metadata"], meta_keys)
        if isinstance(meta, dict):
            for key in _REPEATED:
                if key in meta:
                    meta[key] = _str(meta[key])
        out["metadata"] = meta
    return out


def _allowed(src: Any) -> Any:
    if not isinstance(src, dict):
        return src
    out = _pick(src, ("namespaces", "kinds"))
    if "namespaces" in out:
        out["namespaces"] = _pick(out["namespaces"], ("from", "selector"))
    if "kinds" in out:
        out["kinds"] = _each(out["kinds"], lambda k: _pick(k, ("group", "kind")))
    return out


def _listener(src: Any) -> Any:
    out = _pick(src, ("name", "hostname", "port", "protocol", "allowedRoutes"))
    if isinstance(out, dict) and "allowedRoutes" in out:
        out["allowedRoutes"] = _allowed(out["allowedRoutes"])
    return out


def slim_gateway(obj: JsonObj) -> JsonObj:
    out = _head(obj)
    if "spec" in obj:
        spec = _pick(obj["spec"], ("gatewayClassName", "listeners", "allowedListeners"))
        if isinstance(spec, dict) and "listeners" in spec:
            spec["listeners"] = _each(spec["listeners"], _listener)
        out["spec"] = spec
    return out


def slim_gateway_class(obj: JsonObj) -> JsonObj:
    out = _head(obj)
    if "spec" in obj:
        out["spec"] = _pick(obj["spec"], ("controllerName",))
    return out


def _parent_status(src: Any) -> Any:
    out = _pick(src, ("parentRef", "controllerName", "conditions"))
    if isinstance(out, dict):
        if "parentRef" in out:
            out["parentRef"] = _pick(out["parentRef"], _REF)
        if "conditions" in out:
            out["conditions"] = _each(out["conditions"], lambda c: _pick(
                c, ("type", "status", "observedGeneration", "reason")))
    return out


def slim_route(obj: JsonObj) -> JsonObj:
    """An HTTPRoute, GRPCRoute or TLSRoute."""
    out = _head(obj, split=True)
    if "spec" in obj:
        spec = _into(_RouteSpec().__dict__, obj["spec"], ("hostnames", "parentRefs"))
        if isinstance(spec, dict) and "parentRefs" in spec:
            spec["parentRefs"] = _shared(_each(spec["parentRefs"], lambda r: _pick(r, _REF)))
        out["spec"] = spec
    if "status" in obj:
        status = _pick(obj["status"], ("parents",))
        if isinstance(status, dict) and "parents" in status:
            status["parents"] = _each(status["parents"], _parent_status)
        out["status"] = _shared(status)
    return out


def _conditions(src: Any) -> Any:
    return _each(src, lambda c: _pick(c, ("type", "status", "observedGeneration", "reason")))


def _listener_status(src: Any) -> Any:
    out = _pick(src, ("name", "conditions"))
    if isinstance(out, dict) and "conditions" in out:
        out["conditions"] = _conditions(out["conditions"])
    return out


def slim_listener_set(obj: JsonObj) -> JsonObj:
    """A ListenerSet: its parent Gateway, listeners, and the conditions saying whether it and
    each listener were accepted."""
    out = _head(obj)
    if "spec" in obj:
        spec = _pick(obj["spec"], ("parentRef", "listeners"))
        if isinstance(spec, dict):
            if "parentRef" in spec:
                spec["parentRef"] = _pick(spec["parentRef"], _REF)
            if "listeners" in spec:
                spec["listeners"] = _each(spec["listeners"], _listener)
        out["spec"] = spec
    if "status" in obj:
        status = _pick(obj["status"], ("conditions", "listeners"))
        if isinstance(status, dict):
            if "conditions" in status:
                status["conditions"] = _conditions(status["conditions"])
            if "listeners" in status:
                status["listeners"] = _each(status["listeners"], _listener_status)
        out["status"] = status
    return out


def slim_namespace(obj: JsonObj) -> JsonObj:
    """What ``allowedRoutes`` selectors read of a Namespace: its name and labels."""
    return _head(obj, ("name", "uid", "resourceVersion", "labels"))
