"""Tokenizer and parser of hairpin_proxy.corefile: lexing rules, headers, blocks, errors."""

from __future__ import annotations

import pytest

from hairpin_proxy.corefile import (
    CorefileError,
    parse,
    parse_address,
    tokenize,
)
from tests.corefiles import SAMPLES, Sample


def texts(source: str) -> list[tuple[str, str]]:
    return [(t.kind, t.text) for t in tokenize(source)[0]]


# --- tokenizer -------------------------------------------------------------------------------


def test_words_braces_and_positions() -> None:
    toks, comments = tokenize(".:53 {\n\terrors\n  cache 30\n}\n")
    assert [(t.kind, t.text, t.line, t.column, t.first_on_line) for t in toks] == [
        ("word", ".:53", 1, 1, True),
        ("open", "{", 1, 6, False),
        ("word", "errors", 2, 2, True),
        ("word", "cache", 3, 3, True),
        ("word", "30", 3, 9, False),
        ("close", "}", 4, 1, True),
    ]
    assert comments == []


def test_brace_glued_to_a_word_is_split_off_only_at_the_end() -> None:
    assert texts(".{\n}") == [("word", "."), ("open", "{"), ("close", "}")]
    assert texts(".:53{") == [("word", ".:53"), ("open", "{")]
    # Env placeholders and regex replacements keep their braces.
    assert texts("forward . {$UPSTREAM}") == [("word", "forward"), ("word", "."),
                                              ("word", "{$UPSTREAM}")]
    assert texts("x {1}.svc") == [("word", "x"), ("word", "{1}.svc")]
    assert texts("a} }b") == [("word", "a}"), ("word", "}b")]


def test_comments_start_anywhere_outside_quotes() -> None:
    toks, comments = tokenize('a#b c\n"x # y" # z\n')
    assert [(t.kind, t.text) for t in toks] == [("word", "a"), ("quoted", "x # y")]
    assert [(c.text, c.line, c.column, c.alone) for c in comments] == [
        ("#b c", 1, 2, False), ("# z", 2, 9, False)]
    _, comments = tokenize("  # alone\r\nx\n")
    assert [(c.text, c.alone) for c in comments] == [("# alone", True)]


def test_quoted_strings_follow_the_caddy_v1_escapes() -> None:
    assert texts(r'"a \"b\" \n c"') == [("quoted", r'a "b" \n c')]
    assert texts('"multi\nline" next') == [("quoted", "multi\nline"), ("word", "next")]
    assert texts('"x"y') == [("quoted", "x"), ("word", "y")]
    # A quote inside a word is an ordinary character.
    assert texts('ab"c d"') == [("word", 'ab"c'), ("word", 'd"')]
    assert texts('"{" "}"') == [("quoted", "{"), ("quoted", "}")]


def test_first_on_line_accounts_for_multiline_tokens() -> None:
    toks, _ = tokenize('a "b\nc" d\ne')
    assert [(t.text, t.first_on_line, t.end_line) for t in toks] == [
        ("a", True, 1), ("b\nc", False, 2), ("d", False, 2), ("e", True, 3)]


def test_crlf_bom_and_unicode_space() -> None:
    assert texts("\ufeff.:53 {\r\n  errors\r\n}\r\n") == [
        ("word", ".:53"), ("open", "{"), ("word", "errors"), ("close", "}")]
    assert texts("a\u00a0b\u2003c") == [("word", "a"), ("word", "b"), ("word", "c")]


def test_unterminated_quote_names_its_position() -> None:
    with pytest.raises(CorefileError, match=r"line 2, column 13: unterminated") as err:
        tokenize('.:53 {\n    forward "x }\n')
    assert (err.value.line, err.value.column) == (2, 13)


# --- addresses -------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "transport", "zone", "port", "root53"), [
    (".", "dns", ".", None, True),
    (".:53", "dns", ".", 53, True),
    ("dns://.:53", "dns", ".", 53, True),
    ("DNS://.", "dns", ".", None, True),
    (".:5353", "dns", ".", 5353, False),
    ("tls://.:53", "tls", ".", 53, False),
    ("tls://.", "tls", ".", None, False),
    ("example.org:53", "dns", "example.org.", 53, False),
    ("Example.ORG.", "dns", "example.org.", None, False),
    (":53", "dns", "", 53, False),
    ("10.0.0.0/8:53", "dns", "10.0.0.0/8.", 53, False),
    (".:{$PORT}", "dns", ".:{$port}.", None, False),
])
def test_parse_address(key: str, transport: str, zone: str, port: int | None,
                       root53: bool) -> None:
    a = parse_address(key)
    assert (a.transport, a.zone, a.port) == (transport, zone, port)
    assert a.is_root(53) is root53


def test_root_on_other_ports() -> None:
    assert parse_address(".:8053").is_root(8053)
    assert not parse_address(".").is_root(8053)  # no port means 53
    assert parse_address("tls://.").effective_port == 853


# --- server blocks ---------------------------------------------------------------------------


@pytest.mark.parametrize("header", [
    ".:53 {", ". {", ".{", "dns://.:53 {", ". example.org:53 {", "example.org .:53 {",
    ".:53\t{", "  .:53   {   # comment", ".:53,\n example.org {", ".:53\n{",
])
def test_header_forms_are_root_blocks(header: str) -> None:
    cf = parse(f"{header}\n    errors\n}}\n")
    assert len(cf.server_blocks) == 1
    block = cf.server_blocks[0]
    assert block.is_root(53)
    assert [d.name for d in block.directives] == ["errors"]
    assert cf.root_blocks(53) == (block,)


def test_several_blocks_keys_and_nested_directives() -> None:
    cf = parse(
        "example.internal:53 {\n  forward . 10.0.0.53\n}\n"
        ". example.org:53 {\n  log . { class error }\n"
        "  kubernetes cluster.local {\n    pods insecure\n    ttl 30\n  }\n  reload\n}\n"
        "tls://.:853 {\n  forward . 1.1.1.1\n}\n")
    assert [b.keys for b in cf.server_blocks] == [
        ("example.internal:53",), (".", "example.org:53"), ("tls://.:853",)]
    assert [b.line for b in cf.root_blocks(53)] == [4]
    assert cf.root_blocks(853) == ()
    root = cf.root_blocks()[0]
    assert [(d.name, d.args) for d in root.directives] == [
        ("log", (".",)), ("kubernetes", ("cluster.local",)), ("reload", ())]
    log, kube, _ = root.directives
    assert [(d.name, d.args) for d in log.blocks[0].directives] == [("class", ("error",))]
    assert [(d.name, d.args) for d in kube.blocks[0].directives] == [
        ("pods", ("insecure",)), ("ttl", ("30",))]
    assert kube.tokens[-1].kind == "close"


def test_snippets_imports_and_quoted_braces() -> None:
    cf = parse('(common) {\n  errors\n}\nimport /etc/coredns/custom/*.server\n'
               '.:53 {\n  import common\n  template IN A x {\n'
               '    answer "{{ .Name }} 60 IN A 1.2.3.4"\n  }\n}\n')
    assert [s.name for s in cf.snippets] == ["common"]
    assert [d.name for d in cf.snippets[0].body.directives] == ["errors"]
    assert [i.pattern for i in cf.imports] == ["/etc/coredns/custom/*.server"]
    assert len(cf.server_blocks) == 1
    assert [d.name for d in cf.server_blocks[0].directives] == ["import", "template"]


def test_braceless_single_server_block() -> None:
    cf = parse(".:53\nerrors\nforward . 8.8.8.8\n")
    (block,) = cf.server_blocks
    assert block.body is None
    assert [d.name for d in block.directives] == ["errors", "forward"]


def test_empty_input_and_comments_only() -> None:
    assert parse("").server_blocks == ()
    assert parse("# nothing\n\n").server_blocks == ()


@pytest.mark.parametrize(("text", "where", "what"), [
    (".:53 {\n  errors\n", (1, 6), "never closed"),
    (".:53 {\n  log {\n    class error\n}\n", (1, 6), "never closed"),
    (".:53 {\n}\n}\n", (3, 1), "unexpected '}'"),
    ("}\n", (1, 1), "unexpected '}'"),
    (".:53 {\n  errors }\n", (2, 10), "unexpected '}' after a directive"),
    ("{\n}\n", (1, 1), "without a server address"),
    (".:53 {\n  { x }\n}\n", (2, 3), "without a directive"),
    ('.:53 {\n  forward . "1.1.1.1\n}\n', (2, 13), "unterminated quoted string"),
    (".:53 {\n  import\n}\n", (2, 3), "import takes exactly one argument"),
    (".:53 {\n  import a b\n}\n", (2, 3), "import takes exactly one argument"),
    ("import a b\n", (1, 1), "import takes exactly one argument"),
    ("(snip)\nerrors\n", (1, 1), "needs a block"),
    ("(s) {\n}\n(s) {\n}\n", (3, 1), "declared twice"),
    (".:53,\n", (1, 1), "expected another address"),
    (".:53, {\n}\n", (1, 7), "expected another address"),
])
def test_parse_errors_name_line_and_column(text: str, where: tuple[int, int], what: str) -> None:
    with pytest.raises(CorefileError) as err:
        parse(text)
    assert (err.value.line, err.value.column) == where
    assert f"line {where[0]}, column {where[1]}: " in str(err.value)
    assert what in str(err.value)
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
def test_corpus_parses_with_the_expected_root_blocks(sample: Sample) -> None:
    cf = parse(sample.text)
    assert len(cf.root_blocks(sample.dns_port)) == sample.root_blocks
    # Every token's recorded span is exactly its source text (unquoted tokens).
    for tok in cf.tokens:
        if tok.kind != "quoted":
            assert sample.text[tok.start:tok.end] == tok.text


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
def test_directive_positions_agree_with_their_tokens(sample: Sample) -> None:
    # Directives on lines of bare words carry their own positions and words; they must agree
    # with the tokens built for them on demand, and with the flat token list.
    cf = parse(sample.text)
    tokens = {(t.start, t.end): t for t in cf.tokens}
    for block in cf.server_blocks:
        for d in block.directives:
            first = d.tokens[0]
            assert (d.start, d.line, d.column, d.first_on_line) == (
                first.start, first.line, first.column, first.first_on_line)
            assert d.name == first.text
            if not d.blocks:
                assert d.args == tuple(t.text for t in d.tokens[1:])
            assert all(tokens[t.start, t.end] == t for t in d.tokens)


def test_blank_and_crlf_lines_between_bare_lines() -> None:
    text = ".:53 {\r\n\r\n    errors\r\n   \t\r\n\n    cache 30\r\n}\r\n"
    [block] = parse(text).server_blocks
    assert [(d.name, d.args, d.line, d.column) for d in block.directives] == [
        ("errors", (), 3, 5), ("cache", ("30",), 6, 5)]


def test_our_stanzas_read_as_words_and_one_quoted_answer() -> None:
    text = (".:53 {\n    template IN A {\n"
            r"        match (?i)^(?P<hairpin_proxy>a\.b|c\$d)\.$ (?i)^(?P<hairpin_proxy>e)\.$" "\n"
            '        answer "{{ .Name }} 10 IN A 10.0.0.1" "{{ .Name }} 10 IN A 10.0.0.2"\n'
            "        fallthrough\n    }\n}\n")
    [template] = parse(text).server_blocks[0].directives
    assert template.args == ("IN", "A")
    assert [(d.name, d.args) for d in template.blocks[0].directives] == [
        ("match", (r"(?i)^(?P<hairpin_proxy>a\.b|c\$d)\.$", r"(?i)^(?P<hairpin_proxy>e)\.$")),
        ("answer", ("{{ .Name }} 10 IN A 10.0.0.1", "{{ .Name }} 10 IN A 10.0.0.2")),
        ("fallthrough", ()),
    ]
