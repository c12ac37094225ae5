"""The doctor shows the controller's host verification: the real CLI, the fake API server, a
real DNS server (dnsmasq, tests/verify/dnsmasq.py) as the public resolver and the
proxy_protocol nginx as the load balancer's ingress controller.

The doctor's own DNS answer for every host comes from ``--resolve`` (127.0.0.1, nginx); the
verification asks dnsmasq, whose zone puts ``app.example.test`` on ``LB_IP`` (203.0.113.10),
which the cluster's LoadBalancer Service reports beside 127.0.0.1. Loopback only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.doctor.conftest import LB_IP as LOOPBACK_LB
from tests.doctor.objects import with_ingress_status
from tests.doctor.test_cli import NS, doctor, one, ports, setup_cluster
from tests.fakeapi.fixtures import ingress, service
from tests.fakeapi.server import FakeApiServer
from tests.peers.nginx import Nginx
from tests.verify.dnsmasq import ELB_IP, LB_IP, OTHER_IP, BlackHole, Dnsmasq

PROBE = "hairpin-proxy-check-q7x2k9"


@pytest.fixture(scope="module")
def dns(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dnsmasq]:
    server = Dnsmasq(tmp_path_factory.mktemp("dnsmasq"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def cluster(api: FakeApiServer, *, rule: bool = False) -> None:
    """hairpin-proxy installed, no rule; the load balancer reports 127.0.0.1 and LB_IP."""
    setup_cluster(api, proxy=True, rule=rule)
    api.patch("Service", "ingress-nginx", "ingress-nginx-controller",
              {"status": {"loadBalancer": {"ingress": [{"ip": LOOPBACK_LB, "ipMode": "VIP"},
                                                       {"ip": LB_IP}]}}})


def resolve(*hosts: str) -> list[str]:
    """``--resolve`` every host (as probed) to the loopback load balancer."""
    out = []
    for h in hosts:
        name = f"hairpin-proxy-doctor.{h[2:]}" if h.startswith("*.") else h
        out += ["--resolve", f"{name}:{LOOPBACK_LB}"]
    return out


def by_host(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {h["host"]: h for h in report["hosts"]}


def test_each_host_gets_the_controllers_verdict(fake_api: FakeApiServer, kubeconfig: Path,
                                                pp_nginx: Nginx, dns: Dnsmasq) -> None:
    cluster(fake_api)
    hosts = ("app.example.test", "other.example.test", "nowhere.example.test",
             "*.wild.example.test")
    rc, report, err = doctor(*hosts, *resolve(*hosts), *ports(pp_nginx), kubeconfig=kubeconfig,
                             verify=("--verify-resolver", dns.server))
    assert rc == 1, err
    h = by_host(report)
    # Ours: the hairpin is confirmed and the controller would redirect it, but no rule is in
    # effect: the verdict does not change.
    app = h["app.example.test"]
    assert app["verdict"] == "rule-missing"
    assert app["verification"] == {
        "code": "verified", "redirect": True,
        "reason": "app.example.test resolves to 203.0.113.10, a load balancer of this cluster "
                  "(Service ingress-nginx/ingress-nginx-controller)",
        "queried": "app.example.test", "addresses": [LB_IP], "matched": [LB_IP],
        "resolver": dns.server}
    wild = h["*.wild.example.test"]
    assert wild["verdict"] == "rule-missing"
    assert wild["verification"]["code"] == "verified"
    assert wild["verification"]["queried"] == f"{PROBE}.wild.example.test"
    # Not this cluster's: the same hairpin, but the controller will not redirect it.
    other = h["other.example.test"]
    assert other["verdict"] == "not-this-cluster" and not other["ok"]
    assert other["verification"]["code"] == "not-this-cluster"
    assert other["verification"]["redirect"] is False
    assert other["verification"]["addresses"] == [OTHER_IP]
    assert other["verification"]["matched"] == []
    advice = other["advice"]
    assert "does not point at this cluster's load balancer" in advice and "by design" in advice
    assert f"other.example.test resolves to {OTHER_IP}, not to this cluster's load balancers " \
           f"{LOOPBACK_LB}, {LB_IP}" in advice
    assert "--verify-hosts off" in advice
    nowhere = h["nowhere.example.test"]
    assert nowhere["verdict"] == "not-this-cluster"
    assert nowhere["verification"]["code"] == "unresolved"
    assert "does not resolve (NXDOMAIN)" in nowhere["advice"]
    # The existing keys are all still there.
    assert {"host", "ok", "verdict", "advice", "dns", "http", "tls", "load_balancer"} <= set(app)
    assert app["http"]["state"] == "hairpin"


def test_ingress_status_and_load_balancer_names_count(fake_api: FakeApiServer,
                                                      kubeconfig: Path, pp_nginx: Nginx,
                                                      dns: Dnsmasq) -> None:
    """The load balancer addresses are the controller's: Ingress statuses too, and a
    hostname-only load balancer is resolved (with the same resolver) to learn its addresses.
    The resolver comes from the environment here (every flag is also a variable)."""
    cluster(fake_api)
    fake_api.create(with_ingress_status(ingress("shop", "web", tls_hosts=["other.example.test"]),
                                        ip=OTHER_IP))
    fake_api.create(service("aws", "nlb", type="LoadBalancer",
                            lb_ingress=[{"hostname": "lb.elb.example.test"}]))
    hosts = ("other.example.test", "direct.example.test", "alias.example.test")
    rc, report, err = doctor(*hosts, *resolve(*hosts), *ports(pp_nginx), kubeconfig=kubeconfig,
                             verify=(), environ={"HAIRPIN_VERIFY_RESOLVER": dns.server})
    assert rc == 1, err
    h = by_host(report)
    assert {name: x["verification"]["code"] for name, x in h.items()} == dict.fromkeys(
        hosts, "verified")
    assert {x["verdict"] for x in h.values()} == {"rule-missing"}
    assert "Ingress shop/web" in h["other.example.test"]["verification"]["reason"]
    assert h["direct.example.test"]["verification"]["matched"] == [ELB_IP]
    assert "via lb.elb.example.test" in h["direct.example.test"]["verification"]["reason"]
    # A CNAME to the load balancer's name: its addresses are the ones learned for that name.
    assert h["alias.example.test"]["verification"]["matched"] == [ELB_IP]


def test_a_failing_resolver_is_unknown_and_bounded_by_the_timeout(
        fake_api: FakeApiServer, kubeconfig: Path, pp_nginx: Nginx) -> None:
    """Unknown never selects not-this-cluster; --timeout bounds the lookups."""
    cluster(fake_api)
    hole, hole2 = BlackHole(), BlackHole()
    try:
        host = "other.example.test"
        rc, report, err = doctor(host, *resolve(host), *ports(pp_nginx), kubeconfig=kubeconfig,
                                 timeout="1", verify=("--verify-resolver", hole.server,
                                                      "--verify-resolver", hole2.server))
    finally:
        hole.close()
        hole2.close()
    assert rc == 1, err
    h = one(report)
    assert h["verdict"] == "rule-missing"
    check = h["verification"]
    assert check["code"] == "resolver-error" and check["redirect"] is None
    assert check["resolver"] == f"{hole.server}, {hole2.server}"
    # Both servers were tried, each attempt ended by a timeout, and the verdict stays unknown.
    # (How long each attempt may take is make_resolver's, tested in tests/verify.)
    for server in (hole.server, hole2.server):
        assert re.search(rf"{re.escape(server.replace(':', '@'))} answered The DNS operation "
                         r"timed out", check["reason"]), check["reason"]


def test_unknown_load_balancers_leave_it_unknown(fake_api: FakeApiServer, kubeconfig: Path,
                                                 pp_nginx: Nginx, dns: Dnsmasq) -> None:
    """Ingresses not listable: their statuses might hold the answer, so nothing is decided."""
    cluster(fake_api)
    fake_api.fail_requests(20, status=403, path_re=r"/ingresses")
    host = "other.example.test"
    rc, report, _ = doctor(host, *resolve(host), *ports(pp_nginx), kubeconfig=kubeconfig,
                           verify=("--verify-resolver", dns.server))
    h = one(report)
    assert rc == 1 and h["verdict"] == "rule-missing"
    assert h["verification"]["code"] == "unknown" and h["verification"]["redirect"] is None
    assert "could not be listed" in h["verification"]["reason"]


def test_verification_off_and_without_the_api(fake_api: FakeApiServer, kubeconfig: Path,
                                              pp_nginx: Nginx, dns: Dnsmasq) -> None:
    cluster(fake_api)
    host = "other.example.test"
    rc, report, _ = doctor(host, *resolve(host), *ports(pp_nginx), kubeconfig=kubeconfig,
                           verify=("--verify-hosts", "off", "--verify-resolver", dns.server))
    h = one(report)
    assert rc == 1 and h["verdict"] == "rule-missing"
    assert h["verification"]["code"] == "off" and h["verification"]["redirect"] is True
    # Without the API there are no load balancer addresses to check against.
    rc, report, _ = doctor(host, *resolve(host), *ports(pp_nginx), "--no-api",
                           verify=("--verify-resolver", dns.server))
    h = one(report)
    assert rc == 1 and h["verdict"] == "hairpin-confirmed" and h["verification"] is None
    # A bad server is a usage error, as in the controller.
    rc, _, err = doctor(host, "--no-api", verify=("--verify-resolver", "dns.example"))
    assert rc == 2 and "--verify-resolver" in err and "not an IP address" in err


def test_text_report_shows_the_verification(fake_api: FakeApiServer, kubeconfig: Path,
                                            pp_nginx: Nginx, dns: Dnsmasq) -> None:
    cluster(fake_api)
    host = "other.example.test"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAIRPIN_")}
    proc = subprocess.run(
        [sys.executable, "-m", "hairpin_proxy", "doctor", host, *resolve(host),
         *ports(pp_nginx), "--kubeconfig", str(kubeconfig), "--namespace", NS,
         "--verify-resolver", dns.server],
        capture_output=True, text=True, timeout=120, env=env, check=False)
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout
    assert f"{host}  FAIL  not-this-cluster" in out
    assert (f"  verify   not-this-cluster (not redirected): {host} resolves to {OTHER_IP}, not "
            f"to this cluster's load balancers {LOOPBACK_LB}, {LB_IP} [resolver {dns.server}]"
            in out)


def test_no_host_resolving_at_all_is_named_with_the_ways_out(
        fake_api: FakeApiServer, kubeconfig: Path, pp_nginx: Nginx, dns: Dnsmasq) -> None:
    cluster(fake_api)
    # The resolver of a split-horizon or air-gapped cluster: none of the names is there.
    hosts = ("nowhere.example.test", "gone.example.test")
    _, report, _ = doctor(*hosts, *resolve(*hosts), *ports(pp_nginx), kubeconfig=kubeconfig,
                           verify=("--verify-resolver", dns.server))
    assert [h["verification"]["code"] for h in report["hosts"]] == ["unresolved"] * 2
    (note,) = [n for n in report["notes"] if n.startswith("verification:")]
    assert "--verify-resolver" in note and "verify-off" in note
    # One name that resolves, even elsewhere, says public DNS is there: no such note.
    hosts = ("nowhere.example.test", "other.example.test")
    _rc, report, _ = doctor(*hosts, *resolve(*hosts), *ports(pp_nginx), kubeconfig=kubeconfig,
                           verify=("--verify-resolver", dns.server))
    assert not [n for n in report["notes"] if n.startswith("verification:")]
