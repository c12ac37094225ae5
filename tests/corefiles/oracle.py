"""Test oracles that find our lines in a Corefile line by line, apart from the editor's logic.

Only the extent of the root server blocks comes from the parser (``parse``, tested on its own in
test_corefile_parse.py); which lines are ours is decided here from their text:

- marker comment lines (``# BEGIN hairpin-proxy...``, ``# END hairpin-proxy...``);
- ``rewrite ... name ...`` lines whose last-but-one or last word names the proxy Service;
- ``template IN A|AAAA {`` stanzas, up to their closing ``}`` line, holding ``(?P<hairpin_proxy>``;
- anywhere in the file, lines ending with the original tool's ``# Added by hairpin-proxy``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from hairpin_proxy import corefile
from hairpin_proxy.corefile import rules
from hairpin_proxy.corefile.names import regex_escape

ORIGINAL = "hairpin-proxy.hairpin-proxy.svc.cluster.local"
_STANZA_OPEN = re.compile(r"[ \t]*template[ \t]+IN[ \t]+(A|AAAA)[ \t]*\{[ \t]*\r?\n?")
_STANZA_CLOSE = re.compile(r"[ \t]*\}[ \t]*\r?\n?")


def lines(text: str) -> list[str]:
    """Lines with their endings; only "\\n" ends a line (as in a Corefile)."""
    return re.findall(r"[^\n]*\n|[^\n]+", text)


def root_ranges(text: str, dns_port: int) -> list[range]:
    """0-based numbers of the lines strictly inside each root block's braces (or, without
    braces, after its header)."""
    rows = lines(text)
    out = []
    for block in corefile.parse(text).root_blocks(dns_port):
        lo, hi = block.inner(len(text))
        first = text.count("\n", 0, lo) + 1
        last = len(rows) - 1 if block.body is None else text.count("\n", 0, hi) - 1
        out.append(range(first, last + 1))
    return out


def _is_old_rule(line: str, targets: Sequence[str]) -> bool:
    words = line.split("#", 1)[0].split()
    if words[:1] != ["rewrite"] or "name" not in words[1:3]:
        return False
    tail = [w.lower().rstrip(".") for w in words[-3:]]
    return any(t in tail for t in targets)


@dataclass(frozen=True)
class Ours:
    """The line numbers of our lines, by root block (in order), and anywhere else (legacy)."""

    by_block: tuple[tuple[int, ...], ...]
    legacy: tuple[int, ...]

    def all(self) -> set[int]:
        return {n for block in self.by_block for n in block} | set(self.legacy)


def find_ours(text: str, dns_port: int = 53,
              target: str = "hairpin-proxy.hairpin-proxy.svc.cluster.local.") -> Ours:
    rows = lines(text)
    ranges = root_ranges(text, dns_port)
    root = {n for r in ranges for n in r}
    targets = {target.lower().rstrip("."), ORIGINAL}
    ours: set[int] = set()
    legacy = tuple(n for n, row in enumerate(rows)
                   if row.rstrip().endswith("# Added by hairpin-proxy"))
    n = 0
    while n < len(rows):
        row = rows[n]
        if n not in root:
            n += 1
            continue
        stripped = row.strip()
        if stripped.startswith(("# BEGIN hairpin-proxy", "# END hairpin-proxy")) \
                or _is_old_rule(row, list(targets)):
            ours.add(n)
        elif _STANZA_OPEN.fullmatch(row):
            end = n + 1
            while end < len(rows) and not _STANZA_CLOSE.fullmatch(rows[end]):
                end += 1
            if any("(?P<hairpin_proxy>" in r for r in rows[n:end]):
                ours.update(range(n, end + 1))
                n = end
        n += 1
    by_block = tuple(tuple(sorted(k for k in ours if k in r)) for r in ranges)
    return Ours(by_block, legacy)


def strip_ours(text: str, dns_port: int = 53,
               target: str = "hairpin-proxy.hairpin-proxy.svc.cluster.local.") -> str:
    """The text without our lines: what every edit must leave byte for byte as it was."""
    drop = find_ours(text, dns_port, target).all()
    return "".join(row for n, row in enumerate(lines(text)) if n not in drop)


def _pair(hosts: Sequence[str], answers: corefile.Answers, indent: str, unit: str,
          nl: str) -> list[str]:
    regexes = corefile.match_regexes(sorted(set(hosts)))
    out = []
    for qtype, ips in (("A", answers.ipv4), ("AAAA", answers.ipv6)):
        out.append(f"{indent}template IN {qtype} {{{nl}")
        out += [f"{indent}{unit}match {rx}{nl}" for rx in regexes]
        if ips:
            rrs = " ".join(f'"{{{{ .Name }}}} {answers.ttl} IN {qtype} {ip}"' for ip in ips)
            out.append(f"{indent}{unit}answer {rrs}{nl}")
        else:
            out.append(f"{indent}{unit}rcode NOERROR{nl}")
        out.append(f"{indent}{unit}fallthrough{nl}{indent}}}{nl}")
    return out


def expected_set(hosts: Sequence[str], answers: corefile.Answers, indent: str, unit: str,
                 nl: str) -> str:
    """One set of our rules as the tests expect it, built here rather than by the editor."""
    return "".join([f"{indent}{corefile.BEGIN_MARKER}{nl}",
                    *_pair(hosts, answers, indent, unit, nl),
                    f"{indent}{corefile.END_MARKER}{nl}"])


Groups = Sequence[tuple[Sequence[str], corefile.Answers]]


def _covers(rule: str, name: str) -> bool:
    """Whether the rule for ``rule`` matches ``name``: a ``*.`` wildcard one label, a ``**.``
    wildcard one or more, none of them starting with "_"."""
    stars, _, base = rule.partition(".") if rule.startswith("*") else ("", "", rule)
    if not stars:
        return rule == name
    if not name.endswith("." + base):
        return False
    labels = name[:-len(base) - 1].split(".")
    return (len(labels) == 1 or stars == "**") and not any(
        not label or label.startswith("_") for label in labels)


def _sample(host: str) -> str:
    """A name ``host`` matches and no less specific host of another form does not."""
    # A label no test host holds: the sample of a wildcard is never an exact host itself.
    label = "q7-sample"
    if host.startswith("**."):
        return host.replace("**", f"{label}.{label}", 1)
    return host.replace("*", label, 1)


def _before(a: str, b: str) -> bool:
    """Whether ``a`` is more specific than ``b`` where they overlap."""
    return _covers(b, _sample(a)) and not _covers(a, _sample(b))


def expected_pairs(groups: Groups) -> list[tuple[list[str], corefile.Answers]]:
    """The stanza pairs the tests expect for several answer sets, in order: groups with equal
    answers together, ordered by their addresses then TTL; each group's hosts in one pair,
    except wildcards that also match what a more specific host of another group matches:
    each host's rank is one more than the highest of those (0 with none), and the pairs come
    rank by rank, so that the more specific host's stanza is always found first."""
    merged: dict[corefile.Answers, set[str]] = {}
    for hosts, answers in groups:
        if hosts:
            merged.setdefault(answers, set()).update(hosts)
    ordered = sorted(merged.items(), key=lambda kv: (kv[0].ipv4, kv[0].ipv6, kv[0].ttl))
    owner = {h.lower(): a for a, hosts in ordered for h in hosts}
    ranks: dict[str, int] = {}

    def rank(host: str) -> int:
        if host not in ranks:
            ranks[host] = 1 + max((rank(other) for other in owner
                                   if owner[other] != owner[host] and _before(other, host)),
                                  default=-1)
        return ranks[host]

    out = []
    for level in range(1 + max(map(rank, owner), default=0)):
        out += [(sorted(h for h in hosts if rank(h.lower()) == level), a) for a, hosts in ordered]
    return [(hosts, a) for hosts, a in out if hosts]


def expected_groups_set(groups: Groups, indent: str, unit: str, nl: str) -> str:
    """Our rules for several answer sets as the tests expect them."""
    out = [f"{indent}{corefile.BEGIN_MARKER}{nl}"]
    for hosts, answers in expected_pairs(groups):
        out += _pair(hosts, answers, indent, unit, nl)
    out.append(f"{indent}{corefile.END_MARKER}{nl}")
    return "".join(out)


def check_one_set_per_root(text: str, hosts: Sequence[str], answers: corefile.Answers,
                           dns_port: int = 53) -> None:
    """Each root block holds our lines as one run, exactly one expected set (none when
    ``hosts`` is empty), and no legacy line is left anywhere."""
    check_groups_per_root(text, [(hosts, answers)], dns_port)


def check_groups_per_root(text: str, groups: Groups, dns_port: int = 53) -> None:
    """As check_one_set_per_root, for several answer sets."""
    rows = lines(text)
    found = find_ours(text, dns_port)
    assert found.legacy == ()
    for numbers in found.by_block:
        if not any(hosts for hosts, _ in groups):
            assert numbers == (), [rows[n] for n in numbers]
            continue
        assert numbers, "a root block without our rules"
        assert list(numbers) == list(range(numbers[0], numbers[-1] + 1)), "not one run"
        run = "".join(rows[n] for n in numbers)
        begin = rows[numbers[0]]
        indent = begin[:len(begin) - len(begin.lstrip())]
        nl = "\r\n" if begin.endswith("\r\n") else "\n"
        stanza = rows[numbers[0] + 2]
        unit = stanza[len(indent):len(stanza) - len(stanza.lstrip())]
        assert unit in ("    ", "\t"), repr(unit)
        assert run == expected_groups_set(groups, indent, unit, nl)


def _plain_regex(regex: str) -> str:
    """``regex`` in the plain spelling: the same opening and closing, each name in full."""
    hosts = rules.hosts_of_regex(regex)
    assert hosts is not None, regex
    body = "|".join(regex_escape(h.lstrip("*").removeprefix(".")) for h in hosts)
    for opening, closing in ((rules._DEEP_OPEN, rules._WILD_CLOSE),
                             (rules._WILD_OPEN, rules._WILD_CLOSE), (rules._OPEN, rules._CLOSE)):
        if regex.startswith(opening):
            return opening + body + closing
    raise AssertionError(regex)


def plain(text: str) -> str:
    """The Corefile with each of our regexes in the plain spelling."""
    return re.sub(r"(?m)^(\s*match )(\S+)$", lambda m: m[1] + _plain_regex(m[2]), text)
