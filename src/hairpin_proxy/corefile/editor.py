"""The editor: keep exactly one set of our rules in each root server block, nothing else.

A set is one run of stanzas between the marker comments: a pair of ``template`` stanzas per
answer set (per proxy Service the hosts go to), in the order ``rules.layout`` gives.

Our rules are found by their content (see ``rules``), never only by the marker comments around
them: a Corefile that lost its comments (kubeadm's migration, a reformatting GitOps tool), whose
markers survive on one side only, or whose rules were moved by hand still gives exactly one set
of rules after one edit, with no duplicates and no orphans. Every byte that is not ours stays
as it was: an edit deletes whole lines of ours (our stanzas, the rules of earlier versions, the
marker comments, the original hairpin-proxy's ``# Added by hairpin-proxy`` lines) and inserts
the new text where the first of them stood, or right after the line that opens the block.

Our rules found outside the root server blocks (someone copied them into a stub domain or a
snippet) are reported by ``strays`` and never edited: they are someone else's now.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast, overload

from hairpin_proxy.corefile.names import checked_hosts
from hairpin_proxy.corefile.parser import parse
from hairpin_proxy.corefile.rules import (
    BEGIN_MARKER,
    DEFAULT_TTL,
    END_MARKER,
    LEGACY_MARKER,
    MARKER_PREFIXES,
    Answers,
    RuleSet,
    all_stanzas,
    answer_sets,
    is_old_rule,
    is_our_template,
    old_rule_host,
    proxy_fqdns_of,
    template_answers,
    template_hosts,
)
from hairpin_proxy.corefile.syntax import (
    DEFAULT_DNS_PORT,
    Corefile,
    CorefileError,
    Directive,
    ServerBlock,
)

MAX_CONFIGMAP_BYTES = 1024 * 1024
DEFAULT_PROXY_FQDN = "hairpin-proxy.hairpin-proxy.svc.cluster.local."

# One answer set as callers give it: the hosts, and the addresses they resolve to.
HostGroup = tuple[Iterable[str], Answers]


def _check_size(text: str) -> None:
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    if size > MAX_CONFIGMAP_BYTES:
        raise CorefileError(f"the result would be {size} bytes, over the ConfigMap limit of "
                            f"{MAX_CONFIGMAP_BYTES} bytes")


def _roots(cf: Corefile, dns_port: int) -> tuple[ServerBlock, ...]:
    if not 0 < dns_port < 65536:
        raise CorefileError(f"DNS port {dns_port} is not a TCP/UDP port")
    roots = cf.root_blocks(dns_port)
    if not roots:
        seen = ", ".join(" ".join(b.keys) for b in cf.server_blocks) or "none"
        raise CorefileError(f"no server block for the root zone '.' on port {dns_port} "
                            f"(server blocks found: {seen})")
    return roots


def _line_start(text: str, offset: int) -> int:
    return text.rfind("\n", 0, offset) + 1


def _line_end(text: str, offset: int) -> int:
    """The offset just after the line ending of the line holding ``offset`` (or EOF)."""
    nl = text.find("\n", offset)
    return len(text) if nl < 0 else nl + 1


def _line_ending(text: str, offset: int) -> str:
    nl = text.find("\n", offset)
    if nl < 0:
        return ""
    return "\r\n" if nl > 0 and text[nl - 1] == "\r" else "\n"


def _indent_unit(text: str) -> str:
    # The start of the file decides: a large Corefile is large because of our own long lines,
    # which are indented with the unit found before them.
    tabs = spaces = 0
    # Line by line rather than a regex over every character: the sample is a few long lines.
    for line in text[:_UNIT_SAMPLE].split("\n"):
        first = line[:1]
        if first in ("\t", " "):
            rest = line.lstrip(first)
            if rest and not rest[0].isspace():
                tabs += first == "\t"
                spaces += first == " "
    return "\t" if tabs > spaces else "    "


_UNIT_SAMPLE = 65536


@dataclass(frozen=True, slots=True)
class _Span:
    """Whole lines of ours to delete: [lo, hi), with the indentation of the first."""

    lo: int
    hi: int
    indent: str


def _whole_lines(text: str, start: int, end: int, line: int, what: str) -> _Span:
    lo, hi = _line_start(text, start), _line_end(text, end)
    before, after = text[lo:start], text[end:hi].strip()
    if before.strip() or (after and not after.startswith("#")):
        raise CorefileError(f"cannot remove this {what}: it shares its line with something "
                            "that is not ours", line=line, column=start - lo + 1)
    return _Span(lo, hi, before)


def _is_ours(d: Directive, proxy_fqdns: Sequence[str]) -> bool:
    return is_our_template(d) or is_old_rule(d, proxy_fqdns)


def _our_spans(cf: Corefile, block: ServerBlock, proxy_fqdns: Sequence[str]) -> list[_Span]:
    """Our directives and marker lines directly inside ``block``."""
    text = cf.text
    spans = [_whole_lines(text, d.start, d.end, d.line, "hairpin-proxy rule")
             for d in block.directives if _is_ours(d, proxy_fqdns)]
    lo, hi = block.inner(len(text))
    for c in cf.comments:
        if lo <= c.start < hi and c.alone and c.text.startswith(MARKER_PREFIXES) \
                and _container(cf, c.start) is block:
            spans.append(_Span(_line_start(text, c.start), _line_end(text, c.start),
                               text[_line_start(text, c.start):c.start]))
    return spans


def _container(cf: Corefile, offset: int) -> ServerBlock | None:
    """The server block whose body holds ``offset`` directly (not in a nested block)."""
    for block in cf.server_blocks:
        lo, hi = block.inner(len(cf.text))
        if not lo <= offset < hi:
            continue
        for d in block.directives:
            for nested in d.blocks:
                if nested.open.start <= offset < nested.close.end:
                    return None
        return block
    return None


def _legacy_spans(cf: Corefile) -> list[_Span]:
    """The lines the original hairpin-proxy added (``... # Added by hairpin-proxy``)."""
    text = cf.text
    spans: list[_Span] = []
    for c in cf.comments:
        # The original tool dropped every line that, stripped, ended with its marker.
        if not c.text.rstrip().endswith(LEGACY_MARKER):
            continue
        start, end = _line_start(text, c.start), _line_end(text, c.start)
        on_line = [t for t in cf.tokens if t.end > start and t.start < end]
        if (any(t.kind in ("open", "close") for t in on_line)
                or any(t.start < start or t.end > end for t in on_line)
                or _container(cf, c.start) is None):
            raise CorefileError("cannot remove this line marked 'Added by hairpin-proxy': it is "
                                "not a plain directive line inside a server block",
                                line=c.line, column=c.column)
        line = text[start:end]
        spans.append(_Span(start, end, line[:len(line) - len(line.lstrip())]))
    return spans


def _insertion(cf: Corefile, block: ServerBlock, unit: str) -> tuple[int, str, str]:
    """Where new rules go in a block without any of ours: (offset, indentation, line ending)."""
    text = cf.text
    opener = block.body.open if block.body is not None else block.header[-1]
    following = next((t for t in cf.tokens if t.start >= opener.end), None)
    if block.body is not None and following is not None and following.line == opener.line:
        # Something shares the opening line; go in front of the closing brace instead.
        close = block.body.close
        if not close.first_on_line:
            raise CorefileError("cannot place our rules: this root server block opens and "
                                "closes on one line", line=block.line, column=block.column)
        offset = _line_start(text, close.start)
        nl = _line_ending(text, close.start) or _line_ending(text, opener.start)
    else:
        nl = _line_ending(text, opener.end)
        if not nl:
            raise CorefileError("cannot place our rules: the server block's opening line is "
                                "the last line and has no line ending",
                                line=block.line, column=block.column)
        offset = _line_end(text, opener.end)
    for d in block.directives:
        if d.first_on_line:
            return offset, text[_line_start(text, d.start):d.start], nl
    header_start = _line_start(text, block.header[0].start)
    # A byte-order mark in front of the first header is not indentation.
    header_indent = text[header_start:block.header[0].start].lstrip("\ufeff")
    return offset, header_indent + unit, nl


def _splice(text: str, edits: Iterable[tuple[int, int, str]]) -> str:
    """Apply non-overlapping edits front to back; an insertion sorts before a deletion that
    starts at the same offset, so it lands in front of what follows."""
    pieces: list[str] = []
    done = 0
    for lo, hi, new in sorted(set(edits), key=lambda e: (e[0], e[1])):
        if lo < done:
            raise CorefileError("internal check failed: overlapping edits")
        pieces += (text[done:lo], new)
        done = hi
    pieces.append(text[done:])
    return "".join(pieces)


def _edit(cf: Corefile, groups: Sequence[RuleSet], dns_port: int, *,
          proxy_fqdns: Sequence[str], unit: str, rendered: dict[tuple[str, str], str]) -> str:
    """The edited text; ``rendered`` collects the stanzas rendered by (indent, line end)."""
    text = cf.text
    roots = _roots(cf, dns_port)
    legacy = _legacy_spans(cf)
    edits: list[tuple[int, int, str]] = [(s.lo, s.hi, "") for s in legacy]
    for block in roots:
        lo, hi = block.inner(len(text))
        spans = _our_spans(cf, block, proxy_fqdns)
        edits += [(s.lo, s.hi, "") for s in spans]
        if not groups:
            continue
        spans += [s for s in legacy if lo <= s.lo < hi]
        if spans:
            first = min(spans, key=lambda s: s.lo)
            offset, indent = first.lo, first.indent
            nl = _line_ending(text, first.lo) or "\n"
        else:
            offset, indent, nl = _insertion(cf, block, unit)
        if (indent, nl) not in rendered:
            rendered[indent, nl] = all_stanzas(groups, indent, unit, nl)
        edits.append((offset, offset,
                      f"{indent}{BEGIN_MARKER}{nl}{rendered[indent, nl]}{indent}{END_MARKER}{nl}"))
    return _splice(text, edits)


@dataclass(frozen=True)
class _Found:
    """Our rules in one server block, as read back."""

    templates: tuple[Directive, ...]
    old_rules: tuple[Directive, ...]

    def hosts(self) -> set[str]:
        found: set[str] = set()
        for d in self.templates:
            found |= template_hosts(d)
        for d in self.old_rules:
            host = old_rule_host(d)
            if host is not None:
                found.add(host)
        return found


def _found(block: ServerBlock, proxy_fqdns: Sequence[str]) -> _Found:
    return _Found(tuple(d for d in block.directives if is_our_template(d)),
                  tuple(d for d in block.directives if is_old_rule(d, proxy_fqdns)))


def _verify(out: str, groups: Sequence[RuleSet], dns_port: int, *,
            proxy_fqdns: Sequence[str], unit: str,
            rendered: dict[tuple[str, str], str] | None = None) -> Corefile:
    """Read the result back: each root block holds exactly the stanzas of ``groups``, one
    run, byte for byte as they render at their place (or none of ours when there is no
    group), and nothing of the old forms. Returns the result as read back."""
    cf = parse(out)
    rendered = {} if rendered is None else rendered
    for block in _roots(cf, dns_port):
        found = _found(block, proxy_fqdns)
        if found.old_rules or (not groups and found.templates):
            raise CorefileError("internal check failed: rules of ours are left over")
        if not groups:
            continue
        mine = found.templates
        ok = bool(mine)
        if ok:
            # From the first stanza of ours to the last: any stanza too many, too few or out
            # of order makes this text differ from the rendering.
            lo, hi = _line_start(out, mine[0].start), _line_end(out, mine[-1].end)
            indent, nl = out[lo:mine[0].start], _line_ending(out, mine[0].start) or "\n"
            if (indent, nl) not in rendered:
                rendered[indent, nl] = all_stanzas(groups, indent, unit, nl)
            ok = out[lo:hi] == rendered[indent, nl]
        if not ok:
            raise CorefileError("internal check failed: the edited Corefile does not hold "
                                "the requested rules")
    return cf


def _rule_sets(hosts_or_groups: Iterable[str] | Iterable[HostGroup],
               answers: Answers | None) -> tuple[RuleSet, ...]:
    """The groups to write: one from ``hosts`` and ``answers`` (the single-target call), or
    the checked, canonical ``groups``."""
    if answers is None:
        return answer_sets(cast("Iterable[HostGroup]", hosts_or_groups))
    if not isinstance(answers, Answers):
        raise TypeError(f"answers must be Answers, got {answers!r}")
    wanted = checked_hosts(cast("Iterable[str]", hosts_or_groups))
    if wanted and not answers:
        raise CorefileError("no proxy address to answer with: the rules would send the names "
                            "nowhere")
    return (RuleSet(tuple(wanted), answers),) if wanted else ()


@overload
def apply(text: str | Corefile, hosts: Iterable[str], /, *, answers: Answers,
          proxy_fqdn: str = DEFAULT_PROXY_FQDN, dns_port: int = DEFAULT_DNS_PORT) -> str: ...


@overload
def apply(text: str | Corefile, groups: Iterable[HostGroup], /, *,
          proxy_fqdn: str = DEFAULT_PROXY_FQDN, dns_port: int = DEFAULT_DNS_PORT) -> str: ...


def apply(text: str | Corefile, hosts_or_groups: Iterable[str] | Iterable[HostGroup], /, *,
          answers: Answers | None = None, proxy_fqdn: str = DEFAULT_PROXY_FQDN,
          dns_port: int = DEFAULT_DNS_PORT) -> str:
    """Return ``text`` with exactly one set of our rules in each root block.

    Either ``apply(text, hosts, answers=...)``: every host answers with ``answers`` (the
    proxy Service's addresses); or ``apply(text, groups)`` with ``(hosts, Answers)`` pairs,
    one per proxy Service: each group gets its own pair of stanzas. A host may be in one
    group only; groups with equal Answers are one group, and the order of the groups given
    does not matter. One group gives the same text as the first form.

    ``text`` may be given parsed (``parse(text)``, or what ``apply_parsed`` returned): the
    result is the same. ``proxy_fqdn`` is the proxy Service's name, by which rewrite rules of
    earlier versions are recognised and converted. No host at all removes our rules. Raises
    CorefileError, and changes nothing, when the text cannot be parsed or edited safely, a
    host is in two groups, or hosts are to be redirected with no address to answer with.
    """
    return _apply(text, hosts_or_groups, answers, proxy_fqdn, dns_port)[0].text


def apply_parsed(text: str | Corefile, hosts_or_groups: Iterable[str] | Iterable[HostGroup],
                 /, *, answers: Answers | None = None, proxy_fqdn: str = DEFAULT_PROXY_FQDN,
                 dns_port: int = DEFAULT_DNS_PORT) -> Corefile:
    """``apply``, with the result as the check read it back: ``.text`` is what ``apply``
    returns, and the whole can be given to the next edit of that text, which then need not
    parse it again."""
    return _apply(text, hosts_or_groups, answers, proxy_fqdn, dns_port)[0]


def _apply(text: str | Corefile, hosts_or_groups: Iterable[str] | Iterable[HostGroup],
           answers: Answers | None, proxy_fqdn: str, dns_port: int
           ) -> tuple[Corefile, tuple[RuleSet, ...], str]:
    """The result as read back, the answer sets written and the indentation unit."""
    groups = _rule_sets(hosts_or_groups, answers)
    proxy_fqdns = proxy_fqdns_of(proxy_fqdn)
    cf = text if isinstance(text, Corefile) else parse(text)
    unit = _indent_unit(cf.text)
    rendered: dict[tuple[str, str], str] = {}
    out = _edit(cf, groups, dns_port, proxy_fqdns=proxy_fqdns, unit=unit, rendered=rendered)
    _check_size(out)
    # Always a full parse of the result: the guarantee is that what is written reads back
    # as exactly the wanted rules, whatever the splice did, so nothing of the edit's own
    # bookkeeping is trusted here.
    return (_verify(out, groups, dns_port, proxy_fqdns=proxy_fqdns, unit=unit,
                    rendered=rendered), groups, unit)


def remove(text: str | Corefile, *, proxy_fqdn: str = DEFAULT_PROXY_FQDN,
           dns_port: int = DEFAULT_DNS_PORT) -> str:
    """Return ``text`` without any rules of ours in its root blocks (nor legacy lines)."""
    return apply(text, (), proxy_fqdn=proxy_fqdn, dns_port=dns_port)


def managed_hosts(text: str | Corefile, *, proxy_fqdn: str = DEFAULT_PROXY_FQDN,
                  dns_port: int = DEFAULT_DNS_PORT) -> tuple[str, ...]:
    """The hosts our rules in the root server block(s) redirect now, sorted.

    Raises CorefileError when the text cannot be parsed or has no root server block. A
    parsed Corefile is taken as it is.
    """
    cf = text if isinstance(text, Corefile) else parse(text)
    proxy_fqdns = proxy_fqdns_of(proxy_fqdn)
    hosts: set[str] = set()
    for block in _roots(cf, dns_port):
        hosts |= _found(block, proxy_fqdns).hosts()
    return tuple(sorted(hosts))


def managed_groups(text: str | Corefile, *, proxy_fqdn: str = DEFAULT_PROXY_FQDN,
                   dns_port: int = DEFAULT_DNS_PORT) -> dict[str, Answers]:
    """Each host our rules redirect now (as ``managed_hosts``, sorted) with what it answers.

    As CoreDNS does, a host's A addresses come from the first ``template IN A`` stanza of
    ours listing it, its AAAA addresses from the first ``AAAA`` one (several root blocks:
    the first in the file). Hosts of the rewrite rules of earlier versions, which answer
    with whatever the Service name resolves to, map to an empty ``Answers()``; so do hosts
    of a stanza whose answers are not as we write them. A parsed Corefile is taken as it is.
    """
    cf = text if isinstance(text, Corefile) else parse(text)
    proxy_fqdns = proxy_fqdns_of(proxy_fqdn)
    hosts: set[str] = set()
    first: dict[str, dict[str, tuple[tuple[str, ...], int]]] = {"A": {}, "AAAA": {}}
    for block in _roots(cf, dns_port):
        found = _found(block, proxy_fqdns)
        hosts |= found.hosts()
        for d in found.templates:
            read = template_answers(d)
            if read is None:
                continue
            qtype, ips, ttl = read
            table = first[qtype]
            for host in template_hosts(d):
                table.setdefault(host, (ips, ttl))
    out: dict[str, Answers] = {}
    for host in sorted(hosts):
        v4, ttl4 = first["A"].get(host, ((), 0))
        v6, ttl6 = first["AAAA"].get(host, ((), 0))
        out[host] = Answers(v4, v6, ttl4 or ttl6 or DEFAULT_TTL)
    return out


@dataclass(frozen=True)
class Stray:
    """A rule of ours outside the root server blocks: reported, never edited."""

    line: int
    where: str  # the server block's keys or the snippet's name
    what: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.what} in {self.where}"


def strays(text: str | Corefile, *, proxy_fqdn: str = DEFAULT_PROXY_FQDN,
           dns_port: int = DEFAULT_DNS_PORT) -> tuple[Stray, ...]:
    """Rules of ours in server blocks other than the root ones, and in snippets, in the
    order of the file (a parsed Corefile is taken as it is)."""
    cf = text if isinstance(text, Corefile) else parse(text)
    proxy_fqdns = proxy_fqdns_of(proxy_fqdn)
    places: list[tuple[str, Sequence[Directive]]] = [
        (f"server block '{' '.join(b.keys)}'", b.directives)
        for b in cf.server_blocks if not b.is_root(dns_port)]
    places += [(f"snippet ({s.name})", s.body.directives) for s in cf.snippets]
    found: list[Stray] = []
    for where, directives in places:
        for d in directives:
            if is_our_template(d):
                found.append(Stray(d.line, where, "hairpin-proxy template stanza"))
            elif is_old_rule(d, proxy_fqdns):
                found.append(Stray(d.line, where, "rewrite rule to the proxy Service"))
    return tuple(sorted(found, key=lambda s: s.line))


@overload
def import_snippet(hosts: Iterable[str], /, *, answers: Answers) -> str: ...


@overload
def import_snippet(groups: Iterable[HostGroup], /) -> str: ...


def import_snippet(hosts_or_groups: Iterable[str] | Iterable[HostGroup], /, *,
                   answers: Answers | None = None) -> str:
    """The content of a ``coredns-custom``-style key: our rules, unindented. Takes hosts
    and ``answers``, or (hosts, Answers) groups, as ``apply`` does."""
    return _snippet(hosts_or_groups, answers)[0]


SNIPPET_UNIT = "    "


def _snippet(hosts_or_groups: Iterable[str] | Iterable[HostGroup], answers: Answers | None
             ) -> tuple[str, tuple[RuleSet, ...]]:
    """The snippet and the answer sets it holds."""
    groups = _rule_sets(hosts_or_groups, answers)
    if not groups:
        return f"{BEGIN_MARKER}\n{END_MARKER}\n", groups
    body = all_stanzas(groups, "", SNIPPET_UNIT, "\n")
    out = f"{BEGIN_MARKER}\n{body}{END_MARKER}\n"
    _check_size(out)
    # The snippet is spliced into the root server block; it must read as directives there.
    _verify(".:53 {\n" + out + "}\n", groups, DEFAULT_DNS_PORT, proxy_fqdns=(),
            unit=SNIPPET_UNIT, rendered={("", "\n"): body})
    return out, groups
