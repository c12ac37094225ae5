"""The doctor end to end: the real CLI against real nginx (with and without proxy_protocol),
the relay in front of it, and the fake API server for the cluster facts.

DNS answers for test names come from ``--resolve``; ``test_netns`` covers real resolution.
Loopback only: 127.0.0.1 is the "load balancer" address (kube-proxy would send in-cluster
traffic for it straight to the ingress controller, which is what a connection to nginx on
127.0.0.1 is), 127.0.0.2 the proxy Service's ClusterIP.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hairpin_proxy import corefile
from tests.doctor.conftest import LB_IP, PROXY_IP
from tests.doctor.objects import (
    NODE_LOCAL_COREFILE,
    coredns_deployment,
    daemonset,
    endpoint_slice,
    node_local_configmap,
    with_annotations,
    with_ingress_status,
)
from tests.fakeapi.fixtures import (
    ADDON_MANAGER_POD,
    configmap,
    corefile_configmap,
    ingress,
    ingress_class,
    service,
)
from tests.fakeapi.server import FakeApiServer
from tests.peers import free_port
from tests.peers.nginx import Nginx
from tests.relay.helpers import Relay, run_relay

HOST = "shop.example.test"
NS = "hairpin-proxy"
ANSWERS = corefile.Answers.of([PROXY_IP])
KUBEADM = (Path(__file__).parents[1] / "corefiles" / "kubeadm.Corefile").read_text()
NO_RELOAD = KUBEADM.replace("    reload\n", "")
DO_PP = "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol"



# The host verification asks public DNS, which tests reach only through their own dnsmasq
# (tests/doctor/test_verification.py turns it on).
NO_VERIFY = ("--verify-hosts", "off")


def doctor(*args: str, kubeconfig: Path | None = None, verify: tuple[str, ...] = NO_VERIFY,
           timeout: str = "5", environ: dict[str, str] | None = None
           ) -> tuple[int, dict[str, Any], str]:
    """Run ``hairpin-proxy doctor ... --output json``: (exit status, JSON report, stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAIRPIN_")}
    env.pop("KUBECONFIG", None)
    env.update(environ or {})
    cmd = [sys.executable, "-m", "hairpin_proxy", "doctor", *args, "--output", "json",
           "--timeout", timeout, *verify]
    if kubeconfig is not None:
        cmd += ["--kubeconfig", str(kubeconfig), "--namespace", NS]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env,
                          check=False)
    report = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, report, proc.stderr


def ports(n: Nginx) -> list[str]:
    return ["--port", str(n.port), "--tls-port", str(n.tls_port)]


def one(report: dict[str, Any]) -> dict[str, Any]:
    (host,) = report["hosts"]
    assert isinstance(host, dict)
    return host




def setup_cluster(api: FakeApiServer, *, ip_mode: str = "VIP", hostname: str = "",
                  rule: bool = False, corefile_text: str = KUBEADM,
                  coredns: str = "1.11.1", node_local_dns: bool = False,
                  node_local_cm: str = "", node_local_hosts: tuple[str, ...] = (),
                  reconciled: bool = False, labelled: bool = False,
                  proxy: bool = False, ready: bool | None = True) -> None:
    """A cluster; ``node_local_cm`` names node-local-dns's ConfigMap (none when empty), whose
    block of ours covers ``node_local_hosts``; ``labelled``: it is labelled mode Reconcile (as
    upstream ships it); ``reconciled``: that, and an addon-manager pod runs in kube-system."""
    entry: dict[str, str] = {"hostname": hostname} if hostname else {"ip": LB_IP}
    if ip_mode:
        entry["ipMode"] = ip_mode
    lb = service("ingress-nginx", "ingress-nginx-controller", type="LoadBalancer",
                 lb_ingress=[entry])
    api.create(with_annotations(lb, {DO_PP: "true"}))
    text = corefile.apply(corefile_text, [HOST], answers=ANSWERS) if rule else corefile_text
    api.create(corefile_configmap(text))
    api.create(coredns_deployment(coredns))
    api.create(daemonset("kube-system", "kube-proxy", {"k8s-app": "kube-proxy"}))
    if node_local_dns:
        api.create(daemonset("kube-system", "node-local-dns", {"k8s-app": "node-local-dns"}))
    if node_local_cm:
        api.create(node_local_configmap(node_local_cm, node_local_hosts,
                                        reconciled=reconciled or labelled))
    if reconciled:
        api.create(ADDON_MANAGER_POD)
    if proxy:
        api.create(service(NS, "hairpin-proxy", cluster_ips=[PROXY_IP]))
        if ready is not None:
            api.create(endpoint_slice(NS, "hairpin-proxy", ["10.0.0.5"], ready=ready))


# --------------------------------------------------------------------------- hairpin


def test_hairpin_confirmed_and_not_fixed(fake_api: FakeApiServer, kubeconfig: Path,
                                         pp_nginx: Nginx) -> None:
    setup_cluster(fake_api)
    rc, report, _ = doctor(HOST, "--resolve", f"{HOST}:{LB_IP}", *ports(pp_nginx),
                           kubeconfig=kubeconfig)
    h = one(report)
    assert rc == 1 and not report["ok"]
    assert h["verdict"] == "hairpin-confirmed"
    assert h["advice"] == "hairpin confirmed and not fixed: install hairpin-proxy"
    assert h["dns"]["addresses"] == [{"address": LB_IP, "kind": "lb"}]
    assert h["http"]["bare"]["outcome"] in ("empty", "reset")
    assert h["http"]["proxy_v1"] == {"outcome": "http", "status": 200}
    assert h["tls"]["proxy_v2"] == {"outcome": "http", "status": 200}
    assert h["load_balancer"]["service"] == "ingress-nginx/ingress-nginx-controller"
    assert h["load_balancer"]["ingress"][0]["ipMode"] == "VIP"
    (pp,) = h["load_balancer"]["proxy_protocol"]
    assert (pp["annotation"], pp["provider"], pp["enabled"]) == (DO_PP, "DigitalOcean", True)
    cluster = report["cluster"]
    assert cluster["proxy_service_found"] is False
    assert cluster["coredns_version"] == "1.11.1" and cluster["node_local_dns"] is False
    assert cluster["reload_plugin"] is True and cluster["rule_hosts"] == []


def test_text_report(fake_api: FakeApiServer, kubeconfig: Path, pp_nginx: Nginx) -> None:
    setup_cluster(fake_api)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAIRPIN_")}
    proc = subprocess.run(
        [sys.executable, "-m", "hairpin_proxy", "doctor", HOST, "--resolve", f"{HOST}:{LB_IP}",
         *ports(pp_nginx), "--kubeconfig", str(kubeconfig), "--namespace", NS, *NO_VERIFY],
        capture_output=True, text=True, timeout=120, env=env, check=False)
    assert proc.returncode == 1
    out = proc.stdout
    assert f"{HOST}  FAIL  hairpin-confirmed" in out
    assert "advice   hairpin confirmed and not fixed: install hairpin-proxy" in out
    assert f"{LB_IP} (load balancer) [--resolve]" in out
    assert "PROXY v1 HTTP 200" in out and "-> hairpin" in out
    assert f"{DO_PP}='true' (DigitalOcean: on)" in out
    assert "CoreDNS            1.11.1" in out
    assert "  verify   off (redirected): --verify-hosts off: the controller redirects" in out
    assert "1 host(s) checked, 1 need attention" in out


def test_rule_missing(fake_api: FakeApiServer, kubeconfig: Path, pp_nginx: Nginx) -> None:
    setup_cluster(fake_api, proxy=True)
    rc, report, _ = doctor(HOST, "--resolve", f"{HOST}:{LB_IP}", *ports(pp_nginx),
                           kubeconfig=kubeconfig)
    assert rc == 1 and one(report)["verdict"] == "rule-missing"
    assert report["cluster"]["proxy_addresses"] == [PROXY_IP]
    assert report["cluster"]["proxy_ready_endpoints"] == 1


@pytest.mark.parametrize(("kwargs", "code"), [
    ({}, "dns-not-updated"),
    ({"corefile_text": NO_RELOAD}, "coredns-no-reload"),
    ({"coredns": "1.5.0"}, "coredns-too-old"),
    # node-local-dns without either ConfigMap the controller edits: nothing sends the name on.
    ({"node_local_dns": True}, "node-local-dns-missing"),
    # Our block there, but for other names (not written yet, or --node-local-dns off).
    ({"node_local_dns": True, "node_local_cm": "node-local-dns",
      "node_local_hosts": ("other.example.test",)}, "node-local-dns-missing"),
    ({"node_local_dns": True, "node_local_cm": "nodelocaldns"}, "node-local-dns-missing"),
    # The addon manager runs and the ConfigMap is labelled for it: the controller cannot keep
    # the names there.
    ({"node_local_dns": True, "node_local_cm": "node-local-dns", "reconciled": True},
     "node-local-dns-reconciled"),
    # The label alone (kubeadm, RKE: no addon manager) keeps nobody from editing it.
    ({"node_local_dns": True, "node_local_cm": "node-local-dns", "labelled": True},
     "node-local-dns-missing"),
    # Our block covers the host (as a wildcard's zone): node-local-dns is not the reason.
    ({"node_local_dns": True, "node_local_cm": "node-local-dns",
      "node_local_hosts": ("*.example.test",)}, "dns-not-updated"),
])
def test_rule_exists_but_dns_still_answers_the_lb(fake_api: FakeApiServer, kubeconfig: Path,
                                                  pp_nginx: Nginx, kwargs: dict[str, Any],
                                                  code: str) -> None:
    setup_cluster(fake_api, proxy=True, rule=True, **kwargs)
    rc, report, _ = doctor(HOST, "--resolve", f"{HOST}:{LB_IP}", *ports(pp_nginx),
                           kubeconfig=kubeconfig)
    assert rc == 1 and one(report)["verdict"] == code
    assert report["cluster"]["rule_hosts"] == [HOST]


def test_rule_in_the_import_key(fake_api: FakeApiServer, kubeconfig: Path,
                                pp_nginx: Nginx) -> None:
    setup_cluster(fake_api, proxy=True,
                  corefile_text=KUBEADM.replace("    reload\n",
                                                "    reload\n    import custom/*.override\n"))
    fake_api.create(configmap("kube-system", "coredns-custom", {
        "hairpin-proxy.override": corefile.import_snippet(["*.example.test"],
                                                          answers=ANSWERS)}))
    rc, report, _ = doctor(HOST, "--resolve", f"{HOST}:{LB_IP}", *ports(pp_nginx),
                           "--mode", "coredns-import", kubeconfig=kubeconfig)
    assert rc == 1 and one(report)["verdict"] == "dns-not-updated"
    assert report["cluster"]["rule_hosts"] == ["*.example.test"]


def test_ipmode_proxy_ignored(fake_api: FakeApiServer, kubeconfig: Path,
                              pp_nginx: Nginx) -> None:
    setup_cluster(fake_api, ip_mode="Proxy")
    rc, report, _ = doctor(HOST, "--resolve", f"{HOST}:{LB_IP}", *ports(pp_nginx),
                           kubeconfig=kubeconfig)
    assert rc == 1 and one(report)["verdict"] == "ipmode-ignored"


# --------------------------------------------------------------------------- healthy paths


def test_not_needed_with_ipmode_proxy(fake_api: FakeApiServer, kubeconfig: Path,
                                      plain_nginx: Nginx) -> None:
    setup_cluster(fake_api, ip_mode="Proxy")
    rc, report, _ = doctor(HOST, "--resolve", f"{HOST}:{LB_IP}", *ports(plain_nginx),
                           kubeconfig=kubeconfig)
    h = one(report)
    assert rc == 0 and report["ok"] and h["verdict"] == "not-needed-ipmode"
    assert h["http"]["bare"]["status"] == 200 and h["http"]["proxy_v1"]["status"] == 400


def test_not_needed_with_a_hostname(fake_api: FakeApiServer, kubeconfig: Path,
                                    plain_nginx: Nginx) -> None:
    setup_cluster(fake_api, ip_mode="", hostname="lb.example.net")
    fake_api.create(with_ingress_status(ingress("shop", "web", tls_hosts=[HOST],
                                                rule_hosts=[HOST]), hostname="lb.example.net"))
    rc, report, _ = doctor(HOST, "--resolve", f"{HOST}:{LB_IP}", *ports(plain_nginx),
                           kubeconfig=kubeconfig)
    h = one(report)
    assert rc == 0 and h["verdict"] == "not-needed-hostname"
    assert h["dns"]["addresses"][0]["kind"] == "other"
    assert h["load_balancer"]["ingress"] == [{"ip": "", "hostname": "lb.example.net",
                                              "ipMode": ""}]


def test_works_without_the_api(plain_nginx: Nginx) -> None:
    rc, report, _ = doctor(HOST, "--resolve", f"{HOST}:{LB_IP}", *ports(plain_nginx),
                           "--no-api")
    assert rc == 0 and one(report)["verdict"] == "works"
    assert report["cluster"] is None and report["api"] == "--no-api"


def test_fixed_for_every_host_the_controller_manages(fake_api: FakeApiServer,
                                                     kubeconfig: Path, relay: Relay) -> None:
    setup_cluster(fake_api, proxy=True, rule=True)
    fake_api.create(ingress_class("nginx", default=True))
    fake_api.create(ingress("shop", "web", tls_hosts=[HOST, "*.example.test"],
                            rule_hosts=[HOST]))
    fake_api.create(ingress("blog", "web", rule_hosts=["blog.example.test"]))  # no TLS
    wildcard = "hairpin-proxy-doctor.example.test"
    p_http, p_tls = relay.ports
    rc, report, _ = doctor("--resolve", f"{HOST}:{PROXY_IP}", "--resolve",
                           f"{wildcard}:{PROXY_IP}", "--port", str(p_http), "--tls-port",
                           str(p_tls), kubeconfig=kubeconfig)
    assert [h["host"] for h in report["hosts"]] == ["*.example.test", HOST]
    assert {h["verdict"] for h in report["hosts"]} == {"fixed"}
    assert rc == 0 and report["ok"]
    assert f"*.example.test: probed as {wildcard}" in report["notes"]
    h = report["hosts"][1]
    assert h["dns"]["addresses"] == [{"address": PROXY_IP, "kind": "proxy"}]
    assert h["http"]["bare"]["status"] == 200 and h["tls"]["bare"]["status"] == 200


def test_fixed_without_the_api_given_the_proxy_address(relay: Relay) -> None:
    p_http, p_tls = relay.ports
    rc, report, _ = doctor(HOST, "--resolve", f"{HOST}:{PROXY_IP}", "--port", str(p_http),
                           "--tls-port", str(p_tls), "--no-api", "--proxy-address", PROXY_IP)
    assert rc == 0 and one(report)["verdict"] == "fixed"


# --------------------------------------------------------------------------- broken paths


def test_proxy_without_ready_endpoints(fake_api: FakeApiServer, kubeconfig: Path) -> None:
    setup_cluster(fake_api, proxy=True, rule=True, ready=False)
    rc, report, _ = doctor(HOST, "--resolve", f"{HOST}:{PROXY_IP}", "--port",
                           str(free_port(PROXY_IP)), "--tls-port", "0", kubeconfig=kubeconfig)
    h = one(report)
    assert rc == 1 and h["verdict"] == "proxy-no-endpoints"
    assert h["http"]["bare"]["outcome"] == "refused" and h["tls"] is None
    assert report["cluster"]["proxy_ready_endpoints"] == 0


def test_proxy_failing(fake_api: FakeApiServer, kubeconfig: Path, tmp_path: Path) -> None:
    setup_cluster(fake_api, proxy=True, rule=True)
    closed = free_port()
    with run_relay(tmp_path, [f"{PROXY_IP}:{{port}}={LB_IP}:{closed}"]) as broken:
        rc, report, _ = doctor(HOST, "--resolve", f"{HOST}:{PROXY_IP}", "--port",
                               str(broken.ports[0]), "--tls-port", "0", kubeconfig=kubeconfig)
    h = one(report)
    assert rc == 1 and h["verdict"] == "proxy-failing"
    assert "bare" in h["advice"]


def test_unreachable() -> None:
    closed = str(free_port())
    rc, report, _ = doctor(HOST, "--resolve", f"{HOST}:{LB_IP}", "--port", closed,
                           "--tls-port", closed, "--no-api")
    h = one(report)
    assert rc == 1 and h["verdict"] == "unreachable"
    assert "connection refused" in h["advice"]


def test_name_that_does_not_resolve() -> None:
    rc, report, _ = doctor("no-such-host.invalid", "--no-api")
    h = one(report)
    assert rc == 1 and h["verdict"] == "dns-failed"
    assert h["dns"]["error"] and h["http"] is None


def test_nothing_probed() -> None:
    rc, report, _ = doctor(HOST, "--resolve", f"{HOST}:{LB_IP}", "--port", "0", "--tls-port",
                           "0", "--no-api")
    assert rc == 1 and one(report)["verdict"] == "not-probed"


# --------------------------------------------------------------------------- the doctor itself


def test_usage_errors() -> None:
    rc, report, err = doctor("--no-api")
    assert rc == 2 and report == {} and "no HOST given" in err
    rc, _, err = doctor(HOST, "--resolve", f"{HOST}:nonsense", "--no-api")
    assert rc == 2 and "--resolve" in err
    rc, _, err = doctor(HOST, "--port", "70000", "--no-api")
    assert rc == 2 and "--port" in err


def test_wildcard_resolve(plain_nginx: Nginx) -> None:
    """``--resolve '*.example.test:ADDR'`` answers for every name under example.test, as in
    curl: a wildcard host (probed as hairpin-proxy-doctor.example.test) and a plain one."""
    rc, report, err = doctor("*.example.test", HOST, "--resolve", f"*.example.test:{LB_IP}",
                             *ports(plain_nginx), "--no-api")
    assert rc == 0, err
    for h in report["hosts"]:
        assert h["verdict"] == "works", h
        assert h["dns"]["overridden"] and h["dns"]["addresses"][0]["address"] == LB_IP
    rc, _, err = doctor(HOST, "--resolve", f"shop*.example.test:{LB_IP}", "--no-api")
    assert rc == 2 and err.count("\n") == 1, err
    assert "--resolve 'shop*.example.test:127.0.0.1': a wildcard is '*' alone or the whole " \
           "first label, as in *.example.com" in err


def test_api_down_still_probes(tmp_path: Path, plain_nginx: Nginx) -> None:
    with FakeApiServer() as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    rc, report, _ = doctor(HOST, "--resolve", f"{HOST}:{LB_IP}", *ports(plain_nginx),
                           kubeconfig=kubeconfig)
    assert rc == 0 and one(report)["verdict"] == "works"
    assert report["cluster"] is None and report["api"].startswith("the API did not answer")
    rc, _, err = doctor("--resolve", f"{HOST}:{LB_IP}", kubeconfig=kubeconfig)
    assert rc == 2 and "no HOST given" in err


def test_refused_questions_leave_facts_unknown(fake_api: FakeApiServer, kubeconfig: Path,
                                               pp_nginx: Nginx) -> None:
    setup_cluster(fake_api, proxy=True, rule=True, node_local_dns=True)
    fake_api.fail_requests(5, status=403, path_re=r"/daemonsets")
    rc, report, _ = doctor(HOST, "--resolve", f"{HOST}:{LB_IP}", *ports(pp_nginx),
                           kubeconfig=kubeconfig)
    # node-local-dns is unknown now, so the verdict falls back to the plain "not updated".
    assert rc == 1 and one(report)["verdict"] == "dns-not-updated"
    assert report["cluster"]["node_local_dns"] is None
    assert any("DaemonSets" in p and "403" in p for p in report["cluster"]["problems"])


def test_node_local_dns_found_by_name_when_listing_is_refused(
        fake_api: FakeApiServer, kubeconfig: Path, pp_nginx: Nginx) -> None:
    """The controller's Role may only get the node-local-dns DaemonSet by name."""
    setup_cluster(fake_api, proxy=True, rule=True, node_local_dns=True)
    fake_api.fail_requests(5, status=403, path_re=r"/daemonsets\?")
    rc, report, _ = doctor(HOST, "--resolve", f"{HOST}:{LB_IP}", *ports(pp_nginx),
                           kubeconfig=kubeconfig)
    assert rc == 1 and one(report)["verdict"] == "node-local-dns-missing"
    assert report["cluster"]["node_local_dns"] is True
    assert any(p.startswith("list DaemonSets") and "403" in p
               for p in report["cluster"]["problems"])


def test_with_the_controllers_role_the_configmap_tells(fake_api: FakeApiServer,
                                                       kubeconfig: Path, pp_nginx: Nginx) -> None:
    """No DaemonSet may be read (as with the controller's Role): node-local-dns's ConfigMap,
    found by name, says it is deployed, and who owns it."""
    setup_cluster(fake_api, proxy=True, rule=True, node_local_dns=True,
                  node_local_cm="node-local-dns", reconciled=True)
    fake_api.fail_requests(5, status=403, path_re=r"/daemonsets")
    rc, report, _ = doctor(HOST, "--resolve", f"{HOST}:{LB_IP}", *ports(pp_nginx),
                           kubeconfig=kubeconfig)
    h = one(report)
    assert rc == 1 and h["verdict"] == "node-local-dns-reconciled"
    assert "kube-system/node-local-dns" in h["advice"]
    assert "docs/platforms/node-local-dns.md" in h["advice"]
    cluster = report["cluster"]
    assert cluster["node_local_dns"] is None
    assert cluster["node_local_configmap"] == "kube-system/node-local-dns"
    assert cluster["node_local_reconciled"] is True and cluster["node_local_zones"] == []
    assert any("addon manager" in p for p in cluster["problems"])


def test_refused_node_local_configmap_is_unknown(fake_api: FakeApiServer, kubeconfig: Path,
                                                pp_nginx: Nginx) -> None:
    setup_cluster(fake_api, proxy=True, rule=True, node_local_dns=True,
                  node_local_cm="node-local-dns", reconciled=True)
    fake_api.fail_requests(5, status=403,
                           path_re=r"/configmaps/(node-local-dns|nodelocaldns)$")
    rc, report, _ = doctor(HOST, "--resolve", f"{HOST}:{LB_IP}", *ports(pp_nginx),
                           kubeconfig=kubeconfig)
    h = one(report)
    # Unknown coverage never picks a node-local-dns verdict; the advice says it is unknown.
    assert rc == 1 and h["verdict"] == "dns-not-updated"
    assert "whether it sends this name to CoreDNS is unknown" in h["advice"]
    cluster = report["cluster"]
    assert cluster["node_local_dns"] is True
    assert cluster["node_local_configmap"] is None
    assert cluster["node_local_reconciled"] is None and cluster["node_local_zones"] is None
    assert sum("node-local-dns ConfigMap" in p and "403" in p
               for p in cluster["problems"]) == 2


def test_unreadable_node_local_corefile_is_unknown(fake_api: FakeApiServer, kubeconfig: Path,
                                                   pp_nginx: Nginx) -> None:
    """Both ConfigMaps exist: the first name is read (and said so); its Corefile cannot be
    read, so whether our block covers the host is unknown."""
    setup_cluster(fake_api, proxy=True, rule=True, node_local_dns=True,
                  node_local_cm="nodelocaldns", node_local_hosts=(HOST,))
    broken = node_local_configmap("node-local-dns")
    broken["data"] = {"Corefile": "cluster.local:53 {\n    errors\n"}
    fake_api.create(broken)
    rc, report, _ = doctor(HOST, "--resolve", f"{HOST}:{LB_IP}", *ports(pp_nginx),
                           kubeconfig=kubeconfig)
    assert rc == 1 and one(report)["verdict"] == "dns-not-updated"
    cluster = report["cluster"]
    assert cluster["node_local_configmap"] == "kube-system/node-local-dns"
    assert cluster["node_local_reconciled"] is False and cluster["node_local_zones"] is None
    problems = cluster["problems"]
    assert any("both exist" in p for p in problems)
    assert any(p.startswith("cannot read node-local-dns's Corefile in "
                            "kube-system/node-local-dns[Corefile]") for p in problems)


def test_a_reverted_node_local_block_names_who_removed_it(fake_api: FakeApiServer,
                                                          kubeconfig: Path,
                                                          pp_nginx: Nginx) -> None:
    """Our block was written, then an update by another field manager put the stock file back
    and the controller told of it (its ConfigMapReverted Event): the host line and the cluster
    facts name that manager, read from the ConfigMap's managedFields."""
    setup_cluster(fake_api, proxy=True, rule=True, node_local_dns=True)
    fake_api.create(node_local_configmap("node-local-dns", (HOST,)), manager="hairpin-proxy")
    cm = fake_api.get("ConfigMap", "kube-system", "node-local-dns")
    assert cm is not None
    cm["data"]["Corefile"] = NODE_LOCAL_COREFILE
    fake_api.update(cm, manager="argocd-controller")
    fake_api.create({"apiVersion": "v1", "kind": "Event",
                     "metadata": {"namespace": "kube-system", "name": "node-local-dns.1"},
                     "involvedObject": {"apiVersion": "v1", "kind": "ConfigMap",
                                        "namespace": "kube-system", "name": "node-local-dns"},
                     "reason": "ConfigMapReverted", "type": "Warning",
                     "message": "hairpin-proxy's change to data.Corefile was removed"})
    rc, report, _ = doctor(HOST, "--resolve", f"{HOST}:{LB_IP}", *ports(pp_nginx),
                           kubeconfig=kubeconfig)
    h = one(report)
    assert rc == 1 and h["verdict"] == "node-local-dns-missing"
    assert h["node_local"]["answers"] is False
    assert h["node_local"]["reverted_by"] == "argocd-controller"
    assert "removed by argocd-controller" in h["node_local"]["message"]
    assert report["cluster"]["node_local_reverted_by"] == "argocd-controller"
    # The same ConfigMap with our block back: node-local-dns answers the host.
    fake_api.update(node_local_configmap("node-local-dns", (HOST,)), manager="hairpin-proxy")
    _, report, _ = doctor(HOST, "--resolve", f"{HOST}:{LB_IP}", *ports(pp_nginx),
                          kubeconfig=kubeconfig)
    assert one(report)["node_local"]["answers"] is True



def test_the_corefile_is_read_when_ingress_nginx_settings_are_read_too(
        fake_api: FakeApiServer, kubeconfig: Path, pp_nginx: Nginx) -> None:
    """PROXY detection reads ingress-nginx's ConfigMap beside the CoreDNS one: the rules are
    still read from the CoreDNS ConfigMap, not from the last detection read."""
    setup_cluster(fake_api, proxy=True, rule=True)
    lb = fake_api.get("Service", "ingress-nginx", "ingress-nginx-controller")
    assert lb is not None
    lb["metadata"]["labels"] = {"app.kubernetes.io/name": "ingress-nginx"}
    fake_api.update(lb)
    fake_api.create(configmap("ingress-nginx", "ingress-nginx-controller",
                              {"use-proxy-protocol": "true"}))
    rc, report, _ = doctor(HOST, "--resolve", f"{HOST}:{LB_IP}", *ports(pp_nginx),
                           kubeconfig=kubeconfig)
    assert report["cluster"]["rule_hosts"] == [HOST], report["cluster"]["problems"]
    assert not any("Corefile" in p for p in report["cluster"]["problems"])
    assert rc == 1 and one(report)["verdict"] == "dns-not-updated"


@pytest.mark.parametrize(("environ", "where"), [
    ({}, NS), ({"POD_NAMESPACE": "elsewhere"}, "elsewhere")])
def test_the_namespace_is_where_hairpin_proxy_is_installed(
        fake_api: FakeApiServer, tmp_path: Path, environ: dict[str, str], where: str) -> None:
    """Without --namespace: POD_NAMESPACE (the controller's pod), else hairpin-proxy; never
    the kubeconfig context's namespace (default) nor a `kubectl run` pod's."""
    setup_cluster(fake_api)
    for ns in (NS, "elsewhere"):
        fake_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    fake_api.create(service(where, "hairpin-proxy", cluster_ips=[PROXY_IP]))
    config = fake_api.write_kubeconfig(tmp_path / "kubeconfig", namespace="default")
    _, report, err = doctor(HOST, "--resolve", f"{HOST}:{LB_IP}", "--port", "0",
                            "--tls-port", "0", environ={"KUBECONFIG": str(config), **environ})
    assert report["cluster"]["proxy_service_found"] is True, err
    assert report["cluster"]["proxy_addresses"] == [PROXY_IP]


def test_a_refused_controller_deployment_is_a_note(fake_api: FakeApiServer, kubeconfig: Path,
                                                   pp_nginx: Nginx) -> None:
    """Refused its Deployment, the doctor says so and judges by its own flags."""
    setup_cluster(fake_api, proxy=True, rule=True)
    fake_api.fail_requests(1, status=403, method="GET",
                           path_re=r"/deployments/hairpin-proxy-controller$")
    rc, report, _ = doctor(HOST, "--resolve", f"{HOST}:{LB_IP}", *ports(pp_nginx),
                           kubeconfig=kubeconfig)
    assert any(p.startswith(f"read the controller's Deployment {NS}/hairpin-proxy-controller: "
                            "403") and p.endswith("its settings are taken from doctor's flags")
               for p in report["cluster"]["problems"]), report["cluster"]["problems"]
    assert rc == 1 and one(report)["verdict"] == "dns-not-updated"


def test_a_refused_detection_read_is_a_note(
        fake_api: FakeApiServer, kubeconfig: Path, pp_nginx: Nginx) -> None:
    """ingress-nginx's settings refused (read by a list by name, as the controller's RBAC
    grants them): one note names the refusal; the hairpin is still reported."""
    setup_cluster(fake_api, proxy=True)
    lb = fake_api.get("Service", "ingress-nginx", "ingress-nginx-controller")
    assert lb is not None
    lb["metadata"]["labels"] = {"app.kubernetes.io/name": "ingress-nginx",
                                "app.kubernetes.io/component": "controller"}
    fake_api.update(lb)
    fake_api.create(ingress_class("nginx", default=True))
    fake_api.create(ingress("shop", "web", tls_hosts=[HOST]))
    fake_api.fail_requests(1, status=403, method="GET",
                           path_re=r"/namespaces/ingress-nginx/configmaps\?fieldSelector")
    rc, report, _ = doctor(HOST, "--resolve", f"{HOST}:{LB_IP}", *ports(pp_nginx),
                           kubeconfig=kubeconfig)
    problems = report["cluster"]["problems"]
    assert any(p.startswith("read ConfigMap ingress-nginx/ingress-nginx-controller: 403")
               for p in problems), problems
    assert rc == 1 and one(report)["verdict"] == "rule-missing"
