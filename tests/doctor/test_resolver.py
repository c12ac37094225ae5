"""The doctor resolves the way an ordinary pod does: through the cluster DNS Service it finds
through the API (a real dnsmasq on loopback stands for CoreDNS behind kube-system/kube-dns),
whatever resolver its own pod has, and says which resolver answered."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hairpin_proxy.doctor import facts as f
from tests.doctor.conftest import PROXY_IP
from tests.doctor.test_cli import doctor, one
from tests.fakeapi.fixtures import service
from tests.fakeapi.server import FakeApiServer
from tests.verify.dnsmasq import Dnsmasq

# A name only the cluster DNS stand-in knows: the system resolver cannot answer it.
HOST = "cluster-only.example.test"
NO_PROBES = ("--port", "0", "--tls-port", "0")


@pytest.fixture
def cluster_dns(tmp_path: Path) -> Iterator[Dnsmasq]:
    server = Dnsmasq(tmp_path, hosts={HOST: [PROXY_IP]})
    server.start()
    try:
        yield server
    finally:
        server.stop()


def kube_dns(port: int, *, name: str = "kube-dns", labels: dict[str, str] | None = None,
             ip: str = "127.0.0.1") -> dict[str, object]:
    """The cluster DNS Service as kubeadm installs it (UDP and TCP ports named dns, dns-tcp)."""
    return service("kube-system", name, cluster_ips=[ip], labels=labels, ports=[
        {"name": "dns", "port": port, "protocol": "UDP", "targetPort": 53},
        {"name": "dns-tcp", "port": port, "protocol": "TCP", "targetPort": 53},
        {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153}])


def test_the_cluster_dns_service_answers(fake_api: FakeApiServer, kubeconfig: Path,
                                         cluster_dns: Dnsmasq) -> None:
    fake_api.create(kube_dns(cluster_dns.port))
    _, report, err = doctor(HOST, *NO_PROBES, kubeconfig=kubeconfig)
    dns = one(report)["dns"]
    assert dns["addresses"] == [{"address": PROXY_IP, "kind": "other"}], err
    described = f"the cluster DNS Service kube-system/kube-dns (127.0.0.1:{cluster_dns.port})"
    assert dns["resolver"] == described
    assert report["cluster"]["cluster_dns"] == described
    assert not any(n.startswith("resolver:") for n in report["notes"])


def test_a_labelled_service_stands_for_kube_dns(fake_api: FakeApiServer, kubeconfig: Path,
                                                cluster_dns: Dnsmasq) -> None:
    """RKE2 names it rke2-coredns-rke2-coredns, with the k8s-app=kube-dns label."""
    fake_api.create(kube_dns(cluster_dns.port, name="rke2-coredns-rke2-coredns",
                             labels={"k8s-app": "kube-dns"}))
    _, report, _ = doctor(HOST, *NO_PROBES, kubeconfig=kubeconfig)
    dns = one(report)["dns"]
    assert dns["addresses"] == [{"address": PROXY_IP, "kind": "other"}]
    assert "kube-system/rke2-coredns-rke2-coredns" in dns["resolver"]


def test_without_a_cluster_dns_service_the_system_resolver_stands_in_and_says_so(
        fake_api: FakeApiServer, kubeconfig: Path) -> None:
    _, report, _ = doctor(HOST, *NO_PROBES, kubeconfig=kubeconfig)
    dns = one(report)["dns"]
    assert dns["resolver"] == f.SYSTEM_RESOLVER.described and not dns["addresses"]
    assert any(n.startswith("resolver: the cluster DNS Service is unknown (no Service "
                            "kube-system/kube-dns") for n in report["notes"]), report["notes"]


def test_a_cluster_dns_that_does_not_answer_is_an_error_not_an_answer(
        fake_api: FakeApiServer, kubeconfig: Path, cluster_dns: Dnsmasq) -> None:
    fake_api.create(kube_dns(cluster_dns.port))
    cluster_dns.stop()
    rc, report, _ = doctor(HOST, *NO_PROBES, kubeconfig=kubeconfig, timeout="1")
    h = one(report)
    assert rc == 1 and h["verdict"] == "dns-failed"
    assert h["dns"]["error"] and "kube-system/kube-dns" in h["dns"]["resolver"]


def test_resolver_flag(fake_api: FakeApiServer, kubeconfig: Path,
                       cluster_dns: Dnsmasq) -> None:
    """--resolver system keeps the pod's own resolver; ADDR:PORT asks that server."""
    fake_api.create(kube_dns(cluster_dns.port))
    _, report, _ = doctor(HOST, *NO_PROBES, "--resolver", "system", kubeconfig=kubeconfig)
    assert one(report)["dns"]["resolver"] == f.SYSTEM_RESOLVER.described
    _, report, _ = doctor(HOST, *NO_PROBES, "--no-api", "--resolver",
                          f"127.0.0.1:{cluster_dns.port}")
    dns = one(report)["dns"]
    assert dns["addresses"] == [{"address": PROXY_IP, "kind": "other"}]
    assert dns["resolver"] == f"the DNS server 127.0.0.1:{cluster_dns.port} (--resolver)"


def test_a_bad_resolver_flag_is_refused() -> None:
    rc, report, err = doctor(HOST, "--no-api", "--resolver", "dns.example.test")
    assert rc == 2 and not report
    assert err.startswith("hairpin-proxy doctor: error: --resolver: expected cluster, system")


@pytest.mark.parametrize(("ports", "want"), [
    ([{"name": "dns", "port": 5353, "protocol": "UDP"}], 5353),
    ([{"name": "dns-tcp", "port": 53, "protocol": "TCP"},
      {"name": "other", "port": 1053, "protocol": "UDP"}], 1053),
    ([{"name": "dns-tcp", "port": 53, "protocol": "TCP"}], 53),
])
def test_the_dns_port_of_the_service(ports: list[dict[str, object]], want: int) -> None:
    svc = service("kube-system", "kube-dns", cluster_ips=["10.96.0.10", "fd00::a"],
                  ports=ports)
    found = f.cluster_dns([svc], "kube-system")
    assert found is not None and found.servers == (("10.96.0.10", want), ("fd00::a", want))


def test_no_cluster_dns_without_a_cluster_ip() -> None:
    headless = service("kube-system", "kube-dns", cluster_ips=["None"])
    assert f.cluster_dns([headless], "kube-system") is None
    assert f.cluster_dns([service("default", "kube-dns")], "kube-system") is None
