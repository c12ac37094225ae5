"""The bytes the rules take as they are written: each answer set's pair of ``template``
stanzas, their ``match`` lines in the compact spelling, chunked as the renderer chunks them.

The compact size of a set of names is not the sum of its names' sizes (a name's cost depends
on the names it shares a domain or a prefix with), so it is measured on the regexes
themselves. ``Written`` is a value: the regexes' sizes per answer set and form, with the names
each holds; ``grown`` gives the value of a few more or fewer names by re-encoding only the
regexes they touch (the incremental edit's step, ``incremental.rechunk``), ``written`` that of
a whole set. Where a regex stops depends on its names alone (``rules.chunk_counts``), so the
bytes are those of a fresh rendering whatever steps led there: every caller (the controller,
``render``, ``doctor``) gets the same figure, and a step re-encodes one regex or two.

What it leaves out, as the plain measure did: the marker lines, the indentation the Corefile
uses beyond four spaces, and a second stanza pair where a wildcard shadows another set's host
(``rules.layout``); the room's slack covers them (``plan.budget``).
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import overload

from hairpin_proxy.corefile.compact import encode
from hairpin_proxy.corefile.incremental import FORMS, rechunk
from hairpin_proxy.corefile.rules import (
    Answers,
    _utf8_len,
    chunk_counts,
    form_index,
    split_forms,
    stanza_frames,
)

# "match " and the indentation and line end around each regex (stanzas at four spaces).
_LINE = len("        match ") + 1
# A step re-encodes the regexes from the one a name lands in up to where the old ones start
# again; past this many names at once, encoding the form afresh costs less.
_STEPS = 64


@dataclass(frozen=True)
class Form:
    """One form's regexes (exact, ``*.`` or ``**.`` hosts of one answer set): the names each
    regex holds (sorted across them, as the hosts are written) and each regex's bytes. Kept
    per regex, so that a step builds the regexes it changes and not a tuple of every name."""

    chunks: tuple[tuple[str, ...], ...] = ()
    sizes: tuple[int, ...] = ()

    @property
    def size(self) -> int:
        """The bytes of its ``match`` lines in one stanza."""
        return sum(self.sizes) + _LINE * len(self.sizes)

    @property
    def counts(self) -> tuple[int, ...]:
        """How many names each regex holds."""
        return tuple(map(len, self.chunks))


def _frame(f: int) -> int:
    """The bytes of form ``f``'s regex around its body."""
    opening, closing, _ = FORMS[f]
    return _utf8_len(opening) + _utf8_len(closing)


def _bare(chunk: tuple[str, ...], prefix: int) -> tuple[str, ...]:
    """A regex's names as its body spells them (a wildcard without its prefix)."""
    return tuple(n[prefix:] for n in chunk) if prefix else chunk


def form_of(names: Sequence[str], f: int, known: Mapping[tuple[str, ...], int] | None = None
            ) -> Form:
    """The regexes of the sorted ``names`` of form ``f``, rendered afresh; ``known``: the
    bytes of regexes measured before (a cache: a regex of the same names is the same)."""
    if not names:
        return Form()
    opening, closing, prefix = FORMS[f]
    bare = [n[len(prefix):] for n in names] if prefix else names
    stops = list(itertools.accumulate(chunk_counts(opening, bare, closing), initial=0))
    frame = _frame(f)
    chunks, sizes = [], []
    for a, b in itertools.pairwise(stops):
        chunk = tuple(bare[a:b])
        size = known.get(chunk) if known is not None else None
        if size is None:
            size = frame + _utf8_len(encode(chunk))
        chunks.append(tuple(names[a:b]) if prefix else chunk)
        sizes.append(size)
    return Form(tuple(chunks), tuple(sizes))


class _Edited(Sequence[str]):
    """The names of ``chunks`` (whose starts are ``starts``) with ``host`` put in at ``j``
    (``inserted``) or the name at ``j`` taken out: read a slice at a time, never copied
    whole (a step reads the few hundred names of the regexes it changes)."""

    def __init__(self, chunks: tuple[tuple[str, ...], ...], starts: list[int], j: int,
                 host: str, inserted: bool) -> None:
        self.chunks, self.starts, self.j, self.host = chunks, starts, j, host
        self.inserted = inserted

    def __len__(self) -> int:
        return self.starts[-1] + (1 if self.inserted else -1)

    def _plain(self, lo: int, hi: int) -> list[str]:
        """The unedited names from ``lo`` up to ``hi``."""
        out: list[str] = []
        k = bisect_right(self.starts, lo) - 1
        while lo < hi and 0 <= k < len(self.chunks):
            at = self.starts[k]
            out += self.chunks[k][lo - at:hi - at]
            lo, k = self.starts[k + 1], k + 1
        return out

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, int):
            got = self[i:i + 1] if i >= 0 else self[len(self) + i:len(self) + i + 1]
            if not got:
                raise IndexError(i)
            return got[0]
        lo, hi, _ = i.indices(len(self))
        j = self.j
        out = self._plain(lo, min(hi, j)) if lo < j else []
        if self.inserted:
            if lo <= j < hi:
                out.append(self.host)
            if hi > j + 1:
                out += self._plain(max(lo, j + 1) - 1, hi - 1)
        elif hi > j:
            out += self._plain(max(lo, j) + 1, hi + 1)
        return out


def _stepped(form: Form, host: str, inserted: bool, f: int) -> Form | None:
    """``form`` with ``host`` added (``inserted``) or taken away, by re-encoding the regexes
    it touches; None where the step cannot be taken so."""
    chunks = form.chunks
    starts = list(itertools.accumulate(map(len, chunks), initial=0))
    # The regex the host falls in (or would): the last whose first name is not above it.
    k = max(0, bisect_right([c[0] for c in chunks], host) - 1) if chunks else 0
    j = starts[k] + bisect_left(chunks[k], host) if chunks else 0
    names = _Edited(chunks, starts, j, host, inserted)
    got = rechunk(names, form.counts, j, inserted, f, check=False)
    if got is None:
        return None
    k0, k1, bodies, counts = got
    lo = starts[k0]
    new = names[lo:lo + sum(counts)]
    stops = itertools.accumulate(counts, initial=0)
    made = tuple(tuple(new[a:b]) for a, b in itertools.pairwise(stops))
    sizes = [_frame(f) + _utf8_len(b) for b in bodies]
    return Form((*chunks[:k0], *made, *chunks[k1:]), (*form.sizes[:k0], *sizes, *form.sizes[k1:]))


def _changed(form: Form, added: Sequence[str], removed: Sequence[str], f: int) -> Form:
    """``form`` with ``added`` and without ``removed`` (sorted, distinct, each really new or
    really there)."""
    if len(added) + len(removed) <= _STEPS:
        out: Form | None = form
        for host in removed:
            out = _stepped(out, host, False, f) if out is not None else None
        for host in added:
            out = _stepped(out, host, True, f) if out is not None else None
        if out is not None:
            return out
    gone = set(removed)
    names = tuple(sorted(itertools.chain(
        (n for n in itertools.chain.from_iterable(form.chunks) if n not in gone), added)))
    return form_of(names, f, known_of(form, f))


def known_of(form: Form, f: int) -> dict[tuple[str, ...], int]:
    """``form``'s regexes by the names each holds, for ``form_of``."""
    prefix = len(FORMS[f][2])
    return {_bare(chunk, prefix): size
            for chunk, size in zip(form.chunks, form.sizes, strict=True)}


@dataclass(frozen=True)
class Written:
    """The regexes of every answer set, as written: answer set → its three forms."""

    groups: Mapping[Answers, tuple[Form, Form, Form]] = field(default_factory=dict)

    @property
    def size(self) -> int:
        """The bytes of every stanza pair (at four spaces of indentation)."""
        return sum(_pair_bytes(answers, forms) for answers, forms in self.groups.items())

    def grown(self, added: Mapping[Answers, Sequence[str]],
              removed: Mapping[Answers, Sequence[str]]) -> Written:
        """This with the hosts ``added`` to and ``removed`` from their answer sets (each host
        really new to, or really in, its set)."""
        groups = dict(self.groups)
        for answers in set(added) | set(removed):
            forms = list(groups.get(answers, (Form(), Form(), Form())))
            plus, minus = _by_form(added.get(answers, ())), _by_form(removed.get(answers, ()))
            for f in range(3):
                if plus[f] or minus[f]:
                    forms[f] = _changed(forms[f], plus[f], minus[f], f)
            if any(form.chunks for form in forms):
                groups[answers] = (forms[0], forms[1], forms[2])
            else:
                groups.pop(answers, None)
        return Written(groups)


def _by_form(hosts: Sequence[str]) -> tuple[list[str], list[str], list[str]]:
    out: tuple[list[str], list[str], list[str]] = ([], [], [])
    for host in sorted(hosts):
        out[form_index(host)].append(host)
    return out


def _pair_bytes(answers: Answers, forms: tuple[Form, Form, Form]) -> int:
    """One answer set's stanza pair: the A and the AAAA stanza, each with every regex."""
    frames = _frames(answers)
    return frames + 2 * sum(form.size for form in forms)


_FRAMES: dict[Answers, int] = {}


def _frames(answers: Answers) -> int:
    got = _FRAMES.get(answers)
    if got is None:
        if len(_FRAMES) > 4096:
            _FRAMES.clear()
        got = _FRAMES[answers] = sum(
            _utf8_len(head) + _utf8_len(tail)
            for head, tail in stanza_frames(answers, "    ", "    ", "\n"))
    return got


def written(groups: Mapping[Answers, Sequence[str]], last: Written | None = None) -> Written:
    """The regexes of every answer set's sorted, distinct hosts ``groups``, rendered afresh
    (``last``: regexes measured before, a cache only)."""
    out: dict[Answers, tuple[Form, Form, Form]] = {}
    old = last.groups if last is not None else {}
    for answers, hosts in groups.items():
        if not hosts:
            continue
        split = split_forms(hosts)
        before = old.get(answers)
        forms = [form_of(tuple(split[f]), f, known_of(before[f], f) if before else None)
                 for f in range(3)]
        out[answers] = (forms[0], forms[1], forms[2])
    return Written(out)
