"""Only what the controller reads of Gateway API objects and Namespaces, for its caches.

Same idea as for Ingresses: rules, filters, backends, TLS settings, addresses and managedFields
are dropped as each object arrives, and the result keeps the shape of the original so the
parsers in ``model`` read either and reach the same verdict. Parts that are not of the expected
type are kept untouched so that the parser still reports them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

JsonObj = dict[str, Any]

_META = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "generation")
_REF = ("group", "kind", "namespace", "name", "sectionName", "port")


def _pick(src: Any, keys: tuple[str, ...]) -> Any:
    """The ``keys`` of a dict; anything else as it is."""
    return {k: src[k] for k in keys if k in src} if isinstance(src, dict) else src


def _each(src: Any, fn: Callable[[Any], Any]) -> Any:
    """``fn`` over a list's items; anything else as it is."""
    return [fn(item) for item in src] if isinstance(src, list) else src


def _head(obj: JsonObj, meta_keys: tuple[str, ...] = _META) -> JsonObj:
    out: JsonObj = {k: obj[k] for k in ("apiVersion", "kind") if k in obj}
    if "metadata" in obj:
        out["metadata"] = _pick(obj["metadata"], meta_keys)
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
    out = _head(obj)
    if "spec" in obj:
        spec = _pick(obj["spec"], ("hostnames", "parentRefs"))
        if isinstance(spec, dict) and "parentRefs" in spec:
            spec["parentRefs"] = _each(spec["parentRefs"], lambda r: _pick(r, _REF))
        out["spec"] = spec
    if "status" in obj:
        status = _pick(obj["status"], ("parents",))
        if isinstance(status, dict) and "parents" in status:
            status["parents"] = _each(status["parents"], _parent_status)
        out["status"] = status
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
