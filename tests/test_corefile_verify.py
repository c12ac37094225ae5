"""The editor's own check, and the parsed input it may be given.

Whatever the splice produces, apply never returns a text that does not read back as exactly
the wanted rules: a broken splice is refused. A parsed Corefile (the previous edit's result as
the check read it) gives the same result as its text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import pytest

from hairpin_proxy import corefile
from hairpin_proxy.corefile import Answers, CorefileError, apply, apply_parsed, parse, rules
from hairpin_proxy.corefile import editor as editor_module
from hairpin_proxy.edits.coredns import CorednsEdit
from tests.corefiles import BY_NAME, PROXY_FQDN, SAMPLES, Sample

V4 = Answers.of(["10.96.0.20"])
OTHER = Answers.of(["10.96.0.30"])
MANY = [f"app{i}.example.com" for i in range(300)] + ["*.apps.example.com"]


def _first_line_with(text: str, needle: str) -> tuple[int, int]:
    at = text.index(needle)
    return text.rfind("\n", 0, at) + 1, text.index("\n", at) + 1


def _drop_a_brace(out: str) -> str:
    _, hi = _first_line_with(out, "fallthrough")
    close_lo, close_hi = _first_line_with(out[hi:], "}")
    return out[:hi + close_lo] + out[hi + close_hi:]


def _duplicate_a_stanza(out: str) -> str:
    lo, _ = _first_line_with(out, "template IN A")
    _, hi = _first_line_with(out[lo:], "    }")
    return out[:lo] + out[lo:lo + hi] + out[lo:]


def _lose_a_host(out: str) -> str:
    rx = re.search(r"match (\S+)", out)
    assert rx is not None
    hosts = rules.hosts_of_regex(rx[1])
    assert hosts is not None and len(hosts) > 1
    return out.replace(rx[1], rules.match_regexes(hosts[1:])[0], 1)


def _into_a_nested_block(out: str) -> str:
    begin, end = out.index(corefile.BEGIN_MARKER), out.index(corefile.END_MARKER)
    lo, hi = out.rfind("\n", 0, begin) + 1, out.index("\n", end) + 1
    ours, rest = out[lo:hi], out[:lo] + out[hi:]
    at = rest.index("pods insecure")
    return rest[:at] + ours + "       " + rest[at:]


def _second_set_elsewhere(out: str) -> str:
    begin, end = out.index(corefile.BEGIN_MARKER), out.index(corefile.END_MARKER)
    lo, hi = out.rfind("\n", 0, begin) + 1, out.index("\n", end) + 1
    at = out.index("    cache 30")
    return out[:at] + out[lo:hi] + out[at:]


def _unbalanced_quote(out: str) -> str:
    return out.replace("fallthrough", 'fallthrough "', 1)


CORRUPTIONS: dict[str, Callable[[str], str]] = {
    "a closing brace dropped": _drop_a_brace,
    "a stanza twice": _duplicate_a_stanza,
    "a host left out": _lose_a_host,
    "the rules inside a nested block": _into_a_nested_block,
    "a second set further down": _second_set_elsewhere,
    "an unterminated quote": _unbalanced_quote,
}


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
@pytest.mark.parametrize("parsed", [False, True], ids=["text", "parsed"])
def test_a_broken_splice_is_refused(monkeypatch: pytest.MonkeyPatch,
                                    corrupt: Callable[[str], str], parsed: bool) -> None:
    before = BY_NAME["kubeadm"].text
    good = apply(before, MANY, answers=V4)
    real = editor_module._splice

    def broken(text: str, edits: Iterable[tuple[int, int, str]]) -> str:
        out = real(text, edits)
        bad = corrupt(out)
        assert bad != out, "the corruption must change something"
        return bad

    monkeypatch.setattr(editor_module, "_splice", broken)
    source = parse(good) if parsed else good
    with pytest.raises(CorefileError, match=r"internal check failed|Corefile: line"):
        apply(source, [*MANY, "new.example.com"], answers=V4)
    with pytest.raises(CorefileError):
        apply_parsed(source, [*MANY, "new.example.com"], answers=V4)


def test_a_splice_leaving_an_old_rule_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    before = BY_NAME["kubeadm"].text
    real = editor_module._splice

    def keeps_old(text: str, edits: Iterable[tuple[int, int, str]]) -> str:
        out = real(text, edits)
        at = out.index("    cache 30")
        return (out[:at] + f"    rewrite name exact left.example.com {PROXY_FQDN}\n" + out[at:])

    monkeypatch.setattr(editor_module, "_splice", keeps_old)
    with pytest.raises(CorefileError, match="left over"):
        apply(before, MANY, answers=V4)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
def test_parsed_input_gives_the_same_result(sample: Sample) -> None:
    text = sample.text
    for hosts in (MANY, ["a.example.com"], []):
        from_text = apply(text, hosts, answers=V4, proxy_fqdn=PROXY_FQDN, dns_port=sample.dns_port)
        from_tree = apply(parse(text), hosts, answers=V4, proxy_fqdn=PROXY_FQDN,
                          dns_port=sample.dns_port)
        assert from_tree == from_text
        chained = apply_parsed(text, hosts, answers=V4, proxy_fqdn=PROXY_FQDN,
                               dns_port=sample.dns_port)
        assert chained.text == from_text
        # The result as the check read it is the result's parse, fit for the next edit.
        again = [*hosts, "new.example.com"]
        assert apply(chained, again, answers=V4, proxy_fqdn=PROXY_FQDN, dns_port=sample.dns_port) \
            == apply(from_text, again, answers=V4, proxy_fqdn=PROXY_FQDN, dns_port=sample.dns_port)
        assert corefile.managed_hosts(chained, proxy_fqdn=PROXY_FQDN, dns_port=sample.dns_port) \
            == corefile.managed_hosts(from_text, proxy_fqdn=PROXY_FQDN, dns_port=sample.dns_port)


def test_directive_positions_without_splitting_long_lines() -> None:
    text = apply(BY_NAME["kubeadm"].text, MANY, answers=V4)
    cf = parse(text)

    def walk(directives: Iterable[corefile.Directive]) -> Iterable[corefile.Directive]:
        for d in directives:
            yield d
            for block in d.blocks:
                yield from walk(block.directives)

    seen = 0
    for block in cf.server_blocks:
        for d in walk(block.directives):
            # Read the positions first: they must not need the tokens split.
            start, end, line, column = d.start, d.end, d.line, d.column
            first_on_line = d.first_on_line
            tokens = d.tokens
            assert (start, end) == (tokens[0].start, tokens[-1].end)
            assert (line, column, first_on_line) == (tokens[0].line, tokens[0].column,
                                                      tokens[0].first_on_line)
            if not any(t.kind == "quoted" for t in tokens):
                assert text[start:end].split() == [t.text for t in tokens]
            seen += 1
    assert seen > 20


def test_edit_starts_from_its_own_last_result() -> None:
    edit = CorednsEdit("kube-system", "coredns", "Corefile", PROXY_FQDN)
    before = BY_NAME["kubeadm"].text
    first = edit.edit(before, ((tuple(MANY), V4),))
    assert first == apply(before, MANY, answers=V4, proxy_fqdn=PROXY_FQDN)
    more = tuple(sorted([*MANY, "new.example.com"]))
    second = edit.edit(first, ((more, V4),))
    assert second == apply(first, more, answers=V4, proxy_fqdn=PROXY_FQDN)
    # Held hosts come back as the very tuple given (the removal guard relies on it).
    assert edit.remembered_hosts({"data": {"Corefile": second}}) is more
    # Someone else's edit in between: their text is what is edited, not the remembered one.
    theirs = second.replace("    cache 30\n", "    cache 60\n")
    third = edit.edit(theirs, ((more[:-1], V4), (("other.example.com",), OTHER)))
    assert third == apply(theirs, [(more[:-1], V4), (["other.example.com"], OTHER)],
                          proxy_fqdn=PROXY_FQDN)
    assert "cache 60" in third
    assert edit.held_answers({"data": {"Corefile": third}}) \
        == corefile.managed_groups(third, proxy_fqdn=PROXY_FQDN)
