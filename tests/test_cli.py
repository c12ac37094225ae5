from __future__ import annotations

import subprocess
import sys

import pytest

from hairpin_proxy.cli import COMMANDS, build_parser, main


def test_help_lists_every_command() -> None:
    text = build_parser().format_help()
    for cmd in COMMANDS:
        assert cmd.name in text


@pytest.mark.parametrize("cmd", [c.name for c in COMMANDS])
def test_subcommand_help_names_each_env_var(cmd: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([cmd, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "[env: " in out
    assert "--log-format" in out


def test_bad_env_value_exits_2_with_a_clear_message() -> None:
    proc = subprocess.run([sys.executable, "-m", "hairpin_proxy", "proxy"],
                          env={"HAIRPIN_WORKERS": "lots", "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert "--workers / HAIRPIN_WORKERS" in proc.stderr
