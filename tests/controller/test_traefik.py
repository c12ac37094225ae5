"""Traefik IngressRoutes through the controller, against the fake API serving Traefik's own
IngressRoute CRDs (tests/deploy/crds): installed and removed while it runs, hosts redirected
to Traefik's Service, its PROXY setting read from its Deployment's arguments, and every
refusal told on the IngressRoute, never on an Ingress of the same name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hairpin_proxy import corefile
from hairpin_proxy.targets import table
from tests.controller.conftest import NAMESPACE, PROXY_IP, Controller, wait_until
from tests.controller.test_gateway import answers, events, on_slot, proxy_with_selector, slot_ip
from tests.controller.test_targets_e2e import CLIENT, client, get, slot_of_host, sync_table
from tests.fakeapi.crds import TRAEFIK_INGRESSROUTE, TRAEFIK_INGRESSROUTE_LEGACY
from tests.fakeapi.fixtures import deployment, ingress, service
from tests.fakeapi.server import FakeApiServer
from tests.peers.nginx import run_nginx
from tests.relay.helpers import run_relay
from tests.verify.dnsmasq import Dnsmasq

Start = Callable[..., Controller]
HOST = "shop.example.com"
WWW = "www.example.com"
QUICK = ("--api-discovery-interval", "0.3", "--target-settle", "0", "--allow-mass-removal",
         "--traefik-ingressroute", "auto")
PORTS = [{"name": "web", "port": 80, "targetPort": "web", "protocol": "TCP"},
         {"name": "websecure", "port": 443, "targetPort": "websecure", "protocol": "TCP"}]


def traefik(api: FakeApiServer, namespace: str = "traefik", *,
            proxy_protocol: tuple[str, ...] = ("web", "websecure")) -> None:
    """Traefik as its Helm chart installs it: a LoadBalancer Service labelled
    app.kubernetes.io/name=traefik with ports web/websecure, and a Deployment of the same
    name whose arguments turn the PROXY protocol on for ``proxy_protocol``."""
    api.create(service(namespace, "traefik", type="LoadBalancer", ports=PORTS,
                       labels={"app.kubernetes.io/name": "traefik",
                               "app.kubernetes.io/instance": f"traefik-{namespace}"},
                       lb_ingress=[{"ip": "203.0.113.20"}]))
    obj = deployment(namespace, "traefik")
    obj["spec"]["template"]["spec"]["containers"][0]["args"] = [
        "--entryPoints.web.address=:8000/tcp", "--entryPoints.websecure.address=:8443/tcp",
        *(f"--entryPoints.{ep}.proxyProtocol.trustedIPs=10.42.0.0/16"
          for ep in proxy_protocol)]
    api.create(obj)


def ingressroute(namespace: str, name: str, match: str, *, group: str = "traefik.io",
                 tls: bool = True, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"entryPoints": ["websecure"], "routes": [
        {"match": match, "kind": "Rule",
         "services": [{"name": "web", "port": 80}]}], **spec}
    if tls:
        body["tls"] = {"secretName": f"{name}-tls"}
    return {"apiVersion": f"{group}/v1alpha1", "kind": "IngressRoute",
            "metadata": {"namespace": namespace, "name": name}, "spec": body}


def test_ingressroutes_of_a_crd_installed_later_reach_traefik(cluster: FakeApiServer,
                                                              start: Start) -> None:
    proxy_with_selector(cluster)
    traefik(cluster)
    # An Ingress with the IngressRoute's namespace and name: the route's Events must not
    # land on it.
    cluster.create(ingress("shop", "web", tls_hosts=["plain.example.com"]))
    ctl = start(*QUICK)
    ctl.wait_ready()
    wait_until(lambda: "plain.example.com" in answers(cluster), what="the Ingress's host")

    cluster.install(TRAEFIK_INGRESSROUTE)
    cluster.create(ingressroute(
        "shop", "web", f"(Host(`{HOST}`) || Host(\"{WWW}\")) && PathPrefix(`/`) "
        "|| HostRegexp(`^[a-z]+\\.example\\.com$`)"))
    wait_until(lambda: on_slot(cluster) and on_slot(cluster, WWW),
               what="both hosts answered with Traefik's slot")
    cm = cluster.get("ConfigMap", NAMESPACE, "hairpin-proxy-targets")
    assert cm is not None
    (entry,) = table.decode(cm["data"]["targets.json"])
    assert (entry.key, entry.proxy) == ("traefik/default", "v2")
    assert entry.upstream == "traefik.traefik.svc.cluster.local"
    assert entry.advertise_address == "203.0.113.20"

    wait_until(lambda: events(cluster, "HostRejected", "shop"), what="the refusal's Event")
    (event,) = events(cluster, "HostRejected", "shop")
    involved = event["involvedObject"]
    assert (involved["apiVersion"], involved["kind"], involved["name"]) == (
        "traefik.io/v1alpha1", "IngressRoute", "web")
    created = cluster.get("IngressRoute", "shop", "web")
    assert created is not None and involved["uid"] == created["metadata"]["uid"]
    assert "HostRegexp" in event["message"] and "regular expression" in event["message"]

    # Traefik no longer expects the header on websecure: one entry point without it is
    # not enough to know, and the hosts are left alone with the reason on the route.
    dep = cluster.get("Deployment", "traefik", "traefik")
    assert dep is not None
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    dep["spec"]["template"]["spec"]["containers"][0]["args"] = [
        a for a in args if not a.startswith("--entryPoints.websecure.proxyProtocol")]
    cluster.update(dep)
    wait_until(lambda: HOST not in answers(cluster), what="host withdrawn (PROXY mixed)")
    wait_until(lambda: events(cluster, "HostNotRedirected", "shop"),
               what="Event: not redirected")
    for e in events(cluster, "HostNotRedirected", "shop"):
        assert e["involvedObject"]["kind"] == "IngressRoute"
        assert "proxyProtocol on web only" in e["message"]
        assert "--target traefik:default=NAMESPACE/SERVICE" in e["message"]
    cluster.update(_with_args(cluster, args))
    wait_until(lambda: on_slot(cluster), what="host back (PROXY on both entry points)")

    # The CRD goes: its hosts go, the Ingress's stay.
    assert cluster.uninstall_crd("traefik.io", "ingressroutes")
    wait_until(lambda: HOST not in answers(cluster) and WWW not in answers(cluster),
               what="IngressRoute hosts withdrawn with their CRD")
    assert answers(cluster)["plain.example.com"] == corefile.Answers.of([PROXY_IP])
    # No Event of the route's ever went to the Ingress.
    assert all(e["involvedObject"]["kind"] == "IngressRoute"
               for e in cluster.list("Event", "shop")
               if e.get("reason") in ("HostRejected", "HostNotRedirected"))
    assert ctl.ready()


def _with_args(api: FakeApiServer, args: list[str]) -> dict[str, Any]:
    dep = api.get("Deployment", "traefik", "traefik")
    assert dep is not None
    dep["spec"]["template"]["spec"]["containers"][0]["args"] = args
    return dep


def test_the_legacy_group_is_read_only_where_traefik_io_is_not_served(
        cluster: FakeApiServer, start: Start) -> None:
    proxy_with_selector(cluster)
    traefik(cluster)
    cluster.install(TRAEFIK_INGRESSROUTE_LEGACY)
    cluster.create(ingressroute("shop", "old", f"Host(`{HOST}`, `{WWW}`)",
                                group="traefik.containo.us"))
    ctl = start(*QUICK)
    ctl.wait_ready()
    wait_until(lambda: on_slot(cluster) and on_slot(cluster, WWW),
               what="v2 syntax: both hosts of one Host()")
    # Traefik 2.10 and later read traefik.io only: once it is served, the old group's
    # objects no longer route anything.
    cluster.install(TRAEFIK_INGRESSROUTE)
    wait_until(lambda: HOST not in answers(cluster), what="old group's host withdrawn")
    cluster.create(ingressroute("shop", "new", f"Host(`{HOST}`)"))
    wait_until(lambda: on_slot(cluster), what="the traefik.io route's host")
    assert WWW not in answers(cluster)


def test_traefik_unreadable_needs_the_map(cluster: FakeApiServer, start: Start) -> None:
    """The Deployment may not be read (the opt-in RBAC not applied): Traefik's PROXY setting is
    unknown, the route's hosts are left alone and its Event names the flag; the map settles
    it."""
    proxy_with_selector(cluster)
    traefik(cluster)
    cluster.install(TRAEFIK_INGRESSROUTE)
    cluster.create(ingressroute("shop", "web", f"Host(`{HOST}`)"))
    cluster.fail_requests(10_000, status=403, path_re=r"/deployments")
    ctl = start(*QUICK)
    ctl.wait_ready()
    wait_until(lambda: events(cluster, "HostNotRedirected", "shop"), what="Event on the route")
    (event,) = events(cluster, "HostNotRedirected", "shop")
    assert event["involvedObject"]["kind"] == "IngressRoute"
    assert "may not read Traefik's Deployment traefik/traefik" in event["message"]
    assert "--target traefik:default=NAMESPACE/SERVICE:v1|v2|none" in event["message"]
    assert HOST not in answers(cluster)
    ctl.stop()
    mapped = start(*QUICK, "--target", "traefik:default=traefik/traefik:v1")
    mapped.wait_ready()
    wait_until(lambda: on_slot(cluster), what="the map settles it")
    cm = cluster.get("ConfigMap", NAMESPACE, "hairpin-proxy-targets")
    assert cm is not None
    (entry,) = table.decode(cm["data"]["targets.json"])
    assert (entry.key, entry.proxy) == ("traefik/default", "v1")


def test_k3s_traefik_is_the_proxys_own_target(cluster: FakeApiServer, start: Start) -> None:
    """k3s: the proxy's --target-server is kube-system/traefik. IngressRoute hosts take the
    main proxy Service at once, with no slot, even where Traefik's arguments cannot be
    read (the main listeners already send what Traefik was set up for)."""
    proxy_with_selector(cluster)
    traefik(cluster, "kube-system", proxy_protocol=())
    cluster.install(TRAEFIK_INGRESSROUTE)
    cluster.create(ingressroute("shop", "web", f"Host(`{HOST}`)"))
    cluster.fail_requests(10_000, status=403, path_re=r"/deployments")
    ctl = start(*QUICK, "--target-server", "traefik.kube-system.svc.cluster.local")
    ctl.wait_ready()
    wait_until(lambda: answers(cluster).get(HOST) == corefile.Answers.of([PROXY_IP]),
               what="the IngressRoute's host on the main proxy Service")
    assert slot_ip(cluster) is None


def test_events_follow_their_own_object_in_either_order(cluster: FakeApiServer,
                                                        start: Start) -> None:
    """An IngressRoute and an Ingress share namespace and name; each one's refusals are told
    on it, whichever was created first, and an unreadable rule or a TCP matcher is told as
    such."""
    traefik(cluster)
    cluster.install(TRAEFIK_INGRESSROUTE)
    cluster.create(ingressroute("shop", "web", "HostSNI(`db.example.com`)"))
    bad = ingressroute("shop", "web", "Host('a.example.com')")
    bad["spec"]["routes"].append({"match": "Host(`ok.example.com`)", "kind": "Rule"})
    cluster.create({**bad, "metadata": {"namespace": "shop", "name": "bad"}})
    ctl = start(*QUICK)
    ctl.wait_ready()
    wait_until(lambda: len(events(cluster, "HostRejected", "shop")) == 2,
               what="the IngressRoutes' Events")
    by_name = {e["involvedObject"]["name"]: e for e in events(cluster, "HostRejected", "shop")}
    assert {e["involvedObject"]["kind"] for e in by_name.values()} == {"IngressRoute"}
    assert "TCP router matcher" in by_name["web"]["message"]
    assert "cannot be read" in by_name["bad"]["message"]
    wait_until(lambda: "ok.example.com" in answers(cluster), what="the readable route's host")
    # The Ingress of the same name comes second, with a name the policy refuses.
    cluster.create(ingress("shop", "web", tls_hosts=["localhost"]))
    wait_until(lambda: len(events(cluster, "HostRejected", "shop")) == 3,
               what="the Ingress's Event")
    for e in events(cluster, "HostRejected", "shop"):
        kind, name = e["involvedObject"]["kind"], e["involvedObject"]["name"]
        if "localhost" in e["message"]:
            assert (kind, name) == ("Ingress", "web")
        else:
            assert kind == "IngressRoute"


def test_ingressroute_hosts_reach_traefik_end_to_end(cluster: FakeApiServer, start: Start,
                                                     tmp_path: Path) -> None:
    """Real parts (tests/controller/test_targets_e2e.py has the set-up's why): a real nginx
    expecting the PROXY protocol stands for Traefik, the real relay serves the slot from the
    targets table, a real dnsmasq resolves Traefik's Service name. Its Service's port numbers
    are nginx's own (the relay dials them on loopback), so they carry the names discovery
    takes for a port that is not 80/443; their targetPorts are Traefik's entry points."""
    lb = "203.0.113.21"
    hosts = ("a.example.test", "b.example.test")
    with run_nginx(tmp_path / "traefik") as plane:
        cluster.create(service("traefik", "traefik", type="LoadBalancer",
                               labels={"app.kubernetes.io/name": "traefik"},
                               lb_ingress=[{"ip": lb}],
                               ports=[{"name": "http", "port": plane.port, "targetPort": "web",
                                       "protocol": "TCP"},
                                      {"name": "https", "port": plane.tls_port,
                                       "targetPort": "websecure", "protocol": "TCP"}]))
        obj = deployment("traefik", "traefik")
        obj["spec"]["template"]["spec"]["containers"][0]["args"] = [
            f"--entryPoints.{ep}.proxyProtocol.trustedIPs=127.0.0.0/8"
            for ep in ("web", "websecure")]
        cluster.create(obj)
        cluster.install(TRAEFIK_INGRESSROUTE)
        cluster.create(ingressroute("shop", "web", " || ".join(f"Host(`{h}`)" for h in hosts)))
        dns = Dnsmasq(tmp_path, hosts={"traefik.traefik.svc.cluster.local": ["127.0.0.1"]})
        dns.start()
        try:
            ctl = start(*QUICK)
            ctl.wait_ready()
            wait_until(lambda: all(slot_of_host(cluster, h) for h in hosts),
                       what="the IngressRoute's hosts on Traefik's slot")
            path = tmp_path / "targets.json"
            (entry,) = sync_table(cluster, path)
            assert (entry.key, entry.proxy) == ("traefik/default", "v2")
            with run_relay(tmp_path, ["127.0.0.1:{port}=127.0.0.1:9"], "--targets-file",
                           str(path), "--targets-poll", "0.1", "--targets-address",
                           "127.0.0.1", "--dns-server", dns.server) as relay:
                wait_until(lambda: relay.metric("hairpin_proxy_targets_table_slots") == 1,
                           what="the relay serves Traefik's slot")
                for host in hosts:
                    slot = slot_of_host(cluster, host)
                    assert slot is not None
                    with client(slot) as sock:
                        view = get(sock, host)
                    # Traefik's stand-in answered and saw the real client and the load
                    # balancer's address, in the PROXY header it expects.
                    assert view["server_port"] == str(plane.port)
                    assert view["proxy_protocol_addr"] == CLIENT
                    assert view["proxy_protocol_server_addr"] == lb
        finally:
            dns.stop()
