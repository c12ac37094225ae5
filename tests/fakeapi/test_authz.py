"""Service-account tokens, RBAC, finalizers, the garbage collector and the namespace controller
on the fake, as kube-apiserver and kube-controller-manager behave (tests/fakeapi/authz.py and
lifecycle.py cite the real sources)."""

from __future__ import annotations

import time
from typing import Any

import httpx2 as httpx
import pytest

from tests.fakeapi.fixtures import configmap
from tests.fakeapi.server import FakeApiServer
from tests.fakeapi.status import ApiError
from tests.waiting import wait_until

Obj = dict[str, Any]
NS = "app"
CM = f"/api/v1/namespaces/{NS}/configmaps"
RBAC = "rbac.authorization.k8s.io/v1"


def meta(name: str, namespace: str | None = None, **more: Any) -> Obj:
    md: Obj = {"name": name, **more}
    if namespace:
        md["namespace"] = namespace
    return md


def account(api: FakeApiServer, name: str = "robot") -> httpx.Client:
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": meta(NS)})
    api.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(name, NS)})
    token = api.service_account_token(NS, name)
    return httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {token}"},
                        timeout=10.0)


def grant(api: FakeApiServer, rules: list[Obj], *, name: str = "cm", namespace: str = NS,
          cluster: bool = False, **binding_meta: Any) -> None:
    role_kind = "ClusterRole" if cluster else "Role"
    ns = None if cluster else namespace
    api.create({"apiVersion": RBAC, "kind": role_kind, "metadata": meta(name, ns),
                "rules": rules})
    api.create({"apiVersion": RBAC, "kind": f"{role_kind}Binding",
                "metadata": meta(name, ns, **binding_meta),
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind,
                            "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": NS}]})


READ_ONE = [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["one"],
             "verbs": ["get", "list", "watch", "update"]}]


def test_a_service_account_has_no_rights_until_bound(fake_api: FakeApiServer) -> None:
    with account(fake_api) as c:
        fake_api.create(configmap(NS, "one", {"a": "1"}))
        r = c.get(f"{CM}/one")
        assert r.status_code == 403
        assert r.json()["message"] == (
            'configmaps "one" is forbidden: User "system:serviceaccount:app:robot" cannot get '
            'resource "configmaps" in API group "" in the namespace "app"')
        assert c.get("/api").status_code == 200  # discovery is open to every account
        grant(fake_api, READ_ONE)
        assert c.get(f"{CM}/one").status_code == 200


def test_resource_names_match_named_requests_only(fake_api: FakeApiServer) -> None:
    with account(fake_api) as c:
        fake_api.create(configmap(NS, "one", {"a": "1"}))
        fake_api.create(configmap(NS, "two", {"a": "2"}))
        grant(fake_api, READ_ONE)
        assert c.get(f"{CM}/two").status_code == 403
        assert c.get(CM).status_code == 403
        listed = c.get(CM, params={"fieldSelector": "metadata.name=one"})
        assert listed.status_code == 200 and len(listed.json()["items"]) == 1
        # create names no object yet: resourceNames never allow it.
        r = c.post(CM, json=configmap(NS, "one-more", {}))
        assert r.status_code == 403 and "cannot create resource" in r.json()["message"]


def test_cluster_roles_grant_everywhere_and_roles_in_their_namespace(
        fake_api: FakeApiServer) -> None:
    with account(fake_api) as c:
        grant(fake_api, [{"apiGroups": [""], "resources": ["namespaces"],
                          "verbs": ["list"]}], cluster=True)
        assert c.get("/api/v1/namespaces").status_code == 200
        grant(fake_api, READ_ONE, namespace="kube-system")
        fake_api.create(configmap("kube-system", "one", {}))
        fake_api.create(configmap(NS, "one", {}))
        assert c.get("/api/v1/namespaces/kube-system/configmaps/one").status_code == 200
        assert c.get(f"{CM}/one").status_code == 403


def test_a_terminating_binding_still_grants_until_it_is_gone(fake_api: FakeApiServer) -> None:
    with account(fake_api) as c:
        fake_api.create(configmap(NS, "one", {}))
        grant(fake_api, READ_ONE, finalizers=["example.com/hold"])
        fake_api.delete("RoleBinding", NS, "cm")
        held = fake_api.get("RoleBinding", NS, "cm")
        assert held is not None and held["metadata"]["deletionTimestamp"]
        assert c.get(f"{CM}/one").status_code == 200
        fake_api.patch("RoleBinding", NS, "cm", {"metadata": {"finalizers": None}})
        assert fake_api.get("RoleBinding", NS, "cm") is None
        assert c.get(f"{CM}/one").status_code == 403


def test_a_deleted_service_account_token_is_refused(fake_api: FakeApiServer) -> None:
    with account(fake_api) as c:
        grant(fake_api, READ_ONE)
        fake_api.create(configmap(NS, "one", {}))
        fake_api.delete("ServiceAccount", NS, "robot")
        r = c.get(f"{CM}/one")
        assert r.status_code == 401 and r.json()["reason"] == "Unauthorized"
        # A new account of the same name has another UID: the old token stays refused.
        fake_api.create({"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": meta("robot", NS)})
        assert c.get(f"{CM}/one").status_code == 401


def test_a_terminating_service_account_token_lasts_the_leeway(fake_api: FakeApiServer) -> None:
    with account(fake_api) as c:
        grant(fake_api, READ_ONE)
        fake_api.create(configmap(NS, "one", {}))
        fake_api.patch("ServiceAccount", NS, "robot",
                       {"metadata": {"finalizers": ["example.com/hold"]}})
        fake_api.delete("ServiceAccount", NS, "robot")
        assert c.get(f"{CM}/one").status_code == 200
        assert fake_api.authz.leeway == 60.0
        # A minute later (the clock moved on, not the test), the token is refused.
        fake_api.authz.clock = lambda: time.time() + 61.5
        assert c.get(f"{CM}/one").status_code == 401


def test_no_new_finalizer_on_an_object_being_deleted(fake_api: FakeApiServer) -> None:
    held = configmap("default", "held", {})
    held["metadata"]["finalizers"] = ["example.com/a"]
    fake_api.create(held)
    fake_api.delete("ConfigMap", "default", "held")
    with pytest.raises(ApiError) as caught:
        fake_api.patch("ConfigMap", "default", "held",
                       {"metadata": {"finalizers": ["example.com/a", "example.com/b"]}})
    assert caught.value.code == 422
    assert "no new finalizers can be added if the object is being deleted" in str(
        caught.value.body["message"])


def test_the_garbage_collector_waits_for_the_owner_to_be_gone(fake_api: FakeApiServer) -> None:
    owner = configmap("default", "owner", {})
    owner["metadata"]["finalizers"] = ["example.com/hold"]
    made = fake_api.create(owner)
    dependent = configmap("default", "dependent", {})
    dependent["metadata"]["ownerReferences"] = [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
        "uid": made["metadata"]["uid"]}]
    fake_api.create(dependent)
    fake_api.create(configmap("default", "bystander", {}))
    fake_api.start_controllers()
    fake_api.delete("ConfigMap", "default", "owner")
    # Terminating owners keep their dependents (background propagation).
    passes = fake_api.controller_passes
    wait_until(lambda: fake_api.controller_passes >= passes + 2, what="two collector passes")
    assert fake_api.get("ConfigMap", "default", "dependent") is not None
    fake_api.patch("ConfigMap", "default", "owner", {"metadata": {"finalizers": None}})
    wait_until(lambda: fake_api.get("ConfigMap", "default", "dependent") is None,
               what="dependent collected")
    assert fake_api.get("ConfigMap", "default", "bystander") is not None


def test_the_namespace_controller_deletes_pods_first_and_waits_for_finalizers(
        fake_api: FakeApiServer) -> None:
    fake_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": meta(NS)})
    fake_api.create({"apiVersion": "v1", "kind": "Pod", "metadata": meta(
        "worker", NS, finalizers=["test/kubelet"]), "spec": {"containers": [
            {"name": "c", "image": "x"}]}})
    fake_api.create(configmap(NS, "plain", {}))
    held = configmap(NS, "held", {})
    held["metadata"]["finalizers"] = ["example.com/hold"]
    fake_api.create(held)
    fake_api.start_controllers()
    fake_api.delete("Namespace", None, NS)
    wait_until(lambda: (fake_api.get("Pod", NS, "worker") or {}).get("metadata", {}).get(
        "deletionTimestamp"), what="pod deleted")
    # While a pod is left, the rest of the namespace stays (OrderedNamespaceDeletion).
    assert fake_api.get("ConfigMap", NS, "plain") is not None
    fake_api.patch("Pod", NS, "worker", {"metadata": {"finalizers": None}})
    wait_until(lambda: fake_api.get("ConfigMap", NS, "plain") is None, what="content deleted")
    wait_until(lambda: (fake_api.get("ConfigMap", NS, "held") or {}).get("metadata", {}).get(
        "deletionTimestamp"), what="held object terminating")
    assert fake_api.get("Namespace", None, NS) is not None
    fake_api.patch("ConfigMap", NS, "held", {"metadata": {"finalizers": None}})
    wait_until(lambda: fake_api.get("Namespace", None, NS) is None, what="namespace gone")
