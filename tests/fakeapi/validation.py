"""The subset of the real API server's validation that code under test can trip over.

Decode-level problems (wrong JSON types, malformed timestamps; MicroTime fields need exactly six
fractional digits) answer 400 as the real server's decoder does; semantic problems answer 422
Invalid with one cause per field.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any

from tests.fakeapi import netpol
from tests.fakeapi import status as st
from tests.fakeapi.resources import ResourceType

Obj = dict[str, Any]
Cause = tuple[str, str, str]  # (field, reason, message)

SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
WILDCARD = re.compile(r"^\*\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
QUALIFIED = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$")
# metav1.MicroTime parses with exactly six fractional digits: "...T10:00:00Z" is refused.
MICRO_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$")
CONFIGMAP_MAX_BYTES = 1024 * 1024
ANNOTATIONS_MAX_BYTES = 256 * 1024

MSG_SUBDOMAIN = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
MSG_WILDCARD = (
    "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, "
    "which must consist of lower case alphanumeric characters, '-' or '.' and end with an "
    "alphanumeric character (e.g. '*.example.com', regex used for validation is "
    "'\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
MSG_1123 = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
MSG_1035 = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
    "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
MSG_LABEL_VALUE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
MSG_IMMUTABLE_CM = "Forbidden: field is immutable when `immutable` is set"


def _undecodable(rt: ResourceType, detail: str) -> st.ApiError:
    return st.bad_request(f'{rt.kind} in version "{rt.version}" cannot be handled as a '
                          f"{rt.kind}: {detail}")


def _get(obj: Any, path: str) -> Any:
    cur = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def _check_timestamps(rt: ResourceType, obj: Obj, paths: tuple[str, ...], micro: bool) -> None:
    pattern, layout = (MICRO_TIMESTAMP, "2006-01-02T15:04:05.000000Z07:00") if micro else \
        (TIMESTAMP, "2006-01-02T15:04:05Z07:00")
    for path in paths:
        value = _get(obj, path)
        if value is not None and (not isinstance(value, str) or not pattern.match(value)):
            raise _undecodable(rt, f"parsing time {json.dumps(value)} as \"{layout}\": "
                                   f"cannot parse (field {path})")


def _string_map(rt: ResourceType, obj: Obj, path: str) -> dict[str, str] | None:
    value = _get(obj, path)
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise _undecodable(rt, f"json: cannot unmarshal into Go struct field {path} of type "
                               "map[string]string")
    return value


def _name_causes(rt: ResourceType, name: str) -> list[Cause]:
    if not name:
        return [("metadata.name", "FieldValueRequired",
                 "Required value: name or generateName is required")]
    if rt.plural == "namespaces":
        ok, msg = bool(LABEL_1123.match(name)) and len(name) <= 63, MSG_1123
    elif rt.plural == "services":
        ok, msg = bool(LABEL_1035.match(name)) and len(name) <= 63, MSG_1035
    else:
        ok, msg = bool(SUBDOMAIN.match(name)) and len(name) <= 253, MSG_SUBDOMAIN
    return [] if ok else [("metadata.name", "FieldValueInvalid", f'Invalid value: "{name}": {msg}')]


def _label_causes(labels: dict[str, str]) -> list[Cause]:
    causes: list[Cause] = []
    for key, value in labels.items():
        prefix, _, base = key.rpartition("/")
        if (prefix and (not SUBDOMAIN.match(prefix) or len(prefix) > 253)) or \
                not QUALIFIED.match(base) or len(base) > 63:
            causes.append(("metadata.labels", "FieldValueInvalid",
                           f'Invalid value: "{key}": name part must consist of alphanumeric '
                           "characters, '-', '_' or '.', and must start and end with an "
                           "alphanumeric character"))
        if not LABEL_VALUE.match(value) or len(value) > 63:
            causes.append(("metadata.labels", "FieldValueInvalid",
                           f'Invalid value: "{value}": {MSG_LABEL_VALUE}'))
    return causes


def _host_causes(field: str, host: str, rule: bool) -> list[Cause]:
    if rule:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            pass
        else:
            return [(field, "FieldValueInvalid",
                     f'Invalid value: "{host}": must be a DNS name, not an IP address')]
    if "*" in host:
        return [] if WILDCARD.match(host) else [
            (field, "FieldValueInvalid", f'Invalid value: "{host}": {MSG_WILDCARD}')]
    return [] if SUBDOMAIN.match(host) and len(host) <= 253 else [
        (field, "FieldValueInvalid", f'Invalid value: "{host}": {MSG_SUBDOMAIN}')]


def _ingress_causes(spec: Any) -> list[Cause]:
    if not isinstance(spec, dict):
        return []
    causes: list[Cause] = []
    cls = spec.get("ingressClassName")
    if cls is not None and not (isinstance(cls, str) and SUBDOMAIN.match(cls)):
        causes.append(("spec.ingressClassName", "FieldValueInvalid",
                       f'Invalid value: "{cls}": {MSG_SUBDOMAIN}'))
    for i, tls in enumerate(spec.get("tls") or []):
        for j, host in enumerate((tls or {}).get("hosts") or []):
            causes += _host_causes(f"spec.tls[{i}].hosts[{j}]", str(host), rule=False)
    rules = spec.get("rules") or []
    if not rules and not spec.get("defaultBackend"):
        causes.append(("spec", "FieldValueInvalid", 'Invalid value: "null": either '
                       "`defaultBackend` or `rules` must be specified"))
    for i, maybe_rule in enumerate(rules):
        rule = maybe_rule or {}
        if rule.get("host"):
            causes += _host_causes(f"spec.rules[{i}].host", str(rule["host"]), rule=True)
        for j, path in enumerate((rule.get("http") or {}).get("paths") or []):
            where = f"spec.rules[{i}].http.paths[{j}]"
            ptype = path.get("pathType")
            if ptype is None:
                causes.append((f"{where}.pathType", "FieldValueRequired",
                               "Required value: pathType must be specified"))
            elif ptype not in ("Exact", "Prefix", "ImplementationSpecific"):
                causes.append((f"{where}.pathType", "FieldValueNotSupported",
                               f'Unsupported value: "{ptype}": supported values: "Exact", '
                               '"ImplementationSpecific", "Prefix"'))
            elif ptype != "ImplementationSpecific" and not str(path.get("path", "")).startswith(
                    "/"):
                causes.append((f"{where}.path", "FieldValueInvalid",
                               f'Invalid value: "{path.get("path", "")}": must be an absolute '
                               "path"))
            backend = path.get("backend") or {}
            if not backend.get("service") and not backend.get("resource"):
                causes.append((f"{where}.backend", "FieldValueInvalid",
                               "Invalid value: \"\": one of `service` or `resource` must be "
                               "specified"))
    return causes


def _event_causes(rt: ResourceType, obj: Obj) -> list[Cause]:
    causes: list[Cause] = []
    ns = obj["metadata"].get("namespace", "")
    events_api = rt.group == "events.k8s.io"
    involved = "regarding" if events_api else "involvedObject"
    target_ns = _get(obj, f"{involved}.namespace") or ""
    # An event about a cluster-scoped object lives in "default"; otherwise namespaces must match.
    if (target_ns and target_ns != ns) or (not target_ns and ns not in ("", "default")):
        causes.append((f"{involved}.namespace", "FieldValueInvalid",
                       f'Invalid value: "{target_ns}": does not match event.namespace'))
    etype = obj.get("type")
    strict = events_api or bool(obj.get("eventTime"))
    if (strict or etype) and etype not in ("Normal", "Warning"):
        causes.append(("type", "FieldValueInvalid",
                       f'Invalid value: "{etype or ""}": has invalid value: {etype or ""}'))
    if strict:
        if not obj.get("eventTime"):
            causes.append(("eventTime", "FieldValueRequired", "Required value"))
        controller = obj.get("reportingController" if events_api else "reportingComponent")
        if not controller:
            field = "reportingController" if events_api else "reportingComponent"
            causes.append((field, "FieldValueRequired", "Required value"))
        if not obj.get("reportingInstance"):
            causes.append(("reportingInstance", "FieldValueRequired", "Required value"))
        for what in ("action", "reason"):
            value = obj.get(what) or ""
            if not value:
                causes.append((what, "FieldValueRequired", "Required value"))
            elif len(value) > 128:
                causes.append((what, "FieldValueTooLong",
                               "Too long: must have at most 128 bytes"))
        note = obj.get("note" if events_api else "message") or ""
        if len(note.encode()) > 1024:
            causes.append(("note" if events_api else "message", "FieldValueTooLong",
                           "Too long: must have at most 1024 bytes"))
    return causes


def _configmap_causes(rt: ResourceType, obj: Obj, old: Obj | None) -> list[Cause]:
    causes: list[Cause] = []
    total = 0
    for what in ("data", "binaryData"):
        value = _string_map(rt, obj, what)
        for k, v in (value or {}).items():
            total += len(k) + len(v.encode())
            if not CONFIG_KEY.match(k) or len(k) > 253:
                causes.append((f"{what}[{k}]", "FieldValueInvalid",
                               f'Invalid value: "{k}": a valid config key must consist of '
                               "alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or "
                               "'KEY_NAME',  or 'key-name', regex used for validation is "
                               "'[-._a-zA-Z0-9]+')"))
    if total > CONFIGMAP_MAX_BYTES:
        causes.append(("", "FieldValueTooLong",
                       f"Too long: must have at most {CONFIGMAP_MAX_BYTES} bytes"))
    if old is not None and old.get("immutable"):
        if obj.get("immutable") is not True:
            causes.append(("immutable", "FieldValueForbidden", MSG_IMMUTABLE_CM))
        for what in ("data", "binaryData"):
            if (obj.get(what) or {}) != (old.get(what) or {}):
                causes.append((what, "FieldValueForbidden", MSG_IMMUTABLE_CM))
    return causes


def validate(rt: ResourceType, obj: Obj, old: Obj | None = None) -> None:
    """Raise the ApiError the real server would answer for `obj` (a create when old is None)."""
    md = obj["metadata"]
    name = md.get("name") or ""
    labels = _string_map(rt, obj, "metadata.labels")
    annotations = _string_map(rt, obj, "metadata.annotations")
    _check_timestamps(rt, obj, ("spec.acquireTime", "spec.renewTime", "eventTime",
                                "series.lastObservedTime"), micro=True)
    _check_timestamps(rt, obj, ("firstTimestamp", "lastTimestamp", "deprecatedFirstTimestamp",
                                "deprecatedLastTimestamp", "metadata.creationTimestamp"),
                      micro=False)
    causes = _name_causes(rt, name)
    causes += _label_causes(labels or {})
    if annotations and sum(len(k) + len(v) for k, v in annotations.items()) > \
            ANNOTATIONS_MAX_BYTES:
        causes.append(("metadata.annotations", "FieldValueTooLong",
                       f"Too long: must have at most {ANNOTATIONS_MAX_BYTES} bytes"))
    if rt.plural == "configmaps":
        causes += _configmap_causes(rt, obj, old)
    elif rt.plural == "ingresses":
        causes += _ingress_causes(obj.get("spec"))
    elif rt.plural == "events":
        causes += _event_causes(rt, obj)
    elif rt.plural == "networkpolicies":
        netpol.default(obj)
        causes += netpol.causes(obj)
    elif rt.plural == "leases":
        duration = _get(obj, "spec.leaseDurationSeconds")
        if duration is not None and (not isinstance(duration, int) or duration <= 0):
            causes.append(("spec.leaseDurationSeconds", "FieldValueInvalid",
                           f"Invalid value: {duration}: must be greater than 0"))
    if causes:
        raise st.invalid(rt, name, causes)
