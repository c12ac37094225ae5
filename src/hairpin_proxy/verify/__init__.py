"""Host verification: redirect a host only when its public DNS points at this cluster.

``lb`` (pure) gathers this cluster's load balancer addresses from Services and Ingresses,
``verdict`` (pure) decides per host from a lookup's answers, ``resolver`` does the lookups
(configured servers or the system resolver) and ``checker`` keeps the verdicts of a changing
set of hosts fresh in the background.

The names below load their module on first use, so that the plan, which reads verdicts only,
does not load the lookups' sockets and event loop with this package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hairpin_proxy.verify.checker import CheckerStats as CheckerStats
    from hairpin_proxy.verify.checker import HostChecker as HostChecker
    from hairpin_proxy.verify.lb import LbAddress as LbAddress
    from hairpin_proxy.verify.lb import LbIndex as LbIndex
    from hairpin_proxy.verify.lb import LbName as LbName
    from hairpin_proxy.verify.lb import LbSource as LbSource
    from hairpin_proxy.verify.lb import lb_addresses as lb_addresses
    from hairpin_proxy.verify.resolver import Resolver as Resolver
    from hairpin_proxy.verify.resolver import make_resolver as make_resolver
    from hairpin_proxy.verify.resolver import parse_servers as parse_servers
    from hairpin_proxy.verify.verdict import NO_PUBLIC_DNS as NO_PUBLIC_DNS
    from hairpin_proxy.verify.verdict import PROBE_LABEL as PROBE_LABEL
    from hairpin_proxy.verify.verdict import Answers as Answers
    from hairpin_proxy.verify.verdict import Code as Code
    from hairpin_proxy.verify.verdict import ResolveError as ResolveError
    from hairpin_proxy.verify.verdict import Verdict as Verdict
    from hairpin_proxy.verify.verdict import decide as decide
    from hairpin_proxy.verify.verdict import nothing_resolves as nothing_resolves
    from hairpin_proxy.verify.verdict import pending as pending
    from hairpin_proxy.verify.verdict import probe_name as probe_name
    from hairpin_proxy.verify.verdict import should_redirect as should_redirect

_HOMES = {
    "CheckerStats": "checker",
    "HostChecker": "checker",
    "LbAddress": "lb",
    "LbIndex": "lb",
    "LbName": "lb",
    "LbSource": "lb",
    "lb_addresses": "lb",
    "Resolver": "resolver",
    "make_resolver": "resolver",
    "parse_servers": "resolver",
    "NO_PUBLIC_DNS": "verdict",
    "PROBE_LABEL": "verdict",
    "Answers": "verdict",
    "Code": "verdict",
    "ResolveError": "verdict",
    "Verdict": "verdict",
    "decide": "verdict",
    "nothing_resolves": "verdict",
    "pending": "verdict",
    "probe_name": "verdict",
    "should_redirect": "verdict",
}

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


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
