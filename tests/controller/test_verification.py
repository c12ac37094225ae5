"""Host verification end to end: the controller, the fake API and a real DNS server (dnsmasq).

A host is redirected only when its public answer is one of this cluster's load balancer
addresses; the verdicts follow the load balancer's address and ipMode without new lookups, and
a resolver outage neither withdraws a verified host nor lets an unverified one in.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hairpin_proxy import corefile
from hairpin_proxy.corefile.written import written
from tests.controller.conftest import PROXY_IP, Controller, corefile_text, wait_until
from tests.controller.test_limits import created
from tests.fakeapi.fixtures import ingress, service
from tests.fakeapi.server import FakeApiServer
from tests.verify.dnsmasq import LB_IP, OTHER_IP, Dnsmasq

Start = Callable[..., Controller]
HOSTS = ["app.example.test", "other.example.test", "*.wild.example.test",
         "nowhere.example.test"]


@pytest.fixture
def dns(dnsmasq: Dnsmasq) -> Dnsmasq:
    return dnsmasq


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
    failed = ctl.metric("hairpin_controller_verify_lookup_errors_total")
    wait_until(lambda: ctl.metric("hairpin_controller_verify_lookup_errors_total") >= failed + 3,
               what="several checks, all failing")
    assert managed(cluster) == ("app.example.test",)
    # The re-checks are jittered: wait (bounded) for one to have failed and kept the verdict.
    wait_until(lambda: ctl.metric("hairpin_controller_verify_oldest_kept_verdict_seconds") > 0,
               timeout=15, what="a verdict kept through the outage")
    assert ctl.metric("hairpin_controller_verify_lookup_errors_total") >= 1
    assert managed(cluster) == ("app.example.test",)
    dns.start()
    wait_until(lambda: managed(cluster) == ("app.example.test", "dual.example.test"),
               what="new host verified once DNS answers")
    assert ctl.proc.poll() is None


def test_a_restart_during_a_resolver_outage_withdraws_nothing(
        cluster: FakeApiServer, start: Start, dns: Dnsmasq) -> None:
    with_lb(cluster)
    cluster.create(ingress("shop", "web", tls_hosts=["app.example.test"]))
    ctl = verifying(start, dns)
    wait_until(lambda: managed(cluster) == ("app.example.test",), what="verified")
    dns.stop()
    cluster.create(ingress("shop", "new", tls_hosts=["dual.example.test"]))
    assert ctl.stop() == 0
    again = verifying(start, dns)
    wait_until(lambda: again.metric("hairpin_controller_verify_lookup_errors_total") >= 2,
               what="the restarted controller's checks failing")
    assert managed(cluster) == ("app.example.test",)
    dns.start()
    wait_until(lambda: managed(cluster) == ("app.example.test", "dual.example.test"),
               what="new host verified once DNS answers")
    assert again.proc.poll() is None


# ---------------------------------------------------------------------- hostile cases


def refusals(api: FakeApiServer) -> dict[tuple[str, str], list[str]]:
    """HostNotOnThisCluster Events in every namespace: (namespace, Ingress) -> messages."""
    out: dict[tuple[str, str], list[str]] = {}
    for e in api.list("Event"):
        if e.get("reason") != "HostNotOnThisCluster":
            continue
        involved = e["involvedObject"]
        assert isinstance(involved, dict)
        out.setdefault((involved["namespace"], involved["name"]), []).append(str(e["message"]))
    return out


def resource_version(obj: dict[str, object] | None) -> int:
    assert obj is not None
    meta = obj["metadata"]
    assert isinstance(meta, dict)
    return int(meta["resourceVersion"])


def corefile_mark(api: FakeApiServer) -> int:
    return resource_version(api.get("ConfigMap", "kube-system", "coredns"))


def written_since(api: FakeApiServer, mark: int) -> list[tuple[str, ...]]:
    """The managed hosts of every Corefile version written after ``mark``."""
    out = []
    for _type, obj in api.changes("ConfigMap", "kube-system", "coredns"):
        if resource_version(obj) > mark:
            out.append(corefile.managed_hosts(obj["data"]["Corefile"]))
    return out


def hold(api: FakeApiServer, host: str, seconds: float) -> None:
    """``host`` stays written for ``seconds``: in the Corefile now and in every version written
    meanwhile (a withdrawal and re-add between two polls would show there)."""
    mark = corefile_mark(api)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert host in managed(api), f"{host} withdrawn"
        time.sleep(0.05)
    assert all(host in hosts for hosts in written_since(api, mark)), written_since(api, mark)


def test_a_tenant_cannot_claim_a_name_that_is_not_this_clusters(
        cluster: FakeApiServer, start: Start, dns: Dnsmasq) -> None:
    """A tenant's Ingress for a name that resolves elsewhere (think api.github.com) is refused
    with an Event on that Ingress only; the other tenants' hosts are redirected as before."""
    with_lb(cluster)
    cluster.create(ingress("shop", "web", tls_hosts=["app.example.test"]))
    cluster.create(ingress("blog", "site", tls_hosts=["dual.example.test"]))
    cluster.create(ingress("evil", "grab", tls_hosts=["other.example.test"]))
    verifying(start, dns)
    wait_until(lambda: managed(cluster) == ("app.example.test", "dual.example.test"),
               what="the other tenants' hosts written")
    wait_until(lambda: ("evil", "grab") in refusals(cluster), what="Event on the Ingress")
    # Re-checks (interval 1 s) change nothing: no withdrawal, no Event elsewhere.
    hold(cluster, "app.example.test", 2.5)
    assert managed(cluster) == ("app.example.test", "dual.example.test")
    seen = refusals(cluster)
    assert set(seen) == {("evil", "grab")}, seen
    assert all(f"other.example.test resolves to {OTHER_IP}" in m for m in seen["evil", "grab"])
    assert not [e for e in cluster.list("Event") if e.get("type") == "Warning"
                and e["involvedObject"]["namespace"] != "evil"]

    # The tenant adds the name beside one that is ours: only the foreign name is refused.
    obj = cluster.get("Ingress", "evil", "grab")
    assert obj is not None
    obj["spec"]["tls"][0]["hosts"] = ["other.example.test", "*.wild.example.test"]
    cluster.update(obj)
    wait_until(lambda: managed(cluster) == ("*.wild.example.test", "app.example.test",
                                            "dual.example.test"), what="its own host written")
    assert "other.example.test" not in managed(cluster)
    assert set(refusals(cluster)) == {("evil", "grab")}


@pytest.mark.parametrize("first", ["web", "copy"])
def test_a_host_claimed_twice_stays_while_either_claims_it(
        cluster: FakeApiServer, start: Start, dns: Dnsmasq, first: str) -> None:
    """An Ingress updated to claim a host another one has (both on this cluster): the host
    stays while either claims it, whichever goes first, and goes with the last claim."""
    with_lb(cluster)
    cluster.create(ingress("shop", "web", tls_hosts=["app.example.test"]))
    cluster.create(ingress("blog", "copy", tls_hosts=["dual.example.test"]))
    verifying(start, dns)
    wait_until(lambda: managed(cluster) == ("app.example.test", "dual.example.test"),
               what="both written")
    obj = cluster.get("Ingress", "blog", "copy")
    assert obj is not None
    obj["spec"]["tls"][0]["hosts"] = ["dual.example.test", "app.example.test"]
    cluster.update(obj)
    hold(cluster, "app.example.test", 2.5)
    namespaces = {"web": "shop", "copy": "blog"}
    second = "copy" if first == "web" else "web"
    cluster.delete("Ingress", namespaces[first], first)
    if first == "copy":
        wait_until(lambda: "dual.example.test" not in managed(cluster), what="dual withdrawn")
    hold(cluster, "app.example.test", 2.5)
    assert not refusals(cluster)
    cluster.delete("Ingress", namespaces[second], second)
    wait_until(lambda: "app.example.test" not in managed(cluster),
               what="withdrawn with the last claim")
    wait_until(lambda: managed(cluster) == (), what="nothing left")


def test_a_host_is_redirected_only_while_its_dns_points_here(
        cluster: FakeApiServer, start: Start, tmp_path: Path) -> None:
    """The host's public answer is this cluster's load balancer for a short window only: it is
    redirected during the window and withdrawn at the next check after the answer moves."""
    flip = "flip.example.test"
    server = Dnsmasq(tmp_path, hosts={flip: [OTHER_IP]})
    server.start()
    try:
        assert server.lookup(flip) == (OTHER_IP,)
        with_lb(cluster)
        cluster.create(ingress("shop", "web", tls_hosts=["app.example.test", flip]))
        ctl = verifying(start, server)
        wait_until(lambda: managed(cluster) == ("app.example.test",), what="app only")
        wait_until(lambda: ("shop", "web") in refusals(cluster), what="flip refused")

        # The window opens: redirected at the next check, and kept while it lasts.
        server.reload({flip: [LB_IP]})
        assert server.lookup(flip) == (LB_IP,)
        wait_until(lambda: flip in managed(cluster), timeout=10, what="redirected")
        hold(cluster, flip, 2.5)

        # The answer moves elsewhere: withdrawn at the next check (interval 1 s).
        checks = ctl.metric("hairpin_controller_verify_lookups_total")
        server.reload({flip: [OTHER_IP]})
        wait_until(lambda: flip not in managed(cluster), timeout=10, what="withdrawn")
        # Withdrawn because a check saw the new answer, not for any other reason.
        assert ctl.metric("hairpin_controller_verify_lookups_total") > checks
        assert managed(cluster) == ("app.example.test",)

        # Once more, and this time the name goes away altogether (NXDOMAIN).
        server.reload({flip: [LB_IP]})
        wait_until(lambda: flip in managed(cluster), timeout=10, what="redirected again")
        server.reload({})
        assert server.lookup(flip) == ()
        wait_until(lambda: flip not in managed(cluster), timeout=10, what="withdrawn again")
        assert managed(cluster) == ("app.example.test",)
        assert ctl.proc.poll() is None
    finally:
        server.stop()


# ---------------------------------------------------------------------- what the operator sees


def summaries(ctl: Controller) -> list[dict[str, object]]:
    return [r for r in ctl.records() if r.get("msg") == "host verification"]


def test_a_start_with_1000_ingresses_logs_a_summary_not_a_line_per_host(
        cluster: FakeApiServer, start: Start, dns: Dnsmasq) -> None:
    with_lb(cluster)
    zones = ("app", "other", "nowhere")  # verified, not this cluster, unresolved
    for i in range(1000):
        cluster.create(ingress("shop", f"web{i:04d}",
                               tls_hosts=[f"h{i:04d}.{zones[i % 3]}.example.test"]))
    # The default --write-interval: what a start does, not the tests' faster one.
    ctl = start("--verify-hosts", "on", "--verify-resolver", dns.server,
                "--allow-mass-removal", "--write-interval", "2")
    ctl.wait_ready(timeout=60)
    (first,) = [r for r in ctl.records() if r.get("msg") == "first sync done"]
    # Nothing is redirected before its verdict: the first pass says how many wait for one.
    assert int(str(first["verifying"])) + int(str(first["hosts"])) == 1000
    wait_until(lambda: any(r["pending"] == 0 for r in summaries(ctl)), timeout=120,
               what="every host verified")
    final = [r for r in summaries(ctl) if r["pending"] == 0][-1]
    assert (final["hosts"], final["verified"], final["not_this_cluster"],
            final["unresolved"]) == (1000, 334, 333, 333)
    wait_until(lambda: len(managed(cluster)) == 334, timeout=30, what="verified hosts written")
    # Per-host Events as before, on each Ingress whose host is not this cluster's.
    wait_until(lambda: events(cluster, "HostNotOnThisCluster"), what="per-host Events")
    lines = ctl.log().splitlines()
    assert len(lines) < 50, "\n".join(lines)
    assert not [r for r in ctl.records() if r.get("msg") == "host not redirected"]


def test_no_host_resolving_at_all_is_one_warning_shown_in_readyz(
        cluster: FakeApiServer, start: Start, dns: Dnsmasq) -> None:
    with_lb(cluster)
    cluster.create(ingress("shop", "web", tls_hosts=["nowhere.example.test",
                                                     "gone.example.test"]))
    ctl = verifying(start, dns, "--log-level", "debug")

    def warnings() -> list[dict[str, object]]:
        return [r for r in ctl.records() if r.get("level") == "warning"
                and "no candidate host resolves" in str(r.get("msg"))]
    wait_until(warnings, what="the no-public-DNS warning")
    (warning,) = warnings()
    assert "--verify-resolver" in str(warning["msg"]) and "verify-off" in str(warning["msg"])
    code, body = ctl.get("/readyz")
    assert code == 200 and "verification: no candidate host resolves" in body
    assert "verify-off" in body
    # Per-host lines are there at debug level only.
    per_host = [r for r in ctl.records() if r.get("msg") == "host not redirected"]
    assert per_host and {r["level"] for r in per_host} == {"debug"}
    # More passes (re-checks every second, a new unresolved host) warn no more.
    cluster.create(ingress("shop", "more", tls_hosts=["missing.example.test"]))
    wait_until(lambda: any(r["hosts"] == 3 and r["unresolved"] == 3 for r in summaries(ctl)),
               what="the new host checked")
    assert len(warnings()) == 1
    # One host that resolves here: public DNS is reachable, the warning is over.
    cluster.create(ingress("shop", "real", tls_hosts=["app.example.test"]))
    wait_until(lambda: managed(cluster) == ("app.example.test",), what="verified host written")
    wait_until(lambda: "verification" not in ctl.get("/readyz")[1], what="readyz clear")
    assert len(warnings()) == 1


def test_hosts_verification_keeps_out_take_no_room_in_the_rules_budget(
        cluster: FakeApiServer, start: Start, dns: Dnsmasq) -> None:
    """Verification comes before the size limits, in the same plan: an older Ingress whose
    hosts are not this cluster's takes no room, so a newer one that fits the budget alone
    is written whole and refused nothing, although both would not fit together."""
    with_lb(cluster)
    far = [f"h{i:02d}-{'x' * 30}.elsewhere-wild.example.test" for i in range(20)]
    ours = [f"h{i:02d}-{'x' * 30}.wild.example.test" for i in range(20)]
    proxy = corefile.Answers.of([PROXY_IP])
    # As the rules are written (the compact spelling).
    alone = max(written({proxy: sorted(far)}).size, written({proxy: sorted(ours)}).size)
    both = written({proxy: sorted([*far, *ours])}).size
    budget = (alone + both) // 2
    assert alone < budget < both
    cluster.create(ingress("shop", "far", tls_hosts=far))
    created(cluster, ingress("shop", "ours", tls_hosts=ours))
    ctl = verifying(start, dns, "--rules-budget", str(budget))
    wait_until(lambda: managed(cluster) == tuple(sorted(ours)), what="the verified hosts")
    wait_until(lambda: ctl.metric('hairpin_controller_host_verdicts{verdict="not-this-cluster"}')
               == 20, what="the other cluster's hosts judged")
    assert ctl.metric("hairpin_controller_ingresses_over_budget") == 0
    assert 0 < ctl.metric("hairpin_controller_rules_bytes") <= budget
    assert not events(cluster, "HostRejected")
    wait_until(lambda: refusals(cluster), what="told on the far one")
    assert set(refusals(cluster)) == {("shop", "far")}
