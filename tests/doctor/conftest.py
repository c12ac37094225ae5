"""Doctor tests run the real CLI against real nginx, the relay and the fake API server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakeapi.fixtures import fake_api, kubeconfig
from tests.peers.nginx import Nginx, run_nginx
from tests.relay.helpers import Relay, run_relay

__all__ = ["fake_api", "kubeconfig", "plain_nginx", "pp_nginx", "relay"]

# The ingress controller's stand-in (pp_nginx) listens here; our relay (relay) there.
LB_IP = "127.0.0.1"
PROXY_IP = "127.0.0.2"


@pytest.fixture(scope="module")
def pp_nginx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nginx]:
    """nginx that wants a PROXY header (``listen ... proxy_protocol``), HTTP and TLS."""
    with run_nginx(tmp_path_factory.mktemp("pp"), proxy_protocol=True) as n:
        yield n


@pytest.fixture(scope="module")
def plain_nginx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nginx]:
    """nginx without proxy_protocol, HTTP and TLS."""
    with run_nginx(tmp_path_factory.mktemp("plain"), proxy_protocol=False) as n:
        yield n


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory, pp_nginx: Nginx) -> Iterator[Relay]:
    """Our relay on the proxy address, in front of the proxy_protocol nginx."""
    with run_relay(tmp_path_factory.mktemp("relay"),
                   [f"{PROXY_IP}:{{port}}={LB_IP}:{pp_nginx.port}",
                    f"{PROXY_IP}:{{port}}={LB_IP}:{pp_nginx.tls_port}"]) as r:
        yield r
