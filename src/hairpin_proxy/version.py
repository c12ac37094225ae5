"""The package version, from its one source: the package metadata (pyproject.toml's ``version``).

Kept out of ``hairpin_proxy/__init__.py`` because ``importlib.metadata`` loads ``email`` and with
it ``socket``: the pure modules must stay importable without I/O modules, so the version is read
only when someone asks for it (``hairpin_proxy.__version__``, ``--version``, build_info).
"""

from __future__ import annotations

import functools
from pathlib import Path

DISTRIBUTION = "hairpin-proxy"
# What the version is when neither installed metadata nor pyproject.toml can be read: a valid
# version that sorts before every release.
UNKNOWN_VERSION = "0+unknown"


@functools.cache
def version() -> str:
    """Installed (wheel, image, editable venv): the distribution's metadata. A source checkout
    run without installing (``PYTHONPATH=src``): the ``version`` in the checkout's pyproject.toml.
    Otherwise ``0+unknown``."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as metadata_version

    try:
        return metadata_version(DISTRIBUTION)
    except PackageNotFoundError:
        pass
    return version_from_checkout(Path(__file__).resolve().parents[2] / "pyproject.toml")


def version_from_checkout(pyproject: Path) -> str:
    """``project.version`` of a pyproject.toml that is ours, else :data:`UNKNOWN_VERSION`."""
    import tomllib

    try:
        with pyproject.open("rb") as f:
            project = tomllib.load(f).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        return UNKNOWN_VERSION
    found = project.get("version") if project.get("name") == DISTRIBUTION else None
    return found if isinstance(found, str) and found else UNKNOWN_VERSION
