"""A cached Ingress kept as an IngressRecord reads exactly as the trimmed dicts it stands for,
through every way a reader of the cache reads it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.claims import ObjectRef
from hairpin_proxy.controller.sources import same_object
from hairpin_proxy.plan.claims import ingress_origin
from hairpin_proxy.plan.incremental import version_of
from hairpin_proxy.sources.ingress.policy import (
    evaluate,
    evaluate_ingress,
    ingress_matches,
    ingress_target,
)
from hairpin_proxy.sources.ingress.record import IngressRecord, MetaView
from hairpin_proxy.sources.ingress.slim import quick_ingress, slim_ingress, trimmed
from hairpin_proxy.verify.lb import lb_addresses
from tests.sources.ingress.test_slim import ANNOTATIONS, POLICIES, SCALAR, SPEC

HEAD = st.sampled_from([{}, {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress"}])
NAME = st.one_of(st.sampled_from(["web", "api", ""]), SCALAR)
META = st.fixed_dictionaries({}, optional={
    "name": NAME, "namespace": st.one_of(st.sampled_from(["shop", "default", ""]), SCALAR),
    "uid": st.one_of(st.sampled_from(["u1", "u2", ""]), SCALAR),
    "resourceVersion": st.one_of(st.sampled_from(["7", "8"]), SCALAR),
    "creationTimestamp": st.one_of(st.sampled_from(["2026-01-01T00:00:00Z"]), SCALAR),
    "generation": st.integers(), "labels": st.just({"app": "web"}), "annotations": ANNOTATIONS})
STATUS = st.one_of(SCALAR, st.sampled_from([
    {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}},
    {"loadBalancer": {"ingress": [{"hostname": "lb.example.com"}, {"ip": "10.0.0.1"}]}},
    {"loadBalancer": {}}, {"loadBalancer": {"ingress": [{"ip": 7}]}}, {}]))


@st.composite
def ingresses(draw: st.DrawFn) -> dict[str, Any]:
    obj: dict[str, Any] = {**draw(HEAD), "metadata": draw(META)}
    if draw(st.booleans()):
        obj["spec"] = draw(SPEC)
    if draw(st.booleans()):
        obj["status"] = draw(STATUS)
    # As the API client gives it: fresh objects, no sharing with the strategy's.
    copy: dict[str, Any] = json.loads(json.dumps(obj))
    return copy


TOP = ("apiVersion", "kind", "metadata", "spec", "status", "labels", "name")
META_KEYS = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp",
             "annotations", "labels", "generation", "managedFields", "metadata")


def _reads_the_same(got: Mapping[str, Any], want: Mapping[str, Any],
                    keys: tuple[str, ...]) -> None:
    """Every mapping read of ``got`` gives what it gives on ``want``."""
    assert got == want and want == got
    assert (got != want) is False and (want != got) is False
    assert list(got) == list(want) and len(got) == len(want) and bool(got) == bool(want)
    assert list(got.keys()) == list(want.keys())
    assert list(got.values()) == list(want.values())
    assert list(got.items()) == list(want.items())
    assert dict(got) == want and {**got} == want
    for key in keys:
        assert (key in got) == (key in want)
        assert got.get(key) == want.get(key)
        assert got.get(key, "default") == want.get(key, "default")
        if key in want:
            assert got[key] == want[key]
        else:
            try:
                got[key]
            except KeyError:
                pass
            else:
                raise AssertionError(f"{key} read from a record that has none")


@settings(max_examples=500, deadline=None)
@given(ingresses())
def test_a_record_reads_as_the_trimmed_ingress(obj: dict[str, Any]) -> None:
    got, want = slim_ingress(obj), trimmed(obj)
    _reads_the_same(got, want, TOP)
    assert isinstance(got, Mapping)
    meta, want_meta = got["metadata"], want["metadata"]
    _reads_the_same(meta, want_meta, META_KEYS)
    # As readers take it: ``obj.get("metadata") or {}``.
    assert (meta or {}) == (want_meta or {})
    assert json.dumps(got, default=dict) == json.dumps(want, default=dict)
    # What an Event's involved object is made from.
    head = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress"}
    assert {**head, **got} == {**head, **want}


@settings(max_examples=300, deadline=None)
@given(ingresses())
def test_every_reader_reads_a_record_as_the_trimmed_ingress(obj: dict[str, Any]) -> None:
    got, want = slim_ingress(obj), trimmed(obj)
    for policy in POLICIES:
        for defaults in (frozenset(), frozenset({"nginx"})):
            assert evaluate_ingress(got, policy, defaults) == \
                evaluate_ingress(want, policy, defaults)
            assert ingress_matches(got, policy, defaults) == \
                ingress_matches(want, policy, defaults)
    classes = [{"metadata": {"name": "nginx"}}]
    assert evaluate([got], classes, POLICIES[0]) == evaluate([want], classes, POLICIES[0])
    for defaults in (frozenset(), frozenset({"nginx"}), frozenset({"nginx", "traefik"})):
        # The claims' origin: reference, target and creation time (the rules budget's).
        assert ingress_origin(got, defaults) == ingress_origin(want, defaults)
        assert ingress_target(got, defaults) == ingress_target(want, defaults)
    assert version_of(got) == version_of(want)
    assert lb_addresses([], [got]) == lb_addresses([], [want])
    for uid in ("", "u1", "u2"):
        ref = ObjectRef("Ingress", "shop", "web", uid)
        assert (same_object(ref, got) is got) == (same_object(ref, want) is want)


@settings(max_examples=300, deadline=None)
@given(ingresses(), ingresses())
def test_records_compare_as_what_they_stand_for(a: dict[str, Any], b: dict[str, Any]) -> None:
    """A relist compares the cache with the fresh copies: equal exactly when the trimmed
    objects are, whichever forms the two sides take."""
    assert slim_ingress(a) == slim_ingress(json.loads(json.dumps(a)))
    assert (slim_ingress(a) == slim_ingress(b)) == (trimmed(a) == trimmed(b))
    assert (slim_ingress(a) != slim_ingress(b)) == (trimmed(a) != trimmed(b))
    cache_a = {"k": slim_ingress(a)}
    assert (cache_a != {"k": slim_ingress(b)}) == (trimmed(a) != trimmed(b))
    meta_a, meta_b = slim_ingress(a)["metadata"], slim_ingress(b)["metadata"]
    assert (meta_a == meta_b) == (trimmed(a)["metadata"] == trimmed(b)["metadata"])


def test_the_records_are_mappings_without_the_abc_slow_path() -> None:
    """isinstance(x, Mapping) on a record is answered from the ABC's cache after the first
    time (registered with Mapping itself, every test would call back into Python)."""
    record: object = slim_ingress({"metadata": {"name": "web"}})
    view = slim_ingress({"metadata": {"name": "web"}})["metadata"]
    assert type(record) is IngressRecord and type(view) is MetaView
    assert isinstance(record, Mapping) and isinstance(view, Mapping)
    calls: list[type] = []
    original = type(Mapping).__subclasscheck__

    def counted(cls: Any, sub: type) -> bool:
        calls.append(sub)
        return original(cls, sub)

    type(Mapping).__subclasscheck__ = counted  # type: ignore[method-assign]
    try:
        for _ in range(3):
            assert isinstance(record, Mapping) and isinstance(view, Mapping)
    finally:
        type(Mapping).__subclasscheck__ = original  # type: ignore[method-assign]
    assert calls == []


def _str_or_none(value: object) -> bool:
    return value is None or isinstance(value, str)


def _quick_spec_shape(spec: object) -> bool:
    """Whether ``spec`` has the types a well-formed Ingress spec has, in what slim keeps."""
    if spec is None:
        return True
    if not isinstance(spec, dict) or not _str_or_none(spec.get("ingressClassName")):
        return False
    tls, rules = spec.get("tls", []), spec.get("rules", [])
    return (isinstance(tls, list) and isinstance(rules, list)
            and all(isinstance(t, dict) and isinstance(t.get("hosts", []), list)
                    and all(isinstance(h, str) for h in t.get("hosts", [])) for t in tls)
            and all(isinstance(r, dict) and isinstance(r.get("host", ""), str) for r in rules))


def quick_shape(obj: dict[str, Any]) -> bool:
    """Whether an Ingress has the types a well-formed one has, in what slim keeps: the ones
    ``quick_ingress`` must keep."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not all(
            _str_or_none(meta.get(k)) for k in ("name", "namespace", "uid", "resourceVersion",
                                               "creationTimestamp")):
        return False
    notes = meta.get("annotations")
    if notes is not None and not (isinstance(notes, dict) and isinstance(
            notes.get("kubernetes.io/ingress.class", ""), str)):
        return False
    head = (obj.get("apiVersion", "absent"), obj.get("kind", "absent"))
    return head in (("absent", "absent"), ("networking.k8s.io/v1", "Ingress")) \
        and _quick_spec_shape(obj.get("spec"))


def kept_as_slim_keeps(obj: dict[str, Any]) -> None:
    """``quick_ingress`` of ``obj``'s JSON is None exactly where ``obj`` is not of the shape
    it takes, and else the very record ``slim_ingress`` keeps of ``obj``."""
    got, want = quick_ingress(json.dumps(obj).encode()), slim_ingress(obj)
    assert (got is not None) == quick_shape(obj)
    if got is not None:
        assert type(got) is type(want)
        assert isinstance(got, IngressRecord) and isinstance(want, IngressRecord)
        assert got.fields() == want.fields()
        assert json.dumps(got, default=dict) == json.dumps(want, default=dict)


@settings(max_examples=1000, deadline=None)
@given(ingresses())
def test_an_ingress_kept_straight_from_its_json_is_what_slim_keeps(obj: dict[str, Any]
                                                                   ) -> None:
    """A listed Ingress of a well-formed shape is kept straight from its JSON, as the very
    record slim keeps of it decoded whole; any other is left to be decoded whole."""
    kept_as_slim_keeps(obj)


# Where one value of a well-formed Ingress may be replaced, and with what.
FIELDS = st.sampled_from([
    ("apiVersion",), ("kind",), ("metadata",), ("metadata", "name"), ("metadata", "namespace"),
    ("metadata", "uid"), ("metadata", "resourceVersion"), ("metadata", "creationTimestamp"),
    ("metadata", "annotations"), ("metadata", "annotations", "kubernetes.io/ingress.class"),
    ("spec",), ("spec", "ingressClassName"), ("spec", "tls"), ("spec", "tls", 0),
    ("spec", "tls", 0, "hosts"), ("spec", "tls", 0, "hosts", 0), ("spec", "rules"),
    ("spec", "rules", 0), ("spec", "rules", 0, "host"), ("status",)])
VALUES: st.SearchStrategy[object] = st.one_of(SCALAR, st.just([]), st.just({}), st.just(["x"]),
                                              st.just([{}]))


@settings(max_examples=1000, deadline=None)
@given(FIELDS, VALUES, st.booleans())
def test_one_odd_value_in_a_well_formed_ingress_is_kept_as_slim_keeps_it(
        path: tuple[str | int, ...], value: object, head: bool) -> None:
    """Every field of a well-formed Ingress given a value of another type (null, a number, a
    string, a list or an object): kept straight from the JSON as slim keeps it, or left to be
    decoded whole."""
    obj: dict[str, Any] = {
        "metadata": {"name": "web", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
                     "creationTimestamp": "2026-01-01T00:00:00Z",
                     "annotations": {"kubernetes.io/ingress.class": "nginx", "other": "x"}},
        "spec": {"ingressClassName": "nginx", "tls": [{"hosts": ["a.example.com"]}],
                 "rules": [{"host": "a.example.com"}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}}
    if head:
        obj = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", **obj}
    *parents, last = path
    at: Any = obj
    for key in parents:
        at = at[key]
    at[last] = value
    kept_as_slim_keeps(obj)


def test_an_ingress_as_kubectl_apply_leaves_it_is_kept_straight_from_its_json() -> None:
    """The usual Ingress: fields slim drops (labels, other annotations and the last applied
    copy, managedFields, paths and backends, TLS secrets) are skipped, not refused."""
    obj = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {
        "name": "web", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
        "creationTimestamp": "2026-01-01T00:00:00Z", "generation": 2, "labels": {"app": "web"},
        "annotations": {"kubernetes.io/ingress.class": "nginx",
                        "kubectl.kubernetes.io/last-applied-configuration": '{"a": "\\"b\\""}'},
        "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]},
        "spec": {"rules": [{"host": "shop.example.com", "http": {"paths": [{
            "path": "/", "pathType": "Prefix", "backend": {"service": {
                "name": "web", "port": {"number": 80}}}}]}}],
            "tls": [{"hosts": ["shop.example.com"], "secretName": "web-tls"}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}}
    got = quick_ingress(json.dumps(obj).encode())
    want = slim_ingress(obj)
    assert isinstance(got, IngressRecord) and isinstance(want, IngressRecord)
    assert got.fields() == want.fields() and got == want
    assert got["spec"]["rules"] == [{"host": "shop.example.com"}]
