"""Editing with the managed rule lines set aside gives what editing the whole text gives.

apply skips parsing the (large) managed block when its lines are plain directives; these
tests compare every outcome, result or error message, with the whole-text path, on hostile
layouts and on randomly damaged Corefiles. Also: the bulk host check accepts
exactly the hosts the per-host check accepts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hairpin_proxy import corefile
from hairpin_proxy.corefile import (
    BEGIN_MARKER,
    END_MARKER,
    LEGACY_MARKER,
    CorefileError,
    apply,
    rewrite_rules,
)
from tests.corefiles import BY_NAME, SAMPLES, TARGET, Sample

Outcome = tuple[str, object]


def outcome(fn: Callable[[], object]) -> Outcome:
    try:
        return "ok", fn()
    except CorefileError as exc:
        return "error", str(exc)


def whole_text_only(text: str) -> tuple[str, dict[int, str]]:
    return text, {}


def both_ways(fn: Callable[[], object]) -> tuple[Outcome, Outcome]:
    """fn's outcome as shipped, and with nothing ever set aside."""
    fast = outcome(fn)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(corefile, "_set_aside", whole_text_only)
        slow = outcome(fn)
    return fast, slow


def check_same(text: str, hosts: list[str]) -> Outcome:
    fast, slow = both_ways(lambda: apply(text, hosts, target=TARGET))
    assert fast == slow
    return fast


def block(hosts: list[str], indent: str = "    ", nl: str = "\n") -> str:
    rules = rewrite_rules(hosts, target=TARGET)
    return "".join(f"{indent}{line}{nl}" for line in (BEGIN_MARKER, *rules, END_MARKER))


KUBEADM = BY_NAME["kubeadm"].text
WITH_BLOCK = apply(KUBEADM, [f"app{i}.example.com" for i in range(50)], target=TARGET)


def test_the_rule_lines_are_set_aside_for_a_plain_block() -> None:
    cf, managed, cuts = corefile._read(WITH_BLOCK)
    assert len(cuts) == 1 and len(managed) == 1
    assert managed[0].directives == ()
    assert len(cf.text) < len(KUBEADM) + 200  # the 50 rule lines are not in the parsed text
    (body,) = cuts.values()
    assert body.count("rewrite name exact") == 50
    assert check_same(WITH_BLOCK, ["new.example.com"])[0] == "ok"


HOSTILE = {
    # The markers sit inside a quoted string spanning lines: not a managed block at all.
    "markers in a string": (
        ".:53 {\n    errors\n    template IN A example.org {\n        answer \"\n"
        + block(["a.example.com"]) + "\"\n    }\n    forward . /etc/resolv.conf\n}\n"),
    "begin after a word": KUBEADM.replace(
        "    errors\n", "    errors # " + BEGIN_MARKER[2:] + "\n"
        + block(["a.example.com"]).split("\n", 1)[1]),
    "end after a word": KUBEADM.replace(
        "    errors\n", block(["a.example.com"]).replace("    " + END_MARKER,
                                                        "    log " + END_MARKER)),
    "brace in the block": WITH_BLOCK.replace("app7.example.com", "app7.example.com {", 1),
    "closing brace line in the block": WITH_BLOCK.replace(
        "    " + END_MARKER, "    }\n    " + END_MARKER),
    "quote in the block": WITH_BLOCK.replace("app7.example.com", 'app7."x"', 1),
    "foreign line in the block": WITH_BLOCK.replace(
        "    " + END_MARKER, "    log\n    " + END_MARKER),
    "block in a nested block": KUBEADM.replace(
        "       pods insecure\n", "       pods insecure\n" + block(["a.example.com"], " " * 7)),
    "block in a non-root server block": KUBEADM + "example.org:5353 {\n"
    + block(["a.example.com"]) + "    whoami\n}\n",
    "two blocks in one server block": WITH_BLOCK.replace(
        "    errors\n", "    errors\n" + block(["b.example.com"])),
    "begin without end": WITH_BLOCK.replace("    " + END_MARKER + "\n", ""),
    "end without begin": WITH_BLOCK.replace("    " + BEGIN_MARKER + "\n", ""),
    "empty block": KUBEADM.replace(
        "    errors\n", f"    errors\n    {BEGIN_MARKER}\n    {END_MARKER}\n"),
    "blank lines in the block": WITH_BLOCK.replace("app7.example.com " + TARGET + "\n",
                                                   "app7.example.com " + TARGET + "\n\n  \n"),
    "crlf": WITH_BLOCK.replace("\n", "\r\n"),
    "mixed line endings in the block": WITH_BLOCK.replace(
        "app7.example.com " + TARGET + "\n", "app7.example.com " + TARGET + "\r\n"),
    "no newline at the end": WITH_BLOCK.rstrip("\n"),
    "syntax error after the block": WITH_BLOCK + "example.org {\n    whoami\n",
    "legacy line that cannot go, after the block": WITH_BLOCK.replace(
        "    cache 30\n", "    cache 30 { " + LEGACY_MARKER + "\n    }\n"),
    "legacy line after the block": WITH_BLOCK.replace(
        "    cache 30\n", "    cache 30\n    rewrite name x.example.com y " + LEGACY_MARKER
        + "\n"),
    "two root blocks": WITH_BLOCK + ".:53 {\n    bind 127.0.0.2\n"
    + block(["z.example.com"]) + "    forward . 1.1.1.1\n}\n",
    "empty second root block": WITH_BLOCK + "\n.:53 {\n\tbind 127.0.0.2\n}\n",
    # The parser checks an import's arguments, also on a line between our markers.
    "import without argument in the block": WITH_BLOCK.replace(
        "    " + END_MARKER, "    import\n    " + END_MARKER),
    "import with two arguments in the block": WITH_BLOCK.replace(
        "    " + END_MARKER, "    import a b\n    " + END_MARKER),
    "import of a snippet in the block": WITH_BLOCK.replace(
        "    " + END_MARKER, "    import snip\n    " + END_MARKER),
    "many markers in a string": ".:53 {\n    template IN A x {\n        answer \""
    + ("\n    " + BEGIN_MARKER) * 300 + "\"\n    }\n" + block(["a.example.com"]) + "}\n",
    # A new block's indentation unit is counted over the whole text, rule lines included.
    "indentation unit from the rule lines": ".:53 {\n\terrors\n\tcache 30\n\tforward . x\n"
    + block([f"h{i}.example.com" for i in range(9)], "  ") + "}\n.:53 {\n}\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
@pytest.mark.parametrize("hosts", [["new.example.com", "*.wild.example.com"], []],
                         ids=["hosts", "none"])
def test_hostile_layouts_edit_as_the_whole_text_does(name: str, hosts: list[str]) -> None:
    check_same(HOSTILE[name], hosts)


def test_errors_name_the_line_of_the_whole_text() -> None:
    kind, message = check_same(HOSTILE["legacy line that cannot go, after the block"],
                               ["a.example.com"])
    assert kind == "error"
    line = HOSTILE["legacy line that cannot go, after the block"].splitlines().index(
        "    cache 30 { " + LEGACY_MARKER) + 1
    assert f"line {line}," in str(message)


def test_a_string_holding_markers_keeps_every_line() -> None:
    text = HOSTILE["markers in a string"]
    kind, out = check_same(text, ["new.example.com"])
    assert kind == "ok" and isinstance(out, str)
    assert text in out.replace(block(["new.example.com"]), "")


JUNK = st.sampled_from([
    '"', "{", "}", "    " + BEGIN_MARKER, "    " + END_MARKER, "# " + LEGACY_MARKER[2:],
    "    log " + LEGACY_MARKER, '    foo "bar', "", "   ", "\x1c", "    rewrite name exact",
    "    rewrite name exact q.example.com " + TARGET, "\t" + END_MARKER + " ", "x {",
    ".:53 {", "example.org:53 {",
])


@st.composite
def damaged(draw: st.DrawFn) -> str:
    sample = draw(st.sampled_from(SAMPLES))
    hosts = draw(st.lists(st.sampled_from(
        ["a.example.com", "b.example.com", "*.c.example.com", "d.example.org"]), max_size=4))
    text = outcome(lambda: apply(sample.text, hosts or ["a.example.com"], target=TARGET))[1]
    if not isinstance(text, str):
        text = sample.text
    lines = text.split("\n")
    for _ in range(draw(st.integers(0, 3))):
        lines.insert(draw(st.integers(0, len(lines))), draw(JUNK))
    return "\n".join(lines)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=damaged(), hosts=st.lists(st.sampled_from(
    ["a.example.com", "*.c.example.com", "e.example.net", "xn--bcher-kva.example"]),
    max_size=3))
def test_damaged_corefiles_edit_as_the_whole_text_does(text: str, hosts: list[str]) -> None:
    check_same(text, hosts)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
def test_corpus_edits_as_the_whole_text_does(sample: Sample) -> None:
    first = check_same(sample.text, ["a.example.com", "*.b.example.com"])
    if first[0] == "ok":
        assert isinstance(first[1], str)
        check_same(first[1], ["c.example.com"])
        check_same(first[1], [])


# --- the bulk host check ---------------------------------------------------------------------

CHARS = "ab.*-_\n \t{}\"#;\\é\x1c\x00\x7f\u2028"


def accepted_one_by_one(hosts: list[str]) -> bool:
    try:
        for host in hosts:
            corefile._check_host(host)
    except CorefileError:
        return False
    return True


def collect(hosts: list[str]) -> Iterator[str]:
    yield from sorted(set(hosts))


@settings(max_examples=2000, deadline=None)
@given(hosts=st.lists(st.text(CHARS, max_size=6), max_size=5))
def test_bulk_host_check_agrees_with_the_per_host_check(hosts: list[str]) -> None:
    ok = accepted_one_by_one(hosts)
    unique = sorted(set(hosts))
    if unique:
        # Directly: a wrong "no" would otherwise hide behind the per-host fallback.
        assert corefile._all_valid("\n".join(unique), len(unique)) == ok, unique
    got = outcome(lambda: rewrite_rules(hosts, target=TARGET))
    assert (got[0] == "ok") == ok, (hosts, got)
    if ok:
        assert len(got[1]) == len(set(hosts))  # type: ignore[arg-type]
        assert list(collect(hosts)) == corefile._hosts(hosts)


# --- the check of the result -----------------------------------------------------------------

SABOTAGE: dict[str, Callable[[str], str]] = {
    "a rule dropped": lambda out: out.replace(
        f"    rewrite name exact app7.example.com {TARGET}\n", ""),
    "a host changed": lambda out: out.replace("app7.example.com", "app8.example.com", 1),
    "a foreign line added": lambda out: out.replace(
        f"    {END_MARKER}", f"    log\n    {END_MARKER}"),
    "the block left out": lambda out: out.split(f"    {BEGIN_MARKER}")[0]
    + out.split(f"{END_MARKER}\n")[1],
}


@pytest.mark.parametrize("set_aside", [True, False], ids=["set aside", "whole text"])
@pytest.mark.parametrize("name", sorted(SABOTAGE))
def test_a_wrong_edit_is_caught_before_it_is_returned(name: str, set_aside: bool) -> None:
    sabotage = SABOTAGE[name]
    real_edit = corefile._edit

    def broken_edit(*args: Any) -> str:
        return sabotage(real_edit(*args))

    hosts = [f"app{i}.example.com" for i in range(50)]
    assert apply(WITH_BLOCK, hosts, target=TARGET) == WITH_BLOCK
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(corefile, "_edit", broken_edit)
        if not set_aside:
            mp.setattr(corefile, "_set_aside", whole_text_only)
        with pytest.raises(CorefileError, match="internal check failed"):
            apply(WITH_BLOCK, hosts, target=TARGET)
