"""Only what the controller reads of an Ingress, for its caches.

A cached Ingress is read by the host policy (namespace, name, class, hosts), by the policy
cache (uid and resourceVersion), by the Events recorded on it (uid, resourceVersion), by the
rules budget (creationTimestamp) and by host verification (status addresses). Everything else
(other annotations, backends, paths, managedFields) is dropped as the object arrives: at 10,000
Ingresses that is most of the controller's memory. The result reads as the original object,
so every reader works on either: a well-formed Ingress is kept as an ``IngressRecord`` (one
read-only record that reads as the trimmed object), a well-formed ``spec`` as a ``CompactSpec``
(a read-only mapping equal to the trimmed spec); anything else as trimmed dicts. Strings and
parts that repeat across Ingresses (namespaces, classes, the class annotation, load balancer
statuses) are shared.

Cached objects are read, never edited: the watch replaces an object when it changes. Shared
parts rely on that.
"""

from __future__ import annotations

import sys
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from hairpin_proxy.apis import CLASS_ANNOTATION
from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.sources.ingress.policy import CompactSpec
from hairpin_proxy.sources.ingress.record import ABSENT, API_VERSION, KIND, IngressRecord, WithHead

_META = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
# Values that repeat across Ingresses (a namespace, a second of creation): one copy each (a JSON
# parser gives every object its own).
_REPEATED = ("namespace", "creationTimestamp")
# Load balancer statuses are usually the same few for every Ingress of a cluster: one shared
# object per distinct status, keyed by its content; the table is bounded, as what is in it
# comes from the API.
_STATUSES: dict[tuple[tuple[tuple[str, str], ...], ...], JsonObj] = {}
_STATUSES_MAX = 1024
# The same for the trimmed annotations (the class annotation alone), by its value.
_ANNOTATIONS: dict[str, JsonObj] = {}


def _str(value: Any) -> Any:
    return sys.intern(value) if type(value) is str else value


def _pick(src: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: src[k] for k in keys if k in src} if isinstance(src, dict) else {}


class _Meta:
    """Instances only lend their ``__dict__``: a dict made so is a "split" dict, whose keys
    live in one table shared by all of them (PEP 412), 64 bytes less than a dict of its own,
    and a plain dict to every reader. Cached Ingresses take their ``metadata`` from here."""


class _Ingress:
    """The same for a cached Ingress itself."""


def _annotations(meta: dict[str, Any]) -> Any:
    """The trimmed ``metadata.annotations`` (the class annotation alone), or ABSENT."""
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        if CLASS_ANNOTATION not in annotations:
            return ABSENT
        value = annotations[CLASS_ANNOTATION]
        if type(value) is not str:
            return {CLASS_ANNOTATION: value}
        return _shared_annotations(value)
    return ABSENT if annotations is None else annotations


def _meta(meta: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = _Meta().__dict__
    for key in _META:
        if key in meta:
            value = meta[key]
            out[key] = _str(value) if key in _REPEATED else value
    annotations = _annotations(meta)
    if annotations is not ABSENT:
        out["annotations"] = annotations
    return out


# What a field's absence reads as, and what a malformed list of entries gives.
_ABSENT: Any = ABSENT
_BAD: Any = object()


def _tls_hosts(entries: Any, seen: dict[str, str]) -> Any:
    """``spec.tls`` as CompactSpec keeps it, or _BAD. Loops rather than generators: this runs
    for every Ingress of every list."""
    if type(entries) is not list:
        return _BAD
    found: list[tuple[str, ...] | None] = []
    for entry in entries:
        if type(entry) is not dict:
            return _BAD
        hosts = entry.get("hosts", _ABSENT)
        if hosts is _ABSENT:
            found.append(None)
            continue
        if type(hosts) is not list:
            return _BAD
        kept: list[str] = []
        for host in hosts:
            if type(host) is not str:
                return _BAD
            kept.append(seen.setdefault(host, host))
        found.append(tuple(kept))
    return tuple(found)


def _rule_hosts(entries: Any, seen: dict[str, str]) -> Any:
    """``spec.rules`` as CompactSpec keeps it, or _BAD."""
    if type(entries) is not list:
        return _BAD
    names: list[str | None] = []
    for entry in entries:
        if type(entry) is not dict:
            return _BAD
        host = entry.get("host", _ABSENT)
        if host is _ABSENT:
            names.append(None)
        elif type(host) is str:
            names.append(seen.setdefault(host, host))
        else:
            return _BAD
    return tuple(names)


def _compact_spec(spec: dict[str, Any]) -> CompactSpec | None:
    """``spec`` as a CompactSpec, or None when it has a defect the policy must see as it is."""
    cls = spec.get("ingressClassName")
    if cls is not None and type(cls) is not str:
        return None
    seen: dict[str, str] = {}  # a host named in tls and in a rule: one string
    tls = _tls_hosts(spec["tls"], seen) if "tls" in spec else None
    rules = _rule_hosts(spec["rules"], seen) if "rules" in spec else None
    if tls is _BAD or rules is _BAD:
        return None
    return _compact(cls, tls, rules)


def _compact(cls: str | None, tls: tuple[Any, ...] | None,
             rules: tuple[str | None, ...] | None) -> CompactSpec:
    if tls is not None and rules is not None:
        # The usual Ingress names the same hosts in its rules and its TLS entry: one tuple.
        tls = tuple([rules if hosts == rules else hosts for hosts in tls])
    return CompactSpec(None if cls is None else sys.intern(cls), tls, rules)


def _slim_spec(spec: dict[str, Any]) -> Any:
    compact = _compact_spec(spec)
    if compact is not None:
        return compact
    slim_spec = _pick(spec, ("ingressClassName",))
    rules = spec.get("rules")
    if isinstance(rules, list):
        slim_spec["rules"] = [_pick(r, ("host",)) if isinstance(r, dict) else r for r in rules]
    elif "rules" in spec:
        slim_spec["rules"] = rules
    tls = spec.get("tls")
    if isinstance(tls, list):
        slim_spec["tls"] = [_pick(t, ("hosts",)) if isinstance(t, dict) else t for t in tls]
    elif "tls" in spec:
        slim_spec["tls"] = tls
    return slim_spec


def _status(lb: dict[str, Any]) -> JsonObj:
    """``{"loadBalancer": lb}``, one object for every Ingress with the same plain status."""
    entries = lb.get("ingress")
    if len(lb) != 1 or type(entries) is not list or not all(
            type(e) is dict and all(type(v) is str for v in e.values()) for e in entries):
        return {"loadBalancer": lb}
    key = tuple(tuple(sorted(e.items())) for e in entries)
    shared = _STATUSES.get(key)
    if shared is None:
        if len(_STATUSES) >= _STATUSES_MAX:
            _STATUSES.clear()
        shared = _STATUSES[key] = {"loadBalancer": lb}
    return shared


def _shared_annotations(value: str) -> JsonObj:
    shared = _ANNOTATIONS.get(value)
    if shared is None:
        if len(_ANNOTATIONS) >= _STATUSES_MAX:
            _ANNOTATIONS.clear()
        shared = _ANNOTATIONS[value] = {CLASS_ANNOTATION: sys.intern(value)}
    return shared


def _record(obj: JsonObj, meta: dict[str, Any]) -> IngressRecord | None:
    """``obj`` as an IngressRecord, or None when its ``apiVersion`` or ``kind`` is not the
    usual (both absent, or the Ingress API's)."""
    api, kind = obj.get("apiVersion", ABSENT), obj.get("kind", ABSENT)
    if api is ABSENT and kind is ABSENT:
        out = IngressRecord()
    elif api == API_VERSION and kind == KIND and type(api) is str and type(kind) is str:
        out = WithHead()
    else:
        return None
    get = meta.get
    out.name = get("name", ABSENT)
    out.namespace = _str(get("namespace", ABSENT))
    out.uid = get("uid", ABSENT)
    out.resourceVersion = get("resourceVersion", ABSENT)
    out.creationTimestamp = _str(get("creationTimestamp", ABSENT))
    out.annotations = _annotations(meta)
    spec = obj.get("spec", ABSENT)
    out.spec = _slim_spec(spec) if isinstance(spec, dict) else spec
    out.status = _kept_status(obj.get("status"))
    return out


def _kept_status(status: Any) -> Any:
    # An empty status says nothing its absence does not (no load balancer address).
    if isinstance(status, dict) and isinstance(status.get("loadBalancer"), dict) \
            and status["loadBalancer"]:
        return _status(status["loadBalancer"])
    return ABSENT


def own_name(kept: JsonObj) -> Any:
    """The name a cached Ingress keeps (the very string; None: it has none to read)."""
    if isinstance(kept, IngressRecord):
        return kept.name
    meta = kept.get("metadata")
    return meta.get("name") if isinstance(meta, dict) else None


def slim_ingress(obj: JsonObj) -> JsonObj:
    """The fields of ``obj`` the controller reads; malformed parts are kept as they are, so
    that the policy still reports them."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        record = _record(obj, meta)
        if record is not None:
            # Typed as the dict it reads as: cached objects are only read.
            return record  # type: ignore[return-value]
    return trimmed(obj)


def trimmed(obj: JsonObj) -> JsonObj:
    """What ``slim_ingress`` keeps of ``obj``, as dicts: the form of an Ingress that is not
    well-formed enough for a record, and what a record reads as."""
    meta = obj.get("metadata")
    out: JsonObj = _Ingress().__dict__
    for key in ("apiVersion", "kind"):
        if key in obj:
            out[key] = _str(obj[key])
    if isinstance(meta, dict):
        out["metadata"] = _meta(meta)
    elif "metadata" in obj:
        out["metadata"] = meta
    spec = obj.get("spec")
    if isinstance(spec, dict):
        out["spec"] = _slim_spec(spec)
    elif "spec" in obj:
        out["spec"] = spec
    status = _kept_status(obj.get("status"))
    if status is not ABSENT:
        out["status"] = status
    return out



# An Ingress read straight from its JSON as slim_ingress keeps it: only the fields kept are
# decoded, the rest (other annotations and their last-applied copy of the object, labels,
# managedFields, backends, paths) skipped unread. Each field is typed as a well-formed Ingress
# has it; anything else fails the decode, and the Ingress is decoded whole and trimmed as it is
# (the policy reports its defects).


class _Annotations(msgspec.Struct):
    cls: str | UnsetType = msgspec.field(default=UNSET, name=CLASS_ANNOTATION)


class _QuickMeta(msgspec.Struct):
    name: str | UnsetType | None = UNSET
    namespace: str | UnsetType | None = UNSET
    uid: str | UnsetType | None = UNSET
    resourceVersion: str | UnsetType | None = UNSET
    creationTimestamp: str | UnsetType | None = UNSET
    annotations: _Annotations | UnsetType | None = UNSET


class _QuickTls(msgspec.Struct):
    hosts: list[str] | UnsetType = UNSET


class _QuickRule(msgspec.Struct):
    host: str | UnsetType = UNSET


class _QuickSpec(msgspec.Struct):
    ingressClassName: str | UnsetType | None = UNSET
    tls: list[_QuickTls] | UnsetType = UNSET
    rules: list[_QuickRule] | UnsetType = UNSET


class _Quick(msgspec.Struct):
    metadata: _QuickMeta
    apiVersion: str | UnsetType = UNSET
    kind: str | UnsetType = UNSET
    spec: _QuickSpec | UnsetType | None = UNSET
    status: Any = UNSET


_decode_quick = msgspec.json.Decoder(_Quick).decode
_QUICK_FAILS = (msgspec.ValidationError, msgspec.DecodeError)


def quick_ingress(raw: bytes) -> JsonObj | None:
    """``slim_ingress`` of the Ingress that is the JSON ``raw``, decoding only what it keeps;
    None when the Ingress is not well-formed enough for that (decode it whole, and trim it)."""
    try:
        got = _decode_quick(raw)
    except _QUICK_FAILS:
        return None
    api, kind = got.apiVersion, got.kind
    if api is UNSET and kind is UNSET:
        out = IngressRecord()
    elif api == API_VERSION and kind == KIND:
        out = WithHead()
    else:
        return None
    meta = got.metadata
    out.name = _given(meta.name)
    out.namespace = _str(_given(meta.namespace))
    out.uid = _given(meta.uid)
    out.resourceVersion = _given(meta.resourceVersion)
    out.creationTimestamp = _str(_given(meta.creationTimestamp))
    notes = meta.annotations
    out.annotations = ABSENT if notes is UNSET or notes is None or notes.cls is UNSET \
        else _shared_annotations(notes.cls)
    spec = got.spec
    out.spec = ABSENT if spec is UNSET else None if spec is None else _quick_spec(spec)
    out.status = _kept_status(None if got.status is UNSET else got.status)
    # Typed as the dict it reads as: cached objects are only read.
    return out  # type: ignore[return-value]


def _given(value: Any) -> Any:
    return ABSENT if value is UNSET else value


def _quick_spec(spec: _QuickSpec) -> CompactSpec:
    cls = None if spec.ingressClassName is UNSET else spec.ingressClassName
    tls, rules = spec.tls, spec.rules
    if tls is not UNSET and rules is not UNSET and len(tls) == 1 and len(rules) == 1:
        # Nearly every Ingress: one rule, and one TLS entry naming its host.
        hosts, host = tls[0].hosts, rules[0].host
        if host is not UNSET and hosts is not UNSET and hosts == [host]:
            return _compact(cls, ((host,),), (host,))
    seen: dict[str, str] = {}  # a host named in tls and in a rule: one string
    kept_tls = None if tls is UNSET else tuple([
        None if entry.hosts is UNSET else tuple([seen.setdefault(h, h) for h in entry.hosts])
        for entry in tls])
    kept_rules = None if rules is UNSET else tuple([
        None if rule.host is UNSET else seen.setdefault(rule.host, rule.host)
        for rule in rules])
    return _compact(cls, kept_tls, kept_rules)
