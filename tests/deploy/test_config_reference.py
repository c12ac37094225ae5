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
    readme = (REPO / "README.md").read_text()
    assert readme == generator.render_readme(readme), (
        "README.md's reference is stale: run `.venv/bin/python scripts/gen_config_reference.py`")
    for cmd in COMMANDS:
        assert f"### `hairpin-proxy {cmd.name}`" in readme


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
    readme = tmp_path / "README.md"
    readme.write_text(generator.render_readme((REPO / "README.md").read_text()))
    args = ["--output", str(stale), "--readme", str(readme)]
    assert generator.main(["--check", *args]) == 1
    assert generator.main(args) == 0
    assert generator.main(["--check", *args]) == 0
    readme.write_text(readme.read_text().replace("HAIRPIN_LOG_FORMAT", "HAIRPIN_LOG_FMT", 1))
    assert generator.main(["--check", *args]) == 1
