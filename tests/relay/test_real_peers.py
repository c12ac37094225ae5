"""Through the relay to real PROXY-protocol servers: nginx (plain, TLS, IPv6) and HAProxy."""

from __future__ import annotations

import json
import socket
import ssl
from pathlib import Path
from typing import Any

import pytest

from tests.peers import free_port
from tests.peers.haproxy import run_haproxy
from tests.peers.nginx import run_nginx
from tests.relay.helpers import connect, recv_all, run_relay

# Plain and TLS passthrough alike, copying and splicing.
pytestmark = pytest.mark.usefixtures("data_path")


def http_get(sock: socket.socket | ssl.SSLSocket, host: str = "app.example.test") -> bytes:
    sock.sendall(f"GET / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
    return recv_all(sock)


def json_body(response: bytes) -> dict[str, Any]:
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), response[:200]
    result: dict[str, Any] = json.loads(body)
    return result


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_nginx_sees_the_real_client_address(tmp_path: Path, version: str) -> None:
    with run_nginx(tmp_path / "nginx") as nginx, run_relay(
            tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:{nginx.port}/{version}"]) as relay:
        with connect(relay.ports[0]) as s:
            client = s.getsockname()
            seen = json_body(http_get(s))
        assert (seen["proxy_protocol_addr"], seen["proxy_protocol_port"]) == \
            (client[0], str(client[1]))
        assert seen["proxy_protocol_server_port"] == str(relay.ports[0])
        assert seen["host"] == "app.example.test"


def test_a_bare_request_to_nginx_fails(tmp_path: Path) -> None:
    with run_nginx(tmp_path / "nginx") as nginx, connect(nginx.port) as s:
        try:
            answer = http_get(s)
        except ConnectionResetError:
            answer = b""
    assert not answer.startswith(b"HTTP/1.1 200")
    assert "broken header" in nginx.error_log_text()


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_nginx_over_ipv6(tmp_path: Path, version: str) -> None:
    port = free_port("::1")
    with run_nginx(tmp_path / "nginx", ipv6=True) as nginx, run_relay(
            tmp_path, [f"[::1]:{port}=[::1]:{nginx.ipv6_port}/{version}"]), \
            connect(port, "::1") as s:
        client = s.getsockname()
        seen = json_body(http_get(s))
    assert (seen["proxy_protocol_addr"], seen["proxy_protocol_port"]) == \
        ("::1", str(client[1]))
    assert seen["proxy_protocol_server_addr"] == "::1"


def test_https_passthrough_with_sni(tmp_path: Path) -> None:
    with run_nginx(tmp_path / "nginx", tls=True) as nginx, run_relay(
            tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:{nginx.tls_port}"]) as relay:
        context = ssl.create_default_context(cafile=str(nginx.cert))
        with connect(relay.ports[0]) as raw:
            client = raw.getsockname()
            with context.wrap_socket(raw, server_hostname="shop.example.test") as s:
                assert s.version() in ("TLSv1.2", "TLSv1.3")
                seen = json_body(http_get(s, "shop.example.test"))
    assert seen["scheme"] == "https"
    assert seen["ssl_server_name"] == "shop.example.test"
    assert (seen["proxy_protocol_addr"], seen["proxy_protocol_port"]) == \
        ("127.0.0.1", str(client[1]))


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_haproxy_accepts_our_header_and_logs_the_client(tmp_path: Path, version: str) -> None:
    hp = free_port()
    config = f"""\
frontend fe
    mode http
    bind 127.0.0.1:{hp} accept-proxy
    log-format "hairpin-client %ci:%cp"
    http-request return status 200 content-type text/plain lf-string "src=%[src]:%[src_port]"
"""
    with run_haproxy(tmp_path / "haproxy", config) as haproxy, run_relay(
            tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:{hp}/{version}"]) as relay:
        with connect(relay.ports[0]) as s:
            client = f"{s.getsockname()[0]}:{s.getsockname()[1]}"
            answer = http_get(s)
        assert answer.startswith(b"HTTP/1.1 200")
        assert answer.endswith(f"src={client}".encode())
        haproxy.wait_for_log(f"hairpin-client {client}")


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.usefixtures("own_network")  # binds a wildcard address
def test_nginx_sees_the_advertised_destination(tmp_path: Path, version: str) -> None:
    """@80 and --advertise-address: nginx's $proxy_protocol_server_port/_addr (from which
    ingress-nginx builds X-Forwarded-Port and redirects) are what the client dialed through
    the load balancer, not the pod's listening port and address."""
    with run_nginx(tmp_path / "nginx") as nginx, run_relay(
            tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:{nginx.port}/{version}@80",
                       f"0.0.0.0:{{port}}=127.0.0.1:{nginx.port}/{version}@443"],
            "--advertise-address", "203.0.113.10", loop="uvloop") as relay:
        with connect(relay.ports[0]) as s:
            client = s.getsockname()
            seen = json_body(http_get(s))
        with connect(relay.ports[1]) as s:
            seen_wild = json_body(http_get(s))
        logged = nginx.access_log_entries()
    assert (seen["proxy_protocol_addr"], seen["proxy_protocol_port"]) == \
        (client[0], str(client[1]))
    for got in (seen, logged[0]):
        assert (got["proxy_protocol_server_addr"], got["proxy_protocol_server_port"]) == \
            ("203.0.113.10", "80")
    for got in (seen_wild, logged[1]):
        assert (got["proxy_protocol_server_addr"], got["proxy_protocol_server_port"]) == \
            ("203.0.113.10", "443")


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.usefixtures("own_network")  # binds a wildcard address
def test_without_advertise_address_the_dialed_address_and_advertised_port(
        tmp_path: Path, version: str) -> None:
    """The default destination address is the one the client connected to, also on a
    wildcard listener (asked per connection); the port is the advertised one."""
    with run_nginx(tmp_path / "nginx") as nginx, run_relay(
            tmp_path, [f"0.0.0.0:{{port}}=127.0.0.1:{nginx.port}/{version}@80",
                       f"127.0.0.1:{{port}}=127.0.0.1:{nginx.port}/{version}"],
            loop="uvloop") as relay:
        with connect(relay.ports[0], "127.0.0.2") as s:
            seen_wild = json_body(http_get(s))
        with connect(relay.ports[1]) as s:
            seen = json_body(http_get(s))
        logged = nginx.access_log_entries()
    for got in (seen_wild, logged[0]):
        assert (got["proxy_protocol_server_addr"], got["proxy_protocol_server_port"]) == \
            ("127.0.0.2", "80")
    for got in (seen, logged[1]):
        assert (got["proxy_protocol_server_addr"], got["proxy_protocol_server_port"]) == \
            ("127.0.0.1", str(relay.ports[1]))
