"""Every host to the data plane that serves it, with real parts end to end.

Three real nginx servers stand for three Gateways' data planes: one expects the PROXY protocol
and is known to want v1 (NGINX Gateway Fabric, an NginxProxy with rewriteClientIP ProxyProtocol),
one v2 (Envoy Gateway, a ClientTrafficPolicy with proxyProtocol), one no PROXY at all (an
Envoy Gateway without such a policy). The controller runs against the fake API; the relay is
the real ``hairpin-proxy proxy`` with ``--targets-file``, resolving the data planes' Service
names through a real dnsmasq. The test plays the two parts that have no stand-in here: the
kubelet (the targets ConfigMap copied into the file the proxy reads) and kube-proxy (a
Service's ClusterIP:80 is its slot's pod port on loopback).
"""

from __future__ import annotations

import contextlib
import copy
import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dns.message
import dns.query
import dns.rdatatype

from hairpin_proxy import corefile
from hairpin_proxy.targets import table
from hairpin_proxy.targets.slots import listen_ports, slot_of_service_name
from tests.controller.conftest import NAMESPACE, Controller, corefile_text, wait_until
from tests.controller.test_gateway import coredns_answer
from tests.fakeapi.crds import ENVOY_CLIENT_TRAFFIC_POLICY, NGINX_PROXY
from tests.fakeapi.fixtures import gateway, gateway_class, route, service
from tests.fakeapi.server import FakeApiServer
from tests.peers.nginx import Nginx, run_nginx
from tests.relay.helpers import run_relay
from tests.verify.dnsmasq import Dnsmasq

Start = Callable[..., Controller]
ENVOY = "gateway.envoyproxy.io/gatewayclass-controller"
NGF = "gateway.nginx.org/nginx-gateway-controller"
CLIENT = "127.0.0.77"  # the in-cluster client: its address must reach the data plane
LB = {"v1": "203.0.113.11", "v2": "203.0.113.12", "plain": "203.0.113.13"}
HOSTS = {"v1": "one.example.test", "v2": "two.example.test", "plain": "three.example.test"}


def listener() -> dict[str, Any]:
    return {"name": "http", "port": 80, "protocol": "HTTP",
            "allowedRoutes": {"namespaces": {"from": "All"}}}


def accepted_route(name: str, host: str, gw: str, controller: str,
                   generation: int = 1) -> dict[str, Any]:
    obj = route("HTTPRoute", "shop", name, hostnames=[host], parent=gw, parent_namespace="web")
    obj["status"] = {"parents": [{
        "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gw,
                      "namespace": "web"},
        "controllerName": controller,
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                        "message": "", "observedGeneration": generation,
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]}
    return obj


def data_plane(api: FakeApiServer, name: str, labels: dict[str, str], nginx: Nginx, *,
               lb: str, namespace: str = "web") -> str:
    api.create(service(namespace, name, type="LoadBalancer", labels=labels,
                       lb_ingress=[{"ip": lb}],
                       ports=[{"name": "http", "port": nginx.port, "protocol": "TCP"},
                              {"name": "https", "port": nginx.tls_port, "protocol": "TCP"}]))
    return f"{name}.{namespace}.svc.cluster.local"


def implementations(api: FakeApiServer, release: str = "1.4") -> None:
    """Gateway API ``release`` (standard channel), Envoy Gateway's class "eg" and NGINX
    Gateway Fabric's class "ngf" whose NginxProxy turns the PROXY protocol on."""
    api.install_gateway_api(release, "standard")
    api.install(ENVOY_CLIENT_TRAFFIC_POLICY, NGINX_PROXY)
    api.create(gateway_class("eg", ENVOY))
    api.create({**gateway_class("ngf", NGF), "spec": {
        "controllerName": NGF, "parametersRef": {
            "group": "gateway.nginx.org", "kind": "NginxProxy", "name": "proxy-protocol",
            "namespace": "nginx-gateway"}}})
    api.create({"apiVersion": "gateway.nginx.org/v1alpha2", "kind": "NginxProxy",
                "metadata": {"namespace": "nginx-gateway", "name": "proxy-protocol"},
                "spec": {"rewriteClientIP": {"mode": "ProxyProtocol",
                                             "trustedAddresses": [{"type": "CIDR",
                                                                   "value": "10.0.0.0/8"}]}}})


def proxy_protocol_policy(api: FakeApiServer, gw: str) -> None:
    """Envoy Gateway's ClientTrafficPolicy that makes Gateway web/``gw`` expect PROXY."""
    api.create({"apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "ClientTrafficPolicy",
                "metadata": {"namespace": "web", "name": f"proxy-protocol-{gw}"},
                "spec": {"targetRefs": [{"group": "gateway.networking.k8s.io",
                                         "kind": "Gateway", "name": gw}],
                         "proxyProtocol": {}}})


def ngf_plane(api: FakeApiServer, gw: str, nginx: Nginx) -> str:
    return data_plane(api, f"{gw}-ngf", {"gateway.networking.k8s.io/gateway-name": gw},
                      nginx, lb=LB["v1"])


def envoy_plane(api: FakeApiServer, gw: str, suffix: str, nginx: Nginx, lb: str) -> str:
    return data_plane(api, f"envoy-web-{gw}-{suffix}", {
        "gateway.envoyproxy.io/owning-gateway-name": gw,
        "gateway.envoyproxy.io/owning-gateway-namespace": "web"}, nginx, lb=lb,
        namespace="envoy-gateway-system")


def cluster_with_three_gateways(api: FakeApiServer, v1: Nginx, v2: Nginx,
                                plain: Nginx) -> dict[str, str]:
    """The Gateways, their data planes and one route each; the data planes' DNS names."""
    implementations(api)
    api.create(gateway("web", "gw-v1", "ngf", listeners=[listener()]))
    api.create(gateway("web", "gw-v2", "eg", listeners=[listener()]))
    api.create(gateway("web", "gw-plain", "eg", listeners=[listener()]))
    proxy_protocol_policy(api, "gw-v2")
    names = {
        "v1": ngf_plane(api, "gw-v1", v1),
        "v2": envoy_plane(api, "gw-v2", "0011aabb", v2, LB["v2"]),
        "plain": envoy_plane(api, "gw-plain", "2233ccdd", plain, LB["plain"]),
    }
    api.create(accepted_route("one", HOSTS["v1"], "gw-v1", NGF))
    api.create(accepted_route("two", HOSTS["v2"], "gw-v2", ENVOY))
    api.create(accepted_route("three", HOSTS["plain"], "gw-plain", ENVOY))
    return names


def answers(api: FakeApiServer) -> dict[str, corefile.Answers]:
    return corefile.managed_groups(corefile_text(api))


def slot_of_host(api: FakeApiServer, host: str) -> int | None:
    """kube-proxy's part: the slot whose Service has the ClusterIP the host resolves to."""
    got = answers(api).get(host)
    if got is None:
        return None
    for svc in api.list("Service", NAMESPACE):
        slot = slot_of_service_name(svc["metadata"]["name"])
        if slot is not None and got.ipv4 == tuple(svc["spec"]["clusterIPs"]):
            return slot
    return None


def sync_table(api: FakeApiServer, path: Path) -> tuple[table.TableEntry, ...]:
    """The kubelet's part: the ConfigMap's key into the mounted file (replaced atomically)."""
    cm = api.get("ConfigMap", NAMESPACE, "hairpin-proxy-targets")
    assert cm is not None
    text = cm["data"]["targets.json"]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return table.decode(text)


@contextlib.contextmanager
def client(slot: int) -> Iterator[socket.socket]:
    """An in-cluster client (its own address) connected to the slot's plain-HTTP pod port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(10)
        sock.bind((CLIENT, 0))
        sock.connect(("127.0.0.1", listen_ports(slot)[0]))
        yield sock
    finally:
        sock.close()


def get(sock: socket.socket, host: str) -> dict[str, Any]:
    """One keep-alive request; nginx answers with its view of the connection as JSON."""
    sock.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(65536)
    result: dict[str, Any] = json.loads(body)
    return result


def test_each_host_reaches_its_own_data_plane_with_the_client_address(
        cluster: FakeApiServer, start: Start, tmp_path: Path) -> None:
    with run_nginx(tmp_path / "v1") as v1, run_nginx(tmp_path / "v2") as v2, \
            run_nginx(tmp_path / "plain", proxy_protocol=False) as plain:
        names = cluster_with_three_gateways(cluster, v1, v2, plain)
        dns = Dnsmasq(tmp_path, hosts={name: ["127.0.0.1"] for name in names.values()})
        dns.start()
        try:
            run_through(cluster, start, tmp_path, dns=dns, names=names,
                        planes={"v1": v1, "v2": v2})
        finally:
            dns.stop()


def run_through(cluster: FakeApiServer, start: Start, tmp_path: Path, *, dns: Dnsmasq,
                names: dict[str, str], planes: dict[str, Nginx]) -> None:
    ctl = start("--api-discovery-interval", "0.3", "--target-settle", "0",
                "--allow-mass-removal")
    ctl.wait_ready()
    wait_until(lambda: all(slot_of_host(cluster, HOSTS[k]) for k in ("v1", "v2")),
               what="both PROXY data planes' hosts on their slots")
    # The data plane that expects no PROXY header does not hairpin-break: left alone.
    assert HOSTS["plain"] not in answers(cluster)
    path = tmp_path / "targets.json"
    entries = {e.key: e for e in sync_table(cluster, path)}
    assert set(entries) == {"gateway/web/gw-v1", "gateway/web/gw-v2"}
    assert entries["gateway/web/gw-v1"].proxy == "v1"
    assert entries["gateway/web/gw-v2"].proxy == "v2"
    assert entries["gateway/web/gw-v1"].upstream == names["v1"]

    with run_relay(tmp_path, ["127.0.0.1:{port}=127.0.0.1:9"], "--targets-file", str(path),
                   "--targets-poll", "0.1", "--targets-address", "127.0.0.1",
                   "--dns-server", dns.server) as relay:
        wait_until(lambda: relay.metric("hairpin_proxy_targets_table_slots") == 2,
                   what="the relay serves both slots")
        seen: dict[str, dict[str, Any]] = {}
        for key in ("v1", "v2"):
            slot = slot_of_host(cluster, HOSTS[key])
            assert slot is not None
            with client(slot) as sock:
                seen[key] = get(sock, HOSTS[key])
        for key, view in seen.items():
            # The data plane of the host's own Gateway answered, and saw the real client,
            # the port the client dialed and the load balancer's address as destination.
            assert view["server_port"] == str(planes[key].port), key
            assert view["proxy_protocol_addr"] == CLIENT, key
            assert view["proxy_protocol_server_port"] == "80", key
            assert view["proxy_protocol_server_addr"] == LB[key], key

        # Route "two" moves to the v1 Gateway while a connection to it is open.
        old_slot = slot_of_host(cluster, HOSTS["v2"])
        assert old_slot is not None
        with client(old_slot) as established:
            assert get(established, HOSTS["v2"])["server_port"] == str(planes["v2"].port)
            moved = copy.deepcopy(cluster.get("HTTPRoute", "shop", "two"))
            assert moved is not None
            moved["spec"]["parentRefs"][0]["name"] = "gw-v1"
            moved["status"]["parents"][0]["parentRef"]["name"] = "gw-v1"
            moved["status"]["parents"][0]["controllerName"] = NGF
            cluster.update(moved)
            wait_until(lambda: slot_of_host(cluster, HOSTS["v2"]) == slot_of_host(
                cluster, HOSTS["v1"]), what="the host follows its route to the v1 Gateway")
            # The v2 Gateway has no route left: its slot leaves the table, and the proxies
            # stop listening there once the kubelet brings the new table...
            wait_until(lambda: len(sync_table(cluster, path)) == 1, what="slot dropped")
            wait_until(lambda: relay.metric("hairpin_proxy_targets_table_slots") == 1,
                       what="the relay follows the table")
            # ... while the established connection finishes its work where it began.
            assert get(established, HOSTS["v2"])["server_port"] == str(planes["v2"].port)
        new_slot = slot_of_host(cluster, HOSTS["v2"])
        assert new_slot is not None
        with client(new_slot) as sock:
            view = get(sock, HOSTS["v2"])
        assert view["server_port"] == str(planes["v1"].port)
        assert view["proxy_protocol_addr"] == CLIENT
        with contextlib.suppress(OSError), client(old_slot) as sock:
            raise AssertionError("the dropped slot still accepts connections")


# A ListenerSet's route and a Gateway wildcard's deep names, each on its own data plane.
SHOP = "cart.shop.example.com"  # on the v1 Gateway, through a ListenerSet "*.shop.example.com"
ELSEWHERE = "cart.elsewhere.example.org"  # the route asks for it; no listener has it
DEEP = ("a.b.example.com", "x.y.z.example.com")  # on the v2 Gateway's "*.example.com"
UPSTREAM = ("example.com", "_acme-challenge.b.example.com", "a._tcp.example.com")


def accepted_on(obj: dict[str, Any], parent: dict[str, Any], controller: str
                ) -> dict[str, Any]:
    obj["status"] = {"parents": [{
        "parentRef": parent, "controllerName": controller,
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                        "message": "", "observedGeneration": 1,
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]}
    return obj


def cluster_with_listener_set_and_wildcard(api: FakeApiServer, v1: Nginx, v2: Nginx
                                           ) -> dict[str, str]:
    """Gateway API 1.5 (ListenerSet is standard from it on). The v1 Gateway (NGINX Gateway
    Fabric) allows ListenerSets; ListenerSet shop/extra adds a "*.shop.example.com" listener
    to it, and HTTPRoute shop/cart attaches to the ListenerSet. The v2 Gateway (Envoy
    Gateway) has a "*.example.com" listener and a route for "*.example.com". The data
    planes' DNS names."""
    implementations(api, "1.5")
    own = {**listener(), "hostname": "www.example.net"}
    v1_gateway = gateway("web", "gw-v1", "ngf", listeners=[own])
    v1_gateway["spec"]["allowedListeners"] = {"namespaces": {"from": "All"}}
    api.create(v1_gateway)
    api.create(gateway("web", "gw-v2", "eg",
                       listeners=[{**listener(), "hostname": "*.example.com"}]))
    proxy_protocol_policy(api, "gw-v2")
    names = {"v1": ngf_plane(api, "gw-v1", v1),
             "v2": envoy_plane(api, "gw-v2", "0011aabb", v2, LB["v2"])}
    api.create({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
        "metadata": {"namespace": "shop", "name": "extra"},
        "spec": {"parentRef": {"name": "gw-v1", "namespace": "web"},
                 "listeners": [{"name": "shop", "port": 80, "protocol": "HTTP",
                                "hostname": "*.shop.example.com",
                                "allowedRoutes": {"namespaces": {"from": "Same"}}}]},
        "status": {"conditions": [{"type": "Accepted", "status": "True",
                                   "reason": "Accepted", "message": "",
                                   "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    parent = {"group": "gateway.networking.k8s.io", "kind": "ListenerSet", "name": "extra",
              "namespace": "shop"}
    cart = route("HTTPRoute", "shop", "cart", hostnames=[SHOP, ELSEWHERE])
    cart["spec"]["parentRefs"] = [parent]
    api.create(accepted_on(cart, parent, NGF))
    wild = route("HTTPRoute", "shop", "wild", hostnames=["*.example.com"], parent="gw-v2",
                 parent_namespace="web")
    api.create(accepted_on(wild, {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                  "name": "gw-v2", "namespace": "web"}, ENVOY))
    return names


def slot_of_address(api: FakeApiServer, address: str) -> int | None:
    """kube-proxy's part: the slot whose Service has this ClusterIP."""
    for svc in api.list("Service", NAMESPACE):
        slot = slot_of_service_name(svc["metadata"]["name"])
        if slot is not None and address in svc["spec"]["clusterIPs"]:
            return slot
    return None


def resolve(server: str, name: str) -> list[str]:
    """An in-cluster client's A lookup of ``name``, asked of the CoreDNS stand-in."""
    address, port = server.rsplit(":", 1)
    reply = dns.query.udp(dns.message.make_query(name, "A"), address, port=int(port),
                          timeout=5)
    return [item.to_text() for rrset in reply.answer if rrset.rdtype == dns.rdatatype.A
            for item in rrset]


def test_listener_set_and_deep_wildcard_hosts_reach_their_data_planes(
        cluster: FakeApiServer, start: Start, tmp_path: Path) -> None:
    """A ListenerSet route's host (listener ∩ route) and names of every depth under a Gateway
    wildcard resolve, through a real dnsmasq playing CoreDNS as the controller's rules say,
    to their slot; the real relay brings each to its own Gateway's nginx with the PROXY
    header that data plane expects. There is no CoreDNS here: the stand-in answers a name
    with what the first of our template stanzas whose regex matches it answers (CoreDNS's
    order), and a name no stanza matches is not answered (it would go upstream)."""
    with run_nginx(tmp_path / "v1") as v1, run_nginx(tmp_path / "v2") as v2:
        planes = {"v1": v1, "v2": v2}
        names = cluster_with_listener_set_and_wildcard(cluster, v1, v2)
        ctl = start("--api-discovery-interval", "0.3", "--target-settle", "0",
                    "--allow-mass-removal")
        ctl.wait_ready()
        wait_until(lambda: slot_of_host(cluster, SHOP) is not None
                   and slot_of_host(cluster, "**.example.com") is not None,
                   what="the ListenerSet's host and the wildcard on their slots")
        assert ELSEWHERE not in answers(cluster)
        text = corefile_text(cluster)
        asked = (SHOP, ELSEWHERE, *DEEP, *UPSTREAM)
        ruled = {n: list(a) for n in asked if (a := coredns_answer(text, n)) is not None}
        assert set(ruled) == {SHOP, *DEEP}, ruled
        path = tmp_path / "targets.json"
        entries = {e.key: e for e in sync_table(cluster, path)}
        assert {k: e.proxy for k, e in entries.items()} == {
            "gateway/web/gw-v1": "v1", "gateway/web/gw-v2": "v2"}
        # One dnsmasq: the cluster's DNS for the proxies (the data planes' Service names) and
        # CoreDNS for the client (our rules' answers).
        dns_server = Dnsmasq(tmp_path, hosts={
            **{name: ["127.0.0.1"] for name in names.values()}, **ruled})
        dns_server.start()
        try:
            with run_relay(tmp_path, ["127.0.0.1:{port}=127.0.0.1:9"], "--targets-file",
                           str(path), "--targets-poll", "0.1", "--targets-address",
                           "127.0.0.1", "--dns-server", dns_server.server) as relay:
                wait_until(lambda: relay.metric("hairpin_proxy_targets_table_slots") == 2,
                           what="the relay serves both slots")
                for host, plane in ((SHOP, "v1"), *((d, "v2") for d in DEEP)):
                    (address,) = resolve(dns_server.server, host)
                    slot = slot_of_address(cluster, address)
                    assert slot is not None, (host, address)
                    with client(slot) as sock:
                        view = get(sock, host)
                    # The host's own Gateway's data plane answered, and saw the real client,
                    # the port it dialed and that Gateway's load balancer address.
                    assert view["server_port"] == str(planes[plane].port), host
                    assert view["proxy_protocol_addr"] == CLIENT, host
                    assert view["proxy_protocol_server_port"] == "80", host
                    assert view["proxy_protocol_server_addr"] == LB[plane], host
                for name in (ELSEWHERE, *UPSTREAM):
                    assert resolve(dns_server.server, name) == [], name
            assert ctl.ready()
        finally:
            dns_server.stop()
