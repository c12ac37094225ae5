"""Which API server and which namespace: kubeconfig, in-cluster, and the fallbacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from hairpin_proxy.kube import config as kconfig
from tests.fakeapi.server import FakeApiServer


def test_explicit_kubeconfig_uses_its_current_context(fake_api: FakeApiServer,
                                                      tmp_path: Path) -> None:
    path = fake_api.write_kubeconfig(tmp_path / "kc", token="t", namespace="team")
    cfg = kconfig.load(path)
    assert cfg.source == "kubeconfig"
    assert cfg.server == fake_api.url
    assert cfg.context_namespace == "team"


def test_kubeconfig_path_list_uses_the_first_existing(fake_api: FakeApiServer,
                                                       tmp_path: Path) -> None:
    path = fake_api.write_kubeconfig(tmp_path / "kc", namespace="team")
    cfg = kconfig.load(Path(f"{tmp_path / 'absent'}:{path}"))
    assert cfg.server == fake_api.url


def test_missing_or_broken_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(kconfig.KubeConfigError, match="no such file"):
        kconfig.load(tmp_path / "absent")
    bad = tmp_path / "bad"
    bad.write_text("clusters: []\ncontexts: []\n")
    with pytest.raises(kconfig.KubeConfigError, match="kubeconfig"):
        kconfig.load(bad)


def _service_account(tmp_path: Path, namespace: str = "hairpin") -> Path:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("secret-token")
    (sa / "namespace").write_text(namespace)
    (sa / "ca.crt").write_text("")
    return sa


def test_in_cluster_service_account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sa = _service_account(tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    cfg = kconfig.load(None, service_account=sa)
    assert cfg.source == "in-cluster"
    assert cfg.server == "https://[fd00::1]:443"
    assert cfg.config.user is not None
    # The token is read from its file (and re-read on 401), so rotation is followed.
    assert cfg.config.user.token_file == str(sa / "token")


def test_nothing_configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(kconfig.KubeConfigError, match="no Kubernetes configuration"):
        kconfig.load(None, service_account=tmp_path / "none")


def test_own_namespace_precedence(fake_api: FakeApiServer, tmp_path: Path) -> None:
    cluster = kconfig.load(fake_api.write_kubeconfig(tmp_path / "kc", namespace="ctx"))
    sa = _service_account(tmp_path, "from-sa")
    env = {"POD_NAMESPACE": "from-env"}
    none = tmp_path / "none"
    assert kconfig.own_namespace("flag", cluster, service_account=sa, environ=env) == "flag"
    assert kconfig.own_namespace("", cluster, service_account=sa, environ=env) == "from-env"
    assert kconfig.own_namespace("", cluster, service_account=sa, environ={}) == "from-sa"
    assert kconfig.own_namespace("", cluster, service_account=none, environ={}) == "ctx"
    assert kconfig.own_namespace("", None, service_account=none, environ={}) == "default"
