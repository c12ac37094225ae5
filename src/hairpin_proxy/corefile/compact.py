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

import itertools
import operator
import re
import threading
from collections.abc import Callable, Sequence
from itertools import groupby
from typing import Generic, TypeVar

from hairpin_proxy.corefile.names import regex_escape

_DOT = "\\."
V = TypeVar("V")


def encode(names: Sequence[str]) -> str:
    """The compact body matching exactly ``names`` (distinct, non-empty, any order)."""
    key = tuple(names)
    body = _bodies.get(key)
    if body is None:
        made = "|".join(_suffixes(sorted(key)))
        body = _bodies.keep(key, made, len(made))
    return body


class _Memo(Generic[V]):
    """What was encoded last, by the names it was encoded from: a pass's size measure, the
    Corefile edit after it and the edit's read-back each encode the regex a host came into or
    left, and the size limits' fit tries one object after another on the same regexes. A
    cache, bounded by the bytes it may keep alive, counted as if no one else held its names;
    shared by the threads that edit and plan, hence the lock."""

    def __init__(self, most_bytes: int) -> None:
        self.most_bytes = most_bytes
        self._held: dict[tuple[str, ...], V] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[str, ...]) -> V | None:
        return self._held.get(key)

    def keep(self, key: tuple[str, ...], value: V, chars: int) -> V:
        """``value`` (of ``chars`` characters) kept for ``key``; returned."""
        # A str's header is 49 bytes (an ASCII one: a byte a character), a tuple's slot 8.
        cost = 49 + chars + 40 + 57 * len(key) + sum(map(len, key))
        with self._lock:
            if key in self._held or cost > self.most_bytes:
                return value
            if self._bytes + cost > self.most_bytes:
                self._held.clear()
                self._bytes = 0
            self._held[key] = value
            self._bytes += cost
        return value


# Room for every regex of a first pass at 55,000 hosts (about 4.5 MB counted so, 300
# regexes of a few hundred names), so that its Corefile edit finds each body its size measure
# encoded; later passes add a regex or two each. The names are mostly the plan's own hosts,
# so what it really keeps alive is the bodies and the keys' slots, about a fifth of that.
_bodies: _Memo[str] = _Memo(8 << 20)
# The alternatives of the names under one label or prefix (``_shared``): a regex with one
# name more or less than one encoded before is encoded again along that name's path alone (its
# other groups hold the same names, so the same alternatives). Only for groups of at least
# this many names: below, encoding them again costs less than the key.
_SHARED_AT = 8


def _factored(alts: list[str], before: str, after: str) -> list[str]:
    """``before`` + each of ``alts`` + ``after``, as one group where that is shorter."""
    if len(alts) == 1:
        return [before + alts[0] + after]
    spread = [before + a + after for a in alts]
    group = f"{before}(?:{'|'.join(alts)}){after}"
    return [group] if len(group) < sum(map(len, spread)) + len(spread) - 1 else spread


def _shared(memo: _Memo[tuple[str, ...]], made_of: Callable[[list[str]], list[str]]
            ) -> Callable[[list[str]], list[str]]:
    """``made_of`` kept in ``memo`` for groups of at least ``_SHARED_AT`` names."""
    def made(names: list[str]) -> list[str]:
        if len(names) < _SHARED_AT:
            return made_of(names)
        key = tuple(names)
        got = memo.get(key)
        if got is None:
            out = tuple(made_of(names))
            got = memo.keep(key, out, sum(map(len, out)) + 8 * len(out))
        return list(got)
    return made


def _suffixes_of(names: list[str]) -> list[str]:
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


def _prefixes_of(words: list[str]) -> list[str]:
    """Alternatives matching exactly the sorted, distinct ``words`` (labels or their ends,
    maybe one empty): grouped by their common prefixes."""
    out: list[str] = []
    for _, run in groupby(words, key=lambda w: w[:1]):
        same = list(run)
        if len(same) == 1:
            out.append(regex_escape(same[0]))
            continue
        shared = _common(same[0], same[-1])  # sorted: what the first and last share
        out += _factored(_prefixes([w[len(shared):] for w in same]), regex_escape(shared), "")
    return out


_suffixes = _shared(_Memo(2 << 20), _suffixes_of)
_prefixes = _shared(_Memo(2 << 20), _prefixes_of)


def _common(a: str, b: str) -> str:
    """The longest prefix ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return a[:n]


# --- reading back ----------------------------------------------------------------------------

# A body's tokens: a group's opening, its closing, a bar, or a run of literal characters
# (each escaped one a backslash and the character).
_TOKEN = re.compile(r"\(\?:|[|)]|(?:\\.|[^\\|()])+", re.DOTALL)
_UNESCAPE = re.compile(r"\\(.)", re.DOTALL)


class _Parser:
    """The names a body of literals, groups and bars matches (its tokens from ``at`` on);
    None at anything else or at more names than the body has alternatives."""

    def __init__(self, tokens: list[str], most: int) -> None:
        self.tokens = tokens
        self.at = 0
        self.most = most

    def alternation(self) -> list[str] | None:
        out: list[str] = []
        tokens = self.tokens
        while True:
            seq = self.sequence()
            if seq is None or len(out) + len(seq) > self.most:
                return None
            out += seq
            if self.at < len(tokens) and tokens[self.at] == "|":
                self.at += 1
                continue
            return out

    def sequence(self) -> list[str] | None:
        got = [""]
        tokens = self.tokens
        while self.at < len(tokens) and tokens[self.at] not in ("|", ")"):
            token = tokens[self.at]
            self.at += 1
            if token == "(?:":
                part = self.alternation()
                if part is None or self.at >= len(tokens) or tokens[self.at] != ")":
                    return None
                self.at += 1
            else:
                part = [_UNESCAPE.sub(r"\1", token) if "\\" in token else token]
            got = [g + p for g in got for p in part]
            if len(got) > self.most:
                return None
        return got


def decode(body: str) -> list[str] | None:
    """The names a body written by ``encode`` matches, sorted; None for any other body."""
    tokens = _TOKEN.findall(body)
    if "".join(tokens) != body:
        return None  # a "(" of another kind, a backslash at the end
    parser = _Parser(tokens, body.count("|") + 1)
    names = parser.alternation()
    if names is None or parser.at != len(tokens) or "" in names:
        return None
    names.sort()
    if any(map(operator.eq, names, itertools.islice(names, 1, None))):
        return None
    # Only what we would write back the same way counts as read.
    return names if encode(names) == body else None
