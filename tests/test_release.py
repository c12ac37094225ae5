"""Release hygiene: one version source, every copy of it in step, licensing and dependencies.

The version is pyproject.toml's ``version`` (the package metadata). What cannot read it (the
manifests' image tag, the install URLs in the docs, the Dockerfile's default VERSION) must carry
the same string, so a release bump that misses one fails here.
"""

from __future__ import annotations

import ast
import importlib.metadata
import itertools
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import hairpin_proxy
from hairpin_proxy import version

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
VERSION: str = PROJECT["version"]

# The forms in which this project's own release appears in text. Each captures the version.
_V = r"(\d+\.\d+\.\d+(?:[-.+]?[0-9A-Za-z]+)*)"
RELEASE_REFERENCES = {
    # raw.githubusercontent.com/<org>/hairpin-proxy/v1.2.3/..., github.com/.../blob/v1.2.3/...
    "repository tag": re.compile(r"hairpin-proxy/hairpin-proxy/(?:(?:blob|tree|raw)/)?v" + _V
                                 + r"/"),
    # Kustomize remote bases: ...//deploy/base?ref=v1.2.3
    "kustomize ref": re.compile(r"hairpin-proxy/hairpin-proxy//\S*?[?&]ref=v" + _V),
    # Releases page links
    "release page": re.compile(r"hairpin-proxy/hairpin-proxy/releases/tag/v" + _V),
    # Image references: ghcr.io/hairpin-proxy/hairpin-proxy:1.2.3
    "image tag": re.compile(r"hairpin-proxy/hairpin-proxy:" + _V),
    # Kustomize images: entries
    "newTag": re.compile(r"\bnewTag:\s*[\"']?" + _V),
    # The Dockerfile's default
    "Dockerfile ARG": re.compile(r"^ARG VERSION=" + _V, re.MULTILINE),
    # The Helm chart's version and appVersion (Chart.yaml; scripts/gen_helm_chart.py writes them)
    "chart version": re.compile(r"^(?:version|appVersion): [\"']?" + _V, re.MULTILINE),
}
# Files that name a release by history, not as the current one.
HISTORY = {"CHANGELOG.md", "docs/upgrading.md"}
TEXT_SUFFIXES = {".md", ".yaml", ".yml", ".txt", ".toml", ".cfg", ".json", ""}


def release_files() -> list[Path]:
    """Docs, manifests, the Dockerfile and top-level text: where a release is named."""
    files = [REPO / "Dockerfile"]
    files += [p for p in REPO.glob("*.md") if p.name not in HISTORY]
    for folder in ("docs", "deploy"):
        files += [p for p in (REPO / folder).rglob("*")
                  if p.is_file() and p.suffix in TEXT_SUFFIXES
                  and str(p.relative_to(REPO)) not in HISTORY]
    return sorted(files)


def references() -> list[tuple[str, int, str, str]]:
    """(file, line, form, version) for every release reference found."""
    found = []
    for path in release_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for form, pattern in RELEASE_REFERENCES.items():
            for m in pattern.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                found.append((path.relative_to(REPO).as_posix(), line, form, m[1]))
    return found


def test_version_is_a_valid_release_version() -> None:
    parsed = Version(VERSION)
    assert str(parsed) == VERSION, "write the version in its normal form"
    assert not parsed.is_devrelease and not parsed.local


def test_package_version_is_the_metadata_version() -> None:
    assert hairpin_proxy.__version__ == VERSION
    assert importlib.metadata.version("hairpin-proxy") == VERSION, \
        "the installed metadata is stale: reinstall (make test does when pyproject changes)"


def test_cli_version_output(capsys: pytest.CaptureFixture[str]) -> None:
    from hairpin_proxy.cli import main
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"hairpin-proxy {VERSION}"


def test_source_checkout_falls_back_to_pyproject(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    version.version.cache_clear()
    try:
        assert version.version() == VERSION
    finally:
        version.version.cache_clear()


def test_unknown_version_when_nothing_says(tmp_path: Path) -> None:
    assert version.version_from_checkout(tmp_path / "pyproject.toml") == version.UNKNOWN_VERSION
    other = tmp_path / "pyproject.toml"
    other.write_text('[project]\nname = "someone-else"\nversion = "9.9.9"\n')
    assert version.version_from_checkout(other) == version.UNKNOWN_VERSION
    other.write_text("[project\n")
    assert version.version_from_checkout(other) == version.UNKNOWN_VERSION
    assert Version(version.UNKNOWN_VERSION) < Version("0.0.1")


def test_version_is_read_lazily() -> None:
    """Importing the package loads no I/O module (importlib.metadata brings socket with it)."""
    code = ("import sys, hairpin_proxy; assert 'socket' not in sys.modules; "
            "print(hairpin_proxy.__version__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == VERSION
    with pytest.raises(AttributeError):
        _ = hairpin_proxy.no_such_attribute


def test_every_release_reference_is_the_package_version() -> None:
    found = references()
    wrong = [f"{f}:{line}: {form} {v}" for f, line, form, v in found if v != VERSION]
    assert not wrong, f"package version is {VERSION}; bump these too:\n" + "\n".join(wrong)


def test_the_known_copies_are_still_found() -> None:
    """If a pattern stopped matching, the test above would pass on nothing."""
    found = {(f, form) for f, _, form, _ in references()}
    for expected in (("deploy/components/image/kustomization.yaml", "newTag"),
                     ("deploy/hairpin-proxy.yaml", "image tag"),
                     ("README.md", "repository tag"),
                     ("docs/install.md", "kustomize ref"),
                     ("Dockerfile", "Dockerfile ARG"),
                     ("deploy/helm/hairpin-proxy/Chart.yaml", "chart version")):
        assert expected in found, expected


def test_the_version_string_appears_only_in_known_forms() -> None:
    """A new kind of copy (say "version 1.2.3" in prose) is caught while it equals the version;
    afterwards it would be stale unnoticed."""
    known = {(f, line) for f, line, _, v in references() if v == VERSION}
    loose = re.compile(r"(?<![\w.])v?" + re.escape(VERSION) + r"(?![\w.])")
    stray = []
    for path in release_files():
        rel = path.relative_to(REPO).as_posix()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if loose.search(line) and (rel, number) not in known:
                stray.append(f"{rel}:{number}: {line.strip()}")
    assert not stray, ("the version appears in a form tests/test_release.py does not know: "
                       "add the form to RELEASE_REFERENCES or name no version\n"
                       + "\n".join(stray))


def test_changelog_has_unreleased_and_the_current_release() -> None:
    text = (REPO / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## \[([^\]]+)\]", text, re.MULTILINE)
    assert headings and headings[0] == "Unreleased", headings
    released = headings[1:]
    assert released and released[0] == VERSION, \
        f"the newest released section is {released[:1]}, the package version {VERSION}"
    assert released == sorted(released, key=Version, reverse=True)


def test_changelog_links_and_entries() -> None:
    """Every section heading has its link, [Unreleased] compares from the newest release, and
    no entry is told twice (an entry belongs to the release that shipped it)."""
    text = (REPO / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## \[([^\]]+)\]", text, re.MULTILINE)
    links = dict(re.findall(r"^\[([^\]]+)\]: (\S+)$", text, re.MULTILINE))
    assert [h for h in headings if h not in links] == [], "sections without a link"
    base = "https://github.com/hairpin-proxy/hairpin-proxy"
    assert links["Unreleased"] == f"{base}/compare/v{headings[1]}...HEAD"
    for newer, older in itertools.pairwise(headings[1:]):
        assert links[newer] == f"{base}/compare/v{older}...v{newer}", newer
    assert links[headings[-1]] == f"{base}/releases/tag/v{headings[-1]}"
    entries = [" ".join(e.split()) for e in re.findall(r"^- (.*?)(?=^- |^#|^\[|\Z)", text,
                                                        re.MULTILINE | re.DOTALL)]
    assert len(entries) > 50
    twice = sorted({e[:100] for e in entries if entries.count(e) > 1})
    assert not twice, "told twice:\n" + "\n".join(twice)


def test_license_is_apache_2() -> None:
    assert PROJECT["license"] == "Apache-2.0"
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_dependencies_have_lower_and_upper_bounds() -> None:
    """Runtime dependencies (and the `fast` extra) carry the lowest version whose API we use and
    a cap on the next major; CI installs the lower bounds once (.ci/run). The test and bench
    tools have a lower bound (and, where given, a cap above it)."""
    runtime = PROJECT["dependencies"] + PROJECT["optional-dependencies"]["fast"]
    for text in runtime:
        ops = {s.operator: Version(s.version) for s in Requirement(text).specifier}
        assert set(ops) == {">=", "<"}, f"{text}: needs exactly >= and <"
        assert ops["<"] == Version(str(ops[">="].major + 1)), \
            f"{text}: the cap is the next major version"
    for extra, reqs in PROJECT["optional-dependencies"].items():
        for text in reqs:
            ops = {s.operator: Version(s.version) for s in Requirement(text).specifier}
            assert ">=" in ops, f"[{extra}] {text}: no lower bound"
            assert "<" not in ops or ops["<"] > ops[">="], text


def third_party_imports() -> set[str]:
    """Top-level modules imported anywhere under src/ (function-level imports included) that are
    neither the standard library nor ours."""
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    found = set()
    for path in (REPO / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found |= {n.partition(".")[0] for n in names} - stdlib - {"hairpin_proxy"}
    return found


def test_every_third_party_import_is_declared() -> None:
    """Each top-level module imported under src/ belongs to a declared runtime dependency (or the
    `fast` extra, for the optional uvloop import)."""
    declared = {Requirement(r).name.lower().replace("_", "-") for r in
                PROJECT["dependencies"] + PROJECT["optional-dependencies"]["fast"]}
    providers = importlib.metadata.packages_distributions()
    missing = []
    for module in sorted(third_party_imports()):
        dists = {d.lower().replace("_", "-") for d in providers.get(module, [])}
        if not dists & declared:
            missing.append(f"{module} (from {sorted(dists) or 'no installed distribution'})")
    assert not missing, "imported under src/ but not declared in pyproject.toml: " + \
        ", ".join(missing)


def test_test_extra_holds_the_fast_extra() -> None:
    """The tests run both event loops, so the test extra carries `fast` with the same bounds."""
    extras = PROJECT["optional-dependencies"]
    assert set(extras["fast"]) <= set(extras["test"])
