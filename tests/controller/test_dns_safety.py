"""Never make a cluster's DNS worse: withdrawal when the proxy is gone or we are uninstalled,
zones the Corefile already serves, copies of our rules elsewhere, node-local-dns, the nudge."""

from __future__ import annotations

import time
from collections.abc import Callable

from hairpin_proxy import corefile
from hairpin_proxy.corefile.nodelocal import nodelocal_hosts
from tests.controller.conftest import (
    COREFILE,
    NAMESPACE,
    NODE_LOCAL,
    PROXY_IP,
    Controller,
    corefile_puts,
    corefile_text,
    wait_until,
)
from tests.fakeapi.fixtures import (
    ADDON_MANAGER_POD,
    configmap,
    endpoint_slice,
    ingress,
    service,
)
from tests.fakeapi.server import FakeApiServer
from tests.waiting import PATIENCE

Start = Callable[..., Controller]




# Reconcile passes, whatever their result: a pass done is a decision taken.
PASSES = "hairpin_controller_reconciles_total"

def managed(api: FakeApiServer) -> tuple[str, ...]:
    return corefile.managed_hosts(corefile_text(api))


def events(api: FakeApiServer, reason: str) -> list[dict[str, object]]:
    return [e for ns in ("kube-system", NAMESPACE, "shop", "a")
            for e in api.list("Event", ns) if e.get("reason") == reason]


def with_host(api: FakeApiServer, start: Start, *flags: str) -> Controller:
    api.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    ctl = start(*flags)
    ctl.wait_ready()
    wait_until(lambda: managed(api) == ("a.example.com",), what="host added")
    return ctl


def set_ready(api: FakeApiServer, ready: bool) -> None:
    obj = api.get("EndpointSlice", NAMESPACE, "hairpin-proxy-abcde")
    assert obj is not None
    for ep in obj["endpoints"]:
        ep["conditions"]["ready"] = ready
    api.update(obj)


# --- the proxy is gone -----------------------------------------------------------------------


def test_a_missing_proxy_service_withdraws_every_rule_until_it_is_back(
        cluster: FakeApiServer, start: Start) -> None:
    ctl = with_host(cluster, start)
    cluster.delete("Service", NAMESPACE, "hairpin-proxy")
    wait_until(lambda: managed(cluster) == (), what="rules withdrawn")
    # The rest of the Corefile is exactly as before: the cluster answers as without us.
    assert corefile_text(cluster) == COREFILE
    status, body = ctl.get("/readyz")
    assert status == 200 and "rules withdrawn: the proxy Service hairpin-proxy/hairpin-proxy " \
        "does not exist" in body
    assert ctl.metric("hairpin_controller_rules_withdrawn") == 1
    wait_until(lambda: events(cluster, "RulesWithdrawn"), what="withdrawal Event")
    cluster.create(service(NAMESPACE, "hairpin-proxy", cluster_ips=[PROXY_IP]))
    wait_until(lambda: managed(cluster) == ("a.example.com",), what="rules restored")
    wait_until(lambda: events(cluster, "RulesRestored"), what="restore Event")
    (restored,) = events(cluster, "RulesRestored")
    assert restored["type"] == "Normal"
    assert ctl.metric("hairpin_controller_rules_withdrawn") == 0
    assert ctl.get("/readyz") == (200, "ok (leader)\n")


def test_no_ready_endpoint_withdraws_only_after_the_grace_period(cluster: FakeApiServer,
                                                                start: Start) -> None:
    ctl = with_host(cluster, start, "--proxy-grace", "3")
    puts = corefile_puts(cluster)
    lost = time.monotonic()  # before the controller can see it: the lower bound holds
    set_ready(cluster, False)
    wait_until(lambda: managed(cluster) == (), timeout=15, what="rules withdrawn")
    # Not before the grace period: a brief gap (a rollout, a restart) keeps the rules.
    assert time.monotonic() - lost >= 3.0
    assert corefile_puts(cluster) == puts + 1
    assert "no ready endpoint for 3s or more" in ctl.get("/readyz")[1]
    set_ready(cluster, True)
    wait_until(lambda: managed(cluster) == ("a.example.com",), what="rules restored")


def test_a_rolling_update_of_the_proxy_keeps_the_rules(cluster: FakeApiServer,
                                                       start: Start) -> None:
    # A grace period far longer than the gap below: only a stall of several seconds between
    # two lines of this test could stretch the gap past it.
    grace = 8.0
    ctl = with_host(cluster, start, "--proxy-grace", str(grace))
    puts = corefile_puts(cluster)
    # New pods' slice arrives, the old one goes; then a gap shorter than the grace period.
    cluster.create(endpoint_slice(NAMESPACE, "hairpin-proxy", name="hairpin-proxy-new",
                                  addresses=["10.244.1.20"], ready=None))
    cluster.delete("EndpointSlice", NAMESPACE, "hairpin-proxy-abcde")
    time.sleep(0.5)  # long enough for the controller to see each step (lower bounds)
    gap = time.monotonic()
    cluster.delete("EndpointSlice", NAMESPACE, "hairpin-proxy-new")
    time.sleep(1.0)
    cluster.create(endpoint_slice(NAMESPACE, "hairpin-proxy", name="hairpin-proxy-newer"))
    # Past the grace period counted from the gap: a timer left running would have fired.
    time.sleep(max(0.0, gap + grace + 1.0 - time.monotonic()))
    assert managed(cluster) == ("a.example.com",)
    assert corefile_puts(cluster) == puts
    assert ctl.metric("hairpin_controller_rules_withdrawn") == 0
    assert not events(cluster, "RulesWithdrawn")


def test_an_api_outage_and_a_leader_change_keep_the_rules(cluster: FakeApiServer,
                                                          start: Start) -> None:
    a = with_host(cluster, start)
    b = start()
    b.wait_ready()
    cluster.go_down()
    time.sleep(3)
    cluster.come_up()
    a.stop()
    wait_until(lambda: b.metric("hairpin_controller_leader") == 1, what="takeover")
    wait_until(lambda: b.metric(PASSES) >= 1,
               what="the new leader's first pass")
    assert managed(cluster) == ("a.example.com",)
    assert b.metric("hairpin_controller_rules_withdrawn") == 0
    assert not events(cluster, "RulesWithdrawn")


# --- uninstall -------------------------------------------------------------------------------


def test_deleting_our_namespace_withdraws_every_rule_at_once(cluster: FakeApiServer,
                                                             start: Start) -> None:
    cluster.create(configmap("kube-system", "node-local-dns", {"Corefile": NODE_LOCAL}))
    ctl = with_host(cluster, start)

    def node_local() -> str:
        cm = cluster.get("ConfigMap", "kube-system", "node-local-dns")
        assert cm is not None
        return str(cm["data"]["Corefile"])

    wait_until(lambda: nodelocal_hosts(node_local()) == ("a.example.com",),
               what="node-local-dns rules")
    # `kubectl delete -f deploy/hairpin-proxy.yaml` deletes the namespace first: it stays
    # Terminating while its content goes, and the controller withdraws everything at once.
    cluster.delete("Namespace", None, NAMESPACE)
    wait_until(lambda: managed(cluster) == (), timeout=5, what="rules withdrawn")
    wait_until(lambda: nodelocal_hosts(node_local()) == (), timeout=5,
               what="node-local-dns withdrawn")
    assert corefile_text(cluster) == COREFILE
    assert node_local() == NODE_LOCAL
    # Withdrawn, with nothing held to let go of (no Role or ServiceAccount here): the
    # uninstall is done, and the controller exits, having failed nothing.
    assert ctl.proc.wait(PATIENCE) == 0
    assert any(r.get("msg") == "uninstalled: every rule withdrawn and the held objects let "
               "go; exiting" for r in ctl.records())
    assert not [r for r in ctl.records() if r.get("msg") == "reconcile failed; will retry"]
    cluster.create(ingress("b", "b", tls_hosts=["b.example.com"]))
    assert managed(cluster) == ()
    cluster.finalize_namespace(NAMESPACE)


def test_sigterm_during_the_uninstall_waits_for_the_withdrawal(cluster: FakeApiServer,
                                                                start: Start) -> None:
    ctl = with_host(cluster, start)
    # The first withdrawal attempt fails; SIGTERM (the pod's deletion) arrives before the retry.
    cluster.fail_requests(1, status=500, method="PUT", path_re=r"/configmaps/coredns$")
    cluster.delete("Namespace", None, NAMESPACE)
    wait_until(lambda: any(r.get("msg") == "reconcile failed; will retry"
                           for r in ctl.records()), timeout=5, what="failed attempt")
    assert ctl.stop() == 0
    assert managed(cluster) == ()
    cluster.finalize_namespace(NAMESPACE)


def test_a_controller_restart_withdraws_nothing(cluster: FakeApiServer, start: Start) -> None:
    ctl = with_host(cluster, start)
    puts = corefile_puts(cluster)
    assert ctl.stop() == 0
    again = start()
    again.wait_ready()
    wait_until(lambda: again.metric(PASSES) >= 1,
               what="the restarted controller's pass")
    assert managed(cluster) == ("a.example.com",)
    assert corefile_puts(cluster) == puts


# --- what the Corefile already says --------------------------------------------------------


def set_corefile(api: FakeApiServer, text: str) -> None:
    cm = api.get("ConfigMap", "kube-system", "coredns")
    assert cm is not None
    cm["data"]["Corefile"] = text
    api.update(cm)


def test_zones_the_corefile_serves_are_refused_with_an_event(cluster: FakeApiServer,
                                                             start: Start) -> None:
    fake_api = cluster
    stub = "corp.internal:53 {\n    forward . 10.0.0.53\n}\n"
    set_corefile(fake_api, COREFILE + stub)
    fake_api.create(ingress("shop", "web", tls_hosts=["db.corp.internal", "shop.example.com"]))
    ctl = start()
    ctl.wait_ready()
    wait_until(lambda: managed(fake_api) == ("shop.example.com",), what="only the public host")
    wait_until(lambda: events(fake_api, "HostRejected"), what="Event on the Ingress")
    (event,) = events(fake_api, "HostRejected")
    assert "db.corp.internal" in str(event["message"])
    assert "corp.internal, a zone the cluster's DNS already answers" in str(event["message"])


def test_our_rules_copied_into_another_block_are_reported_not_edited(
        cluster: FakeApiServer, start: Start) -> None:
    fake_api = cluster
    answers = corefile.Answers.of([PROXY_IP])
    copied = corefile.apply(".:53 {\n}\n", ["old.example.com"], answers=answers)
    stray = copied.replace(".:53 {", "example.org:53 {", 1)
    set_corefile(fake_api, COREFILE + stray)
    ctl = start()
    ctl.wait_ready()
    wait_until(lambda: events(fake_api, "StrayRules"), what="Event on the ConfigMap")
    assert ctl.metric("hairpin_controller_stray_rules") == 2
    assert corefile_text(fake_api).endswith(stray)
    assert managed(fake_api) == ()


# --- node-local-dns --------------------------------------------------------------------------


def test_node_local_dns_forwards_our_hosts_to_coredns(cluster: FakeApiServer,
                                                      start: Start) -> None:
    cluster.create(configmap("kube-system", "nodelocaldns", {"Corefile": NODE_LOCAL}))
    with_host(cluster, start, "--allow-mass-removal")

    def text() -> str:
        cm = cluster.get("ConfigMap", "kube-system", "nodelocaldns")
        assert cm is not None
        return str(cm["data"]["Corefile"])

    wait_until(lambda: nodelocal_hosts(text()) == ("a.example.com",), what="block written")
    assert "forward . __PILLAR__CLUSTER__DNS__ {" in text().split("a.example.com:53", 1)[1]
    # Someone puts the stock file back: the block is repaired.
    cm = cluster.get("ConfigMap", "kube-system", "nodelocaldns")
    assert cm is not None
    cm["data"]["Corefile"] = NODE_LOCAL
    cluster.update(cm)
    wait_until(lambda: nodelocal_hosts(text()) == ("a.example.com",), what="block repaired")
    cluster.delete("Ingress", "a", "a")
    wait_until(lambda: text() == NODE_LOCAL, what="block removed")


def test_node_local_dns_managed_by_the_addon_manager_is_left_alone(cluster: FakeApiServer,
                                                                  start: Start) -> None:
    """Labelled Reconcile and an addon manager runs (kube-up: its static pod's mirror in
    kube-system): every edit would be reverted, so none is made."""
    cluster.create(configmap("kube-system", "node-local-dns", {"Corefile": NODE_LOCAL},
                             labels={"addonmanager.kubernetes.io/mode": "Reconcile"}))
    cluster.create(ADDON_MANAGER_POD)
    ctl = with_host(cluster, start)
    wait_until(lambda: events(cluster, "NodeLocalDNSReconciled"), what="Event")
    cm = cluster.get("ConfigMap", "kube-system", "node-local-dns")
    assert cm is not None and cm["data"]["Corefile"] == NODE_LOCAL
    assert "kube-system/kube-addon-manager-master-1" in ctl.get("/readyz")[1]
    assert ctl.metric("hairpin_controller_node_local_dns_reconciled") == 1
    # Said once, not on every pass.
    cluster.create(ingress("b", "b", tls_hosts=["b.example.com"]))
    wait_until(lambda: len(managed(cluster)) == 2, what="second host")
    assert len(events(cluster, "NodeLocalDNSReconciled")) == 1


# --- propagation -----------------------------------------------------------------------------


def test_nudge_annotates_the_coredns_pods_after_a_write(cluster: FakeApiServer,
                                                        start: Start) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "coredns-1", "namespace": "kube-system",
                        "labels": {"k8s-app": "kube-dns"}},
           "spec": {"containers": [{"name": "coredns", "image": "coredns/coredns:1.11.3"}]}}
    cluster.create(pod)
    with_host(cluster, start, "--nudge-coredns")

    def annotation() -> object:
        obj = cluster.get("Pod", "kube-system", "coredns-1")
        assert obj is not None
        return (obj["metadata"].get("annotations") or {}).get("hairpin-proxy.io/corefile-version")

    cm = cluster.get("ConfigMap", "kube-system", "coredns")
    assert cm is not None
    wait_until(lambda: annotation() == cm["metadata"]["resourceVersion"], what="pod annotated")
