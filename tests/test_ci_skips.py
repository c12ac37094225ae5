"""Under CI a skip is a failure (tests/ci_skips.py); elsewhere it stays a skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ci_skips import under_ci

REPO = Path(__file__).resolve().parents[1]
PROBE = '''
import pytest

def test_skips():
    pytest.skip("no such peer here")

@pytest.mark.skipif(True, reason="marked for a missing peer")
def test_marked():
    pass

@pytest.mark.xfail(reason="known")
def test_expected_failure():
    raise AssertionError

def test_passes():
    pass
'''


def run_probe(tmp_path: Path, ci: str) -> tuple[int, str]:
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = {**os.environ, "CI": ci, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "tests.ci_skips", "-rA", str(tmp_path)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    return done.returncode, done.stdout


def test_under_ci_every_skip_fails_with_its_reason(tmp_path: Path) -> None:
    code, out = run_probe(tmp_path, "true")
    assert code == 1, out
    assert "skipped under CI, which must run every test: Skipped: no such peer here" in out
    assert "skipped under CI, which must run every test: Skipped: marked for a missing peer" \
        in out
    assert "XFAIL" in out and "PASSED" in out


def test_without_ci_a_skip_stays_a_skip(tmp_path: Path) -> None:
    code, out = run_probe(tmp_path, "")
    assert code == 0, out
    assert out.count("SKIPPED") == 2 and "skipped under CI" not in out


@pytest.mark.parametrize(("value", "expected"), [
    ("true", True), ("1", True), ("yes", True), ("TRUE", True),
    ("", False), ("0", False), ("false", False), ("No", False), (" ", False)])
def test_which_values_of_ci_count(value: str, expected: bool) -> None:
    assert under_ci({"CI": value}) is expected
    assert under_ci({}) is False
