"""The dependency locks install as they are, with every pip that may meet them.

requirements.lock is what the image installs with --require-hashes: it must install with the pip
any supported Python bundles, not only the newest, whatever PyPI publishes next. A dependency
that asks for another's extras (lightkube needs `httpx2[http2,ws]`) must find those extras on the
lock's line, or an older pip takes them as a new, unpinned requirement and refuses the whole lock
as soon as PyPI serves a newer release of that package.
requirements-dev.lock pins what `make test` installs, requirements-min.lock what .ci/run's
lowest-versions step installs: the same set on every fresh clone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import venv
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.deploy.locks import DEV_LOCK, MIN_LOCK, RUNTIME_LOCK, Pin, read_lock
from tests.deploy.rendering import REPO

# pip as each way of making an environment brings it, oldest first; each checked here by
# `python -m venv` on its Python. The image's pip is newer than all of these.
BUNDLED_PIPS = {
    "23.0.1": "Debian 12's python3 -m venv",
    "23.2.1": "CPython 3.11.7's and 3.12.1's ensurepip",
    "24.2": "CPython 3.13.0's ensurepip",
}


def pip_env() -> dict[str, str]:
    """Only PyPI, as in the image: this machine's pip configuration is left out."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def pip_run(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), "-m", "pip", *args], capture_output=True, text=True,
                          timeout=600, env=pip_env(), check=False)


def dev_pip() -> str:
    return str(read_lock(DEV_LOCK.read_text())["pip"].version)


@pytest.mark.slow
@pytest.mark.parametrize("pip_version", [*BUNDLED_PIPS, "dev"])
def test_runtime_lock_installs_with_every_bundled_pip(pip_version: str, tmp_path: Path) -> None:
    wanted = dev_pip() if pip_version == "dev" else pip_version
    target = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(target)
    python = target / "bin" / "python"
    assert pip_run(python, "install", "-q", f"pip=={wanted}").returncode == 0
    assert pip_run(python, "--version").stdout.startswith(f"pip {wanted} ")
    installed = pip_run(python, "install", "--require-hashes", "--only-binary=:all:",
                        "-r", str(RUNTIME_LOCK))
    assert installed.returncode == 0, f"pip {wanted}: {installed.stderr[-2000:]}"
    checked = pip_run(python, "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def extras_asked(name: str, pin: Pin) -> list[Requirement]:
    """The requirements of the locked ``name`` (as installed here at the locked version) that
    apply with its locked extras."""
    dist = distribution(name)
    assert Version(dist.version) == pin.version, \
        f"{name} is {dist.version} here, {pin.version} in the lock: make test installs the locks'"
    wanted = []
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker is None or any(req.marker.evaluate({"extra": extra})
                                     for extra in {"", *pin.extras}):
            wanted.append(req)
    return wanted


def missing_extras(locked: dict[str, Pin]) -> list[str]:
    """Each `dependent -> dependency[extras]` whose extras the dependency's lock line lacks."""
    missing = []
    for name, pin in locked.items():
        try:
            asked = extras_asked(name, pin)
        except PackageNotFoundError:
            continue  # not installed here (not for this Python): pip check covers it above
        for req in asked:
            dependency = locked.get(canonicalize_name(req.name))
            if req.extras and dependency is not None and not req.extras <= dependency.extras:
                missing.append(f"{name} -> {req.name}[{','.join(sorted(req.extras))}]")
    return missing


def test_runtime_lock_names_every_extra_its_packages_ask_for() -> None:
    assert missing_extras(read_lock(RUNTIME_LOCK.read_text())) == []


def test_missing_extras_finds_a_line_stripped_of_them() -> None:
    locked = read_lock(RUNTIME_LOCK.read_text())
    assert locked["httpx2"].extras == {"http2", "ws"}
    stripped = {**locked, "httpx2": Pin(locked["httpx2"].version)}
    assert missing_extras(stripped) == ["lightkube -> httpx2[http2,ws]"]


def test_dev_and_min_locks_agree_with_the_runtime_lock_and_pyproject() -> None:
    runtime, dev, low = (read_lock(p.read_text()) for p in (RUNTIME_LOCK, DEV_LOCK, MIN_LOCK))
    # The tests run the versions the image ships.
    assert {n: p.version for n, p in runtime.items() if dev[n].version != p.version} == {}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    wanted = [*project["project"]["dependencies"], *extras["test"], *extras["fast"],
              *extras["bench"], *project["build-system"]["requires"], "pip"]
    for lock_name, lock in (("requirements-dev.lock", dev), ("requirements-min.lock", low)):
        for text in wanted:
            req = Requirement(text)
            if lock_name == "requirements-min.lock" and text in extras["bench"]:
                continue
            pin = lock.get(canonicalize_name(req.name))
            assert pin is not None, f"{lock_name} does not pin {req.name}"
            assert req.specifier.contains(pin.version, prereleases=True), \
                f"{lock_name} pins {req.name}=={pin.version}; pyproject asks {req.specifier}"


def test_read_lock_refuses_what_pip_would_not_check() -> None:
    good = "foo[x]==1.0 \\\n    --hash=sha256:" + "a" * 64 + "\n    # via bar\n"
    assert read_lock(good) == {"foo": Pin(Version("1.0"), frozenset({"x"}), ["a" * 64])}
    for bad in ("foo>=1.0\n", "foo==1.0 ; python_version < '3'\n",
                "--index-url https://example.invalid\nfoo==1\n",
                "    --hash=md5:abc\nfoo==1\n", good + good):
        with pytest.raises((AssertionError, ValueError)):
            read_lock(bad)


def test_locks_script_checks_the_lower_bounds_and_the_environment(tmp_path: Path) -> None:
    script = REPO / "scripts" / "locks.py"
    ok = subprocess.run([sys.executable, str(script), "--check-lower-bounds"],
                        capture_output=True, text=True, timeout=60, check=False)
    assert ok.returncode == 0, ok.stderr
    # An environment not as the lock pins is named, package by package.
    lock = tmp_path / "other.lock"
    lock.write_text("pytest==0.1\n")
    stray = subprocess.run([sys.executable, str(script), "--check-installed", str(lock)],
                           capture_output=True, text=True, timeout=60, check=False)
    assert stray.returncode != 0
    assert "pytest==" in stray.stderr and "(locked: 0.1)" in stray.stderr


def test_every_test_path_the_lowest_versions_step_names_exists() -> None:
    """.ci/run runs a chosen set of test files at the lowest allowed versions: a file moved or
    renamed must be renamed there too, or that step stops on a path pytest cannot find."""
    text = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    named = sorted({word.strip("\\") for line in text.splitlines()
                    for word in line.split() if word.startswith("tests/")})
    assert len(named) >= 8, named
    assert [p for p in named if not (REPO / p).exists()] == []
