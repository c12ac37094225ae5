"""Label and field selectors as the API server parses and applies them."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.fakeapi.status import ApiError, bad_request

Obj = dict[str, Any]

_TOKEN = re.compile(r"\s*(==|!=|=|\(|\)|,|!|[^\s=!(),]+)")
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        # "!=" and "notin" match objects without the label, as the real selector does.
        return not present or value not in self.values


Selector = tuple[Requirement, ...]


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            raise bad_request(f"unable to parse requirement: {text!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


def parse_labels(text: str | None) -> Selector:
    """Parse `a=b,c!=d,e in (f,g),h notin (i),j,!k`; raise a 400 ApiError on bad syntax."""
    if not text:
        return ()
    toks = _tokens(text)
    reqs: list[Requirement] = []
    i = 0

    def fail(msg: str) -> ApiError:
        return bad_request(f"unable to parse requirement: {msg}")

    while i < len(toks):
        if toks[i] == "!":
            if i + 1 >= len(toks):
                raise fail("missing key after '!'")
            key = toks[i + 1]
            _check_key(key)
            reqs.append(Requirement(key, "!"))
            i += 2
        else:
            key = toks[i]
            _check_key(key)
            i += 1
            if i >= len(toks) or toks[i] == ",":
                reqs.append(Requirement(key, "exists"))
            elif toks[i] in ("=", "==", "!="):
                op_tok = toks[i]
                i += 1
                value = ""
                if i < len(toks) and toks[i] not in (",", "(", ")"):
                    value = toks[i]
                    i += 1
                _check_value(value)
                reqs.append(Requirement(key, "!=" if op_tok == "!=" else "=", (value,)))
            elif toks[i] in ("in", "notin"):
                op = toks[i]
                if i + 1 >= len(toks) or toks[i + 1] != "(":
                    raise fail(f"found '{toks[i + 1] if i + 1 < len(toks) else ''}', "
                               "expected: '('")
                i += 2
                values: list[str] = []
                while i < len(toks) and toks[i] != ")":
                    if toks[i] != ",":
                        _check_value(toks[i])
                        values.append(toks[i])
                    i += 1
                if i >= len(toks):
                    raise fail("found '', expected: ')'")
                i += 1
                reqs.append(Requirement(key, op, tuple(values)))
            else:
                raise fail(f"found '{toks[i]}', expected: in, notin, =, ==, !=, or ','")
        if i < len(toks):
            if toks[i] != ",":
                raise fail(f"found '{toks[i]}', expected: ','")
            i += 1
    return tuple(reqs)


def _check_key(key: str) -> None:
    if not _LABEL_KEY.match(key) or len(key.rsplit("/", 1)[-1]) > 63:
        raise bad_request(f"unable to parse requirement: invalid label key {key!r}")


def _check_value(value: str) -> None:
    if not _LABEL_VALUE.match(value):
        raise bad_request(f"unable to parse requirement: invalid label value: {value!r}")


def labels_match(sel: Selector, obj: Obj) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(r.matches(labels) for r in sel)


# Fields the real server indexes per kind, beyond metadata.name and metadata.namespace.
_EXTRA_FIELDS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
            "spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP",
            "status.nominatedNodeName"),
    "Namespace": ("status.phase",),
    "Event": ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
              "involvedObject.uid", "involvedObject.apiVersion",
              "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason",
              "reportingComponent", "source", "type", "regarding.kind", "regarding.namespace",
              "regarding.name", "regarding.uid", "regarding.apiVersion",
              "regarding.resourceVersion", "regarding.fieldPath", "reportingController"),
    "Service": ("spec.clusterIP", "spec.type"),
}


@dataclass(frozen=True)
class FieldRequirement:
    path: str
    equal: bool
    value: str


FieldSelector = tuple[FieldRequirement, ...]


def parse_fields(text: str | None, kind: str) -> FieldSelector:
    if not text:
        return ()
    allowed = ("metadata.name", "metadata.namespace", *_EXTRA_FIELDS.get(kind, ()))
    out: list[FieldRequirement] = []
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        m = re.fullmatch(r"([^=!]+?)\s*(==|!=|=)\s*(.*)", part)
        if m is None:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        path, op, value = m.group(1), m.group(2), m.group(3)
        if path not in allowed:
            raise bad_request(f"field label not supported: {path}")
        out.append(FieldRequirement(path, op != "!=", value))
    return tuple(out)


def _field_value(obj: Obj, path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def fields_match(sel: FieldSelector, obj: Obj) -> bool:
    return all((_field_value(obj, r.path) == r.value) == r.equal for r in sel)


def matcher(labels: Selector, fields: FieldSelector) -> Callable[[Obj], bool]:
    return lambda obj: labels_match(labels, obj) and fields_match(fields, obj)
