r"""The compact spelling of a ``match`` regex's names: shared suffixes and prefixes written once.

A regex body of the plain spelling lists every name in full (``a\.shop\.example\.com|b\.sh…``);
the compact one factors what names share, label by label from the right (the domains) and
character by character from the left within the first labels (``customer-1``,
``customer-2``)::

    (?:customer-(?:1|2)|www)\.shop\.example\.com|api\.example\.org

It matches exactly the same names: the body holds nothing but literal characters (escaped as
the plain spelling escapes them), non-capturing groups and alternation (an empty alternative
where a name is a suffix or prefix of another), which RE2 (Go's ``regexp/syntax``) and
Python's ``re`` read alike, and which the template plugin tries as it tries any regex. Each
factoring is taken only where it is shorter than the names it replaces, so a body is never
longer than the plain one: chunks of names sized by their plain spelling stay within a
regex's limit. Nesting is at most one group per label and one per character of a first label
(a name has at most 253), far below RE2's limit of 1,000.

``decode`` reads back a body and accepts it only when ``encode`` of what it holds gives the
same text: only what we write counts as ours.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby
from os.path import commonprefix

from hairpin_proxy.corefile.names import regex_escape

_DOT = "\\."


def encode(names: Sequence[str]) -> str:
    """The compact body matching exactly ``names`` (distinct, non-empty, any order)."""
    return "|".join(_suffixes(sorted(names)))


def _factored(alts: list[str], before: str, after: str) -> list[str]:
    """``before`` + each of ``alts`` + ``after``, as one group where that is shorter."""
    if len(alts) == 1:
        return [before + alts[0] + after]
    spread = [before + a + after for a in alts]
    group = f"{before}(?:{'|'.join(alts)}){after}"
    return [group] if len(group) < sum(map(len, spread)) + len(spread) - 1 else spread


def _suffixes(names: list[str]) -> list[str]:
    """Alternatives matching exactly the sorted, distinct ``names``: grouped by last label."""
    by_last: dict[str, list[str]] = {}
    bare: list[str] = []
    for name in names:
        head, dot, last = name.rpartition(".")
        if dot:
            by_last.setdefault(last, []).append(head)
        else:
            bare.append(last)
    out: list[str] = []
    for last in sorted(by_last):
        out += _factored(_suffixes(sorted(by_last[last])), "", _DOT + regex_escape(last))
    return _prefixes(bare) + out


def _prefixes(words: list[str]) -> list[str]:
    """Alternatives matching exactly the sorted, distinct ``words`` (labels or their ends,
    maybe one empty): grouped by their common prefixes."""
    out: list[str] = []
    for _, run in groupby(words, key=lambda w: w[:1]):
        same = list(run)
        if len(same) == 1:
            out.append(regex_escape(same[0]))
            continue
        shared = commonprefix(same)
        out += _factored(_prefixes([w[len(shared):] for w in same]), regex_escape(shared), "")
    return out


# --- reading back ----------------------------------------------------------------------------

_META = frozenset("|()\\")


class _Parser:
    """A reader of the bodies ``encode`` writes, expanded to the names they match; stops
    (``None``) at anything else or at more names than the body has alternatives."""

    def __init__(self, body: str) -> None:
        self.body = body
        self.at = 0
        self.most = body.count("|") + 1

    def alternation(self) -> list[str] | None:
        out: list[str] = []
        while True:
            seq = self.sequence()
            if seq is None:
                return None
            out += seq
            if len(out) > self.most:
                return None
            if self.at < len(self.body) and self.body[self.at] == "|":
                self.at += 1
                continue
            return out

    def sequence(self) -> list[str] | None:
        got = [""]
        body = self.body
        while self.at < len(body) and body[self.at] not in "|)":
            part = self.atom()
            if part is None:
                return None
            got = [g + p for g in got for p in part]
            if len(got) > self.most:
                return None
        return got

    def atom(self) -> list[str] | None:
        body, at = self.body, self.at
        if body.startswith("(?:", at):
            self.at += 3
            inner = self.alternation()
            if inner is None or not body.startswith(")", self.at):
                return None
            self.at += 1
            return inner
        if body[at] == "\\" and at + 1 < len(body):
            self.at += 2
            return [body[at + 1]]
        if body[at] in _META:
            return None
        self.at += 1
        return [body[at]]


def decode(body: str) -> list[str] | None:
    """The names a body written by ``encode`` matches, sorted; None for any other body."""
    parser = _Parser(body)
    names = parser.alternation()
    if names is None or parser.at != len(body) or "" in names:
        return None
    names.sort()
    if any(a == b for a, b in zip(names, names[1:], strict=False)):
        return None
    return names if encode(names) == body else None
