"""Properties of hairpin_proxy.corefile over generated Corefiles in many layouts.

The generator varies what real files vary: header forms, ports, indentation (tabs, spaces,
none), trailing blanks, comments holding braces and quotes, quoted arguments, nested blocks,
snippets, top-level imports, stub-zone blocks, CRLF, and a missing final newline.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hairpin_proxy.corefile import (
    Answers,
    CorefileError,
    Directive,
    apply,
    managed_hosts,
    parse,
    remove,
    strays,
)
from tests.corefiles.oracle import check_one_set_per_root, lines, strip_ours

HOSTS = st.lists(st.sampled_from(["a.example.com", "b.example.com", "*.example.com",
                                  "*.apps.example.org", "x-1.example.net"]), max_size=5)

# Root-zone headers; those without ":{port}" on the "." key only serve port 53.
ROOT_HEADERS = [".:{port} {{", ". {{", ".{{", "dns://.:{port} {{", ". example.org:{port} {{",
                "example.org .:{port} {{", ".:{port}\t{{", "  .:{port}   {{   # root {{ zone",
                ".:{port},\nexample.org {{", ".:{port}\n{{", "DNS://.:{port} {{"]
OTHER_HEADERS = ["example.internal:{port} {{", "tls://.:853 {{", "10.in-addr.arpa {{",
                 "example.org:{other} {{"]
SIMPLE = ["errors", "health", "ready", "loop", "reload", "loadbalance", "cache 30",
          "prometheus :9153", "forward . /etc/resolv.conf", 'forward . "/etc/resolv.conf"',
          "import /etc/coredns/custom/*.override", "bufsize 1232", "log", "whoami",
          "forward . {$UPSTREAM}"]
NESTED = [("health", ["lameduck 5s"]),
          ("kubernetes cluster.local in-addr.arpa ip6.arpa",
           ["pods insecure", "fallthrough in-addr.arpa ip6.arpa", "ttl 30"]),
          ("hosts /etc/coredns/NodeHosts", ["ttl 60", "reload 15s", "fallthrough"]),
          ("cache 30", ["disable success cluster.local", "prefetch 10 1m 10%"]),
          ("log .", ["class error"]),
          ("template IN TXT probe.example.org", ['answer "{{ .Name }} 60 IN TXT \\"a # }\\""'])]
COMMENTS = ["", "  # a comment", " # { not a brace", ' # "not a quote', "\t#}"]
ANSWERS = st.sampled_from([Answers.of(["10.96.0.20"]), Answers.of(["fd00::20"]),
                           Answers.of(["10.96.0.20", "fd00::20"])])


@dataclass(frozen=True)
class Layout:
    text: str
    port: int
    roots: int


@st.composite
def directive(draw: st.DrawFn, indent: str, unit: str) -> list[str]:
    comment = draw(st.sampled_from(COMMENTS))
    trailing = draw(st.sampled_from(["", " ", "\t"]))
    if draw(st.booleans()):
        return [indent + draw(st.sampled_from(SIMPLE)) + trailing + comment]
    head, body = draw(st.sampled_from(NESTED))
    if draw(st.integers(0, 3)) == 0:  # inline: log . { class error }
        return [f"{indent}{head} {{ {body[0]} }}{comment}"]
    inner = indent + draw(st.sampled_from([unit, unit + unit, "   ", "       "]))
    return ([f"{indent}{head}{draw(st.sampled_from([' ', '  ', '']))}{{{comment}"]
            + [inner + line for line in body]
            + [indent + draw(st.sampled_from(["", " ", "  "])) + "}"])


@st.composite
def server_block(draw: st.DrawFn, header: str, unit: str) -> list[str]:
    base = draw(st.sampled_from(["", "", unit]))
    indent = base + unit
    out = [base + header]
    for _ in range(draw(st.integers(0, 6))):
        out += draw(directive(indent, unit))
        if draw(st.integers(0, 5)) == 0:
            out.append(draw(st.sampled_from(["", indent + "# note", "   "])))
    out.append(base + "}")
    return out


@st.composite
def corefiles(draw: st.DrawFn) -> Layout:
    port = draw(st.sampled_from([53, 53, 5353, 8053]))
    other = draw(st.sampled_from([p for p in (53, 5353, 8053, 9053) if p != port]))
    unit = draw(st.sampled_from(["    ", "  ", "\t"]))
    blocks: list[list[str]] = []
    roots = draw(st.integers(1, 2))
    headers = [h for h in ROOT_HEADERS if port == 53 or ".:{port}" in h]
    for _ in range(roots):
        header = draw(st.sampled_from(headers)).format(port=port)
        blocks.append(draw(server_block(header, unit)))
    for _ in range(draw(st.integers(0, 2))):
        header = draw(st.sampled_from(OTHER_HEADERS)).format(port=port, other=other)
        blocks.insert(draw(st.integers(0, len(blocks))), draw(server_block(header, unit)))
    if draw(st.booleans()):
        blocks.insert(0, ["(common) {", unit + "errors", unit + "cache 30", "}"])
    lines = [line for block in blocks for line in [*block, *draw(st.sampled_from([[], [""]]))]]
    if draw(st.booleans()):
        lines.append("import /etc/coredns/custom/*.server")
    if draw(st.booleans()):
        lines.insert(0, "# Corefile")
    nl = draw(st.sampled_from(["\n", "\r\n"]))
    text = nl.join(lines) + draw(st.sampled_from([nl, "", nl + nl]))
    return Layout(text, port, roots)


GENERATED = settings(max_examples=150, deadline=None)


def is_ours(d: Directive) -> bool:
    return d.name == "template" and any("(?P<hairpin_proxy>" in t.text for t in d.tokens)


@GENERATED
@given(layout=corefiles(), first=HOSTS, second=HOSTS, answers=ANSWERS)
def test_generated_corefiles_round_trip(layout: Layout, first: list[str], second: list[str],
                                        answers: Answers) -> None:
    text, port = layout.text, layout.port
    cf = parse(text)
    assert len(cf.root_blocks(port)) == layout.roots
    out = apply(text, first, answers=answers, dns_port=port)
    check_one_set_per_root(out, first, answers, port)
    assert strip_ours(out, port) == text
    assert apply(out, first, answers=answers, dns_port=port) == out
    assert managed_hosts(out, dns_port=port) == tuple(sorted(set(first)))
    assert strays(out, dns_port=port) == ()
    assert remove(out, dns_port=port) == text
    assert apply(out, second, answers=answers, dns_port=port) == apply(
        text, second, answers=answers, dns_port=port)
    # The edit adds two stanzas to each root block and touches nothing else in the structure.
    before, after = cf, parse(out)
    assert [b.keys for b in after.server_blocks] == [b.keys for b in before.server_blocks]
    for old, new in zip(before.server_blocks, after.server_blocks, strict=True):
        names = [d.words() for d in new.directives if not is_ours(d)]
        assert names == [d.words() for d in old.directives]
        added = len(new.directives) - len(old.directives)
        assert added == (2 if first and old.is_root(port) else 0)


@GENERATED
@given(layout=corefiles(), data=st.data())
def test_removing_any_brace_is_refused(layout: Layout, data: st.DataObject) -> None:
    braces = [t for t in parse(layout.text).tokens if t.kind in ("open", "close")]
    victim = data.draw(st.sampled_from(braces))
    broken = layout.text[:victim.start] + layout.text[victim.end:]
    with pytest.raises(CorefileError) as err:
        apply(broken, ["a.example.com"], answers=Answers.of(["10.0.0.1"]), dns_port=layout.port)
    assert err.value.line is not None


@GENERATED
@given(layout=corefiles(), data=st.data())
def test_an_unterminated_quote_is_refused(layout: Layout, data: st.DataObject) -> None:
    # A quote opened where no other quote follows can never be closed.
    words = [t for t in parse(layout.text).tokens if t.kind == "word" and t.first_on_line
             and '"' not in layout.text[t.start:]]
    assume(words)
    victim = data.draw(st.sampled_from(words))
    broken = layout.text[:victim.start] + '"' + layout.text[victim.start:]
    with pytest.raises(CorefileError, match="unterminated quoted string"):
        apply(broken, ["a.example.com"], answers=Answers.of(["10.0.0.1"]), dns_port=layout.port)


@GENERATED
@given(layout=corefiles(), first=HOSTS, second=HOSTS, answers=ANSWERS, data=st.data())
def test_damaged_and_moved_sets_give_one_set(layout: Layout, first: list[str],
                                             second: list[str], answers: Answers,
                                             data: st.DataObject) -> None:
    assume(first)
    text, port = layout.text, layout.port
    out = apply(text, first, answers=answers, dns_port=port)
    rows = lines(out)
    # Drop any of the marker lines, and move the first root block's AAAA stanza to its end.
    markers = [n for n, row in enumerate(rows) if row.lstrip().startswith("# ")
               and "hairpin-proxy" in row]
    dropped = set(data.draw(st.lists(st.sampled_from(markers), unique=True)))
    if data.draw(st.booleans()):
        root = parse(out).root_blocks(port)[0]
        aaaa = [d for d in root.directives if d.words() == ("template", "IN", "AAAA")][-1]
        start, end = aaaa.line - 1, aaaa.tokens[-1].end_line
        close = len(rows) if root.body is None else root.body.close.line - 1
        stanza = rows[start:end]
        rows = rows[:start] + rows[end:close] + stanza + rows[close:]
        dropped = {n - len(stanza) if end <= n < close else n for n in dropped}
    damaged = "".join(row for n, row in enumerate(rows) if n not in dropped)
    assert managed_hosts(damaged, dns_port=port) == tuple(sorted(set(first)))
    out = apply(damaged, second, answers=answers, dns_port=port)
    check_one_set_per_root(out, second, answers, port)
    assert strip_ours(out, port) == text
