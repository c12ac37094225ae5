"""apply/remove/managed_hosts/strays: placement, byte preservation, conversion and refusals."""

from __future__ import annotations

import hashlib

import pytest

from hairpin_proxy.corefile import (
    BEGIN_MARKER,
    DEFAULT_PROXY_FQDN,
    END_MARKER,
    MAX_CONFIGMAP_BYTES,
    Answers,
    CorefileError,
    apply,
    import_snippet,
    managed_hosts,
    parse,
    remove,
    strays,
)
from tests.corefiles import BY_NAME, HOSTS, PROXY_FQDN
from tests.corefiles.oracle import check_one_set_per_root, expected_set, find_ours, strip_ours

V4 = Answers.of(["10.96.0.20"])
V6 = Answers.of(["fd00::20"])
DUAL = Answers.of(["10.96.0.20", "fd00::20"])
B, E = BEGIN_MARKER, END_MARKER


def ours(hosts: list[str] | tuple[str, ...], answers: Answers = V4, indent: str = "    ",
         unit: str = "    ", nl: str = "\n") -> str:
    return expected_set(hosts, answers, indent, unit, nl)


def test_kubeadm_golden() -> None:
    before = BY_NAME["kubeadm"].text
    after = apply(before, ["b.example.com", "a.example.com", "*.apps.example.com",
                           "a.example.com"], answers=V4)
    assert after == before.replace(".:53 {\n", (
        ".:53 {\n"
        f"    {B}\n"
        "    template IN A {\n"
        r"        match (?i)^(?P<hairpin_proxy>(?:a|b)\.example\.com)\.$" "\n"
        r"        match (?i)^(?P<hairpin_proxy>[^._][^.]*\.(?:apps\.example\.com))\.$" "\n"
        '        answer "{{ .Name }} 10 IN A 10.96.0.20"\n'
        "        fallthrough\n"
        "    }\n"
        "    template IN AAAA {\n"
        r"        match (?i)^(?P<hairpin_proxy>(?:a|b)\.example\.com)\.$" "\n"
        r"        match (?i)^(?P<hairpin_proxy>[^._][^.]*\.(?:apps\.example\.com))\.$" "\n"
        "        rcode NOERROR\n"
        "        fallthrough\n"
        "    }\n"
        f"    {E}\n"), 1)
    assert managed_hosts(after) == ("*.apps.example.com", "a.example.com", "b.example.com")
    assert remove(after) == before


@pytest.mark.parametrize(("answers", "a_line", "aaaa_line"), [
    (V4, 'answer "{{ .Name }} 10 IN A 10.96.0.20"', "rcode NOERROR"),
    (V6, "rcode NOERROR", 'answer "{{ .Name }} 10 IN AAAA fd00::20"'),
    (Answers.of(["10.96.0.21", "fd00::21", "10.96.0.20"], ttl=300),
     'answer "{{ .Name }} 300 IN A 10.96.0.20" "{{ .Name }} 300 IN A 10.96.0.21"',
     'answer "{{ .Name }} 300 IN AAAA fd00::21"'),
])
def test_answers_by_family_and_nodata(answers: Answers, a_line: str, aaaa_line: str) -> None:
    after = apply(".:53 {\n}\n", ["a.b"], answers=answers)
    a_stanza, aaaa_stanza = after.split("template IN AAAA")
    assert f"        {a_line}\n        fallthrough\n" in a_stanza
    assert f"        {aaaa_line}\n        fallthrough\n" in aaaa_stanza
    # Parsed, each stanza is a template for its type with the answer's words as arguments.
    block = parse(after).server_blocks[0]
    assert [d.args for d in block.directives] == [("IN", "A"), ("IN", "AAAA")]


def test_changed_answers_rewrite_the_rules_in_place() -> None:
    first = apply(BY_NAME["talos"].text, HOSTS, answers=V4)
    second = apply(first, HOSTS, answers=DUAL)
    assert second == first.replace(ours(HOSTS, V4), ours(HOSTS, DUAL))
    assert apply(second, HOSTS, answers=V4) == first


def test_hosts_without_an_address_are_refused() -> None:
    with pytest.raises(CorefileError, match="no proxy address"):
        apply(BY_NAME["kubeadm"].text, ["a.b"], answers=Answers())
    # Removing needs no address.
    assert apply(BY_NAME["kubeadm"].text, [], answers=Answers()) == BY_NAME["kubeadm"].text


def test_helm_dot_brace_header_and_missing_final_newline() -> None:
    before = BY_NAME["helm-no-port"].text
    assert not before.endswith("\n")
    after = apply(before, ["x.example.com"], answers=V4)
    assert after == before.replace(".{\n", ".{\n" + ours(["x.example.com"]), 1)
    assert after.endswith("loadbalance\n}")
    assert remove(after) == before


def test_crlf_file_stays_crlf() -> None:
    before = BY_NAME["crlf"].text
    after = apply(before, ["x.example.com"], answers=DUAL)
    assert after.count("\n") == after.count("\r\n")
    assert after == before.replace(".:53 {\r\n", ".:53 {\r\n" + ours(
        ["x.example.com"], DUAL, nl="\r\n"), 1)
    assert remove(after) == before


def test_tabs_file_gets_tabs() -> None:
    before = BY_NAME["tabs"].text
    after = apply(before, ["x.example.com"], answers=V4)
    assert after == before.replace(".:53 {\n", ".:53 {\n" + ours(
        ["x.example.com"], indent="\t", unit="\t"), 1)


def test_irregular_indentation_follows_the_first_sibling() -> None:
    text = "  .:53 {\n      errors\n   cache 30\n  }\n"
    after = apply(text, ["x.example.com"], answers=V4)
    assert after == text.replace("{\n", "{\n" + ours(["x.example.com"], indent="      "), 1)


def test_empty_root_block_uses_header_indent_plus_file_unit() -> None:
    assert apply(".:53 {\n}\n", ["a.b"], answers=V4) == ".:53 {\n" + ours(["a.b"]) + "}\n"
    tabbed = "x.org {\n\terrors\n}\n.:53 {\n}\n"
    assert apply(tabbed, ["a.b"], answers=V4) == tabbed.replace(
        ".:53 {\n", ".:53 {\n" + ours(["a.b"], indent="\t", unit="\t"))


def test_directive_on_the_opening_line_puts_the_rules_before_the_closing_brace() -> None:
    text = ".:53 { errors\n    cache 30\n}\n"
    after = apply(text, ["a.b"], answers=V4)
    assert after == ".:53 { errors\n    cache 30\n" + ours(["a.b"]) + "}\n"
    assert remove(after) == text


def test_comment_after_the_opening_brace_stays_on_its_line() -> None:
    text = BY_NAME["multi-block"].text
    after = apply(text, ["a.b"], answers=V4)
    header = ". example.org:53 {   # root and example.org share one plugin chain\n"
    assert after == text.replace(header, header + ours(["a.b"]))
    assert after.count(B) == 1  # only the root block, not the stub or TLS one


def test_brace_on_the_next_line() -> None:
    text = BY_NAME["brace-next-line"].text
    after = apply(text, ["a.b"], answers=V4)
    assert after == text.replace(".:53\n{\n", ".:53\n{\n" + ours(["a.b"]))


def test_braceless_server_block() -> None:
    text = ".:53\nerrors\nforward . 8.8.8.8\n"
    after = apply(text, ["a.b"], answers=V4)
    # Indented like its siblings, which here start in the first column.
    assert after == ".:53\n" + ours(["a.b"], indent="") + "errors\nforward . 8.8.8.8\n"
    assert remove(after) == text
    assert apply(after, ["a.b"], answers=V4) == after


def test_byte_order_mark_before_an_empty_root_block() -> None:
    text = "\ufeff.:53 {\n}\n"
    out = apply(text, ["a.example.com"], answers=V4)
    assert out == "\ufeff.:53 {\n" + ours(["a.example.com"]) + "}\n"
    assert remove(out) == text


def test_every_root_block_gets_one_set() -> None:
    text = (".:53 {\n    bind 10.0.0.1\n}\ndns://. {\n    bind 10.0.0.2\n}\n"
            "example.org {\n    whoami\n}\n")
    after = apply(text, ["a.b"], answers=V4)
    assert after == text.replace("{\n    bind", "{\n" + ours(["a.b"]) + "    bind")
    assert after.count(B) == 2
    check_one_set_per_root(after, ["a.b"], V4)
    assert remove(after) == text


def test_dns_port_selects_the_block() -> None:
    text = ".:53 {\n    errors\n}\n.:5353 {\n    errors\n}\n"
    after = apply(text, ["a.b"], answers=V4, dns_port=5353)
    assert after == ".:53 {\n    errors\n}\n.:5353 {\n" + ours(["a.b"]) + "    errors\n}\n"
    assert managed_hosts(after, dns_port=5353) == ("a.b",)
    assert managed_hosts(after, dns_port=53) == ()


def test_rules_left_on_another_port_are_strays_and_kept() -> None:
    text = ".:53 {\n    errors\n}\n.:5353 {\n    errors\n}\n"
    on53 = apply(text, ["a.b"], answers=V4)
    moved = apply(on53, ["a.b"], answers=V4, dns_port=5353)
    assert moved == on53.replace(".:5353 {\n", ".:5353 {\n" + ours(["a.b"]))
    assert [(s.line, s.where) for s in strays(moved, dns_port=5353)] == [
        (3, "server block '.:53'"), (8, "server block '.:53'")]
    assert [s.line for s in strays(moved, dns_port=53)] == [18, 23]


def test_existing_set_is_replaced_in_place_with_its_indentation() -> None:
    text = ".:53 {\n    errors\n" + ours(["old.example.com"], indent="  ") + "    cache 30\n}\n"
    after = apply(text, ["new.example.com"], answers=V4)
    assert after == text.replace(ours(["old.example.com"], indent="  "),
                                 ours(["new.example.com"], indent="  "))
    assert apply(after, ["new.example.com"], answers=V4) == after
    assert remove(after) == ".:53 {\n    errors\n    cache 30\n}\n"


def test_unchanged_hosts_give_an_identical_string() -> None:
    first = apply(BY_NAME["k3s"].text, ["a.example.com", "*.example.com"], answers=DUAL)
    again = apply(first, ("*.example.com", "a.example.com", "a.example.com"), answers=DUAL)
    assert again == first


def test_hosts_may_be_any_iterable_but_not_a_string() -> None:
    text = BY_NAME["kubeadm"].text
    assert apply(text, iter(["a.b"]), answers=V4) == apply(text, ["a.b"], answers=V4)
    with pytest.raises(TypeError):
        apply(text, "a.b", answers=V4)


# --- rules of earlier versions, damaged and moved rules ---------------------------------------


def test_old_rewrite_rules_are_converted_in_one_write() -> None:
    before = BY_NAME["old-rewrite"].text
    assert managed_hosts(before) == HOSTS
    after = apply(before, HOSTS, answers=V4)
    assert "rewrite" not in after
    assert after == apply(BY_NAME["kubeadm"].text, HOSTS, answers=V4)
    assert remove(before) == BY_NAME["kubeadm"].text


@pytest.mark.parametrize("rule", [
    "rewrite name exact a.example.com {proxy_fqdn}",
    "rewrite name a.example.com {proxy_fqdn}",
    "rewrite stop name exact a.example.com {proxy_fqdn}",
    "rewrite continue name exact A.Example.COM. {proxy_fqdn}",
    "rewrite name exact a.example.com {proxy_fqdn} answer auto",
    r"rewrite name regex ^[^.]+\.example\.com\.?$ {proxy_fqdn} answer auto",
    "rewrite name suffix .example.com {proxy_fqdn}",  # ours, though no host reads from it
])
@pytest.mark.parametrize("proxy_fqdn", [
    DEFAULT_PROXY_FQDN, DEFAULT_PROXY_FQDN.rstrip("."), DEFAULT_PROXY_FQDN.upper(),
    "Hairpin-Proxy.hairpin-proxy.svc.cluster.local.",
])
def test_old_rule_forms_are_recognised_by_the_proxy_fqdn(rule: str, proxy_fqdn: str) -> None:
    line = rule.format(proxy_fqdn=proxy_fqdn)
    text = f".:53 {{\n    errors\n    {line}\n    cache 30\n}}\n"
    after = apply(text, ["x.example.com"], answers=V4)
    assert after == ".:53 {\n    errors\n" + ours(["x.example.com"]) + "    cache 30\n}\n"
    assert remove(text) == ".:53 {\n    errors\n    cache 30\n}\n"
    host = managed_hosts(text)
    assert host in ((), ("a.example.com",), ("*.example.com",))


def test_old_rules_to_our_own_proxy_fqdn() -> None:
    text = ".:53 {\n    rewrite name exact a.b hp.hp.svc.example.internal.\n}\n"
    # Not ours under the default proxy FQDN ...
    assert managed_hosts(text) == ()
    assert remove(text) == text
    # ... ours under that proxy FQDN, with or without the trailing dot.
    for proxy_fqdn in ("hp.hp.svc.example.internal.", "hp.hp.svc.example.internal"):
        assert managed_hosts(text, proxy_fqdn=proxy_fqdn) == ("a.b",)
        assert remove(text, proxy_fqdn=proxy_fqdn) == ".:53 {\n}\n"
    # The original tool's proxy FQDN is always ours.
    original = (".:53 {\n    rewrite name exact a.b "
                "hairpin-proxy.hairpin-proxy.svc.cluster.local\n}\n")
    assert remove(original, proxy_fqdn="hp.hp.svc.example.internal.") == ".:53 {\n}\n"


def test_foreign_rewrites_and_templates_are_left_alone() -> None:
    text = (".:53 {\n"
            "    rewrite name exact a.b other.svc.cluster.local.\n"
            "    rewrite name exact hairpin-proxy.hairpin-proxy.svc.cluster.local. x.y\n"
            "    template IN A probe.example {\n"
            r"        match ^(?P<other>probe)\.example\.$" "\n"
            '        answer "{{ .Name }} 60 IN A 10.0.0.1"\n'
            "    }\n"
            "}\n")
    after = apply(text, ["a.b"], answers=V4)
    assert after == ".:53 {\n" + ours(["a.b"]) + text.removeprefix(".:53 {\n")
    assert remove(after) == text


def test_legacy_lines_are_migrated() -> None:
    before = BY_NAME["legacy"].text
    assert managed_hosts(before) == ("bar.example.com", "foo.example.com")
    after = apply(before, ["foo.example.com"], answers=V4)
    assert "Added by hairpin-proxy" not in after
    assert "rewrite" not in after
    # The original tool wrote its file without a final newline.
    kubeadm = BY_NAME["kubeadm"].text.removesuffix("\n")
    assert after == kubeadm.replace(".:53 {\n", ".:53 {\n" + ours(["foo.example.com"]), 1)
    assert remove(before) == kubeadm


def test_legacy_line_that_is_not_a_plain_directive_is_refused() -> None:
    with pytest.raises(CorefileError, match=r"line 2, column \d+: cannot remove"):
        remove(".:53 {\n    hosts { # Added by hairpin-proxy\n    }\n}\n")
    with pytest.raises(CorefileError, match="line 1, column 1: cannot remove"):
        remove("# Added by hairpin-proxy\n.:53 {\n}\n")


@pytest.mark.parametrize(("text", "expected"), [
    # Markers on one side only, or damaged: dropped and written anew.
    (f".:53 {{\n    {B}\n    errors\n}}\n", ".:53 {\n{set}    errors\n}\n"),
    (f".:53 {{\n    errors\n    {E}\n}}\n", ".:53 {\n    errors\n{set}}\n"),
    (".:53 {\n    errors\n    # BEGIN hairpin-proxy (damag\n}\n", ".:53 {\n    errors\n{set}}\n"),
    (f".:53 {{\n    {B}\n    {B}\n    {E}\n    {E}\n    errors\n}}\n",
     ".:53 {\n{set}    errors\n}\n"),
    # A marker that is not alone on its line, or nested in a plugin, is not ours to drop.
    (f".:53 {{\n    errors {B}\n}}\n", f".:53 {{\n{{set}}    errors {B}\n}}\n"),
    (f".:53 {{\n    log {{\n        {B}\n    }}\n}}\n",
     f".:53 {{\n{{set}}    log {{\n        {B}\n    }}\n}}\n"),
    # Outside the root block: someone else's.
    (f"x.org {{\n    {B}\n}}\n.:53 {{\n}}\n", f"x.org {{\n    {B}\n}}\n.:53 {{\n{{set}}}}\n"),
])
def test_marker_lines(text: str, expected: str) -> None:
    after = apply(text, ["a.b"], answers=V4)
    assert after == expected.replace("{set}", ours(["a.b"]))
    assert apply(after, ["a.b"], answers=V4) == after


def test_stanza_with_a_regex_we_did_not_write_is_replaced() -> None:
    text = (".:53 {\n    template IN A {\n"
            r"        match (?i)^(?P<hairpin_proxy>.*)\.$" "\n"
            '        answer "{{ .Name }} 10 IN A 10.0.0.1"\n        fallthrough\n    }\n'
            "    errors\n}\n")
    assert managed_hosts(text) == ()  # it redirects no host we can name
    assert strays(text) == ()
    assert apply(text, ["a.b"], answers=V4) == ".:53 {\n" + ours(["a.b"]) + "    errors\n}\n"
    assert remove(text) == ".:53 {\n    errors\n}\n"


def test_rules_in_other_blocks_and_snippets_are_strays_never_edited() -> None:
    text = BY_NAME["moved-to-stub"].text
    found = strays(text)
    assert [(s.line, s.where, s.what) for s in found] == [
        (2, "snippet (hairpin)", "rewrite rule to the proxy Service"),
        (7, "server block 'example.internal:53'", "hairpin-proxy template stanza"),
        (13, "server block 'example.internal:53'", "hairpin-proxy template stanza"),
    ]
    assert str(found[1]) == ("line 7: hairpin-proxy template stanza in server block "
                             "'example.internal:53'")
    assert managed_hosts(text) == ()
    after = apply(text, HOSTS, answers=V4)
    # The stray stanzas stay byte for byte; the root block gets a fresh set where its
    # (empty) markers were.
    assert after == text.replace(f"    {B}\n    {E}\n", ours(HOSTS))
    assert strays(after) == found
    assert remove(after) == text.replace(f"    {B}\n    {E}\n", "")


def test_stanzas_moved_within_the_root_block_are_rewritten_where_they_are() -> None:
    text = BY_NAME["moved-in-root"].text
    after = apply(text, ["c.example.com"], answers=DUAL)
    stanzas = text.partition("    cache 30\n")[2].partition("    loop\n")[0]
    assert stanzas.startswith("    template IN A {\n")
    assert after == text.replace(stanzas, ours(["c.example.com"], DUAL))


def test_one_set_left_from_several() -> None:
    for name in ("split-in-root", "duplicated", "begin-only", "end-only"):
        sample = BY_NAME[name]
        after = apply(sample.text, ["c.example.com"], answers=V6)
        check_one_set_per_root(after, ["c.example.com"], V6)
        assert strip_ours(after) == strip_ours(sample.text)
        # The set goes where the first line of ours was.
        first = find_ours(sample.text).by_block[0][0]
        assert after.splitlines()[first] == f"    {B}", name


def test_import_snippet_spliced_into_a_root_block_is_ours() -> None:
    snippet = import_snippet(["a.b"], answers=V4)
    text = ".:53 {\n" + "".join("    " + line for line in snippet.splitlines(True)) + "}\n"
    assert text == ".:53 {\n" + ours(["a.b"]) + "}\n"
    assert managed_hosts(text) == ("a.b",)


# --- refusals --------------------------------------------------------------------------------


def assert_refused(text: str, match: str, *, line: int | None = None,
                   hosts: tuple[str, ...] = ("a.b",), dns_port: int = 53) -> None:
    with pytest.raises(CorefileError, match=match) as err:
        apply(text, hosts, answers=V4, dns_port=dns_port)
    if line is not None:
        assert err.value.line == line
        assert f"line {line}, column " in str(err.value)


@pytest.mark.parametrize(("text", "line", "match"), [
    (".:53 {\n    errors\n", 1, "never closed"),
    (".:53 {\n    errors\n}\n}\n", 4, "unexpected '}'"),
    ('.:53 {\n    forward . "/etc/resolv.conf\n}\n', 2, "unterminated"),
])
def test_unparsable_corefile_is_refused(text: str, line: int, match: str) -> None:
    assert_refused(text, match, line=line)
    assert_refused(text, match, line=line, hosts=())
    for query in (managed_hosts, strays):
        with pytest.raises(CorefileError, match=match):
            query(text)


@pytest.mark.parametrize(("text", "dns_port"), [
    ("example.internal:53 {\n    errors\n}\n", 53),
    (".:5353 {\n    errors\n}\n", 53),
    (".:53 {\n    errors\n}\n", 5353),
    ("tls://.:53 {\n    errors\n}\n", 53),
    ("(snippet) {\n    errors\n}\n", 53),
    ("", 53),
])
def test_no_root_block_is_refused(text: str, dns_port: int) -> None:
    assert_refused(text, "no server block for the root zone", dns_port=dns_port)
    with pytest.raises(CorefileError, match="no server block"):
        managed_hosts(text, dns_port=dns_port)


def test_our_stanza_sharing_a_line_is_refused() -> None:
    stanza = "".join(ours(["a.b"]).splitlines(keepends=True)[1:6]).lstrip()
    assert stanza.startswith("template IN A {")
    assert_refused(".:53 { " + stanza + "}\n", "shares its line", line=1)
    assert_refused(".:53 { " + stanza + "}\n", "shares its line", line=1, hosts=())


@pytest.mark.parametrize("port", [0, -1, 65536])
def test_impossible_dns_port_is_refused(port: int) -> None:
    assert_refused(".:53 {\n}\n", "not a TCP/UDP port", dns_port=port)


def test_one_line_root_block_is_refused() -> None:
    assert_refused(".:53 { }\n", "opens and closes on one line", line=1)
    # ... but removing nothing from it is fine.
    assert remove(".:53 { }\n") == ".:53 { }\n"


def test_opening_line_without_line_ending_is_refused() -> None:
    assert_refused(".:53", "no line ending", line=1)


@pytest.mark.parametrize("bad", [
    "a b.com", "a\tb.com", "a\nb.com", "{a}.com", "a}.com", 'a".com', "a'.com", "a`.com",
    "a#b.com", "a;b.com", "a\x00b.com", "a\x1bb.com", "a\x7fb.com", "a\u2028b.com", "a\\b.com",
    "", "a..b", ".a.b", "a.b.", "*", "*.", "**", "**.", "***.b", "*.**.b", "a.*.b", "a*.b",
    "a**.b", "x" * 254,
])
def test_bad_host_is_refused(bad: str) -> None:
    with pytest.raises(CorefileError):
        apply(BY_NAME["kubeadm"].text, ["ok.example.com", bad], answers=V4)
    with pytest.raises(CorefileError):
        import_snippet(["ok.example.com", bad], answers=V4)


@pytest.mark.parametrize("bad", ["b.example.com\nc.example.com", "\n", "a..b", "*", 7])
def test_one_bad_host_among_many_is_refused(bad: object) -> None:
    # Large host sets are checked in one step; a single bad host must still be caught.
    good = [f"h{i}.example.com" for i in range(50)]
    with pytest.raises((CorefileError, TypeError)):
        apply(BY_NAME["kubeadm"].text, [*good, bad], answers=V4)  # type: ignore[list-item]


def test_result_over_the_configmap_limit_is_refused() -> None:
    text = BY_NAME["kubeadm"].text
    # Names that share little: the compact spelling cannot shrink them much.
    hosts = [f"{hashlib.sha256(str(i).encode()).hexdigest()[:40]}.example.com"
             for i in range(15_000)]
    with pytest.raises(CorefileError, match="ConfigMap limit"):
        apply(text, hosts, answers=V4)
    # Just under the limit is accepted and the output stays within it.
    room = MAX_CONFIGMAP_BYTES - len(apply(text, ["a.b"], answers=V4).encode())
    padded = "#" * (room - 1) + "\n" + text
    assert len(apply(padded, ["a.b"], answers=V4).encode()) == MAX_CONFIGMAP_BYTES
    with pytest.raises(CorefileError, match="ConfigMap limit"):
        apply("#" + padded, ["a.b"], answers=V4)


def test_many_hosts_are_split_over_several_regexes_and_read_back() -> None:
    hosts = sorted({f"host-{i:05d}.example.com" for i in range(3000)}
                   | {f"*.w{i}.example.org" for i in range(500)})
    after = apply(BY_NAME["kubeadm"].text, hosts, answers=DUAL)
    assert managed_hosts(after) == tuple(hosts)
    match_lines = [line for line in after.splitlines() if line.lstrip().startswith("match ")]
    assert len(match_lines) > 4 and len(match_lines) % 2 == 0
    assert max(len(line.split()[1]) for line in match_lines) <= 8000
    assert apply(after, list(reversed(hosts)), answers=DUAL) == after
    assert PROXY_FQDN not in after
