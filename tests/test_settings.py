from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Literal

import pytest

from hairpin_proxy.settings import (
    ControllerSettings,
    ProxySettings,
    SettingsError,
    opt,
    settings_from_args,
    settings_parser,
)


@dataclasses.dataclass(frozen=True)
class Sample:
    name: str = opt("a", "A name.")
    count: int = opt(1, "A count.")
    ratio: float = opt(0.5, "A ratio.")
    flag: bool = opt(False, "A flag.")
    items: tuple[str, ...] = opt((), "Items.")
    kind: Literal["x", "y"] = opt("x", "A kind.")
    path: Path | None = opt(None, "A path.")
    legacy: str = opt("d", "Legacy env name.", env="LEGACY_NAME")


def parse(argv: list[str], env: dict[str, str] | None = None) -> Sample:
    parser = argparse.ArgumentParser()
    settings_parser(Sample, parser)
    return settings_from_args(Sample, parser.parse_args(argv), env or {})


def test_defaults() -> None:
    assert parse([]) == Sample()


def test_flags_convert_types() -> None:
    s = parse(["--name", "b", "--count", "3", "--ratio", "0.25", "--flag", "--items", "p",
               "--items", "q", "--kind", "y", "--path", "/tmp/x", "--legacy", "z"])
    assert s == Sample("b", 3, 0.25, True, ("p", "q"), "y", Path("/tmp/x"), "z")


def test_environment_is_read_and_flags_win() -> None:
    env = {"HAIRPIN_NAME": "e", "HAIRPIN_COUNT": "7", "HAIRPIN_FLAG": "yes",
           "HAIRPIN_ITEMS": "a, b c", "LEGACY_NAME": "old"}
    s = parse(["--count", "9"], env)
    assert (s.name, s.count, s.flag, s.items, s.legacy) == ("e", 9, True, ("a", "b", "c"), "old")


def test_no_flag_overrides_true_env() -> None:
    assert parse(["--no-flag"], {"HAIRPIN_FLAG": "true"}).flag is False


@pytest.mark.parametrize(("env", "message"), [
    ({"HAIRPIN_COUNT": "many"}, "--count"),
    ({"HAIRPIN_FLAG": "perhaps"}, "true or false"),
    ({"HAIRPIN_KIND": "z"}, "expected one of x, y"),
])
def test_bad_environment_values_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        parse([], env)


def test_bad_flag_choice_is_refused_in_our_words() -> None:
    # Refused by the settings layer (argparse's own "invalid choice: ... (choose from ...)"
    # is not ours), with the flag and the choices named.
    with pytest.raises(SettingsError, match=r"^--kind / HAIRPIN_KIND: invalid choice 'z' "
                                            r"\(expected one of x, y\)$"):
        parse(["--kind", "z"])
    assert parse(["--kind", "y"]).kind == "y"


def test_a_bad_choice_on_the_command_line_exits_2() -> None:
    """The whole way through the CLI: status 2 exactly, one line, nothing run."""
    proc = subprocess.run([sys.executable, "-m", "hairpin_proxy", "proxy", "--loop", "trio"],
                          capture_output=True, text=True, timeout=60, check=False,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == ("hairpin-proxy proxy: error: --loop / HAIRPIN_LOOP: invalid choice "
                           "'trio' (expected one of auto, asyncio, uvloop)\n")


@pytest.mark.parametrize(("argv", "message"), [
    (["--count", "1.5"], "--count / HAIRPIN_COUNT: expected a whole number, got '1.5'"),
    (["--count", "-1"], "--count / HAIRPIN_COUNT: must not be negative, got '-1'"),
    (["--ratio", "abc"], "--ratio / HAIRPIN_RATIO: expected a number, got 'abc'"),
    (["--ratio", "inf"], "--ratio / HAIRPIN_RATIO: expected a finite number, got 'inf'"),
])
def test_bad_numbers_are_worded_for_people(argv: list[str], message: str) -> None:
    with pytest.raises(SettingsError) as exc:
        parse(argv)
    assert str(exc.value) == message


def test_every_field_has_a_one_line_doc() -> None:
    for cls in (ProxySettings, ControllerSettings):
        for f in dataclasses.fields(cls):
            doc = f.metadata.get("help", "")
            assert doc and "\n" not in doc, f"{cls.__name__}.{f.name}"


def test_target_server_keeps_its_legacy_env_name() -> None:
    parser = argparse.ArgumentParser()
    settings_parser(ProxySettings, parser)
    s = settings_from_args(ProxySettings, parser.parse_args([]), {"TARGET_SERVER": "t.example"})
    assert s.target_server == "t.example"


def test_the_proxy_listens_dual_stack_by_default() -> None:
    """IPv6-only and dual-stack clusters work with the defaults ([::] falls back to 0.0.0.0
    at bind time where there is no IPv6)."""
    s = ProxySettings()
    assert s.admin_listen == "[::]:9090"
    assert (s.targets_file, s.targets_poll) == (None, 2.0)
