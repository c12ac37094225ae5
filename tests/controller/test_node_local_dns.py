"""node-local-dns judged by what happens, not by its label (issue 23), and reverts of our
changes: named from managedFields, told, repaired with backoff, suspended, resumed.

The ConfigMap is the upstream manifest's as shipped (labelled addonmanager.kubernetes.io/mode:
Reconcile, placeholders in place). Reverts are updates by another field manager, which the fake
API records in managedFields as the real API server does.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

from hairpin_proxy.corefile import managed_hosts
from hairpin_proxy.corefile.nodelocal import nodelocal_hosts
from hairpin_proxy.edits.revert_policy import OUR_MANAGER
from hairpin_proxy.kube.client import USER_AGENT
from tests.controller.conftest import COREFILE, Controller, wait_until
from tests.corefiles import NODE_LOCAL_MANIFEST
from tests.fakeapi import managedfields as mf
from tests.fakeapi.fixtures import ADDON_MANAGER_POD, configmap, ingress
from tests.fakeapi.server import FakeApiServer

Start = Callable[..., Controller]
# kubeadm's Corefile importing the coredns-custom keys (as k3s and AKS do).
IMPORTING = COREFILE.replace("    reload\n",
                             "    reload\n    import /etc/coredns/custom/*.override\n")
CM = ("ConfigMap", "kube-system", "node-local-dns")
WHERE = "kube-system/node-local-dns"
RECONCILE = {"addonmanager.kubernetes.io/mode": "Reconcile"}
# Short backoff: 0.2 s, 0.4 s, then suspended (limit 3) with a try every 2 s.
BACKOFF = ("--repair-backoff", "0.2", "--repair-backoff-max", "2", "--revert-limit", "3",
           "--revert-window", "600")


def text(api: FakeApiServer) -> str:
    cm = api.get(*CM)
    assert cm is not None
    return str(cm["data"]["Corefile"])


def events(api: FakeApiServer, reason: str) -> list[dict[str, object]]:
    return [e for e in api.list("Event", "kube-system") if e.get("reason") == reason]


def n_events(api: FakeApiServer, reason: str, n: int) -> list[dict[str, object]]:
    """The Events of ``reason`` once there are ``n`` of them (else none)."""
    found = events(api, reason)
    return found if len(found) == n else []


def shipped(api: FakeApiServer) -> None:
    """The upstream manifest's ConfigMap, as `kubectl apply` created it."""
    api.create(configmap("kube-system", "node-local-dns", {"Corefile": NODE_LOCAL_MANIFEST},
                         labels=RECONCILE), manager="kubectl-client-side-apply")


def with_host(api: FakeApiServer, start: Start, *flags: str) -> Controller:
    api.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    ctl = start(*flags)
    ctl.wait_ready()
    return ctl


def covered(api: FakeApiServer) -> bool:
    return nodelocal_hosts(text(api)) == ("a.example.com",)


def test_our_writes_are_ours_in_managed_fields() -> None:
    assert mf.manager_from_user_agent(USER_AGENT) == OUR_MANAGER


def test_the_upstream_manifest_labelled_reconcile_is_edited(cluster: FakeApiServer,
                                                           start: Start) -> None:
    """No addon manager runs (kubeadm, RKE, kubespray): the label is inert and our block goes
    in; the label and every other byte stay, and the key is ours in managedFields."""
    shipped(cluster)
    ctl = with_host(cluster, start)
    wait_until(lambda: covered(cluster), what="block written")
    cm = cluster.get(*CM)
    assert cm is not None
    assert cm["metadata"]["labels"] == RECONCILE
    assert text(cluster).startswith(NODE_LOCAL_MANIFEST)
    assert "bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__" in text(cluster).split(
        "a.example.com:53", 1)[1]
    assert mf.owners(cm, ("data", "Corefile")) == [OUR_MANAGER]
    # It looked for an addon manager (narrowly: kube-system, by its label) and found none.
    looked = cluster.requests("GET", r"/api/v1/namespaces/kube-system/pods(\?|$)")
    assert looked and all(r.query.get("labelSelector") == "component=kube-addon-manager"
                          for r in looked)
    assert ctl.metric("hairpin_controller_node_local_dns_reconciled") == 0
    assert not events(cluster, "NodeLocalDNSReconciled")


def test_an_addon_manager_pod_keeps_it_unedited_with_the_event(cluster: FakeApiServer,
                                                              start: Start) -> None:
    shipped(cluster)
    cluster.create(ADDON_MANAGER_POD)
    ctl = with_host(cluster, start)
    found = wait_until(lambda: events(cluster, "NodeLocalDNSReconciled"), what="Event")
    assert "kube-system/kube-addon-manager-master-1" in str(found[0]["message"])
    assert text(cluster) == NODE_LOCAL_MANIFEST
    assert ctl.metric("hairpin_controller_node_local_dns_reconciled") == 1
    assert cluster.count("PUT", r"/configmaps/node-local-dns$") == 0


def test_no_permission_to_look_for_the_addon_manager_counts_as_none(cluster: FakeApiServer,
                                                                    start: Start) -> None:
    """A Role without `list pods` (a narrower chart): unknown is not a reconciler. The block
    goes in; a reconciler, if there is one, shows itself by reverting it (named then)."""
    shipped(cluster)
    cluster.create(ADDON_MANAGER_POD)
    cluster.fail_requests(1000, status=403, path_re=r"/namespaces/kube-system/pods\?")
    ctl = with_host(cluster, start, "--log-level", "debug")
    wait_until(lambda: covered(cluster), what="block written")
    assert any(r.get("msg") == "cannot look for the addon manager" for r in ctl.records())
    assert not events(cluster, "NodeLocalDNSReconciled")


def test_gke_managed_node_local_dns_is_left_alone(cluster: FakeApiServer, start: Start) -> None:
    """GKE runs its addon manager on a control plane no pod list shows; /version says GKE."""
    cluster.version["gitVersion"] = "v1.30.5-gke.1014001"
    shipped(cluster)
    ctl = with_host(cluster, start)
    found = wait_until(lambda: events(cluster, "NodeLocalDNSReconciled"), what="Event")
    assert "GKE" in str(found[0]["message"])
    assert text(cluster) == NODE_LOCAL_MANIFEST
    assert "GKE" in ctl.get("/readyz")[1]


def revert(api: FakeApiServer, manager: str) -> float:
    """Put the stock Corefile back as ``manager`` would (an Update by that field manager);
    the wall-clock time just before it."""
    at = time.time()
    cm = api.get(*CM)
    assert cm is not None
    cm["data"]["Corefile"] = NODE_LOCAL_MANIFEST
    api.update(cm, manager=manager)
    return at


def repaired_after(api: FakeApiServer, since: float) -> float:
    """The time of the controller's first write of node-local-dns after ``since``."""
    puts = [r.time for r in api.requests("PUT", r"/configmaps/node-local-dns$")
            if r.time >= since and r.status == 200]
    return min(puts)


def test_reverts_are_named_backed_off_suspended_and_resumed(cluster: FakeApiServer,
                                                            start: Start) -> None:
    shipped(cluster)
    ctl = with_host(cluster, start, *BACKOFF)
    wait_until(lambda: covered(cluster), what="block written")
    metric = (f'hairpin_controller_reverts_total{{configmap="{WHERE}",'
              'manager="argocd-controller"}')
    # Two reverts: each named, each repaired no sooner than its backoff (0.2 s, then 0.4 s).
    for n, backoff in ((1, 0.2), (2, 0.4)):
        at = revert(cluster, "argocd-controller")
        wait_until(lambda: covered(cluster), what=f"repair {n}")
        assert repaired_after(cluster, at) - at >= backoff
        assert ctl.metric(metric) == n
        # Events go out in the background: waited for, not assumed.
        told = wait_until(functools.partial(n_events, cluster, "ConfigMapReverted", n),
                          what=f"Event {n}")
        assert all("removed by argocd-controller (Update)" in str(e["message"]) for e in told)
    assert any(r.get("manager") == "argocd-controller" and r.get("msg") ==
               "our change was reverted" for r in ctl.records())
    # The third within the window: repairs stop, and say why and how to fix it.
    at = revert(cluster, "argocd-controller")
    suspended = wait_until(lambda: events(cluster, "RepairSuspended"), what="suspended")
    message = str(suspended[0]["message"])
    assert "argocd-controller" in message and "ignoreDifferences" in message
    assert ctl.metric(f'hairpin_controller_repairs_suspended{{configmap="{WHERE}"}}') == 1
    assert "repairs suspended" in ctl.get("/readyz")[1]
    # One probe per --repair-backoff-max (2 s): never sooner.
    wait_until(lambda: covered(cluster), what="probe")
    assert repaired_after(cluster, at) - at >= 2.0
    # The probe is left alone: repairs resume, said once.
    resumed = wait_until(lambda: events(cluster, "RepairResumed"), what="resumed")
    assert resumed[0]["type"] == "Normal"
    assert ctl.metric(f'hairpin_controller_repairs_suspended{{configmap="{WHERE}"}}') == 0
    assert "repairs suspended" not in ctl.get("/readyz")[1]
    # Afresh: the next revert is repaired after the first backoff again, not suspended.
    at = revert(cluster, "argocd-controller")
    wait_until(lambda: covered(cluster), what="repair after resuming")
    assert repaired_after(cluster, at) - at >= 0.2
    assert len(events(cluster, "RepairSuspended")) == 1


def corefile_has_host(api: FakeApiServer) -> bool:
    cm = api.get("ConfigMap", "kube-system", "coredns")
    return cm is not None and managed_hosts(str(cm["data"]["Corefile"])) == ("a.example.com",)


def test_a_revert_of_the_corefile_is_named_too(cluster: FakeApiServer, start: Start) -> None:
    """The CoreDNS ConfigMap itself: our rules removed by kube-addon-manager, told (Event on
    the ConfigMap, log line, metric) and repaired after the backoff."""
    ctl = with_host(cluster, start, *BACKOFF)
    wait_until(lambda: corefile_has_host(cluster), what="rules written")
    cm = cluster.get("ConfigMap", "kube-system", "coredns")
    assert cm is not None
    at = time.time()
    cm["data"]["Corefile"] = COREFILE
    cluster.update(cm, manager="kube-addon-manager")
    wait_until(lambda: corefile_has_host(cluster), what="Corefile repaired")
    puts = [r.time for r in cluster.requests("PUT", r"/configmaps/coredns$")
            if r.time >= at and r.status == 200]
    assert min(puts) - at >= 0.2
    told = wait_until(lambda: events(cluster, "ConfigMapReverted"), what="Event")
    assert len(told) == 1 and "removed by kube-addon-manager" in str(told[0]["message"])
    assert told[0]["involvedObject"]["name"] == "coredns"  # type: ignore[index]
    assert ctl.metric('hairpin_controller_reverts_total{configmap="kube-system/coredns",'
                      'manager="kube-addon-manager"}') == 1


def test_a_removed_import_key_is_noticed(cluster: FakeApiServer, start: Start) -> None:
    """--mode coredns-import: our key of coredns-custom deleted by argocd-controller. A deleted
    key is owned by nobody, so the last other writer is named as such."""
    cluster.update({**(cluster.get("ConfigMap", "kube-system", "coredns") or {}),
                    "data": {"Corefile": IMPORTING}})
    cluster.create(configmap("kube-system", "coredns-custom", {"other.server": "# theirs\n"}),
                   manager="argocd-controller")
    ctl = with_host(cluster, start, "--mode", "coredns-import", *BACKOFF)

    def ours() -> bool:
        cm = cluster.get("ConfigMap", "kube-system", "coredns-custom")
        return cm is not None and "hairpin-proxy.override" in cm["data"]
    wait_until(ours, what="key written")
    cm = cluster.get("ConfigMap", "kube-system", "coredns-custom")
    assert cm is not None
    del cm["data"]["hairpin-proxy.override"]
    cm["data"]["other.server"] = "# theirs, synced again\n"
    cluster.update(cm, manager="argocd-controller")
    wait_until(ours, what="key repaired")
    told = wait_until(lambda: events(cluster, "ConfigMapReverted"), what="Event")
    assert "removed by argocd-controller (Update)" in str(told[0]["message"])
    assert ctl.metric('hairpin_controller_reverts_total{configmap="kube-system/coredns-custom",'
                      'manager="argocd-controller"}') == 1
