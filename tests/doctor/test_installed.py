"""The post-install check as the README gives it, `kubectl exec deployment/hairpin-proxy-
controller -- hairpin-proxy doctor`, run as the manifests run the controller's pod.

In a network namespace of the test's own (loopback only):

    127.0.0.1:80/443   the data plane (real nginx expecting PROXY), also its load balancer
                       address (kube-proxy sends in-cluster traffic for it straight there)
    127.0.0.2:80/443   the proxy Service's ClusterIP: our relay in front of the data plane
    127.0.0.1:53       the node's resolver (dnsmasq): the *public* answer, the load balancer;
                       the doctor's resolv.conf names it, as dnsPolicy: Default gives the
                       controller's pod the node's resolv.conf
    127.0.0.1:<port>   CoreDNS (dnsmasq) behind the Service kube-system/kube-dns: what an
                       ordinary pod asks; the proxy's address once the rule is in effect

The doctor runs with the rendered Deployment's environment and args, the controller's
service account (a bound token) and the fake API enforcing the rendered RBAC. With the rule
in the Corefile (kubeadm) or in coredns-custom (k3s, import mode, an IngressRoute host) and
CoreDNS answering it, the verdict is `fixed`; with the rule written but CoreDNS still giving
the load balancer (not reloaded yet), `dns-not-updated`; with no rule, `rule-missing`.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hairpin_proxy import corefile
from tests.corefiles import BY_NAME
from tests.deploy.rendering import Doc, find, kubectl_or_skip, render
from tests.fakeapi.crds import TRAEFIK_INGRESSROUTE
from tests.fakeapi.fixtures import (
    configmap,
    endpoint_slice,
    ingress,
    ingress_class,
    service,
)
from tests.fakeapi.server import FakeApiServer
from tests.peers import require_binary
from tests.peers.netns import private_network
from tests.peers.nginx import run_nginx
from tests.relay.helpers import run_relay
from tests.verify.dnsmasq import Dnsmasq

HOST = "shop.example.test"
LB, PROXY = "127.0.0.1", "127.0.0.2"
NS = "hairpin-proxy"
SA = "hairpin-proxy-controller"
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RBAC_KINDS = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
              "RoleBinding")
ANSWERS = corefile.Answers.of([PROXY])
LISTEN = (f"listen {LB}:80 proxy_protocol;\n"
          f"        listen {LB}:443 ssl proxy_protocol;")

Obj = dict[str, Any]


@dataclass(frozen=True)
class Preset:
    render: str  # the kustomization directory under deploy/
    corefile: str  # a sample of tests/corefiles

    def rendered(self) -> list[Doc]:
        return render(kubectl_or_skip(), DEPLOY / self.render)


KUBEADM = Preset("base", "kubeadm")
K3S = Preset("overlays/k3s", "k3s")


def _install(api: FakeApiServer, docs: list[Doc]) -> Doc:
    """The rendered RBAC and the controller's Deployment, as `kubectl apply` leaves them."""
    for doc in docs:
        if doc["kind"] in RBAC_KINDS:
            api.create(doc)
    deployment = find(docs, "Deployment", SA)
    api.create(deployment)
    return deployment


def _proxy(api: FakeApiServer) -> None:
    api.create(service(NS, "hairpin-proxy", cluster_ips=[PROXY]))
    api.create(endpoint_slice(NS, "hairpin-proxy"))


def _kube_dns(api: FakeApiServer, port: int) -> None:
    api.create(service("kube-system", "kube-dns", cluster_ips=[LB], labels={
        "k8s-app": "kube-dns"}, ports=[
        {"name": "dns", "port": port, "protocol": "UDP", "targetPort": 53},
        {"name": "dns-tcp", "port": port, "protocol": "TCP", "targetPort": 53}]))


def _kubeadm_cluster(api: FakeApiServer, rule: bool) -> None:
    """ingress-nginx (the base's TARGET_SERVER) expecting PROXY; an Ingress for HOST."""
    lb = service("ingress-nginx", "ingress-nginx-controller", type="LoadBalancer",
                 cluster_ips=[LB], lb_ingress=[{"ip": LB, "ipMode": "VIP"}],
                 labels={"app.kubernetes.io/name": "ingress-nginx"})
    api.create(lb)
    api.create(configmap("ingress-nginx", "ingress-nginx-controller",
                         {"use-proxy-protocol": "true"}))
    api.create(ingress_class("nginx", default=True))
    api.create(ingress("shop", "web", tls_hosts=[HOST]))
    text = BY_NAME["kubeadm"].text
    api.create(configmap("kube-system", "coredns", {
        "Corefile": corefile.apply(text, [HOST], answers=ANSWERS) if rule else text}))


def _k3s_cluster(api: FakeApiServer, rule: bool) -> None:
    """k3s's Traefik (the overlay's TARGET_SERVER) with PROXY on both entry points; an
    IngressRoute for HOST; the rule in coredns-custom, which k3s's Corefile imports."""
    api.install(TRAEFIK_INGRESSROUTE)
    api.create(service("kube-system", "traefik", type="LoadBalancer", cluster_ips=[LB],
                       lb_ingress=[{"ip": LB}], labels={"app.kubernetes.io/name": "traefik"},
                       ports=[{"name": "web", "port": 80, "protocol": "TCP",
                               "targetPort": "web"},
                              {"name": "websecure", "port": 443, "protocol": "TCP",
                               "targetPort": "websecure"}]))
    api.create({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {
        "name": "traefik", "namespace": "kube-system",
        "labels": {"app.kubernetes.io/name": "traefik"}}, "spec": {
        "selector": {"matchLabels": {"app.kubernetes.io/name": "traefik"}},
        "template": {"metadata": {"labels": {"app.kubernetes.io/name": "traefik"}},
                     "spec": {"containers": [{"name": "traefik", "image": "traefik:3.3.6",
                                              "args": [
            "--entryPoints.web.address=:8000/tcp", "--entryPoints.websecure.address=:8443/tcp",
            "--entryPoints.web.proxyProtocol.trustedIPs=10.0.0.0/8",
            "--entryPoints.websecure.proxyProtocol.trustedIPs=10.0.0.0/8"]}]}}}})
    api.create({"apiVersion": "traefik.io/v1alpha1", "kind": "IngressRoute",
                "metadata": {"name": "shop", "namespace": "shop"},
                "spec": {"entryPoints": ["websecure"], "routes": [
                    {"kind": "Rule", "match": f"Host(`{HOST}`)",
                     "services": [{"name": "shop", "port": 80}]}], "tls": {}}})
    api.create(configmap("kube-system", "coredns", {"Corefile": BY_NAME["k3s"].text}))
    if rule:
        api.create(configmap("kube-system", "coredns-custom", {
            "hairpin-proxy.override": corefile.import_snippet([HOST], answers=ANSWERS)}))


def _environment(deployment: Doc) -> dict[str, str]:
    """The controller container's environment as the kubelet gives it."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {}
    for e in container.get("env") or []:
        if "value" in e:
            env[e["name"]] = e["value"]
        elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == \
                "metadata.namespace":
            env[e["name"]] = deployment["metadata"]["namespace"]
    return env


def _doctor_as_installed(deployment: Doc, kubeconfig: Path, resolv: Path
                         ) -> tuple[int, Obj]:
    """`hairpin-proxy doctor` in the controller's pod: its dnsPolicy's resolv.conf (mounted
    over /etc/resolv.conf in a mount namespace of its own), environment and account."""
    assert deployment["spec"]["template"]["spec"]["dnsPolicy"] == "Default"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("HAIRPIN_") and k not in ("KUBECONFIG", "POD_NAMESPACE")}
    env.update(_environment(deployment))
    # The service account's token, as the in-cluster configuration would read it.
    env["KUBECONFIG"] = str(kubeconfig)
    script = ('mount --bind "$0" /etc/resolv.conf && exec "$@"')
    proc = subprocess.run(
        [require_binary("unshare"), "--mount", "sh", "-c", script, str(resolv),
         sys.executable, "-m", "hairpin_proxy", "doctor", "--output", "json"],
        capture_output=True, text=True, timeout=120, env=env, check=False)
    assert proc.stdout, proc.stderr
    report: Obj = json.loads(proc.stdout)
    return proc.returncode, report


@contextlib.contextmanager
def _installed(preset: Preset, tmp: Path, *, rule: bool, coredns_answers: str
               ) -> Iterator[tuple[Doc, Path, Path]]:
    """The cluster in its network namespace: (Deployment, kubeconfig, resolv.conf)."""
    docs = preset.rendered()
    with private_network(), FakeApiServer(bookmark_interval=0.5) as api, \
            run_nginx(tmp / "nginx", proxy_protocol=True, extra_conf=LISTEN), \
            run_relay(tmp, [f"{PROXY}:80={LB}:80", f"{PROXY}:443={LB}:443"]):
        node = Dnsmasq(_dir(tmp / "node-dns"), 53, hosts={HOST: [LB]})
        coredns = Dnsmasq(_dir(tmp / "coredns"), hosts={HOST: [coredns_answers]})
        node.start()
        coredns.start()
        try:
            deployment = _install(api, docs)
            _proxy(api)
            _kube_dns(api, coredns.port)
            (_kubeadm_cluster if preset is KUBEADM else _k3s_cluster)(api, rule)
            token = api.service_account_token(NS, SA)
            kubeconfig = api.write_kubeconfig(tmp / "kubeconfig", token=token, namespace=NS)
            resolv = tmp / "resolv.conf"
            resolv.write_text(f"nameserver {LB}\noptions timeout:1 attempts:1\n")
            yield deployment, kubeconfig, resolv
        finally:
            coredns.stop()
            node.stop()


def _dir(path: Path) -> Path:
    path.mkdir()
    return path


def _checked(preset: Preset, tmp: Path, *, coredns_answers: str, rule: bool = True
             ) -> tuple[int, Obj, Obj]:
    """(exit status, report, its one host) of the doctor as installed."""
    with _installed(preset, tmp, rule=rule, coredns_answers=coredns_answers) as (
            deployment, kubeconfig, resolv):
        rc, report = _doctor_as_installed(deployment, kubeconfig, resolv)
    (host,) = report["hosts"]
    return rc, report, host


@pytest.mark.parametrize("preset", [KUBEADM, K3S], ids=["kubeadm", "k3s"])
def test_fixed_as_installed(preset: Preset, tmp_path: Path) -> None:
    rc, report, host = _checked(preset, tmp_path, coredns_answers=PROXY)
    problems = report["cluster"]["problems"]
    assert host["host"] == HOST and host["verdict"] == "fixed", (host, problems)
    assert rc == 0 and report["ok"]
    assert host["dns"]["addresses"] == [{"address": PROXY, "kind": "proxy"}]
    assert "kube-system/kube-dns" in host["dns"]["resolver"]
    assert host["http"]["bare"]["status"] == 200 and host["tls"]["bare"]["status"] == 200
    # The public answer, through the node's resolver, is this cluster's load balancer.
    assert host["verification"]["code"] == "verified"
    # Where the controller sends it, as it is configured: the main proxy Service.
    assert host["target"]["verdict"] == "redirected", host["target"]
    assert report["cluster"]["rule_hosts"] == [HOST]
    # The controller's settings came from its Deployment, not from the doctor's defaults.
    assert not any(f"Deployment {NS}/{SA}" in p for p in problems), problems


@pytest.mark.parametrize("preset", [KUBEADM, K3S], ids=["kubeadm", "k3s"])
def test_dns_not_updated_as_installed(preset: Preset, tmp_path: Path) -> None:
    """The rule is written, CoreDNS still answers the load balancer (not reloaded yet)."""
    rc, report, host = _checked(preset, tmp_path, coredns_answers=LB)
    assert host["verdict"] == "dns-not-updated", (host, report["cluster"]["problems"])
    assert rc == 1 and host["dns"]["addresses"] == [{"address": LB, "kind": "lb"}]
    assert report["cluster"]["rule_hosts"] == [HOST]


@pytest.mark.parametrize("preset", [KUBEADM, K3S], ids=["kubeadm", "k3s"])
def test_rule_missing_as_installed(preset: Preset, tmp_path: Path) -> None:
    """No rule written (the controller not running, say): the hairpin, named as such."""
    rc, report, host = _checked(preset, tmp_path, coredns_answers=LB, rule=False)
    assert host["verdict"] == "rule-missing", (host, report["cluster"]["problems"])
    assert rc == 1 and report["cluster"]["rule_hosts"] == []
