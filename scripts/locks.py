"""The project's three dependency locks, and the lower bounds one of them is made of.

- requirements.lock: the image's runtime dependencies with their hashes, for the image's
  Python (the Dockerfile installs it with --require-hashes). Extras are kept
  (`httpx2[http2,ws]==…`): a pip that meets a dependency's extras on a line without them takes
  the extra as a new, unpinned requirement and refuses the whole lock in --require-hashes mode.
- requirements-dev.lock: every package `make test` installs (the `test`, `fast` and `bench`
  extras, pip, the build backend), for the lowest Python the project supports, as constraints
  (extras stripped: pip refuses extras in a constraints file).
- requirements-min.lock: the same, with each runtime dependency at the lower bound
  pyproject.toml gives it; .ci/run installs it to prove those bounds true.

A lock changes only when this script runs, never when PyPI publishes: that is what keeps a fresh
clone's tests green. Existing pins are kept unless --upgrade is given.

    .venv/bin/python scripts/locks.py                 # regenerate all three (python3.11 and
                                                      # python3.12 on PATH)
    .venv/bin/python scripts/locks.py --upgrade       # move every pin to the newest allowed
    .venv/bin/python scripts/locks.py --check-lower-bounds       # requirements-min.lock holds them
    python scripts/locks.py --check-installed requirements-dev.lock
                                      # that Python's environment is exactly as the lock pins
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import tomllib
from importlib.metadata import distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
RUNTIME_PYTHON = "3.12"  # the Dockerfile's PYTHON_VERSION
DEV_PYTHON = "3.11"  # pyproject's requires-python floor, as on CI
PIP_TOOLS = "pip-tools==7.7.0"
COMMON = ["--no-emit-find-links", "--no-emit-index-url", "--quiet"]
DEV_EXTRAS = ["--extra=test", "--extra=fast", "--extra=bench", "--allow-unsafe", "--strip-extras"]


def runtime_requirements() -> list[str]:
    """pyproject's dependencies and the `fast` extra: what the image installs."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"]) + list(project["optional-dependencies"]["fast"])


def lower_bounds() -> list[str]:
    """`name==lower` for each runtime dependency; each must have exactly one `>=` bound."""
    pins = []
    for text in runtime_requirements():
        req = Requirement(text)
        lower = [s.version for s in req.specifier if s.operator == ">="]
        if len(lower) != 1:
            sys.exit(f"locks: {text!r} in pyproject.toml needs exactly one >= lower bound")
        pins.append(f"{req.name}=={lower[0]}")
    return pins


def read_pins(text: str) -> dict[str, Version]:
    """A lock or constraints file of `name==version` lines: canonical name -> version."""
    pins: dict[str, Version] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip().rstrip("\\").strip()
        if line and not line.startswith("--"):
            req = Requirement(line)
            [spec] = req.specifier
            if spec.operator != "==":
                sys.exit(f"locks: {line!r} is not pinned with ==")
            pins[canonicalize_name(req.name)] = Version(spec.version)
    return pins


def check_lower_bounds() -> None:
    """requirements-min.lock pins every runtime dependency at its lower bound."""
    bounds = read_pins("\n".join(lower_bounds()))
    locked = read_pins((REPO / "requirements-min.lock").read_text())
    wrong = [f"{name}=={version} (locked: {locked.get(name) or 'nothing'})"
             for name, version in bounds.items() if locked.get(name) != version]
    if wrong:
        sys.exit("locks: requirements-min.lock is not at pyproject's lower bounds: "
                 + ", ".join(wrong) + "; run .venv/bin/python scripts/locks.py")
    print("requirements-min.lock pins the lower bounds:", " ".join(lower_bounds()))


def check_installed(lock: Path) -> None:
    """Every distribution of the running Python is at the version ``lock`` pins."""
    locked = read_pins(lock.read_text())
    strays = sorted(f"{name}=={dist.version} (locked: {locked.get(name) or 'nothing'})"
                    for dist in distributions()
                    if (name := canonicalize_name(dist.metadata["Name"])) != "hairpin-proxy"
                    and locked.get(name) != Version(dist.version))
    if strays:
        sys.exit(f"locks: installed, but not as {lock.name} pins: " + ", ".join(strays))
    print(f"installed exactly as {lock.name} pins")


def pip_compile(python: str, work: Path) -> Path:
    """A pip-compile run by ``python`` (pip-tools installed into a venv of its own)."""
    venv = work / f"pip-tools-{python}"
    subprocess.run([f"python{python}", "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", PIP_TOOLS], check=True)
    return venv / "bin" / "pip-compile"


def compile_lock(tool: Path, output: str, args: list[str], upgrade: bool) -> None:
    command = [str(tool), *COMMON, *args, f"--output-file={output}", "pyproject.toml"]
    if upgrade:
        command.insert(1, "--upgrade")
    # Only PyPI: a machine's own pip configuration (local indexes) stays out of the locks.
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "CUSTOM_COMPILE_COMMAND":
           ".venv/bin/python scripts/locks.py"}
    subprocess.run(command, cwd=REPO, env=env, check=True)


def regenerate(upgrade: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        runtime, dev = pip_compile(RUNTIME_PYTHON, work), pip_compile(DEV_PYTHON, work)
        compile_lock(runtime, "requirements.lock",
                     ["--extra=fast", "--generate-hashes", "--no-strip-extras"], upgrade)
        compile_lock(dev, "requirements-dev.lock", [*DEV_EXTRAS, "requirements-dev.in"], upgrade)
        bounds = work / "lower-bounds.txt"
        bounds.write_text("\n".join(lower_bounds()) + "\n")
        compile_lock(dev, "requirements-min.lock",
                     [*DEV_EXTRAS, "--constraint", str(bounds), "requirements-dev.in"], upgrade)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upgrade", action="store_true", help="move every pin to the newest")
    parser.add_argument("--check-lower-bounds", action="store_true",
                        help="check that requirements-min.lock pins pyproject's lower bounds")
    parser.add_argument("--check-installed", type=Path, metavar="LOCK",
                        help="check that this Python's packages are exactly as LOCK pins")
    args = parser.parse_args()
    if args.check_lower_bounds:
        check_lower_bounds()
        return
    if args.check_installed:
        check_installed(args.check_installed)
        return
    try:
        regenerate(args.upgrade)
    except (OSError, subprocess.CalledProcessError) as err:
        sys.exit(f"locks: {err} (python{RUNTIME_PYTHON} and python{DEV_PYTHON} must be on PATH)")


if __name__ == "__main__":
    main()
