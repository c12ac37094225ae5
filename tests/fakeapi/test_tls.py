"""The fake API server over HTTPS: a client that trusts the kubeconfig's CA talks to it, as a
controller talks to a cluster's API server; one that does not trust it cannot."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hairpin_proxy.kube import config
from hairpin_proxy.kube.client import ApiError, KubeClient
from tests.fakeapi.fixtures import ingress
from tests.fakeapi.server import FakeApiServer
from tests.fakeapi.tls import make_serving_cert


def _get(kubeconfig: Path, path: str) -> object:
    async def main() -> object:
        client = KubeClient.from_cluster(config.load(kubeconfig), timeout=10)
        try:
            return await client.get(path)
        finally:
            await client.close()

    return asyncio.run(main())


def test_a_client_with_the_kubeconfig_ca_reads_over_https(tmp_path: Path) -> None:
    with FakeApiServer(tls=make_serving_cert(tmp_path)) as api:
        assert api.url.startswith("https://127.0.0.1:")
        api.create(ingress("shop", "web", tls_hosts=["shop.example.com"]))
        got = _get(api.write_kubeconfig(tmp_path / "kubeconfig"),
                   "/apis/networking.k8s.io/v1/namespaces/shop/ingresses/web")
        assert isinstance(got, dict)
        assert got["spec"]["tls"][0]["hosts"] == ["shop.example.com"]


def test_a_client_that_does_not_trust_the_certificate_is_refused(tmp_path: Path) -> None:
    with FakeApiServer(tls=make_serving_cert(tmp_path)) as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        # Another CA than the one that signed the server's certificate.
        (tmp_path / "other").mkdir()
        other = make_serving_cert(tmp_path / "other")
        assert api.tls is not None
        text = kubeconfig.read_text().replace(str(api.tls.cert), str(other.cert))
        kubeconfig.write_text(text)
        with pytest.raises(ApiError) as err:
            _get(kubeconfig, "/api/v1/namespaces")
        assert err.value.status == 0
        assert "certificate" in str(err.value).lower()


def test_discovery_names_the_server_address_without_its_scheme(tmp_path: Path) -> None:
    with FakeApiServer(tls=make_serving_cert(tmp_path)) as api:
        got = _get(api.write_kubeconfig(tmp_path / "kubeconfig"), "/api")
        assert isinstance(got, dict)
        assert got["serverAddressByClientCIDRs"][0]["serverAddress"] == \
            f"127.0.0.1:{api.port}"
