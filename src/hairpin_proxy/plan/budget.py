"""The size limits of what a pass writes: the rules budget (--rules-budget), and the room the
DNS rules' ConfigMap and the published hosts' ConfigMap leave under the API server's 1 MiB.

Measured on what the pass really writes: each host in the answer set it resolves with (the
rules hold one pair of ``template`` stanzas per answer set, so a set's fixed bytes count once,
``corefile.rules_bytes`` of the groups), and in the published ``hosts`` and ``entries`` lines.
Over a limit, the OLDEST objects keep their hosts and the newest that would overflow are
refused, each with its reason: one new object can never stop the rules of every other from
being written, whatever target its hosts go to (a class falling back to the default, a slot
of its own, a Gateway).

Pure: ``within`` is the plan's step (``plan.core.fit_rooms``); the measures' memo (of the
names their formula does not cover) and running sums are caches only.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from hairpin_proxy import corefile
from hairpin_proxy.claims import Claim, ObjectRef, origin_key
from hairpin_proxy.corefile.rules import form_index, plain_rules_bytes
from hairpin_proxy.corefile.written import Written, written
from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.ordered import has
from hairpin_proxy.plan.snapshot import Rooms
from hairpin_proxy.policy import Rejection
from hairpin_proxy.published import KEYS as PUBLISHED_KEYS
from hairpin_proxy.wildcards import wildcard_base

HostSet = set[str] | frozenset[str]

MAX_CONFIGMAP_BYTES = corefile.MAX_CONFIGMAP_BYTES
# What the measures leave out, kept free in every ConfigMap so that a fit that passes never
# meets the API server's limit: a fixed part (marker lines, the ``addresses`` key) and a part
# that grows with the rules (the frame of each further 8,000-byte regex is about 1% of it, a
# wildcard shadowing another set's host gets a second stanza pair). Not more: a Corefile
# that holds our rules now must still be found to hold them.
SLACK = 4096
SLACK_SHARE = 50  # 1 in 50 bytes of the room

# An answer set standing in for one with no address (no rule is written for it: counted as
# if it had one, so the measure never shrinks when the proxy Service loses its address).
_STAND_IN = corefile.Answers(("192.0.2.1",))

# Whether an answer set holds (exact, one-label ``*.``, any-depth ``**.``) hosts: each form
# has its own regex, so its own frame.
Shape = tuple[bool, bool, bool]
_NONE: Shape = (False, False, False)
# Answer set → its (exact, ``*.``, ``**.``) hosts.
Counts = dict[corefile.Answers, tuple[int, int, int]]


class Measure:
    """Bytes of one destination: ``host`` (a host's own), ``per_host`` (what each host of an
    answer set adds for its addresses) and ``frame`` (an answer set's fixed bytes, given
    its ``Shape``: whether it holds exact, ``*.`` and ``**.`` hosts). A pass measures tens
    of thousands of hosts: those of plain names by a formula in C string methods
    (``_plain``), the others memoised (none in the usual cluster)."""

    def __init__(self) -> None:
        # Host → bytes, of names ``_plain`` does not cover only: a memo of every host would
        # be the biggest thing kept between passes (0.4 MiB at 11,000 hosts).
        self._hosts: dict[str, int] = {}
        self._frames: dict[tuple[corefile.Answers, Shape], int] = {}
        # The last host set measured whole (``advance``) and its running sums: its bytes,
        # and how many of its hosts start with "*." and with "**.". None: the set of
        # ``hosts_of``, not kept (half a megabyte at 10,000 hosts) where the next pass most
        # likely goes by the plan's change, which needs none.
        self.present: HostSet | None = frozenset()
        self._sums = (0, 0, 0)
        # The hosts tuple ``present`` is the set of (None: not known), and the hosts per
        # answer set among them as last counted (``AnswerSets.count_present``).
        self.hosts_of: tuple[str, ...] | None = None
        self.counted: Counts | None = None
        # Where the last fit to a limit of this measure (the first of its limits) stood.
        self.fitted: FitPoint | None = None

    def forget(self) -> None:
        """Drop the running sums (the next measure starts from nothing)."""
        self.present, self._sums, self.hosts_of = frozenset(), (0, 0, 0), None
        self.counted = None
        self.fitted = None

    def last_set(self) -> HostSet:
        """The set of the hosts last measured (made again where it was not kept)."""
        if self.present is not None:
            return self.present
        return set(self.hosts_of or ())

    def advance(self, present: HostSet | None, added: Iterable[str], removed: Iterable[str],
                of: tuple[str, ...] | None = None) -> tuple[int, int, int]:
        """The running sums of ``present`` (distinct hosts; None: those of ``of``, no set
        of them kept): those of the last set measured, with ``added`` and less ``removed``
        (the difference between the two sets). A pass measures the same ten thousand hosts
        as the last but a few."""
        size, wild, deep = self._sums
        new, gone = list(added), list(removed)
        size += self.hosts(new) - self.hosts(gone)
        for hosts, sign in ((new, 1), (gone, -1)):
            for h in hosts:
                wild += sign * h.startswith("*.")
                deep += sign * h.startswith("**.")
        self.present, self._sums, self.hosts_of = present, (size, wild, deep), of
        return self._sums

    def host(self, host: str) -> int:
        return self.hosts((host,))

    def hosts(self, hosts: Sequence[str]) -> int:
        got = self._plain(hosts)
        if got is not None:
            return got
        known = self._hosts
        try:
            # Every name memoised (a cluster of names no formula covers): looked up in C.
            return sum(map(known.__getitem__, hosts))
        except KeyError:
            return self._mixed(hosts)

    def _mixed(self, hosts: Sequence[str]) -> int:
        """``hosts`` of plain and other names: halved until a part is plain, so that a few
        other names among thousands cost a few passes in C, not a step per name."""
        if len(hosts) > 16:
            half = len(hosts) // 2
            return sum(got if (got := self._plain(part)) is not None else self._mixed(part)
                       for part in (hosts[:half], hosts[half:]))
        total = 0
        unknown: list[str] = []
        for h in hosts:
            got = self._plain((h,))
            if got is None:
                got = self._hosts.get(h)
            if got is None:
                unknown.append(h)
            else:
                total += got
        if unknown:
            self._learn(list(dict.fromkeys(unknown)))
            total += sum(map(self._hosts.__getitem__, unknown))
        return total

    def keep_only(self, hosts: Collection[str]) -> None:
        """Forget hosts that went away, but not so often that it costs."""
        if len(self._hosts) > 2 * len(hosts) + 1024:
            present = set(hosts)
            self._hosts = {h: n for h, n in self._hosts.items() if h in present}

    def frame(self, answers: corefile.Answers, shape: Shape) -> int:
        key = (answers, shape)
        size = self._frames.get(key)
        if size is None:
            if len(self._frames) > 4096:
                self._frames.clear()
            size = self._frames[key] = self._frame(answers or _STAND_IN, shape)
        return size

    def _plain(self, hosts: Sequence[str]) -> int | None:
        """The bytes of ``hosts`` by a formula, where it covers each of them; else None."""
        return None

    def _learn(self, hosts: list[str]) -> None:
        self._hosts.update((h, self._host(h)) for h in hosts)

    def _host(self, host: str) -> int:
        raise NotImplementedError

    def per_host(self, answers: corefile.Answers) -> int:
        return 0

    def _frame(self, answers: corefile.Answers, shape: Shape) -> int:
        return 0


class RulesMeasure(Measure):
    """``corefile.rules_bytes`` of the groups, host by host: the plain spelling (the rules'
    limit is over the bytes as written, ``written``, their own measure, which is not a sum;
    a namespace's share is over this)."""

    _plain = staticmethod(plain_rules_bytes)

    def __init__(self) -> None:
        super().__init__()
        self.written = WrittenMeasure()

    def forget(self) -> None:
        super().forget()
        self.written.forget()

    def _learn(self, hosts: list[str]) -> None:
        # Measured together: much cheaper than one by one.
        self._hosts.update(zip(hosts, corefile.host_rules_bytes(hosts), strict=True))

    def _host(self, host: str) -> int:
        return corefile.host_rules_bytes((host,))[0]

    def _frame(self, answers: corefile.Answers, shape: Shape) -> int:
        probe = [h for h, on in zip(("a.invalid", "*.a.invalid", "**.a.invalid"), shape,
                                    strict=True) if on]
        if not probe:
            return 0
        return corefile.rules_bytes([(probe, answers)]) - corefile.rules_bytes(probe)


class NodeLocalMeasure(Measure):
    """node-local-dns's Corefile: a host (a wildcard's domain) as a zone of our server
    block's key."""

    def _host(self, host: str) -> int:
        base = wildcard_base(host)
        return len((host if base is None else base).encode()) + len(":53 ")

    def _plain(self, hosts: Sequence[str]) -> int | None:
        joined = "\n".join(hosts)
        if not joined.isascii():
            return None
        if not hosts:
            return 0
        wild = joined.count("\n*.") + joined.startswith("*.")
        deep = joined.count("\n**.") + joined.startswith("**.")
        return len(joined) + 1 - len(hosts) - 2 * wild - 3 * deep + len(":53 ") * len(hosts)


class PublishedMeasure(Measure):
    """The published ConfigMap: a host's line in ``hosts`` and in ``entries``."""

    def _host(self, host: str) -> int:
        return 2 * (len(host.encode()) + 1)

    def _plain(self, hosts: Sequence[str]) -> int | None:
        joined = "".join(hosts)
        return 2 * (len(joined) + len(hosts)) if joined.isascii() else None

    def per_host(self, answers: corefile.Answers) -> int:
        return sum(1 + len(a) for a in (*answers.ipv4, *answers.ipv6))


class WrittenMeasure:
    """The rules' bytes as written (``corefile.written``): the compact spelling's size is
    not a sum over hosts, so it is measured on the regexes, kept between passes. A pass that
    goes by the plan's change re-encodes the regexes its hosts touch alone; another renders
    afresh, reusing the regexes whose names are the same."""

    def __init__(self) -> None:
        self.last: Written | None = None
        # The hosts tuple ``last`` holds (None: not known).
        self.hosts_of: tuple[str, ...] | None = None

    def forget(self) -> None:
        self.last, self.hosts_of = None, None

    def size(self, hosts: Sequence[str], sets: AnswerSets, since: Touched | None = None
             ) -> int:
        """The bytes of the distinct ``hosts``' rules; ``since``: as ``measure``'s."""
        if since is not None and self.last is not None and isinstance(hosts, tuple) \
                and self.hosts_of is since[0]:
            before, touched, was = since
            self.last = self.last.grown(*_moves(hosts, before, touched, sets, was))
        else:
            self.last = written(by_answers(hosts, sets), self.last)
        self.hosts_of = hosts if isinstance(hosts, tuple) else None
        return self.last.size


def _moves(hosts: tuple[str, ...], before: tuple[str, ...], touched: Iterable[str],
           sets: AnswerSets, was: AnswerSets
           ) -> tuple[dict[corefile.Answers, list[str]], dict[corefile.Answers, list[str]]]:
    """(added, removed) per answer set between ``before`` (answered by ``was``) and
    ``hosts`` (by ``sets``), of the ``touched`` hosts, the only ones that may differ."""
    added: dict[corefile.Answers, list[str]] = {}
    removed: dict[corefile.Answers, list[str]] = {}
    for host in touched:
        old = (was.of(host) or _STAND_IN) if has(before, host) else None
        new = (sets.of(host) or _STAND_IN) if has(hosts, host) else None
        if old != new:
            if old is not None:
                removed.setdefault(old, []).append(host)
            if new is not None:
                added.setdefault(new, []).append(host)
    return added, removed


def by_answers(hosts: Iterable[str], sets: AnswerSets) -> dict[corefile.Answers, list[str]]:
    """The distinct ``hosts``, sorted, per answer set (one with no address stands in for
    one that has: no rule is written for it, and the measure never shrinks when the proxy
    Service loses its address)."""
    hosts = sorted(hosts)
    routed = sets.routed
    out: dict[corefile.Answers, list[str]] = {}
    if routed:
        for host in hosts:
            out.setdefault(routed.get(host, sets.default) or _STAND_IN, []).append(host)
    elif hosts:
        out[sets.default or _STAND_IN] = hosts
    return out


@dataclass(frozen=True)
class Limit:
    measure: Measure
    limit: int
    # What the limit is, for the refusal: "--rules-budget (6000 bytes)".
    words: str
    # The rules' limit is over the bytes as written, measured by this (``measure``, their
    # plain spelling, is kept for the running sums the other limits share).
    written: WrittenMeasure | None = None


@dataclass(frozen=True)
class Fitted:
    # The hosts kept, sorted.
    hosts: tuple[str, ...]
    # (object, the hosts it asked for, the limit they would overflow), oldest first.
    refused: tuple[tuple[ObjectRef, tuple[str, ...], Limit], ...] = ()
    # Bytes of the kept hosts, per limit.
    sizes: tuple[int, ...] = ()


@dataclass(frozen=True)
class AnswerSets:
    """What each host resolves with: ``routed`` (the hosts of other targets), else
    ``default`` (the proxy's own Service)."""

    default: corefile.Answers
    routed: Mapping[str, corefile.Answers] = field(default_factory=dict)

    def of(self, host: str) -> corefile.Answers:
        return self.routed.get(host, self.default)

    def count_present(self, present: HostSet, wild: int, deep: int
                      ) -> dict[corefile.Answers, tuple[int, int, int]]:
        """``count`` of the distinct hosts ``present``, of which ``wild`` start with "*."
        and ``deep`` with "**.": Python work only for the routed hosts."""
        routed = self.routed
        mine = [h for h in routed if h in present] if len(routed) < len(present) else [
            h for h in present if h in routed]
        # Grouped by the answer set's identity first: hashing a set is Python code, and a
        # slot's thousand hosts share one object.
        same: dict[int, tuple[corefile.Answers, list[int]]] = {}
        for h in mine:
            answers = routed[h]
            got = same.get(id(answers))
            if got is None:
                got = same[id(answers)] = (answers, [0, 0, 0])
            got[1][form_index(h)] += 1
        counts: dict[corefile.Answers, list[int]] = {}
        for answers, found in same.values():
            c = counts.setdefault(answers, [0, 0, 0])
            for i in range(3):
                c[i] += found[i]
        rest = len(present) - len(mine)
        if rest:
            wild -= sum(c[1] for c in counts.values())
            deep -= sum(c[2] for c in counts.values())
            own = counts.setdefault(self.default, [0, 0, 0])
            own[0] += rest - wild - deep
            own[1] += wild
            own[2] += deep
        return {answers: (c[0], c[1], c[2]) for answers, c in counts.items()}

    def count(self, hosts: Sequence[str]) -> dict[corefile.Answers, tuple[int, int, int]]:
        """Answer set → (exact, ``*.`` and ``**.`` hosts) among the distinct ``hosts``. Python
        work only for the routed hosts: the default set is counted by C string methods."""
        routed = self.routed
        if not routed:
            mine: list[str] = []
        elif len(routed) < len(hosts):
            present = set(hosts)
            mine = [h for h in routed if h in present]
        else:
            mine = [h for h in hosts if h in routed]
        counts: dict[corefile.Answers, list[int]] = {}
        for h in mine:
            counts.setdefault(routed[h], [0, 0, 0])[form_index(h)] += 1
        rest = len(hosts) - len(mine)
        if rest:
            lines = "\n" + "\n".join(hosts)
            wild = lines.count("\n*.") - sum(c[1] for c in counts.values())
            deep = lines.count("\n**.") - sum(c[2] for c in counts.values())
            own = counts.setdefault(self.default, [0, 0, 0])
            own[0] += rest - wild - deep
            own[1] += wild
            own[2] += deep
        return {answers: (c[0], c[1], c[2]) for answers, c in counts.items()}


@dataclass
class _Tally:
    limits: Sequence[Limit]
    sets: AnswerSets
    kept: set[str] = field(default_factory=set)
    sizes: list[int] = field(default_factory=list)
    # answer set → its Shape among the kept.
    shapes: dict[corefile.Answers, Shape] = field(default_factory=dict)

    # Per limit measured as written: the regexes of the kept hosts.
    written: dict[int, Written] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.sizes = [0] * len(self.limits)
        for k, limit in enumerate(self.limits):
            if limit.written is not None:
                self.written[k] = Written()

    def exact_sizes(self) -> list[int]:
        """``sizes`` (which the steps add to: the plain spelling's), but the bytes as
        written of the limits measured so."""
        out = list(self.sizes)
        for k, value in self.written.items():
            out[k] = value.size
        return out

    def grown(self, new: Sequence[str]) -> tuple[list[int], dict[corefile.Answers, Shape]]:
        """The sizes with ``new`` (distinct hosts not kept yet) kept too, and the shapes of
        the answer sets they join."""
        counts = self.sets.count(new)
        shapes: dict[corefile.Answers, Shape] = {}
        for answers, (exact, wild, deep) in counts.items():
            was = self.shapes.get(answers, _NONE)
            shapes[answers] = (was[0] or exact > 0, was[1] or wild > 0, was[2] or deep > 0)
        sizes: list[int] = []
        for limit, before in zip(self.limits, self.sizes, strict=True):
            m = limit.measure
            size = before + m.hosts(new)
            for answers, found in counts.items():
                was = self.shapes.get(answers, _NONE)
                size += (m.frame(answers, shapes[answers]) - m.frame(answers, was)
                         + sum(found) * m.per_host(answers))
            sizes.append(size)
        return sizes, shapes

    def one_by_one(self, new: Sequence[str]
                   ) -> tuple[list[int], dict[corefile.Answers, Shape]]:
        """``grown`` for a few hosts (most objects have one or two), without the set-up that
        pays off for thousands; measured limit by limit up to the first they overflow
        (hosts that are not kept need no more: the rest of a pass's refusals cost one
        measure each, not one per limit)."""
        shapes: dict[corefile.Answers, Shape] = {}
        # Each host's answer set, and (answer set, shape before, after) where a host gives
        # its set a form it had not.
        answered: list[corefile.Answers] = []
        grew: list[tuple[corefile.Answers, Shape, Shape]] = []
        for h in new:
            answers = self.sets.of(h)
            answered.append(answers)
            form = form_index(h)
            was = shapes.get(answers) or self.shapes.get(answers, _NONE)
            if not was[form]:
                now = shapes[answers] = (was[0] or form == 0, was[1] or form == 1,
                                         was[2] or form == 2)
                grew.append((answers, was, now))
        sizes: list[int] = []
        for limit, before in zip(self.limits, self.sizes, strict=True):
            m = limit.measure
            size = before + m.hosts(new) + sum(map(m.per_host, answered))
            for answers, was, now in grew:
                size += m.frame(answers, now) - m.frame(answers, was)
            sizes.append(size)
            if size > limit.limit:
                break
        return sizes, shapes

    def add(self, hosts: Iterable[str]) -> Limit | None:
        """Keep ``hosts`` when all fit; else keep none and return the limit they overflow."""
        new = [h for h in dict.fromkeys(hosts) if h not in self.kept]
        sizes, shapes = self.grown(new) if len(new) > 32 else self.one_by_one(new)
        if len(sizes) < len(self.limits) and self.limits[len(sizes) - 1].written is not None:
            # Stopped at a limit measured as written: its plain size says nothing of that.
            sizes, shapes = self.grown(new)
        # ``one_by_one`` stops at the first limit overflowed.
        tried: dict[int, Written] = {}
        for k, (limit, plain) in enumerate(zip(self.limits[:len(sizes)], sizes, strict=True)):
            size = plain
            if limit.written is not None:
                # Not the plain spelling's size: the regexes' frames that it leaves out may
                # take the bytes as written past it where the names share nothing.
                tried[k] = self.written[k].grown(*_pending(new, self.sets))
                size = tried[k].size
            if size > limit.limit:
                return limit
        self.kept.update(new)
        self.sizes = sizes
        self.shapes.update(shapes)
        self.written.update(tried)
        return None


def _pending(hosts: Sequence[str], sets: AnswerSets
             ) -> tuple[dict[corefile.Answers, list[str]], dict[corefile.Answers, list[str]]]:
    """``Written.grown``'s arguments for distinct hosts not measured yet."""
    return by_answers(hosts, sets), {}


# (the hosts tuple the measures last measured, every host that may have come, gone or changed
# its answer since, the answer sets they were measured with).
Touched = tuple[tuple[str, ...], Sequence[str], "AnswerSets"]


def measure(hosts: Sequence[str], sets: AnswerSets, limits: Sequence[Limit], *,
            distinct: bool = False, since: Touched | None = None) -> tuple[int, ...]:
    """Bytes of ``hosts`` per limit (over it or not); ``distinct``: the caller knows that
    no host is there twice (a pass's hosts), which lets the measures' running sums be used;
    ``since``: and which hosts may differ from the last measured (sorted ``hosts``, and the
    last measured sorted too)."""
    if since is not None and distinct and isinstance(hosts, tuple):
        got = _advanced(hosts, sets, limits, since)
        if got is not None:
            return got
    if distinct:
        present = set(hosts)
        if len(present) == len(hosts):
            return _running(present, sets, limits,
                            hosts if isinstance(hosts, tuple) else None)
    return tuple(_Tally(limits, sets).grown(list(dict.fromkeys(hosts)))[0])


def _advanced(hosts: tuple[str, ...], sets: AnswerSets, limits: Sequence[Limit],
              since: Touched) -> tuple[int, ...] | None:
    """``_running`` from the hosts that may have changed alone, when every measure last
    measured ``before`` with the answer sets ``was``; None when not."""
    before, touched, was = since
    counted = limits[0].measure.counted if limits else None
    # Every measure last measured ``before`` (sorted, as ``hosts``): their sums are its.
    if counted is None or any(m.measure.hosts_of is not before for m in limits):
        return None
    added: list[str] = []
    removed: list[str] = []
    counts = dict(counted)
    for host in touched:
        at = bisect.bisect_left(hosts, host)
        now, then = at < len(hosts) and hosts[at] == host, has(before, host)
        if now != then:
            (added if now else removed).append(host)
        old, new = was.of(host) if then else None, sets.of(host) if now else None
        if old != new:
            _recount(counts, host, old, new)
    # No set of the hosts kept: the next pass that goes by the plan's change needs none.
    return _sizes(limits, [m.measure.advance(None, added, removed, hosts) for m in limits],
                  {a: c for a, c in counts.items() if any(c)})



def _recount(counts: Counts, host: str, old: corefile.Answers | None,
             new: corefile.Answers | None) -> None:
    """Move ``host`` from the answer set ``old`` to ``new`` (None: not counted)."""
    form = form_index(host)
    for answers, step in ((old, -1), (new, 1)):
        if answers is not None:
            c = list(counts.get(answers, (0, 0, 0)))
            c[form] += step
            counts[answers] = (c[0], c[1], c[2])


def _running(present: set[str], sets: AnswerSets, limits: Sequence[Limit],
             of: tuple[str, ...] | None = None) -> tuple[int, ...]:
    """``measure`` of the distinct hosts ``present`` from each measure's running sums: the
    same bytes as ``_Tally.grown``, at the cost of the hosts that changed since the last."""
    # Measures that last measured the same hosts share their differences (set work in C).
    diffs: dict[int, tuple[set[str], set[str]]] = {}
    sums: list[tuple[int, int, int]] = []
    # The set is kept for a next pass that does not go by the plan's change (as this one),
    # but not after a first measure: most passes that follow go by it.
    first = all(not m.measure.present and m.measure.hosts_of is None for m in limits)
    keep = None if first and of is not None else present
    for limit in limits:
        m = limit.measure
        mark = id(m.present if m.present is not None else m.hosts_of)
        diff = diffs.get(mark)
        if diff is None:
            last = m.last_set()
            added = present.difference(last)
            # Counted, not searched for, when nothing went (a pass that only adds).
            gone = len(last) - len(present) + len(added)
            diff = diffs[mark] = (added, set(last.difference(present)) if gone else set())
        sums.append(m.advance(keep, *diff, of))
    counts = sets.count_present(present, sums[0][1], sums[0][2]) if sums else {}
    return _sizes(limits, sums, counts)


def _sizes(limits: Sequence[Limit], sums: list[tuple[int, int, int]], counts: Counts
           ) -> tuple[int, ...]:
    """Each limit's bytes from its measure's running sums and the hosts' ``counts`` per
    answer set."""
    if limits:
        limits[0].measure.counted = counts
    sizes: list[int] = []
    for limit, (total, _, _) in zip(limits, sums, strict=True):
        m = limit.measure
        size = total
        for answers, found in counts.items():
            shape = (found[0] > 0, found[1] > 0, found[2] > 0)
            size += (m.frame(answers, shape) - m.frame(answers, _NONE)
                     + sum(found) * m.per_host(answers))
        sizes.append(size)
    return tuple(sizes)


Entry = tuple[ObjectRef, tuple[str, ...]]


@dataclass(frozen=True)
class FitPoint:
    """Where a fit stood once it had tried every object (before the hosts no object asks
    for). A later fit whose objects start with these, in the same order with the same hosts,
    under the same limits and answer sets, goes on from here: the newest objects come last,
    so a pass for a new one tries that one alone, not again every object the limit refuses
    (each try re-encodes a regex)."""

    entries: tuple[Entry, ...]
    limits: tuple[tuple[int, str, bool], ...]
    sets: AnswerSets
    kept: frozenset[str]
    sizes: tuple[int, ...]
    shapes: Mapping[corefile.Answers, Shape]
    written: Mapping[int, Written]
    # (object, its hosts, the index of the limit they would overflow).
    refused: tuple[tuple[ObjectRef, tuple[str, ...], int], ...]


def _limits_key(limits: Sequence[Limit]) -> tuple[tuple[int, str, bool], ...]:
    return tuple((limit.limit, limit.words, limit.written is not None) for limit in limits)


def _resumed(point: FitPoint | None, entries: tuple[Entry, ...], tally: _Tally,
             refused: list[tuple[ObjectRef, tuple[str, ...], Limit]]) -> int:
    """How many of ``entries`` ``point`` has tried (0: none, or it does not apply), with
    ``tally`` and ``refused`` as it left them."""
    n = len(point.entries) if point is not None else 0
    if point is None or n > len(entries) or point.limits != _limits_key(tally.limits) \
            or point.sets != tally.sets or entries[:n] != point.entries:
        return 0
    tally.kept, tally.sizes = set(point.kept), list(point.sizes)
    tally.shapes, tally.written = dict(point.shapes), dict(point.written)
    refused += [(ref, asked, tally.limits[k]) for ref, asked, k in point.refused]
    return n


def _point(entries: tuple[Entry, ...], tally: _Tally,
           refused: list[tuple[ObjectRef, tuple[str, ...], Limit]]) -> FitPoint:
    index = {id(limit): k for k, limit in enumerate(tally.limits)}
    return FitPoint(entries, _limits_key(tally.limits), tally.sets, frozenset(tally.kept),
                    tuple(tally.sizes), dict(tally.shapes), dict(tally.written),
                    tuple((ref, asked, index[id(over)]) for ref, asked, over in refused))


def fit(hosts: Sequence[str], origins: Mapping[str, Collection[ObjectRef]],
        created: Mapping[ObjectRef, str], sets: AnswerSets, limits: Sequence[Limit]
        ) -> Fitted:
    """The hosts that fit every limit: each object's hosts (``origins``: host → the objects
    that ask for it) are kept whole or not at all, oldest object first (``created``: its
    creationTimestamp); an object that does not fit is refused and the next tried, so a
    smaller, newer one may still fit. Hosts no object asks for come last and are never told
    on (there is no object to tell). Pure but for the first limit's measure's ``fitted``, a
    cache which changes no answer: the same result as from nothing."""
    by_origin: dict[ObjectRef, list[str]] = {}
    orphans: list[str] = []
    for host in hosts:
        asked = origins.get(host) or ()
        if not asked:
            orphans.append(host)
        for origin in asked:
            by_origin.setdefault(origin, []).append(host)
    tally = _Tally(limits, sets)
    refused: list[tuple[ObjectRef, tuple[str, ...], Limit]] = []
    order = sorted(by_origin, key=lambda o: origin_key(o, created.get(o, "")))
    entries = tuple((o, tuple(by_origin[o])) for o in order)
    holder = limits[0].measure if limits else None
    at = _resumed(holder.fitted if holder is not None else None, entries, tally, refused)
    step = 1
    while at < len(order):
        # Runs of objects that all fit are taken together, in growing batches (a batch fits
        # only when each of its objects would have, one after the other): the same result
        # as one by one, at a cost that grows with the refusals, not with the objects.
        batch = order[at:at + step]
        if len(batch) > 1 and tally.add(h for o in batch for h in by_origin[o]) is None:
            at += len(batch)
            step *= 2
            continue
        origin = order[at]
        over = tally.add(by_origin[origin])
        if over is not None:
            refused.append((origin, tuple(by_origin[origin]), over))
        at += 1
        step = 2 if over is None else 1
    if holder is not None:
        holder.fitted = _point(entries, tally, refused)
    for host in orphans:
        tally.add((host,))
    return Fitted(tuple(sorted(tally.kept)), tuple(refused), tuple(tally.exact_sizes()))


# --- the room a ConfigMap leaves -------------------------------------------------------------

def data_bytes(cm: JsonObj | None, keys: Collection[str] | None = None) -> int:
    """What the API server counts of a ConfigMap against its limit (each key and value), of
    ``keys`` only when given."""
    total = 0
    for what in ("data", "binaryData"):
        for k, v in ((cm or {}).get(what) or {}).items():
            if keys is None or k in keys:
                total += len(str(k)) + _utf8_len(str(v))
    return total


def _utf8_len(text: str) -> int:
    # Whether a str is ASCII is known without reading it: half a megabyte is not encoded
    # again on every pass to be measured.
    return len(text) if text.isascii() else len(text.encode())


def _room(free: int) -> int:
    return (free - SLACK) * (SLACK_SHARE - 1) // SLACK_SHARE


def configmap_room(cm: JsonObj | None, ours: Collection[str]) -> int:
    """Bytes left for the values of our keys ``ours``: everything else stays."""
    others = data_bytes(cm) - data_bytes(cm, ours)
    return _room(MAX_CONFIGMAP_BYTES - others - sum(map(len, ours)))


def corefile_room(cm: JsonObj | None, key: str) -> int:
    """Bytes left for our rules in the Corefile under ``key``: the ConfigMap less everything
    outside our managed blocks (between our marker lines), shared by the blocks (one per
    root server block, each holding every rule)."""
    text = ((cm or {}).get("data") or {}).get(key)
    if not isinstance(text, str):
        return configmap_room(cm, ())
    ours, blocks, at = 0, 0, 0
    while (begin := text.find(corefile.BEGIN_MARKER, at)) >= 0:
        end = text.find(corefile.END_MARKER, begin)
        if end < 0:
            break
        at = end + len(corefile.END_MARKER)
        ours += _utf8_len(text[begin:at])
        blocks += 1
    return _room(MAX_CONFIGMAP_BYTES - (data_bytes(cm) - ours)) // max(1, blocks)


# --- the pass's step -------------------------------------------------------------------------

def rules_limit(budget: int, room: int) -> int:
    """The bytes the rules may take: the room their ConfigMap leaves, or ``budget``
    (--rules-budget) where that is set (not 0) and lower."""
    return min(budget, room) if budget > 0 else room


def limits_of(budget: int, rules: Measure, rules_room: int, rules_where: str,
              rooms: Iterable[tuple[str, Measure, int, str]]) -> list[Limit]:
    """The rules' limit (``rules_limit``, over the rules as written where ``rules`` is the
    rules' measure), then the others' ``rooms``: (what, its measure, bytes, its ConfigMap)."""
    written = rules.written if isinstance(rules, RulesMeasure) else None
    if rules_limit(budget, rules_room) == rules_room:
        first = Limit(rules, rules_room, f"the rules past the room ConfigMap {rules_where} "
                      f"leaves under its 1 MiB ({rules_room} bytes)", written)
    else:
        first = Limit(rules, budget, f"the rules past --rules-budget ({budget} bytes)",
                      written)
    return [first, *(Limit(m, room, f"the {what} past the room ConfigMap {where} leaves "
                                    f"under its 1 MiB ({room} bytes)")
                     for what, m, room, where in rooms)]


@dataclass(frozen=True)
class Within:
    hosts: tuple[str, ...]
    rejections: tuple[Rejection, ...]
    refused: tuple[ObjectRef, ...]
    # Bytes of the kept hosts per limit, and of every host under the first (the rules).
    sizes: tuple[int, ...]
    wanted: int


def within(hosts: Sequence[str], origins: Mapping[str, Collection[ObjectRef]],
           claims: Iterable[Claim], sets: AnswerSets, limits: Sequence[Limit], *,
           since: Touched | None = None) -> Within:
    """The hosts that fit ``limits``, and a refusal per object that does not. ``hosts`` are
    distinct (a pass's); ``claims`` (read only when over a limit) date the objects;
    ``since``: as ``measure``'s. The rules are measured as written (``Limit.written``); the
    others as their text is. Pure but for the measures' caches, which change no answer."""
    sizes = measure(hosts, sets, limits, distinct=True, since=since)
    for limit in limits:
        limit.measure.keep_only(hosts)
    sizes = tuple(size if limit.written is None else limit.written.size(hosts, sets, since)
                  for size, limit in zip(sizes, limits, strict=True))
    if not any(size > limit.limit for size, limit in zip(sizes, limits, strict=True)):
        return Within(tuple(hosts), (), (), sizes, sizes[0])
    created = {c.origin: c.created for c in claims}
    fitted = fit(hosts, origins, created, sets, limits)
    return Within(fitted.hosts, tuple(
        Rejection.of(ref, "", f"its {len(asked)} host(s) would take {limit.words}; newer "
                              "objects are refused first", asked)
        for ref, asked, limit in fitted.refused),
        tuple(ref for ref, _, _ in fitted.refused), fitted.sizes, sizes[0])



def rooms_of(mode: str, rules_cm: JsonObj | None, *, rules_key: str, rules_where: str,
             published_cm: JsonObj | None = None, published_where: str | None = None,
             node_local: Sequence[tuple[JsonObj | None, str]] = ()) -> Rooms:
    """The room the ConfigMaps a pass writes leave, as the controller measures it and
    ``render`` from the file it renders: the rules' (``mode`` "coredns": the Corefile key,
    else the import key), the published hosts' (``published_where`` None: none are
    published, and they are no limit), and each node-local-dns Corefile we edit (with where
    it is)."""
    if mode == "coredns":
        rules = corefile_room(rules_cm, rules_key)
    else:
        rules = configmap_room(rules_cm, (rules_key,))
    others: list[tuple[str, str, int, str]] = [] if published_where is None else [
        ("published hosts", "published", configmap_room(published_cm, PUBLISHED_KEYS),
         published_where)]
    others += [("node-local-dns rules", "node-local", corefile_room(cm, "Corefile"), where)
               for cm, where in node_local]
    return Rooms(rules, rules_where, tuple(others))


# --- the namespaces' shares ------------------------------------------------------------------

@dataclass(frozen=True)
class Share:
    """What one namespace's objects may take of the rules (0: no limit of that kind): a
    count of hosts (--namespace-share-hosts), bytes of rules (--namespace-share-bytes)."""

    hosts: int = 0
    size: int = 0

    def __bool__(self) -> bool:
        return self.hosts > 0 or self.size > 0

    def words(self, namespace: str) -> str:
        if self.hosts and self.size:
            return (f"namespace {namespace} past its share ({self.hosts} hosts, {self.size} "
                    "bytes of rules)")
        if self.hosts:
            return f"namespace {namespace} past its share ({self.hosts} hosts)"
        return f"namespace {namespace} past its share ({self.size} bytes of rules)"


def within_shares(hosts: tuple[str, ...], origins: Mapping[str, Collection[ObjectRef]],
                  claims: Iterable[Claim], share: Share, measure: Measure
                  ) -> tuple[tuple[str, ...], tuple[Rejection, ...]]:
    """The hosts each namespace's objects may keep under ``share``, oldest object first (its
    hosts kept whole or not at all, a host counting once per namespace), and a refusal per
    object over it. A host that an object of another namespace, or none, asks for stays if
    that one keeps it. Pure but for the measure's cache."""
    created = {c.origin: c.created for c in claims}
    by_origin: dict[ObjectRef, list[str]] = {}
    for host in hosts:
        for origin in origins.get(host) or ():
            by_origin.setdefault(origin, []).append(host)
    kept: dict[str, set[str]] = {}
    sizes: dict[str, int] = {}
    refused: list[Rejection] = []
    for origin in sorted(by_origin, key=lambda o: origin_key(o, created.get(o, ""))):
        ns = origin.namespace
        mine = kept.setdefault(ns, set())
        new = [h for h in by_origin[origin] if h not in mine]
        size = sizes.get(ns, 0) + (measure.hosts(new) if share.size else 0)
        if (share.hosts and len(mine) + len(new) > share.hosts) or \
                (share.size and size > share.size):
            asked = tuple(by_origin[origin])
            refused.append(Rejection.of(
                origin, "", f"its {len(asked)} host(s) would take {share.words(ns)}; newer "
                            "objects in it are refused first", asked))
            continue
        mine.update(new)
        sizes[ns] = size
    if not refused:
        return hosts, ()
    lost = {h for r in refused for h in r.hosts}
    keep = set().union(*kept.values())
    return tuple(h for h in hosts if h not in lost or h in keep), tuple(refused)
