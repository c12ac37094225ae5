"""Where the controller's host list goes, in the order a pass writes them: the DNS rules (the
CoreDNS Corefile itself, or the key of the ConfigMap it imports), node-local-dns's Corefile,
the published hosts for the etchosts agents.

Each module holds one destination: the edit of its ConfigMap (a pure function of the current
object: ``CorednsEdit``, ``ImportEdit``, ``NodeLocalEdit``, ``PublishedEdit``, also read by
``doctor`` and ``cleanup``) and the pass's step that writes it (a ``Writer``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from hairpin_proxy import corefile
from hairpin_proxy.edits.coredns import Groups
from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.plan.answers import answer_groups
from hairpin_proxy.plan.change import Since
from hairpin_proxy.targets.routing_plan import Plan


@dataclass(frozen=True)
class Held:
    """What the DNS rules hold as the pass starts."""

    # The ConfigMap the rules live in, as the pass read it (every edit starts from it).
    cm: JsonObj | None
    hosts: tuple[str, ...]


@dataclass(frozen=True)
class Desired:
    """What one pass writes everywhere."""

    # The managed hosts, after verification, the removal guard and withdrawal.
    hosts: tuple[str, ...]
    # What hosts of the default target resolve to (none: every rule is withdrawn).
    answers: corefile.Answers
    held: Held
    # Hosts of other targets → what they resolve to (their target's proxy Service).
    routed: Mapping[str, corefile.Answers] = field(default_factory=dict)
    # Which target each host goes to, and the slots (None while uninstalling).
    plan: Plan | None = None
    # How ``hosts`` differ from the last plan's (plan/change.py).
    since: Since | None = None
    # The hosts by answer set where the plan grouped these very hosts (``DesiredState.groups``);
    # None: grouped here from every host.
    grouped: Groups | None = None

    @functools.cached_property
    def _groups(self) -> Groups:
        if self.grouped is not None:
            return self.grouped
        return answer_groups(self.hosts, self.answers, self.routed)

    def counts(self) -> tuple[int, int]:
        """(hosts added, hosts removed) against what the rules held as the pass started."""
        since, before = self.since, self.held.hosts
        if since is not None and since.starts_at(before):
            added, removed = since.split(self.hosts)
            return len(added), len(removed)
        had = set(before)
        kept = len(had.intersection(self.hosts))
        return len(self.hosts) - kept, len(had) - kept

    def groups(self) -> Groups:
        """The hosts by what they resolve to (plan.answer_groups; made once a pass, read
        by the rules and the published hosts)."""
        return self._groups

    def entries(self) -> dict[str, tuple[str, ...]]:
        """Every host that has a rule → the addresses it resolves to."""
        out: dict[str, tuple[str, ...]] = {}
        for hosts, answers in self.groups():
            # One tuple per answer set, shared by its hosts.
            out.update(dict.fromkeys(hosts, (*answers.ipv4, *answers.ipv6)))
        return out


class Writer(Protocol):
    @property
    def during_uninstall(self) -> bool:
        """Whether it is still written while we are being uninstalled (our namespace, and
        what lives there, is going away: nothing can be created there any more)."""
        ...

    async def write(self, desired: Desired) -> None:
        """Bring the destination in step. Every write goes through the write tracker, which
        raises ``NotLeading`` once the Lease is lost; ApiError, EditError and CorefileError
        end the pass (unless the writer handles them as its own problem)."""
        ...


class RulesWriter(Writer, Protocol):
    """The first writer of a pass: the DNS rules, whose current hosts the pass starts from."""

    @property
    def where(self) -> str: ...

    def held_answers(self, corefile_cm: JsonObj | None) -> Mapping[str, corefile.Answers]:
        """Host → what the rules answer for it now."""
        ...

    async def read(self, corefile_cm: JsonObj | None) -> Held:
        """What the rules hold now; ``corefile_cm`` is the CoreDNS ConfigMap as the pass
        read it at its start."""
        ...
