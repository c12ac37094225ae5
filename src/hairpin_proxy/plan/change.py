"""What changed between two passes' desired states, so that what follows the plan (the size
limits' running sums, the removal guard, the answer groups, the log's counts) costs what
changed, not every host. Pure.

A ``Since`` is a promise made by the plan: every host outside ``touched`` is among both or
neither of the last pass's hosts and this pass's, with the same answer in both. Each user
checks that it starts where the promise does (the very hosts it last saw); when not (a
foreign edit, a failed write, a drop held back) it computes everything as without one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hairpin_proxy import corefile
from hairpin_proxy.ordered import has, same


@dataclass(frozen=True, eq=False)
class Since:
    # The last pass's hosts (sorted, distinct) and what it routed them with.
    hosts: tuple[str, ...]
    answers: Mapping[str, corefile.Answers]
    default: corefile.Answers
    # The last pass's candidates (the hosts before the size limits), which the limits'
    # measures last measured.
    candidates: tuple[str, ...]
    # Every host whose membership or answer may differ (distinct).
    touched: tuple[str, ...]
    # Tuples found equal to ``hosts`` (the guard and the log ask of the same one in a pass).
    equal: list[tuple[str, ...]] = field(default_factory=list, compare=False, repr=False)

    def starts_at(self, hosts: object) -> bool:
        """Whether ``hosts`` are the last pass's (the same tuple, or equal: a compare of
        ten thousand names read back from the rules, once)."""
        if hosts is self.hosts or any(hosts is known for known in self.equal):
            return True
        if isinstance(hosts, tuple) and same(hosts, self.hosts):
            self.equal.append(hosts)
            return True
        return False

    def split(self, now: Sequence[str]) -> tuple[list[str], list[str]]:
        """(hosts in ``now`` and not in the last pass's, and the reverse); ``now`` sorted."""
        before = self.hosts
        added: list[str] = []
        removed: list[str] = []
        for host in self.touched:
            was, is_ = has(before, host), has(now, host)
            if is_ and not was:
                added.append(host)
            elif was and not is_:
                removed.append(host)
        return added, removed
