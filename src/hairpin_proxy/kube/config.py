"""Where the API server is and who we are: kubeconfig or in-cluster, and our own namespace.

Authentication, TLS and token-file rotation (re-read on 401, as client-go does) come from
lightkube's configuration layer; this module only decides which configuration applies.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.core.exceptions import ConfigError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_KUBECONFIG = Path("~/.kube/config")


class KubeConfigError(RuntimeError):
    """No usable API server configuration was found."""


@dataclass(frozen=True)
class ClusterConfig:
    config: SingleConfig
    # "kubeconfig" or "in-cluster": shown in the start-up log line.
    source: str

    @property
    def server(self) -> str:
        return self.config.cluster.server

    @property
    def context_namespace(self) -> str | None:
        return self.config.context.namespace if self.config.context else None


def load(kubeconfig: Path | None, *, service_account: Path = SERVICE_ACCOUNT_DIR,
         environ: Mapping[str, str] | None = None) -> ClusterConfig:
    """An explicit kubeconfig wins; else the in-cluster service account; else ~/.kube/config."""
    env = os.environ if environ is None else environ
    if kubeconfig is not None:
        # KUBECONFIG may list several files; like kubectl's first, use the first that exists.
        parts = [Path(p) for p in str(kubeconfig).split(os.pathsep) if p]
        existing = [p for p in parts if p.expanduser().is_file()]
        return _from_file(existing[0] if existing else kubeconfig)
    if (service_account / "token").is_file() and env.get("KUBERNETES_SERVICE_HOST"):
        try:
            cfg = KubeConfig.from_service_account(service_account).get()
        except (ConfigError, KeyError) as exc:
            raise KubeConfigError(f"in-cluster configuration: {exc}") from None
        assert cfg is not None
        return ClusterConfig(cfg, "in-cluster")
    default = DEFAULT_KUBECONFIG.expanduser()
    if default.is_file():
        return _from_file(default)
    raise KubeConfigError("no Kubernetes configuration: not running in a cluster, no "
                          "--kubeconfig / KUBECONFIG and no ~/.kube/config")


def _from_file(path: Path) -> ClusterConfig:
    if not path.expanduser().is_file():
        raise KubeConfigError(f"kubeconfig {path}: no such file")
    try:
        cfg = KubeConfig.from_file(path.expanduser()).get()
    except FileNotFoundError:
        raise KubeConfigError(f"kubeconfig {path}: no such file") from None
    except (ConfigError, KeyError, TypeError, ValueError) as exc:
        raise KubeConfigError(f"kubeconfig {path}: {exc}") from None
    assert cfg is not None
    return ClusterConfig(cfg, "kubeconfig")


def own_namespace(flag: str, cluster: ClusterConfig | None, *,
                  service_account: Path = SERVICE_ACCOUNT_DIR,
                  environ: Mapping[str, str] | None = None) -> str:
    """--namespace, else POD_NAMESPACE, else the service account's, the context's, "default"."""
    env = os.environ if environ is None else environ
    if flag:
        return flag
    if env.get("POD_NAMESPACE"):
        return env["POD_NAMESPACE"]
    try:
        ns = (service_account / "namespace").read_text().strip()
    except OSError:
        ns = ""
    if ns:
        return ns
    if cluster is not None and cluster.context_namespace:
        return cluster.context_namespace
    return "default"
