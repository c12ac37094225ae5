"""docs/configuration.md is generated from the CLI's settings and must not drift from them."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from hairpin_proxy.cli import COMMANDS
from hairpin_proxy.settings import env_name, flag_name
from tests.deploy.rendering import REPO

SCRIPT = REPO / "scripts" / "gen_config_reference.py"
DOC = REPO / "docs" / "configuration.md"


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_config_reference", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_reference_is_current(generator: ModuleType) -> None:
    assert DOC.read_text() == generator.render(), (
        "docs/configuration.md is stale: run `.venv/bin/python scripts/gen_config_reference.py`")


def test_reference_names_every_flag_and_variable_of_every_command(
        generator: ModuleType) -> None:
    text: str = generator.render()
    sections = text.split("\n## ")[1:]
    assert [s.split("`")[1] for s in sections] == [f"hairpin-proxy {c.name}" for c in COMMANDS]
    for cmd, section in zip(COMMANDS, sections, strict=True):
        for f in dataclasses.fields(cmd.settings):
            assert f"`{env_name(f)}`" in section, (cmd.name, f.name)
            if not f.metadata.get("positional"):
                assert f"`{flag_name(f)}`" in section, (cmd.name, f.name)


def test_check_mode_reports_a_stale_file(generator: ModuleType, tmp_path: Path) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text(generator.render().replace("--log-level", "--log-levels", 1))
    assert generator.main(["--check", "--output", str(stale)]) == 1
    assert generator.main(["--output", str(stale)]) == 0
    assert generator.main(["--check", "--output", str(stale)]) == 0
