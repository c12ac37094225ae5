"""The package version, in its one source: ``VERSION`` here.

pyproject.toml takes it from here (``[tool.setuptools.dynamic]``), so the package metadata, the
wheel's name and ``hairpin-proxy --version`` all say the same; a source checkout run without
installing says it too. Read as a constant rather than from the installed metadata:
``importlib.metadata`` brings zipfile, csv and email's parsers into every process that
reports its version (the controller's build_info metric), about half a megabyte resident.
"""

from __future__ import annotations

# Bumped for a release, with the copies tests/test_release.py lists (CONTRIBUTING.md).
VERSION = "0.2.0"


def version() -> str:
    """This build's version."""
    return VERSION
