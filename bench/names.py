"""Realistic host names for the benchmarks: what a cluster with many tenants serves.

The names share about ten domains (a shop, a SaaS's customer zone, preview environments, an
internal zone, ...), as a real cluster's do, rather than one ``appN.example.com`` pattern:

- a third are numbered tenants, ``customer-48213.customers.saas-platform.com``;
- a third are preview environments, ``pr-1234-k3j9x2.preview.dev.example.net``;
- the rest are words, ``billing-api42.apps.acme-corp.io``;
- about one in fifty is a wildcard (``*.`` before one of the above).

Every name is 20 to 45 characters long (the ``*.`` included), unique, lower case, and a valid
DNS name. The same seed gives the same names in the same order.

    >>> hosts(3, seed=7) == hosts(3, seed=7)
    True
"""

from __future__ import annotations

import random
import string

DOMAINS = (
    "shop.example.com",
    "apps.acme-corp.io",
    "preview.dev.example.net",
    "customers.saas-platform.com",
    "eu-west.internal.example.org",
    "k8s.bigcorp.co.uk",
    "stage.example.com",
    "api.fintech.example",
    "media.news-site.com",
    "tenants.hosting.cloud",
)
WORDS = ("api", "web", "admin", "portal", "auth", "status", "grafana", "metrics", "billing",
         "docs", "app", "login", "cdn", "search", "mail")
SHORTEST, LONGEST = 20, 45
WILDCARD_SHARE = 0.02
_SUFFIX_CHARS = string.ascii_lowercase + string.digits


def _first_label(rnd: random.Random) -> str:
    """The name's own label: a tenant, a preview environment or words, a third each."""
    kind = rnd.random()
    if kind < 1 / 3:
        return f"customer-{rnd.randrange(1, 10**6)}"
    if kind < 2 / 3:
        return f"pr-{rnd.randrange(1, 20_000)}-{''.join(rnd.choices(_SUFFIX_CHARS, k=6))}"
    return f"{rnd.choice(WORDS)}-{rnd.choice(WORDS)}{rnd.randrange(100)}"


def hosts(count: int, seed: int = 1) -> list[str]:
    """``count`` distinct host names, in the order they were drawn (deterministic)."""
    if count < 0:
        raise ValueError("count must not be negative")
    rnd = random.Random(seed)
    seen: set[str] = set()
    out: list[str] = []
    # Most draws are kept (a name out of bounds or drawn twice is not): the bound is loose.
    for _ in range(20 * count + 100):
        if len(out) == count:
            break
        name = f"{_first_label(rnd)}.{rnd.choice(DOMAINS)}"
        if rnd.random() < WILDCARD_SHARE:
            name = "*." + name
        if SHORTEST <= len(name) <= LONGEST and name not in seen:
            seen.add(name)
            out.append(name)
    if len(out) < count:
        raise ValueError(f"only {len(out)} distinct names drawn of {count} asked")
    return out
