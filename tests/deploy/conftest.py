"""Session fixtures: every kustomization under deploy/, rendered once."""

from __future__ import annotations

import os

import pytest
import yaml

from tests.deploy.rendering import BASE, DEPLOY, Doc, kubectl_or_skip, kustomization_dirs, render


@pytest.fixture(scope="session")
def kubectl() -> str:
    return kubectl_or_skip()


@pytest.fixture(scope="session")
def renders(kubectl: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Doc]]:
    """Name → rendered documents: base, overlays, cleanup Jobs, base + each component."""
    out: dict[str, list[Doc]] = {"base": render(kubectl, BASE)}
    for group in ("overlays", "cleanup"):
        for directory in kustomization_dirs(DEPLOY / group):
            out[f"{group}/{directory.name}"] = render(kubectl, directory)
    for component in kustomization_dirs(DEPLOY / "components"):
        work = tmp_path_factory.mktemp(f"component-{component.name}")
        # kustomize refuses absolute paths; relative ones may leave the root.
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [os.path.relpath(BASE, work)],
            "components": [os.path.relpath(component, work)],
        }
        (work / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        out[f"components/{component.name}"] = render(kubectl, work)
    return out

