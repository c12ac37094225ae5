"""What each routed host answers with: its target's proxy Service ClusterIPs once the slot
has settled, what the rules answer for it now while it settles, or nothing yet. Pure."""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from hairpin_proxy import corefile
from hairpin_proxy.ordered import has
from hairpin_proxy.plan.change import Since
from hairpin_proxy.targets import table
from hairpin_proxy.targets.model import DEFAULT_KEY
from hairpin_proxy.targets.routing_plan import Plan

# (hosts, what they resolve to): one per answer set that has hosts.
Groups = tuple[tuple[tuple[str, ...], corefile.Answers], ...]


@dataclass(frozen=True)
class Pending:
    """The hosts of one target waiting for its new slot: their rules are written at
    ``rules_at`` (unix seconds), or, when ``rules_at`` is None, once the slot's Service
    exists."""

    slot: int
    hosts: int
    rules_at: float | None


@dataclass
class Routed:
    """One pass's routing: the plan, and what each routed host answers with."""

    plan: Plan
    # Hosts not on the default target → their answers (those without any are left out).
    answers: dict[str, corefile.Answers] = field(default_factory=dict)
    # Hosts the pass must leave out for now (a new slot still settling, a Service not there).
    waiting: set[str] = field(default_factory=set)
    # Target key → its hosts waiting for a new slot (those keeping an older answer meanwhile
    # included).
    pending: dict[str, Pending] = field(default_factory=dict)
    # Seconds until the earliest settling slot is due (None: none is settling).
    wake_in: float | None = None
    # Target key → its answer set, when every target's slot has settled (None: some has
    # not). Two passes with the same answer each host of an unchanged route the same.
    settled: dict[str, corefile.Answers] | None = field(default=None, compare=False)

    @property
    def pending_hosts(self) -> int:
        return sum(p.hosts for p in self.pending.values())


def route_answers(p: Plan, *, slot_addresses: Mapping[int, Sequence[str]],
                  published: Mapping[str, float], settle: float, now: float, dns_ttl: int,
                  held_answers: Callable[[], Mapping[str, corefile.Answers]],
                  slotted: Mapping[str, str] | None = None,
                  last: tuple[Routed, Collection[str]] | None = None) -> Routed:
    """``slot_addresses``: slot → its ``hairpin-proxy-t<slot>`` Service's ClusterIPs (none
    when the Service is not there); ``published``: when each key entered the published
    table; ``held_answers`` (asked only when a slot is settling): what the rules answer now;
    ``slotted``: the routes not to the default target, where the caller keeps them apart;
    ``last``: the last pass's routing, and every host whose route may have changed since
    (a cache only: the answer is the same without)."""
    routed = Routed(p)
    held: Mapping[str, corefile.Answers] | None = None
    waits: dict[str, list[str]] = {}
    routes = p.routes if slotted is None else slotted
    # Per target, not per host (a slot's thousands of hosts share one answer): seconds
    # until it settles, and its answer set once settled (None: it has none yet).
    keys = {key: _settled(key, p, slot_addresses, published=published, settle=settle,
                          now=now, dns_ttl=dns_ttl)
            for key in dict.fromkeys(routes.values()) if key != DEFAULT_KEY}
    settled = {key: answers for key, (_, answers) in keys.items() if answers is not None}
    if len(settled) == len(keys):
        routed.settled = settled
        if last is not None and _same_answers(last, settled, routes):
            # The thousands of a slot's hosts answer as they did: the very same map.
            routed.answers = last[0].answers
            return routed
        # No host waits (the steady state): each host gets its target's set, in C where
        # there is one target.
        if len(settled) == 1 and DEFAULT_KEY not in routes.values():
            routed.answers = dict.fromkeys(routes, *settled.values())
        elif settled:
            routed.answers = {h: settled[k] for h, k in routes.items() if k != DEFAULT_KEY}
        return routed
    for host, key in routes.items():
        if key == DEFAULT_KEY:
            continue
        left, answers = keys[key]
        if answers is not None:
            routed.answers[host] = answers
            continue
        waits.setdefault(key, []).append(host)
        if left > 0:
            due = left + 0.05
            routed.wake_in = due if routed.wake_in is None else min(routed.wake_in, due)
        if held is None:
            held = held_answers()
        before = held.get(host)
        if before:
            # Still settling: the host keeps what it resolves to now.
            routed.answers[host] = before
        else:
            routed.waiting.add(host)
    for key, hosts in waits.items():
        at = table.settles_at(published, key, settle, now)
        routed.pending[key] = Pending(p.slots[key], len(hosts), at if at > now else None)
    return routed


def _same_answers(last: tuple[Routed, Collection[str]], settled: Mapping[str, corefile.Answers],
                  routes: Mapping[str, str]) -> bool:
    """Whether every routed host answers as in the ``last`` pass: every target's answer set
    is the same, and no host whose route may have changed is routed to another target than
    the default, now or then."""
    before, changed = last
    return before.settled == settled and not any(
        h in routes or h in before.answers for h in changed)


def _settled(key: str, p: Plan, slot_addresses: Mapping[int, Sequence[str]], *,
             published: Mapping[str, float], settle: float, now: float, dns_ttl: int
             ) -> tuple[float, corefile.Answers | None]:
    """(seconds until ``key``'s slot settles, its answer set when it has settled and has
    addresses CoreDNS can answer with, else None)."""
    addresses = slot_addresses.get(p.slots[key], ())
    left = table.settles_at(published, key, settle, now) - now
    if left <= 0 and addresses:
        try:
            return left, corefile.Answers.of(addresses, dns_ttl)
        except corefile.CorefileError:
            pass  # not an address CoreDNS could answer with: the hosts wait
    return left, None


def answer_groups(hosts: Sequence[str], default: corefile.Answers,
                  routed: Mapping[str, corefile.Answers]) -> Groups:
    """The hosts by what they resolve to; hosts whose answer is empty get no rule (a name is
    never sent nowhere)."""
    if not routed:
        return ((tuple(hosts), default),) if hosts and default else ()
    # Most hosts are the default target's: they are sorted out in C.
    on_default = list(itertools.filterfalse(routed.__contains__, hosts))
    # Grouped by the answer set's identity first: hashing one is Python code, and a slot's
    # thousand hosts share one object.
    same: dict[int, tuple[corefile.Answers, list[str]]] = {}
    for host in filter(routed.__contains__, hosts) if len(on_default) < len(hosts) else ():
        answers = routed[host]
        got = same.get(id(answers))
        if got is None:
            got = same[id(answers)] = (answers, [])
        got[1].append(host)
    by_answers = {answers: group for answers, group in same.values()}
    if len(by_answers) < len(same):
        # Equal sets in several objects: their hosts are merged in the hosts' order.
        by_answers = {}
        for host in filter(routed.__contains__, hosts):
            by_answers.setdefault(routed[host], []).append(host)
    out = [(tuple(on_default), default)] if on_default and default else []
    out += [(tuple(group), answers) for answers, group in by_answers.items() if answers]
    return tuple(out)


class Regrouper:
    """``answer_groups`` of each pass, updated from the last pass's groups by the hosts a
    ``Since`` names: equal to ``answer_groups`` of the same arguments, always. One caller.

    A group no host moved in or out of is the very tuple of the last pass, and one that
    gained or lost a single host says so (``corefile.Stepped``): the rules' edit then need
    not compare tens of thousands of names to find what changed."""

    def __init__(self) -> None:
        self._hosts: tuple[str, ...] | None = None
        self._routed: Mapping[str, corefile.Answers] = {}
        self._default = corefile.Answers()
        # The default target's hosts (under None), and the others' by answer set (sorted
        # lists), and each group's tuple as last given out.
        self._lists: dict[corefile.Answers | None, list[str]] = {}
        self._given: dict[corefile.Answers | None, tuple[str, ...]] = {}

    def groups(self, hosts: tuple[str, ...], default: corefile.Answers,
               routed: Mapping[str, corefile.Answers], since: Since | None) -> Groups:
        moved = None
        if (since is not None and self._hosts is not None and since.starts_at(self._hosts)
                and self._routed is since.answers and default and default == self._default
                and default == since.default):
            moved = self._update(hosts, routed, since)
        if moved is None:
            return self._whole(hosts, default, routed)
        self._hosts, self._routed = hosts, routed
        steps: list[tuple[tuple[str, ...], tuple[str, ...], int]] = []
        for key, moves in moved.items():
            old = self._given.pop(key, None)
            if key not in self._lists:
                continue
            new = self._given[key] = tuple(self._lists[key])
            if old is not None and len(moves) == 1:
                steps.append((old, new, moves[0]))
        own = self._lists.get(None)
        out = [(self._given[None], default)] if own else []
        out += [(self._given[answers], answers)
                for _, answers in sorted((group[0], answers) for answers, group
                                         in self._lists.items() if answers is not None)]
        return corefile.Stepped.of(out, steps)

    def _update(self, hosts: Sequence[str], routed: Mapping[str, corefile.Answers],
                since: Since) -> dict[corefile.Answers | None, list[int]] | None:
        """Move the hosts ``since`` names: for each group moved in or out of, where (the
        index in the longer list); None (nothing moved) when one has no answer."""
        moves = [(host, has(since.hosts, host), has(hosts, host)) for host in since.touched]
        if any(now and not routed.get(host, True) for host, _, now in moves):
            return None
        moved: dict[corefile.Answers | None, list[int]] = {}
        for host, was, now in moves:
            old, new = self._routed.get(host) if was else ..., routed.get(host) if now else ...
            if old == new:
                continue  # in the same group as before (or in none, both times)
            if old is not ...:
                group = self._lists[old]
                at = bisect.bisect_left(group, host)
                del group[at]
                moved.setdefault(old, []).append(at)
                if not group:
                    del self._lists[old]
            if new is not ...:
                group = self._lists.setdefault(new, [])
                at = bisect.bisect_left(group, host)
                group.insert(at, host)
                moved.setdefault(new, []).append(at)
        return moved

    def _whole(self, hosts: tuple[str, ...], default: corefile.Answers,
               routed: Mapping[str, corefile.Answers]) -> Groups:
        out = answer_groups(hosts, default, routed)
        self._hosts, self._lists, self._given = None, {}, {}
        if default and all(routed.values()) and all(map(operator.lt, hosts, hosts[1:])):
            for group, answers in out:
                key = None if group[0] not in routed else answers
                self._lists[key], self._given[key] = list(group), group
            self._hosts, self._routed, self._default = hosts, routed, default
        return out
