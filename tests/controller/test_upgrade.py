"""Upgrading from 0.1.0: the rules it wrote (each name spelled in full) are taken over, never
dropped: the first pass rewrites them in the compact spelling in one write, every host keeping
its answers, and a change after that is one write more.

``data/v0.1.0.Corefile`` is what release 0.1.0's own code (commit 8e0d094, `hairpin-proxy
render`) wrote for the Ingress below into this suite's kubeadm Corefile (conftest.COREFILE),
answering with conftest.PROXY_IP.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hairpin_proxy import corefile
from tests.controller.conftest import (
    COREFILE,
    PROXY_IP,
    Controller,
    corefile_puts,
    corefile_text,
    wait_until,
)
from tests.fakeapi.fixtures import ingress
from tests.fakeapi.server import FakeApiServer

Start = Callable[..., Controller]
V010 = (Path(__file__).parent / "data" / "v0.1.0.Corefile").read_text()
HOSTS = ("*.apps.shop.example.com", "api.shop.example.com", "www.shop.example.com")
PROXY_FQDN = "hairpin-proxy.hairpin-proxy.svc.cluster.local."


def install_v010(cluster: FakeApiServer) -> None:
    cm = cluster.get("ConfigMap", "kube-system", "coredns")
    assert cm is not None
    cm["data"]["Corefile"] = V010
    cluster.update(cm)
    cluster.create(ingress("web", "shop", tls_hosts=list(HOSTS)))


def test_the_rules_of_0_1_0_are_taken_over_in_one_write_with_every_answer(
        cluster: FakeApiServer, start: Start) -> None:
    install_v010(cluster)
    before = corefile.managed_groups(V010)
    assert set(before) == set(HOSTS)
    puts = corefile_puts(cluster)
    ctl = start()
    ctl.wait_ready()
    wait_until(lambda: any(r.get("msg") == "first sync done" for r in ctl.records()),
               what="first sync")
    # The first pass writes once, before it says it is done: the same hosts, the same answers.
    assert corefile_puts(cluster) == puts + 1
    text = corefile_text(cluster)
    assert corefile.managed_groups(text) == before
    assert text == corefile.apply(COREFILE, sorted(HOSTS), proxy_fqdn=PROXY_FQDN,
                                  answers=corefile.Answers.of([PROXY_IP], 10))


def test_the_first_change_converts_the_rules_in_one_write(cluster: FakeApiServer,
                                                          start: Start) -> None:
    install_v010(cluster)
    ctl = start()
    ctl.wait_ready()
    wait_until(lambda: any(r.get("msg") == "first sync done" for r in ctl.records()),
               what="first sync")
    puts = corefile_puts(cluster)
    cluster.create(ingress("web", "new", tls_hosts=["new.shop.example.com"]))
    wait_until(lambda: "new.shop.example.com" in corefile.managed_hosts(corefile_text(cluster)),
               what="the new host written")
    assert corefile_puts(cluster) == puts + 1
    text = corefile_text(cluster)
    assert set(corefile.managed_hosts(text)) == {*HOSTS, "new.shop.example.com"}
    # Exactly what this version writes into the Corefile 0.1.0 started from.
    assert text == corefile.apply(COREFILE, sorted(corefile.managed_hosts(text)),
                                  proxy_fqdn=PROXY_FQDN,
                                  answers=corefile.Answers.of([PROXY_IP], 10))
    assert corefile.apply(text, (), proxy_fqdn=PROXY_FQDN) == COREFILE
