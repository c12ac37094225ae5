"""The Public Suffix List through the running controller: its tables are built in that process
(laid out by that process's string hashes), and what they refuse is told on the Ingress."""

from __future__ import annotations

from collections.abc import Callable

from hairpin_proxy import corefile
from tests.controller.conftest import Controller, corefile_text, wait_until
from tests.fakeapi.fixtures import ingress
from tests.fakeapi.server import FakeApiServer

Start = Callable[..., Controller]


def test_public_suffixes_are_refused_and_names_below_them_kept(cluster: FakeApiServer,
                                                              start: Start) -> None:
    # An exact rule (co.uk), a wildcard's root and child (*.ck), a private-section rule
    # (github.io), and below them: an exception (!www.ck) and registrable names.
    cluster.create(ingress("shop", "web", tls_hosts=[
        "co.uk", "*.github.io", "foo.ck", "www.ck", "shop.example.co.uk", "*.me.github.io"]))
    ctl = start()
    ctl.wait_ready()
    wait_until(lambda: corefile.managed_hosts(corefile_text(cluster))
               == ("*.me.github.io", "shop.example.co.uk", "www.ck"), what="the kept hosts")

    def refused() -> list[str]:
        return sorted(str(e["message"]) for e in cluster.list("Event", "shop")
                      if e.get("reason") == "HostRejected")

    wait_until(lambda: len(refused()) == 3, what="an Event per refused host")
    for host, words in [("co.uk", "a public suffix (co.uk)"),
                        ("*.github.io", "wildcard covers a whole public suffix (github.io)"),
                        ("foo.ck", "a public suffix (foo.ck)")]:
        assert any(host in m and words in m for m in refused()), (host, refused())
