"""`hairpin-proxy cleanup`: the uninstall step."""

from __future__ import annotations

from collections.abc import Callable

from hairpin_proxy import corefile
from tests.controller.conftest import (
    COREFILE,
    NAMESPACE,
    NODE_LOCAL,
    PUBLISH,
    PUBLISHED,
    Controller,
    corefile_text,
    wait_until,
)
from tests.corefiles import BY_NAME
from tests.fakeapi.fixtures import configmap, ingress
from tests.fakeapi.server import FakeApiServer
from tests.waiting import PATIENCE

Start = Callable[..., Controller]


def test_cleanup_restores_the_corefile_byte_for_byte(cluster: FakeApiServer,
                                                     start: Start) -> None:
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com", "b.example.com"]))
    ctl = start(*PUBLISH)
    ctl.wait_ready()
    assert corefile.managed_hosts(corefile_text(cluster)) == ("a.example.com", "b.example.com")
    assert cluster.get("ConfigMap", NAMESPACE, "hairpin-proxy-hosts") is not None
    assert ctl.stop() == 0
    cleanup = start(command="cleanup")
    assert cleanup.proc.wait(PATIENCE) == 0, cleanup.log()
    assert corefile_text(cluster) == COREFILE
    assert cluster.get("ConfigMap", NAMESPACE, "hairpin-proxy-hosts") is None
    # Idempotent: a second run finds nothing to do and still succeeds.
    again = start(command="cleanup")
    assert again.proc.wait(PATIENCE) == 0, again.log()
    assert corefile_text(cluster) == COREFILE


def test_published_hosts_left_by_an_earlier_version_stay_until_the_uninstall(
        cluster: FakeApiServer, start: Start) -> None:
    """Not publishing (the default), the controller leaves a published ConfigMap of an
    earlier version as it is (its agents keep their last list); cleanup deletes it."""
    left = {"hosts": "old.example.com\n", "addresses": "10.96.0.50\n"}
    cluster.create(configmap(NAMESPACE, PUBLISHED, dict(left)))
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    ctl = start()
    ctl.wait_ready()
    wait_until(lambda: corefile.managed_hosts(corefile_text(cluster)) == ("a.example.com",),
               what="the rules written")
    cm = cluster.get("ConfigMap", NAMESPACE, PUBLISHED)
    assert cm is not None and cm["data"] == left
    # Neither read nor written (the create above is the test's, not over HTTP).
    assert not cluster.requests(path_re=PUBLISHED)
    assert ctl.stop() == 0
    cleanup = start(command="cleanup")
    assert cleanup.proc.wait(PATIENCE) == 0, cleanup.log()
    assert cluster.get("ConfigMap", NAMESPACE, PUBLISHED) is None


def test_cleanup_in_import_mode_removes_only_our_key(cluster: FakeApiServer,
                                                     start: Start) -> None:
    other = {"other.server": "example.org:53 {\n    forward . 10.0.0.1\n}\n"}
    cluster.create({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "coredns-custom", "namespace": "kube-system"},
                    "data": dict(other)})
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    ctl = start("--mode", "coredns-import", "--import-configmap-name", "coredns-custom")
    ctl.wait_ready()
    assert ctl.stop() == 0
    cleanup = start("--mode", "coredns-import", command="cleanup")
    assert cleanup.proc.wait(PATIENCE) == 0, cleanup.log()
    cm = cluster.get("ConfigMap", "kube-system", "coredns-custom")
    assert cm is not None and cm["data"] == other
    assert corefile_text(cluster) == COREFILE


def test_cleanup_deletes_an_import_configmap_it_created(cluster: FakeApiServer,
                                                        start: Start) -> None:
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    ctl = start("--mode", "coredns-import")
    ctl.wait_ready()
    assert cluster.get("ConfigMap", "kube-system", "coredns-custom") is not None
    assert ctl.stop() == 0
    cleanup = start("--mode", "coredns-import", command="cleanup")
    assert cleanup.proc.wait(PATIENCE) == 0, cleanup.log()
    assert cluster.get("ConfigMap", "kube-system", "coredns-custom") is None


def test_cleanup_fails_clearly_and_changes_nothing(cluster: FakeApiServer,
                                                   start: Start) -> None:
    cm = cluster.get("ConfigMap", "kube-system", "coredns")
    assert cm is not None
    broken = COREFILE + "}\n"
    cm["data"]["Corefile"] = broken
    cluster.update(cm)
    cleanup = start(command="cleanup")
    assert cleanup.proc.wait(PATIENCE) == 1
    assert "cleanup failed" in cleanup.log()
    assert corefile_text(cluster) == broken


def test_cleanup_reports_an_unreachable_api(cluster: FakeApiServer, start: Start) -> None:
    cluster.go_down()
    try:
        cleanup = start(command="cleanup")
        wait_until(lambda: cleanup.proc.poll() is not None, timeout=60, what="exit")
        assert cleanup.proc.returncode == 1
        assert "cleanup failed" in cleanup.log()
    finally:
        cluster.come_up()


def test_cleanup_removes_the_node_local_dns_block_and_old_rules(cluster: FakeApiServer,
                                                                start: Start) -> None:
    cluster.create(configmap("kube-system", "node-local-dns", {"Corefile": NODE_LOCAL}))
    # Rules the original tool left, besides ours.
    cm = cluster.get("ConfigMap", "kube-system", "coredns")
    assert cm is not None
    cm["data"]["Corefile"] = BY_NAME["legacy"].text
    cluster.update(cm)
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    ctl = start()
    ctl.wait_ready()

    def node_local() -> str:
        obj = cluster.get("ConfigMap", "kube-system", "node-local-dns")
        assert obj is not None
        return str(obj["data"]["Corefile"])

    wait_until(lambda: "hairpin-proxy.invalid" in node_local(), what="node-local-dns block")
    assert ctl.stop() == 0
    cleanup = start(command="cleanup")
    assert cleanup.proc.wait(PATIENCE) == 0, cleanup.log()
    assert node_local() == NODE_LOCAL
    assert "hairpin" not in corefile_text(cluster)
    assert corefile.managed_hosts(corefile_text(cluster)) == ()


def _guard_policy(api: FakeApiServer, ns: str, name: str, labels: dict[str, str]) -> None:
    api.create({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": name, "namespace": ns, "labels": labels},
                "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}})


def test_cleanup_deletes_our_guard_policies_and_no_other(cluster: FakeApiServer,
                                                         start: Start) -> None:
    ours = {"hairpin-proxy.io/guard": "edge", "app.kubernetes.io/managed-by": "hairpin-proxy"}
    for ns in ("web", "edge"):
        cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    _guard_policy(cluster, "web", "hairpin-proxy-guard-edge", ours)
    _guard_policy(cluster, "edge", "hairpin-proxy-guard-edge", ours)
    # Our guard label without our managed-by, and our managed-by without the guard label.
    _guard_policy(cluster, "web", "lookalike", {"hairpin-proxy.io/guard": "edge"})
    _guard_policy(cluster, "web", "managed", {"app.kubernetes.io/managed-by": "hairpin-proxy"})
    _guard_policy(cluster, "web", "plain", {})
    cleanup = start(command="cleanup")
    assert cleanup.proc.wait(PATIENCE) == 0, cleanup.log()
    assert [(p["metadata"]["namespace"], p["metadata"]["name"])
            for p in cluster.list("NetworkPolicy")] == [
        ("web", "lookalike"), ("web", "managed"), ("web", "plain")]
    # Listed with our selector only; deleted by name, ours only.
    lists = [r for r in cluster.requests("GET") if r.path.endswith("/networkpolicies")]
    assert [r.query.get("labelSelector") for r in lists] == [
        "hairpin-proxy.io/guard,app.kubernetes.io/managed-by=hairpin-proxy"]
    deletes = sorted(r.path for r in cluster.requests("DELETE", r"/networkpolicies/"))
    assert deletes == [
        "/apis/networking.k8s.io/v1/namespaces/edge/networkpolicies/hairpin-proxy-guard-edge",
        "/apis/networking.k8s.io/v1/namespaces/web/networkpolicies/hairpin-proxy-guard-edge"]


def test_cleanup_without_the_grant_to_list_policies_still_cleans_up(
        cluster: FakeApiServer, start: Start) -> None:
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    ctl = start()
    ctl.wait_ready()
    assert ctl.stop() == 0
    cluster.fail_requests(1, status=403, method="GET", path_re=r"/networkpolicies")
    cleanup = start(command="cleanup")
    assert cleanup.proc.wait(PATIENCE) == 0, cleanup.log()
    assert "cannot list NetworkPolicies" in cleanup.log()
    assert corefile_text(cluster) == COREFILE
    # --no-guard-policies (the cleanup Jobs): not asked at all.
    cluster.clear_requests()
    quiet = start("--no-guard-policies", command="cleanup")
    assert quiet.proc.wait(PATIENCE) == 0, quiet.log()
    assert not cluster.requests(path_re=r"/networkpolicies")
