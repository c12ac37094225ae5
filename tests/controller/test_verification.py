"""Host verification end to end: the controller, the fake API and a real DNS server (dnsmasq).

A host is redirected only when its public answer is one of this cluster's load balancer
addresses; the verdicts follow the load balancer's address and ipMode without new lookups, and
a resolver outage neither withdraws a verified host nor lets an unverified one in.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hairpin_proxy import corefile
from tests.controller.conftest import Controller, corefile_text, wait_until
from tests.fakeapi.fixtures import ingress, service
from tests.fakeapi.server import FakeApiServer
from tests.verify.dnsmasq import LB_IP, OTHER_IP, Dnsmasq

Start = Callable[..., Controller]
HOSTS = ["app.example.test", "other.example.test", "*.wild.example.test",
         "nowhere.example.test"]


@pytest.fixture
def dns(tmp_path: Path) -> Iterator[Dnsmasq]:
    server = Dnsmasq(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def managed(api: FakeApiServer) -> tuple[str, ...]:
    return corefile.managed_hosts(corefile_text(api))


def events(api: FakeApiServer, reason: str) -> list[dict[str, object]]:
    return [e for e in api.list("Event", "shop") if e.get("reason") == reason]


def with_lb(api: FakeApiServer, ip: str = LB_IP, mode: str | None = None) -> None:
    entry = {"ip": ip, **({"ipMode": mode} if mode else {})}
    svc = api.get("Service", "ingress-nginx", "ingress-nginx-controller")
    if svc is None:
        api.create(service("ingress-nginx", "ingress-nginx-controller", type="LoadBalancer",
                           lb_ingress=[entry]))
        return
    svc["status"]["loadBalancer"]["ingress"] = [entry]
    api.patch("Service", "ingress-nginx", "ingress-nginx-controller",
              {"status": {"loadBalancer": {"ingress": [entry]}}})


def verifying(start: Start, dns: Dnsmasq, *flags: str) -> Controller:
    ctl = start("--verify-hosts", "on", "--verify-resolver", dns.server,
                "--verify-interval", "1", "--allow-mass-removal", *flags)
    ctl.wait_ready()
    return ctl


def test_only_hosts_that_resolve_to_our_load_balancer_are_redirected(
        cluster: FakeApiServer, start: Start, dns: Dnsmasq) -> None:
    with_lb(cluster)
    cluster.create(ingress("shop", "web", tls_hosts=HOSTS))
    ctl = verifying(start, dns)
    wait_until(lambda: managed(cluster) == ("*.wild.example.test", "app.example.test"),
               what="verified hosts written")
    wait_until(lambda: len(events(cluster, "HostNotOnThisCluster")) == 2, what="Events")
    messages = sorted(str(e["message"]) for e in events(cluster, "HostNotOnThisCluster"))
    assert "nowhere.example.test does not resolve" in messages[0]
    assert (f"other.example.test resolves to {OTHER_IP}, not to this cluster's load "
            f"balancer {LB_IP}") in messages[1]
    assert ctl.metric('hairpin_controller_host_verdicts{verdict="verified"}') == 2
    assert ctl.metric('hairpin_controller_host_verdicts{verdict="not-this-cluster"}') == 1
    assert ctl.metric("hairpin_controller_verify_lookups_total") >= 4

    # The load balancer moves to the other address: verdicts follow without new lookups.
    with_lb(cluster, OTHER_IP)
    wait_until(lambda: managed(cluster) == ("other.example.test",), what="verdicts follow")
    # The provider fixes the hairpin (ipMode Proxy): nothing left to redirect, said as info.
    with_lb(cluster, OTHER_IP, "Proxy")
    wait_until(lambda: managed(cluster) == (), what="ipMode Proxy skipped")
    wait_until(lambda: events(cluster, "HostBehindProxyLoadBalancer"), what="info Event")
    assert events(cluster, "HostBehindProxyLoadBalancer")[0]["type"] == "Normal"


def test_a_resolver_outage_keeps_verified_hosts_and_adds_none(
        cluster: FakeApiServer, start: Start, dns: Dnsmasq) -> None:
    with_lb(cluster)
    cluster.create(ingress("shop", "web", tls_hosts=["app.example.test"]))
    ctl = verifying(start, dns)
    wait_until(lambda: managed(cluster) == ("app.example.test",), what="verified")
    dns.stop()
    # Resolvable, ours, but not checkable during the outage: not added.
    cluster.create(ingress("shop", "new", tls_hosts=["dual.example.test"]))
    time.sleep(3.0)  # several check intervals, all failing
    assert managed(cluster) == ("app.example.test",)
    assert ctl.metric("hairpin_controller_verify_lookup_errors_total") >= 1
    assert ctl.metric("hairpin_controller_verify_oldest_kept_verdict_seconds") > 0
    # A restart during the outage withdraws nothing either.
    assert ctl.stop() == 0
    again = verifying(start, dns)
    time.sleep(2.0)
    assert managed(cluster) == ("app.example.test",)
    dns.start()
    wait_until(lambda: managed(cluster) == ("app.example.test", "dual.example.test"),
               what="new host verified once DNS answers")
    assert again.proc.poll() is None
