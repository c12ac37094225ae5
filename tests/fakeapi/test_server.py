"""The fake API server's wire behaviour, checked over raw HTTP."""

from __future__ import annotations

import functools
import json
import random
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import httpx2 as httpx
import pytest

from tests.fakeapi.fixtures import configmap, deployment, ingress, service
from tests.fakeapi.server import FakeApiServer
from tests.fakeapi.store import Clock

Obj = dict[str, Any]
CM = "/api/v1/namespaces/default/configmaps"
ING = "/apis/networking.k8s.io/v1/namespaces/default/ingresses"


def events(lines: Iterator[str], n: int) -> list[Obj]:
    out = []
    for line in lines:
        out.append(json.loads(line))
        if len(out) == n:
            break
    return out


# --- objects -----------------------------------------------------------------------------


def test_create_sets_server_fields_and_answers_201(http: httpx.Client) -> None:
    r = http.post(ING, json=ingress("default", "web", rule_hosts=["a.example.com"]))
    assert r.status_code == 201
    assert r.headers["content-type"] == "application/json"
    md = r.json()["metadata"]
    assert isinstance(md["resourceVersion"], str)
    assert md["uid"] and md["creationTimestamp"].endswith("Z")
    assert md["generation"] == 1
    assert md["namespace"] == "default"
    cm = http.post(CM, json=configmap("default", "c", {"k": "v"})).json()
    assert "generation" not in cm["metadata"]
    assert int(cm["metadata"]["resourceVersion"]) > int(md["resourceVersion"])


def test_the_clock_never_goes_back_and_next_second_makes_objects_younger(
        fake_api: FakeApiServer, http: httpx.Client) -> None:
    wall = [1_800_000_000.9]
    clock = Clock(lambda: wall[0])
    assert clock.now() == 1_800_000_000
    wall[0] -= 5  # the machine's clock stepped back
    assert clock.now() == 1_800_000_000
    clock.next_second()
    assert clock.now() == 1_800_000_001
    wall[0] = 1_800_000_010.2
    assert clock.rfc3339() == "2027-01-15T08:00:10Z"
    # Through the API: an object created after next_second() is a second younger.
    first = http.post(ING, json=ingress("default", "a")).json()["metadata"]
    fake_api.next_second()
    second = http.post(ING, json=ingress("default", "b")).json()["metadata"]
    older = datetime.fromisoformat(first["creationTimestamp"])
    assert datetime.fromisoformat(second["creationTimestamp"]) - older >= timedelta(seconds=1)


def test_create_fills_missing_kind_and_generates_names(http: httpx.Client) -> None:
    r = http.post(CM, json={"metadata": {"generateName": "gen-"}, "data": {}})
    assert r.status_code == 201
    body = r.json()
    assert body["kind"] == "ConfigMap" and body["apiVersion"] == "v1"
    assert body["metadata"]["name"].startswith("gen-") and len(body["metadata"]["name"]) == 9


def test_duplicate_create_is_409_already_exists(http: httpx.Client) -> None:
    http.post(ING, json=ingress("default", "web")).raise_for_status()
    r = http.post(ING, json=ingress("default", "web"))
    assert r.status_code == 409
    assert r.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'ingresses.networking.k8s.io "web" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "web", "group": "networking.k8s.io", "kind": "ingresses"},
        "code": 409,
    }


def test_not_found_shapes(http: httpx.Client) -> None:
    r = http.get(f"{CM}/missing")
    assert r.status_code == 404
    assert r.headers["content-type"] == "application/json"
    assert r.json()["message"] == 'configmaps "missing" not found'
    assert r.json()["details"] == {"name": "missing", "kind": "configmaps"}
    for path in ("/api/v1/widgets", "/apis/example.com/v1/things", "/nope",
                 "/api/v1/namespaces/default/configmaps/a/b/c"):
        r = http.get(path)
        assert r.status_code == 404, path
        assert r.json()["reason"] == "NotFound"
    assert http.delete(f"{CM}/missing").status_code == 404
    assert http.put(f"{CM}/missing", json=configmap("default", "missing")).status_code == 404


def test_create_in_missing_namespace_is_404(http: httpx.Client) -> None:
    r = http.post("/api/v1/namespaces/nowhere/configmaps", json=configmap("nowhere", "c"))
    assert r.status_code == 404
    assert r.json()["message"] == 'namespaces "nowhere" not found'


@pytest.mark.parametrize(("body", "field", "reason"), [
    ({"metadata": {}}, "metadata.name", "FieldValueRequired"),
    ({"metadata": {"name": "Bad_Name"}}, "metadata.name", "FieldValueInvalid"),
    ({"metadata": {"name": "ok"}, "data": {"bad key": "v"}}, "data[bad key]",
     "FieldValueInvalid"),
])
def test_invalid_objects_are_422(http: httpx.Client, body: Obj, field: str, reason: str) -> None:
    r = http.post(CM, json={"apiVersion": "v1", "kind": "ConfigMap", **body})
    assert r.status_code == 422
    status = r.json()
    assert status["reason"] == "Invalid"
    assert status["message"].startswith("ConfigMap ")
    assert " is invalid: " in status["message"]
    assert status["details"]["kind"] == "ConfigMap"
    assert status["details"]["causes"][0]["field"] == field
    assert status["details"]["causes"][0]["reason"] == reason
    assert http.get(CM).json()["items"] == []


def test_service_names_must_be_dns_1035_labels(http: httpx.Client) -> None:
    r = http.post("/api/v1/namespaces/default/services", json=service("default", "1abc"))
    assert r.status_code == 422
    assert "DNS-1035" in r.json()["message"]


def test_wrong_kind_or_bad_json_is_400(http: httpx.Client) -> None:
    r = http.post(CM, json=service("default", "s"))
    assert r.status_code == 400
    assert r.json()["reason"] == "BadRequest"
    r = http.post(ING, json=configmap("default", "c"))
    assert r.status_code == 400
    assert "does not match the expected API version" in r.json()["message"]
    r = http.post(CM, content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    assert r.json()["reason"] == "BadRequest"
    assert http.get(CM).json()["items"] == []


def test_put_conflicts_on_stale_version_and_is_unconditional_without(
    http: httpx.Client,
) -> None:
    first = http.post(CM, json=configmap("default", "c", {"k": "1"})).json()
    stale = json.loads(json.dumps(first))
    first["data"]["k"] = "2"
    second = http.put(f"{CM}/c", json=first)
    assert second.status_code == 200
    assert second.json()["metadata"]["resourceVersion"] != first["metadata"]["resourceVersion"]
    stale["data"]["k"] = "3"
    r = http.put(f"{CM}/c", json=stale)
    assert r.status_code == 409
    assert r.json()["reason"] == "Conflict"
    assert r.json()["message"] == (
        'Operation cannot be fulfilled on configmaps "c": the object has been modified; '
        "please apply your changes to the latest version and try again")
    assert http.get(f"{CM}/c").json()["data"] == {"k": "2"}
    del stale["metadata"]["resourceVersion"]
    assert http.put(f"{CM}/c", json=stale).status_code == 200
    assert http.get(f"{CM}/c").json()["data"] == {"k": "3"}


def test_put_keeps_identity_and_rejects_name_mismatch(http: httpx.Client) -> None:
    created = http.post(CM, json=configmap("default", "c")).json()
    body = json.loads(json.dumps(created))
    body["metadata"]["uid"] = created["metadata"]["uid"]
    body["metadata"]["creationTimestamp"] = "1999-01-01T00:00:00Z"
    body["data"] = {"x": "y"}
    updated = http.put(f"{CM}/c", json=body).json()
    assert updated["metadata"]["creationTimestamp"] == created["metadata"]["creationTimestamp"]
    r = http.put(f"{CM}/other", json=configmap("default", "c"))
    assert r.status_code == 400


def test_noop_update_keeps_version(http: httpx.Client, fake_api: FakeApiServer) -> None:
    created = http.post(CM, json=configmap("default", "c", {"k": "v"})).json()
    before = fake_api.resource_version
    same = http.put(f"{CM}/c", json=created).json()
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert fake_api.resource_version == before


def test_generation_tracks_spec_only(http: httpx.Client) -> None:
    ing = http.post(ING, json=ingress("default", "web", rule_hosts=["a.example.com"])).json()
    ing["metadata"]["annotations"] = {"note": "x"}
    ing = http.put(f"{ING}/web", json=ing).json()
    assert ing["metadata"]["generation"] == 1
    ing["spec"]["rules"][0]["host"] = "b.example.com"
    ing = http.put(f"{ING}/web", json=ing).json()
    assert ing["metadata"]["generation"] == 2


def test_status_is_a_subresource(http: httpx.Client) -> None:
    ing = http.post(ING, json=ingress("default", "web")).json()
    ing["status"] = {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}
    after = http.put(f"{ING}/web", json=ing).json()
    assert after.get("status", {}).get("loadBalancer", {}).get("ingress") is None
    ing["metadata"]["resourceVersion"] = after["metadata"]["resourceVersion"]
    ing["metadata"]["labels"] = {"ignored": "yes"}
    st = http.put(f"{ING}/web/status", json=ing)
    assert st.status_code == 200
    assert st.json()["status"]["loadBalancer"]["ingress"] == [{"ip": "203.0.113.7"}]
    assert "labels" not in st.json()["metadata"]
    assert http.put(f"{CM}/x/status", json=configmap("default", "x")).status_code == 404


def test_deployments_have_the_scale_subresource(http: httpx.Client) -> None:
    """As `kubectl scale` uses it: the Scale view, patched; only spec.replicas is written."""
    deploys = "/apis/apps/v1/namespaces/default/deployments"
    http.post(deploys, json=deployment("default", "web", replicas=2, labels={"app": "web"}))
    view = http.get(f"{deploys}/web/scale").json()
    assert (view["kind"], view["apiVersion"], view["spec"]) == ("Scale", "autoscaling/v1",
                                                                {"replicas": 2})
    assert view["status"]["selector"] == "app=web"
    merged = http.patch(f"{deploys}/web/scale", content=b'{"spec":{"replicas":0}}',
                        headers={"Content-Type": "application/merge-patch+json"})
    assert merged.status_code == 200 and merged.json()["spec"] == {"replicas": 0}
    after = http.get(f"{deploys}/web").json()
    assert after["spec"]["replicas"] == 0
    assert after["metadata"]["resourceVersion"] == merged.json()["metadata"]["resourceVersion"]
    patched = http.patch(f"{deploys}/web/scale",
                         content=b'[{"op":"replace","path":"/spec/replicas","value":3}]',
                         headers={"Content-Type": "application/json-patch+json"})
    assert patched.json()["spec"] == {"replicas": 3}
    assert http.put(f"{deploys}/web/scale", json={"spec": {"replicas": -1}}).status_code == 422
    assert http.get("/apis/apps/v1/namespaces/default/daemonsets/agent/scale").status_code == 404


def test_delete_answers_status_and_object_kinds(http: httpx.Client) -> None:
    created = http.post(CM, json=configmap("default", "c")).json()
    r = http.delete(f"{CM}/c")
    assert r.status_code == 200
    assert r.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {},
                        "status": "Success",
                        "details": {"name": "c", "kind": "configmaps",
                                    "uid": created["metadata"]["uid"]}}
    http.post("/api/v1/namespaces", json={"metadata": {"name": "team"}}).raise_for_status()
    r = http.delete("/api/v1/namespaces/team")
    assert r.status_code == 200
    assert r.json()["kind"] == "Namespace"


def test_delete_waits_for_finalizers(http: httpx.Client) -> None:
    cm = configmap("default", "c")
    cm["metadata"]["finalizers"] = ["example.com/hold"]
    http.post(CM, json=cm).raise_for_status()
    r = http.delete(f"{CM}/c")
    assert r.status_code == 202
    held = http.get(f"{CM}/c").json()
    assert held["metadata"]["deletionTimestamp"]
    held["metadata"]["finalizers"] = []
    assert http.put(f"{CM}/c", json=held).status_code == 200
    assert http.get(f"{CM}/c").status_code == 404


def test_delete_precondition_conflicts(http: httpx.Client) -> None:
    http.post(CM, json=configmap("default", "c")).raise_for_status()
    r = http.request("DELETE", f"{CM}/c", json={"kind": "DeleteOptions", "apiVersion": "v1",
                                                "preconditions": {"resourceVersion": "1"}})
    assert r.status_code == 409
    assert http.get(f"{CM}/c").status_code == 200


def test_dry_run_persists_nothing(http: httpx.Client, fake_api: FakeApiServer) -> None:
    before = fake_api.resource_version
    r = http.post(CM, params={"dryRun": "All"}, json=configmap("default", "c"))
    assert r.status_code == 201
    assert http.get(f"{CM}/c").status_code == 404
    assert fake_api.resource_version == before


# --- patch ---------------------------------------------------------------------------------


def _patch(http: httpx.Client, path: str, body: Any, ctype: str) -> httpx.Response:
    return http.patch(path, content=json.dumps(body), headers={"Content-Type": ctype})


def test_merge_patch_sets_and_removes_keys(http: httpx.Client) -> None:
    http.post(CM, json=configmap("default", "c", {"a": "1", "b": "2"})).raise_for_status()
    for ctype in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
        r = _patch(http, f"{CM}/c", {"data": {"a": None, "c": "3"}}, ctype)
        assert r.status_code == 200
        assert r.json()["data"] == {"b": "2", "c": "3"}


def test_json_patch_and_its_failures(http: httpx.Client) -> None:
    http.post(CM, json=configmap("default", "c", {"a": "1"})).raise_for_status()
    ops = [{"op": "test", "path": "/data/a", "value": "1"},
           {"op": "replace", "path": "/data/a", "value": "9"},
           {"op": "add", "path": "/metadata/labels", "value": {"x": "y"}}]
    r = _patch(http, f"{CM}/c", ops, "application/json-patch+json")
    assert r.status_code == 200
    assert r.json()["data"] == {"a": "9"} and r.json()["metadata"]["labels"] == {"x": "y"}
    failing = [{"op": "test", "path": "/data/a", "value": "1"}]
    assert _patch(http, f"{CM}/c", failing, "application/json-patch+json").status_code == 422
    assert _patch(http, f"{CM}/c", {"data": {}}, "text/plain").status_code == 415


def test_patch_with_stale_version_conflicts(http: httpx.Client) -> None:
    http.post(CM, json=configmap("default", "c", {"a": "1"})).raise_for_status()
    r = _patch(http, f"{CM}/c", {"metadata": {"resourceVersion": "1"}, "data": {"a": "2"}},
               "application/merge-patch+json")
    assert r.status_code == 409
    assert http.get(f"{CM}/c").json()["data"] == {"a": "1"}


def test_apply_patch_creates_then_merges(http: httpx.Client) -> None:
    body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: '1'\n"
    headers = {"Content-Type": "application/apply-patch+yaml"}
    assert http.patch(f"{CM}/c", content=body, headers=headers).status_code == 400
    r = http.patch(f"{CM}/c", content=body, headers=headers, params={"fieldManager": "t"})
    assert r.status_code == 201
    r = http.patch(f"{CM}/c", content=body.replace("'1'", "'2'"), headers=headers,
                   params={"fieldManager": "t"})
    assert r.status_code == 200 and r.json()["data"] == {"a": "2"}


# --- list ----------------------------------------------------------------------------------


def test_list_shape(http: httpx.Client, fake_api: FakeApiServer) -> None:
    fake_api.create(ingress("default", "a"))
    fake_api.create(ingress("other", "b"))
    body = http.get("/apis/networking.k8s.io/v1/ingresses").json()
    assert body["kind"] == "IngressList"
    assert body["apiVersion"] == "networking.k8s.io/v1"
    assert body["metadata"] == {"resourceVersion": fake_api.resource_version}
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in body["items"]] == [
        ("default", "a"), ("other", "b")]
    assert all("kind" not in i and "apiVersion" not in i for i in body["items"])
    assert [i["metadata"]["name"] for i in http.get(ING).json()["items"]] == ["a"]
    names = [i["metadata"]["name"]
             for i in http.get("/apis/networking.k8s.io/v1/ingressclasses").json()["items"]]
    assert names == []


def test_pagination_is_a_consistent_snapshot(http: httpx.Client, fake_api: FakeApiServer) -> None:
    for i in range(5):
        fake_api.create(configmap("default", f"c{i}"))
    page = http.get(CM, params={"limit": 2}).json()
    assert [i["metadata"]["name"] for i in page["items"]] == ["c0", "c1"]
    assert page["metadata"]["remainingItemCount"] == 3
    rv = page["metadata"]["resourceVersion"]
    fake_api.delete("configmaps", "default", "c3")
    fake_api.create(configmap("default", "c5"))
    names: list[str] = []
    while "continue" in page["metadata"]:
        page = http.get(CM, params={"limit": 2, "continue": page["metadata"]["continue"]}).json()
        assert page["metadata"]["resourceVersion"] == rv
        names += [i["metadata"]["name"] for i in page["items"]]
    assert names == ["c2", "c3", "c4"]
    fresh = http.get(CM).json()["items"]
    assert [i["metadata"]["name"] for i in fresh] == ["c0", "c1", "c2", "c4", "c5"]


def test_continue_after_compaction_is_410(http: httpx.Client, fake_api: FakeApiServer) -> None:
    for i in range(3):
        fake_api.create(configmap("default", f"c{i}"))
    page = http.get(CM, params={"limit": 1}).json()
    fake_api.create(configmap("default", "later"))
    fake_api.compact()
    r = http.get(CM, params={"limit": 1, "continue": page["metadata"]["continue"]})
    assert r.status_code == 410
    assert r.json()["reason"] == "Expired"
    assert http.get(CM, params={"continue": "garbage"}).status_code == 400


def test_list_at_exact_version(http: httpx.Client, fake_api: FakeApiServer) -> None:
    fake_api.create(configmap("default", "a"))
    rv = fake_api.resource_version
    fake_api.create(configmap("default", "b"))
    params = {"resourceVersion": rv, "resourceVersionMatch": "Exact"}
    items = http.get(CM, params=params).json()["items"]
    assert [i["metadata"]["name"] for i in items] == ["a"]
    ahead = str(int(fake_api.resource_version) + 100)
    assert http.get(CM, params={"resourceVersion": ahead}).status_code == 504


@pytest.mark.parametrize(("selector", "expected"), [
    ("app=web", ["a", "b"]),
    ("app==web,tier=front", ["a"]),
    ("app!=web", ["c", "d"]),
    ("app in (web, db)", ["a", "b", "c"]),
    ("app notin (web)", ["c", "d"]),
    ("tier", ["a"]),
    ("!tier", ["b", "c", "d"]),
])
def test_label_selectors(http: httpx.Client, fake_api: FakeApiServer, selector: str,
                         expected: list[str]) -> None:
    for name, labels in (("a", {"app": "web", "tier": "front"}), ("b", {"app": "web"}),
                         ("c", {"app": "db"}), ("d", {})):
        fake_api.create(configmap("default", name, labels=labels))
    items = http.get(CM, params={"labelSelector": selector}).json()["items"]
    assert [i["metadata"]["name"] for i in items] == expected


def test_field_selectors(http: httpx.Client, fake_api: FakeApiServer) -> None:
    fake_api.create(configmap("default", "a"))
    fake_api.create(configmap("other", "a"))
    fake_api.create(configmap("other", "b"))
    path = "/api/v1/configmaps"
    items = http.get(path, params={"fieldSelector": "metadata.name=a"}).json()["items"]
    assert [i["metadata"]["namespace"] for i in items] == ["default", "other"]
    sel = "metadata.namespace==other,metadata.name!=a"
    items = http.get(path, params={"fieldSelector": sel}).json()["items"]
    assert [i["metadata"]["name"] for i in items] == ["b"]
    r = http.get(path, params={"fieldSelector": "spec.color=red"})
    assert r.status_code == 400
    assert r.json()["message"] == "field label not supported: spec.color"
    assert http.get(path, params={"labelSelector": "a in b"}).status_code == 400


# --- watch ---------------------------------------------------------------------------------


def test_watch_sees_every_change_once_in_order(http: httpx.Client,
                                               fake_api: FakeApiServer) -> None:
    fake_api.create(configmap("default", "before"))
    rv = http.get(CM).json()["metadata"]["resourceVersion"]
    params = {"watch": "true", "resourceVersion": rv}
    with http.stream("GET", CM, params=params) as r:
        assert r.status_code == 200
        assert r.headers["content-type"] == "application/json"
        assert r.headers["transfer-encoding"] == "chunked"
        fake_api.create(configmap("default", "x", {"n": "0"}))
        for n in range(1, 4):
            fake_api.patch("configmaps", "default", "x", {"data": {"n": str(n)}})
        fake_api.delete("configmaps", "default", "x")
        got = events(r.iter_lines(), 5)
    assert [e["type"] for e in got] == ["ADDED", "MODIFIED", "MODIFIED", "MODIFIED", "DELETED"]
    assert [e["object"]["data"]["n"] for e in got] == ["0", "1", "2", "3", "3"]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in got]
    assert versions == sorted(set(versions)) and versions[0] > int(rv)
    assert all(e["object"]["kind"] == "ConfigMap" for e in got)


def test_the_server_tells_when_each_watch_event_left_for_which_watch(
        http: httpx.Client, fake_api: FakeApiServer) -> None:
    rv = http.get(CM).json()["metadata"]["resourceVersion"]
    params = {"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true"}
    fake_api.clear_requests()
    with http.stream("GET", CM, params=params) as r:
        before = time.time()
        fake_api.create(configmap("default", "x", {"n": "0"}))
        fake_api.delete("configmaps", "default", "x")
        events(r.iter_lines(), 2)
    sent = fake_api.sent_events("ConfigMap", "x")
    assert [(e.type, e.namespace, e.name) for e in sent] == [
        ("ADDED", "default", "x"), ("DELETED", "default", "x")]
    assert before <= sent[0].time <= sent[1].time <= time.time()
    # Each names the watch it went out on, as the request log holds it.
    assert all(e.request is fake_api.requests("GET", "configmaps", watch=True)[0] for e in sent)
    assert fake_api.sent_events("ConfigMap", "y") == []
    fake_api.clear_requests()
    assert fake_api.sent_events() == []


def test_watch_without_version_starts_with_synthetic_adds(http: httpx.Client,
                                                          fake_api: FakeApiServer) -> None:
    fake_api.create(configmap("default", "a"))
    fake_api.create(configmap("default", "b"))
    for rv in (None, "0"):
        params = {"watch": "1", **({"resourceVersion": rv} if rv else {})}
        with http.stream("GET", CM, params=params) as r:
            got = events(r.iter_lines(), 2)
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in got] == [
            ("ADDED", "a"), ("ADDED", "b")]


def test_watch_replays_history_from_an_old_version(http: httpx.Client,
                                                   fake_api: FakeApiServer) -> None:
    rv = fake_api.resource_version
    fake_api.create(configmap("default", "a"))
    fake_api.delete("configmaps", "default", "a")
    with http.stream("GET", CM, params={"watch": "1", "resourceVersion": rv}) as r:
        got = events(r.iter_lines(), 2)
    assert [e["type"] for e in got] == ["ADDED", "DELETED"]


def test_bookmarks_carry_only_the_version(http: httpx.Client, fake_api: FakeApiServer) -> None:
    fake_api.bookmark_interval = 0.1
    fake_api.create(configmap("default", "a"))
    rv = fake_api.resource_version
    # Writes to another type move the global version; the bookmark reports that progress.
    fake_api.create(ingress("default", "i"))
    params = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true"}
    with http.stream("GET", CM, params=params) as r:
        got = events(r.iter_lines(), 1)
    assert got == [{"type": "BOOKMARK", "object": {
        "kind": "ConfigMap", "apiVersion": "v1",
        "metadata": {"resourceVersion": fake_api.resource_version}}}]


def test_events_meeting_a_due_bookmark_are_sent(fake_api: FakeApiServer) -> None:
    # Bookmarks every 10 ms, creates at random moments: many land just as one falls due.
    fake_api.bookmark_interval = 0.01
    rv = fake_api.resource_version
    seen: list[str] = []
    arrived = threading.Condition()

    def reader() -> None:
        params = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true",
                  "timeoutSeconds": "60"}
        with httpx.Client(base_url=fake_api.url, timeout=httpx.Timeout(60.0)) as client, \
                client.stream("GET", CM, params=params) as r:
            for line in r.iter_lines():
                event = json.loads(line)
                if event["type"] == "ADDED":
                    with arrived:
                        seen.append(event["object"]["metadata"]["name"])
                        arrived.notify_all()
                    if len(seen) == 50:
                        return

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    fake_api.wait_for(lambda: fake_api.open_watches == 1)
    rng = random.Random(7)
    for i in range(50):
        time.sleep(rng.uniform(0.0, 0.02))
        name = f"c{i}"
        fake_api.create(configmap("default", name))
        with arrived:
            assert arrived.wait_for(functools.partial(seen.__contains__, name), 5.0), \
                f"{name} not sent within 5 s"
    assert seen == [f"c{i}" for i in range(50)]
    thread.join(10)


def test_no_bookmarks_unless_asked(http: httpx.Client, fake_api: FakeApiServer) -> None:
    fake_api.bookmark_interval = 0.05
    with http.stream("GET", CM, params={"watch": "1", "resourceVersion": "0"}) as r:
        fake_api.wait_for(lambda: fake_api.open_watches == 1)
        time.sleep(0.3)  # six bookmark intervals: proving an absence needs the time to pass
        fake_api.create(configmap("default", "a"))
        assert events(r.iter_lines(), 1)[0]["type"] == "ADDED"


def test_send_initial_events_ends_with_annotated_bookmark(http: httpx.Client,
                                                          fake_api: FakeApiServer) -> None:
    fake_api.create(configmap("default", "a"))
    params = {"watch": "1", "sendInitialEvents": "true", "allowWatchBookmarks": "true",
              "resourceVersionMatch": "NotOlderThan"}
    with http.stream("GET", CM, params=params) as r:
        got = events(r.iter_lines(), 2)
    assert got[0]["type"] == "ADDED"
    assert got[1]["type"] == "BOOKMARK"
    assert got[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_watch_from_compacted_version_gets_410_event(http: httpx.Client,
                                                     fake_api: FakeApiServer) -> None:
    rv = fake_api.resource_version
    fake_api.create(configmap("default", "a"))
    fake_api.compact()
    with http.stream("GET", CM, params={"watch": "1", "resourceVersion": rv}) as r:
        assert r.status_code == 200
        lines = list(r.iter_lines())
    assert len(lines) == 1
    event = json.loads(lines[0])
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410
    assert event["object"]["reason"] == "Expired"
    assert event["object"]["message"].startswith(f"too old resource version: {rv} (")


def test_bounded_history_expires_old_versions(http: httpx.Client) -> None:
    with FakeApiServer(history_size=3) as small, httpx.Client(base_url=small.url) as client:
        rv = small.resource_version
        for i in range(4):
            small.create(configmap("default", f"c{i}"))
        with client.stream("GET", CM, params={"watch": "1", "resourceVersion": rv}) as r:
            assert json.loads(next(r.iter_lines()))["object"]["code"] == 410
        recent = small.list("configmaps")[1]["metadata"]["resourceVersion"]
        with client.stream("GET", CM, params={"watch": "1", "resourceVersion": recent}) as r:
            got = events(r.iter_lines(), 2)
        assert [e["object"]["metadata"]["name"] for e in got] == ["c2", "c3"]


def test_watch_selectors_turn_leaving_into_deleted(http: httpx.Client,
                                                   fake_api: FakeApiServer) -> None:
    rv = fake_api.resource_version
    params = {"watch": "1", "resourceVersion": rv, "labelSelector": "hairpin=yes"}
    with http.stream("GET", CM, params=params) as r:
        fake_api.create(configmap("default", "other"))
        fake_api.create(configmap("default", "c"))
        fake_api.patch("configmaps", "default", "c", {"metadata": {"labels": {"hairpin": "yes"}}})
        fake_api.patch("configmaps", "default", "c", {"data": {"k": "v"}})
        left = fake_api.patch("configmaps", "default", "c",
                              {"metadata": {"labels": {"hairpin": "no"}}})
        got = events(r.iter_lines(), 3)
    assert [e["type"] for e in got] == ["ADDED", "MODIFIED", "DELETED"]
    gone = got[2]["object"]
    assert gone["metadata"]["labels"] == {"hairpin": "yes"}
    assert gone["metadata"]["resourceVersion"] == left["metadata"]["resourceVersion"]


def test_watch_times_out_cleanly(http: httpx.Client) -> None:
    with http.stream("GET", CM, params={"watch": "1", "timeoutSeconds": "1"}) as r:
        assert list(r.iter_lines()) == []


def test_discovery_and_health(http: httpx.Client) -> None:
    assert http.get("/healthz").text == "ok"
    assert http.get("/version").json()["major"] == "1"
    assert http.get("/api").json()["versions"] == ["v1"]
    groups = {g["name"] for g in http.get("/apis").json()["groups"]}
    assert {"networking.k8s.io", "apps", "coordination.k8s.io", "events.k8s.io",
            "discovery.k8s.io"} <= groups
    names = {r["name"] for r in http.get("/apis/networking.k8s.io/v1").json()["resources"]}
    assert {"ingresses", "ingresses/status", "ingressclasses"} <= names


def test_request_log_records_every_request(http: httpx.Client, fake_api: FakeApiServer) -> None:
    http.post(CM, json=configmap("default", "c")).raise_for_status()
    http.get(f"{CM}/c").raise_for_status()
    http.get(f"{CM}/nope")
    assert fake_api.count("POST") == 1
    assert fake_api.count("GET", path_re=r"/configmaps/nope$") == 1
    statuses = [(r.method, r.status) for r in fake_api.requests()]
    assert statuses == [("POST", 201), ("GET", 200), ("GET", 404)]
    fake_api.clear_requests()
    assert fake_api.count() == 0


def test_cluster_scoped_and_all_namespace_paths(http: httpx.Client) -> None:
    classes = "/apis/networking.k8s.io/v1/ingressclasses"
    r = http.post(classes, json={"metadata": {"name": "nginx", "namespace": "ignored"},
                                 "spec": {"controller": "k8s.io/ingress-nginx"}})
    assert r.status_code == 201
    assert "namespace" not in r.json()["metadata"]
    assert http.get(f"{classes}/nginx").status_code == 200
    assert http.get("/apis/networking.k8s.io/v1/namespaces/default/ingressclasses").status_code \
        == 404
    assert http.post("/api/v1/configmaps", json=configmap("default", "c")).status_code == 405


def test_services_get_cluster_ips(http: httpx.Client) -> None:
    svcs = "/api/v1/namespaces/default/services"
    a = http.post(svcs, json=service("default", "a")).json()
    b = http.post(svcs, json=service("default", "b")).json()
    assert a["spec"]["clusterIP"] != b["spec"]["clusterIP"]
    assert a["spec"]["clusterIPs"] == [a["spec"]["clusterIP"]]
    fixed = http.post(svcs, json=service("default", "c", cluster_ips=["10.96.0.10"])).json()
    assert fixed["spec"]["clusterIP"] == "10.96.0.10"
    assert fixed["status"] == {"loadBalancer": {}}


def test_delete_collection_honours_selectors(http: httpx.Client,
                                             fake_api: FakeApiServer) -> None:
    fake_api.create(configmap("default", "a", labels={"x": "1"}))
    fake_api.create(configmap("default", "b"))
    r = http.delete(CM, params={"labelSelector": "x=1"})
    assert r.status_code == 200
    assert [i["metadata"]["name"] for i in r.json()["items"]] == ["a"]
    assert [o["metadata"]["name"] for o in fake_api.list("configmaps")] == ["b"]


def test_both_event_apis_are_separate_types(fake_api: FakeApiServer) -> None:
    fake_api.create({"apiVersion": "v1", "kind": "Event",
                     "metadata": {"name": "e1", "namespace": "default"},
                     "involvedObject": {"kind": "Ingress", "name": "web"}, "reason": "R"})
    assert [e["metadata"]["name"] for e in fake_api.list("events")] == ["e1"]
    assert fake_api.list("events.events.k8s.io") == []


def test_changes_lists_retained_history(http: httpx.Client, fake_api: FakeApiServer) -> None:
    created = http.post(CM, json=configmap("default", "c", {"k": "1"})).json()
    created["data"] = {"k": "2"}
    http.put(f"{CM}/c", json=created).raise_for_status()
    http.put(f"{CM}/c", json=http.get(f"{CM}/c").json()).raise_for_status()  # no-op
    fake_api.create(configmap("default", "other"))
    http.delete(f"{CM}/c").raise_for_status()
    changes = fake_api.changes("configmaps", "default", "c")
    assert [t for t, _ in changes] == ["ADDED", "MODIFIED", "DELETED"]
    assert changes[1][1]["data"] == {"k": "2"}


def test_oversized_bodies_are_413(http: httpx.Client) -> None:
    body = json.dumps(configmap("default", "c", {"k": "x" * (3 * 1024 * 1024)}))
    r = http.post(CM, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert r.json()["reason"] == "RequestEntityTooLarge"


# --- compression -------------------------------------------------------------------------

BIG = "x" * (128 * 1024)  # one value past the real server's 128 KiB threshold, with its object


@pytest.mark.parametrize(("offered", "gzipped"), [
    ("gzip, deflate", True), ("deflate , gzip", True), ("identity", False),
    ("gzip;q=0.5", False), ("", False)])
def test_a_large_answer_is_gzipped_when_the_client_offers_exactly_gzip(
        http: httpx.Client, fake_api: FakeApiServer, offered: str, gzipped: bool) -> None:
    fake_api.create(configmap("default", "big", {"v": BIG}))
    for path in (CM, f"{CM}/big"):
        r = http.get(path, headers={"Accept-Encoding": offered})
        assert r.headers.get("content-encoding") == ("gzip" if gzipped else None)
        assert ("Accept-Encoding" in r.headers.get("vary", "")) is gzipped
        # What the client reads is the same either way.
        body = r.json()
        assert (body["items"][0] if "items" in body else body)["data"]["v"] == BIG
    records = fake_api.requests("GET", r"/configmaps")
    assert [rec.encoding for rec in records] == [("gzip" if gzipped else None)] * 2
    # The size is the plain body's, whichever way it went out.
    assert all(rec.size is not None and rec.size > len(BIG) for rec in records)


def test_a_small_answer_and_a_watch_go_out_as_they_are(http: httpx.Client,
                                                        fake_api: FakeApiServer) -> None:
    fake_api.create(configmap("default", "small"))
    r = http.get(CM, headers={"Accept-Encoding": "gzip"})
    assert "content-encoding" not in r.headers and r.json()["items"]
    rv = r.json()["metadata"]["resourceVersion"]
    params = {"watch": "1", "resourceVersion": rv}
    with http.stream("GET", CM, params=params, headers={"Accept-Encoding": "gzip"}) as w:
        assert "content-encoding" not in w.headers
        fake_api.create(configmap("default", "big", {"v": BIG}))
        got = events(w.iter_lines(), 1)
    assert got[0]["object"]["data"]["v"] == BIG
    assert [rec.size for rec in fake_api.requests("GET", r"/configmaps", watch=True)] == [None]
