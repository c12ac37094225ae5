"""The forged-PROXY-header check: its verdicts (pure), and the doctor against the fake API
with a real nginx on loopback standing for an ingress-nginx that expects PROXY and believes
whatever address the header names (``real_ip_header proxy_protocol`` from everywhere)."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hairpin_proxy import proxyproto
from hairpin_proxy.doctor import forged
from hairpin_proxy.doctor.forged import Answer
from tests.doctor.test_cli import doctor
from tests.fakeapi.fixtures import configmap, ingress, ingress_class, service
from tests.fakeapi.server import FakeApiServer
from tests.peers.nginx import Nginx, run_nginx

HOST = "shop.example.test"
BELIEVE_ALL = ("set_real_ip_from 0.0.0.0/0;\n        set_real_ip_from ::/0;\n"
               "        real_ip_header proxy_protocol;")
BELIEVE_LB = ("set_real_ip_from 203.0.113.0/24;\n        real_ip_header proxy_protocol;")


@pytest.fixture(scope="module")
def believing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nginx]:
    with run_nginx(tmp_path_factory.mktemp("believing"), proxy_protocol=True,
                   extra_conf=BELIEVE_ALL) as n:
        yield n


@pytest.fixture(scope="module")
def doubting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nginx]:
    with run_nginx(tmp_path_factory.mktemp("doubting"), proxy_protocol=True,
                   extra_conf=BELIEVE_LB) as n:
        yield n


# --------------------------------------------------------------------------- pure

@pytest.mark.parametrize(("answer", "verdict"), [
    (Answer("http", 404, '{"remote_addr": "192.0.2.1"}', "10.244.0.5"), "forgeable"),
    (Answer("http", 200, "", "10.244.0.5"), "forgeable"),
    (Answer("http", 200, '{"remote_addr": "10.244.0.5", "pp": "192.0.2.1"}', "10.244.0.5"),
     "not-believed"),
    # 10.244.0.5 is not in 10.244.0.51: a longer address is another address.
    (Answer("http", 200, '{"remote_addr": "10.244.0.51"}', "10.244.0.5"), "forgeable"),
    (Answer("http", 200, "client fd00::5 via", "fd00::5"), "not-believed"),
    (Answer("refused"), "guarded"),
    (Answer("timeout", detail="connect, 3s"), "guarded"),
    (Answer("reset", detail="reply"), "guarded"),
    (Answer("empty"), "guarded"),
    (Answer("unreachable"), "guarded"),
    (Answer("tls-error", detail="WRONG_VERSION_NUMBER"), "unknown"),
    (Answer("garbage", detail="SSH-2.0"), "unknown"),
])
def test_judge(answer: Answer, verdict: str) -> None:
    assert forged.judge(answer)[0] == verdict


@pytest.mark.parametrize(("controller", "words"), [
    ("k8s.io/ingress-nginx", "proxy-real-ip-cidr"),
    ("gateway.envoyproxy.io/gatewayclass-controller", "ClientTrafficPolicy"),
    ("traefik.io/ingress-controller", "proxyProtocol.trustedIPs"),
    ("haproxy.org/ingress-controller/public", "HAProxy"),
    ("gateway.nginx.org/nginx-gateway-controller", "rewriteClientIP.trustedAddresses"),
    ("example.com/unknown", "accept the PROXY protocol only from the load balancer"),
])
def test_the_fix_names_the_implementation_setting(controller: str, words: str) -> None:
    fix = forged.fix_for(controller)
    assert words in fix and "--guard-data-planes" in fix


def test_the_header_names_the_documentation_address() -> None:
    assert forged.forged_header("v1", ("10.96.0.10", 80)) == \
        b"PROXY TCP4 192.0.2.1 192.0.2.2 40000 80\r\n"
    assert forged.forged_header("v1", ("fd00::10", 443)) == \
        b"PROXY TCP6 2001:db8::1 2001:db8::2 40000 443\r\n"
    header, used = proxyproto.decode(forged.forged_header("v2", ("fd00::10", 443)))
    assert used > 16 and (header.source, header.destination) == (("2001:db8::1", 40000),
                                                                 ("2001:db8::2", 443))


# --------------------------------------------------------------------------- real nginx

def test_check_against_real_nginx(believing: Nginx, doubting: Nginx) -> None:
    a = forged.check("127.0.0.1", believing.port, version="v1", tls=False, host=HOST,
                     timeout=5)
    assert a.outcome == "http" and '"remote_addr": "192.0.2.1"' in a.body, a
    assert forged.judge(a)[0] == "forgeable"
    b = forged.check("127.0.0.1", doubting.tls_port, version="v2", tls=True, host=HOST,
                     timeout=5)
    assert '"proxy_protocol_addr": "192.0.2.1"' in b.body, b
    assert '"remote_addr": "127.0.0.1"' in b.body
    assert forged.judge(b)[0] == "not-believed"


def data_plane_cluster(api: FakeApiServer, nginx: Nginx) -> None:
    """ingress-nginx expecting PROXY; its Service's ClusterIP is loopback, where nginx
    listens (kube-proxy's part)."""
    api.create(ingress_class("nginx"))
    api.create(configmap("ingress-nginx", "ingress-nginx-controller",
                         {"use-proxy-protocol": "true"}))
    api.create(service("ingress-nginx", "ingress-nginx-controller", type="LoadBalancer",
                       cluster_ips=["127.0.0.1"], lb_ingress=[{"ip": "127.0.0.1"}],
                       labels={"app.kubernetes.io/name": "ingress-nginx",
                               "app.kubernetes.io/component": "controller"},
                       ports=[{"name": "http", "port": nginx.port, "protocol": "TCP"},
                              {"name": "https", "port": nginx.tls_port, "protocol": "TCP"}]))
    api.create(ingress("shop", "web", tls_hosts=[HOST], class_name="nginx"))


def test_doctor_reports_a_forgeable_data_plane_and_its_fix(
        fake_api: FakeApiServer, kubeconfig: Path, believing: Nginx) -> None:
    data_plane_cluster(fake_api, believing)
    _, report, err = doctor(HOST, "--resolve", f"{HOST}:127.0.0.1", "--port", "0",
                            "--tls-port", "0", kubeconfig=kubeconfig)
    (plane,) = report["forged_proxy_header"]["data_planes"]
    assert plane["verdict"] == "forgeable", (plane, err)
    assert plane["target"] == "ingressclass/nginx"
    assert plane["service"] == "ingress-nginx/ingress-nginx-controller"
    assert (plane["address"], plane["port"], plane["header"]) == ("127.0.0.1", believing.port,
                                                                  "v1")
    assert "proxy-real-ip-cidr" in plane["fix"]


def test_doctor_says_guarded_when_nothing_answers(fake_api: FakeApiServer,
                                                  kubeconfig: Path, believing: Nginx) -> None:
    data_plane_cluster(fake_api, believing)
    svc = fake_api.get("Service", "ingress-nginx", "ingress-nginx-controller")
    assert svc is not None
    svc["spec"]["ports"][0]["port"] = closed = _closed_port()
    fake_api.update(svc)
    _, report, _ = doctor(HOST, "--resolve", f"{HOST}:127.0.0.1", "--port", "0",
                          "--tls-port", "0", kubeconfig=kubeconfig)
    (plane,) = report["forged_proxy_header"]["data_planes"]
    assert plane["port"] == closed
    assert plane["verdict"] == "guarded" and plane["fix"] is None, plane


def test_off_with_a_flag(fake_api: FakeApiServer, kubeconfig: Path, believing: Nginx) -> None:
    data_plane_cluster(fake_api, believing)
    _, report, _ = doctor(HOST, "--resolve", f"{HOST}:127.0.0.1", "--port", "0",
                          "--tls-port", "0", "--no-forged-header-probe", kubeconfig=kubeconfig)
    assert report["forged_proxy_header"] == {
        "note": "not checked (--no-forged-header-probe)", "data_planes": []}
    assert not [r for r in believing.access_log_entries() if "--no-forged" in str(r)]


def test_text_report(fake_api: FakeApiServer, kubeconfig: Path, believing: Nginx) -> None:
    import os
    import subprocess
    import sys

    data_plane_cluster(fake_api, believing)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAIRPIN_")}
    env.pop("KUBECONFIG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "hairpin_proxy", "doctor", HOST, "--resolve",
         f"{HOST}:127.0.0.1", "--port", "0", "--tls-port", "0", "--verify-hosts", "off",
         "--kubeconfig", str(kubeconfig), "--namespace", "hairpin-proxy"],
        capture_output=True, text=True, timeout=120, env=env, check=False)
    assert "forged PROXY header (docs/forged-proxy-header.md):" in proc.stdout
    assert (f"ingress-nginx/ingress-nginx-controller (ingressclass/nginx, "
            f"127.0.0.1:{believing.port})  forgeable") in proc.stdout
    assert "    fix  ingress-nginx: set `proxy-real-ip-cidr`" in proc.stdout


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answer_then_reset(server: socket.socket) -> None:
    """Accept one connection, read the header and request, answer 403, then reset."""
    conn, _ = server.accept()
    with conn:
        conn.settimeout(10)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                return
            data += chunk
        conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
        # An abortive close: RST instead of FIN, once the answer is on its way.
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def test_an_answer_then_a_reset_is_an_answer() -> None:
    """A data plane that answers and then resets took the header: it is forgeable."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(10)
        worker = threading.Thread(target=_answer_then_reset, args=(server,), daemon=True)
        worker.start()
        answer = forged.check("127.0.0.1", server.getsockname()[1], version="v1", tls=False,
                              host=HOST, timeout=5)
        worker.join(10)
    assert answer.outcome == "http" and answer.status == 403, answer
    assert forged.judge(answer)[0] == "forgeable"
