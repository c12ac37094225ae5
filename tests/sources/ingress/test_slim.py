"""slim_ingress keeps exactly what the policy reads: same verdicts, far fewer bytes."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.policy import HostPolicy
from hairpin_proxy.sources.ingress.policy import CompactSpec, evaluate_ingress
from hairpin_proxy.sources.ingress.record import IngressRecord
from hairpin_proxy.sources.ingress.slim import slim_ingress, trimmed

SCALAR = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8))
HOST = st.one_of(st.sampled_from(["a.example.com", "*.example.com", "10.0.0.1", "x.svc",
                                  "b.example.org", ""]), SCALAR)
ANNOTATIONS = st.one_of(SCALAR, st.dictionaries(
    st.sampled_from(["kubernetes.io/ingress.class", "other/annotation"]),
    st.one_of(st.sampled_from(["nginx", "traefik"]), SCALAR), max_size=2))
META = st.one_of(SCALAR, st.fixed_dictionaries({"name": st.sampled_from(["web", "api"])}, optional={
    "namespace": st.one_of(st.sampled_from(["shop", "default", ""]), SCALAR),
    "uid": st.text(max_size=4), "resourceVersion": st.text(max_size=4),
    "labels": st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
    "managedFields": st.lists(st.dictionaries(st.text(max_size=3), SCALAR), max_size=2),
    "annotations": ANNOTATIONS}))
RULE = st.one_of(SCALAR, st.fixed_dictionaries({}, optional={
    "host": HOST, "http": st.just({"paths": [{"path": "/", "backend": {"service": {
        "name": "web", "port": {"number": 80}}}}]})}))
TLS = st.one_of(SCALAR, st.fixed_dictionaries({}, optional={
    "hosts": st.one_of(SCALAR, st.lists(HOST, max_size=3)), "secretName": st.text(max_size=4)}))
SPEC = st.one_of(SCALAR, st.fixed_dictionaries({}, optional={
    "ingressClassName": st.one_of(st.sampled_from(["nginx", "traefik"]), SCALAR),
    "rules": st.one_of(SCALAR, st.lists(RULE, max_size=3)),
    "tls": st.one_of(SCALAR, st.lists(TLS, max_size=3)),
    "defaultBackend": st.just({"service": {"name": "x", "port": {"number": 1}}})}))
INGRESS = st.fixed_dictionaries({"apiVersion": st.just("networking.k8s.io/v1")}, optional={
    "metadata": META, "spec": SPEC,
    "status": st.just({"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}})})
POLICIES = [HostPolicy(), HostPolicy(hosts_from="all"), HostPolicy(ingress_classes=("nginx",)),
            HostPolicy(hosts_from="rules", include_namespaces=("shop",))]


@settings(max_examples=400, deadline=None)
@given(INGRESS)
def test_the_policy_sees_the_same_ingress(obj: dict[str, Any]) -> None:
    slim = slim_ingress(obj)
    for policy in POLICIES:
        for defaults in (frozenset(), frozenset({"nginx"})):
            assert evaluate_ingress(slim, policy, defaults) == \
                evaluate_ingress(obj, policy, defaults)


def test_what_is_dropped_and_kept() -> None:
    obj = {
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "web", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
                     "creationTimestamp": "2026-01-01T00:00:00Z",
                     "annotations": {"kubernetes.io/ingress.class": "nginx",
                                     "nginx.ingress.kubernetes.io/rewrite-target": "/" * 500},
                     "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:x": {}}}] * 20},
        "spec": {"ingressClassName": "nginx", "tls": [{"hosts": ["a.example.com"],
                                                       "secretName": "tls"}],
                 "rules": [{"host": "a.example.com", "http": {"paths": [{"path": "/"}] * 20}}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}},
    }
    assert slim_ingress(obj) == {
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "web", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
                     "creationTimestamp": "2026-01-01T00:00:00Z",
                     "annotations": {"kubernetes.io/ingress.class": "nginx"}},
        "spec": {"ingressClassName": "nginx", "tls": [{"hosts": ["a.example.com"]}],
                 "rules": [{"host": "a.example.com"}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}},
    }
    # The compact spec reads as the lists and dicts it stands for.
    assert len(json.dumps(slim_ingress(obj), default=dict)) * 5 < len(json.dumps(obj))


def test_a_well_formed_spec_is_compact_and_reads_the_same() -> None:
    spec = {"ingressClassName": "nginx", "tls": [{"hosts": ["a.example.com"]}, {}],
            "rules": [{"host": "a.example.com"}, {"http": {}}]}
    slim = slim_ingress({"metadata": {"name": "web"}, "spec": spec})["spec"]
    assert isinstance(slim, CompactSpec)
    assert slim == {"ingressClassName": "nginx", "tls": [{"hosts": ["a.example.com"]}, {}],
                    "rules": [{"host": "a.example.com"}, {}]}
    assert dict(slim) == slim and len(slim) == 3 and slim.get("missing") is None
    # One string for a host named twice.
    assert slim.tls is not None and slim.rules is not None
    tls_hosts = slim.tls[0]
    assert tls_hosts is not None and tls_hosts[0] is slim.rules[0]


@pytest.mark.parametrize("spec", [
    {"ingressClassName": 7}, {"tls": None}, {"tls": [{"hosts": None}]}, {"tls": ["x"]},
    {"tls": [{"hosts": ["a.example.com", 1]}]}, {"rules": {}}, {"rules": [{"host": None}]},
    {"rules": [None]},
])
def test_a_malformed_spec_is_kept_as_it_came(spec: dict[str, Any]) -> None:
    slim = slim_ingress({"metadata": {"name": "web"}, "spec": spec})["spec"]
    assert type(slim) is dict and slim == spec


def test_repeated_values_are_shared_and_an_empty_status_dropped() -> None:
    def make(name: str, status: dict[str, Any]) -> dict[str, Any]:
        obj: dict[str, Any] = json.loads(json.dumps({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": name, "namespace": "shop"}, "status": status}))
        return obj

    lb = {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}
    a, b = slim_ingress(make("a", lb)), slim_ingress(make("b", lb))
    assert a["metadata"]["namespace"] is b["metadata"]["namespace"]
    assert a["apiVersion"] is b["apiVersion"]
    assert a["status"] is b["status"] and a["status"] == lb
    assert "status" not in slim_ingress(make("c", {"loadBalancer": {}}))


def test_a_cached_ingress_is_one_record_that_reads_as_the_trimmed_dicts() -> None:
    def make(name: str) -> dict[str, Any]:
        obj: dict[str, Any] = json.loads(json.dumps({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": name, "namespace": "shop", "uid": f"u-{name}",
                         "resourceVersion": "7", "creationTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {"app": name}},
            "spec": {"tls": [{"hosts": [f"{name}.example.com"]}],
                     "rules": [{"host": f"{name}.example.com"}]}}))
        return obj

    a, b = slim_ingress(make("a")), slim_ingress(make("b"))
    # Readers may treat it as any mapping (JSON with dict for the rest, copies, `**`); equal
    # to what it stands for.
    assert isinstance(a, IngressRecord) and isinstance(a, Mapping)
    assert isinstance(a["metadata"], Mapping)
    assert json.loads(json.dumps(a, default=dict)) == {
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "a", "namespace": "shop", "uid": "u-a", "resourceVersion": "7",
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"tls": [{"hosts": ["a.example.com"]}], "rules": [{"host": "a.example.com"}]}}
    assert a == trimmed(make("a")) and trimmed(make("a")) == a and a != b
    assert {**a["metadata"], "name": "x"}["name"] == "x" and a["metadata"]["name"] == "a"
    # One object of a few slots, where the dicts took two dicts of their own.
    assert not hasattr(a, "__dict__")
    assert sys.getsizeof(a) < sys.getsizeof(trimmed(make("a"))["metadata"])
    # Values that repeat are one object; the TLS entry naming the rules' hosts is their tuple.
    assert a["metadata"]["creationTimestamp"] is b["metadata"]["creationTimestamp"]
    spec = a["spec"]
    # The usual one host named by a rule and a TLS entry: the host alone stands for both.
    assert isinstance(spec, CompactSpec) and spec.tls is not None and spec.rules is not None
    assert spec.tls == ((spec.rules[0],),) and spec.tls[0][0] is spec.rules[0] is \
        spec.hosts("tls")[0]
    assert not any(isinstance(getattr(spec, slot), tuple) for slot in CompactSpec.__slots__)
    # It cannot be edited (caches replace objects, never edit them).
    record: Any = a
    with pytest.raises((TypeError, AttributeError)):
        record["metadata"] = {}
    with pytest.raises(AttributeError):
        record.labels = {}


def test_only_the_usual_head_makes_a_record() -> None:
    meta = {"name": "web", "namespace": "shop"}
    bare: object = slim_ingress({"metadata": meta})
    assert type(bare) is IngressRecord
    assert isinstance(slim_ingress({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                                    "metadata": meta}), IngressRecord)
    for odd in ({"apiVersion": "networking.k8s.io/v1beta1", "kind": "Ingress"},
                {"kind": "Ingress"}, {"apiVersion": "networking.k8s.io/v1"},
                {"apiVersion": "networking.k8s.io/v1", "kind": "Ingres"}):
        got = slim_ingress({**odd, "metadata": meta})
        assert type(got) is dict and got == {**odd, "metadata": meta}
    bad_metas: tuple[Any, ...] = (None, "x", [])
    for bad_meta in bad_metas:
        assert type(slim_ingress({"metadata": bad_meta})) is dict
    assert type(slim_ingress({"spec": {}})) is dict


def test_a_compact_spec_reads_its_class_with_get() -> None:
    named = slim_ingress({"metadata": {"name": "web"}, "spec": {"ingressClassName": "nginx"}})
    unnamed = slim_ingress({"metadata": {"name": "web"}, "spec": {"rules": []}})
    assert named["spec"].get("ingressClassName") == "nginx"
    assert unnamed["spec"].get("ingressClassName") is None
    assert unnamed["spec"].get("ingressClassName", "none") == "none"
    assert unnamed["spec"].get("rules") == [] and unnamed["spec"].get("tls") is None


ONE_HOST = st.sampled_from(["a.example.com", "*.example.com", "10.0.0.1", "x.svc", "A.Example.com",
                            ""])


@settings(max_examples=200, deadline=None)
@given(rule_host=ONE_HOST, tls_hosts=st.lists(ONE_HOST, max_size=2),
       more_tls=st.booleans(), more_rules=st.booleans(), cls=st.sampled_from([None, "nginx"]))
def test_one_host_shapes_read_as_what_they_stand_for(rule_host: str, tls_hosts: list[str],
                                                     more_tls: bool, more_rules: bool,
                                                     cls: str | None) -> None:
    """A rule and a TLS entry naming one host (the compact form) and every near miss: the
    spec reads as the trimmed original, and the policy's verdicts are the same."""
    spec: dict[str, Any] = {"rules": [{"host": rule_host}] + ([{"http": {}}] if more_rules
                                                                 else []),
                            "tls": [{"hosts": tls_hosts}] + ([{}] if more_tls else [])}
    if cls is not None:
        spec["ingressClassName"] = cls
    obj = {"metadata": {"name": "web", "namespace": "shop"}, "spec": spec}
    slim = slim_ingress(json.loads(json.dumps(obj)))
    assert isinstance(slim["spec"], CompactSpec)
    assert dict(slim["spec"]) == {**({"ingressClassName": cls} if cls else {}),
                                  "rules": [{"host": rule_host}] + ([{}] if more_rules else []),
                                  "tls": [{"hosts": tls_hosts}] + ([{}] if more_tls else [])}
    for policy in POLICIES:
        assert evaluate_ingress(slim, policy, frozenset()) == \
            evaluate_ingress(obj, policy, frozenset())
    # Two compact specs compare as what they stand for (a relist compares them so).
    again = slim_ingress(json.loads(json.dumps(obj)))["spec"]
    other = slim_ingress({"spec": {**spec, "rules": [{"host": "z.example.com"}]}})["spec"]
    assert again == slim["spec"] and (other == slim["spec"]) == (dict(other) == dict(slim["spec"]))
