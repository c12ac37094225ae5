"""The README's "Check it works" holds, as written, on the default install and on a second
data plane: its commands are read from README.md and run against real peers where there are
some here.

- ``kubectl -n hairpin-proxy get services …``: the real kubectl, against the fake API server.
- ``dig``: the same questions (A, AAAA) asked with dnspython of a real dnsmasq that stands in
  for CoreDNS. There is no CoreDNS here, so the test plays it: dnsmasq answers what the
  controller's rules in the Corefile answer (and resolves the data planes' Service names).
- ``curl``: the real curl, as written, plus ``--connect-to`` for kube-proxy's part (a proxy
  Service's ClusterIP:80 is its listener on loopback), through the real relay
  (``hairpin-proxy proxy`` with the controller's targets table, as the proxies mount it) to
  real nginx servers with ``proxy_protocol`` standing in for the two ingress controllers.

The default install (ingress-nginx, the proxy's TARGET_SERVER) answers with ``hairpin-proxy``'s
ClusterIP; the second data plane (another ingress-nginx release) with ``hairpin-proxy-t1``'s.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dns.message
import dns.query
import dns.rcode
import dns.rdatatype

from hairpin_proxy import corefile
from hairpin_proxy.targets.slots import listen_ports, slot_of_service_name
from tests.controller.conftest import Controller, corefile_text
from tests.controller.test_default_install import answers, ingress_nginx
from tests.controller.test_targets_e2e import Start, sync_table
from tests.fakeapi.fixtures import ingress
from tests.fakeapi.server import FakeApiServer
from tests.peers.nginx import Nginx, run_nginx
from tests.relay.helpers import run_relay
from tests.verify.dnsmasq import Dnsmasq
from tests.waiting import wait_until

README = Path(__file__).parents[2] / "README.md"
PLACEHOLDER = "www.example.com"
# Hosts under example.test that the test dnsmasq's fixed zone does not cover.
DEFAULT_HOST = "shop.example.test"
SECOND_HOST = "api.example.test"


def check_block() -> list[str]:
    """The README's "Check it works" shell block, its lines (the pod's script unwrapped)."""
    text = README.read_text()
    section = text[text.index("**Check it works:**"):]
    block = re.search(r"```shell\n(.*?)```", section, re.S)
    assert block is not None, "the check has no shell block"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def readme_command(prefix: str) -> list[str]:
    """The README's check command that starts with ``prefix``, split as the shell would."""
    for line in check_block():
        if line.startswith(prefix):
            return shlex.split(line.rstrip("'"))
    raise AssertionError(f"the README's check has no {prefix!r} line")


def cluster_ips(kubeconfig: Path) -> dict[str, str]:
    """The README's first command, by the real kubectl: Service name → ClusterIP."""
    cmd = readme_command("kubectl -n hairpin-proxy get services")
    out = subprocess.run([cmd[0], "--kubeconfig", str(kubeconfig), *cmd[1:]],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["SERVICE", "CLUSTER-IP"], out
    return {name: ip for name, ip in rows[1:]}


def dig(server: Dnsmasq, host: str, line: str) -> list[str]:
    """The README's ``dig`` line (``dig +short HOST A``, ``dig +noall +answer +authority HOST
    AAAA``) asked of the CoreDNS stand-in: the records of its type in the answer."""
    cmd = readme_command(line)
    assert cmd[0] == "dig" and cmd[-2] == PLACEHOLDER, cmd
    rdtype = cmd[-1]
    address, port = server.server.rsplit(":", 1)
    reply = dns.query.udp(dns.message.make_query(host, rdtype), address, port=int(port),
                          timeout=5)
    assert reply.rcode() == dns.rcode.NOERROR, (host, rdtype, reply)
    return [item.to_text() for rrset in reply.answer
            if rrset.rdtype == dns.rdatatype.from_text(rdtype) for item in rrset]


def curl(host: str, port: int) -> str:
    """The README's curl, as written, with kube-proxy's part: ClusterIP:80 is ``port``."""
    cmd = readme_command("curl ")
    assert cmd[-1] == f"http://{PLACEHOLDER}/.well-known/acme-challenge/check"
    cmd = [*cmd[:-1], "--connect-to", f"{host}:80:127.0.0.1:{port}",
           cmd[-1].replace(PLACEHOLDER, host)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# Every line of the README's check, by how it starts: the test runs each (the pod's own
# lines: ``kubectl run`` is the pod, ``apk add`` its tools).
HANDLED = ("kubectl -n hairpin-proxy get services", "kubectl run hairpin-check",
           "apk add -q bind-tools curl", f"dig +short {PLACEHOLDER} A",
           f"dig +short {PLACEHOLDER} TXT", f"dig +noall +answer +authority {PLACEHOLDER} AAAA",
           "curl ")


def test_every_line_of_the_readme_check_is_one_this_test_runs() -> None:
    lines = check_block()
    unknown = [line for line in lines if not line.startswith(HANDLED)]
    assert not unknown, f"the README's check has lines this test does not run: {unknown}"
    assert all(any(line.startswith(h) for line in lines) for h in HANDLED)


def types_answered(text: str, host: str) -> set[str]:
    """The query types our template stanzas answer for ``host`` (CoreDNS: any other type
    goes on to the rest of the server block, upstream)."""
    out = set()
    for d in corefile.parse(text).root_blocks(53)[0].directives:
        if d.name != "template":
            continue
        inner = [i for b in d.blocks for i in b.directives]
        if any(re.search(rx, host.lower() + ".") for i in inner if i.name == "match"
               for rx in i.args):
            out.add(d.args[1])
    return out


def coredns_standin(api: FakeApiServer, server: Dnsmasq) -> None:
    """CoreDNS's part: the managed hosts answer what the controller's rules say."""
    server.reload({h: [*a.ipv4, *a.ipv6] for h, a in answers(api).items()})


def test_the_readme_check_holds_on_the_default_install_and_a_second_data_plane(
        cluster: FakeApiServer, start: Start, kubeconfig: Path, tmp_path: Path) -> None:
    assert [line.split()[0] for line in check_block()][:2] == ["kubectl", "kubectl"]
    with run_nginx(tmp_path / "nginx") as main, run_nginx(tmp_path / "internal") as internal:
        planes = {DEFAULT_HOST: main, SECOND_HOST: internal}
        ingress_nginx(cluster, service_ports=ports_of(main))
        ingress_nginx(cluster, namespace="ingress-internal", release="internal",
                      cls="internal", default=False, lb="203.0.113.20",
                      service_ports=ports_of(internal))
        cluster.create(ingress("shop", "web", tls_hosts=[DEFAULT_HOST], class_name="nginx"))
        cluster.create(ingress("shop", "api", tls_hosts=[SECOND_HOST], class_name="internal"))
        # The cluster's DNS for the proxies (the data planes' Service names), and the CoreDNS
        # stand-in for the check's pod, which answers our hosts as the rules say.
        for sub in ("cluster-dns", "coredns"):
            (tmp_path / sub).mkdir()
        cluster_dns = Dnsmasq(tmp_path / "cluster-dns", hosts={
            "ingress-nginx-controller.ingress-internal.svc.cluster.local": ["127.0.0.1"]})
        coredns = Dnsmasq(tmp_path / "coredns", hosts={})
        cluster_dns.start()
        coredns.start()
        try:
            ctl = start("--target-settle", "0")
            run_check(cluster, ctl, kubeconfig, tmp_path,
                      dns_servers=Dns(cluster_dns.server, coredns), planes=planes)
        finally:
            coredns.stop()
            cluster_dns.stop()


@dataclass(frozen=True)
class Dns:
    cluster: str       # ADDR:PORT the proxies resolve Service names with
    coredns: Dnsmasq   # what pods ask


def served(plane: Nginx, before: int) -> Callable[[], bool]:
    return lambda: len(plane.access_log_entries()) > before


def ports_of(n: Nginx) -> list[dict[str, Any]]:
    return [{"name": "http", "port": n.port, "protocol": "TCP"},
            {"name": "https", "port": n.tls_port, "protocol": "TCP"}]


def run_check(cluster: FakeApiServer, ctl: Controller, kubeconfig: Path, tmp_path: Path, *,
              dns_servers: Dns, planes: dict[str, Nginx]) -> None:
    ctl.wait_ready()
    wait_until(lambda: set(answers(cluster)) == set(planes), what="both hosts' rules")
    ips = cluster_ips(kubeconfig)
    assert set(ips) == {"hairpin-proxy", "hairpin-proxy-t1"}
    path = tmp_path / "targets.json"
    (entry,) = sync_table(cluster, path)  # the kubelet's part
    assert entry.key == "ingressclass/internal"
    main_plane = planes[DEFAULT_HOST]
    with run_relay(tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:{main_plane.port}"],
                   "--targets-file", str(path), "--targets-poll", "0.1",
                   "--targets-address", "127.0.0.1", "--dns-server", dns_servers.cluster) as relay:
        wait_until(lambda: relay.metric("hairpin_proxy_targets_table_slots") == 1,
                   what="the relay serves the second data plane's slot")
        server = dns_servers.coredns
        coredns_standin(cluster, server)
        listener = {"hairpin-proxy": relay.ports[0]}
        for name in ips:
            slot = slot_of_service_name(name)
            if slot is not None:
                listener[name] = listen_ports(slot)[0]
        expected = {DEFAULT_HOST: "hairpin-proxy", SECOND_HOST: "hairpin-proxy-t1"}
        for host, service in expected.items():
            # "The A answer is one of the CLUSTER-IPs the first command lists".
            (address,) = dig(server, host, f"dig +short {PLACEHOLDER} A")
            assert address == ips[service], host
            # Single stack: AAAA is an empty NOERROR answer, never the load balancer's.
            assert dig(server, host, f"dig +noall +answer +authority {PLACEHOLDER} AAAA") == []
            # "TXT prints your public TXT records, exactly as outside the cluster": our
            # rules answer A and AAAA only, TXT goes on upstream.
            assert readme_command(f"dig +short {PLACEHOLDER} TXT")[-1] == "TXT"
            assert types_answered(corefile_text(cluster), host) == {"A", "AAAA"}, host
            seen = len(planes[host].access_log_entries())
            # "curl prints an HTTP status from your ingress controller".
            assert curl(host, listener[service]).strip() == "200"
            wait_until(served(planes[host], seen), what=f"{host}'s own data plane served it")
