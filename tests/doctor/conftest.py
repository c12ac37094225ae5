"""Doctor tests run the real CLI against real nginx, the relay and the fake API server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakeapi.fixtures import fake_api, kubeconfig
from tests.peers.nginx import Nginx, run_nginx

__all__ = ["fake_api", "kubeconfig", "plain_nginx", "pp_nginx"]


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
