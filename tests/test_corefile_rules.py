"""Rule rendering, wildcard regexes, import mode and plugin queries of hairpin_proxy.corefile."""

from __future__ import annotations

import re

import pytest

from hairpin_proxy.corefile import (
    BEGIN_MARKER,
    END_MARKER,
    CorefileError,
    has_plugin,
    import_matches,
    import_snippet,
    imports_key,
    parse,
    rewrite_rules,
    wildcard_regex,
)
from tests.corefiles import SAMPLES, TARGET, Sample

KEY = "hairpin-proxy.override"


def test_rules_are_sorted_deduplicated_and_exact_or_regex() -> None:
    assert rewrite_rules(["b.example.com", "*.example.com", "a.example.com", "b.example.com"],
                         target=TARGET) == [
        rf"rewrite name regex ^[^.]+\.example\.com\.?$ {TARGET} answer auto",
        f"rewrite name exact a.example.com {TARGET}",
        f"rewrite name exact b.example.com {TARGET}",
    ]
    assert rewrite_rules([], target=TARGET) == []


def test_target_is_emitted_as_given() -> None:
    assert rewrite_rules(["a.b"], target="svc.example") == ["rewrite name exact a.b svc.example"]


@pytest.mark.parametrize(("host", "matches", "misses"), [
    ("*.example.com",
     ["a.example.com.", "a.example.com", "xn--bcher-kva.example.com.", "a-b.example.com."],
     ["example.com.", ".example.com.", "a.b.example.com.", "aexample.com.", "a.exampleXcom.",
      "a.example.com.evil.", "a.example.com..", "a.example.co."]),
    ("*.a-b.c_d.io", ["x.a-b.c_d.io."], ["x.a-b.c_dXio.", "x.y.a-b.c_d.io."]),
])
def test_wildcard_regex_matches_exactly_one_label(host: str, matches: list[str],
                                                  misses: list[str]) -> None:
    pattern = re.compile(wildcard_regex(host))
    # CoreDNS uses FindStringSubmatch (search, not full match): the anchors do the work.
    for name in matches:
        assert pattern.search(name), name
    for name in misses:
        assert not pattern.search(name), name


def test_wildcard_regex_is_anchored_and_escaped() -> None:
    assert wildcard_regex("*.example.com") == r"^[^.]+\.example\.com\.?$"
    # Only ASCII punctuation is escaped: RE2 rejects a backslash before a letter.
    assert wildcard_regex("*.bücher.de") == r"^[^.]+\.bücher\.de\.?$"


def test_import_snippet_is_the_unindented_block() -> None:
    snippet = import_snippet(["b.example.com", "*.example.com"], target=TARGET)
    assert snippet == (
        f"{BEGIN_MARKER}\n"
        rf"rewrite name regex ^[^.]+\.example\.com\.?$ {TARGET} answer auto" "\n"
        f"rewrite name exact b.example.com {TARGET}\n"
        f"{END_MARKER}\n")
    assert import_snippet([], target=TARGET) == f"{BEGIN_MARKER}\n{END_MARKER}\n"
    # Spliced into a server block, it reads as directives.
    block = parse(".:53 {\n" + snippet + "}\n").server_blocks[0]
    assert [d.args[:2] for d in block.directives] == [("name", "regex"), ("name", "exact")]


def test_import_snippet_refuses_bad_input() -> None:
    with pytest.raises(CorefileError):
        import_snippet(["a b"], target=TARGET)
    with pytest.raises(CorefileError):
        import_snippet(["a.b"], target="x}")


@pytest.mark.parametrize(("pattern", "key", "expected"), [
    ("/etc/coredns/custom/*.override", KEY, True),
    ("custom/*.override", KEY, True),  # AKS and Gardener: relative to /etc/coredns
    ("./custom/../custom/*.override", KEY, True),
    ("/etc/coredns/custom/hairpin-proxy.override", KEY, True),
    ("/etc/coredns/custom/hairpin-?roxy.override", KEY, True),
    ("/etc/coredns/custom/*.server", KEY, False),
    ("/etc/coredns/custom/*.override", "hairpin-proxy.server", False),
    ("/etc/coredns/other/*.override", KEY, False),
    ("/etc/coredns/custom/*", KEY, True),
    ("/etc/coredns/custom/*.*", KEY, False),  # Caddy refuses more than one "*"
    ("/etc/coredns/custom/[h]airpin-proxy.override", KEY, False),  # and character classes
    ("/etc/coredns/custom/*.override", "x/hairpin-proxy.override", False),
])
def test_import_matches(pattern: str, key: str, expected: bool) -> None:
    assert import_matches(pattern, key) is expected


def test_import_matches_with_other_directories() -> None:
    assert import_matches("extra/*.override", KEY, custom_dir="/srv/dns/extra",
                          corefile_dir="/srv/dns")
    assert not import_matches("custom/*.override", KEY, corefile_dir="/srv/dns")


def test_imports_key_looks_inside_the_root_block_only() -> None:
    top_level = ".:53 {\n  errors\n}\nimport /etc/coredns/custom/*.override\n"
    assert not imports_key(top_level, KEY)
    other_block = "x.org {\n  import /etc/coredns/custom/*.override\n}\n.:53 {\n}\n"
    assert not imports_key(other_block, KEY)
    via_snippet = "(c) {\n  import custom/*.override\n}\n.:53 {\n  import c\n}\n"
    assert imports_key(via_snippet, KEY)
    assert not imports_key("x.org {\n}\n", KEY)  # no root block at all
    both = ".:53 {\n  bind a\n  import custom/*.override\n}\n.:53 {\n  bind b\n}\n"
    assert not imports_key(both, KEY)  # every root block must import it
    with pytest.raises(CorefileError):
        imports_key(".:53 {\n", KEY)


def test_has_plugin() -> None:
    text = ("(c) {\n  reload 10s\n}\nx.org {\n  log\n}\n"
            ".:53 {\n  import c\n  cache 30 {\n    prefetch 5\n  }\n}\n")
    assert has_plugin(text, "reload")
    assert has_plugin(text, "cache")
    assert not has_plugin(text, "log")  # in another server block
    assert not has_plugin(text, "prefetch")  # an option of cache, not a plugin
    assert not has_plugin(text, "reload", dns_port=5353)
    assert not has_plugin(".:53 {\n  hosts /etc/hosts {\n    reload 15s\n  }\n}\n", "reload")
    cyclic = "(a) {\n  import b\n}\n(b) {\n  import a\n}\n.:53 {\n  import a\n}\n"
    assert not has_plugin(cyclic, "reload")
    with pytest.raises(CorefileError):
        has_plugin("}", "reload")


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
def test_corpus_plugins_and_imports(sample: Sample) -> None:
    assert has_plugin(sample.text, "reload", dns_port=sample.dns_port) is sample.has_reload
    assert imports_key(sample.text, KEY, dns_port=sample.dns_port) is sample.imports_override


@pytest.mark.parametrize("bad", ["b.example.com\nc.example.com", "\n", "a..b", "*", 7])
def test_one_bad_host_among_many_is_refused(bad: object) -> None:
    # Large host sets are checked in one step; a single bad host must still be caught.
    good = [f"h{i}.example.com" for i in range(50)]
    with pytest.raises((CorefileError, TypeError)):
        rewrite_rules([*good, bad], target=TARGET)  # type: ignore[list-item]
