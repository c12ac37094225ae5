"""What hairpin-proxy will do, as one pure function: ``plan(Snapshot) -> DesiredState``.

The controller (watches and caches), ``render`` (files) and ``doctor`` (a listing) each build
a ``Snapshot`` of what they know and read the same ``DesiredState``: per host its target and
answer set, the slot table, every refusal with its object reference, the metrics it implies.
No I/O here: no API, files, clocks (the time is a field of the snapshot) or logs.
"""

from hairpin_proxy.plan.answers import Pending, Routed, answer_groups, route_answers
from hairpin_proxy.plan.core import DesiredState, plan
from hairpin_proxy.plan.snapshot import PlanSettings, Snapshot

__all__ = ["DesiredState", "Pending", "PlanSettings", "Routed", "Snapshot", "answer_groups",
           "plan", "route_answers"]
