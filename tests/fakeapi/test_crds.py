"""Custom resources on the fake: install/uninstall at run time, discovery, versions, watches."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx2 as httpx
import pytest

from tests.fakeapi import crds
from tests.fakeapi.fixtures import gateway, gateway_class, route
from tests.fakeapi.resources import storage_version_hash, version_order
from tests.fakeapi.server import FakeApiServer
from tests.waiting import PATIENCE

Obj = dict[str, Any]
GW = "/apis/gateway.networking.k8s.io/v1"
GWS = f"{GW}/namespaces/default/gateways"
ROUTES = f"{GW}/namespaces/default/httproutes"


def not_found_status(r: httpx.Response) -> None:
    assert r.status_code == 404
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {},
                        "status": "Failure",
                        "message": "the server could not find the requested resource",
                        "reason": "NotFound", "details": {}, "code": 404}


def test_gateway_api_is_absent_until_installed(http: httpx.Client,
                                               fake_api: FakeApiServer) -> None:
    not_found_status(http.get(GWS))
    not_found_status(http.get(GW))
    not_found_status(http.get("/apis/gateway.networking.k8s.io"))
    groups = [g["name"] for g in http.get("/apis").json()["groups"]]
    assert crds.GATEWAY_GROUP not in groups
    fake_api.install_gateway_api("1.4")
    assert http.get(GWS).status_code == 200
    groups = [g["name"] for g in http.get("/apis").json()["groups"]]
    assert crds.GATEWAY_GROUP in groups
    # Custom groups come after the built-in ones, as the aggregator's priorities order them.
    assert groups.index(crds.GATEWAY_GROUP) > groups.index("apps")


def test_group_discovery_prefers_the_highest_version(http: httpx.Client,
                                                     fake_api: FakeApiServer) -> None:
    fake_api.install_gateway_api("1.4", "experimental")
    group = http.get("/apis/gateway.networking.k8s.io").json()
    assert group["kind"] == "APIGroup" and group["apiVersion"] == "v1"
    assert [v["version"] for v in group["versions"]] == ["v1", "v1beta1", "v1alpha3",
                                                         "v1alpha2"]
    assert group["preferredVersion"] == {"groupVersion": "gateway.networking.k8s.io/v1",
                                         "version": "v1"}
    listed = next(g for g in http.get("/apis").json()["groups"]
                  if g["name"] == crds.GATEWAY_GROUP)
    assert listed == {k: group[k] for k in ("name", "versions", "preferredVersion")}


def test_version_discovery_lists_kinds_scopes_verbs_and_status(
        http: httpx.Client, fake_api: FakeApiServer) -> None:
    fake_api.install_gateway_api("1.4")
    body = http.get(GW).json()
    assert body["kind"] == "APIResourceList" and body["groupVersion"] == f"{crds.GATEWAY_GROUP}/v1"
    by_name = {r["name"]: r for r in body["resources"]}
    assert set(by_name) == {"gatewayclasses", "gatewayclasses/status", "gateways",
                            "gateways/status", "httproutes", "httproutes/status", "grpcroutes",
                            "grpcroutes/status"}
    gc = by_name["gatewayclasses"]
    assert gc == {"name": "gatewayclasses", "singularName": "gatewayclass", "namespaced": False,
                  "kind": "GatewayClass",
                  "verbs": ["delete", "deletecollection", "get", "list", "patch", "create",
                            "update", "watch"],
                  "shortNames": ["gc"], "categories": ["gateway-api"],
                  "storageVersionHash": storage_version_hash(crds.GATEWAY_GROUP, "v1",
                                                             "GatewayClass")}
    assert by_name["gateways"]["namespaced"] is True
    assert by_name["gateways/status"] == {"name": "gateways/status", "singularName": "",
                                          "namespaced": True, "kind": "Gateway",
                                          "verbs": ["get", "patch", "update"]}
    # ReferenceGrant is served at v1beta1 only in 1.4, without a status subresource.
    beta = {r["name"] for r in http.get(f"/apis/{crds.GATEWAY_GROUP}/v1beta1")
            .json()["resources"]}
    assert "referencegrants" in beta and "referencegrants/status" not in beta
    assert "grpcroutes" not in beta


@pytest.mark.parametrize(("release", "channel", "served"), [
    ("1.2", "standard", None),
    ("1.3", "experimental", ["v1alpha2"]),
    ("1.4", "standard", None),
    ("1.4", "experimental", ["v1alpha3", "v1alpha2"]),
    ("1.5", "standard", ["v1"]),
    ("1.6", "experimental", ["v1", "v1alpha3", "v1alpha2"]),
])
def test_tlsroute_versions_follow_the_release(fake_api: FakeApiServer, http: httpx.Client,
                                              release: str, channel: str,
                                              served: list[str] | None) -> None:
    fake_api.install_gateway_api(release, channel)
    found = []
    for v in ("v1", "v1alpha3", "v1alpha2"):
        r = http.get(f"/apis/gateway.networking.k8s.io/{v}/namespaces/default/tlsroutes")
        if r.status_code == 200:
            found.append(v)
        else:
            not_found_status(r)
    assert found == (served or [])


def test_deprecated_version_answers_with_a_warning(fake_api: FakeApiServer,
                                                   http: httpx.Client) -> None:
    fake_api.install_gateway_api("1.5", "experimental")
    old = http.get("/apis/gateway.networking.k8s.io/v1alpha2/namespaces/default/tlsroutes")
    assert old.status_code == 200
    assert old.headers["warning"].startswith('299 - "The v1alpha2 version of TLSRoute has been '
                                             "deprecated")
    new = http.get("/apis/gateway.networking.k8s.io/v1/namespaces/default/tlsroutes")
    assert "warning" not in new.headers


def test_versions_share_one_storage(fake_api: FakeApiServer, http: httpx.Client) -> None:
    fake_api.install_gateway_api("1.4", "experimental")
    v2 = "/apis/gateway.networking.k8s.io/v1alpha2/namespaces/default/tlsroutes"
    v3 = "/apis/gateway.networking.k8s.io/v1alpha3/namespaces/default/tlsroutes"
    made = http.post(v2, json=route("TLSRoute", "default", "t", hostnames=["a.example.com"],
                                    parent="gw",
                                    api_version="gateway.networking.k8s.io/v1alpha2"))
    assert made.status_code == 201
    assert made.json()["apiVersion"] == "gateway.networking.k8s.io/v1alpha2"
    seen = http.get(f"{v3}/t").json()
    assert seen["apiVersion"] == "gateway.networking.k8s.io/v1alpha3"
    assert seen["metadata"]["uid"] == made.json()["metadata"]["uid"]
    listed = http.get(v3).json()
    assert listed["kind"] == "TLSRouteList"
    assert listed["apiVersion"] == "gateway.networking.k8s.io/v1alpha3"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["t"]
    # A custom resource's list is unstructured: its items keep apiVersion (the version asked
    # for) and kind, where a built-in type's items have neither (test_server's list shape).
    assert [(i["apiVersion"], i["kind"]) for i in listed["items"]] == [
        ("gateway.networking.k8s.io/v1alpha3", "TLSRoute")]
    # A body whose apiVersion is not the path's is refused.
    wrong = http.post(v3, json=route("TLSRoute", "default", "u", api_version=(
        "gateway.networking.k8s.io/v1alpha2")))
    assert wrong.status_code == 400
    assert fake_api.get("tlsroutes", "default", "t") is not None


def test_generation_counts_every_change_but_metadata_and_status(
        fake_api: FakeApiServer, http: httpx.Client) -> None:
    fake_api.install_gateway_api("1.4")
    body = gateway("default", "gw", "eg")
    body["status"] = {"conditions": [{"type": "Programmed", "status": "True"}]}
    r = http.post(GWS, json=body)
    gw = r.json()
    assert gw["metadata"]["generation"] == 1 and "status" not in gw  # create drops status
    gw["metadata"]["labels"] = {"a": "b"}
    gw = http.put(f"{GWS}/gw", json=gw).json()
    assert gw["metadata"]["generation"] == 1
    gw["spec"]["listeners"][0]["port"] = 8080
    gw = http.put(f"{GWS}/gw", json=gw).json()
    assert gw["metadata"]["generation"] == 2
    # A top-level field other than spec counts too (the CRD strategy compares all content).
    gw["extra"] = {"x": 1}
    gw = http.put(f"{GWS}/gw", json=gw).json()
    assert gw["metadata"]["generation"] == 3
    status = {"conditions": [{"type": "Accepted", "status": "True"}]}
    after = http.put(f"{GWS}/gw/status", json={**gw, "status": status}).json()
    assert after["status"] == status and after["metadata"]["generation"] == 3
    assert int(after["metadata"]["resourceVersion"]) > int(gw["metadata"]["resourceVersion"])


def test_status_subresource_separates_status_from_the_rest(
        fake_api: FakeApiServer, http: httpx.Client) -> None:
    fake_api.install_gateway_api("1.4")
    http.post(GWS, json=gateway("default", "gw", "eg")).raise_for_status()
    patched = http.patch(f"{GWS}/gw/status", headers={
        "Content-Type": "application/merge-patch+json"}, content=json.dumps({
            "status": {"addresses": [{"type": "IPAddress", "value": "203.0.113.9"}]},
            "spec": {"gatewayClassName": "changed"},
            "metadata": {"labels": {"ignored": "yes"}}}))
    assert patched.status_code == 200
    obj = patched.json()
    assert obj["status"]["addresses"][0]["value"] == "203.0.113.9"
    assert obj["spec"]["gatewayClassName"] == "eg"
    assert "labels" not in obj["metadata"]
    # A write of the main resource keeps the status it had.
    obj["status"] = {}
    obj["spec"]["gatewayClassName"] = "other"
    put = http.put(f"{GWS}/gw", json=obj).json()
    assert put["status"]["addresses"][0]["value"] == "203.0.113.9"
    assert put["spec"]["gatewayClassName"] == "other"
    # NginxProxy has no status subresource: /status is 404 and status is ordinary content.
    fake_api.install(crds.NGINX_PROXY)
    nps = "/apis/gateway.nginx.org/v1alpha2/namespaces/default/nginxproxies"
    np = http.post(nps, json={"apiVersion": "gateway.nginx.org/v1alpha2", "kind": "NginxProxy",
                              "metadata": {"name": "p"}, "spec": {}, "status": {"s": 1}})
    assert np.status_code == 201 and np.json()["status"] == {"s": 1}
    assert http.get(f"{nps}/p/status").status_code == 404


def test_put_without_resource_version_is_invalid_for_custom_resources(
        fake_api: FakeApiServer, http: httpx.Client) -> None:
    fake_api.install_gateway_api("1.4")
    http.post(GWS, json=gateway("default", "gw", "eg")).raise_for_status()
    r = http.put(f"{GWS}/gw", json=gateway("default", "gw", "other"))
    assert r.status_code == 422
    assert r.json()["message"] == ('Gateway.gateway.networking.k8s.io "gw" is invalid: '
                                   "metadata.resourceVersion: Invalid value: 0x0: must be "
                                   "specified for an update")
    stale = gateway("default", "gw", "other")
    stale["metadata"]["resourceVersion"] = "1"
    assert http.put(f"{GWS}/gw", json=stale).status_code == 409
    missing = http.put(f"{GWS}/nope", json=gateway("default", "nope", "x"))
    assert missing.status_code == 404
    assert missing.json()["message"] == 'gateways.gateway.networking.k8s.io "nope" not found'


def test_cluster_scoped_gatewayclass(fake_api: FakeApiServer, http: httpx.Client) -> None:
    fake_api.install_gateway_api("1.4")
    classes = f"{GW}/gatewayclasses"
    r = http.post(classes, json=gateway_class("eg"))
    assert r.status_code == 201 and "namespace" not in r.json()["metadata"]
    assert http.get(f"{GW}/namespaces/default/gatewayclasses").status_code == 404
    assert fake_api.get("gc", None, "eg") is not None
    old = http.get("/apis/gateway.networking.k8s.io/v1beta1/gatewayclasses/eg").json()
    assert old["apiVersion"] == "gateway.networking.k8s.io/v1beta1"


def test_list_selectors_and_pages(fake_api: FakeApiServer, http: httpx.Client) -> None:
    fake_api.install_gateway_api("1.4")
    for i in range(5):
        fake_api.create(gateway("default", f"gw{i}", "eg", labels={"n": str(i % 2)}))
    fake_api.create(gateway("other", "gw9", "eg", labels={"n": "1"}))
    odd = http.get(GWS, params={"labelSelector": "n=1"}).json()
    assert [i["metadata"]["name"] for i in odd["items"]] == ["gw1", "gw3"]
    named = http.get(f"{GW}/gateways", params={"fieldSelector": "metadata.name=gw9"}).json()
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in named["items"]] == [
        ("other", "gw9")]
    assert http.get(GWS, params={"fieldSelector": "spec.gatewayClassName=eg"}).status_code == 400
    page = http.get(GWS, params={"limit": "2"}).json()
    assert len(page["items"]) == 2 and page["metadata"]["remainingItemCount"] == 3
    fake_api.delete("gateways", "default", "gw4")
    rest = http.get(GWS, params={"limit": "10", "continue": page["metadata"]["continue"]}).json()
    # The continuation serves the snapshot of the first page: gw4 is still there.
    assert [i["metadata"]["name"] for i in rest["items"]] == ["gw2", "gw3", "gw4"]


def read_events(resp: httpx.Response) -> list[Obj]:
    return [json.loads(line) for line in resp.iter_lines() if line.strip()]


def test_uninstall_deletes_objects_ends_watches_and_404s(fake_api: FakeApiServer,
                                                         http: httpx.Client) -> None:
    fake_api.install_gateway_api("1.4")
    fake_api.create(gateway("default", "a", "eg"))
    fake_api.create(route("HTTPRoute", "default", "r", hostnames=["x.example.com"], parent="a"))
    rv = fake_api.resource_version
    got: list[Obj] = []
    ended = threading.Event()

    def watch() -> None:
        with httpx.Client(base_url=fake_api.url, timeout=10) as c, c.stream(
                "GET", GWS, params={"watch": "true", "resourceVersion": rv,
                                    "timeoutSeconds": "30"}) as resp:
            got.extend(read_events(resp))
        ended.set()

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    fake_api.wait_for(lambda: fake_api.open_watches == 1)
    assert fake_api.uninstall_crd(crds.GATEWAY_GROUP, "gateways") is True
    assert ended.wait(PATIENCE), "the watch of a removed definition must end"
    t.join(5)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in got] == [("DELETED", "a")]
    assert got[0]["object"]["apiVersion"] == "gateway.networking.k8s.io/v1"
    not_found_status(http.get(GWS))
    not_found_status(http.get(GWS, params={"watch": "true"}))
    assert "gateways" not in {r["name"] for r in http.get(GW).json()["resources"]}
    # Other kinds of the group are untouched; a reinstalled definition starts empty.
    assert fake_api.get("httproutes", "default", "r") is not None
    fake_api.install_gateway_api("1.4")
    assert http.get(GWS).json()["items"] == []


def test_uninstalling_the_last_kind_of_a_group_removes_the_group(
        fake_api: FakeApiServer, http: httpx.Client) -> None:
    fake_api.install(crds.ENVOY_CLIENT_TRAFFIC_POLICY)
    assert http.get("/apis/gateway.envoyproxy.io/v1alpha1").json()["resources"][0][
        "shortNames"] == ["ctp"]
    fake_api.uninstall_crd("gateway.envoyproxy.io", "clienttrafficpolicies")
    not_found_status(http.get("/apis/gateway.envoyproxy.io"))
    not_found_status(http.get("/apis/gateway.envoyproxy.io/v1alpha1"))
    assert "gateway.envoyproxy.io" not in [g["name"] for g in http.get("/apis").json()["groups"]]
    assert fake_api.installed_crds() == []


def test_finalizers_keep_a_definition_terminating(fake_api: FakeApiServer,
                                                  http: httpx.Client) -> None:
    fake_api.install_gateway_api("1.4")
    held = gateway("default", "held", "eg")
    held["metadata"]["finalizers"] = ["example.com/hold"]
    fake_api.create(held)
    assert fake_api.uninstall_crd(crds.GATEWAY_GROUP, "gateways") is False
    assert f"gateways.{crds.GATEWAY_GROUP}" in fake_api.installed_crds()
    entry = next(r for r in http.get(GW).json()["resources"] if r["name"] == "gateways")
    assert entry["verbs"] == ["delete", "deletecollection", "get", "list", "watch"]
    refused = http.post(GWS, json=gateway("default", "new", "eg"))
    assert refused.status_code == 405
    assert refused.json()["message"] == ("create not allowed while custom resource definition "
                                         "is terminating")
    obj = http.get(f"{GWS}/held").json()
    assert obj["metadata"]["deletionTimestamp"]
    obj["metadata"]["finalizers"] = []
    assert http.put(f"{GWS}/held", json=obj).status_code == 200
    assert f"gateways.{crds.GATEWAY_GROUP}" not in fake_api.installed_crds()
    not_found_status(http.get(GWS))


def test_reapplying_a_changed_definition_keeps_objects_and_ends_watches(
        fake_api: FakeApiServer, http: httpx.Client) -> None:
    fake_api.install_gateway_api("1.3", "experimental")
    fake_api.create(route("TLSRoute", "default", "t", hostnames=["a.example.com"],
                          api_version="gateway.networking.k8s.io/v1alpha2"))
    v2 = "/apis/gateway.networking.k8s.io/v1alpha2/namespaces/default/tlsroutes"
    ended = threading.Event()

    def watch() -> None:
        with httpx.Client(base_url=fake_api.url, timeout=10) as c, c.stream(
                "GET", v2, params={"watch": "true", "timeoutSeconds": "30"}) as resp:
            read_events(resp)
        ended.set()

    threading.Thread(target=watch, daemon=True).start()
    fake_api.wait_for(lambda: fake_api.open_watches == 1)
    fake_api.install_gateway_api("1.4", "experimental")  # the upgrade adds v1alpha3
    assert ended.wait(PATIENCE)
    t = http.get("/apis/gateway.networking.k8s.io/v1alpha3/namespaces/default/tlsroutes/t")
    assert t.status_code == 200 and t.json()["spec"]["hostnames"] == ["a.example.com"]


def test_install_crd_with_plain_arguments(fake_api: FakeApiServer, http: httpx.Client) -> None:
    spec = fake_api.install_crd("example.com", ["v1", "v2beta1", "v1beta1"], "widgets",
                                "Widget", namespaced=False, served=["v1", "v2beta1"])
    assert spec.storage == "v1"  # GA before beta, whatever the numbers
    group = http.get("/apis/example.com").json()
    assert [v["version"] for v in group["versions"]] == ["v1", "v2beta1"]
    assert http.get("/apis/example.com/v1beta1/widgets").status_code == 404
    made = http.post("/apis/example.com/v2beta1/widgets", json={
        "apiVersion": "example.com/v2beta1", "kind": "Widget", "metadata": {"name": "w"}})
    assert made.status_code == 201
    assert fake_api.get("widgets.v1.example.com", None, "w") is not None
    with pytest.raises(KeyError):
        fake_api.uninstall_crd("example.com", "gadgets")
    with pytest.raises(ValueError):
        fake_api.install_crd("nodots", "v1", "things", "Thing")


def test_kube_aware_version_order() -> None:
    versions = ["v1alpha1", "v2", "v1beta2", "foo", "v1", "v1beta10", "v11alpha2", "v10"]
    assert sorted(versions, key=version_order) == [
        "v10", "v2", "v1", "v1beta10", "v1beta2", "v11alpha2", "v1alpha1", "foo"]


def test_aggregated_discovery_alone_is_not_acceptable(fake_api: FakeApiServer,
                                                      http: httpx.Client) -> None:
    fake_api.install_gateway_api("1.4")
    aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    alone = http.get("/apis", headers={"Accept": aggregated})
    assert alone.status_code == 406 and alone.json()["reason"] == "NotAcceptable"
    both = http.get("/apis", headers={"Accept": f"{aggregated},application/json"})
    assert both.status_code == 200 and both.json()["kind"] == "APIGroupList"
    assert both.headers["content-type"] == "application/json"
    assert http.get(GW, headers={"Accept": "application/json"}).status_code == 200
    assert http.get(GW, headers={"Accept": "*/*"}).status_code == 200


def test_watch_of_a_custom_resource_sees_changes(fake_api: FakeApiServer) -> None:
    fake_api.install_gateway_api("1.4")
    rv = fake_api.resource_version
    fake_api.create(gateway("default", "gw", "eg"))
    fake_api.patch("gateways", "default", "gw", {"spec": {"gatewayClassName": "x"}})
    with httpx.Client(base_url=fake_api.url, timeout=10) as c, c.stream(
            "GET", GWS, params={"watch": "true", "resourceVersion": rv,
                                "timeoutSeconds": "1"}) as resp:
        got = read_events(resp)
    assert [(e["type"], e["object"]["metadata"]["generation"]) for e in got] == [
        ("ADDED", 1), ("MODIFIED", 2)]
