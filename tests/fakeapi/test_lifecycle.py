"""The fake's garbage collector resolves ownerReferences as kube-controller-manager's does
(tests/fakeapi/lifecycle.py cites garbagecollector.go): by apiVersion, kind, name and UID, a
namespaced owner in the dependent's namespace, a cluster-scoped owner by name alone."""

from __future__ import annotations

from typing import Any

from tests.fakeapi.fixtures import configmap
from tests.fakeapi.server import FakeApiServer
from tests.waiting import wait_until

Obj = dict[str, Any]
RBAC = "rbac.authorization.k8s.io/v1"
NS = "web"


def ref(api_version: str, kind: str, obj: Obj) -> Obj:
    return {"apiVersion": api_version, "kind": kind, "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"]}


def cluster_role(api: FakeApiServer, name: str) -> Obj:
    return api.create({"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": name},
                       "rules": []})


def policy(api: FakeApiServer, name: str, *owners: Obj, namespace: str = NS) -> Obj:
    return api.create({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                       "metadata": {"name": name, "namespace": namespace,
                                    "ownerReferences": list(owners)},
                       "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}})


def settle(api: FakeApiServer) -> None:
    """Two whole collector passes (a pass that began before the change may miss it)."""
    passes = api.controller_passes
    wait_until(lambda: api.controller_passes >= passes + 2, what="two collector passes")


def test_a_namespaced_dependent_goes_with_its_cluster_scoped_owner(
        fake_api: FakeApiServer) -> None:
    api = fake_api
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    owner = cluster_role(api, "guard")
    other = cluster_role(api, "other")
    policy(api, "mine", ref(RBAC, "ClusterRole", owner))
    policy(api, "theirs", ref(RBAC, "ClusterRole", other))
    policy(api, "unowned")
    api.start_controllers()
    settle(api)
    assert api.get("NetworkPolicy", NS, "mine") is not None
    api.delete("ClusterRole", None, "guard")
    wait_until(lambda: api.get("NetworkPolicy", NS, "mine") is None, what="dependent collected")
    settle(api)
    assert api.get("NetworkPolicy", NS, "theirs") is not None
    assert api.get("NetworkPolicy", NS, "unowned") is not None


def test_an_owner_re_created_under_its_name_owns_nothing(fake_api: FakeApiServer) -> None:
    api = fake_api
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    owner = cluster_role(api, "guard")
    stale = ref(RBAC, "ClusterRole", owner)
    api.delete("ClusterRole", None, "guard")
    cluster_role(api, "guard")  # the same name, another UID
    # Made with the old UID (a stale cache): dangling from the start.
    policy(api, "stale", stale)
    policy(api, "never", {**stale, "name": "no-such-role", "uid": "0000"})
    api.start_controllers()
    wait_until(lambda: api.get("NetworkPolicy", NS, "stale") is None
               and api.get("NetworkPolicy", NS, "never") is None, what="dangling collected")
    assert api.get("ClusterRole", None, "guard") is not None


def test_a_namespaced_owner_counts_only_in_the_dependents_namespace(
        fake_api: FakeApiServer) -> None:
    api = fake_api
    for ns in (NS, "other"):
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    owner = api.create(configmap(NS, "owner", {}))
    policy(api, "same", ref("v1", "ConfigMap", owner))
    policy(api, "across", ref("v1", "ConfigMap", owner), namespace="other")
    api.start_controllers()
    wait_until(lambda: api.get("NetworkPolicy", "other", "across") is None,
               what="cross-namespace owner treated as absent")
    settle(api)
    assert api.get("NetworkPolicy", NS, "same") is not None


def test_references_that_cannot_be_resolved_collect_nothing(fake_api: FakeApiServer) -> None:
    api = fake_api
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    gone = api.create(configmap(NS, "gone", {}))
    api.delete("ConfigMap", NS, "gone")
    # A cluster-scoped dependent naming a namespaced kind; a kind nobody serves; a version
    # the group does not serve.
    api.create({"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {
        "name": "odd", "ownerReferences": [ref("v1", "ConfigMap", gone)]}, "rules": []})
    policy(api, "unknown-kind", {**ref("v1", "ConfigMap", gone), "kind": "Widget",
                                 "apiVersion": "example.com/v1"})
    policy(api, "unserved-version", {**ref(RBAC, "ClusterRole", gone),
                                     "apiVersion": "rbac.authorization.k8s.io/v9"})
    api.start_controllers()
    settle(api)
    assert api.get("ClusterRole", None, "odd") is not None
    assert api.get("NetworkPolicy", NS, "unknown-kind") is not None
    assert api.get("NetworkPolicy", NS, "unserved-version") is not None


def test_a_dependent_with_one_owner_left_loses_only_the_dangling_reference(
        fake_api: FakeApiServer) -> None:
    api = fake_api
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    a, b = cluster_role(api, "a"), cluster_role(api, "b")
    policy(api, "shared", ref(RBAC, "ClusterRole", a), ref(RBAC, "ClusterRole", b))
    api.start_controllers()
    api.delete("ClusterRole", None, "a")
    wait_until(lambda: [r["name"] for r in (api.get("NetworkPolicy", NS, "shared") or {})
                        .get("metadata", {}).get("ownerReferences", [])] == ["b"],
               what="dangling reference removed")
    api.delete("ClusterRole", None, "b")
    wait_until(lambda: api.get("NetworkPolicy", NS, "shared") is None, what="then collected")


def test_a_terminating_owner_keeps_them_a_foreground_one_lets_them_go(
        fake_api: FakeApiServer) -> None:
    api = fake_api
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    held = api.create({"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {
        "name": "held", "finalizers": ["example.com/hold"]}, "rules": []})
    fore = api.create({"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {
        "name": "fore", "finalizers": ["foregroundDeletion"]}, "rules": []})
    policy(api, "of-held", ref(RBAC, "ClusterRole", held))
    policy(api, "of-fore", ref(RBAC, "ClusterRole", fore))
    mine = policy(api, "finalized", ref(RBAC, "ClusterRole", fore))
    api.patch("NetworkPolicy", NS, "finalized", {"metadata": {"finalizers": ["example.com/x"]}})
    api.start_controllers()
    api.delete("ClusterRole", None, "held")
    api.delete("ClusterRole", None, "fore")
    wait_until(lambda: api.get("NetworkPolicy", NS, "of-fore") is None,
               what="dependents of a foreground deletion deleted")
    # A dependent's own finalizers hold it, as any object's.
    finalized = api.get("NetworkPolicy", NS, "finalized")
    assert finalized is not None and finalized["metadata"]["uid"] == mine["metadata"]["uid"]
    wait_until(lambda: bool((api.get("NetworkPolicy", NS, "finalized") or {})
                            .get("metadata", {}).get("deletionTimestamp")), what="terminating")
    settle(api)
    assert api.get("NetworkPolicy", NS, "of-held") is not None
