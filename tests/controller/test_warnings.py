"""Start-up warnings (once per start, log and metric) and the namespace filter."""

from __future__ import annotations

from collections.abc import Callable

from hairpin_proxy import corefile
from tests.controller.conftest import COREFILE, Controller, corefile_text, wait_until
from tests.fakeapi.fixtures import configmap, ingress, service
from tests.fakeapi.server import FakeApiServer

Start = Callable[..., Controller]


def warnings_of(ctl: Controller) -> set[str]:
    return {str(r["warning"]) for r in ctl.records() if "warning" in r}


def test_warnings_for_a_risky_cluster(cluster: FakeApiServer, start: Start) -> None:
    cm = cluster.get("ConfigMap", "kube-system", "coredns")
    assert cm is not None
    cm["data"]["Corefile"] = COREFILE.replace("    reload\n", "")
    cluster.update(cm)
    cluster.create(configmap("kube-system", "node-local-dns", {"Corefile": ".:53 {}\n"}))
    cluster.create(service("ingress-nginx", "ingress-nginx-controller", type="LoadBalancer",
                           lb_ingress=[{"ip": "203.0.113.7", "ipMode": "Proxy"}]))
    # With node-local-dns kept in step (the default) there is nothing to warn about it.
    ctl = start("--node-local-dns", "off")
    ctl.wait_ready()
    wait_until(lambda: warnings_of(ctl) == {"no-reload", "node-local-dns", "ip-mode-proxy"},
               what="three warnings")
    for kind in ("no-reload", "node-local-dns", "ip-mode-proxy"):
        assert ctl.metric(f'hairpin_controller_warnings{{kind="{kind}"}}') == 1
    # Once per start: more reconciles do not repeat them.
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    wait_until(lambda: corefile.managed_hosts(corefile_text(cluster)) == ("a.example.com",),
               what="write")
    for kind in ("no-reload", "node-local-dns", "ip-mode-proxy"):
        assert sum(1 for r in ctl.records() if r.get("warning") == kind) == 1, kind


def test_optional_checks_without_permission_are_skipped(cluster: FakeApiServer,
                                                         start: Start) -> None:
    """The node-local-dns check (only made with --node-local-dns off), refused: node-local-dns
    is there, so it would warn if it could read; refused, it is skipped (logged at debug) and
    warns of nothing, and the controller runs on. (The ipMode check reads the Services the
    controller watches anyway, which it cannot run without.)"""
    cluster.create(configmap("kube-system", "node-local-dns", {"Corefile": ".:53 {}\n"}))
    cluster.fail_requests(100, status=403, path_re=r"/configmaps/(node-local-dns|nodelocaldns)")
    ctl = start("--log-level", "debug", "--node-local-dns", "off")
    ctl.wait_ready()

    def skipped() -> bool:
        return any(r.get("msg") == "optional check skipped"
                   and "node-local-dns" in str(r.get("path")) for r in ctl.records())
    wait_until(skipped, what="the node-local-dns check skipped")
    assert cluster.count("GET", r"/configmaps/node-local-dns") >= 1
    assert warnings_of(ctl) == set()
    assert ctl.metric('hairpin_controller_warnings{kind="node-local-dns"}') == 0
    assert ctl.proc.poll() is None


def test_include_namespace_watches_only_those(cluster: FakeApiServer, start: Start) -> None:
    cluster.create(ingress("team-a", "web", tls_hosts=["a.example.com"]))
    cluster.create(ingress("team-b", "web", tls_hosts=["b.example.com"]))
    cluster.create(ingress("other", "web", tls_hosts=["other.example.com"]))
    ctl = start("--include-namespace", "team-a", "--include-namespace", "team-b")
    ctl.wait_ready()
    assert corefile.managed_hosts(corefile_text(cluster)) == ("a.example.com", "b.example.com")
    # Namespaced list+watch only: no cluster-wide Ingress access needed.
    assert cluster.count("GET", r"^/apis/networking.k8s.io/v1/ingresses") == 0
    cluster.create(ingress("team-b", "new", tls_hosts=["new.example.com"]))
    wait_until(lambda: "new.example.com" in corefile.managed_hosts(corefile_text(cluster)),
               what="change in an included namespace")


def test_import_mode_warns_when_the_corefile_does_not_import_its_key(
        cluster: FakeApiServer, start: Start) -> None:
    # kubeadm's Corefile imports nothing: rules written to the import key have no effect.
    ctl = start("--mode", "coredns-import")
    ctl.wait_ready()
    wait_until(lambda: "import-not-imported" in warnings_of(ctl), what="warning")
    assert ctl.metric('hairpin_controller_warnings{kind="import-not-imported"}') == 1
    assert "no-reload" not in warnings_of(ctl)
