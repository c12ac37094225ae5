"""Every other limit and failure, through the running controller against the fake API: one
object's problem is that object's Event and metric, and everybody else's rules stay.

Covered elsewhere (not repeated here): the resolver of host verification unreachable
(test_verification.py::test_a_resolver_outage_keeps_verified_hosts_and_adds_none), the size
limits (test_limits.py, test_limits_configmaps.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hairpin_proxy import corefile
from hairpin_proxy.published import parse_entries
from tests.controller.conftest import (
    COREFILE,
    NAMESPACE,
    PROXY_IP,
    PUBLISH,
    Controller,
    corefile_text,
    wait_until,
)
from tests.controller.test_gateway import QUICK, accepted, envoy_gateway, proxy_with_selector
from tests.controller.test_limits import (
    OLD,
    answers,
    created,
    events,
    ingress_nginx,
    removals,
    slot_answers,
)
from tests.fakeapi.fixtures import ingress, ingress_class, route
from tests.fakeapi.server import FakeApiServer

Start = Callable[..., Controller]


def published(api: FakeApiServer) -> set[str]:
    cm = api.get("ConfigMap", NAMESPACE, "hairpin-proxy-hosts")
    return set(parse_entries(((cm or {}).get("data") or {}).get("entries")))


def test_an_ingress_over_max_hosts_per_ingress_is_refused_alone(cluster: FakeApiServer,
                                                                start: Start) -> None:
    cluster.create(ingress("shop", "www", tls_hosts=OLD))
    ctl = start("--max-hosts-per-ingress", "10")
    ctl.wait_ready()
    wait_until(lambda: sorted(answers(cluster)) == OLD, what="the shop's hosts")
    cluster.create(ingress("tenant", "bulk", tls_hosts=[f"h{i}.bulk.example" for i in range(11)]))
    wait_until(lambda: events(cluster, "tenant"), what="Event on the tenant")
    (event,) = events(cluster, "tenant")
    assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "Ingress"
    assert "more than the limit of 10 per Ingress (--max-hosts-per-ingress)" in event["message"]
    wait_until(lambda: ctl.metric("hairpin_controller_hosts_rejected") == 1, what="metric")
    cluster.create(ingress("team", "small", tls_hosts=["c.shop.example"]))
    wait_until(lambda: sorted(answers(cluster)) == [*OLD[:1], "c.shop.example", *OLD[1:]],
               what="a newcomer beside the shop")
    assert not events(cluster, "shop") and not removals(ctl)


def test_a_data_plane_with_no_slot_left_is_told_and_takes_no_ones_slot(
        cluster: FakeApiServer, start: Start) -> None:
    """--max-targets 1: ingress-nginx has the slot (the proxy's --target-server is another
    data plane); a Gateway that comes later finds none. Its route is told why, its host is
    left alone, and the class keeps its slot and hosts."""
    proxy_with_selector(cluster)
    cluster.create(ingress_class("nginx", default=True))
    ingress_nginx(cluster)
    cluster.create(ingress("shop", "www", tls_hosts=OLD))
    ctl = start(*QUICK, "--max-targets", "1",
                "--target-server", "traefik.kube-system.svc.cluster.local")
    ctl.wait_ready()
    wait_until(lambda: sorted(answers(cluster)) == OLD and set(answers(cluster).values())
               == {slot_answers(cluster)}, what="the shop's hosts on the class's slot")
    on_slot = slot_answers(cluster)
    envoy_gateway(cluster)
    created(cluster, accepted(route("HTTPRoute", "tenant", "web", parent="public",
                                    parent_namespace="web", hostnames=["gw.example.com"])))
    # The Gateway's objects reach the controller's caches in any order (a watch per kind):
    # a pass may first see the data plane without its PROXY settings and say so (Normal).
    def warnings() -> list[dict[str, Any]]:
        return [e for e in events(cluster, "tenant", "HostNotRedirected")
                if e["type"] == "Warning"]
    wait_until(warnings, what="a Warning Event on the route")
    (event,) = warnings()
    assert event["involvedObject"]["kind"] == "HTTPRoute"
    assert "no slot left for gateway/web/public (--max-targets 1)" in event["message"]
    wait_until(lambda: ctl.metric('hairpin_controller_hosts_not_redirected{reason="not-found"}')
               == 1, what="metric")
    assert "gw.example.com" not in answers(cluster)
    created(cluster, ingress("team", "small", tls_hosts=["c.shop.example"]))
    wait_until(lambda: "c.shop.example" in answers(cluster), what="a newcomer of the class")
    assert set(answers(cluster).values()) == {on_slot} and slot_answers(cluster) == on_slot
    assert not events(cluster, "shop") and not removals(ctl)


def test_a_corefile_broken_by_someone_keeps_every_rule_everywhere(cluster: FakeApiServer,
                                                                  start: Start) -> None:
    """Someone's edit leaves the Corefile unparsable: nothing is written anywhere (the rules in
    the text, the published hosts), a Warning Event on the ConfigMap says why, the metric
    moves; once fixed, the changes made meanwhile are written."""
    cluster.create(ingress("shop", "www", tls_hosts=OLD))
    cluster.create(ingress("shop", "gone", tls_hosts=["gone.shop.example"]))
    ctl = start("--allow-mass-removal", *PUBLISH)
    ctl.wait_ready()
    wait_until(lambda: published(cluster) == {*OLD, "gone.shop.example"}, what="published")
    cm = cluster.get("ConfigMap", "kube-system", "coredns")
    assert cm is not None
    broken = corefile_text(cluster).replace("    reload\n", "    reload {\n")
    cm["data"]["Corefile"] = broken
    cluster.update(cm)
    cluster.delete("Ingress", "shop", "gone")
    cluster.create(ingress("team", "new", tls_hosts=["new.shop.example"]))
    wait_until(lambda: ctl.metric("hairpin_controller_corefile_errors_total") >= 1,
               what="the parse error counted")
    wait_until(lambda: [e for e in events(cluster, "kube-system", "CorefileNotEdited")
                        if e["involvedObject"]["name"] == "coredns"],
               what="Event on the CoreDNS ConfigMap")
    assert corefile_text(cluster) == broken
    assert published(cluster) == {*OLD, "gone.shop.example"}
    assert not removals(ctl)
    cm = cluster.get("ConfigMap", "kube-system", "coredns")
    assert cm is not None
    cm["data"]["Corefile"] = COREFILE
    cluster.update(cm)
    wait_until(lambda: sorted(answers(cluster)) == sorted([*OLD, "new.shop.example"]),
               what="written after the fix")
    wait_until(lambda: published(cluster) == {*OLD, "new.shop.example"}, what="published")


def test_a_storm_of_conflicts_delays_but_loses_nothing(cluster: FakeApiServer,
                                                       start: Start) -> None:
    """Every write of the Corefile answered 409 for a while (editors racing us): each pass
    re-reads and retries, gives up after a few, backs off and tries again; no rule is
    lost meanwhile and the change is written once the storm is over."""
    cluster.create(ingress("shop", "www", tls_hosts=OLD))
    ctl = start(*PUBLISH)
    ctl.wait_ready()
    wait_until(lambda: sorted(answers(cluster)) == OLD, what="the shop's hosts")
    storm = 20
    cluster.fail_requests(storm, status=409, method="PUT", path_re=r"/configmaps/coredns$")
    cluster.create(ingress("team", "new", tls_hosts=["new.shop.example"]))
    wait_until(lambda: "new.shop.example" in answers(cluster), timeout=60,
               what="written after the storm")
    refused = [r for r in cluster.requests("PUT", r"/configmaps/coredns$") if r.status == 409]
    assert len(refused) == storm
    assert sorted(answers(cluster)) == sorted([*OLD, "new.shop.example"])
    assert answers(cluster)["new.shop.example"] == corefile.Answers.of([PROXY_IP])
    assert ctl.metric("hairpin_controller_conflicts_total") >= storm
    assert ctl.metric('hairpin_controller_reconciles_total{result="error"}') >= 1
    assert not removals(ctl)
    wait_until(lambda: published(cluster) == {*OLD, "new.shop.example"}, what="published")
