"""One object over a limit never removes anyone else's rules: through the running controller
against the fake API, whatever target the hosts go to (an IngressClass that falls back to the
default target, a discovered class with its own slot, a Gateway), the oldest objects keep
their hosts and the newest that would overflow are refused, each with a Warning Event on
itself (the right kind: an HTTPRoute and an Ingress may share a namespace and name)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from hairpin_proxy import corefile
from hairpin_proxy.corefile.written import written
from tests.controller.conftest import (
    NAMESPACE,
    PROXY_IP,
    Controller,
    corefile_puts,
    corefile_text,
    wait_until,
)
from tests.controller.test_gateway import QUICK, accepted, envoy_gateway, proxy_with_selector
from tests.controller.test_traefik import QUICK as TRAEFIK_QUICK
from tests.controller.test_traefik import ingressroute, traefik
from tests.fakeapi.crds import LISTENER_SET, TRAEFIK_INGRESSROUTE
from tests.fakeapi.fixtures import configmap, ingress, ingress_class, route, service
from tests.fakeapi.server import FakeApiServer
from tests.verify.dnsmasq import OTHER_IP, Dnsmasq
from tests.waiting import PATIENCE

Start = Callable[..., Controller]

OLD = ["a.shop.example", "www.shop.example"]
# The issue's tenant: 95 names with 40-character first labels.
BULK = [f"n{i:03d}-{'x' * 35}.bulk.example" for i in range(95)]
REFUSED = "would take the rules past --rules-budget"


def answers(api: FakeApiServer) -> dict[str, corefile.Answers]:
    return corefile.managed_groups(corefile_text(api))


def events(api: FakeApiServer, namespace: str, reason: str = "HostRejected"
           ) -> list[dict[str, Any]]:
    return [e for e in api.list("Event", namespace) if e.get("reason") == reason]


def created(api: FakeApiServer, obj: dict[str, Any]) -> dict[str, Any]:
    """Create ``obj`` in a later second than every object before it (creationTimestamp has
    whole seconds, and the order of age is what the test is about)."""
    api.next_second()
    return api.create(obj)


def removals(ctl: Controller) -> list[dict[str, object]]:
    """Every rules write that removed a host."""
    return [r for r in ctl.records() if r.get("msg") == "rules updated"
            and r.get("removed") != 0]


def said(ctl: Controller, msg: str) -> list[dict[str, object]]:
    return [r for r in ctl.records() if r.get("msg") == msg]


def ingress_nginx(api: FakeApiServer) -> None:
    """An ingress-nginx data plane that expects the PROXY protocol: class nginx gets a slot."""
    api.create(service("ingress-nginx", "ingress-nginx-controller", type="LoadBalancer",
                       labels={"app.kubernetes.io/name": "ingress-nginx",
                               "app.kubernetes.io/component": "controller"},
                       lb_ingress=[{"ip": "203.0.113.20"}]))
    api.create(configmap("ingress-nginx", "ingress-nginx-controller",
                         {"use-proxy-protocol": "true"}))


def slot_answers(api: FakeApiServer) -> corefile.Answers | None:
    svc = api.get("Service", NAMESPACE, "hairpin-proxy-t1")
    return None if svc is None else corefile.Answers.of(svc["spec"]["clusterIPs"])


@pytest.mark.parametrize("plane", ["falls-back", "own-slot"])
def test_a_tenant_over_the_budget_leaves_every_other_host(cluster: FakeApiServer, start: Start,
                                                         plane: str) -> None:
    """The issue's scenario: one Ingress of the cluster's default class, --rules-budget
    6000, then a tenant's Ingress of 95 long names. With no data plane found for the class
    its hosts fall back to the default target; with ingress-nginx found (and the proxy's
    --target-server another data plane) they get a slot."""
    proxy_with_selector(cluster)
    cluster.create(ingress_class("nginx", default=True))
    if plane == "own-slot":
        ingress_nginx(cluster)
    cluster.create(ingress("shop", "www", tls_hosts=OLD))
    ctl = start("--rules-budget", "6000", "--target-settle", "0",
                "--target-server", "traefik.kube-system.svc.cluster.local")
    ctl.wait_ready()
    wait_until(lambda: sorted(answers(cluster)) == OLD, what="the shop's hosts written")
    expected = corefile.Answers.of([PROXY_IP]) if plane == "falls-back" \
        else slot_answers(cluster)
    assert set(answers(cluster).values()) == {expected}
    puts = corefile_puts(cluster)

    tenant = created(cluster, ingress("tenant", "bulk", tls_hosts=BULK))
    wait_until(lambda: events(cluster, "tenant"), what="Warning Event on the tenant's Ingress")
    (event,) = events(cluster, "tenant")
    assert event["type"] == "Warning" and REFUSED in event["message"]
    assert "its 95 host(s)" in event["message"]
    involved = event["involvedObject"]
    assert (involved["kind"], involved["apiVersion"], involved["name"], involved["uid"]) == (
        "Ingress", "networking.k8s.io/v1", "bulk", tenant["metadata"]["uid"])
    wait_until(lambda: ctl.metric("hairpin_controller_ingresses_over_budget") == 1,
               what="the budget metric")
    assert 0 < ctl.metric("hairpin_controller_rules_bytes") <= 6000
    assert sorted(answers(cluster)) == OLD and corefile_puts(cluster) == puts
    assert not events(cluster, "shop")
    assert not removals(ctl)
    assert any(r.get("msg") == "over a size limit: the newest objects are refused"
               and r.get("objects") == "Ingress tenant/bulk" for r in ctl.records())

    # A newer but small Ingress still fits beside the shop's.
    created(cluster, ingress("team", "small", tls_hosts=["c.shop.example"]))
    wait_until(lambda: "c.shop.example" in answers(cluster), what="a small newcomer written")
    assert not removals(ctl)
    # The same refusal pass after pass: said once.
    assert len(said(ctl, "over a size limit: the newest objects are refused")) == 1
    assert ctl.metric("hairpin_controller_hosts_rejected") == 1
    # Once the tenant fits (its Ingress trimmed), it is written and the metric goes back.
    obj = cluster.get("Ingress", "tenant", "bulk")
    assert obj is not None
    obj["spec"]["tls"][0]["hosts"] = BULK[:3]
    cluster.update(obj)
    wait_until(lambda: set(BULK[:3]) <= set(answers(cluster)), what="the trimmed tenant")
    wait_until(lambda: ctl.metric("hairpin_controller_ingresses_over_budget") == 0,
               what="the metric back to 0")
    wait_until(lambda: said(ctl, "every object fits the rules budget again"),
               what="the all-clear logged")
    assert ctl.metric("hairpin_controller_hosts_rejected") == 0
    assert len(answers(cluster)) == 6
    wait_until(lambda: ctl.metric("hairpin_controller_hosts_managed") == 6,
               what="the hosts written counted")


# Tenants of 100 names with 50-character first labels: this many take more than 512 KiB of
# rules as written (about 11 KiB each), and twice as many more than the Corefile's 1 MiB.
TENANTS = 60


def _shop_and_tenants(cluster: FakeApiServer, start: Start, *flags: str) -> Controller:
    """The shop's Ingress, the controller started with ``flags`` and the shop written, then
    TENANTS tenant Ingresses of 100 names with 50-character first labels."""
    cluster.create(ingress_class("nginx", default=True))
    cluster.create(ingress("shop", "www", tls_hosts=OLD))
    ctl = start(*flags)
    ctl.wait_ready()
    wait_until(lambda: sorted(answers(cluster)) == OLD, what="the shop's hosts written")
    for n in range(TENANTS):
        cluster.create(ingress("tenants", f"t{n:02d}", tls_hosts=[
            f"h{i:03d}{n:02d}{'y' * 45}.bulk{n}.example" for i in range(100)]))
    return ctl


def test_a_budget_of_512_kib_with_60_tenants_of_100_long_hosts(cluster: FakeApiServer,
                                                               start: Start) -> None:
    """The earlier default as an opt-in cap: 60 Ingresses of 100 names with 50-character
    labels. The oldest that fit are written, the rest refused, the shop's hosts (the
    oldest) stay."""
    ctl = _shop_and_tenants(cluster, start, "--rules-budget", "524288")

    def tenants_held() -> int:
        return len({h.rsplit(".bulk", 1)[1] for h in answers(cluster) if ".bulk" in h})

    # The metric is set as a pass plans, its write lands after: an earlier pass's rules (fewer
    # tenants, all fitting) may still be there. Settled once each tenant is one or the other.
    wait_until(lambda: ctl.metric("hairpin_controller_ingresses_over_budget") > 0
               and tenants_held() + ctl.metric("hairpin_controller_ingresses_over_budget")
               == TENANTS, what="every tenant written or refused")
    held = answers(cluster)
    assert set(OLD) <= set(held)
    refused = int(ctl.metric("hairpin_controller_ingresses_over_budget"))
    wait_until(lambda: len({e["involvedObject"]["name"] for e in events(cluster, "tenants")})
               == refused, what="one Event per refused Ingress")
    # Every tenant is written whole or refused whole.
    refused_names = {e["involvedObject"]["name"] for e in events(cluster, "tenants")}
    for n in range(TENANTS):
        mine = {h for h in held if h.endswith(f".bulk{n}.example")}
        assert len(mine) == (0 if f"t{n:02d}" in refused_names else 100), n
    assert ctl.metric("hairpin_controller_rules_bytes") <= 524288
    # Measured as written: more tenants than their names in full would have let in, and the
    # metric is the size of the stanzas of what is held.
    kept = TENANTS - refused
    one = [h for h in held if h.endswith(".bulk0.example")]
    assert kept > (524288 - corefile.rules_bytes(OLD)) // corefile.rules_bytes(one)
    by_answers: dict[corefile.Answers, list[str]] = {}
    for host, addresses in held.items():
        by_answers.setdefault(addresses, []).append(host)
    assert ctl.metric("hairpin_controller_rules_bytes") == written(
        {a: sorted(hs) for a, hs in by_answers.items()}).size
    assert not removals(ctl)


def test_by_default_the_rules_take_what_the_configmap_has_room_for(cluster: FakeApiServer,
                                                                     start: Start) -> None:
    """No --rules-budget: the same 60 tenants are all written (more than 512 KiB of rules as
    written), and tenants past the room the ConfigMap leaves are refused with
    Events naming that room, the older ones keeping theirs."""
    ctl = _shop_and_tenants(cluster, start)
    label = "y" * 45
    wait_until(lambda: len(answers(cluster)) == 2 + 100 * TENANTS, what="every tenant written")
    assert ctl.metric("hairpin_controller_rules_bytes") > 524288
    assert ctl.metric("hairpin_controller_ingresses_over_budget") == 0
    assert not events(cluster, "tenants")
    # Past the room: as many again, made later (a second later at least: by age).
    for n in range(TENANTS, 2 * TENANTS):
        late = ingress("late", f"t{n:02d}", tls_hosts=[
            f"h{i:03d}{n:02d}{label}.bulk{n}.example" for i in range(100)])
        _ = created(cluster, late) if n == TENANTS else cluster.create(late)
    wait_until(lambda: ctl.metric("hairpin_controller_ingresses_over_budget") > 0,
               what="the newest tenants refused")
    wait_until(lambda: events(cluster, "late"), what="an Event on a refused tenant")
    messages = {str(e["message"]) for e in events(cluster, "late")}
    assert all("leaves under its 1 MiB" in m for m in messages), messages
    held = answers(cluster)
    assert all(f"h000{n:02d}{label}.bulk{n}.example" in held for n in range(TENANTS))
    assert not removals(ctl)


def test_a_route_over_the_budget_is_refused_on_itself(cluster: FakeApiServer,
                                                      start: Start) -> None:
    """Gateway routes, on a slot of their own: the older route keeps its hosts, the newer
    one is refused with an Event on the HTTPRoute (not on the Ingress of the same name)."""
    proxy_with_selector(cluster)
    envoy_gateway(cluster)
    cluster.create(accepted(route("HTTPRoute", "shop", "www", parent="public",
                                  parent_namespace="web",
                                  hostnames=["www-shop.example.com", "a-shop.example.com"])))
    cluster.create(ingress("tenant", "bulk", tls_hosts=["ingress.example.org"]))
    ctl = start(*QUICK, "--rules-budget", "1500")
    ctl.wait_ready()
    wait_until(lambda: {"www-shop.example.com", "a-shop.example.com"} <= set(answers(cluster)),
               what="the older route written")
    assert answers(cluster)["www-shop.example.com"] == slot_answers(cluster)
    hosts = [f"n{i:03d}-{'x' * 35}.example.com" for i in range(16)]
    tenant = created(cluster, accepted(route("HTTPRoute", "tenant", "bulk", parent="public",
                                             parent_namespace="web", hostnames=hosts)))
    wait_until(lambda: events(cluster, "tenant"), what="Event on the tenant's route")
    (event,) = events(cluster, "tenant")
    involved = event["involvedObject"]
    assert (involved["kind"], involved["apiVersion"], involved["uid"]) == (
        "HTTPRoute", "gateway.networking.k8s.io/v1", tenant["metadata"]["uid"])
    assert REFUSED in event["message"] and "HTTPRoute" in event["message"]
    wait_until(lambda: ctl.metric("hairpin_controller_ingresses_over_budget") == 1,
               what="the budget metric")
    assert {"www-shop.example.com", "a-shop.example.com", "ingress.example.org"} == set(
        answers(cluster))
    assert not removals(ctl)


@pytest.mark.parametrize("route_first", [False, True])
def test_a_refused_routes_event_is_on_the_route_not_the_ingress_of_its_name(
        cluster: FakeApiServer, start: Start, route_first: bool) -> None:
    """An HTTPRoute shop/web and an Ingress shop/web, created in either order: the route's
    refused host is told on the HTTPRoute (kind, apiVersion, uid), never on the Ingress."""
    proxy_with_selector(cluster)
    envoy_gateway(cluster, hostname="*.cluster.local")
    made: dict[str, dict[str, Any]] = {}

    def make_route() -> None:
        made["route"] = created(cluster, accepted(route(
            "HTTPRoute", "shop", "web", parent="public", parent_namespace="web",
            hostnames=["web.cluster.local"])))

    def make_ingress() -> None:
        made["ingress"] = created(cluster, ingress("shop", "web",
                                                   tls_hosts=["web.example.org"]))

    for make in (make_route, make_ingress) if route_first else (make_ingress, make_route):
        make()
    ctl = start(*QUICK)
    ctl.wait_ready()
    wait_until(lambda: "web.example.org" in answers(cluster), what="the Ingress's host")
    wait_until(lambda: events(cluster, "shop"), what="Event on the refused host")
    (event,) = events(cluster, "shop")
    involved = event["involvedObject"]
    assert (involved["kind"], involved["apiVersion"], involved["name"], involved["uid"]) == (
        "HTTPRoute", "gateway.networking.k8s.io/v1", "web", made["route"]["metadata"]["uid"])
    assert "web.cluster.local" in event["message"] and "cluster domain" in event["message"]
    # The Ingress of the same name has nothing to be told.
    assert made["ingress"]["metadata"]["uid"] not in {
        e["involvedObject"]["uid"] for e in cluster.list("Event", "shop")}
    assert any(r.get("msg") == "host rejected" and r.get("object") == "HTTPRoute shop/web"
               for r in ctl.records())


def listener_set_route(namespace: str, name: str, hostnames: list[str]) -> dict[str, Any]:
    """An HTTPRoute whose parent is the ListenerSet ``namespace``/extra, accepted there."""
    parent = {"group": "gateway.networking.k8s.io", "kind": "ListenerSet", "name": "extra",
              "namespace": namespace}
    obj = route("HTTPRoute", namespace, name, hostnames=hostnames)
    obj["spec"]["parentRefs"] = [parent]
    obj["status"] = {"parents": [{
        "parentRef": parent, "controllerName": "gateway.envoyproxy.io/gatewayclass-controller",
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                        "message": "", "observedGeneration": 1,
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]}
    return obj


def listener_set(namespace: str) -> dict[str, Any]:
    """ListenerSet ``namespace``/extra on Gateway web/public, accepted, any hostname."""
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
            "metadata": {"namespace": namespace, "name": "extra"},
            "spec": {"parentRef": {"name": "public", "namespace": "web"},
                     "listeners": [{"name": "extra", "port": 80, "protocol": "HTTP",
                                    "allowedRoutes": {"namespaces": {"from": "Same"}}}]},
            "status": {"conditions": [{"type": "Accepted", "status": "True",
                                       "reason": "Accepted", "message": "",
                                       "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}


@pytest.mark.parametrize("route_first", [False, True])
def test_a_listener_set_routes_event_is_on_the_route_of_its_kind(
        cluster: FakeApiServer, start: Start, route_first: bool) -> None:
    """An HTTPRoute shop/web attached to a ListenerSet, an Ingress shop/web and a Traefik
    IngressRoute shop/web, each with a refused host: the route's group first (before the
    controller starts) or last (while it runs). Each refusal is told on its own object
    (kind, apiVersion, uid), whichever came first; none on another kind of the same name."""
    proxy_with_selector(cluster)
    envoy_gateway(cluster)
    gw = cluster.get("Gateway", "web", "public")
    assert gw is not None
    gw["spec"]["allowedListeners"] = {"namespaces": {"from": "All"}}
    cluster.update(gw)
    cluster.install(LISTENER_SET, TRAEFIK_INGRESSROUTE)
    traefik(cluster)
    made: dict[str, dict[str, Any]] = {}

    def make_route() -> None:
        cluster.create(listener_set("shop"))
        # The listener has no hostname: the route's names are its own, and the cluster
        # domain's is refused.
        made["HTTPRoute"] = created(cluster, listener_set_route(
            "shop", "web", ["web.cluster.local", "ls.example.com"]))

    def make_others() -> None:
        made["Ingress"] = created(cluster, ingress("shop", "web", tls_hosts=[
            "localhost", "site.example.com"]))
        made["IngressRoute"] = created(cluster, ingressroute(
            "shop", "web", "HostSNI(`db.example.com`) || Host(`ir.example.com`)"))

    first, second = (make_route, make_others) if route_first else (make_others, make_route)
    first()
    ctl = start(*TRAEFIK_QUICK)
    ctl.wait_ready()
    second()
    wait_until(lambda: {"ls.example.com", "site.example.com"} <= set(answers(cluster)),
               what="the route's and the Ingress's good hosts")
    wait_until(lambda: {e["involvedObject"]["kind"] for e in events(cluster, "shop")} == {
        "HTTPRoute", "Ingress", "IngressRoute"}, what="each object's Event")
    told: dict[str, list[str]] = {}
    for e in events(cluster, "shop"):
        involved = e["involvedObject"]
        kind = involved["kind"]
        assert involved["name"] == "web"
        assert involved["uid"] == made[kind]["metadata"]["uid"], kind
        assert involved["apiVersion"] == made[kind]["apiVersion"], kind
        told.setdefault(kind, []).append(e["message"])
    assert set(told) == {"HTTPRoute", "Ingress", "IngressRoute"}
    assert all("web.cluster.local" in m and "cluster domain" in m for m in told["HTTPRoute"])
    assert all("localhost" in m for m in told["Ingress"])
    assert all("TCP router matcher" in m for m in told["IngressRoute"])
    assert any(r.get("msg") == "host rejected" and r.get("object") == "HTTPRoute shop/web"
               for r in ctl.records())


def test_a_routes_foreign_name_is_told_on_the_route(cluster: FakeApiServer, start: Start,
                                                    dnsmasq: Dnsmasq) -> None:
    """Host verification tells on the object that asked, of whatever kind: an HTTPRoute
    evil/grab asking for a name that resolves elsewhere gets the Event, the Ingress evil/grab
    beside it (whose name is ours) gets none and keeps its host."""
    proxy_with_selector(cluster)
    envoy_gateway(cluster, hostname="*.example.test")  # its load balancer is LB_IP
    made = created(cluster, accepted(route("HTTPRoute", "evil", "grab", parent="public",
                                           parent_namespace="web",
                                           hostnames=["other.example.test"])))
    mine = created(cluster, ingress("evil", "grab", tls_hosts=["dual.example.test"]))
    ctl = start(*QUICK, "--verify-hosts", "on", "--verify-resolver", dnsmasq.server,
                "--verify-interval", "1")
    ctl.wait_ready()
    wait_until(lambda: "dual.example.test" in answers(cluster), what="the Ingress's host")
    wait_until(lambda: events(cluster, "evil", "HostNotOnThisCluster"),
               what="Event on the route")
    (event,) = events(cluster, "evil", "HostNotOnThisCluster")
    involved = event["involvedObject"]
    assert (involved["kind"], involved["apiVersion"], involved["uid"]) == (
        "HTTPRoute", "gateway.networking.k8s.io/v1", made["metadata"]["uid"])
    assert f"other.example.test resolves to {OTHER_IP}" in event["message"]
    assert "other.example.test" not in answers(cluster)
    assert mine["metadata"]["uid"] not in {
        e["involvedObject"]["uid"] for e in cluster.list("Event", "evil")}


def _team_a(api: FakeApiServer) -> None:
    """Three Ingresses in team-a, oldest first (2, 2 and 1 hosts), and one of 3 in team-b."""
    created(api, ingress("team-a", "first", tls_hosts=["a1.example.com", "a2.example.com"]))
    created(api, ingress("team-a", "second", tls_hosts=["a3.example.com", "a4.example.com"]))
    created(api, ingress("team-a", "third", tls_hosts=["a5.example.com"]))
    api.create(ingress("team-b", "web", tls_hosts=["b1.example.com", "b2.example.com",
                                                   "b3.example.com"]))


@pytest.mark.parametrize("flag", ["hosts", "bytes"])
def test_a_namespace_over_its_share_loses_its_newest_objects(cluster: FakeApiServer,
                                                             start: Start, flag: str) -> None:
    """--namespace-share-hosts 4 (or the bytes of those 4 hosts' rules): team-a's third
    Ingress is refused with an Event naming the share, its two older ones and team-b keep
    theirs; once the oldest goes, the third fits."""
    _team_a(cluster)
    four = ["a1.example.com", "a2.example.com", "a3.example.com", "a4.example.com"]
    share = "4" if flag == "hosts" else str(corefile.rules_bytes(four))
    ctl = start(f"--namespace-share-{flag}", share)
    ctl.wait_ready()
    wait_until(lambda: sorted(answers(cluster)) == [*four, "b1.example.com", "b2.example.com",
                                                    "b3.example.com"], what="within shares")
    wait_until(lambda: events(cluster, "team-a"), what="an Event on the newest of team-a")
    (event,) = events(cluster, "team-a")
    assert event["involvedObject"]["name"] == "third"
    words = "(4 hosts)" if flag == "hosts" else f"({share} bytes of rules)"
    assert f"would take namespace team-a past its share {words}" in str(event["message"])
    assert not events(cluster, "team-b")
    assert {r["host"] for r in ctl.records() if r.get("msg") == "host rejected"} == {
        "a5.example.com"}
    cluster.delete("Ingress", "team-a", "first")
    wait_until(lambda: "a5.example.com" in answers(cluster), what="the third once it fits")
    assert "a1.example.com" not in answers(cluster)


def test_a_negative_share_is_refused_in_our_words(cluster: FakeApiServer, start: Start) -> None:
    ctl = start("--namespace-share-hosts", "-1")
    assert ctl.proc.wait(PATIENCE) == 2
    log = ctl.log()
    assert "--namespace-share-hosts / HAIRPIN_NAMESPACE_SHARE_HOSTS: must not be negative" \
        in log and "Traceback" not in log
