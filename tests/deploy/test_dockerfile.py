"""The container image, as far as it can be checked without a container engine.

The structure of the Dockerfile is linted; the dependencies come from requirements.lock with
their hashes checked, and the lock is checked against pyproject.toml (every runtime dependency
locked, at a version pyproject allows). The builder stage's wheel build is replayed exactly (same
files copied, same `pip wheel` command) and the runtime stage's install too (the lock with
--require-hashes, then our wheel with --no-deps) into a fresh venv, where the entrypoint must
serve every subcommand.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import venv
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from hairpin_proxy.cli import COMMANDS
from tests.deploy.locks import DEV_LOCK, read_lock
from tests.deploy.rendering import REPO
from tests.image import IMAGE_PYTHON_ENV, as_in_image

DOCKERFILE = REPO / "Dockerfile"
LOCK = REPO / "requirements.lock"
PYPROJECT = REPO / "pyproject.toml"
BUILD_TOOLS = ("gcc", "g++", "build-essential", "make", "clang", "python3-dev", "libc6-dev",
               "apt-get install", "apk add")


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, keyword: str) -> list[str]:
        return [rest for kw, rest in self.instructions if kw == keyword]


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, with continuation lines joined and comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "Dockerfile ends inside a continuation"
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        rest = rest.strip()
        if keyword == "FROM":
            words = rest.split()
            words = [w for w in words if not w.startswith("--platform")]
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else str(len(stages))
            stages.append(Stage(base=words[0], name=name))
        elif not stages:
            assert keyword == "ARG", f"only ARG may precede FROM, got {keyword}"
            key, _, default = rest.partition("=")
            global_args[key] = default
        else:
            stages[-1].instructions.append((keyword, rest))
    return global_args, stages


@pytest.fixture(scope="module")
def dockerfile() -> tuple[dict[str, str], list[Stage]]:
    return parse_dockerfile(DOCKERFILE.read_text())


def expand(value: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m[1] or m[2]], value)


def test_two_stages_from_an_official_slim_python(
        dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    args, stages = dockerfile
    assert [s.name for s in stages] == ["builder", "runtime"]
    for stage in stages:
        base = expand(stage.base, args)
        assert re.fullmatch(r"python:3\.\d+-slim(-\w+)?", base), base
        version = tuple(int(p) for p in base.split(":")[1].split("-")[0].split("."))
        assert version >= (3, 11), "pyproject requires Python >= 3.11"


def pip_commands(run: str, verb: str) -> list[list[str]]:
    """The words of each `pip <verb>` command in a RUN line (commands split at shell operators
    outside quotes; RUN's own --mount options dropped)."""
    lexer = shlex.shlex(run, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token and set(token) <= set("&|;()<>"):
            commands.append([])
        else:
            commands[-1].append(token)
    out = []
    for command in commands:
        words = [w for w in command if not w.startswith("--mount=")] \
            if command and command[0].startswith("--mount=") else command
        if words[:2] == ["pip", verb]:
            out.append(words[2:])
    return out


def requirement_files(words: list[str]) -> list[str]:
    return [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-r", "--requirement")]


def test_builder_takes_dependencies_from_the_lock_and_builds_our_wheel(
        dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    builder = dockerfile[1][0]
    wheels = [w for run in builder.args("RUN") for w in pip_commands(run, "wheel")]
    locked = [w for w in wheels if requirement_files(w)]
    ours = [w for w in wheels if not requirement_files(w)]
    assert locked, "the builder fetches the dependencies from the lock"
    for words in locked:
        assert requirement_files(words) == ["requirements.lock"]
        assert "--require-hashes" in words and "--only-binary=:all:" in words
        assert "--no-deps" in words and words[words.index("--wheel-dir") + 1] == "/wheels"
    assert ours, "the builder builds our wheel"
    for words in ours:
        assert words[-1] == "." and "--no-deps" in words
        assert words[words.index("--wheel-dir") + 1] == "/wheels"
    assert "requirements.lock" in builder_copy_sources(dockerfile)


def test_runtime_installs_only_locked_wheels_without_build_tools(
        dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    runtime = dockerfile[1][-1]
    runs = runtime.args("RUN")
    assert runs, "the runtime stage installs the wheels"
    installs: list[list[str]] = []
    for run in runs:
        for tool in BUILD_TOOLS:
            assert tool not in run, f"build tool in the runtime stage: {tool}"
        for words in pip_commands(run, "install"):
            installs.append(words)
            assert "--no-cache-dir" in words
            assert "--no-index" in words and "--find-links=/wheels" in words
    # First the dependencies, every file checked against the lock's hashes; then our wheel alone.
    assert len(installs) == 2, installs
    deps, ours = installs
    [lock] = requirement_files(deps)
    assert Path(lock).name == "requirements.lock"
    assert "--require-hashes" in deps and "--only-binary=:all:" in deps
    assert "--no-deps" in ours and not requirement_files(ours)
    assert any(w.startswith("hairpin-proxy") for w in ours), ours
    assert any(pip_commands(run, "check") for run in runs), "pip check proves the set complete"
    # The wheels and the lock come from the builder stage and are not copied into a layer.
    assert "from=builder" in " ".join(runs) and f"target={lock}" in " ".join(runs)
    assert not any("--from=builder" in c for c in runtime.args("COPY"))


def runtime_env(runtime: Stage) -> dict[str, str]:
    """The runtime stage's ENV settings (``KEY=value`` pairs)."""
    return dict(pair.split("=", 1) for env in runtime.args("ENV") for pair in shlex.split(env))


def test_commands_started_by_tests_run_with_the_image_python_settings(
        dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    runtime = dockerfile[1][-1]
    env = runtime_env(runtime)
    settings = {k: v for k, v in env.items() if k == "PYTHONOPTIMIZE"}
    assert settings == dict(IMAGE_PYTHON_ENV), "tests/image.py says what the image sets"
    # Bytecode at that level is compiled in the image: the filesystem is read-only and
    # PYTHONDONTWRITEBYTECODE is set, so nothing would keep a compilation made at start.
    assert env.get("PYTHONDONTWRITEBYTECODE") == "1"
    compiles = [shlex.split(part) for run in runtime.args("RUN") for part in run.split("&&")
                if "compileall" in part]
    assert len(compiles) == 1, compiles
    words = compiles[0]
    assert words[words.index("-o") + 1] == env["PYTHONOPTIMIZE"]
    assert any("stdlib" in w for w in words), "the standard library, site-packages under it"


def test_commands_started_as_in_the_image_keep_their_bytecode() -> None:
    # The image's bytecode is compiled at build time; a test's commands write theirs once
    # rather than compile every module from source at each start.
    env = as_in_image({"PYTHONDONTWRITEBYTECODE": "1", "PATH": "/bin"})
    assert env == {"PATH": "/bin", **IMAGE_PYTHON_ENV}


def test_image_version_comes_from_pyproject(
        dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    args, stages = dockerfile
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    # The default of the VERSION build argument is the package version ...
    assert args.get("VERSION") == project["version"]
    builder, runtime = stages
    assert "VERSION" in builder.args("ARG") and "VERSION" in runtime.args("ARG")
    # ... and the builder refuses any other value, so the label cannot disagree with the package.
    check = " ".join(builder.args("RUN"))
    assert "pyproject.toml" in check and '"$VERSION" != "$project_version"' in check
    assert "exit 1" in check
    labels = " ".join(runtime.args("LABEL"))
    assert 'org.opencontainers.image.version="${VERSION}"' in labels
    # The installed package reports that same version.
    assert 'test "$(hairpin-proxy --version)" = "hairpin-proxy ${VERSION}"' in \
        " ".join(runtime.args("RUN"))


def runtime_requirements() -> list[Requirement]:
    """What the image installs: pyproject's dependencies and the `fast` extra."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    return [Requirement(r) for r in
            project["dependencies"] + project["optional-dependencies"]["fast"]]


def test_lock_covers_every_runtime_dependency_at_an_allowed_version(
        dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    locked = read_lock(LOCK.read_text())
    for name, pin in locked.items():
        assert pin.hashes, f"{name} {pin.version} has no hash"
    for req in runtime_requirements():
        name = canonicalize_name(req.name)
        assert name in locked, f"{req.name} is not in requirements.lock"
        version = locked[name].version
        assert req.specifier.contains(version, prereleases=True), \
            f"requirements.lock has {req.name}=={version}, pyproject allows {req.specifier}"
    assert "hairpin-proxy" not in locked, "our own package is installed from its wheel"
    # Compiled for the image's Python: the lock's closure is the one the image needs.
    python = dockerfile[0]["PYTHON_VERSION"]
    assert f"autogenerated by pip-compile with Python {python}" in LOCK.read_text()


def test_runtime_user_entrypoint_ports_and_labels(
        dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    runtime = dockerfile[1][-1]
    users = runtime.args("USER")
    assert users, "the runtime stage sets USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0, "USER must be numeric and not root"
    assert not gid or (gid.isdigit() and int(gid) != 0)
    assert json.loads(runtime.args("ENTRYPOINT")[-1]) == ["hairpin-proxy"]
    assert json.loads(runtime.args("CMD")[-1]) == ["proxy"]
    assert {"proxy"} <= {c.name for c in COMMANDS}
    exposed = {p for e in runtime.args("EXPOSE") for p in e.split()}
    assert exposed == {"80", "443", "9090"}
    labels = " ".join(runtime.args("LABEL"))
    for key in ("org.opencontainers.image.source", "org.opencontainers.image.description",
                "org.opencontainers.image.version"):
        assert f"{key}=" in labels
    # The license label and the package metadata name the same SPDX license.
    license_ = tomllib.loads(PYPROJECT.read_text())["project"]["license"]
    assert license_ == "Apache-2.0"
    assert f'org.opencontainers.image.licenses="{license_}"' in labels


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; `!` re-includes."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern[1:] if negate else pattern
        pat = pat.rstrip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatchcase(p, pat) or fnmatch.fnmatchcase(p, pat.replace("**/", ""))
               for p in prefixes):
            ignored = not negate
    return ignored


def builder_copy_sources(dockerfile: tuple[dict[str, str], list[Stage]]) -> list[str]:
    sources: list[str] = []
    for copy in dockerfile[1][0].args("COPY"):
        words = [w for w in shlex.split(copy) if not w.startswith("--")]
        sources += [w.rstrip("/") for w in words[:-1]]
    return sources


def test_build_context_keeps_what_the_builder_copies(
        dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    patterns = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    sources = builder_copy_sources(dockerfile)
    assert {"pyproject.toml", "src"} <= set(sources)
    for source in sources:
        assert not dockerignored(source, patterns), source
        for path in (REPO / source).rglob("*.py") if (REPO / source).is_dir() else []:
            rel = path.relative_to(REPO).as_posix()
            assert not dockerignored(rel, patterns), rel
    # ... and nothing else: no tests, venv or VCS data in the context.
    for other in (".venv/bin/python", ".git/HEAD", "tests/__init__.py", "deploy/base"):
        assert dockerignored(other, patterns), other


@pytest.mark.slow
def test_wheel_built_like_the_builder_installs_and_serves_every_command(
        dockerfile: tuple[dict[str, str], list[Stage]], tmp_path: Path) -> None:
    context = tmp_path / "context"
    context.mkdir()
    # Exactly what the builder stage copies: a missing file shows up as a failed build here.
    for source in builder_copy_sources(dockerfile):
        src = REPO / source
        if src.is_dir():
            shutil.copytree(src, context / source,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"))
        else:
            shutil.copy2(src, context / source)
    wheels = tmp_path / "wheels"
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_CACHE_DIR": "1"}
    # The build backend as requirements-dev.lock pins it, not the newest PyPI serves.
    build_env = {**env, "PIP_BUILD_CONSTRAINT": str(DEV_LOCK)}
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir",
                            str(wheels), "."], cwd=context, capture_output=True, text=True,
                           timeout=600, env=build_env, check=False)
    if built.returncode != 0 and "Could not find a version" in built.stderr:
        pytest.skip(f"PyPI not reachable for the build backend: {built.stderr[-300:]}")
    assert built.returncode == 0, built.stderr
    [wheel] = wheels.glob("hairpin_proxy-*.whl")

    target = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(target)
    python = target / "bin" / "python"
    # The runtime stage's install: the lock with every hash checked (pip refuses a dependency
    # the lock misses), then our wheel alone. Only PyPI, as in the image: this machine's pip
    # configuration (local indexes and wheel folders) is left out.
    lock_env = {k: v for k, v in env.items() if not k.startswith("PIP_") or k in
                ("PIP_CERT", "PIP_DEFAULT_TIMEOUT", "PIP_DISABLE_PIP_VERSION_CHECK",
                 "PIP_NO_CACHE_DIR")}
    lock_env["PIP_CONFIG_FILE"] = os.devnull
    for args in (["--require-hashes", "--only-binary=:all:", "-r", str(context / LOCK.name)],
                 ["--no-index", "--no-deps", str(wheel)]):
        installed = subprocess.run([str(python), "-m", "pip", "install", *args],
                                   capture_output=True, text=True, timeout=600, env=lock_env,
                                   check=False)
        assert installed.returncode == 0, installed.stderr
    checked = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True,
                             text=True, timeout=120, env=lock_env, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    entrypoint = target / "bin" / "hairpin-proxy"
    assert entrypoint.exists(), "the wheel installs the hairpin-proxy console script"
    # Run outside the checkout so nothing imports the source tree by accident.
    clean_env = as_in_image({k: v for k, v in env.items()
                             if k not in ("PYTHONPATH", "VIRTUAL_ENV")})
    top = subprocess.run([str(entrypoint), "--help"], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path, env=clean_env, check=False)
    assert top.returncode == 0, top.stderr
    for cmd in COMMANDS:
        assert cmd.name in top.stdout
        sub = subprocess.run([str(entrypoint), cmd.name, "--help"], capture_output=True,
                             text=True, timeout=120, cwd=tmp_path, env=clean_env, check=False)
        assert sub.returncode == 0, f"{cmd.name}: {sub.stderr}"
        assert f"usage: hairpin-proxy {cmd.name}" in sub.stdout
    located = subprocess.run([str(python), "-c",
                              "import hairpin_proxy; print(hairpin_proxy.__file__)"],
                             capture_output=True, text=True, timeout=60, cwd=tmp_path,
                             env=clean_env, check=True)
    assert located.stdout.startswith(str(target)), located.stdout
    # The version comes from the wheel's metadata, i.e. pyproject.toml.
    version = subprocess.run([str(entrypoint), "--version"], capture_output=True, text=True,
                             timeout=60, cwd=tmp_path, env=clean_env, check=True)
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    assert version.stdout.strip() == f"hairpin-proxy {project['version']}"
