"""Gateway API routes through the controller, against the fake API: CRDs that appear while it
runs, route status, listener hostnames, GatewayClasses, Gateways that go away, conflicts with
Ingresses, data planes that expect no PROXY header, and the settle delay of a new target."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from hairpin_proxy import corefile
from hairpin_proxy.corefile.written import written
from hairpin_proxy.published import parse_entries
from hairpin_proxy.targets import table
from tests.controller.conftest import (
    NAMESPACE,
    PROXY_IP,
    PUBLISH,
    Controller,
    corefile_text,
    wait_until,
)
from tests.fakeapi.crds import ENVOY_CLIENT_TRAFFIC_POLICY, LISTENER_SET
from tests.fakeapi.fixtures import gateway, gateway_class, ingress, route, service
from tests.fakeapi.server import FakeApiServer

Start = Callable[..., Controller]
ENVOY = "gateway.envoyproxy.io/gatewayclass-controller"
HOST = "shop.example.com"
DATA_PLANE_LB = "203.0.113.10"
PROXY_SELECTOR = {"app.kubernetes.io/name": "hairpin-proxy",
                  "app.kubernetes.io/component": "proxy"}
# --allow-mass-removal: one host going is "all hosts" to the removal guard.
QUICK = ("--api-discovery-interval", "0.3", "--target-settle", "0", "--allow-mass-removal")


def accepted(obj: dict[str, Any], gw: str = "public", status: str = "True") -> dict[str, Any]:
    """``obj`` (a route) with the status Envoy Gateway writes for its parent ``gw`` (in
    namespace web)."""
    out = copy.deepcopy(obj)
    out["status"] = {"parents": [{
        "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gw,
                      "namespace": "web"},
        "controllerName": ENVOY,
        "conditions": [{"type": "Accepted", "status": status, "reason": "Accepted",
                        "message": "", "observedGeneration": 1,
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]}
    return out


def envoy_gateway(api: FakeApiServer, *, proxy_protocol: bool = True,
                  hostname: str = "*.example.com") -> None:
    """Envoy Gateway with Gateway web/public, its data-plane Service, and (by default) a
    ClientTrafficPolicy that makes it expect the PROXY protocol."""
    api.install_gateway_api("1.4", "standard")
    api.install(ENVOY_CLIENT_TRAFFIC_POLICY)
    api.create(gateway_class("eg", ENVOY))
    api.create(gateway("web", "public", "eg", listeners=[
        {"name": "http", "port": 80, "protocol": "HTTP", "hostname": hostname,
         "allowedRoutes": {"namespaces": {"from": "All"}}}]))
    api.create(service("envoy-gateway-system", "envoy-web-public-1a2b3c4d", type="LoadBalancer",
                       labels={"gateway.envoyproxy.io/owning-gateway-name": "public",
                               "gateway.envoyproxy.io/owning-gateway-namespace": "web"},
                       lb_ingress=[{"ip": DATA_PLANE_LB}]))
    if proxy_protocol:
        api.create({"apiVersion": "gateway.envoyproxy.io/v1alpha1",
                    "kind": "ClientTrafficPolicy",
                    "metadata": {"namespace": "web", "name": "proxy-protocol"},
                    "spec": {"targetRefs": [{"group": "gateway.networking.k8s.io",
                                             "kind": "Gateway", "name": "public"}],
                             "proxyProtocol": {}}})


def answers(api: FakeApiServer) -> dict[str, corefile.Answers]:
    return corefile.managed_groups(corefile_text(api))


def slot_ip(api: FakeApiServer, slot: int = 1) -> str | None:
    svc = api.get("Service", NAMESPACE, f"hairpin-proxy-t{slot}")
    return None if svc is None else str(svc["spec"]["clusterIPs"][0])


def on_slot(api: FakeApiServer, host: str = HOST) -> bool:
    ip = slot_ip(api)
    got = answers(api).get(host)
    return ip is not None and got is not None and got.ipv4 == (ip,)


def published(api: FakeApiServer) -> dict[str, str]:
    cm = api.get("ConfigMap", NAMESPACE, "hairpin-proxy-hosts")
    return dict((cm or {}).get("data") or {})


def events(api: FakeApiServer, reason: str, namespace: str) -> list[dict[str, Any]]:
    return [e for e in api.list("Event", namespace) if e.get("reason") == reason]


def proxy_with_selector(api: FakeApiServer) -> None:
    svc = api.get("Service", NAMESPACE, "hairpin-proxy")
    assert svc is not None
    svc["spec"]["selector"] = dict(PROXY_SELECTOR)
    api.update(svc)


def test_routes_of_crds_installed_later_reach_their_gateway_target(
        cluster: FakeApiServer, start: Start) -> None:
    proxy_with_selector(cluster)
    ctl = start(*QUICK, *PUBLISH)
    ctl.wait_ready()
    assert answers(cluster) == {}
    envoy_gateway(cluster)
    cluster.create(accepted(route("HTTPRoute", "shop", "web", hostnames=[HOST],
                                  parent="public", parent_namespace="web")))
    wait_until(lambda: on_slot(cluster), what="the host answered with its target's Service")

    svc = cluster.get("Service", NAMESPACE, "hairpin-proxy-t1")
    assert svc is not None
    assert svc["spec"]["selector"] == PROXY_SELECTOR
    assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(80, 20002),
                                                                            (443, 20003)]
    assert svc["metadata"]["annotations"]["hairpin-proxy.io/target"] == "gateway/web/public"
    cm = cluster.get("ConfigMap", NAMESPACE, "hairpin-proxy-targets")
    assert cm is not None
    (entry,) = table.decode(cm["data"]["targets.json"])
    assert (entry.key, entry.slot, entry.listen, entry.proxy) == (
        "gateway/web/public", 1, (20002, 20003), "v2")
    assert entry.upstream == ("envoy-web-public-1a2b3c4d.envoy-gateway-system.svc."
                              "cluster.local")
    assert (entry.ports, entry.advertise_ports) == ((80, 443), (80, 443))
    assert entry.advertise_address == DATA_PLANE_LB
    assert svc["metadata"]["ownerReferences"][0]["uid"] == cm["metadata"]["uid"]
    # The proxy's own Service keeps answering for nothing else: no Ingress here.
    assert PROXY_IP not in {ip for a in answers(cluster).values() for ip in a.ipv4}
    # The node agents get the host with its own target's address; agents of earlier versions,
    # which know one address for all, do not get it at all.
    wait_until(lambda: parse_entries(published(cluster).get("entries")) == {
        HOST: (slot_ip(cluster),)}, what="published entries")
    assert published(cluster)["hosts"] == ""

    # The route is no longer accepted: the host goes.
    cluster.update(accepted(cluster.get("HTTPRoute", "shop", "web") or {}, status="False"))
    wait_until(lambda: HOST not in answers(cluster), what="host withdrawn (Accepted=False)")
    cluster.update(accepted(cluster.get("HTTPRoute", "shop", "web") or {}))
    wait_until(lambda: on_slot(cluster), what="host back (Accepted=True)")

    # The listener no longer covers the route's hostname.
    gw = cluster.get("Gateway", "web", "public")
    assert gw is not None
    gw["spec"]["listeners"][0]["hostname"] = "*.example.org"
    cluster.update(gw)
    wait_until(lambda: HOST not in answers(cluster), what="host withdrawn (listener hostname)")
    gw["spec"]["listeners"][0]["hostname"] = "*.example.com"
    cluster.update(gw)
    wait_until(lambda: on_slot(cluster), what="host back (listener hostname)")

    # The GatewayClass now belongs to another implementation: its routes' status no longer
    # counts (the controller that accepted them does not run the class).
    gc = cluster.get("GatewayClass", None, "eg")
    assert gc is not None
    gc["spec"]["controllerName"] = "example.net/other-controller"
    cluster.update(gc)
    wait_until(lambda: HOST not in answers(cluster), what="host withdrawn (GatewayClass)")
    gc["spec"]["controllerName"] = ENVOY
    cluster.update(gc)
    wait_until(lambda: on_slot(cluster), what="host back (GatewayClass)")

    # The Gateway is deleted while its route remains: the host and the slot's Service go.
    cluster.delete("Gateway", "web", "public")
    wait_until(lambda: HOST not in answers(cluster), what="host withdrawn (Gateway deleted)")
    wait_until(lambda: cluster.get("Service", NAMESPACE, "hairpin-proxy-t1") is None,
               what="the slot's Service deleted")

    # The CRDs are removed altogether: the controller goes on as before.
    cluster.uninstall_gateway_api()
    cluster.create(ingress("team", "site", tls_hosts=["site.example.com"]))
    wait_until(lambda: answers(cluster).get("site.example.com") == corefile.Answers.of(
        [PROXY_IP]), what="Ingress hosts still written without the Gateway API")
    assert ctl.ready()


def test_oldest_claim_wins_and_no_proxy_data_planes_are_left_alone(
        cluster: FakeApiServer, start: Start) -> None:
    proxy_with_selector(cluster)
    # The Ingress is older than the route (creationTimestamp has whole seconds): it keeps the
    # host on the default target.
    cluster.create(ingress("team", "site", tls_hosts=[HOST]))
    cluster.next_second()
    envoy_gateway(cluster)
    cluster.create(accepted(route("HTTPRoute", "shop", "web", hostnames=[HOST],
                                  parent="public", parent_namespace="web")))
    ctl = start(*QUICK)
    ctl.wait_ready()
    wait_until(lambda: answers(cluster).get(HOST) == corefile.Answers.of([PROXY_IP]),
               what="the Ingress's target wins the host")
    wait_until(lambda: events(cluster, "HostClaimedElsewhere", "shop"),
               what="Event on the losing route")
    (event,) = events(cluster, "HostClaimedElsewhere", "shop")
    assert event["involvedObject"]["kind"] == "HTTPRoute"
    assert "Ingress team/site" in event["message"]
    # The losing Gateway's target is already served (its slot and Service exist), so the host
    # moves without a gap once the Ingress goes.
    wait_until(lambda: slot_ip(cluster) is not None, what="the loser's slot prepared")
    cluster.delete("Ingress", "team", "site")
    wait_until(lambda: on_slot(cluster), what="the route's target takes the host")

    # The ClientTrafficPolicy goes: the Gateway expects no PROXY header, its hosts do not
    # hairpin-break and are given back to their public answers.
    cluster.delete("ClientTrafficPolicy", "web", "proxy-protocol")
    wait_until(lambda: HOST not in answers(cluster), what="host of a no-PROXY target withdrawn")
    wait_until(lambda: events(cluster, "HostNotRedirected", "shop"),
               what="Event: not redirected")
    (event,) = events(cluster, "HostNotRedirected", "shop")
    assert event["type"] == "Normal" and "does not expect the PROXY protocol" in event["message"]
    assert ctl.metric('hairpin_controller_hosts_not_redirected{reason="no-proxy"}') == 1
    assert ctl.metric('hairpin_controller_targets{state="no-proxy"}') == 1


def test_routes_listed_before_the_ingresses_are_read_ahead_once(cluster: FakeApiServer,
                                                               start: Start) -> None:
    """The routes' list ends while the Ingresses' goes on: they are read then, ahead of the
    first pass, which reads again only the one that changed since; the first write holds
    them all."""
    proxy_with_selector(cluster)
    envoy_gateway(cluster)
    hosts = [f"r{i}.example.com" for i in range(3)]
    for i, host in enumerate(hosts):
        cluster.create(accepted(route("HTTPRoute", "web", f"r{i}", hostnames=[host],
                                      parent="public", parent_namespace="web")))
    cluster.create(ingress("team", "site", tls_hosts=["site.example.org"]))
    listing = cluster.hold_requests("GET", r"/ingresses\?(?!.*watch=)")
    ctl = start(*QUICK)
    evaluations = "hairpin_controller_route_evaluations_total"
    wait_until(lambda: ctl.metric(evaluations) == 3, what="the routes read ahead")
    assert cluster.count("PUT", r"/configmaps/coredns") == 0
    changed = cluster.get("HTTPRoute", "web", "r0")
    assert changed is not None
    changed["spec"]["hostnames"] = ["moved.example.com"]
    cluster.update(changed)
    listing()
    ctl.wait_ready()
    wanted = {"moved.example.com", *hosts[1:]}
    wait_until(lambda: wanted <= set(answers(cluster)), what="the routes' hosts written")
    assert "site.example.org" in answers(cluster)
    # The changed route read again, by the first pass or the one after; no other.
    assert ctl.metric(evaluations) == 4


def test_a_new_target_waits_for_the_proxies_to_mount_it(cluster: FakeApiServer,
                                                       start: Start) -> None:
    proxy_with_selector(cluster)
    envoy_gateway(cluster)
    ctl = start("--api-discovery-interval", "0.3", "--target-settle", "3", "--allow-mass-removal")
    ctl.wait_ready()
    cluster.create(accepted(route("HTTPRoute", "shop", "web", hostnames=[HOST],
                                  parent="public", parent_namespace="web")))
    wait_until(lambda: slot_ip(cluster) is not None, what="slot published")
    wait_until(lambda: ctl.metric('hairpin_controller_hosts_not_redirected{reason="settling"}')
               == 1, what="host settling")
    assert HOST not in answers(cluster)
    wait_until(lambda: on_slot(cluster), timeout=15, what="host written after the settle time")
    cm = cluster.get("ConfigMap", NAMESPACE, "hairpin-proxy-targets")
    assert cm is not None and "gateway/web/public" in cm["data"]["published.json"]


def test_unknown_implementation_needs_the_map(cluster: FakeApiServer, start: Start) -> None:
    proxy_with_selector(cluster)
    cluster.install_gateway_api("1.4", "standard")
    cluster.create(gateway_class("kg", "kgateway.dev/kgateway"))
    cluster.create(gateway("web", "public", "kg", listeners=[
        {"name": "http", "port": 80, "protocol": "HTTP",
         "allowedRoutes": {"namespaces": {"from": "All"}}}]))
    cluster.create(service("web", "public", labels={
        "gateway.networking.k8s.io/gateway-name": "public"}))
    obj = accepted(route("HTTPRoute", "shop", "web", hostnames=[HOST], parent="public",
                         parent_namespace="web"))
    obj["status"]["parents"][0]["controllerName"] = "kgateway.dev/kgateway"
    cluster.create(obj)
    ctl = start(*QUICK)
    ctl.wait_ready()
    wait_until(lambda: events(cluster, "HostNotRedirected", "shop"),
               what="Event naming the flag")
    (event,) = events(cluster, "HostNotRedirected", "shop")
    assert event["type"] == "Warning"
    assert "--target gateway:web/public=NAMESPACE/SERVICE" in event["message"]
    assert HOST not in answers(cluster)
    ctl.stop()
    mapped = start(*QUICK, "--target", "gateway:web/public=web/public:v1")
    mapped.wait_ready()
    wait_until(lambda: on_slot(cluster), what="the map settles it")
    cm = cluster.get("ConfigMap", NAMESPACE, "hairpin-proxy-targets")
    assert cm is not None
    (entry,) = table.decode(cm["data"]["targets.json"])
    assert entry.proxy == "v1" and entry.upstream == "public.web.svc.cluster.local"


def test_a_policy_resource_we_may_not_read_makes_the_target_unknown(
        cluster: FakeApiServer, start: Start) -> None:
    """RBAC trimmed by hand: the ClientTrafficPolicies are served but refused. The Ingresses'
    rules are written all the same, and the Envoy Gateway's PROXY expectation is unknown (not
    "none"): its host is left alone, with the reason."""
    proxy_with_selector(cluster)
    envoy_gateway(cluster)
    cluster.create(accepted(route("HTTPRoute", "shop", "web", hostnames=[HOST],
                                  parent="public", parent_namespace="web")))
    cluster.create(ingress("team", "site", tls_hosts=["site.example.com"]))
    cluster.fail_requests(10_000, status=403, path_re=r"/clienttrafficpolicies")
    ctl = start(*QUICK)
    ctl.wait_ready()
    wait_until(lambda: "site.example.com" in answers(cluster), what="Ingress rules written")
    wait_until(lambda: events(cluster, "HostNotRedirected", "shop"), what="Event on the route")
    (event,) = events(cluster, "HostNotRedirected", "shop")
    assert "clienttrafficpolicies" in event["message"] and "cannot be read" in event["message"]
    assert HOST not in answers(cluster)
    assert ctl.metric('hairpin_controller_hosts_not_redirected{reason="proxy-unknown"}') == 1


def test_tls_routes_in_the_version_the_cluster_serves(cluster: FakeApiServer,
                                                      start: Start) -> None:
    """Gateway API 1.4's experimental channel serves TLSRoute as v1alpha3 (and v1alpha2): the
    preferred version is watched, and a TLSRoute on a TLS listener gets its host."""
    proxy_with_selector(cluster)
    envoy_gateway(cluster)
    cluster.install_gateway_api("1.4", "experimental")
    gw = cluster.get("Gateway", "web", "public")
    assert gw is not None
    gw["spec"]["listeners"].append({"name": "tls", "port": 443, "protocol": "TLS",
                                    "hostname": "*.example.com", "tls": {"mode": "Passthrough"},
                                    "allowedRoutes": {"namespaces": {"from": "All"}}})
    cluster.update(gw)
    tls = accepted(route("TLSRoute", "shop", "db", hostnames=["db.example.com"],
                         parent="public", parent_namespace="web",
                         api_version="gateway.networking.k8s.io/v1alpha3"))
    cluster.create(tls)
    ctl = start(*QUICK)
    ctl.wait_ready()
    wait_until(lambda: on_slot(cluster, "db.example.com"), what="the TLSRoute's host")
    assert any(r.get("msg") == "watching a resource the API serves"
               and r.get("resource") == "tlsroutes.gateway.networking.k8s.io"
               and r.get("version") == "gateway.networking.k8s.io/v1alpha3"
               for r in ctl.records())


def coredns_answer(text: str, name: str) -> tuple[str, ...] | None:
    """The A answer CoreDNS gives ``name`` from our stanzas of the root block, in file order
    (the first stanza whose regex matches answers); None when it goes on upstream."""
    for d in corefile.parse(text).root_blocks(53)[0].directives:
        if d.name != "template" or d.args[1] != "A":
            continue
        inner = [i for b in d.blocks for i in b.directives]
        if any(re.search(rx, name.lower() + ".") for i in inner if i.name == "match"
               for rx in i.args):
            return tuple(rr.split()[-1].rstrip('"') for i in inner if i.name == "answer"
                         for rr in i.args)
    return None


def test_a_gateway_wildcard_redirects_every_depth_and_conflicts_as_written(
        cluster: FakeApiServer, start: Start) -> None:
    proxy_with_selector(cluster)
    # An older Ingress holds "*.example.com" (one label, the Ingress meaning): the route's
    # "*.example.com" listener is the same name and loses it, told as the route wrote it.
    cluster.create(ingress("team", "wild", tls_hosts=["*.example.com"]))
    cluster.next_second()
    envoy_gateway(cluster)
    cluster.create(accepted(route("HTTPRoute", "shop", "web", parent="public",
                                  parent_namespace="web")))
    cluster.create(ingress("team", "deep", tls_hosts=["deep.x.example.com"]))
    ctl = start(*QUICK, *PUBLISH)
    ctl.wait_ready()
    wait_until(lambda: answers(cluster).get("*.example.com") == corefile.Answers.of(
        [PROXY_IP]), what="the older Ingress keeps the wildcard")
    assert "**.example.com" not in answers(cluster)
    wait_until(lambda: events(cluster, "HostClaimedElsewhere", "shop"),
               what="Event on the losing route")
    (event,) = events(cluster, "HostClaimedElsewhere", "shop")
    assert event["involvedObject"]["kind"] == "HTTPRoute"
    assert "host '*.example.com'" in event["message"] and "**" not in event["message"]
    text = corefile_text(cluster)
    assert coredns_answer(text, "a.example.com") == (PROXY_IP,)
    assert coredns_answer(text, "a.b.example.com") is None  # the Ingress wildcard: one label

    # The Ingress goes: the Gateway's wildcard takes every depth under example.com, to its
    # own target; the exact Ingress host under it keeps its own answer, and no "_" label at
    # any depth is caught.
    cluster.delete("Ingress", "team", "wild")
    wait_until(lambda: on_slot(cluster, "**.example.com"), what="the any-depth wildcard")
    ip = slot_ip(cluster)
    text = corefile_text(cluster)
    for name in ("a.example.com", "a.b.example.com", "x.y.z.example.com",
                 "other.x.example.com"):
        assert coredns_answer(text, name) == (ip,), name
    assert coredns_answer(text, "deep.x.example.com") == (PROXY_IP,)
    for name in ("example.com", "_acme-challenge.example.com",
                 "_acme-challenge.x.example.com", "a._tcp.example.com"):
        assert coredns_answer(text, name) is None, name
    # The rules are measured as written, the any-depth form's own regex included: exactly
    # the bytes of each answer set's stanza pair.
    groups: dict[corefile.Answers, list[str]] = {}
    for host, got in answers(cluster).items():
        groups.setdefault(got, []).append(host)
    wait_until(lambda: ctl.metric("hairpin_controller_rules_bytes")
               == written({a: sorted(hs) for a, hs in groups.items()}).size,
               what="rules bytes measured")
    # The node agents cannot hold a wildcard: published with its address, never as a line
    # of the hosts file.
    assert "**.example.com" not in published(cluster).get("hosts", "")
    assert ctl.ready()


def test_routes_on_a_listener_set_reach_its_gateway_while_the_crd_is_served(
        cluster: FakeApiServer, start: Start) -> None:
    proxy_with_selector(cluster)
    ctl = start(*QUICK)
    ctl.wait_ready()
    envoy_gateway(cluster)  # Gateway API 1.4: no ListenerSet yet
    gw = cluster.get("Gateway", "web", "public")
    assert gw is not None
    gw["spec"]["allowedListeners"] = {"namespaces": {"from": "All"}}
    cluster.update(gw)
    # An Ingress and an HTTPRoute of the same namespace and name: the route's Events must
    # not land on the Ingress.
    cluster.create(ingress("shop", "web", tls_hosts=["site.example.com"]))
    parent = {"group": "gateway.networking.k8s.io", "kind": "ListenerSet", "name": "extra",
              "namespace": "shop"}
    obj = route("HTTPRoute", "shop", "web", hostnames=["ls.example.com", "web.cluster.local"])
    obj["spec"]["parentRefs"] = [parent]
    obj["status"] = {"parents": [{
        "parentRef": parent, "controllerName": ENVOY,
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                        "message": "", "observedGeneration": 1,
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]}
    cluster.create(obj)
    wait_until(lambda: "site.example.com" in answers(cluster), what="the Ingress's host")
    assert "ls.example.com" not in answers(cluster)

    # The ListenerSet CRD (the upstream definition) is installed at run time, and the
    # ListenerSet the route names is accepted on the Gateway.
    cluster.install(LISTENER_SET)
    cluster.create({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
        "metadata": {"namespace": "shop", "name": "extra"},
        "spec": {"parentRef": {"name": "public", "namespace": "web"},
                 "listeners": [{"name": "shop", "port": 80, "protocol": "HTTP",
                                "allowedRoutes": {"namespaces": {"from": "Same"}}}]},
        "status": {"conditions": [{"type": "Accepted", "status": "True",
                                   "reason": "Accepted", "message": "",
                                   "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    wait_until(lambda: on_slot(cluster, "ls.example.com"),
               what="the ListenerSet's route host on its Gateway's target")
    wait_until(lambda: events(cluster, "HostRejected", "shop"), what="Event on the route")
    rejected = events(cluster, "HostRejected", "shop")
    assert {e["involvedObject"]["kind"] for e in rejected} == {"HTTPRoute"}
    assert all(e["involvedObject"]["apiVersion"] == "gateway.networking.k8s.io/v1"
               for e in rejected)
    assert any("web.cluster.local" in e["message"] for e in rejected)

    # The Gateway stops allowing ListenerSets: the host goes; allowed again, it is back.
    gw = cluster.get("Gateway", "web", "public") or {}
    gw["spec"]["allowedListeners"] = {"namespaces": {"from": "Same"}}
    cluster.update(gw)
    wait_until(lambda: "ls.example.com" not in answers(cluster),
               what="host withdrawn (ListenerSet no longer allowed)")
    gw["spec"]["allowedListeners"] = {"namespaces": {"from": "All"}}
    cluster.update(gw)
    wait_until(lambda: on_slot(cluster, "ls.example.com"), what="host back")

    # The CRD is removed: its ListenerSets go, and with them the route's host.
    cluster.uninstall_crd("gateway.networking.k8s.io", "listenersets")
    wait_until(lambda: "ls.example.com" not in answers(cluster),
               what="host withdrawn (ListenerSet CRD removed)")
    assert "site.example.com" in answers(cluster)
    assert ctl.ready()
