"""The install and platform docs point at files that exist and flags the CLI accepts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hairpin_proxy.cli import build_parser
from tests.deploy.rendering import REPO, subparsers

# configuration.md is generated from the parser itself and checked by its own test.
DOCS = sorted([REPO / "README.md",
               *(p for p in (REPO / "docs").glob("*.md") if p.name != "configuration.md"),
               *(REPO / "docs" / "platforms").glob("*.md")])
# `--flag` or `--flag=value` standing alone in a code span, or appended as a container arg
# (`value: --flag` in YAML, `"value":"--flag"` in JSON patches).
FLAG = re.compile(r'`(--[a-z][a-z0-9-]*)(?:=[^`\s]*)?`|"?value"?:\s*"?(--[a-z][a-z0-9-]*)')
DEPLOY_PATH = re.compile(r"(?<![\w/])(deploy/[A-Za-z0-9_./-]*[A-Za-z0-9_-])")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def all_flags() -> set[str]:
    flags = set(build_parser()._option_string_actions)
    for sub in subparsers().values():
        flags |= set(sub._option_string_actions)
    return flags


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_doc_references_are_real(doc: Path) -> None:
    text = doc.read_text()
    known = all_flags()
    # The benchmark pages quote other tools' flags (wrk, py-spy, HAProxy) as well as ours.
    flags = () if doc.name.startswith("benchmarks") else FLAG.finditer(text)
    for match in flags:
        flag = match[1] or match[2]
        assert flag in known, f"{doc.name}: {flag} is not a hairpin-proxy flag"
    for path in DEPLOY_PATH.findall(text):
        assert (REPO / path).exists(), f"{doc.name}: {path} does not exist"
    for target in LINK.findall(text):
        if "://" in target:
            continue
        assert (doc.parent / target).resolve().exists(), f"{doc.name}: broken link {target}"


def test_reference_patterns_find_what_the_docs_use() -> None:
    """The checks above are not vacuous: the docs' flags and paths are actually matched."""
    text = (REPO / "docs" / "install.md").read_text() + (REPO / "README.md").read_text()
    flags = {m[1] or m[2] for m in FLAG.finditer(text)}
    assert {"--remove-on-delete", "--write-method", "--mode"} <= flags
    assert "--no-such-flag" not in all_flags()
    assert {"deploy/hairpin-proxy.yaml", "deploy/cleanup/default",
            "deploy/overlays/k3s"} <= set(DEPLOY_PATH.findall(text))


def test_docs_exist_for_every_platform() -> None:
    names = {p.stem for p in (REPO / "docs" / "platforms").glob("*.md")}
    assert {"kubeadm", "k3s", "rke2", "aks", "eks", "doks", "lke", "bare-metal-metallb"} <= names


# Each command's own page: where an operator looks a flag up.
COMMAND_PAGES = {"proxy": "docs/proxy.md", "controller": "docs/controller.md",
                 "cleanup": "docs/controller.md", "render": "docs/render.md",
                 "etchosts": "docs/etchosts.md", "doctor": "docs/doctor.md"}


def undocumented_flags(command: str, text: str) -> list[str]:
    """The command's flags its page never names in code (`--flag`, `--flag VALUE`,
    `--flag=VALUE`, or `--no-flag` for a boolean)."""
    missing = []
    for action in subparsers()[command]._actions:
        names = [o for o in action.option_strings if o.startswith("--") and o != "--help"]
        if names and not any(re.search(f"`{re.escape(o)}(?![a-z0-9-])", text) for o in names):
            missing.append(names[0])
    return missing


@pytest.mark.parametrize("command", sorted(COMMAND_PAGES))
def test_every_flag_is_on_its_command_page(command: str) -> None:
    page = COMMAND_PAGES[command]
    missing = undocumented_flags(command, (REPO / page).read_text())
    assert not missing, (f"{page} (the page of `hairpin-proxy {command}`) never names "
                         f"{', '.join(missing)}")


def test_command_pages_cover_every_command() -> None:
    assert set(COMMAND_PAGES) == set(subparsers())
    assert undocumented_flags("render", "`--legacy-target` `--diff`") != []
    assert "--legacy-target" not in undocumented_flags("render", "`--legacy-target NAME`")
    assert "--diff" not in undocumented_flags("render", "`--no-diff`")
    assert "--repair-backoff" in undocumented_flags("controller", "`--repair-backoff-max`")
