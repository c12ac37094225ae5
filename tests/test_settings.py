from __future__ import annotations

import argparse
import dataclasses
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


def test_bad_flag_choice_is_rejected_by_argparse() -> None:
    with pytest.raises(SystemExit):
        parse(["--kind", "z"])


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
