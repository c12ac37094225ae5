"""The shared peers behave as the other suites rely on."""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
from pathlib import Path

import pytest

from tests.peers import free_port, free_ports, require_binary, wait_for, wait_for_port
from tests.peers.haproxy import run_haproxy
from tests.peers.nginx import pattern_bytes, run_nginx


def curl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require_binary("curl"), "-sS", "--max-time", "30", *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_bare_request_to_proxy_protocol_port_is_refused_and_logged(tmp_path: Path) -> None:
    with run_nginx(tmp_path) as nginx:
        proc = curl(nginx.url("/"))
        assert proc.returncode != 0, proc.stdout  # nginx closes without any HTTP answer
        assert proc.stdout == ""
        wait_for(lambda: "broken header" in nginx.error_log_text(), what="broken header logged")


def test_curl_with_proxy_header_reports_its_addresses(tmp_path: Path) -> None:
    with run_nginx(tmp_path) as nginx:
        proc = curl("--haproxy-protocol", "-H", "Host: app.example.test", nginx.url("/some/path"))
        assert proc.returncode == 0, proc.stderr
        seen = json.loads(proc.stdout)
        assert seen["proxy_protocol_addr"] == "127.0.0.1"
        assert seen["proxy_protocol_server_port"] == str(nginx.port)
        assert int(seen["proxy_protocol_port"]) > 0
        assert seen["host"] == "app.example.test"
        assert seen["scheme"] == "http"
        assert seen["request_uri"] == "/some/path"
        assert "broken header" not in nginx.error_log_text()
        assert nginx.access_log_entries()[-1]["request_uri"] == "/some/path"


def test_claimed_address_differs_from_the_socket_peer(tmp_path: Path) -> None:
    with run_nginx(tmp_path) as nginx, socket.create_connection(("127.0.0.1", nginx.port)) as s:
        s.sendall(b"PROXY TCP4 203.0.113.7 127.0.0.1 40000 443\r\n"
                  b"GET / HTTP/1.0\r\nHost: x.example.test\r\n\r\n")
        data = b""
        while chunk := s.recv(4096):
            data += chunk
        seen = json.loads(data.partition(b"\r\n\r\n")[2])
        assert seen["proxy_protocol_addr"] == "203.0.113.7"
        assert seen["proxy_protocol_port"] == "40000"
        assert seen["remote_addr"] == "127.0.0.1"


def test_plain_nginx_without_proxy_protocol(tmp_path: Path) -> None:
    with run_nginx(tmp_path, proxy_protocol=False) as nginx:
        seen = nginx.get_direct("/plain")
        assert seen["proxy_protocol_addr"] == ""
        assert seen["request_uri"] == "/plain"


def test_tls_with_sni(tmp_path: Path) -> None:
    with run_nginx(tmp_path, tls=True) as nginx:
        proc = curl("--haproxy-protocol", "--cacert", str(nginx.cert),
                    "--resolve", f"shop.example.test:{nginx.tls_port}:127.0.0.1",
                    f"https://shop.example.test:{nginx.tls_port}/")
        assert proc.returncode == 0, proc.stderr
        seen = json.loads(proc.stdout)
        assert seen["ssl_server_name"] == "shop.example.test"
        assert seen["scheme"] == "https"
        assert seen["proxy_protocol_addr"] == "127.0.0.1"
        # The certificate must not vouch for names outside the test domain.
        bad = curl("--haproxy-protocol", "--cacert", str(nginx.cert),
                   "--resolve", f"other.invalid:{nginx.tls_port}:127.0.0.1",
                   f"https://other.invalid:{nginx.tls_port}/")
        assert bad.returncode != 0


def test_tls_from_python_ssl(tmp_path: Path) -> None:
    with run_nginx(tmp_path, tls=True) as nginx:
        ctx = ssl.create_default_context(cafile=str(nginx.cert))
        with socket.create_connection(("127.0.0.1", nginx.tls_port), timeout=30) as raw:
            raw.sendall(b"PROXY TCP4 198.51.100.1 127.0.0.1 1234 443\r\n")
            with ctx.wrap_socket(raw, server_hostname="example.test") as s:
                s.sendall(b"GET / HTTP/1.0\r\nHost: example.test\r\n\r\n")
                data = b""
                while chunk := s.recv(4096):
                    data += chunk
        seen = json.loads(data.partition(b"\r\n\r\n")[2])
        assert seen["ssl_server_name"] == "example.test"
        assert seen["proxy_protocol_addr"] == "198.51.100.1"


def test_ipv6_listener_and_bulk_bytes(tmp_path: Path) -> None:
    with run_nginx(tmp_path, ipv6=True) as nginx:
        assert nginx.ipv6_port is not None
        proc = curl("--haproxy-protocol", f"http://[::1]:{nginx.ipv6_port}/")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["proxy_protocol_addr"] == "::1"
        if nginx.has_bytes:
            body = subprocess.run(
                ["curl", "-sS", "--haproxy-protocol", nginx.url("/bytes/100000")],
                capture_output=True, timeout=60, check=True).stdout
            assert body == b"x" * 100000
        path = nginx.make_file("blob", 300_000)
        blob = subprocess.run(["curl", "-sS", "--haproxy-protocol", nginx.url(path)],
                              capture_output=True, timeout=60, check=True).stdout
        assert blob == pattern_bytes(300_000)


def test_nginx_leaves_no_process_behind(tmp_path: Path) -> None:
    with run_nginx(tmp_path, workers=2) as nginx:
        pid = nginx.proc.pid
        wait_for(lambda: len(_group_members(pid)) >= 3, what="master and two workers")
    assert _group_members(pid) == []


def _group_members(pgid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        # fields: state ppid pgrp ...; zombies are already gone for our purpose
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def test_haproxy_forwards_with_proxy_header_and_logs(tmp_path: Path) -> None:
    with run_nginx(tmp_path / "nginx") as nginx:
        front = free_port()
        config = f"""
frontend fe
    bind 127.0.0.1:{front}
    default_backend be
backend be
    server ngx 127.0.0.1:{nginx.port} send-proxy-v2
"""
        with run_haproxy(tmp_path / "haproxy", config) as haproxy:
            wait_for_port("127.0.0.1", front)
            proc = curl("-H", "Host: via.example.test", f"http://127.0.0.1:{front}/hp")
            assert proc.returncode == 0, proc.stderr
            seen = json.loads(proc.stdout)
            assert seen["proxy_protocol_addr"] == "127.0.0.1"
            assert seen["proxy_protocol_server_port"] == str(front)
            assert seen["host"] == "via.example.test"
            haproxy.wait_for_log("fe be/ngx")


def test_haproxy_rejects_bad_config_clearly(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="rejected the configuration"), \
            run_haproxy(tmp_path, "frontend fe\n    bind 127.0.0.1:1\n    bogus_keyword 1\n"):
        pass


def test_require_binary_skips_when_missing() -> None:
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        require_binary("definitely-not-a-real-binary-" + str(os.getpid()))


def test_free_ports_are_distinct_and_avoid_the_ones_named() -> None:
    first = free_ports(8)
    assert len(set(first)) == 8
    again = free_ports(8, avoid=first)
    assert len(set(again)) == 8 and not set(again) & set(first)
