"""The edit of one pass in proportion to what changed: ``apply`` from the last edit's result.

The controller's edits mostly start from its own last write (echoed back by the watch) and
add or remove one host. ``apply_kept`` then re-renders only the ``match`` regexes of the
stanza pair that host is in, from the regex holding it up to the first one whose hosts are
those of an old regex again (where a regex stops depends on its names alone, ``chunk_counts``,
so from there on they are the same),
and splices them into the last result. Everything else of the text is the last result's, byte
for byte, and that text was checked before: fully read back (``editor._verify``), or by this
very argument.

Why the check stays as strong as a full read-back: in the last result each root block holds
the managed text (markers and stanzas, exactly as rendered) as whole lines, and a ``match``
line is a line of bare words, which the lexer reads as one directive whatever lines surround
it (``lexer``: a line holding no quote, ``#``, brace or U+001C..U+001F, starting at the start
of a line that no token spans into). Each new line is checked to be such a line, and its
regex is read back (``rules.hosts_of_regex``) as exactly the hosts it is to hold; the lines
around it, the stanzas' frames, are checked against their rendering where they stand. So the
new text parses as the old one did, with those regexes in place of the old ones, and holds
exactly the wanted rules. Anything else (another text, another change, a form not read back
so) goes the full way, ``editor._apply``; the two give the same text (property-tested).

Kept between edits: the result's text and its answer sets (their host tuples are the
caller's), no parse of it.
"""

from __future__ import annotations

import itertools
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hairpin_proxy.corefile import editor
from hairpin_proxy.corefile.compact import encode as compact_body
from hairpin_proxy.corefile.lexer import SPECIAL
from hairpin_proxy.corefile.names import MAX_HOST, all_valid, one_edit
from hairpin_proxy.corefile.rules import (
    _CLOSE,
    _DEEP_OPEN,
    _OPEN,
    _WILD_CLOSE,
    _WILD_OPEN,
    BEGIN_MARKER,
    END_MARKER,
    MAX_REGEX,
    Answers,
    RuleSet,
    _escaped,
    _utf8_len,
    form_index,
    hosts_of_regex,
    is_our_template,
    layout,
    split_forms,
    stanza_frames,
    starts_regex,
)
from hairpin_proxy.corefile.syntax import SPACE_CHARS, Corefile
from hairpin_proxy.ordered import same

# (hosts, answers) as the caller gives them.
Group = tuple[Sequence[str], Answers]

# The three regex forms, in the order a stanza lists them: (opening, closing, host prefix).
FORMS = ((_OPEN, _CLOSE, ""), (_WILD_OPEN, _WILD_CLOSE, "*."), (_DEEP_OPEN, _WILD_CLOSE, "**."))
# What a bare-word line may not hold besides its line ending.
_NOT_BARE = re.compile(f"[{SPACE_CHARS}{re.escape(SPECIAL)}]")
# Names escaped at a time as the regexes reach them (a regex holds a few hundred).
_WINDOW = 256


@dataclass(frozen=True)
class Edited:
    """An edit's checked result, and what the next edit of that very text starts from."""

    text: str
    sets: tuple[RuleSet, ...]  # the answer sets written (host tuples shared with the caller's)
    pairs: tuple[RuleSet, ...]  # layout(sets): the stanza pairs, in order
    lower: tuple[bool, ...]  # per set: its hosts are their own lower case
    unit: str  # the indentation unit the stanzas were rendered with
    indent: str
    nl: str
    regions: tuple[tuple[int, int], ...]  # per root block: the managed text, markers included
    # The hosts this edit added (True) or removed (False) when it was a step from the last
    # one; None after a full edit.
    moved: tuple[tuple[str, bool], ...] | None = None
    # (a pair's hosts tuple, a form, how many of its names each regex holds) for the forms a
    # step rendered: the next step there need not count them again from every name.
    chunks: tuple[Chunk, ...] = ()


Chunk = tuple[Sequence[str], int, tuple[int, ...]]


class Stepped(tuple[tuple[tuple[str, ...], Answers], ...]):
    """Answer groups that say where each of them is the groups before it with one host
    inserted or deleted: ``steps`` maps (id of the old hosts tuple, id of the new) to the
    index of that host in the longer, as ``one_edit`` would find it. Its maker knows this
    from how it made the tuple; finding it again walks every host (and every host's object,
    each a cache miss in a large heap). It holds both tuples, so that their ids name them
    for as long as it lives."""

    steps: dict[tuple[int, int], int]
    held: list[tuple[tuple[str, ...], tuple[str, ...]]]

    @classmethod
    def of(cls, groups: Iterable[tuple[tuple[str, ...], Answers]],
           steps: Sequence[tuple[tuple[str, ...], tuple[str, ...], int]]) -> Stepped:
        """``groups``, with ``steps`` as (old hosts, new hosts, index in the longer)."""
        out = cls(groups)
        out.held = [(old, new) for old, new, _ in steps]
        out.steps = {(id(old), id(new)): i for old, new, i in steps}
        return out



def apply_kept(text: str, groups: Sequence[Group], /, *, proxy_fqdn: str, dns_port: int,
               last: Edited | None = None, single: bool = False) -> Edited:
    """``editor.apply(text, groups)`` (``single``: ``apply(text, hosts, answers=...)`` with
    the one group), from ``last`` where ``text`` is its result and the change allows."""
    if last is not None and (text is last.text or text == last.text):
        step = _step(last, groups)
        if step is not None:
            return step
    if single:
        ((hosts, answers),) = groups
        cf, sets, unit = editor._apply(text, hosts, answers, proxy_fqdn, dns_port)
    else:
        cf, sets, unit = editor._apply(text, groups, None, proxy_fqdn, dns_port)
    return _kept(cf, _shared(sets, groups), unit, dns_port)


def snippet_kept(groups: Sequence[Group], /, *, last: Edited | None = None,
                 single: bool = False) -> Edited:
    """``editor.import_snippet(groups)`` (``single``: of hosts and ``answers=``), from
    ``last`` where the change allows: the snippet is the managed text alone."""
    if last is not None:
        step = _step(last, groups)
        if step is not None:
            return step
    if single:
        ((hosts, answers),) = groups
        text, sets = editor._snippet(hosts, answers)
    else:
        text, sets = editor._snippet(groups, None)
    sets = _shared(sets, groups)
    lower = tuple(_is_lower(s.hosts) for s in sets)
    return Edited(text, sets, tuple(layout(sets)), lower, editor.SNIPPET_UNIT, "", "\n",
                  ((0, len(text)),) if sets else ())


def _shared(sets: tuple[RuleSet, ...], groups: Iterable[Group]) -> tuple[RuleSet, ...]:
    """``sets`` with the caller's host tuples where equal: kept without a copy of them."""
    given = {answers: hosts for hosts, answers in groups if isinstance(hosts, tuple)}
    return tuple(RuleSet(h, s.answers) if (h := given.get(s.answers)) == s.hosts else s
                 for s in sets)


def _kept(cf: Corefile, sets: tuple[RuleSet, ...], unit: str, dns_port: int) -> Edited:
    """What is kept of a fully checked result: where each root block's managed text is."""
    text = cf.text
    forms: set[tuple[str, str]] = set()
    regions: list[tuple[int, int]] = []
    marked = True
    for block in (cf.root_blocks(dns_port) if sets else ()):
        mine = [d for d in block.directives if is_our_template(d)]
        lo, hi = editor._line_start(text, mine[0].start), editor._line_end(text, mine[-1].end)
        indent, nl = text[lo:mine[0].start], editor._line_ending(text, mine[0].start) or "\n"
        begin, end = f"{indent}{BEGIN_MARKER}{nl}", f"{indent}{END_MARKER}{nl}"
        marked = marked and text.startswith(begin, lo - len(begin)) and text.startswith(end, hi)
        forms.add((indent, nl))
        regions.append((lo - len(begin), hi + len(end)))
    lower = tuple(_is_lower(s.hosts) for s in sets)
    # One form in every root block, markers where the editor puts them: else no step.
    fine = marked and len(forms) == 1
    indent, nl = forms.pop() if fine else ("", "")
    return Edited(text, sets, tuple(layout(sets)), lower, unit, indent, nl,
                  tuple(regions) if fine else ())


def _is_lower(hosts: Sequence[str]) -> bool:
    joined = "\n".join(hosts)
    return joined.lower() == joined


def _step(last: Edited, groups: Sequence[Group]) -> Edited | None:
    """The edit from ``last`` when each answer set gained or lost at most one host, and the
    stanza pairs stay the same but for those hosts; None when it takes the full way."""
    if not last.regions or editor._indent_unit(last.text) != last.unit:
        return None
    found = _next_sets(last, groups)
    if found is None:
        return None
    pairs = tuple(layout(found.sets))
    if len(pairs) != len(last.pairs):
        return None
    text = last.text
    begin = len(f"{last.indent}{BEGIN_MARKER}{last.nl}")
    end = len(f"{last.indent}{END_MARKER}{last.nl}")
    (p, q), *others = last.regions
    # Every root block holds the same stanzas: one is read, the others compared with it.
    first = text[p + begin:q - end] if others else ""
    if any(hi - lo != q - p or not text.startswith(first, lo + begin) for lo, hi in others):
        return None
    got = _stanza_edits(text, p + begin, q - end, last, pairs, at_set=found.at)
    if got is None:
        return None
    edits, chunks = got
    return _spliced(last, found, pairs, [(a - p, b - p, new) for a, b, new in edits], chunks)


@dataclass(frozen=True)
class _Sets:
    """The answer sets of a step, and where each changed: (id of the old hosts, id of the
    new) → index of the host added or removed (in the longer)."""

    sets: tuple[RuleSet, ...]
    lower: tuple[bool, ...]
    at: dict[tuple[int, int], int]
    moved: tuple[tuple[str, bool], ...]


def _next_sets(last: Edited, groups: Sequence[Group]) -> _Sets | None:
    """``answer_sets(groups)`` from ``last.sets`` when each set gained or lost one host at
    most (and never became empty); None otherwise or when in doubt."""
    given = {answers: hosts for hosts, answers in groups}
    if len(given) != len(groups) or len(given) != len(last.sets):
        return None
    known = groups.steps if isinstance(groups, Stepped) else None
    sets: list[RuleSet] = []
    lower = list(last.lower)
    added: list[tuple[int, str]] = []
    at: dict[tuple[int, int], int] = {}
    moved: list[tuple[str, bool]] = []
    for k, old in enumerate(last.sets):
        hosts = given.get(old.answers)
        if not isinstance(hosts, tuple) or not hosts:
            return None
        if not same(hosts, old.hosts):
            i = known.get((id(old.hosts), id(hosts))) if known else None
            i = one_edit(old.hosts, hosts) if i is None or not _seam(old.hosts, hosts, i) \
                else i
            if i is None:
                return None
            at[id(old.hosts), id(hosts)] = i
            moved.append((max(old.hosts, hosts, key=len)[i], len(hosts) > len(old.hosts)))
            if len(hosts) > len(old.hosts):
                host = hosts[i]
                if not (isinstance(host, str) and _fits(hosts, i)):
                    return None
                added.append((k, host))
                lower[k] = lower[k] and host.lower() == host
        sets.append(RuleSet(hosts, old.answers))
    for k, host in added:
        # A name in two sets, case aside, is refused: the full way names it.
        name = host.lower()
        for m, other in enumerate(sets):
            if m != k and (not lower[m] or _holds(other.hosts, name)):
                return None
    return _Sets(tuple(sets), tuple(lower), at, tuple(moved))


def _seam(old: Sequence[str], new: Sequence[str], i: int) -> bool:
    """Whether ``new`` and ``old`` could be one host apart at ``i`` (in the longer), as far as
    the items next to it tell: a check of a step its maker stated, not a proof."""
    longer, shorter = (new, old) if len(new) > len(old) else (old, new)
    return (len(longer) == len(shorter) + 1 and 0 <= i < len(longer)
            and (i == 0 or longer[i - 1] is shorter[i - 1])
            and (i == len(shorter) or longer[i + 1] is shorter[i]))


def _fits(hosts: Sequence[str], i: int) -> bool:
    """Whether the host at ``i`` passes the check and sorts strictly between its neighbours."""
    host = hosts[i]
    return (all_valid(host, 1) and len(host) <= MAX_HOST
            and (i == 0 or hosts[i - 1] < host) and (i + 1 == len(hosts) or host < hosts[i + 1]))


def _holds(hosts: Sequence[str], name: str) -> bool:
    at = bisect_left(hosts, name)
    return at < len(hosts) and hosts[at] == name


def _stanza_edits(text: str, pos: int, stop: int, last: Edited, pairs: tuple[RuleSet, ...], *,
                  at_set: dict[tuple[int, int], int]
                  ) -> tuple[list[tuple[int, int, str]], list[Chunk]] | None:
    """The edits of ``text`` between ``pos`` and ``stop``, the stanzas of ``last.pairs``:
    each changed pair's match lines, in both of its stanzas. None when that text is not the
    pairs' rendering frame by frame. (``at_set``: where the sets changed, as ``_Sets.at``.)
    Also each changed form's chunks, as ``Edited.chunks``."""
    edits: list[tuple[int, int, str]] = []
    chunks: list[Chunk] = []
    inner = last.indent + last.unit
    for old, new in zip(last.pairs, pairs, strict=True):
        if old.answers != new.answers:
            return None
        (head_a, tail_a), (head_aaaa, tail_aaaa) = stanza_frames(old.answers, last.indent,
                                                                   last.unit, last.nl)
        if not text.startswith(head_a, pos):
            return None
        lines = _match_lines(text, pos + len(head_a), inner, last.nl)
        a, b = lines[0], lines[-1]
        at = b + len(tail_a) + len(head_aaaa)
        # The AAAA stanza matches what the A stanza does: the same lines.
        if not (text.startswith(tail_a, b) and text.startswith(head_aaaa, at - len(head_aaaa))
                and text.startswith(tail_aaaa, at + b - a)
                and text.startswith(text[a:b], at)):
            return None
        if not same(new.hosts, old.hosts):
            edit = _new_matches(text, lines, old.hosts, new.hosts, inner=inner, nl=last.nl,
                                i=at_set.get((id(old.hosts), id(new.hosts))),
                                known=last.chunks)
            if edit is None:
                return None
            lo, hi, fresh, chunk = edit
            edits += [(lo, hi, fresh), (lo + at - a, hi + at - a, fresh)]
            chunks.append(chunk)
        pos = at + b - a + len(tail_aaaa)
    return (edits, chunks) if pos == stop else None


def _match_lines(text: str, start: int, inner: str, nl: str) -> list[int]:
    """The starts of the ``match`` lines from ``start`` on, and the end of the last."""
    out = [start]
    lead = f"{inner}match "
    while text.startswith(lead, out[-1]):
        end = text.find(nl, out[-1])
        if end < 0:
            break
        out.append(end + len(nl))
    return out


def _new_matches(text: str, lines: list[int], old: Sequence[str], new: Sequence[str], *,
                 inner: str, nl: str, i: int | None, known: tuple[Chunk, ...]
                 ) -> tuple[int, int, str, Chunk] | None:
    """The edit of one pair's match lines (``lines``: their starts and the last one's end)
    for ``new``, from those for ``old``, one host apart (at ``i`` when known): (start, end,
    new lines, the chunks of the form changed). ``known``: as ``Edited.chunks``."""
    i = one_edit(old, new) if i is None else i
    if i is None:
        return None
    inserted = len(new) > len(old)
    host = (new if inserted else old)[i]
    f = form_index(host)
    opening, closing, _ = FORMS[f]
    old_forms, new_forms = split_forms(old), split_forms(new)
    counted = next((c for h, g, c in known if h is old and g == f), None)
    found = _form_lines(text, lines, old_forms[f], f, lead=len(inner) + len("match "),
                        nl=nl, counted=counted)
    if found is None:
        return None
    bounds, starts = found
    j = bisect_left(new_forms[f] if inserted else old_forms[f], host)
    got = rechunk(new_forms[f], starts, j, inserted, f)
    if got is None:
        return None
    k0, k1, bodies, sizes = got
    fresh = "".join(f"{inner}match {opening}{body}{closing}{nl}" for body in bodies)
    return bounds[k0], bounds[k1], fresh, (new, f, (*starts[:k0], *sizes, *starts[k1:]))


def _form_lines(text: str, lines: list[int], names: Sequence[str], f: int, *, lead: int,
                nl: str, counted: tuple[int, ...] | None
                ) -> tuple[list[int], list[int]] | None:
    """Where form ``f``'s lines start (and its run ends, or would start when empty), and how
    many of ``names`` (the form's old names) each holds: as the renderer chunked them, for
    the text is its rendering of them (the last result, checked). ``counted`` where the last
    step kept them; else each regex's names are counted from its own text (``bar_count``)."""
    def form_at(k: int) -> int:
        return next(x for x in (2, 1, 0) if text.startswith(FORMS[x][0], lines[k] + lead))

    # The renderer writes the forms in order (``rules.match_regexes``): found by bisection.
    span = range(len(lines) - 1)
    first, stop = bisect_left(span, f, key=form_at), bisect_left(span, f + 1, key=form_at)
    opening, closing, _ = FORMS[f]
    if counted is not None:
        counts = list(counted)
    else:
        skip, cut = lead + len(opening), len(closing) + len(nl)
        counts = [bar_count(text, lo + skip, hi - cut)
                  for lo, hi in itertools.pairwise(lines[first:stop + 1])]
    if len(counts) != stop - first or sum(counts) != len(names):
        return None
    return lines[first:stop + 1], counts


def bar_count(text: str, start: int, end: int) -> int:
    """How many names the compact body ``text[start:end]`` holds: one more than its bars.
    Each alternative of ``compact.encode`` holds at most one group, so every bar adds one
    name (tests/test_corefile_compact.py holds this for random names); a host name has no
    bar of its own."""
    return text.count("|", start, end) + 1


class _Parts:
    """The names of one form from ``start`` on, escaped (and their plain sizes summed) a
    window at a time as the regexes reach them; each regex body in the compact spelling."""

    def __init__(self, names: Sequence[str], prefix: int, start: int) -> None:
        self.names = names
        self.prefix = prefix
        self.start = start
        self.escaped: list[str] = []
        self.raw: list[str] = []  # the names as ``escaped`` spells them, unescaped
        # ends[k]: the bytes of escaped[:k], each with one separator.
        self.ends: list[int] = [0]

    def _extend(self) -> bool:
        lo = self.start + len(self.escaped)
        if lo >= len(self.names):
            return False
        window = list(self.names[lo:lo + _WINDOW])
        if self.prefix:
            window = [n[self.prefix:] for n in window]
        escaped = _escaped(window)
        if len(escaped) != len(window):
            raise _Doubt  # a name split apart by the joining character
        sizes = map(len, escaped) if all(map(str.isascii, escaped)) else map(_utf8_len, escaped)
        self.ends += itertools.accumulate(map((1).__add__, sizes), initial=self.ends[-1])
        del self.ends[-len(escaped) - 1]  # the initial value, there already
        self.escaped += escaped
        self.raw += window
        return True

    def regex(self, at: int, room: int) -> tuple[int, str]:
        """Where the regex of the names from ``at`` on stops (as many as fit ``room`` bytes,
        at least one), and its body."""
        k = at - self.start
        while len(self.ends) <= k + 1 and self._extend():
            pass
        limit = self.ends[k] + room + 1
        while self.ends[-1] <= limit and self._extend():
            pass
        stop = max(k + 1, bisect_right(self.ends, limit) - 1)
        # The names from ``at`` on until one starts a regex of its own, as ``chunk_counts``.
        cut = next((i for i in range(k + 1, stop) if starts_regex(self.raw[i])), stop)
        return self.start + cut, compact_body(self.raw[k:cut])


class _Doubt(Exception):
    """The step cannot be taken as it stands: the full way decides."""


def rechunk(names: Sequence[str], counts: Sequence[int], j: int, inserted: bool, f: int, *,
            check: bool = True) -> tuple[int, int, list[str], list[int]] | None:
    """The regex bodies replacing old regexes ``k0`` to ``k1`` (exclusive) of a form whose
    names changed by one at ``j`` (``counts``: each old regex's number of names), and each
    new body's number of names. ``check``: each new line is read back as its hosts (for the
    text written; a measure of it needs no such check). None where the step cannot be taken
    so: the full way decides."""
    opening, closing, prefix = FORMS[f]
    room = MAX_REGEX - _utf8_len(opening) - _utf8_len(closing)
    old_starts = list(itertools.accumulate(counts, initial=0))
    m = len(counts)
    k0 = max(0, bisect_left(old_starts, j, 0, m) - 1) if m else 0
    start = old_starts[k0]
    later = {s: k for k, s in enumerate(old_starts[k0 + 1:m], k0 + 1)}
    parts = _Parts(names, len(prefix), start)
    bodies: list[str] = []
    sizes: list[int] = []
    try:
        while start < len(names):
            stop, body = parts.regex(start, room)
            rx = opening + body + closing
            # The new line must read back as exactly its hosts, and as one bare word.
            if check and (_NOT_BARE.search(rx)
                          or hosts_of_regex(rx) != list(names[start:stop])):
                return None
            bodies.append(body)
            sizes.append(stop - start)
            start = stop
            past = start > j if inserted else start >= j
            if past and (k := later.get(start - 1 if inserted else start + 1)) is not None:
                return k0, k, bodies, sizes
    except _Doubt:
        return None
    return k0, m, bodies, sizes


def _spliced(last: Edited, found: _Sets, pairs: tuple[RuleSet, ...],
             edits: list[tuple[int, int, str]], chunks: Sequence[Chunk] = ()) -> Edited:
    """The new text: each root block's managed text edited alike (``edits``: offsets into
    it), all else the last text's."""
    text = last.text
    pieces: list[str] = []
    regions: list[tuple[int, int]] = []
    done = size = 0
    for lo, hi in last.regions:
        out_lo = size + lo - done
        for a, b, new in edits:
            pieces += (text[done:lo + a], new)
            size += lo + a - done + len(new)
            done = lo + b
        pieces.append(text[done:hi])
        size += hi - done
        done = hi
        regions.append((out_lo, size))
    pieces.append(text[done:])
    out = "".join(pieces)
    editor._check_size(out)
    return Edited(out, found.sets, pairs, found.lower, last.unit, last.indent, last.nl,
                  tuple(regions), found.moved, tuple(chunks))
