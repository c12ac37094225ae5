"""One tenant can never stop the others: the rules budget, the write rate limit, bad objects."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

from hairpin_proxy import corefile
from hairpin_proxy.corefile.written import written
from tests.controller.conftest import (
    PROXY_IP,
    Controller,
    corefile_text,
    wait_until,
)
from tests.fakeapi.fixtures import ingress
from tests.fakeapi.server import FakeApiServer

Start = Callable[..., Controller]


def managed(api: FakeApiServer) -> tuple[str, ...]:
    return corefile.managed_hosts(corefile_text(api))


def rejections(api: FakeApiServer, namespace: str) -> list[str]:
    return [str(e["message"]) for e in api.list("Event", namespace)
            if e.get("reason") == "HostRejected"]


def test_the_newest_ingress_over_the_rules_budget_is_refused(cluster: FakeApiServer,
                                                             start: Start) -> None:
    old = ["a.example.com", "b.example.com"]
    cluster.create(ingress("team-a", "web", tls_hosts=old))
    # creationTimestamp has one-second resolution: the next Ingress is made a second later.
    cluster.next_second()
    big = [f"host-{i}.example.org" for i in range(40)]
    cluster.create(ingress("team-b", "bulk", tls_hosts=big))
    # Measured as written: the hosts and their answer set's stanza pair.
    budget = written({corefile.Answers.of([PROXY_IP]): sorted(old + big)}).size - 1
    ctl = start("--rules-budget", str(budget), "--allow-mass-removal")
    ctl.wait_ready()
    # Everything of the older Ingress is written; the newer one, which overflows, is not.
    wait_until(lambda: managed(cluster) == tuple(old), what="older Ingress written")
    wait_until(lambda: rejections(cluster, "team-b"), what="Event on the newer Ingress")
    (message,) = rejections(cluster, "team-b")
    assert "would take the rules past --rules-budget" in message
    assert ctl.metric("hairpin_controller_ingresses_over_budget") == 1
    # The log names the refused object's hosts, not an empty host.
    (logged,) = {r["host"] for r in ctl.records() if r.get("msg") == "host rejected"}
    assert sorted(str(logged).split(",")) == sorted(big)
    assert not rejections(cluster, "team-a")
    # A third, small Ingress still fits beside the older one.
    cluster.create(ingress("team-c", "small", tls_hosts=["c.example.com"]))
    wait_until(lambda: "c.example.com" in managed(cluster), what="small Ingress written")
    # The older one gone, the newer one fits and is written.
    cluster.delete("Ingress", "team-a", "web")
    cluster.delete("Ingress", "team-c", "small")
    wait_until(lambda: managed(cluster) == tuple(sorted(big)),
               what="newer Ingress written once it fits")
    assert ctl.metric("hairpin_controller_ingresses_over_budget") == 0


def test_a_flapping_ingress_cannot_make_coredns_reload_without_end(cluster: FakeApiServer,
                                                                  start: Start) -> None:
    cluster.create(ingress("a", "a", tls_hosts=["flap-0.example.com"]))
    ctl = start("--write-interval", "2", "--allow-mass-removal")
    ctl.wait_ready()
    wait_until(lambda: managed(cluster) == ("flap-0.example.com",), what="first write")
    obj = cluster.get("Ingress", "a", "a")
    assert obj is not None
    for i in range(1, 41):
        obj["spec"]["tls"][0]["hosts"] = [f"flap-{i}.example.com"]
        obj = cluster.update(obj)
        time.sleep(0.1)  # paces the flapping beyond the debounce (0.1 s): not coalesced
    wait_until(lambda: managed(cluster) == ("flap-40.example.com",), what="last state written")
    # At most one write per interval: the controller waits the interval from when its last
    # write returned, so the server sees them at least that far apart (a lower bound).
    writes = [r.time for r in cluster.requests("PUT", r"/kube-system/configmaps/coredns$")
              if r.status == 200]
    assert len(writes) >= 2
    gaps = [b - a for a, b in itertools.pairwise(writes)]
    assert min(gaps) >= 2, gaps
    assert ctl.metric("hairpin_controller_writes_throttled_total") >= 1


def test_a_hostile_ingress_stops_no_other(cluster: FakeApiServer, start: Start) -> None:
    cluster.create(ingress("bad", "evil", tls_hosts=["kubernetes.default.svc.cluster.local",
                                                     "10.0.0.1"]))
    cluster.create(ingress("good", "web", tls_hosts=["good.example.com"]))
    ctl = start()
    ctl.wait_ready()
    wait_until(lambda: managed(cluster) == ("good.example.com",), what="good host written")
    wait_until(lambda: len(rejections(cluster, "bad")) == 2, what="Events on the bad Ingress")
    assert ctl.proc.poll() is None
