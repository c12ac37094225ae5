"""The real failure, built in a network namespace, diagnosed and fixed.

Inside a fresh namespace (every address on its loopback, 192.0.2.0/24 TEST-NET, nothing
leaves it):

    192.0.2.100  an outside client
    192.0.2.10   the cloud load balancer: HAProxy, adding the PROXY header (send-proxy)
    192.0.2.30   the ingress controller pod: nginx with proxy_protocol on 80 and 443
    192.0.2.20   an application pod, calling the cluster's own public name
    192.0.2.40   the hairpin-proxy Service: our relay

kube-proxy's part is one ``iptables -t nat OUTPUT`` DNAT rule: connections to the load
balancer address go straight to the ingress pod, as kube-proxy does for a LoadBalancer IP
inside the cluster. Outside clients never meet that rule in a real cluster (their packets
reach the load balancer, not a node's service rules); here everyone shares one namespace, so
the rule exempts the outside client's address (``! -s 192.0.2.100``), and only that client
takes the load balancer path. The namespace's hosts file (``/etc/netns/<name>/hosts``, which
``ip netns exec`` mounts over /etc/hosts) stands in for cluster DNS, and is resolved for real
by curl and by the doctor (getaddrinfo). Rewriting it to the relay's address is what the
CoreDNS rewrite rule achieves.

nginx and HAProxy are the usual test peers, started inside the namespace through a small
wrapper on PATH that runs the real binary under ``ip netns exec``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.peers import read_text, require_binary, stop_process
from tests.peers.haproxy import run_haproxy
from tests.peers.nginx import run_nginx
from tests.waiting import wait_until

HOST = "shop.example.test"
CLIENT, LB, POD, INGRESS, PROXY = "192.0.2.100", "192.0.2.10", "192.0.2.20", "192.0.2.30", \
    "192.0.2.40"
NETNS_ETC = Path("/etc/netns")

HAPROXY_CONFIG = f"""\
frontend lb_http
    bind {LB}:80
    default_backend ingress_http
backend ingress_http
    server ingress {INGRESS}:80 send-proxy
frontend lb_https
    bind {LB}:443
    default_backend ingress_https
backend ingress_https
    server ingress {INGRESS}:443 send-proxy
"""


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=60, check=False)


def _must(*cmd: str) -> str:
    proc = _run(*cmd)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr}")
    return proc.stdout


@dataclass
class Netns:
    name: str
    ip: str

    def exec(self, *cmd: str) -> list[str]:
        return [self.ip, "netns", "exec", self.name, *cmd]

    def run(self, *cmd: str) -> subprocess.CompletedProcess[str]:
        return _run(*self.exec(*cmd))

    def point(self, host: str, address: str) -> None:
        """The namespace's DNS: one name, one address (plus localhost)."""
        (NETNS_ETC / self.name / "hosts").write_text(
            f"127.0.0.1 localhost\n{address} {host}\n")


def _can_build_namespaces(ip: str) -> str:
    """"" when a namespace with a nat table can be built here, else why not."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if shutil.which("iptables") is None and shutil.which("iptables", path="/usr/sbin:/sbin") \
            is None:
        return "iptables is not installed (scripts/system-deps.sh installs it)"
    probe = f"hpd-check-{secrets.token_hex(3)}"
    made = _run(ip, "netns", "add", probe)
    if made.returncode != 0:
        return f"`ip netns add` does not work here: {made.stderr.strip()}"
    try:
        nat = _run(ip, "netns", "exec", probe, "iptables", "-t", "nat", "-L", "OUTPUT", "-n")
        if nat.returncode != 0:
            return f"no iptables nat table in a namespace: {nat.stderr.strip()}"
    finally:
        _run(ip, "netns", "del", probe)
    return ""


@contextlib.contextmanager
def netns() -> Iterator[Netns]:
    ip = require_binary("ip")
    why = _can_build_namespaces(ip)
    if why:
        pytest.skip(why)
    ns = Netns(f"hpd-{os.getpid()}-{secrets.token_hex(3)}", ip)
    made_etc = not NETNS_ETC.exists()
    try:
        _must(ip, "netns", "add", ns.name)
        (NETNS_ETC / ns.name).mkdir(parents=True)
        ns.point(HOST, LB)
        _must(ip, "-n", ns.name, "link", "set", "lo", "up")
        for address in (CLIENT, LB, POD, INGRESS, PROXY):
            _must(ip, "-n", ns.name, "addr", "add", f"{address}/32", "dev", "lo")
        # kube-proxy's short-circuit for the load balancer address (see the module docstring).
        _must(*ns.exec("iptables", "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "-d", f"{LB}/32",
                       "!", "-s", f"{CLIENT}/32", "-m", "multiport", "--dports", "80,443",
                       "-j", "DNAT", "--to-destination", INGRESS))
        yield ns
    finally:
        _run(ip, "netns", "del", ns.name)
        shutil.rmtree(NETNS_ETC / ns.name, ignore_errors=True)
        if made_etc:
            with contextlib.suppress(OSError):
                NETNS_ETC.rmdir()


def wrap_binaries(ns: Netns, bindir: Path, names: tuple[str, ...],
                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Executables on PATH that run the real ones inside the namespace (``ip netns exec``
    execs the program in place, so the peers' process handling is unchanged)."""
    bindir.mkdir()
    for name in names:
        real = require_binary(name)
        script = bindir / name
        script.write_text(f'#!/bin/sh\nexec {ns.ip} netns exec {ns.name} {real} "$@"\n')
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")


@contextlib.contextmanager
def relay_in(ns: Netns, workdir: Path) -> Iterator[subprocess.Popen[bytes]]:
    log = workdir / "relay.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            ns.exec(sys.executable, "-m", "hairpin_proxy", "proxy", "--admin-listen", "",
                    "--listen", f"{PROXY}:80={INGRESS}:80",
                    "--listen", f"{PROXY}:443={INGRESS}:443"),
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    try:
        def up() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"relay exited:\n{read_text(log)}")
            return ns.run("curl", "-s", "-o", "/dev/null", "--max-time", "2",
                          f"http://{PROXY}/").returncode == 0
        wait_until(up, 60, "the relay in the namespace to answer", interval=0.1)
        yield proc
    finally:
        stop_process(proc)


def curl(ns: Netns, url: str, source: str) -> tuple[int, dict[str, Any] | None, str]:
    proc = ns.run("curl", "-sS", "-k", "--max-time", "10", "--interface", source, url)
    body = json.loads(proc.stdout) if proc.returncode == 0 else None
    return proc.returncode, body, proc.stderr


def doctor(ns: Netns, *args: str) -> tuple[int, dict[str, Any]]:
    proc = ns.run(sys.executable, "-m", "hairpin_proxy", "doctor", HOST, "--no-api",
                  "--output", "json", "--timeout", "5", *args)
    assert proc.stdout, proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout)
    return proc.returncode, report


def test_hairpin_in_a_namespace_diagnosed_and_fixed(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    require_binary("curl")
    listen = (f"listen {INGRESS}:80 proxy_protocol;\n"
              f"        listen {INGRESS}:443 ssl proxy_protocol;")
    with netns() as ns:
        wrap_binaries(ns, tmp_path / "bin", ("nginx", "haproxy"), monkeypatch)
        with run_nginx(tmp_path / "nginx", proxy_protocol=True, extra_conf=listen) as nginx, \
                run_haproxy(tmp_path / "haproxy", HAPROXY_CONFIG):
            # From outside, through the load balancer, everything works: HAProxy adds the
            # header and nginx sees the real client.
            rc, body, err = curl(ns, f"http://{HOST}/", CLIENT)
            assert rc == 0, err
            assert body is not None and body["proxy_protocol_addr"] == CLIENT
            rc, body, err = curl(ns, f"https://{HOST}/", CLIENT)
            assert rc == 0 and body is not None and body["scheme"] == "https", err

            # Step 0: from a pod, the same name fails: the DNAT skips the load balancer.
            rc, body, err = curl(ns, f"http://{HOST}/", POD)
            assert rc == 52 and "Empty reply" in err  # curl: empty reply from server
            rc, _, err = curl(ns, f"https://{HOST}/", POD)
            assert rc in (35, 56), err  # TLS connect error / receive failure
            assert "broken header" in nginx.error_log_text()

            code, report = doctor(ns)
            (h,) = report["hosts"]
            assert code == 1 and h["verdict"] == "hairpin-confirmed", h
            assert h["dns"] == {"addresses": [{"address": LB, "kind": "other"}],
                                "error": None, "overridden": False,
                                "resolver": "the system resolver (this pod's resolv.conf)"}
            assert h["http"]["bare"]["outcome"] in ("empty", "reset")
            assert h["http"]["proxy_v1"]["status"] == 200
            assert h["tls"]["proxy_v2"]["status"] == 200

            # Step 3: the name now answers with the relay's address (the rewrite rule's
            # effect); the pod's requests succeed and nginx sees the pod's own address.
            with relay_in(ns, tmp_path):
                ns.point(HOST, PROXY)
                for url in (f"http://{HOST}/", f"https://{HOST}/"):
                    rc, body, err = curl(ns, url, POD)
                    assert rc == 0, err
                    assert body is not None and body["proxy_protocol_addr"] == POD
                    assert body["proxy_protocol_server_addr"] == PROXY

                code, report = doctor(ns, "--proxy-address", PROXY)
                (h,) = report["hosts"]
                assert code == 0 and h["verdict"] == "fixed", h
                assert h["dns"]["addresses"] == [{"address": PROXY, "kind": "proxy"}]
                assert h["http"]["bare"]["status"] == 200
                assert h["tls"]["bare"]["status"] == 200
