"""The forged-PROXY-header check from a pod's address, against a real nginx that expects
PROXY, in two network namespaces joined by a veth pair (nothing leaves them):

    pod namespace       10.244.0.5/16   an ordinary pod: the doctor's check runs here
    ingress namespace   10.244.1.10/16  the ingress controller's pod: nginx, ``listen ...
                                        proxy_protocol``, its answer echoing
                                        ``$proxy_protocol_addr`` and ``$remote_addr``

- nginx believes PROXY from everywhere (``set_real_ip_from 0.0.0.0/0``, ``real_ip_header
  proxy_protocol``, what ingress-nginx does by default): ``forgeable``;
- ``set_real_ip_from`` narrowed to the load balancer's range: the header is parsed, its
  address not believed, and the answer shows it: ``not-believed``;
- an iptables rule in the ingress namespace drops the pod CIDR's packets to port 80, standing
  for the guard's NetworkPolicy: ``guarded``.
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
from pathlib import Path
from typing import Any

import pytest

from tests.doctor.test_netns import Netns, wrap_binaries
from tests.peers import require_binary
from tests.peers.nginx import run_nginx

POD, INGRESS = "10.244.0.5", "10.244.1.10"
BELIEVE = "set_real_ip_from 0.0.0.0/0;"
NARROWED = "set_real_ip_from 198.51.100.0/24;"


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=60, check=False)


def _must(*cmd: str) -> None:
    proc = _run(*cmd)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr}")


@contextlib.contextmanager
def pod_and_ingress() -> Iterator[tuple[Netns, Netns]]:
    ip = require_binary("ip")
    if os.geteuid() != 0:
        pytest.skip("needs root to create network namespaces")
    if shutil.which("iptables") is None:
        pytest.skip("iptables is not installed (scripts/system-deps.sh installs it)")
    tag = f"{os.getpid() % 10000}{secrets.token_hex(2)}"
    pod, ing = Netns(f"hpf-pod-{tag}", ip), Netns(f"hpf-ing-{tag}", ip)
    made: list[Netns] = []
    try:
        for ns in (pod, ing):
            made_ns = _run(ip, "netns", "add", ns.name)
            if made_ns.returncode != 0:
                pytest.skip(f"`ip netns add` does not work here: {made_ns.stderr.strip()}")
            made.append(ns)
            _must(ip, "-n", ns.name, "link", "set", "lo", "up")
        _must(ip, "-n", pod.name, "link", "add", "eth0", "type", "veth", "peer", "name",
              "eth0", "netns", ing.name)
        for ns, address in ((pod, POD), (ing, INGRESS)):
            _must(ip, "-n", ns.name, "addr", "add", f"{address}/16", "dev", "eth0")
            _must(ip, "-n", ns.name, "link", "set", "eth0", "up")
        yield pod, ing
    finally:
        for ns in made:
            _run(ip, "netns", "del", ns.name)


def probe(pod: Netns, timeout: float = 5.0) -> dict[str, Any]:
    """The doctor's forged check, run in the pod namespace."""
    code = ("import json, sys\n"
            "from hairpin_proxy.doctor import forged\n"
            f"a = forged.check({INGRESS!r}, 80, version='v1', tls=False, "
            f"host='shop.example.test', timeout={timeout})\n"
            "v, why = forged.judge(a)\n"
            "print(json.dumps({'outcome': a.outcome, 'own': a.own_address, 'body': a.body, "
            "'verdict': v, 'why': why}))\n")
    proc = pod.run(sys.executable, "-c", code)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def nginx_conf(trust: str) -> str:
    return (f"listen {INGRESS}:80 proxy_protocol;\n"
            f"        {trust}\n"
            "        real_ip_header proxy_protocol;")


def echoed(result: dict[str, Any]) -> dict[str, Any]:
    body = result["body"]
    out: dict[str, Any] = json.loads(body[body.index("{"):])
    return out


def test_forgeable_not_believed_and_guarded_from_a_pod(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    with pod_and_ingress() as (pod, ing):
        wrap_binaries(ing, tmp_path / "bin", ("nginx",), monkeypatch)

        with run_nginx(tmp_path / "believing", proxy_protocol=True,
                       extra_conf=nginx_conf(BELIEVE)):
            got = probe(pod)
            assert got["verdict"] == "forgeable", got
            assert got["own"] == POD
            answer = echoed(got)
            assert answer["proxy_protocol_addr"] == "192.0.2.1"
            assert answer["remote_addr"] == "192.0.2.1"  # believed: logged, allow-listed

        with run_nginx(tmp_path / "narrowed", proxy_protocol=True,
                       extra_conf=nginx_conf(NARROWED)):
            got = probe(pod)
            assert got["verdict"] == "not-believed", got
            answer = echoed(got)
            assert answer["proxy_protocol_addr"] == "192.0.2.1"  # parsed ...
            assert answer["remote_addr"] == POD  # ... and not believed

            # The guard's NetworkPolicy, as the CNI would apply it: the pod CIDR's packets to
            # the PROXY port are dropped (everything outside it, and our proxies, admitted).
            _must(*ing.exec("iptables", "-A", "INPUT", "-p", "tcp", "--dport", "80",
                            "-s", "10.244.0.0/16", "!", "-i", "lo", "-j", "DROP"))
            got = probe(pod, timeout=1.5)
            assert got["verdict"] == "guarded" and got["outcome"] == "timeout", got
            # The rule drops, it does not break nginx: from inside its namespace it answers.
            inside = ing.run("curl", "-sS", "--max-time", "5", "--haproxy-protocol",
                             f"http://{INGRESS}/")
            assert inside.returncode == 0 and '"remote_addr"' in inside.stdout, inside.stderr
