"""The rules budget (--rules-budget): the managed hosts may take at most so many bytes of
rules, so that the Corefile stays within what a ConfigMap and CoreDNS's reload can carry."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence

from hairpin_proxy import corefile
from hairpin_proxy.claims import Claim, ObjectRef
from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.policy import PolicyResult, Rejection

log = logging.getLogger("hairpin_proxy.controller")


class RulesBudget:
    def __init__(self, budget: int, metrics: ControllerMetrics) -> None:
        self.budget = budget
        self.metrics = metrics
        self._refused = 0
        # Host → its share of corefile.rules_bytes: the hosts change by a few from one pass to
        # the next, and escaping and measuring all of them every pass is most of the cost.
        self._shares = _Shares()

    def size(self, hosts: Sequence[str]) -> int:
        """corefile.rules_bytes(hosts), from the shares of hosts already seen."""
        shares = self._shares
        if len(shares) < len(hosts) // 2:
            # Mostly new hosts (the first pass): measured together, which is much cheaper
            # than one by one.
            new = [h for h in dict.fromkeys(hosts) if h not in shares]
            shares.update(zip(new, corefile.host_rules_bytes(new), strict=True))
        size = sum(map(shares.__getitem__, hosts))
        if len(shares) > 2 * len(hosts) + 1024:
            # Hosts that went away: forget them, but not so often that it costs.
            self._shares = _Shares({h: shares[h] for h in hosts})
        return size

    def apply(self, result: PolicyResult, claims: Iterable[Claim]
              ) -> PolicyResult:
        """``result`` with the origins refused whose hosts would overflow the budget: the
        oldest keep their hosts, so one new object can never stop the rules of every other
        from being written. ``claims`` (read only when over budget) date the origins."""
        budget = self.budget
        size = self.size(result.hosts)
        if size <= budget:
            self.metrics.rules_bytes.set(size)
            self.metrics.over_budget.set(0)
            self._refused = 0
            return result
        by_origin: dict[ObjectRef, list[str]] = {}
        created: dict[ObjectRef, str] = {}
        for claim in claims:
            by_origin.setdefault(claim.origin, []).append(claim.host)
            created[claim.origin] = claim.created

        def age(origin: ObjectRef) -> tuple[str, str]:
            # Unknown ages sort last: "~" comes after every digit.
            return created[origin] or "~", f"{origin.namespace}/{origin.name}"

        kept: set[str] = set()
        total = 0
        refused: list[Rejection] = []
        for origin in sorted(by_origin, key=age):
            new = [h for h in by_origin[origin] if h not in kept]
            cost = corefile.rules_bytes(new)
            if total + cost > budget:
                refused.append(Rejection(origin.namespace, origin.name, "", (
                    f"its {len(by_origin[origin])} host(s) would take the rules past "
                    f"--rules-budget ({budget} bytes); newer objects are refused first")))
                continue
            kept.update(new)
            total += cost
        self.metrics.rules_bytes.set(total)
        self.metrics.over_budget.set(len(refused))
        if len(refused) != self._refused:
            log.warning("rules budget exceeded; the newest Ingresses are refused",
                        extra={"budget": budget, "wanted": size, "refused": len(refused)})
        self._refused = len(refused)
        return dataclasses.replace(result, hosts=tuple(sorted(kept)),
                                   rejections=(*result.rejections, *refused))


class _Shares(dict[str, int]):
    """Host → its share of corefile.rules_bytes, measured when first asked for."""

    def __missing__(self, host: str) -> int:
        share = self[host] = corefile.host_rules_bytes((host,))[0]
        return share
