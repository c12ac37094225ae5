"""Gateway API hostnames: validity, matching and the intersection of a listener's with a route's.

The rules, as the Gateway API defines them:

- A hostname is *precise* (``www.example.com``) or a *wildcard*: ``*.`` followed by a precise
  name. The wildcard label stands alone and only leftmost; IP addresses are never hostnames.
- A wildcard matches ONE OR MORE labels: ``*.example.com`` matches ``www.example.com`` and
  ``a.b.example.com``, never ``example.com`` itself. (Ordinary DNS wildcards and certificate
  wildcards match exactly one label; the difference matters to whoever turns these names into
  DNS rules.)
- A listener without a hostname, and a route without hostnames, accept any name. The
  specification writes that as the special value ``*`` (:data:`ANY`), which is not valid in
  either field itself.
- Intersection of two hostnames: two precise names must be equal; a wildcard and a precise name
  give the precise name if the wildcard matches it; two wildcards give the more specific one
  when one covers the other; ``*`` gives the other side. Otherwise there is no intersection.
  The result is always exactly the set of request names both sides accept.
- Route hostnames that intersect no listener hostname are ignored for that listener; if none
  intersects, the route does not attach to it.

Names are compared case-insensitively: the API server only admits lower case, but the controller
must never treat ``WWW.example.com`` and ``www.example.com`` as two different names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

# The "matches everything" value: what an absent listener hostname or empty route hostnames mean.
ANY: Final = "*"
MAX_NAME: Final = 253
# The API's own validation pattern (lower case only; we lower-case first).
_HOSTNAME = re.compile(
    r"(?:\*\.)?[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*",
    re.ASCII)
# The pattern admits dotted quads; the specification says IP addresses are never hostnames.
_IPV4 = re.compile(r"[0-9]+(?:\.[0-9]+){3}", re.ASCII)
_MAX_LABEL: Final = 63
_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def normalize(value: str) -> str:
    """``value`` as compared: lower case. Only ASCII is folded so that no non-ASCII character
    ever turns into a valid one."""
    # On ASCII text ``lower`` folds exactly A-Z, and is many times faster than ``translate``
    # (every route's hostnames are compared with every listener's on a first pass).
    return value.lower() if value.isascii() else value.translate(_LOWER)


def problem(value: object) -> str | None:
    """Why ``value`` is not a Gateway API hostname (after :func:`normalize`), or None if it is.

    :data:`ANY` is not a hostname either: it only stands for an absent one.
    """
    if not isinstance(value, str):
        return f"is not a string but {type(value).__name__}"
    name = normalize(value)
    if not name:
        return "is empty"
    if len(name) > MAX_NAME:
        return f"is longer than {MAX_NAME} characters"
    if _HOSTNAME.fullmatch(name) is None:
        return ("is not a hostname (lower-case letters, digits and '-' in dot-separated labels, "
                "optionally after a leading '*.')")
    if any(len(label) > _MAX_LABEL for label in name.split(".")):
        return f"has a label longer than {_MAX_LABEL} characters"
    if _IPV4.fullmatch(name) is not None:
        return "is an IP address, which is never a hostname"
    return None


def is_valid(value: object) -> bool:
    return problem(value) is None


def is_wildcard(name: str) -> bool:
    return name.startswith("*.")


def matches(pattern: str, host: str) -> bool:
    """Whether the hostname ``pattern`` (precise, wildcard or :data:`ANY`) accepts the precise
    request name ``host``. A wildcard takes one or more labels, so it is a suffix match on a
    label boundary."""
    pattern, host = normalize(pattern), normalize(host)
    if pattern == ANY:
        return True
    if is_wildcard(pattern):
        return host.endswith(pattern[1:]) and len(host) > len(pattern) - 1
    return pattern == host


def covers(outer: str, inner: str) -> bool:
    """Whether every name ``inner`` accepts is also accepted by ``outer``."""
    outer, inner = normalize(outer), normalize(inner)
    if outer in (ANY, inner):
        return True
    if inner == ANY or not is_wildcard(outer):
        return False
    # A wildcard covers a precise name it matches, and a wildcard whose base lies under its own
    # base: *.com covers *.example.com because every name under example.com is under com.
    return matches(outer, inner[2:] if is_wildcard(inner) else inner)


def intersect(a: str, b: str) -> str | None:
    """The hostname accepting exactly the names both ``a`` and ``b`` accept, or None when no
    name is accepted by both. Symmetric; :data:`ANY` is the identity.

    The sets of names two hostnames accept are either nested or disjoint (a wildcard's set is a
    DNS subtree, a precise name is a single point), so the intersection, when there is one, is
    always the more specific of the two.
    """
    a, b = normalize(a), normalize(b)
    if covers(a, b):
        return b
    if covers(b, a):
        return a
    return None


def intersect_all(listener: str | None, route: Iterable[str]) -> tuple[str, ...]:
    """The intersected hostnames of a listener (its ``hostname``, None when absent) and a route
    (its ``hostnames``, possibly empty), in the route's order without repeats.

    Empty means the route does not attach to that listener. ``(ANY,)`` means neither side names
    a host: every name is accepted and no specific one can be derived.
    """
    side = ANY if listener is None else normalize(listener)
    wanted = tuple(route) or (ANY,)
    out: dict[str, None] = {}
    for name in wanted:
        both = intersect(side, name)
        if both is not None:
            out.setdefault(both)
    return tuple(out)


def specificity(name: str) -> tuple[bool, int]:
    """A sort key: larger means more specific. Precise names beat wildcards, then more labels
    that are not the wildcard beat fewer (``www.example.com`` > ``*.example.com`` > ``*.com``
    > ``*``)."""
    name = normalize(name)
    if name == ANY:
        return (False, 0)
    labels = name.split(".")
    return (not is_wildcard(name), len(labels) - (1 if is_wildcard(name) else 0))
