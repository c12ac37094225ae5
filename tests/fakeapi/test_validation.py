"""Objects a real API server refuses are refused here too, with the same codes and fields."""

from __future__ import annotations

from typing import Any

import httpx2 as httpx
import pytest

from tests.fakeapi.fixtures import configmap, ingress
from tests.fakeapi.server import FakeApiServer
from tests.fakeapi.status import ApiError

Obj = dict[str, Any]
ING = "/apis/networking.k8s.io/v1/namespaces/default/ingresses"
CM = "/api/v1/namespaces/default/configmaps"


def _causes(r: httpx.Response) -> list[str]:
    assert r.status_code == 422, r.text
    return [c["field"] for c in r.json()["details"]["causes"]]


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"rule_hosts": ["10.0.0.1"]}, "spec.rules[0].host"),
    ({"rule_hosts": ["Upper.example.com"]}, "spec.rules[0].host"),
    ({"rule_hosts": ["a.*.example.com"]}, "spec.rules[0].host"),
    ({"rule_hosts": ["ok.example.com"], "tls_hosts": ["bad_host.example.com"]},
     "spec.tls[0].hosts[0]"),
    ({"class_name": "Not Valid"}, "spec.ingressClassName"),
])
def test_ingress_hosts_are_validated(http: httpx.Client, kwargs: Any, field: str) -> None:
    r = http.post(ING, json=ingress("default", "web", **kwargs))
    assert _causes(r) == [field]
    assert r.json()["message"].startswith('Ingress.networking.k8s.io "web" is invalid: ')


def test_wildcard_ingress_hosts_are_accepted(http: httpx.Client) -> None:
    r = http.post(ING, json=ingress("default", "web", rule_hosts=["*.example.com"],
                                    tls_hosts=["*.example.com"]))
    assert r.status_code == 201


def test_ingress_paths_need_a_type_and_a_backend(http: httpx.Client) -> None:
    body = ingress("default", "web", rule_hosts=["a.example.com"])
    path = body["spec"]["rules"][0]["http"]["paths"][0]
    del path["pathType"]
    path["backend"] = {}
    assert _causes(http.post(ING, json=body)) == [
        "spec.rules[0].http.paths[0].pathType", "spec.rules[0].http.paths[0].backend"]
    body["spec"] = {}
    assert _causes(http.post(ING, json=body)) == ["spec"]


def test_immutable_configmaps_refuse_data_changes(http: httpx.Client) -> None:
    cm = configmap("default", "c", {"k": "v"})
    cm["immutable"] = True
    created = http.post(CM, json=cm).json()
    created["data"] = {"k": "changed"}
    assert _causes(http.put(f"{CM}/c", json=created)) == ["data"]
    created["metadata"]["labels"] = {"allowed": "yes"}
    created["data"] = {"k": "v"}
    assert http.put(f"{CM}/c", json=created).status_code == 200


def test_configmap_size_limit(http: httpx.Client) -> None:
    r = http.post(CM, json=configmap("default", "big", {"k": "x" * (1024 * 1024)}))
    assert r.status_code == 422
    assert http.post(CM, json=configmap("default", "c", {"k": "x" * 1000})).status_code == 201


def test_label_values_are_validated(http: httpx.Client) -> None:
    r = http.post(CM, json=configmap("default", "c", labels={"app": "not valid!"}))
    assert _causes(r) == ["metadata.labels"]
    r = http.post(CM, json={"metadata": {"name": "c", "labels": {"app": 3}}})
    assert r.status_code == 400


def _core_event(namespace: str, **extra: Any) -> Obj:
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": "web.", "namespace": "default"},
        "involvedObject": {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                           "name": "web", "namespace": namespace},
        "reason": "HostRejected", "message": "m", "type": "Warning",
        "source": {"component": "hairpin-proxy"}, **extra,
    }


def test_core_events(http: httpx.Client) -> None:
    path = "/api/v1/namespaces/default/events"
    assert http.post(path, json=_core_event("default")).status_code == 201
    assert _causes(http.post(path, json=_core_event("other"))) == ["involvedObject.namespace"]
    http.post("/api/v1/namespaces", json={"metadata": {"name": "shop"}}).raise_for_status()
    elsewhere = _core_event("")
    elsewhere["metadata"]["namespace"] = "shop"
    r = http.post("/api/v1/namespaces/shop/events", json=elsewhere)
    assert _causes(r) == ["involvedObject.namespace"]
    assert _causes(http.post(path, json=_core_event("default", type="Bad"))) == ["type"]
    r = http.post(path, json=_core_event("default", eventTime="2024-05-01T10:00:00.000000Z"))
    assert set(_causes(r)) == {"reportingComponent", "reportingInstance", "action"}


def test_events_api_events(http: httpx.Client) -> None:
    path = "/apis/events.k8s.io/v1/namespaces/default/events"
    good = {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"generateName": "web.", "namespace": "default"},
        "eventTime": "2024-05-01T10:00:00.123456Z", "reportingController": "hairpin-proxy",
        "reportingInstance": "hairpin-proxy-0", "action": "Reconcile",
        "reason": "HostRejected", "type": "Warning", "note": "m",
        "regarding": {"kind": "Ingress", "name": "web", "namespace": "default"},
    }
    assert http.post(path, json=good).status_code == 201
    bad = {k: v for k, v in good.items() if k not in ("eventTime", "action")}
    assert set(_causes(http.post(path, json=bad))) == {"eventTime", "action"}
    assert http.post(path, json={**good, "eventTime": "yesterday"}).status_code == 400


def test_lease_times_must_parse(http: httpx.Client) -> None:
    path = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
    lease: Obj = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "hairpin-proxy"},
             "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15,
                      "renewTime": "2024-05-01T10:00:00.000000Z"}}
    assert http.put(f"{path}/hairpin-proxy", json=lease).status_code == 201  # create on update
    for bad in ("2024-05-01 10:00:00", "2024-05-01T10:00:00Z", "2024-05-01T10:00:00.123Z"):
        lease["spec"]["renewTime"] = bad
        r = http.put(f"{path}/hairpin-proxy", json=lease)
        assert r.status_code == 400, bad
        assert r.json()["message"].startswith('Lease in version "v1" cannot be handled as a Lease')
    lease["spec"]["renewTime"] = "2024-05-01T10:00:00.000001+00:00"
    assert http.put(f"{path}/hairpin-proxy", json=lease).status_code == 200


def test_direct_writes_are_validated_too(fake_api: FakeApiServer) -> None:
    with pytest.raises(ApiError) as err:
        fake_api.create(ingress("default", "web", rule_hosts=["192.0.2.1"]))
    assert err.value.code == 422
    assert fake_api.get("ingresses", "default", "web") is None
