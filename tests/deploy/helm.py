"""Helpers to render the Helm chart with the real `helm` binary, and its Kustomize twins.

`helm` is the one scripts/system-deps.sh (scripts/helm-deps.sh) puts into .tools/bin of the
checkout, at the version it pins; nothing else is used, so every machine tests the same binary.
"""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.rendering import DEPLOY, REPO, Doc, render

HELM = REPO / ".tools" / "bin" / "helm"
HELM_VERSION = "v4.1.4"
CHART = DEPLOY / "helm" / "hairpin-proxy"
# The release's own namespace: any but the two the chart creates.
RELEASE_NAMESPACE = "kube-system"
# Labels Helm charts conventionally add; the only difference allowed with the Kustomize twin.
HELM_LABELS = {"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance",
               "app.kubernetes.io/version"}
HOOK = "helm.sh/hook"

# Each platform preset: its values and the Kustomize overlay it stands for.
PRESETS: dict[str, tuple[dict[str, Any], str]] = {
    "kubeadm": ({}, "base"),
    "k3s": ({"platform": "k3s"}, "overlays/k3s"),
    "aks": ({"platform": "aks"}, "overlays/aks"),
    "rke2": ({"platform": "rke2"}, "overlays/rke2"),
    "etchosts": ({"etchosts": {"enabled": True}}, "overlays/etchosts"),
}
# Each component the chart offers: the values that select it (an independent statement of the
# generator's mapping, so a wrong mapping fails the equivalence test).
_COMPONENT_VALUES: dict[str, dict[str, Any]] = {
    "etchosts": {"etchosts": {"enabled": True}},
    "monitoring": {"monitoring": {"enabled": True}},
    "networkpolicy": {"networkPolicy": {"enabled": True}},
    "nudge-coredns": {"nudgeCoredns": {"enabled": True}},
    "proxy-v2": {"proxy": {"proxyProtocol": "v2"}},
    "traefik": {"traefik": {"enabled": True}},
    "traefik-ingressroute": {"traefikIngressRoutes": {"enabled": True}},
    # Mapped ahead of their arrival from other branches; tested once they exist.
    "verify-off": {"controller": {"verifyHosts": False}},
    "guard-data-planes": {"guardDataPlanes": {"enabled": True}},
}
COMPONENT_VALUES = {name: values for name, values in _COMPONENT_VALUES.items()
                    if (DEPLOY / "components" / name / "kustomization.yaml").exists()}
# Components that need another to make sense, and come with it.
COMPANIONS = {("etchosts", "networkpolicy"): "networkpolicy-etchosts"}
# Components a platform preset stands for (the image component is in the base).
BY_PRESET = {"coredns-import": "aks", "rke2": "rke2", "image": "kubeadm"}


def helm_or_skip() -> str:
    if not HELM.exists():
        pytest.skip(f"no {HELM.relative_to(REPO)}: run scripts/system-deps.sh (it installs helm "
                    f"{HELM_VERSION} there)")
    out = subprocess.run([str(HELM), "version", "--template", "{{.Version}}"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.stdout == HELM_VERSION, (
        f"{HELM} is {out.stdout or out.stderr}, not {HELM_VERSION}: re-run scripts/system-deps.sh")
    return str(HELM)


def merge(*layers: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merge(out[key], value)
            else:
                out[key] = copy.deepcopy(value)
    return out


def run_helm(helm: str, args: list[str], values: dict[str, Any],
             namespace: str = RELEASE_NAMESPACE) -> subprocess.CompletedProcess[str]:
    """helm with the values on stdin; `args` names the chart."""
    return subprocess.run([helm, *args, "--namespace", namespace, "--values", "-"],
                          input=yaml.safe_dump(values), capture_output=True, text=True,
                          timeout=120, check=False)


def template(helm: str, values: dict[str, Any], namespace: str = RELEASE_NAMESPACE,
             chart: Path = CHART) -> list[Doc]:
    out = run_helm(helm, ["template", "hairpin-proxy", str(chart)], values, namespace)
    assert out.returncode == 0, f"helm template with {values} failed:\n{out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def refusal(helm: str, values: dict[str, Any], namespace: str = RELEASE_NAMESPACE) -> str:
    """helm template's error for values it must refuse."""
    out = run_helm(helm, ["template", "hairpin-proxy", str(CHART)], values, namespace)
    assert out.returncode != 0, f"helm template accepted {values}"
    return out.stderr


def is_hook(d: Doc) -> bool:
    return HOOK in (d["metadata"].get("annotations") or {})


def installed(docs: list[Doc]) -> list[Doc]:
    """The release's objects, without the hooks and Helm's own labels."""
    out = []
    for doc in docs:
        if is_hook(doc):
            continue
        d = copy.deepcopy(doc)
        labels = d["metadata"].get("labels") or {}
        assert set(labels) >= HELM_LABELS, f"{d['kind']}/{d['metadata']['name']}: no labels"
        d["metadata"]["labels"] = {k: v for k, v in labels.items() if k not in HELM_LABELS}
        if not d["metadata"]["labels"]:  # the chart added the only ones
            del d["metadata"]["labels"]
        out.append(d)
    return out


def hooks(docs: list[Doc]) -> list[Doc]:
    return [d for d in docs if is_hook(d)]


def kustomize_twin(kubectl: str, work: Path, overlay: str, components: list[str],
                   deploy: Path = DEPLOY) -> list[Doc]:
    """`kubectl kustomize` of the overlay (or base) with the components added."""
    work.mkdir(parents=True, exist_ok=True)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(deploy / overlay, work)],
        "components": [os.path.relpath(deploy / "components" / c, work) for c in components]}
    (work / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return render(kubectl, work)


def by_key(docs: list[Doc]) -> dict[tuple[str, str, str], Doc]:
    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
            for d in docs}


def differences(chart: list[Doc], twin: list[Doc]) -> list[str]:
    """Each object only one side has, and each field path where the two differ."""
    a, b = by_key(chart), by_key(twin)
    out = [f"only in the chart: {k}" for k in sorted(set(a) - set(b))]
    out += [f"only in Kustomize: {k}" for k in sorted(set(b) - set(a))]
    for k in sorted(set(a) & set(b)):
        out += [f"{k} {path}" for path in _paths(a[k], b[k], "")]
    return out


def _paths(x: Any, y: Any, at: str) -> list[str]:
    if at.endswith(".env") and isinstance(x, list) and isinstance(y, list):
        # A container's variables by name: Kustomize's strategic merge moves a patched one
        # first, and the order means nothing to the kubelet without $(VAR) references
        # (test_manifests checks that none refers to another).
        x, y = (sorted(v, key=lambda e: str(e.get("name"))) for v in (x, y))
    if isinstance(x, dict) and isinstance(y, dict):
        return [p for key in sorted(set(x) | set(y), key=str)
                for p in _paths(x.get(key, "<absent>"), y.get(key, "<absent>"), f"{at}.{key}")]
    if isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        return [p for i, (u, v) in enumerate(zip(x, y, strict=True))
                for p in _paths(u, v, f"{at}[{i}]")]
    return [] if x == y else [f"{at}: chart {x!r} != kustomize {y!r}"]
