r"""Our rule format: ``template`` stanzas answering A and AAAA for the managed names.

Two stanzas, one per query type, each matching every managed name with (at most) three
anchored, case-insensitive regexes: one alternation of the exact names, one of the domains of
``*.`` wildcards behind a single leading label (Ingress), one of the domains of ``**.``
wildcards behind one or more (Gateway API; see ``hairpin_proxy.wildcards``). No label a
wildcard stands for may start with ``_``, at any depth. A matching A query is answered with
the proxy Service's IPv4 addresses, a matching AAAA query with its IPv6 addresses, or with an
empty NOERROR answer (NODATA) when the Service has none, so a dual-stack client never goes
around the proxy. Every other query type, and every other name, falls through to the rest of
the plugin chain::

    template IN A {
        match (?i)^(?P<hairpin_proxy>a\.example\.com|b\.example\.com)\.$
        match (?i)^(?P<hairpin_proxy>[^._][^.]*\.(?:apps\.example\.com))\.$
        match (?i)^(?P<hairpin_proxy>(?:[^._][^.]*\.)+(?:gw\.example\.com))\.$
        answer "{{ .Name }} 10 IN A 10.96.0.20"
        fallthrough
    }

Hosts going to different proxy Services form several answer sets, each with its own pair of
stanzas (see ``layout`` for their order: CoreDNS answers from the first stanza that matches).

The named group ``hairpin_proxy`` is how a stanza is known to be ours: unlike a comment it
survives kubeadm's Corefile migration and any reformatting. The rules that earlier versions
wrote (``rewrite name ... <proxy Service name>``) are recognised by that name, so that they
are converted in one write whether or not their marker comments are still there.
"""

from __future__ import annotations

import functools
import ipaddress
import itertools
import operator
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from hashlib import blake2b
from typing import cast

from hairpin_proxy.corefile import compact
from hairpin_proxy.corefile.names import checked_hosts, regex_escape
from hairpin_proxy.corefile.syntax import CorefileError, Directive
from hairpin_proxy.wildcards import ANY_DEPTH, ONE_LABEL, wildcard_base

BEGIN_MARKER = "# BEGIN hairpin-proxy (managed; do not edit)"
END_MARKER = "# END hairpin-proxy"
LEGACY_MARKER = "# Added by hairpin-proxy"
# Comment lines starting so are ours, even when damaged: an edit drops them with our rules.
MARKER_PREFIXES = ("# BEGIN hairpin-proxy", "# END hairpin-proxy")

GROUP = "hairpin_proxy"
# The flag goes first: RE2 takes it anywhere, Python's re (and most others) only there.
_OPEN = f"(?i)^(?P<{GROUP}>"
_CLOSE = r")\.$"
# One label that does not start with "_": a wildcard Ingress host stands for host names, not
# service labels such as _acme-challenge, whose A queries are left to the real zone.
_ONE_LABEL = r"[^._][^.]*\."
_WILD_OPEN = f"{_OPEN}{_ONE_LABEL}(?:"
_WILD_CLOSE = ")" + _CLOSE
# One or more such labels: a Gateway API wildcard serves every depth under its domain, and a
# "_" label anywhere (x._tcp.example.com) is still a service label, not a host.
_DEEP_OPEN = f"{_OPEN}(?:{_ONE_LABEL})+(?:"

# CoreDNS (1.14 and later) refuses a regex longer than 10,000 bytes (Go's len, so UTF-8 bytes,
# not characters): many names are spread over several regexes, each at most MAX_REGEX bytes.
MAX_REGEX = 8000

DEFAULT_TTL = 10
MAX_TTL = 3600
# The name the original hairpin-proxy rewrote to, without the trailing dot it never wrote.
ORIGINAL_PROXY_FQDN = "hairpin-proxy.hairpin-proxy.svc.cluster.local"


@dataclass(frozen=True)
class Answers:
    """What a managed name resolves to: the proxy Service's ClusterIPs, and for how long."""

    ipv4: tuple[str, ...] = ()
    ipv6: tuple[str, ...] = ()
    ttl: int = DEFAULT_TTL

    @classmethod
    def of(cls, addresses: Sequence[str], ttl: int = DEFAULT_TTL) -> Answers:
        """Split addresses by family (sorted, duplicates dropped); CorefileError when one is
        not an IP address or the TTL is out of range."""
        v4: set[str] = set()
        v6: set[str] = set()
        for text in addresses:
            try:
                if not isinstance(text, str) or "%" in text:
                    raise ValueError
                ip = ipaddress.ip_address(text.strip())
            except ValueError:
                raise CorefileError(f"proxy address {text!r} is not an IP address") from None
            (v4 if ip.version == 4 else v6).add(str(ip))
        return cls(tuple(sorted(v4)), tuple(sorted(v6)), ttl)

    def __post_init__(self) -> None:
        if isinstance(self.ttl, bool) or not isinstance(self.ttl, int) \
                or not 0 < self.ttl <= MAX_TTL:
            raise CorefileError(f"answer TTL must be 1 to {MAX_TTL} seconds, got {self.ttl!r}")
        for family, ips in ((4, self.ipv4), (6, self.ipv6)):
            for ip in ips:
                try:
                    parsed = ipaddress.ip_address(ip)
                except ValueError:
                    raise CorefileError(f"proxy address {ip!r} is not an IP address") from None
                if parsed.version != family or str(parsed) != ip:
                    raise CorefileError(f"proxy address {ip!r} is not a canonical IPv{family} "
                                        "address")

    def __bool__(self) -> bool:
        return bool(self.ipv4 or self.ipv6)


def _utf8_len(s: str) -> int:
    return len(s) if s.isascii() else len(s.encode("utf-8"))


# Hosts can hold no character from U+007F to U+009F (names.py): this one joins them, so that
# thousands are escaped by one C call instead of one each.
_SEP = "\x80"


# The characters of plain host names (a dot is the only one of them escaped).
_PLAIN = b"-." + bytes(range(0x30, 0x3A)) + bytes(range(0x41, 0x5B)) + b"_" \
    + bytes(range(0x61, 0x7B))


def _plain(names: Sequence[str]) -> bool:
    """Whether ``names`` hold only the characters of ``_PLAIN`` (C passes, no regex)."""
    together = "".join(names)
    return together.isascii() and not together.encode("ascii").translate(None, _PLAIN)


def _escaped(names: Sequence[str]) -> list[str]:
    if not names:
        return []
    joined = _SEP.join(names)
    if _plain(names):
        # str.translate takes a dict lookup per character; this takes one C pass.
        return joined.replace(".", "\\.").split(_SEP)
    return regex_escape(joined).split(_SEP)


def _chunked(opening: str, names: Sequence[str], closing: str) -> list[str]:
    """``opening`` + the compact body of ``names`` + ``closing``, in regexes as
    ``chunk_counts`` cuts them."""
    stops = itertools.accumulate(chunk_counts(opening, names, closing), initial=0)
    return [opening + compact.encode(names[a:b]) + closing for a, b in itertools.pairwise(stops)]


# One name in this many starts a regex of its own (``starts_regex``).
CUT_EVERY = 256


# The names of the regexes a pass's steps re-encode come again and again (the size limits'
# fit tries one object after another on the same regexes): their hashes are kept.
@functools.lru_cache(maxsize=1 << 12)
def starts_regex(name: str) -> bool:
    """Whether ``name`` (as a regex holds it: a wildcard without its prefix) starts a regex.

    Decided by the name alone, so that a name added or removed changes the regex it falls in
    and no other: cut only by their size, regexes filled to the brim would each pass one name
    on to the next, to the end of the form, and every step of the incremental edit (and of
    the size measure, ``written``) would encode them all again."""
    # A real hash: CRC-32's low bits follow the digits of numbered names in long runs.
    digest = blake2b(name.encode("utf-8", "surrogatepass"), digest_size=4).digest()
    return int.from_bytes(digest) % CUT_EVERY == 0


def cuts(names: Sequence[str]) -> list[int]:
    """The indexes of the ``names`` that start a regex of their own (``starts_regex``)."""
    return [k for k, name in enumerate(names) if starts_regex(name)]


# Name lists at least this long have their counts kept (``chunk_counts``), the last few.
_COUNTED_AT = 1024
_COUNTED_MOST = 4
# A first pass measures every regex's size, then its Corefile edit writes the same names
# (each answer set's names of each form): the cuts are found once, not twice.
_counted: list[tuple[tuple[str, str, tuple[str, ...]], tuple[int, ...]]] = []


def chunk_counts(opening: str, names: Sequence[str], closing: str) -> list[int]:
    """How many of ``names`` each regex of ``_chunked`` holds: up to the next name that
    starts a regex of its own (``starts_regex``), and no more than their plain spelling fits
    MAX_REGEX bytes (the compact body is never longer); at least one (a name longer than the
    room alone)."""
    global _counted
    if len(names) < _COUNTED_AT:
        return _counts(opening, names, closing)
    key = (opening, closing, tuple(names))
    kept = _counted
    for known, counts in kept:
        if known == key:
            return list(counts)
    got = _counts(opening, names, closing)
    # A new list, not an edit of the one other threads may be reading.
    _counted = [*kept[-(_COUNTED_MOST - 1):], (key, tuple(got))]
    return got


def _counts(opening: str, names: Sequence[str], closing: str) -> list[int]:
    parts = _escaped(names)
    out: list[int] = []
    room = MAX_REGEX - _utf8_len(opening) - _utf8_len(closing)
    lengths = map(len, parts) if all(map(str.isascii, parts)) else map(_utf8_len, parts)
    # chars[k] + k: the bytes of parts[:k], each with one separator. The parts from ``start``
    # up to (not including) ``stop`` fit in one regex when that grows by at most room + 1.
    # Found by bisection, so the Python work is per regex, not per part.
    chars = list(itertools.accumulate(lengths, initial=0))
    marks = cuts(names)
    start, n = 0, len(parts)
    while start < n:
        stop = max(start + 1, bisect_right(range(n + 1), chars[start] + start + room + 1,
                                           start, key=lambda k: chars[k] + k) - 1)
        at = bisect_right(marks, start)
        if at < len(marks) and marks[at] < stop:
            stop = marks[at]
        out.append(stop - start)
        start = stop
    return out


def exact_regexes(hosts: Sequence[str]) -> list[str]:
    """Anchored regexes matching exactly the (non-wildcard) ``hosts``."""
    return _chunked(_OPEN, hosts, _CLOSE)


def wildcard_regexes(hosts: Sequence[str]) -> list[str]:
    """Anchored regexes matching one label in front of each ``*.domain`` of ``hosts``."""
    return _chunked(_WILD_OPEN, [h[2:] for h in hosts], _WILD_CLOSE)


def deep_regexes(hosts: Sequence[str]) -> list[str]:
    """Anchored regexes matching one or more labels in front of each ``**.domain``."""
    return _chunked(_DEEP_OPEN, [h[3:] for h in hosts], _WILD_CLOSE)


def split_hosts(hosts: Sequence[str]) -> tuple[Sequence[str], Sequence[str]]:
    """(exact hosts, wildcard hosts of both forms) of sorted hosts."""
    exact, one, deep = split_forms(hosts)
    return exact, [*deep, *one]


def form_index(host: str) -> int:
    """Which regex form a host is written in: 0 exact, 1 ``*.``, 2 ``**.`` (as ``FORMS`` and
    ``split_forms`` order them)."""
    return 0 if not host.startswith("*") else 2 if host.startswith("**.") else 1


def split_forms(hosts: Sequence[str]) -> tuple[Sequence[str], Sequence[str], Sequence[str]]:
    """(exact, ``*.`` and ``**.`` hosts) of sorted hosts: each wildcard form sorts together."""
    lo, hi = bisect_left(hosts, ONE_LABEL), bisect_left(hosts, "*/")
    dlo, dhi = bisect_left(hosts, ANY_DEPTH, 0, lo), bisect_left(hosts, "**/", 0, lo)
    if dlo == dhi:
        if lo == hi:
            # No wildcard (nearly every set): the hosts themselves, not a copy of them.
            return hosts, (), ()
        return [*hosts[:lo], *hosts[hi:]], hosts[lo:hi], ()
    return [*hosts[:dlo], *hosts[dhi:lo], *hosts[hi:]], hosts[lo:hi], hosts[dlo:dhi]


def _base(host: str) -> str:
    base = wildcard_base(host)
    return host if base is None else base


def _host_bytes(hosts: Iterable[str]) -> int:
    bases = list(map(_base, hosts))
    escaped = _escaped(bases)
    size = sum(map(len, escaped)) if all(map(str.isascii, escaped)) else \
        sum(len(e.encode()) for e in escaped)
    return 2 * (size + len(escaped))


def host_rules_bytes(hosts: Sequence[str]) -> list[int]:
    """What each of ``hosts`` adds to ``rules_bytes``: a host's share depends on that host
    alone, so ``sum(host_rules_bytes(hosts)) == rules_bytes(hosts)`` for any host names, and
    a caller may keep the shares of hosts it has seen."""
    bases = list(map(_base, hosts))
    if any(_SEP in b for b in bases):
        # Split apart by the joining character: such a name counts as several.
        return [_host_bytes((h,)) for h in hosts]
    return [2 * (_utf8_len(e) + 1) for e in _escaped(bases)]


# The characters of plain names that are never escaped (``_PLAIN`` but the dot).
_AS_IS = _PLAIN.replace(b".", b"")


def plain_rules_bytes(hosts: Sequence[str]) -> int | None:
    """``sum(host_rules_bytes(hosts))`` when every one of ``hosts`` is plain (``_PLAIN``
    characters, a ``*`` only in a leading ``*.`` or ``**.``), else None. A plain name's share
    is a formula of its length and dots (only dots are escaped), so the sum of thousands
    takes a few C passes and no per-host Python or memo."""
    if len(hosts) == 1 and (one := hosts[0]).isascii() \
            and not one.encode("ascii").translate(None, _PLAIN):
        # One name without a "*" (what most objects add): no joining, no prefixes.
        return 2 * (len(one) + 1 + one.count("."))
    if len(hosts) <= _PART:
        return _plain_part(hosts)
    total = 0
    # In parts: the text of a thousand names stays in the processor's cache and in the
    # allocator's heap, where that of ten thousand would be mapped afresh on every call.
    for at in range(0, len(hosts), _PART):
        got = _plain_part(hosts[at:at + _PART])
        if got is None:
            return None
        total += got
    return total


_PART = 1024


def _plain_part(hosts: Sequence[str]) -> int | None:
    """``plain_rules_bytes`` of at most ``_PART`` names."""
    if not hosts:
        return 0
    joined = "\n".join(hosts)
    if not joined.isascii():
        return None
    encoded = joined.encode("ascii")
    # What is left once the characters written as they are go: dots, stars, the joining
    # "\n"s (one more inside a name would be taken for a boundary), anything else. A tenth
    # of the text: the rest is counted in it.
    rest = encoded.translate(None, _AS_IS)
    if rest.translate(None, b".*\n") or rest.count(b"\n") != len(hosts) - 1:
        return None
    stars = _wildcard_prefixes(encoded) if b"*" in rest else 0
    if stars is None:
        return None
    # Each base (``_base``): its characters, and one more for each of its dots (escaped).
    # A prefix ``*.`` takes 2 characters and a dot away, ``**.`` 3 and a dot.
    return 2 * (len(joined) + 1 + rest.count(b".") - stars)


def _wildcard_prefixes(encoded: bytes) -> int | None:
    """What the wildcard prefixes of the names joined by "\n" take away from their bases'
    escaped bytes: 3 for a ``*.``, 4 for a ``**.``; None when a ``*`` is anywhere else. A
    step per ``*`` found by ``find`` (a C scan far faster than ``count``): few hosts are
    wildcards."""
    taken = 0
    at = encoded.find(b"*")
    while at >= 0:
        if at and encoded[at - 1] != 0x0A:
            return None
        if encoded.startswith(b"*.", at):
            taken += 3
        elif encoded.startswith(b"**.", at):
            taken, at = taken + 4, at + 1
        else:
            return None
        at = encoded.find(b"*", at + 1)
    return taken


def rules_bytes(hosts_or_groups: Iterable[str] | Iterable[tuple[Iterable[str], Answers]]
                ) -> int:
    """About how many bytes our rules take, for budgets.

    Given host names: what they add (each is in both stanzas, escaped, with a separator); the
    fixed part of the stanzas is not counted. Given (hosts, Answers) groups: the same for all
    their hosts, plus the fixed part of every group's stanza pair, which is no longer small
    when there are dozens of answer sets.
    """
    items: list[object] = list(hosts_or_groups)
    hosts = [i for i in items if isinstance(i, str)]
    if len(hosts) == len(items):
        return _host_bytes(hosts)
    if hosts:
        raise TypeError("give host names or (hosts, Answers) groups, not both")
    groups = answer_sets(cast("list[tuple[Iterable[str], Answers]]", items))
    return sum(_host_bytes(g.hosts) + _fixed_bytes(g) for g in groups)


# "match " and a line end around each regex, and the indentation of a stanza's lines.
_MATCH_LINE = len("        match ") + 1


def _fixed_bytes(group: RuleSet) -> int:
    """The bytes of a group's stanza pair that do not depend on its host names: template
    headers, answers, ``fallthrough``, braces, and the frame of one regex of each kind."""
    exact, one, deep = split_forms(group.hosts)
    frames = (len(_OPEN) + len(_CLOSE) + _MATCH_LINE if exact else 0) + \
        (len(_WILD_OPEN) + len(_WILD_CLOSE) + _MATCH_LINE if one else 0) + \
        (len(_DEEP_OPEN) + len(_WILD_CLOSE) + _MATCH_LINE if deep else 0)
    body = stanzas((), group.answers, "    ", "    ", "\n")
    return len(body.encode()) + 2 * frames


def match_regexes(hosts: Sequence[str]) -> list[str]:
    """The regexes of one stanza for sorted, checked hosts."""
    exact, one, deep = split_forms(hosts)
    return exact_regexes(exact) + wildcard_regexes(one) + deep_regexes(deep)


def all_stanzas(groups: Sequence[RuleSet], indent: str, unit: str, nl: str) -> str:
    """The stanza pairs of every group, in ``layout`` order (no marker lines)."""
    return "".join(stanzas(g.hosts, g.answers, indent, unit, nl) for g in layout(groups))


def stanzas(hosts: Sequence[str], answers: Answers, indent: str, unit: str, nl: str) -> str:
    """The two template stanzas alone (no marker lines)."""
    inner = indent + unit
    matches = "".join(f"{inner}match {rx}{nl}" for rx in match_regexes(hosts))
    return "".join(f"{head}{matches}{tail}"
                   for head, tail in stanza_frames(answers, indent, unit, nl))


def stanza_frames(answers: Answers, indent: str, unit: str, nl: str
                  ) -> tuple[tuple[str, str], tuple[str, str]]:
    """The text of the A and the AAAA stanza around their ``match`` lines: (head, tail)."""
    inner = indent + unit
    out: list[tuple[str, str]] = []
    for qtype, ips in (("A", answers.ipv4), ("AAAA", answers.ipv6)):
        if ips:
            rrs = " ".join(f'"{{{{ .Name }}}} {answers.ttl} IN {qtype} {ip}"' for ip in ips)
            body = f"{inner}answer {rrs}{nl}"
        else:
            # No address of this family: an empty answer, never the public one.
            body = f"{inner}rcode NOERROR{nl}"
        out.append((f"{indent}template IN {qtype} {{{nl}",
                    f"{body}{inner}fallthrough{nl}{indent}}}{nl}"))
    return out[0], out[1]


# --- several answer sets ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RuleSet:
    """One answer set: sorted, checked hosts and the addresses they resolve to."""

    hosts: tuple[str, ...]
    answers: Answers


def _describe(answers: Answers) -> str:
    return ", ".join((*answers.ipv4, *answers.ipv6)) or "no address"


def _order(answers: Answers) -> tuple[tuple[str, ...], tuple[str, ...], int]:
    return answers.ipv4, answers.ipv6, answers.ttl


def answer_sets(groups: Iterable[tuple[Iterable[str], Answers]]) -> tuple[RuleSet, ...]:
    """Checked groups in their canonical order: empty groups dropped, groups with equal
    Answers merged, sorted by their Answers (not by the caller's order, which may change
    from one pass to the next and would rewrite the Corefile for nothing).

    CorefileError when a host is in two groups with different Answers (CoreDNS would answer
    from whichever stanza comes first, so the second would be silently ignored), or a group
    has hosts and no address; TypeError when a group is not a (hosts, Answers) pair.
    """
    if isinstance(groups, str):
        raise TypeError("groups must be an iterable of (hosts, Answers) pairs")
    merged: dict[Answers, list[list[str]]] = {}
    for group in groups:
        try:
            hosts, answers = group
        except (TypeError, ValueError):
            raise TypeError(f"a group must be a (hosts, Answers) pair, got {group!r}") from None
        if not isinstance(answers, Answers):
            raise TypeError(f"a group's answers must be Answers, got {answers!r}")
        wanted = checked_hosts(hosts)
        if not wanted:
            continue
        if not answers:
            raise CorefileError("no proxy address to answer with: the rules would send the "
                                "names nowhere")
        merged.setdefault(answers, []).append(wanted)
    out: list[RuleSet] = []
    for answers in sorted(merged, key=_order):
        lists = merged[answers]
        hosts = lists[0] if len(lists) == 1 else sorted(set(itertools.chain(*lists)))
        out.append(RuleSet(tuple(hosts), answers))
    if len(out) > 1 and _overlap(out):
        # The regexes are case-insensitive: two spellings of one name are one name.
        owner: dict[str, RuleSet] = {}
        for rule_set in out:
            for host in rule_set.hosts:
                other = owner.setdefault(host.lower(), rule_set)
                if other is not rule_set:
                    raise CorefileError(
                        f"host {host!r} is in two answer sets ({_describe(other.answers)} "
                        f"and {_describe(rule_set.answers)}); a host may go to one only")
    return tuple(out)


def _overlap(sets: Sequence[RuleSet]) -> bool:
    """Whether two of ``sets`` share a name, case aside: set operations in C, so that only a
    conflict, to be named, costs a Python step per host."""
    # Smallest first: the largest set (at 10,000 hosts, most of them) is only looked up.
    ordered = sorted(sets, key=lambda s: len(s.hosts))
    seen: set[str] = set()
    for rule_set in ordered:
        hosts = rule_set.hosts
        joined = "\n".join(hosts)
        # Names as Kubernetes has them are lower case already: then they are their own
        # keys, whose hashes Python keeps, and no lower-cased copy of each is made.
        lowered = hosts if joined.lower() == joined else tuple(map(str.lower, hosts))
        if not seen.isdisjoint(lowered):
            return True
        if rule_set is not ordered[-1]:
            seen.update(lowered)
    return False


# Up to this many any-depth wildcards, the exact hosts under them are found by substring
# searches in C (a pass over the names per domain); beyond it, by one walk over the names.
_FEW_DOMAINS = 8


def _tail(name: str) -> str:
    """The last two labels of ``name`` (all of it with fewer)."""
    return name[name.rfind(".", 0, max(0, name.rfind("."))) + 1:]


def layout(groups: Sequence[RuleSet]) -> list[RuleSet]:
    """The stanza pairs to write, in order, for groups made by ``answer_sets``.

    All ``template`` stanzas of a server block are one handler that tries them in file order
    and answers from the first whose regex matches, so order decides only where two groups
    match one name, and there the more specific host must win. Exact hosts never overlap (a
    host is in one group), nor do two one-label wildcards of different domains; but
    ``*.example.com`` in one group matches ``a.example.com`` of another, and
    ``**.example.com`` matches names of ``a.b.example.com``, ``*.b.example.com``,
    ``*.example.com`` and ``**.b.example.com`` of others. Each host gets a rank: 0, or one
    more than the highest rank of the more specific hosts of other groups it overlaps; the
    pairs are written rank by rank, each group's hosts of one rank in one pair. Without
    overlaps every group is one pair, and one group is exactly one pair.
    """
    if len(groups) < 2:
        return [g for g in groups if g.hosts]
    forms = [split_forms(g.hosts) for g in groups]
    one_at = {h[2:].lower(): k for k, (_, one, _) in enumerate(forms) for h in one}
    deep_at = {h[3:].lower(): k for k, (_, _, deep) in enumerate(forms) for h in deep}
    if not one_at and not deep_at:
        # Exact hosts alone never overlap: no need to look at (maybe 10,000) of them.
        return [g for g in groups if g.hosts]
    # Lower-cased wildcard → its rank, where above 0.
    rank: dict[str, int] = {}

    def above(k: int, name: str, level: int) -> None:
        # The any-depth wildcards of other groups whose regex also matches what ``name``
        # matches: over the domain after each of its labels, up to one starting with "_".
        # (Called with "*.d" for a one-label wildcard, and with "d" for "**.d".)
        pos = 0
        while (dot := name.find(".", pos)) >= 0 and name[pos] != "_":
            owner = deep_at.get(domain := name[dot + 1:])
            if owner is not None and owner != k and rank.get(key := "**." + domain, 0) <= level:
                rank[key] = level + 1
            pos = dot + 1

    for k, (exact, _, _) in enumerate(forms):
        for host in exact:
            label, dot, domain = host.lower().partition(".")
            if dot and not label.startswith("_") and one_at.get(domain, k) != k:
                rank["*." + domain] = 1
    if deep_at and len(deep_at) <= _FEW_DOMAINS:
        _exact_under_deep(forms, deep_at, rank)
    elif deep_at:
        # A host can only lie under a domain whose last two labels it shares: most exact
        # hosts are passed over with a slice and a set lookup instead of a walk.
        tails = None if any("." not in d for d in deep_at) else {_tail(d) for d in deep_at}
        for k, (exact, _, _) in enumerate(forms):
            for host in exact:
                name = host.lower()
                if tails is None or _tail(name) in tails:
                    above(k, name, 0)
    if deep_at:
        for k, (_, one, _) in enumerate(forms):
            for host in one:
                above(k, host.lower(), rank.get(host.lower(), 0))
        # The deeper domains first: their ranks are final before the wider ones read them.
        for domain in sorted(deep_at, key=lambda d: -d.count(".")):
            above(deep_at[domain], domain, rank.get("**." + domain, 0))
    if not rank:
        return [g for g in groups if g.hosts]
    # Only wildcards have a rank above 0: a group without one is written whole at rank 0
    # without looking at its (maybe 10,000) exact hosts.
    ranked = [{h: lv for h in (*one, *deep) if (lv := rank.get(h.lower(), 0))}
              for _, one, deep in forms]
    out: list[RuleSet] = []
    for level in range(max(rank.values()) + 1):
        for g, mine in zip(groups, ranked, strict=True):
            if not level:
                hs = tuple(h for h in g.hosts if h not in mine) if mine else g.hosts
            else:
                hs = tuple(h for h in g.hosts if mine.get(h) == level) if mine else ()
            if hs:
                out.append(RuleSet(hs, g.answers))
    return out


def _exact_under_deep(forms: Sequence[tuple[Sequence[str], Sequence[str], Sequence[str]]],
                      deep_at: dict[str, int], rank: dict[str, int]) -> None:
    """Rank 1 for each ``**.d`` over an exact host of another group (a name under ``d`` whose
    labels in front of it do not start with "_"): one substring search per domain and group
    in the joined names, not a Python step per host."""
    joined = ["\n" + "\n".join(exact).lower() + "\n" if exact else "" for exact, _, _ in forms]
    for domain, owner in deep_at.items():
        needle = "." + domain + "\n"
        for k, text in enumerate(joined):
            if k == owner or not text:
                continue
            at = text.find(needle)
            while at >= 0:
                start = text.rfind("\n", 0, at) + 1
                if not any(label.startswith("_") for label in text[start:at].split(".")):
                    rank["**." + domain] = max(rank.get("**." + domain, 0), 1)
                    break
                at = text.find(needle, at + 1)


# --- recognising our rules -------------------------------------------------------------------

_ALTERNATIVE = re.compile(r"(?:\\.|[^\\|])+")
_UNESCAPE = re.compile(r"\\(.)")


def _alternatives(body: str) -> list[str] | None:
    if body.count("\\") == body.count("\\."):
        # The common case, plain host names: only their dots are escaped. Split and unescape
        # with C string methods (a regex pass per host is ten times slower at 10,000 hosts).
        parts = body.replace("\\.", ".").split("|")
        return None if "" in parts else parts
    found = _ALTERNATIVE.findall(body)
    if "|".join(found) != body:
        return None  # an empty alternative
    return [_UNESCAPE.sub(r"\1", p) for p in found]


def hosts_of_regex(regex: str) -> list[str] | None:
    """The hosts of a regex as ``match_regexes`` writes it, or as earlier versions wrote it
    (each name in full, the plain spelling); None for any other regex."""
    prefix = ""
    opening, closing = _OPEN, _CLOSE
    for form, start in ((ANY_DEPTH, _DEEP_OPEN), (ONE_LABEL, _WILD_OPEN)):
        if regex.startswith(start) and regex.endswith(_WILD_CLOSE):
            prefix, opening, closing = form, start, _WILD_CLOSE
            break
    if not regex.startswith(opening) or not regex.endswith(closing) \
            or len(regex.encode()) > MAX_REGEX:
        return None
    inside = regex[len(opening):-len(closing)]
    body = _plain_body(inside)
    if body is None:
        body = compact.decode(inside)
    if body is None:
        return None
    # No domain is itself a wildcard (one search in C, not a step per host).
    domains = "\n" + "\n".join(body)
    if "\n" + ONE_LABEL in domains or "\n" + ANY_DEPTH in domains:
        return None
    return [prefix + d for d in body] if prefix else body


def _plain_body(inside: str) -> list[str] | None:
    """The names of a body in the plain spelling; None for any other body."""
    body = _alternatives(inside)
    # Only what we would write back the same way counts as read: sorted, distinct, escaped
    # exactly so.
    if body is None or any(map(operator.ge, body, itertools.islice(body, 1, None))):
        return None
    return body if "|".join(_escaped(body)) == inside else None


def is_our_template(d: Directive) -> bool:
    """A ``template`` stanza carrying our named group in a ``match`` regex."""
    if d.name != "template" or not d.blocks:
        return False
    marker = f"(?P<{GROUP}>"
    return any(inner.name == "match" and any(marker in a for a in inner.args)
               for block in d.blocks for inner in block.directives)


def template_hosts(d: Directive) -> set[str]:
    """The hosts that one of our template stanzas matches (regexes we did not write: none)."""
    hosts: set[str] = set()
    for block in d.blocks:
        for inner in block.directives:
            if inner.name == "match":
                for regex in inner.args:
                    hosts.update(hosts_of_regex(regex) or ())
    return hosts


# An answer as ``stanzas`` writes it: ``{{ .Name }} TTL IN TYPE ADDRESS``.
_RR = re.compile(r"\{\{ \.Name \}\} ([0-9]{1,9}) IN (A|AAAA) ([0-9A-Fa-f.:]+)")


def template_answers(d: Directive) -> tuple[str, tuple[str, ...], int] | None:
    """(query type, addresses, TTL) of one of our stanzas for A or AAAA, reading only the
    answers as we write them (TTL 0 when there is none); None for any other query type."""
    if len(d.args) < 2 or d.args[0].upper() != "IN" or d.args[1].upper() not in ("A", "AAAA"):
        return None
    qtype = d.args[1].upper()
    family = 4 if qtype == "A" else 6
    ips: list[str] = []
    ttl = 0
    for block in d.blocks:
        for inner in block.directives:
            if inner.name != "answer":
                continue
            for rr in inner.args:
                m = _RR.fullmatch(rr)
                if m is None or m[2] != qtype or not 0 < int(m[1]) <= MAX_TTL:
                    continue
                try:
                    ip = ipaddress.ip_address(m[3])
                except ValueError:
                    continue
                if ip.version == family:
                    ips.append(str(ip))
                    ttl = ttl or int(m[1])
    return qtype, tuple(sorted(set(ips))), ttl


# ``rewrite [continue|stop] name [exact|regex|...] FROM TO [answer auto|answer name ...]``
_REWRITE_TYPES = ("exact", "prefix", "suffix", "substring", "regex")
_OLD_WILDCARD = re.compile(r"\^\[\^\.\]\+\\\.(?P<suffix>.+)\\\.\?\$")


def rewrite_name_rule(d: Directive) -> tuple[str, str, str] | None:
    """(match type, FROM, TO) of a ``rewrite name`` rule without a block; None otherwise."""
    if d.name != "rewrite" or d.blocks:
        return None
    words = list(d.args)
    if words[:1] in (["continue"], ["stop"]):
        words = words[1:]
    if words[:1] != ["name"]:
        return None
    words = words[1:]
    kind = words.pop(0) if words and words[0] in _REWRITE_TYPES and len(words) >= 3 else "exact"
    if len(words) < 2:
        return None
    return kind, words[0], words[1]


def is_old_rule(d: Directive, proxy_fqdns: Sequence[str]) -> bool:
    """A ``rewrite name`` rule that sends a name to our proxy Service (any earlier form)."""
    found = rewrite_name_rule(d)
    return found is not None and found[2].lower().rstrip(".") in proxy_fqdns


def old_rule_host(d: Directive) -> str | None:
    """The host of an old rule as earlier versions wrote it (exact, or the one-label
    wildcard regex); None for a rule of another shape."""
    found = rewrite_name_rule(d)
    if found is None:
        return None
    kind, source, _ = found
    if kind == "exact":
        return source.lower().rstrip(".")
    m = _OLD_WILDCARD.fullmatch(source) if kind == "regex" else None
    return "*." + _UNESCAPE.sub(r"\1", m["suffix"]) if m else None


def proxy_fqdns_of(proxy_fqdn: str) -> tuple[str, ...]:
    """The proxy Service names, normalised, that mark a rewrite rule as ours (it rewrites to
    one of them): ``proxy_fqdn`` and the original tool's."""
    return tuple(dict.fromkeys(t.lower().rstrip(".")
                               for t in (proxy_fqdn, ORIGINAL_PROXY_FQDN) if t))
