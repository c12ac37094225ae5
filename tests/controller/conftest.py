"""Controller tests: the real CLI in a subprocess against the fake API server over HTTP."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.corefiles import NODE_LOCAL_UPSTREAM
from tests.fakeapi.fixtures import (
    corefile_configmap,
    endpoint_slice,
    fake_api,
    kubeconfig,
    service,
)
from tests.fakeapi.server import FakeApiServer
from tests.peers import CliProcess, free_port
from tests.waiting import wait_until

# wait_until is tests.waiting's, re-exported: controller tests import it from here.
__all__ = ["fake_api", "kubeconfig", "wait_until"]

NAMESPACE = "hairpin-proxy"
PROXY_FQDN = "hairpin-proxy.hairpin-proxy.svc.cluster.local."
PROXY_IP = "10.96.0.50"

# kubeadm's default Corefile.
COREFILE = """\
.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30
    loop
    reload
    loadbalance
}
"""

# NodeLocal DNSCache's Corefile as the upstream manifest installs it.
NODE_LOCAL = NODE_LOCAL_UPSTREAM


# Short timings so that elections, debouncing and reconnects happen within a test.
FAST = ("--lease-duration", "3", "--renew-deadline", "2", "--retry-period", "0.5",
        "--debounce", "0.1", "--watch-timeout", "5", "--write-interval", "0.2",
        # Verification asks public DNS, which tests reach only through their own dnsmasq
        # (tests/controller/test_verification.py turns it on).
        "--verify-hosts", "off")


# The published hosts for the etchosts node agents: written only when the controller is told
# where (the etchosts component's flag; off by default).
PUBLISHED = "hairpin-proxy-hosts"
PUBLISH = ("--publish-configmap", PUBLISHED)


def corefile_text(api: FakeApiServer) -> str:
    cm = api.get("ConfigMap", "kube-system", "coredns")
    assert cm is not None
    text: str = cm["data"]["Corefile"]
    return text


def corefile_puts(api: FakeApiServer) -> int:
    return api.count("PUT", r"/namespaces/kube-system/configmaps/coredns$")


class Controller(CliProcess):
    """One `hairpin-proxy controller` process, started exactly as the CLI runs."""

    def __init__(self, api: FakeApiServer, kubeconfig: Path, log: Path, *args: str,
                 command: str = "controller") -> None:
        self.api = api
        port = free_port()
        argv = [command, "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE,
                "--log-format", "json"]
        if command == "controller":
            argv += ["--admin-listen", f"127.0.0.1:{port}", *FAST]
        super().__init__([*argv, *args], log, port)

    def ready(self) -> bool:
        assert self.proc.poll() is None, f"controller exited:\n{self.log()}"
        return self.get("/readyz")[0] == 200

    def wait_ready(self, timeout: float = 30.0) -> None:
        wait_until(self.ready, timeout, "controller ready")

    def records(self) -> list[dict[str, object]]:
        out = []
        for line in self.log().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out


@pytest.fixture
def cluster(fake_api: FakeApiServer) -> FakeApiServer:
    """The fake API with our namespace, the proxy Service with a ready endpoint, and a kubeadm
    CoreDNS ConfigMap."""
    fake_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    fake_api.create(service(NAMESPACE, "hairpin-proxy", cluster_ips=[PROXY_IP]))
    fake_api.create(endpoint_slice(NAMESPACE, "hairpin-proxy"))
    fake_api.create(corefile_configmap(COREFILE))
    return fake_api


@pytest.fixture
def start(cluster: FakeApiServer, kubeconfig: Path,
          tmp_path: Path) -> Iterator[Callable[..., Controller]]:
    """Start controllers (``start(*flags)``); every one is stopped after the test."""
    started: list[Controller] = []

    def run(*args: str, command: str = "controller") -> Controller:
        ctl = Controller(cluster, kubeconfig, tmp_path / f"{command}-{len(started)}.log", *args,
                         command=command)
        started.append(ctl)
        return ctl

    yield run
    for ctl in started:
        ctl.stop()
