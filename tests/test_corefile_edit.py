"""apply/remove/managed_hosts: placement, byte preservation, migration and every refusal."""

from __future__ import annotations

import pytest

from hairpin_proxy.corefile import (
    BEGIN_MARKER,
    END_MARKER,
    MAX_CONFIGMAP_BYTES,
    CorefileError,
    apply,
    managed_hosts,
    parse,
    remove,
)
from tests.corefiles import BY_NAME, TARGET


def rule(host: str) -> str:
    return f"rewrite name exact {host} {TARGET}"


def test_kubeadm_golden() -> None:
    before = BY_NAME["kubeadm"].text
    after = apply(before, ["b.example.com", "a.example.com", "*.apps.example.com",
                           "a.example.com"], target=TARGET)
    assert after == before.replace(".:53 {\n", (
        ".:53 {\n"
        f"    {BEGIN_MARKER}\n"
        rf"    rewrite name regex ^[^.]+\.apps\.example\.com\.?$ {TARGET} answer auto" "\n"
        f"    {rule('a.example.com')}\n"
        f"    {rule('b.example.com')}\n"
        f"    {END_MARKER}\n"), 1)
    assert managed_hosts(after) == ("*.apps.example.com", "a.example.com", "b.example.com")


def test_helm_dot_brace_header_and_missing_final_newline() -> None:
    before = BY_NAME["helm-no-port"].text
    assert not before.endswith("\n")
    after = apply(before, ["x.example.com"], target=TARGET)
    assert after.startswith(f".{{\n    {BEGIN_MARKER}\n    {rule('x.example.com')}\n"
                            f"    {END_MARKER}\n    errors\n")
    assert after.endswith("loadbalance\n}")
    assert remove(after) == before


def test_crlf_file_stays_crlf() -> None:
    before = BY_NAME["crlf"].text
    after = apply(before, ["x.example.com"], target=TARGET)
    assert after.count("\n") == after.count("\r\n")
    assert f"\r\n    {BEGIN_MARKER}\r\n    {rule('x.example.com')}\r\n    {END_MARKER}\r\n" in after
    assert remove(after) == before


def test_tabs_file_gets_tabs() -> None:
    after = apply(BY_NAME["tabs"].text, ["x.example.com"], target=TARGET)
    assert f".:53 {{\n\t{BEGIN_MARKER}\n\t{rule('x.example.com')}\n\t{END_MARKER}\n\terrors\n" \
        in after


def test_irregular_indentation_follows_the_first_sibling() -> None:
    text = "  .:53 {\n      errors\n   cache 30\n  }\n"
    after = apply(text, ["x.example.com"], target=TARGET)
    assert after.startswith(f"  .:53 {{\n      {BEGIN_MARKER}\n      {rule('x.example.com')}\n")


def test_empty_root_block_uses_header_indent_plus_file_unit() -> None:
    assert apply(".:53 {\n}\n", ["a.b"], target=TARGET) == (
        f".:53 {{\n    {BEGIN_MARKER}\n    rewrite name exact a.b {TARGET}\n    {END_MARKER}\n}}\n")
    tabbed = "x.org {\n\terrors\n}\n.:53 {\n}\n"
    assert f".:53 {{\n\t{BEGIN_MARKER}\n" in apply(tabbed, ["a.b"], target=TARGET)


def test_directive_on_the_opening_line_puts_the_block_before_the_closing_brace() -> None:
    text = ".:53 { errors\n    cache 30\n}\n"
    after = apply(text, ["a.b"], target=TARGET)
    assert after == (f".:53 {{ errors\n    cache 30\n    {BEGIN_MARKER}\n"
                     f"    rewrite name exact a.b {TARGET}\n    {END_MARKER}\n}}\n")
    assert remove(after) == text


def test_comment_after_the_opening_brace_stays_on_its_line() -> None:
    text = BY_NAME["multi-block"].text
    after = apply(text, ["a.b"], target=TARGET)
    assert f"shared plugin chain\n    {BEGIN_MARKER}\n" in after.replace(
        "share one plugin chain", "shared plugin chain")
    assert after.count(BEGIN_MARKER) == 1  # only the root block, not the stub or TLS one


def test_brace_on_the_next_line() -> None:
    after = apply(BY_NAME["brace-next-line"].text, ["a.b"], target=TARGET)
    assert after.startswith(f".:53\n{{\n    {BEGIN_MARKER}\n")


def test_braceless_server_block() -> None:
    text = ".:53\nerrors\nforward . 8.8.8.8\n"
    after = apply(text, ["a.b"], target=TARGET)
    # Indented like its siblings, which here start in the first column.
    assert after == (f".:53\n{BEGIN_MARKER}\nrewrite name exact a.b {TARGET}\n"
                     f"{END_MARKER}\nerrors\nforward . 8.8.8.8\n")
    assert remove(after) == text


def test_every_root_block_gets_one_block() -> None:
    text = (".:53 {\n    bind 10.0.0.1\n}\ndns://. {\n    bind 10.0.0.2\n}\n"
            "example.org {\n    whoami\n}\n")
    after = apply(text, ["a.b"], target=TARGET)
    cf = parse(after)
    assert after.count(BEGIN_MARKER) == 2
    assert [sum(1 for c in cf.comments if c.text == BEGIN_MARKER
                and b.inner(len(after))[0] <= c.start < b.inner(len(after))[1])
            for b in cf.server_blocks] == [1, 1, 0]
    assert remove(after) == text


def test_dns_port_selects_the_block() -> None:
    text = ".:53 {\n    errors\n}\n.:5353 {\n    errors\n}\n"
    after = apply(text, ["a.b"], target=TARGET, dns_port=5353)
    assert after.index(BEGIN_MARKER) > after.index(".:5353")
    assert managed_hosts(after, dns_port=5353) == ("a.b",)
    assert managed_hosts(after, dns_port=53) == ()


def test_changing_port_moves_the_block() -> None:
    text = ".:53 {\n    errors\n}\n.:5353 {\n    errors\n}\n"
    on53 = apply(text, ["a.b"], target=TARGET)
    moved = apply(on53, ["a.b"], target=TARGET, dns_port=5353)
    assert moved == apply(text, ["a.b"], target=TARGET, dns_port=5353)


def test_existing_block_is_replaced_in_place_with_its_indentation() -> None:
    text = (f".:53 {{\n    errors\n  {BEGIN_MARKER}\n  {rule('old.example.com')}\n"
            f"  {END_MARKER}\n    cache 30\n}}\n")
    after = apply(text, ["new.example.com"], target=TARGET)
    assert after == (f".:53 {{\n    errors\n  {BEGIN_MARKER}\n  {rule('new.example.com')}\n"
                     f"  {END_MARKER}\n    cache 30\n}}\n")
    assert apply(after, ["new.example.com"], target=TARGET) == after
    assert remove(after) == ".:53 {\n    errors\n    cache 30\n}\n"


def test_target_change_rewrites_the_rules() -> None:
    first = apply(BY_NAME["kubeadm"].text, ["a.b"], target=TARGET)
    other = apply(first, ["a.b"], target="hp.hp.svc.example.internal.")
    assert "rewrite name exact a.b hp.hp.svc.example.internal.\n" in other
    assert TARGET not in other


def test_legacy_lines_are_migrated() -> None:
    before = BY_NAME["legacy"].text
    after = apply(before, ["foo.example.com"], target=TARGET)
    assert "Added by hairpin-proxy" not in after
    assert "rewrite name foo.example.com" not in after
    # The original tool wrote its file without a final newline.
    kubeadm = BY_NAME["kubeadm"].text.removesuffix("\n")
    assert after == kubeadm.replace(
        ".:53 {\n", f".:53 {{\n    {BEGIN_MARKER}\n    {rule('foo.example.com')}\n"
                    f"    {END_MARKER}\n", 1)
    assert remove(before) == kubeadm


def test_legacy_line_that_is_not_a_plain_directive_is_refused() -> None:
    with pytest.raises(CorefileError, match=r"line 2, column \d+: cannot remove"):
        remove(".:53 {\n    hosts { # Added by hairpin-proxy\n    }\n}\n")
    with pytest.raises(CorefileError, match="line 1, column 1: cannot remove"):
        remove("# Added by hairpin-proxy\n.:53 {\n}\n")


def test_unchanged_hosts_give_an_identical_string() -> None:
    first = apply(BY_NAME["k3s"].text, ["a.example.com", "*.example.com"], target=TARGET)
    again = apply(first, ("*.example.com", "a.example.com", "a.example.com"), target=TARGET)
    assert again == first


def test_hosts_may_be_any_iterable_but_not_a_string() -> None:
    text = BY_NAME["kubeadm"].text
    assert apply(text, iter(["a.b"]), target=TARGET) == apply(text, ["a.b"], target=TARGET)
    with pytest.raises(TypeError):
        apply(text, "a.b", target=TARGET)


# --- refusals --------------------------------------------------------------------------------


def assert_refused(text: str, match: str, *, line: int | None = None,
                   hosts: tuple[str, ...] = ("a.b",), dns_port: int = 53) -> None:
    with pytest.raises(CorefileError, match=match) as err:
        apply(text, hosts, target=TARGET, dns_port=dns_port)
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


B, E = BEGIN_MARKER, END_MARKER


@pytest.mark.parametrize(("text", "line", "match"), [
    (f".:53 {{\n  {B}\n  {B}\n  {E}\n}}\n", 3, "second BEGIN"),
    (f".:53 {{\n  {B}\n  {E}\n  {B}\n  {E}\n}}\n", 4, "second managed block"),
    (f".:53 {{\n  {B}\n}}\n", 2, "BEGIN marker without an END"),
    (f".:53 {{\n  {E}\n}}\n", 2, "END marker without a BEGIN"),
    (f".:53 {{\n  errors {B}\n  {E}\n}}\n", 2, "line of its own"),
    (f".:53 {{\n  # BEGIN hairpin-proxy\n  {E}\n}}\n", 2, "damaged"),
    (f".:53 {{\n  {B}\n}}\nx.org {{\n  {E}\n}}\n", 2, "directly inside one server block"),
    (f".:53 {{\n  log {{\n    {B}\n    {E}\n  }}\n}}\n", 3, "directly inside"),
    (f"{B}\n{E}\n.:53 {{\n}}\n", 1, "directly inside"),
    (f"(s) {{\n  {B}\n  {E}\n}}\n.:53 {{\n}}\n", 2, "directly inside"),
])
def test_bad_markers_are_refused(text: str, line: int, match: str) -> None:
    assert_refused(text, match, line=line)
    assert_refused(text, match, line=line, hosts=())


def test_foreign_lines_in_the_block_are_reported_and_overwritten() -> None:
    text = f".:53 {{\n  {B}\n  rewrite name regex ^a.*$ {TARGET} answer auto\n  {E}\n}}\n"
    with pytest.raises(CorefileError, match=r"line 3, column 3: .*did not write"):
        managed_hosts(text, strict=True)
    assert managed_hosts(text) == ()
    mixed = f".:53 {{\n  {B}\n  {rule('a.b')}\n  whoami\n  {E}\n}}\n"
    assert managed_hosts(mixed) == ("a.b",)
    with pytest.raises(CorefileError, match=r"line 4, column 3: .*did not write"):
        managed_hosts(mixed, strict=True)
    # The markers say "do not edit": the next apply puts back exactly the wanted rules.
    assert apply(text, ["a.b"], target=TARGET) == f".:53 {{\n  {B}\n  {rule('a.b')}\n  {E}\n}}\n"
    assert remove(text) == ".:53 {\n}\n"


def test_block_in_a_non_root_server_block_is_removed() -> None:
    text = f"x.org {{\n    {B}\n    {rule('a.b')}\n    {E}\n    whoami\n}}\n.:53 {{\n}}\n"
    after = apply(text, [], target=TARGET)
    assert after == "x.org {\n    whoami\n}\n.:53 {\n}\n"


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
    "", "a..b", ".a.b", "a.b.", "*", "*.", "a.*.b", "a*.b", "**.b",
])
def test_bad_host_is_refused(bad: str) -> None:
    with pytest.raises(CorefileError):
        apply(BY_NAME["kubeadm"].text, ["ok.example.com", bad], target=TARGET)


@pytest.mark.parametrize("bad", [
    "a b.", "x\t.", "{x}.", 'x".', "x#.", "x;.", "x\r.", "", "*.x.",
])
def test_bad_target_is_refused(bad: str) -> None:
    with pytest.raises(CorefileError, match="target"):
        apply(BY_NAME["kubeadm"].text, ["ok.example.com"], target=bad)


def test_result_over_the_configmap_limit_is_refused() -> None:
    hosts = [f"host-{i:06d}.a-rather-long-subdomain.example.com" for i in range(12_000)]
    with pytest.raises(CorefileError, match="ConfigMap limit"):
        apply(BY_NAME["kubeadm"].text, hosts, target=TARGET)
    # Just under the limit is accepted and the output stays within it.
    text = BY_NAME["kubeadm"].text
    room = MAX_CONFIGMAP_BYTES - len(apply(text, ["a.b"], target=TARGET).encode())
    padded = "#" * (room - 1) + "\n" + text
    assert len(apply(padded, ["a.b"], target=TARGET).encode()) == MAX_CONFIGMAP_BYTES
    with pytest.raises(CorefileError, match="ConfigMap limit"):
        apply("#" + padded, ["a.b"], target=TARGET)


def test_byte_order_mark_before_an_empty_root_block() -> None:
    text = "\ufeff.:53 {\n}\n"
    out = apply(text, ["a.example.com"], target=TARGET)
    assert out == (f"\ufeff.:53 {{\n    {BEGIN_MARKER}\n    rewrite name exact a.example.com "
                   f"{TARGET}\n    {END_MARKER}\n}}\n")
    assert remove(out) == text
