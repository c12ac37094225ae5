"""Broken watches and an unreachable API: recovered from, with no change missed."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import pytest

from hairpin_proxy import corefile
from tests.controller.conftest import Controller, corefile_text, wait_until
from tests.fakeapi.fixtures import ingress
from tests.fakeapi.server import FakeApiServer

Start = Callable[..., Controller]
INGRESS_WATCH = r"/apis/networking.k8s.io/v1/ingresses"


def managed(api: FakeApiServer) -> tuple[str, ...]:
    return corefile.managed_hosts(corefile_text(api))


def test_dropped_watch_resumes_without_missing_a_change(cluster: FakeApiServer,
                                                        start: Start) -> None:
    ctl = start()
    ctl.wait_ready()
    watches = cluster.count("GET", INGRESS_WATCH, watch=True)
    cluster.drop_watches()
    # Changed while no watch is open: must arrive through the resumed watch.
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    wait_until(lambda: managed(cluster) == ("a.example.com",), what="change after drop")
    assert cluster.count("GET", INGRESS_WATCH, watch=True) > watches
    wait_until(lambda: ctl.metric("hairpin_controller_watch_restarts_total") >= 1,
               what="restart counted")


def test_stalled_watch_is_reconnected(cluster: FakeApiServer, start: Start) -> None:
    ctl = start("--watch-timeout", "1")
    ctl.wait_ready()
    watches = cluster.count("GET", INGRESS_WATCH, watch=True)
    cluster.stall_watches()
    try:
        cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
        # Silence is noticed: the controller keeps opening new watches.
        wait_until(lambda: cluster.count("GET", INGRESS_WATCH, watch=True) >= watches + 2,
                   timeout=20, what="reconnects during the stall")
    finally:
        cluster.unstall_watches()
    wait_until(lambda: managed(cluster) == ("a.example.com",), what="change after the stall")
    assert 'reason="silent"' in ctl.get("/metrics")[1]


def test_gone_watch_relists(cluster: FakeApiServer, start: Start) -> None:
    cluster.create(ingress("old", "old", tls_hosts=["old.example.com"]))
    ctl = start("--allow-mass-removal")
    ctl.wait_ready()
    wait_until(lambda: managed(cluster) == ("old.example.com",), what="first write")
    lists = cluster.count("GET", INGRESS_WATCH, watch=False)
    # A deletion and an addition the open watch never delivers, then history is forgotten:
    # resuming gets 410 Gone, and only a relist can reveal the deletion.
    cluster.stall_watches()
    try:
        cluster.delete("Ingress", "old", "old")
        cluster.create(ingress("new", "new", tls_hosts=["new.example.com"]))
        cluster.compact()
        cluster.drop_watches()
    finally:
        cluster.unstall_watches()
    wait_until(lambda: managed(cluster) == ("new.example.com",), what="relisted state")
    assert cluster.count("GET", INGRESS_WATCH, watch=False) > lists
    assert 'reason="gone"' in ctl.get("/metrics")[1]


def test_failing_requests_are_retried(cluster: FakeApiServer, start: Start) -> None:
    ctl = start()
    ctl.wait_ready()
    cluster.fail_requests(3, status=500, method="PUT")
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    wait_until(lambda: managed(cluster) == ("a.example.com",), what="write after 500s")
    assert ctl.metric('hairpin_controller_reconciles_total{result="error"}') >= 1
    assert ctl.proc.poll() is None


@pytest.mark.slow
def test_api_down_for_thirty_seconds_is_survived(cluster: FakeApiServer, start: Start) -> None:
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    ctl = start()
    ctl.wait_ready()
    wait_until(lambda: managed(cluster) == ("a.example.com",), what="first write")
    cluster.go_down()
    try:
        cluster.create(ingress("b", "b", tls_hosts=["b.example.com"]))
        time.sleep(30)
        assert ctl.proc.poll() is None, ctl.log()
    finally:
        cluster.come_up()
    wait_until(lambda: managed(cluster) == ("a.example.com", "b.example.com"), timeout=60,
               what="converged after the outage")
    assert ctl.proc.poll() is None
    assert ctl.get("/readyz")[0] == 200


def test_no_change_is_lost_under_randomized_timing(cluster: FakeApiServer,
                                                   start: Start) -> None:
    """Creates right after the last write, mid-debounce, as bookmarks fall due, beside
    Lease renewals and edits by others: every one reaches the Corefile, and through the
    watch, not through a relist or a reconnect after silence."""
    # Bookmarks every 20 ms: an event meeting a due bookmark is common, not a one-in-a-run.
    cluster.bookmark_interval = 0.02
    ctl = start("--watch-timeout", "300")
    ctl.wait_ready()
    rng = random.Random(5)
    want: set[str] = set()
    # Bounded in count; each round's wait is bounded too (a hang guard, not a speed claim).
    for i in range(50):
        time.sleep(rng.choice((0.0, 0.0, rng.uniform(0.0, 0.05), rng.uniform(0.05, 0.3))))
        if rng.random() < 0.2:
            # Another manager's edit: the ConfigMap's watch fires beside the Ingress's.
            cluster.touch("ConfigMap", "kube-system", "coredns")
        host = f"r{i}.example.com"
        cluster.create(ingress("stress", f"r{i}", tls_hosts=[host]))
        want.add(host)
        wait_until(lambda: set(managed(cluster)) == want, timeout=15,
                   what=f"round {i}: {host} in the Corefile")
    assert ctl.metric('hairpin_controller_watch_restarts_total{kind="ingresses"') == 0
    assert ctl.proc.poll() is None


def test_an_outage_is_said_once_and_its_end_once(cluster: FakeApiServer, start: Start) -> None:
    """Every watch fails together when the API server is away: one warning naming the server
    and the cause in words, not one per watch and retry; one line when it answers again."""
    ctl = start()
    ctl.wait_ready()
    restarts = 'hairpin_controller_watch_restarts_total{kind="ingresses",reason="error"}'
    cluster.go_down()
    try:
        # Several watches, each failing several times.
        wait_until(lambda: ctl.metric(restarts) >= 3, what="the ingress watch failing again")
    finally:
        cluster.come_up()
    wait_until(lambda: any(r.get("msg") == "the Kubernetes API answers again"
                           for r in ctl.records()), what="the recovery line")
    down = [r for r in ctl.records() if r.get("msg") == (
        "cannot reach the Kubernetes API; retrying until it answers")]
    assert len(down) == 1, down
    assert down[0]["level"] == "warning"
    assert down[0]["server"] == cluster.url
    assert "Errno" not in str(down[0]["cause"])
    assert not [r for r in ctl.records() if r.get("level") == "warning"
                and r.get("msg") in ("list/watch failed; retrying", "lease attempt failed",
                                     "reconcile failed; will retry")]
    assert sum(r.get("msg") == "the Kubernetes API answers again"
               for r in ctl.records()) == 1
