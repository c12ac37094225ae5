"""Helpers to render the kustomizations under deploy/ with the real `kubectl kustomize`.

Renders: the base, every overlay, every cleanup Job, and every component applied alone on top of
the base (from a throwaway kustomization in a temporary directory, so nothing is written into
the checkout).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from hairpin_proxy.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
BASE = DEPLOY / "base"
# kustomize v4.1 brought `replacements`, which the etchosts component uses.
MIN_KUSTOMIZE = (4, 1)

Doc = dict[str, Any]


def kustomization_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("*/kustomization.yaml"))


def kubectl_or_skip() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed (scripts/system-deps.sh installs kubernetes-client); "
                    "the manifest tests need `kubectl kustomize`")
    out = subprocess.run([kubectl, "version", "--client", "-o", "json"], capture_output=True,
                         text=True, timeout=60, check=False)
    version = json.loads(out.stdout or "{}").get("kustomizeVersion", "")
    found = re.match(r"v?(\d+)\.(\d+)", version)
    if found is None or (int(found[1]), int(found[2])) < MIN_KUSTOMIZE:
        pytest.skip(f"kubectl's kustomize {version or 'unknown'} is older than "
                    f"v{MIN_KUSTOMIZE[0]}.{MIN_KUSTOMIZE[1]}")
    return kubectl


def render(kubectl: str, directory: Path) -> list[Doc]:
    out = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, f"kubectl kustomize {directory} failed:\n{out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def find(docs: list[Doc], kind: str, name: str, namespace: str | None = None) -> Doc:
    for d in docs:
        meta = d["metadata"]
        if d["kind"] == kind and meta["name"] == name and (
                namespace is None or meta.get("namespace") == namespace):
            return d
    raise AssertionError(f"no {kind} {namespace or ''}/{name} in the render")


def workloads(docs: list[Doc]) -> list[Doc]:
    """Everything with a pod template."""
    return [d for d in docs if d["kind"] in ("Deployment", "DaemonSet", "Job")]


def subparsers() -> dict[str, argparse.ArgumentParser]:
    """The CLI's subcommand parsers, by name."""
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("the CLI has no subcommands")
