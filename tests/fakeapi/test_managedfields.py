"""The fake API keeps metadata.managedFields as the real API server does (see managedfields.py
for the source of each rule), checked over raw HTTP."""

from __future__ import annotations

from typing import Any

import httpx2 as httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fakeapi import managedfields as mf
from tests.fakeapi.fixtures import configmap
from tests.fakeapi.server import FakeApiServer

Obj = dict[str, Any]
CM = "/api/v1/namespaces/default/configmaps"


def entries(obj: Obj) -> list[Obj]:
    out: list[Obj] = obj["metadata"].get("managedFields") or []
    return out


def by_manager(obj: Obj) -> dict[str, Obj]:
    return {e["manager"]: e for e in entries(obj)}


def test_create_records_the_manager_from_field_manager_or_user_agent(http: httpx.Client
                                                                      ) -> None:
    a = http.post(CM, params={"fieldManager": "kubectl-create"},
                  json=configmap("default", "a", {"Corefile": "x"}, labels={"app": "a"})).json()
    [e] = entries(a)
    assert e["manager"] == "kubectl-create" and e["operation"] == "Update"
    assert e["apiVersion"] == "v1" and e["fieldsType"] == "FieldsV1"
    assert e["time"].endswith("Z") and len(e["time"]) == 20
    # metadata itself, name and namespace are not tracked ("." only under maps that are set).
    assert e["fieldsV1"] == {"f:data": {".": {}, "f:Corefile": {}},
                             "f:metadata": {"f:labels": {".": {}, "f:app": {}}}}
    b = http.post(CM, headers={"User-Agent": "argocd-controller/v2.13.1 (linux/amd64)"},
                  json=configmap("default", "b", {"k": "v"})).json()
    assert [e["manager"] for e in entries(b)] == ["argocd-controller"]


def test_update_by_another_manager_takes_the_changed_key(http: httpx.Client) -> None:
    cm = http.post(CM, params={"fieldManager": "hairpin-proxy"},
                   json=configmap("default", "c", {"Corefile": "ours", "other": "1"})).json()
    ours_time = by_manager(cm)["hairpin-proxy"]["time"]
    cm["data"]["Corefile"] = "theirs"
    r = http.put(f"{CM}/c", params={"fieldManager": "argocd-controller"}, json=cm)
    assert r.status_code == 200
    got = by_manager(r.json())
    assert set(got) == {"hairpin-proxy", "argocd-controller"}
    assert got["argocd-controller"]["fieldsV1"] == {"f:data": {"f:Corefile": {}}}
    # The key left our set; the rest stays ours, and our time did not move.
    assert got["hairpin-proxy"]["fieldsV1"] == {"f:data": {".": {}, "f:other": {}}}
    assert got["hairpin-proxy"]["time"] == ours_time
    assert mf.owners(r.json(), ("data", "Corefile")) == ["argocd-controller"]


def test_a_removal_leaves_every_set_and_names_nobody(http: httpx.Client) -> None:
    cm = http.post(CM, params={"fieldManager": "hairpin-proxy"},
                   json=configmap("default", "d", {"ours": "1"})).json()
    del cm["data"]["ours"]
    cm["data"]["theirs"] = "2"
    out = http.put(f"{CM}/d", params={"fieldManager": "kubectl-edit"}, json=cm).json()
    got = by_manager(out)
    assert got["kubectl-edit"]["fieldsV1"] == {"f:data": {"f:theirs": {}}}
    # data itself stays ours: a member without children is encoded as {}.
    assert got["hairpin-proxy"]["fieldsV1"] == {"f:data": {}}
    assert mf.owners(out, ("data", "ours")) == []


def test_an_update_that_only_removes_makes_no_entry(http: httpx.Client) -> None:
    cm = http.post(CM, params={"fieldManager": "hairpin-proxy"},
                   json=configmap("default", "e", {"a": "1", "b": "2"})).json()
    del cm["data"]["a"]
    out = http.put(f"{CM}/e", params={"fieldManager": "cleaner"}, json=cm).json()
    assert [e["manager"] for e in entries(out)] == ["hairpin-proxy"]


def test_same_manager_keeps_one_entry_and_time_moves_only_when_its_set_changes(
        http: httpx.Client, fake_api: FakeApiServer) -> None:
    cm = http.post(CM, params={"fieldManager": "m"}, json=configmap("default", "f", {"a": "1"}))
    obj = cm.json()
    first = by_manager(obj)["m"]
    # Another value of a key it owns: same set, same time, one entry.
    obj["data"]["a"] = "2"
    obj = http.put(f"{CM}/f", params={"fieldManager": "m"}, json=obj).json()
    assert len(entries(obj)) == 1 and by_manager(obj)["m"]["time"] == first["time"]
    # A no-op write changes nothing at all.
    rv = obj["metadata"]["resourceVersion"]
    same = http.put(f"{CM}/f", params={"fieldManager": "other"}, json=obj).json()
    assert same["metadata"]["resourceVersion"] == rv and set(by_manager(same)) == {"m"}


def test_patches_are_updates_and_apply_is_apply(http: httpx.Client) -> None:
    http.post(CM, params={"fieldManager": "creator"},
              json=configmap("default", "g", {"a": "1"})).raise_for_status()
    out = http.patch(f"{CM}/g", params={"fieldManager": "patcher"}, json={"data": {"b": "2"}},
                     headers={"Content-Type": "application/merge-patch+json"}).json()
    assert by_manager(out)["patcher"]["operation"] == "Update"
    applied = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "g"},
               "data": {"c": "3"}}
    r = http.patch(f"{CM}/g", params={"fieldManager": "applier"}, json=applied,
                   headers={"Content-Type": "application/apply-patch+yaml"})
    assert r.status_code == 200
    got = r.json()
    assert [(e["manager"], e["operation"]) for e in entries(got)] == [
        ("applier", "Apply"), ("creator", "Update"), ("patcher", "Update")]
    assert by_manager(got)["applier"]["fieldsV1"] == {"f:data": {"f:c": {}}}
    # Applying another manager's key with another value: a conflict unless forced.
    clash = {**applied, "data": {"a": "9"}}
    r = http.patch(f"{CM}/g", params={"fieldManager": "applier"}, json=clash,
                   headers={"Content-Type": "application/apply-patch+yaml"})
    assert r.status_code == 409 and r.json()["reason"] == "Conflict"
    assert 'conflict with "creator"' in r.json()["message"]
    r = http.patch(f"{CM}/g", params={"fieldManager": "applier", "force": "true"}, json=clash,
                   headers={"Content-Type": "application/apply-patch+yaml"})
    assert r.status_code == 200
    assert mf.owners(r.json(), ("data", "a")) == ["applier"]


def test_direct_writes_with_a_manager(fake_api: FakeApiServer) -> None:
    fake_api.create(configmap("default", "h", {"Corefile": "ours"}), manager="hairpin-proxy")
    cm = fake_api.get("ConfigMap", "default", "h")
    assert cm is not None
    cm["data"]["Corefile"] = "reverted"
    out = fake_api.update(cm, manager="kube-addon-manager")
    assert mf.owners(out, ("data", "Corefile")) == ["kube-addon-manager"]
    out = fake_api.patch("ConfigMap", "default", "h", {"data": {"x": "1"}}, manager="argocd")
    # The creator keeps data itself (the map), the others what they wrote.
    assert set(by_manager(out)) == {"hairpin-proxy", "kube-addon-manager", "argocd"}
    # Without a manager, a direct write leaves managedFields as the body has them.
    plain = fake_api.update({**out, "data": {"y": "2"}})
    assert entries(plain) == entries(out)


def test_status_writes_are_their_own_subresource_entry(http: httpx.Client) -> None:
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
           "spec": {"ports": [{"port": 80}]}}
    made = http.post("/api/v1/namespaces/default/services", params={"fieldManager": "c"},
                     json=svc).json()
    assert "f:status" not in by_manager(made)["c"]["fieldsV1"]
    made["status"] = {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}
    out = http.put("/api/v1/namespaces/default/services/s/status",
                   params={"fieldManager": "lb"}, json=made).json()
    lb = by_manager(out)["lb"]
    assert lb["subresource"] == "status"
    assert lb["fieldsV1"] == {"f:status": {"f:loadBalancer": {"f:ingress": {}}}}


@pytest.mark.parametrize(("agent", "manager"), [
    ("kubectl/v1.31.0 (linux/amd64) kubernetes/abc", "kubectl"),
    ("hairpin-proxy/1.2.3", "hairpin-proxy"),
    ("no-slash", "no-slash"),
    ("tab\there/1", "tabhere"),
    ("x" * 200, "x" * 128),
    ("é" * 100, "é" * 64),
    ("", ""),
])
def test_manager_from_user_agent(agent: str, manager: str) -> None:
    assert mf.manager_from_user_agent(agent) == manager


paths = st.lists(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=3)
                 .map(tuple), max_size=12)


@given(paths)
def test_fieldsv1_round_trip(fields: list[tuple[str, ...]]) -> None:
    assert mf.decode(mf.encode(fields)) == frozenset(fields)


writes = st.lists(st.tuples(st.sampled_from(["m1", "m2", "m3"]),
                            st.dictionaries(st.sampled_from(["a", "b", "c", "d"]),
                                            st.sampled_from(["x", "y"]), max_size=4)),
                  min_size=1, max_size=12)


@given(writes)
def test_updates_by_many_managers_keep_ownership_exact(seq: list[tuple[str, dict[str, str]]]
                                                      ) -> None:
    """Whatever the sequence of updates: each data key is owned by exactly the last manager
    that set or changed its value, no entry is empty, nothing absent is owned."""
    obj: Obj | None = None
    last_setter: dict[str, str] = {}
    for manager, data in seq:
        new: Obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                    "data": dict(data)}
        old_data = (obj or {}).get("data") or {}
        for k, v in data.items():
            if old_data.get(k) != v:
                last_setter[k] = manager
        for k in list(last_setter):
            if k not in data:
                del last_setter[k]
        new["metadata"]["managedFields"] = mf.record(
            obj, new, manager=manager, operation="Update", api_version="v1",
            has_status=False, subresource=None, now="2026-01-01T00:00:00Z")
        obj = new
        entries = new["metadata"]["managedFields"]
        assert all(mf.decode(e["fieldsV1"]) for e in entries)
        for k in data:
            assert mf.owners(new, ("data", k)) == [last_setter[k]]
        owned = {p for e in entries for p in mf.decode(e["fieldsV1"])}
        assert all(p == ("data",) or (p[0] == "data" and p[1] in data) for p in owned)
