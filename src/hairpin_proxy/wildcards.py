"""Host names as the controller keeps them: three forms, and the one place that tells them
apart. Pure, and imports nothing (doctor's pure modules read it).

- a plain name, ``shop.example.com``;
- ``*.example.com``: exactly ONE label not starting with ``_`` in front of the domain, as an
  Ingress wildcard (and a DNS or certificate wildcard) means;
- ``**.example.com``: ONE OR MORE such labels, as a Gateway API wildcard means (a Gateway
  serves ``a.b.example.com`` under its ``*.example.com``). The Gateway API source writes its
  wildcards so (``any_depth``); nobody else can, as no Ingress or route may hold a ``**``
  label, and people are shown the ``*.`` spelling they wrote (``written``).
"""

from __future__ import annotations

ONE_LABEL = "*."
ANY_DEPTH = "**."


def wildcard_base(host: str) -> str | None:
    """The domain under a wildcard host of either form; None for a plain name."""
    if host.startswith(ONE_LABEL):
        return host[2:]
    if host.startswith(ANY_DEPTH):
        return host[3:]
    return None


def any_depth(host: str) -> str:
    """``host`` as a Gateway API name: its ``*.`` wildcard covering any depth."""
    return "*" + host if host.startswith(ONE_LABEL) else host


def written(host: str) -> str:
    """``host`` as its object spells it (both wildcard forms are ``*.`` there)."""
    return host[1:] if host.startswith(ANY_DEPTH) else host


def covers(rule: str, name: str) -> bool:
    """Whether the DNS rule for the host ``rule`` answers a query for ``name`` (no trailing
    dot), as the regexes of ``rules`` match: case-insensitive, and no label a wildcard stands
    for starts with ``_``."""
    rule, name = rule.lower(), name.lower().rstrip(".")
    base = wildcard_base(rule)
    if base is None:
        return rule == name
    if not name.endswith("." + base):
        return False
    labels = name[:-len(base) - 1].split(".")
    return (len(labels) == 1 or rule.startswith(ANY_DEPTH)) \
        and all(label and not label.startswith("_") for label in labels)
