"""Services written by a client: cluster IP allocation (single and dual stack), ownerReferences
and label-selected lists."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2 as httpx
import pytest

from tests.fakeapi.fixtures import configmap, service
from tests.fakeapi.server import FakeApiServer

SVCS = "/api/v1/namespaces/default/services"


@pytest.fixture
def dual() -> Iterator[httpx.Client]:
    with FakeApiServer(service_cidrs=("10.96.0.0/16", "fd00:10:96::/112")) as api, \
            httpx.Client(base_url=api.url, timeout=10) as c:
        yield c


def test_single_stack_defaults(http: httpx.Client) -> None:
    spec = http.post(SVCS, json=service("default", "a")).json()["spec"]
    assert spec["ipFamilies"] == ["IPv4"] and spec["ipFamilyPolicy"] == "SingleStack"
    assert spec["clusterIPs"] == [spec["clusterIP"]]
    r = http.post(SVCS, json={**service("default", "b"), "spec": {
        **service("default", "b")["spec"], "ipFamilyPolicy": "RequireDualStack"}})
    assert r.status_code == 422
    assert "this cluster is not configured for dual-stack services" in r.json()["message"]
    preferred = http.post(SVCS, json={**service("default", "c"), "spec": {
        **service("default", "c")["spec"], "ipFamilyPolicy": "PreferDualStack"}}).json()
    assert preferred["spec"]["ipFamilies"] == ["IPv4"]
    assert len(preferred["spec"]["clusterIPs"]) == 1


def test_requested_address_must_be_free_and_in_range(http: httpx.Client) -> None:
    assert http.post(SVCS, json=service("default", "a", cluster_ips=["10.96.5.5"])) \
        .status_code == 201
    taken = http.post(SVCS, json=service("default", "b", cluster_ips=["10.96.5.5"]))
    assert taken.status_code == 422 and "provided IP is already allocated" in \
        taken.json()["message"]
    outside = http.post(SVCS, json=service("default", "c", cluster_ips=["192.0.2.1"]))
    assert outside.status_code == 422 and "not in the valid range" in outside.json()["message"]
    # Deleting the Service frees its address.
    assert http.delete(f"{SVCS}/a").status_code == 200
    assert http.post(SVCS, json=service("default", "b", cluster_ips=["10.96.5.5"])) \
        .status_code == 201


def test_dual_stack_allocation(dual: httpx.Client) -> None:
    body = service("default", "a")
    body["spec"]["ipFamilyPolicy"] = "RequireDualStack"
    spec = dual.post(SVCS, json=body).json()["spec"]
    assert spec["ipFamilies"] == ["IPv4", "IPv6"]
    assert ":" not in spec["clusterIPs"][0] and ":" in spec["clusterIPs"][1]
    assert spec["clusterIP"] == spec["clusterIPs"][0]
    six = service("default", "b")
    six["spec"]["ipFamilies"] = ["IPv6"]
    spec6 = dual.post(SVCS, json=six).json()["spec"]
    assert spec6["ipFamilyPolicy"] == "SingleStack" and ":" in spec6["clusterIP"]
    given = dual.post(SVCS, json=service("default", "c",
                                         cluster_ips=["fd00:10:96::77", "10.96.0.77"])).json()
    assert given["spec"]["ipFamilies"] == ["IPv6", "IPv4"]
    assert given["spec"]["ipFamilyPolicy"] == "RequireDualStack"
    same = dual.post(SVCS, json=service("default", "d", cluster_ips=["10.96.0.78",
                                                                      "10.96.0.79"]))
    assert same.status_code == 422
    assert "may specify no more than one IP for each IP family" in same.json()["message"]


def test_updates_keep_addresses_and_refuse_to_change_them(dual: httpx.Client) -> None:
    created = dual.post(SVCS, json=service("default", "a")).json()
    ip = created["spec"]["clusterIP"]
    # A PUT of a body built from scratch (no clusterIP) keeps the allocated address.
    fresh = service("default", "a", labels={"v": "2"})
    fresh["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    kept = dual.put(f"{SVCS}/a", json=fresh).json()
    assert kept["spec"]["clusterIP"] == ip and kept["spec"]["clusterIPs"] == [ip]
    moved = dict(kept)
    moved["spec"] = {**kept["spec"], "clusterIP": "10.96.9.9", "clusterIPs": ["10.96.9.9"]}
    r = dual.put(f"{SVCS}/a", json=moved)
    assert r.status_code == 422 and "may not change once set" in r.json()["message"]
    # Upgrading to dual stack adds a second address and keeps the first.
    up = dual.patch(f"{SVCS}/a", headers={"Content-Type": "application/merge-patch+json"},
                    json={"spec": {"ipFamilyPolicy": "PreferDualStack", "ipFamilies": None,
                                   "clusterIPs": None}}).json()
    assert up["spec"]["clusterIPs"][0] == ip and len(up["spec"]["clusterIPs"]) == 2


def test_owner_references_are_kept_and_selectors_list(http: httpx.Client,
                                                      fake_api: FakeApiServer) -> None:
    cm = http.post("/api/v1/namespaces/default/configmaps",
                   json=configmap("default", "targets", labels={"app": "hp"})).json()
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "targets",
             "uid": cm["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    body = service("default", "hp-t1", labels={"app": "hp", "slot": "1"})
    body["metadata"]["ownerReferences"] = [owner]
    made = http.post(SVCS, json=body).json()
    assert made["metadata"]["ownerReferences"] == [owner]
    http.post(SVCS, json=service("default", "other", labels={"app": "x"})).raise_for_status()
    listed = http.get(SVCS, params={"labelSelector": "app=hp,slot in (1,2)"}).json()
    assert [i["metadata"]["name"] for i in listed["items"]] == ["hp-t1"]
    assert listed["items"][0]["metadata"]["ownerReferences"] == [owner]
    cms = http.get("/api/v1/namespaces/default/configmaps",
                   params={"labelSelector": "app=hp"}).json()
    assert [i["metadata"]["name"] for i in cms["items"]] == ["targets"]
    assert http.get(SVCS, params={"labelSelector": "app!=hp"}).json()["items"][0][
        "metadata"]["name"] == "other"
    # Updates and deletes by the client.
    made["metadata"]["labels"]["slot"] = "2"
    assert http.put(f"{SVCS}/hp-t1", json=made).json()["metadata"]["ownerReferences"] == [owner]
    assert http.delete(f"{SVCS}/hp-t1").status_code == 200
    assert fake_api.get("services", "default", "hp-t1") is None


def test_direct_create_keeps_any_given_addresses(fake_api: FakeApiServer) -> None:
    # Tests plant Services of other cluster shapes (here dual stack on a single-stack fake).
    svc = fake_api.create(service("default", "s", cluster_ips=["10.96.7.7", "fd00::7"]))
    assert svc["spec"]["clusterIPs"] == ["10.96.7.7", "fd00::7"]
    assert svc["spec"]["ipFamilies"] == ["IPv4", "IPv6"]
