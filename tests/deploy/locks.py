"""The dependency locks as the tests read them (scripts/locks.py writes them)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.deploy.rendering import REPO

RUNTIME_LOCK = REPO / "requirements.lock"
DEV_LOCK = REPO / "requirements-dev.lock"
MIN_LOCK = REPO / "requirements-min.lock"


@dataclass(frozen=True)
class Pin:
    version: Version
    extras: frozenset[str] = frozenset()
    hashes: list[str] = field(default_factory=list)


def read_lock(text: str) -> dict[str, Pin]:
    """A lock as pip-compile writes it: canonical name -> its pin (version, extras, hashes).
    Refuses what pip would not check: a requirement not pinned with ==, a marker, an option,
    a hash other than sha256, a package locked twice."""
    locked: dict[str, Pin] = {}
    current = ""
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip().rstrip("\\").strip()
        if not line:
            continue
        if line.startswith("--hash="):
            assert current, f"hash before any requirement: {raw}"
            algorithm, _, digest = line.removeprefix("--hash=").partition(":")
            assert algorithm == "sha256" and re.fullmatch(r"[0-9a-f]{64}", digest), raw
            locked[current].hashes.append(digest)
            continue
        assert not line.startswith("-"), f"option in the lock: {raw}"
        req = Requirement(line)
        [spec] = req.specifier
        assert spec.operator == "==" and req.marker is None, raw
        current = canonicalize_name(req.name)
        assert current not in locked, f"{req.name} locked twice"
        locked[current] = Pin(Version(spec.version), frozenset(req.extras))
    return locked
