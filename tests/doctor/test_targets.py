"""The doctor tells, per host, which data plane (target) it goes to and whether it is
redirected, with the controller's own plan, against the fake API server with and without the
Gateway API (and against real nginx for the probes).

Loopback only, as in test_cli: 127.0.0.1 is the load balancer, 127.0.0.2 the address of the
proxy Service the host should be answered with.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hairpin_proxy import corefile
from hairpin_proxy.doctor.cluster import ClusterView, gather, policy_for
from hairpin_proxy.kube.client import KubeClient
from hairpin_proxy.kube.config import load as load_kubeconfig
from hairpin_proxy.settings import DoctorSettings
from hairpin_proxy.targets.model import Target
from hairpin_proxy.targets.table import encode, entry_for
from tests.doctor.conftest import LB_IP, PROXY_IP
from tests.doctor.test_cli import NO_VERIFY, NS, doctor, one, ports
from tests.doctor.test_cli import setup_cluster as base_cluster
from tests.fakeapi.crds import ENVOY_CLIENT_TRAFFIC_POLICY
from tests.fakeapi.fixtures import (
    configmap,
    deployment,
    gateway,
    gateway_class,
    ingress,
    ingress_class,
    route,
    service,
)
from tests.fakeapi.server import FakeApiServer
from tests.peers.nginx import Nginx
from tests.relay.helpers import Relay

HOST = "shop.example.test"
ENVOY = "gateway.envoyproxy.io/gatewayclass-controller"
GATEWAY_KEY = "gateway/web/public"
DATA_PLANE = "envoy-web-public-1a2b3c"
OWNER_LABELS = {"gateway.envoyproxy.io/owning-gateway-name": "public",
                "gateway.envoyproxy.io/owning-gateway-namespace": "web"}
# The main proxy Service's address when the host's own target Service is another one.
MAIN_PROXY_IP = "127.0.0.5"


def accepted(obj: dict[str, Any], parent: str = "public",
             controller: str = ENVOY) -> dict[str, Any]:
    """A route as its Gateway's controller leaves it: accepted for ``parent``."""
    obj["status"] = {"parents": [{
        "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": parent},
        "controllerName": controller,
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted"}]}]}
    return obj


def proxy_protocol_policy(namespace: str = "web", gateway_name: str = "public"
                          ) -> dict[str, Any]:
    return {"apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "ClientTrafficPolicy",
            "metadata": {"namespace": namespace, "name": "proxy-protocol"},
            "spec": {"targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                     "name": gateway_name}],
                     "proxyProtocol": {}}}


def gateway_cluster(api: FakeApiServer, *, controller: str = ENVOY, policy: bool = True,
                    data_plane_labels: dict[str, str] | None = None, **kwargs: Any) -> None:
    """The base cluster plus a Gateway web/public of class eg, its data-plane Service, an
    HTTPRoute for HOST on it and (``policy``) the ClientTrafficPolicy that turns PROXY on."""
    base_cluster(api, **kwargs)
    api.install_gateway_api("1.4", "standard")
    api.install(ENVOY_CLIENT_TRAFFIC_POLICY)
    api.create(gateway_class("eg", controller=controller))
    api.create(gateway("web", "public", "eg"))
    api.create(service("envoy-gateway-system" if controller == ENVOY else "web", DATA_PLANE,
                       labels=data_plane_labels or OWNER_LABELS))
    if policy:
        api.create(proxy_protocol_policy())
    api.create(accepted(route("HTTPRoute", "web", "shop", hostnames=[HOST], parent="public"),
                        controller=controller))


def doctor_text(kubeconfig: Path, *args: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAIRPIN_")}
    env.pop("KUBECONFIG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "hairpin_proxy", "doctor", *args, "--kubeconfig",
         str(kubeconfig), "--namespace", NS, "--timeout", "5", *NO_VERIFY],
        capture_output=True, text=True, timeout=120, env=env, check=False)
    return proc.returncode, proc.stdout


# --------------------------------------------------------------------------- no Gateway API


def test_without_the_gateway_api_ingress_hosts_go_to_the_default_target(
        fake_api: FakeApiServer, kubeconfig: Path, pp_nginx: Nginx) -> None:
    base_cluster(fake_api, proxy=True)
    fake_api.create(ingress_class("nginx", default=True))
    fake_api.create(ingress("shop", "web", tls_hosts=[HOST], rule_hosts=[HOST]))
    rc, report, _ = doctor("--resolve", f"{HOST}:{LB_IP}", *ports(pp_nginx),
                           kubeconfig=kubeconfig)
    h = one(report)
    # The verdict is the one it was before targets existed.
    assert rc == 1 and h["host"] == HOST and h["verdict"] == "rule-missing"
    t = h["target"]
    assert (t["key"], t["verdict"], t["redirected"]) == ("default", "redirected", True)
    assert t["slot"] == 0 and t["proxy_service"] == f"{NS}/hairpin-proxy"
    assert t["proxy_addresses"] == [PROXY_IP] and t["origins"] == ["Ingress shop/web"]
    # The default class has no data plane that can be found (its Service carries none of
    # ingress-nginx's labels), so its hosts fall back to the proxy's own target.
    assert t["asked"] == "ingressclass/nginx"
    assert t["message"].startswith("ingressclass/nginx falls back to the proxy's default target")
    cluster = report["cluster"]
    assert cluster["gateway_api"] == "not served"
    assert cluster["target_slots"] == {} and cluster["gateway_notes"] == []
    assert not any("Gateway" in p or "targets" in p for p in cluster["problems"])
    # The routes were never asked for: the group is not served.
    assert fake_api.count("GET", path_re=r"/apis/gateway\.networking\.k8s\.io/") == 0


def test_a_host_a_size_limit_refuses_is_over_limit_with_the_limit_named(
        fake_api: FakeApiServer, kubeconfig: Path, pp_nginx: Nginx) -> None:
    """The controller's Deployment gives a namespace a share of one host: its newer Ingress
    is refused, and the doctor says so, where without the limit it said rule-missing."""
    base_cluster(fake_api, proxy=True)
    fake_api.create(ingress_class("nginx", default=True))
    fake_api.create(ingress("shop", "web", tls_hosts=[HOST]))
    fake_api.next_second()
    other = "blog.example.test"
    fake_api.create(ingress("shop", "blog", tls_hosts=[other]))
    ask = ("--resolve", f"*:{LB_IP}", *ports(pp_nginx))
    rc, report, _ = doctor(HOST, other, *ask, kubeconfig=kubeconfig)
    assert rc == 1 and [h["verdict"] for h in report["hosts"]] == ["rule-missing"] * 2
    controller = deployment(NS, "hairpin-proxy-controller")
    controller["spec"]["template"]["spec"]["containers"] = [
        {"name": "controller", "image": "hairpin-proxy",
         "args": ["controller", "--namespace-share-hosts", "1"]}]
    fake_api.create(controller)
    rc, report, _ = doctor(HOST, other, *ask, kubeconfig=kubeconfig)
    older, newer = report["hosts"]
    why = ("Ingress shop/blog: its 1 host(s) would take namespace shop past its share "
           "(1 hosts); newer objects in it are refused first")
    assert rc == 1 and (older["verdict"], newer["verdict"]) == ("rule-missing", "over-limit")
    assert older["target"]["refused"] is None and newer["target"]["refused"] == why
    assert why in newer["advice"]
    rc, text = doctor_text(kubeconfig, other, *ask)
    assert rc == 1 and f"routed → default, refused by a size limit: {why}" in text


# --------------------------------------------------------------------------- Gateway API


def test_route_on_envoy_gateway_with_proxy_protocol_is_redirected_via_its_target(
        fake_api: FakeApiServer, kubeconfig: Path, relay: Relay) -> None:
    gateway_cluster(fake_api)
    fake_api.create(service(NS, "hairpin-proxy", cluster_ips=[MAIN_PROXY_IP]))
    # The published table gives the Gateway slot 2 (slot 1 is free): the slot is kept.
    fake_api.create(service(NS, "hairpin-proxy-t1", cluster_ips=["127.0.0.6"]))
    fake_api.create(service(NS, "hairpin-proxy-t2", cluster_ips=[PROXY_IP]))
    published = Target(key=GATEWAY_KEY, service=f"envoy-gateway-system/{DATA_PLANE}",
                       upstream=f"{DATA_PLANE}.envoy-gateway-system.svc.cluster.local",
                       http_port=80, https_port=443, proxy="v2", proxy_source="policy",
                       found_by="labels")
    fake_api.create(configmap(NS, "hairpin-proxy-targets",
                              {"targets.json": encode([entry_for(published, 2)])}))
    p_http, p_tls = relay.ports
    args = ("--resolve", f"{HOST}:{PROXY_IP}", "--port", str(p_http), "--tls-port", str(p_tls))
    rc, report, _ = doctor(*args, kubeconfig=kubeconfig)
    h = one(report)
    # The answer is the Gateway's own proxy Service, which reaches its data plane.
    assert h["dns"]["addresses"] == [{"address": PROXY_IP, "kind": "proxy"}]
    assert rc == 0 and h["verdict"] == "fixed"
    t = h["target"]
    assert (t["key"], t["verdict"]) == (GATEWAY_KEY, "redirected")
    assert t["service"] == f"envoy-gateway-system/{DATA_PLANE}"
    assert "gateway.envoyproxy.io/owning-gateway-name" in t["found_by"]
    assert t["proxy"] == "v2" and "ClientTrafficPolicy web/proxy-protocol" in t["proxy_source"]
    assert (t["slot"], t["proxy_service"], t["published"]) == (2, f"{NS}/hairpin-proxy-t2", True)
    assert t["origins"] == ["HTTPRoute web/shop"] and t["claims_lost"] == []
    cluster = report["cluster"]
    assert cluster["gateway_api"].startswith("served (gatewayclasses v1, gateways v1, "
                                             "httproutes v1")
    assert cluster["target_slots"] == {GATEWAY_KEY: 2}

    rc, text = doctor_text(kubeconfig, *args)
    assert rc == 0
    assert (f"  target   redirected → {GATEWAY_KEY} via Service envoy-gateway-system/"
            f"{DATA_PLANE} (found by labels gateway.envoyproxy.io/owning-gateway-name and "
            "gateway.envoyproxy.io/owning-gateway-namespace), PROXY v2 (from "
            "ClientTrafficPolicy web/proxy-protocol") in text
    assert f"; proxy Service {NS}/hairpin-proxy-t2 (slot 2)\n" in text

    # The main proxy Service is not this host's: an answer with its address is not "proxy".
    rc, report, _ = doctor("--resolve", f"{HOST}:{MAIN_PROXY_IP}", "--port", str(p_http),
                           "--tls-port", "0", kubeconfig=kubeconfig)
    h = one(report)
    assert h["dns"]["addresses"] == [{"address": MAIN_PROXY_IP, "kind": "other"}]
    assert rc == 1 and h["verdict"] != "fixed"


def test_gateway_without_proxy_protocol_is_not_redirected(
        fake_api: FakeApiServer, kubeconfig: Path, plain_nginx: Nginx, pp_nginx: Nginx) -> None:
    gateway_cluster(fake_api, policy=False, proxy=True)
    rc, report, _ = doctor("--resolve", f"{HOST}:{LB_IP}", *ports(plain_nginx),
                           kubeconfig=kubeconfig)
    h = one(report)
    assert rc == 0 and h["verdict"] == "target-no-proxy"
    assert "does not hairpin-break" in h["advice"]
    t = h["target"]
    assert (t["key"], t["verdict"], t["redirected"], t["proxy"]) == (
        GATEWAY_KEY, "target-no-proxy", False, "none")
    assert t["service"] == f"envoy-gateway-system/{DATA_PLANE}" and t["slot"] is None
    assert "no ClientTrafficPolicy for Gateway web/public sets proxyProtocol" in t["message"]
    # The same Gateway answering only with a PROXY header contradicts what was read.
    rc, report, _ = doctor("--resolve", f"{HOST}:{LB_IP}", *ports(pp_nginx),
                           kubeconfig=kubeconfig)
    assert rc == 1 and one(report)["verdict"] == "target-proxy-mismatch"


def test_unknown_implementation_names_the_flag_and_the_flag_settles_it(
        fake_api: FakeApiServer, kubeconfig: Path, pp_nginx: Nginx) -> None:
    gateway_cluster(fake_api, controller="example.com/gateway-controller", proxy=True,
                    data_plane_labels={"gateway.networking.k8s.io/gateway-name": "public"})
    rc, report, _ = doctor("--resolve", f"{HOST}:{LB_IP}", *ports(pp_nginx),
                           kubeconfig=kubeconfig)
    h = one(report)
    assert rc == 1 and h["verdict"] == "target-proxy-unknown"
    assert "--target gateway:web/public=NAMESPACE/SERVICE:v1|v2|none" in h["advice"]
    t = h["target"]
    assert (t["verdict"], t["proxy"], t["service"]) == (
        "target-proxy-unknown", "unknown", f"web/{DATA_PLANE}")
    assert "example.com/gateway-controller" in t["message"]

    rc, report, _ = doctor("--resolve", f"{HOST}:{LB_IP}", *ports(pp_nginx),
                           "--target", f"gateway:web/public=web/{DATA_PLANE}:v2",
                           kubeconfig=kubeconfig)
    h = one(report)
    t = h["target"]
    assert (t["verdict"], t["proxy"], t["proxy_source"], t["found_by"]) == (
        "redirected", "v2", "--target map", "--target map")
    assert (t["slot"], t["proxy_service"], t["proxy_service_found"]) == (
        1, f"{NS}/hairpin-proxy-t1", False)
    # Redirected but no rule yet: the controller's job, as before targets.
    assert rc == 1 and h["verdict"] == "rule-missing"


def test_a_bad_target_flag_is_refused(kubeconfig: Path) -> None:
    rc, _, err = doctor(HOST, "--target", "gateway:web=web/svc", kubeconfig=kubeconfig)
    assert rc == 2 and "--target 'gateway:web=web/svc'" in err


@pytest.mark.parametrize("ingress_first", [True, False])
def test_conflict_between_an_ingress_and_a_route_goes_to_the_oldest(
        fake_api: FakeApiServer, kubeconfig: Path, pp_nginx: Nginx,
        ingress_first: bool) -> None:
    base_cluster(fake_api, proxy=True)
    fake_api.install_gateway_api("1.4", "standard")
    fake_api.install(ENVOY_CLIENT_TRAFFIC_POLICY)
    fake_api.create(gateway_class("eg"))
    fake_api.create(gateway("web", "public", "eg"))
    fake_api.create(service("envoy-gateway-system", DATA_PLANE, labels=OWNER_LABELS))
    fake_api.create(proxy_protocol_policy())
    fake_api.create(ingress_class("nginx", default=True))

    def add_ingress() -> None:
        fake_api.create(ingress("shop", "web", tls_hosts=[HOST], rule_hosts=[HOST]))

    def add_route() -> None:
        fake_api.create(accepted(route("HTTPRoute", "web", "shop", hostnames=[HOST],
                                       parent="public")))

    first, second = (add_ingress, add_route) if ingress_first else (add_route, add_ingress)
    first()
    fake_api.next_second()
    second()
    rc, report, _ = doctor("--resolve", f"{HOST}:{LB_IP}", *ports(pp_nginx),
                           kubeconfig=kubeconfig)
    h = one(report)
    t = h["target"]
    (lost,) = t["claims_lost"]
    assert lost["verdict"] == "host-claimed-elsewhere"
    if ingress_first:
        assert t["key"] == "default" and t["origins"] == ["Ingress shop/web"]
        assert lost == {"origin": "HTTPRoute web/shop", "target": GATEWAY_KEY, "asked": None,
                        "verdict": "host-claimed-elsewhere", "winner": "Ingress shop/web",
                        "winner_target": "default"}
    else:
        assert t["key"] == GATEWAY_KEY and t["origins"] == ["HTTPRoute web/shop"]
        # The class has no data plane found: the Ingress's claim fell back to the default.
        assert (lost["origin"], lost["target"], lost["asked"], lost["winner"]) == (
            "Ingress shop/web", "default", "ingressclass/nginx", "HTTPRoute web/shop")
    assert rc == 1 and h["verdict"] == "rule-missing"

    rc, text = doctor_text(kubeconfig, "--resolve", f"{HOST}:{LB_IP}", *ports(pp_nginx))
    loser, winner = (("HTTPRoute web/shop", "Ingress shop/web") if ingress_first
                     else ("Ingress shop/web", "HTTPRoute web/shop"))
    assert f"  claim    {loser} asks for " in text
    assert f": host-claimed-elsewhere, {winner} (older) wins it for " in text


def test_refused_gateway_resources_are_one_line(fake_api: FakeApiServer, kubeconfig: Path,
                                                pp_nginx: Nginx) -> None:
    gateway_cluster(fake_api, proxy=True)
    fake_api.create(ingress_class("nginx", default=True))
    fake_api.create(ingress("blog", "web", tls_hosts=["blog.example.test"]))
    fake_api.fail_requests(
        50, status=403,
        path_re=r"^/apis/gateway\.networking\.k8s\.io/v1/(gatewayclasses|gateways|httproutes"
                r"|grpcroutes)\?")
    rc, report, _ = doctor("--resolve", f"blog.example.test:{LB_IP}", *ports(pp_nginx),
                           kubeconfig=kubeconfig)
    problems = report["cluster"]["problems"]
    about_gateways = [p for p in problems if "Gateway API" in p or "gateway" in p]
    assert len(about_gateways) == 1, problems
    assert about_gateways[0].startswith("Gateway API: could not list gatewayclasses, "
                                        "gateways, httproutes, grpcroutes (403 Forbidden)")
    # The route's host is unknown, the Ingress's still has its target and verdict.
    h = one(report)
    assert h["host"] == "blog.example.test" and h["target"]["key"] == "default"
    assert rc == 1 and h["verdict"] == "rule-missing"


def test_refused_client_traffic_policies_leave_the_proxy_setting_unknown(
        fake_api: FakeApiServer, kubeconfig: Path, pp_nginx: Nginx) -> None:
    """Without the policies, "none sets proxyProtocol" would be a guess: it is unknown."""
    gateway_cluster(fake_api, proxy=True)
    fake_api.fail_requests(5, status=403, path_re=r"/clienttrafficpolicies\?")
    rc, report, _ = doctor("--resolve", f"{HOST}:{LB_IP}", *ports(pp_nginx),
                           kubeconfig=kubeconfig)
    h = one(report)
    assert rc == 1 and h["verdict"] == "target-proxy-unknown"
    t = h["target"]
    assert t["verdict"] == "target-proxy-unknown" and t["proxy"] == "unknown"
    # The plan's own words, as the controller's Event says them; the refusal is a problem.
    assert t["message"].startswith("the clienttrafficpolicies that say whether it expects "
                                   "the PROXY protocol cannot be read")
    assert "--target gateway:web/public=" in t["message"]
    refused = [p for p in report["cluster"]["problems"] if "clienttrafficpolicies" in p]
    assert len(refused) == 1 and "403" in refused[0]


def test_tls_routes_are_read_at_the_version_served(fake_api: FakeApiServer,
                                                   kubeconfig: Path) -> None:
    """Gateway API 1.4 experimental serves TLSRoute at v1alpha3 and v1alpha2 only."""
    base_cluster(fake_api, proxy=True)
    fake_api.install_gateway_api("1.4", "experimental")
    fake_api.install(ENVOY_CLIENT_TRAFFIC_POLICY)
    fake_api.create(gateway_class("eg"))
    fake_api.create(gateway("web", "public", "eg", listeners=[
        {"name": "tls", "port": 443, "protocol": "TLS", "hostname": "*.example.test"}]))
    fake_api.create(service("envoy-gateway-system", DATA_PLANE, labels=OWNER_LABELS))
    fake_api.create(proxy_protocol_policy())
    fake_api.create(accepted(route("TLSRoute", "web", "shop", hostnames=[HOST], parent="public",
                                   api_version="gateway.networking.k8s.io/v1alpha2")))
    rc, report, _ = doctor("--resolve", f"{HOST}:{LB_IP}", "--port", "0", "--tls-port", "0",
                           kubeconfig=kubeconfig)
    h = one(report)
    assert rc == 1 and h["verdict"] == "not-probed"
    assert (h["host"], h["target"]["key"], h["target"]["origins"]) == (
        HOST, GATEWAY_KEY, ["TLSRoute web/shop"])
    assert "tlsroutes v1alpha3" in report["cluster"]["gateway_api"]
    assert fake_api.count("GET", path_re=r"/v1alpha3/tlsroutes\?") == 1
    assert fake_api.count("GET", path_re=r"/v1alpha2/tlsroutes\?") == 0


# --------------------------------------------------------------------------- settling, default


def test_a_new_slot_still_settling_reads_pending_with_the_time_of_its_rules(
        fake_api: FakeApiServer, kubeconfig: Path) -> None:
    gateway_cluster(fake_api, proxy=True)
    fake_api.create(service(NS, "hairpin-proxy-t1", cluster_ips=["127.0.0.6"]))
    published = Target(key=GATEWAY_KEY, service=f"envoy-gateway-system/{DATA_PLANE}",
                       upstream=f"{DATA_PLANE}.envoy-gateway-system.svc.cluster.local",
                       http_port=80, https_port=443, proxy="v2", proxy_source="policy",
                       found_by="labels")
    since = int(time.time())
    fake_api.create(configmap(NS, "hairpin-proxy-targets", {
        "targets.json": encode([entry_for(published, 1)]),
        "published.json": json.dumps({GATEWAY_KEY: since})}))
    args = ("--resolve", f"{HOST}:{LB_IP}", "--port", "0", "--tls-port", "0",
            "--target-settle", "600")
    rules_at = time.strftime("%H:%M:%S", time.gmtime(since + 600))
    _, report, _ = doctor(*args, kubeconfig=kubeconfig)
    t = one(report)["target"]
    assert (t["key"], t["slot"], t["rules_at"]) == (GATEWAY_KEY, 1, f"{rules_at} UTC")
    _rc, text = doctor_text(kubeconfig, *args)
    assert (f"  target   pending (slot settling, rules at {rules_at} UTC) → {GATEWAY_KEY} "
            f"via Service envoy-gateway-system/{DATA_PLANE}") in text
    # Once the settle time is over the slot is simply in use.
    _, report, _ = doctor(*args[:-1], "0", kubeconfig=kubeconfig)
    assert one(report)["target"]["rules_at"] is None


def test_the_default_installs_class_goes_to_the_main_service(
        fake_api: FakeApiServer, kubeconfig: Path) -> None:
    base_cluster(fake_api, proxy=True)
    labels = {"app.kubernetes.io/name": "ingress-nginx",
              "app.kubernetes.io/component": "controller"}
    fake_api.patch("Service", "ingress-nginx", "ingress-nginx-controller",
                   {"metadata": {"labels": labels}})
    fake_api.create(configmap("ingress-nginx", "ingress-nginx-controller",
                              {"use-proxy-protocol": "true"}))
    fake_api.create(ingress_class("nginx", default=True))
    fake_api.create(ingress("shop", "web", tls_hosts=[HOST], rule_hosts=[HOST]))
    args = ("--resolve", f"{HOST}:{LB_IP}", "--port", "0", "--tls-port", "0")
    _rc, report, _ = doctor(*args, kubeconfig=kubeconfig)
    t = one(report)["target"]
    assert (t["key"], t["slot"], t["proxy_service"]) == ("default", 0, f"{NS}/hairpin-proxy")
    assert t["message"] == ("ingressclass/nginx's data plane ingress-nginx/ingress-nginx-"
                            "controller is the proxy's --target-server: the main Service "
                            "serves it, no slot")
    # A proxy relaying to another Service: ingress-nginx is a data plane of its own.
    _, report, _ = doctor(*args, kubeconfig=kubeconfig,
                           environ={"TARGET_SERVER": "traefik.traefik.svc.cluster.local"})
    t = one(report)["target"]
    assert (t["key"], t["slot"]) == ("ingressclass/nginx", 1)


# --------------------------------------------------------------------------- managed hosts


def cluster_view(kubeconfig: Path, **settings: Any) -> ClusterView:
    """doctor's view of the cluster (its controller's Deployment not there: its flags)."""
    s = dataclasses.replace(DoctorSettings(), namespace=NS, **settings)
    cfg = load_kubeconfig(kubeconfig)

    async def ask() -> ClusterView:
        client = KubeClient.from_cluster(cfg, timeout=10)
        try:
            return await gather(client, s, NS, policy_for(s, NS))
        finally:
            await client.close()
    return asyncio.run(ask())


def test_managed_hosts_are_those_the_plan_writes_a_rule_for(
        fake_api: FakeApiServer, kubeconfig: Path) -> None:
    """The hosts the controller manages are the plan's (those it writes a rule for); a host
    claimed but left alone, or waiting for its slot, is still checked, to say why."""
    gateway_cluster(fake_api, policy=False, proxy=True)
    other = "blog.example.test"
    fake_api.create(ingress("shop", "blog", tls_hosts=[other]))
    view = cluster_view(kubeconfig)
    assert view.facts.host_targets is not None
    assert view.facts.host_targets[HOST].verdict == "target-no-proxy"
    assert (view.managed, view.unwritten, view.checked) == ((other,), (HOST,), (other, HOST))
    # With PROXY on, the Gateway's new slot settles before its host gets a rule.
    fake_api.create(proxy_protocol_policy())
    fake_api.create(service(NS, "hairpin-proxy-t1", cluster_ips=["127.0.0.6"]))
    settling = cluster_view(kubeconfig, target_settle=600.0)
    assert (settling.managed, settling.unwritten) == ((other,), (HOST,))
    # A host whose rule exists keeps it while its slot settles, as the controller keeps it.
    cm = fake_api.get("ConfigMap", "kube-system", "coredns")
    assert cm is not None
    text = cm["data"]["Corefile"]
    cm["data"]["Corefile"] = corefile.apply(
        text, [HOST], answers=corefile.Answers.of([PROXY_IP]),
        proxy_fqdn=policy_for(DoctorSettings(), NS).proxy_fqdn)
    fake_api.update(cm)
    held = cluster_view(kubeconfig, target_settle=600.0)
    assert (held.managed, held.unwritten) == ((other, HOST), ())
    cm["data"]["Corefile"] = text
    fake_api.update(cm)
    settled = cluster_view(kubeconfig, target_settle=0.0)
    assert (settled.managed, settled.unwritten) == ((other, HOST), ())
    # Services not listed: which hosts get a rule is unknown, and every claimed host is
    # checked as managed.
    fake_api.fail_requests(1, status=403, method="GET", path_re=r"^/api/v1/services")
    blind = cluster_view(kubeconfig)
    assert blind.facts.host_targets is None
    assert (blind.managed, blind.unwritten) == ((other, HOST), ())
