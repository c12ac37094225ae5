"""Host verification's part of the plan: which candidates the public DNS leads to this
cluster, judged again only where something changed since the last pass. Pure.

A host's outcome depends on its verdict, and, while that verdict says nothing of where its
DNS leads (pending, resolver-error), on whether the rules hold it now. Between two passes it
can change only for the hosts whose route changed (the plan's touched hosts), those whose
verdict changed, and those whose verdict said nothing last time; every other host keeps its
outcome, and ``judge`` looks at those alone.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from hairpin_proxy.ordered import has
from hairpin_proxy.verify.verdict import Verdict

# Verdicts that say nothing of where a host's DNS leads: a held host stays as the rules have it.
UNKNOWN = frozenset({"pending", "resolver-error"})
# Past this many hosts to judge again, judging every host costs about the same.
_MOST = 512


@dataclass(frozen=True, eq=False)
class Judged:
    """The verification of one pass's candidates, and what the next pass starts from."""

    # The candidates whose DNS leads here, or that the rules hold while that is not known.
    hosts: tuple[str, ...]
    # The others, with their verdict code.
    unverified: dict[str, str]
    # Candidates per verdict code.
    counts: Counter[str]
    # The candidates (sorted) and the verdicts they were judged by.
    candidates: tuple[str, ...]
    verdicts: Mapping[str, Verdict]
    # Candidates whose verdict said nothing (their outcome follows the held rules).
    unknown: frozenset[str]


def code_of(verdict: Verdict | None) -> str:
    return verdict.code if verdict is not None else "pending"


def _keeps(verdict: Verdict | None, held: Collection[str], host: str) -> bool:
    return (verdict is not None and verdict.redirect) or (
        code_of(verdict) in UNKNOWN and host in held)


def judge_all(candidates: Sequence[str], verdicts: Mapping[str, Verdict],
              held: Iterable[str]) -> Judged:
    """Every candidate judged (``candidates`` sorted)."""
    had = set(held)
    kept: list[str] = []
    out: dict[str, str] = {}
    counts: Counter[str] = Counter()
    unknown: list[str] = []
    for host in candidates:
        verdict = verdicts.get(host)
        code = code_of(verdict)
        counts[code] += 1
        if code in UNKNOWN:
            unknown.append(host)
        if _keeps(verdict, had, host):
            kept.append(host)
        else:
            out[host] = code
    return Judged(tuple(kept), out, counts, tuple(candidates), verdicts, frozenset(unknown))


def verdicts_changed(old: Mapping[str, Verdict], new: Mapping[str, Verdict]) -> set[str] | None:
    """The hosts whose verdict differs between ``old`` and ``new``, where that is cheap to
    tell: ``new`` holds ``old``'s hosts in the same order, maybe with more after them (the
    checker's verdicts, a pass later). None otherwise."""
    if new is old:
        return set()
    before, after = list(old), list(new)
    n = len(before)
    if len(after) < n or after[:n] != before:
        return None
    changed = set(itertools.compress(before, map(operator.is_not, new.values(),
                                                 old.values())))
    changed.update(after[n:])
    return changed


def judge(candidates: tuple[str, ...], verdicts: Mapping[str, Verdict],
          held: Collection[str], last: Judged | None,
          touched: Collection[str] | None) -> tuple[Judged, set[str] | None]:
    """This pass's verification (``candidates`` sorted, ``held``: what the rules hold), and
    the candidates whose outcome changed since ``last`` (None: not known). ``touched``: the
    hosts whose route may have changed since ``last`` (None: not known)."""
    changed = None if last is None or touched is None else verdicts_changed(
        last.verdicts, verdicts)
    if last is None or touched is None or changed is None:
        return judge_all(candidates, verdicts, held), None
    again = changed.union(touched, last.unknown)
    if len(again) > _MOST:
        return judge_all(candidates, verdicts, held), None
    if len(again) > 16 and not isinstance(held, set | frozenset | Mapping):
        # A membership test per host in a tuple of ten thousand names adds up.
        held = set(held)
    return _again(candidates, verdicts, held, last, again)


def _again(candidates: tuple[str, ...], verdicts: Mapping[str, Verdict],
           held: Collection[str], last: Judged, again: set[str]
           ) -> tuple[Judged, set[str]]:
    kept = list(last.hosts)
    out = dict(last.unverified)
    counts = Counter(last.counts)
    unknown = set(last.unknown)
    moved: set[str] = set()
    for host in again:
        if has(last.candidates, host):
            counts[code_of(last.verdicts.get(host))] -= 1
            out.pop(host, None)
        unknown.discard(host)
        keep = False
        if has(candidates, host):
            verdict = verdicts.get(host)
            code = code_of(verdict)
            counts[code] += 1
            if code in UNKNOWN:
                unknown.add(host)
            keep = _keeps(verdict, held, host)
            if not keep:
                out[host] = code
        at = bisect.bisect_left(kept, host)
        was = at < len(kept) and kept[at] == host
        if keep and not was:
            kept.insert(at, host)
        elif was and not keep:
            del kept[at]
        if keep != was:
            moved.add(host)
    counts = +counts
    return Judged(tuple(kept), out, counts, candidates, verdicts, frozenset(unknown)), moved
