"""How the image runs every command, for the tests and benchmarks that start one as a process:
the Python settings of the Dockerfile's runtime stage (tests/deploy/test_dockerfile.py keeps
them equal to the Dockerfile's)."""

from __future__ import annotations

from collections.abc import Mapping

# Docstrings and asserts left out, as in a container.
IMAGE_PYTHON_ENV: Mapping[str, str] = {"PYTHONOPTIMIZE": "2"}


def as_in_image(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the image's Python settings. The image holds its bytecode compiled at that
    level; here the first command started writes it (a PYTHONDONTWRITEBYTECODE of the caller's
    would have every command compile every module from source as it starts, seconds each)."""
    out = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**out, **IMAGE_PYTHON_ENV}
