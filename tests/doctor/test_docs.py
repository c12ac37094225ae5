"""docs/doctor.md stays true to the code: the verdict table and the flags."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from hairpin_proxy.cli import build_parser
from hairpin_proxy.doctor.facts import PP_ANNOTATIONS
from hairpin_proxy.doctor.verdict import RULES

DOC = (Path(__file__).parents[2] / "docs" / "doctor.md").read_text()


def flags(command: str | None = None) -> set[str]:
    """The flags of one subcommand, or of all of them."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    chosen = [sub.choices[command]] if command else list(sub.choices.values())
    return {flag for p in chosen for flag in p._option_string_actions}


def test_verdict_table_matches_the_decision_list() -> None:
    rows = re.findall(r"^\| `([a-z-]+)` \| (yes|no) \|", DOC, re.MULTILINE)
    assert [(r.code, "yes" if r.ok else "no") for r in RULES] == rows


def test_flags_in_the_doc_exist() -> None:
    used = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", DOC))
    assert {"--resolve", "--no-api", "--proxy-address", "--timeout"} <= used
    assert used - flags() == set()
    # The flag table lists the doctor's own.
    table = set(re.findall(r"^\| `(--[a-z-]+)`", DOC, re.MULTILINE))
    assert table and table <= flags("doctor")


def test_every_recognised_annotation_is_documented() -> None:
    for _provider, key in PP_ANNOTATIONS:
        short = key.split("/", 1)[1]
        assert short in DOC, key


def test_every_doctor_flag_is_on_its_page() -> None:
    """docs/doctor.md names each of the doctor's flags (a --no- form counts for its flag)."""
    own = {f for f in flags("doctor") if f.startswith("--") and f != "--help"}
    missing = {f for f in own if f not in DOC and f.replace("--no-", "--", 1) not in DOC
               and "--no-" + f[2:] not in DOC}
    assert missing == set()


def test_the_namespace_default_is_the_same_in_help_and_doc() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    action = sub.choices["doctor"]._option_string_actions["--namespace"]
    assert action.help is not None and "else POD_NAMESPACE, else hairpin-proxy" in action.help
    assert "(default: `POD_NAMESPACE`, else `hairpin-proxy`" in DOC
