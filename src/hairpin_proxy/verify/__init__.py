"""Host verification: redirect a host only when its public DNS points at this cluster.

``lb`` (pure) gathers this cluster's load balancer addresses from Services and Ingresses,
``verdict`` (pure) decides per host from a lookup's answers, ``resolver`` does the lookups
(configured servers or the system resolver) and ``checker`` keeps the verdicts of a changing
set of hosts fresh in the background.
"""

from hairpin_proxy.verify.checker import CheckerStats, HostChecker
from hairpin_proxy.verify.lb import LbAddress, LbIndex, LbName, LbSource, lb_addresses
from hairpin_proxy.verify.resolver import Resolver, make_resolver, parse_servers
from hairpin_proxy.verify.verdict import (
    NO_PUBLIC_DNS,
    PROBE_LABEL,
    Answers,
    Code,
    ResolveError,
    Verdict,
    decide,
    nothing_resolves,
    pending,
    probe_name,
    should_redirect,
)

__all__ = [
    "NO_PUBLIC_DNS",
    "PROBE_LABEL",
    "Answers",
    "CheckerStats",
    "Code",
    "HostChecker",
    "LbAddress",
    "LbIndex",
    "LbName",
    "LbSource",
    "ResolveError",
    "Resolver",
    "Verdict",
    "decide",
    "lb_addresses",
    "make_resolver",
    "nothing_resolves",
    "parse_servers",
    "pending",
    "probe_name",
    "should_redirect",
]
