"""Host names as the Corefile rules may carry them, checked as hostile input. The three forms
(plain, ``*.`` one label, ``**.`` any depth) are defined in ``hairpin_proxy.wildcards``."""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterable, Sequence

from hairpin_proxy.corefile.syntax import CorefileError

_FORBIDDEN_IN_NAME = re.compile(r"[\s{}\"'`#;\\\x00-\x1f\x7f-\x9f]")
# Exactly the hosts check_host accepts, checked in one step; a miss goes to check_host for
# the reason.
_LABEL = r"[^\s{}\"'`#;\\\x00-\x1f\x7f-\x9f.*]+"
_VALID_HOST = rf"(?:\*\*?\.)?{_LABEL}(?:\.{_LABEL})*"
# Hosts joined by "\n": thousands checked in one call (the joined text must hold no other
# "\n", so that no host can smuggle one in).
_VALID_HOSTS = re.compile(rf"{_VALID_HOST}(?:\n{_VALID_HOST})*")


MAX_HOST = 253
def check_name(value: str, what: str) -> None:
    if not isinstance(value, str) or not value:
        raise CorefileError(f"{what} must be a non-empty string, got {value!r}")
    bad = _FORBIDDEN_IN_NAME.search(value)
    if bad:
        raise CorefileError(f"{what} {value!r} contains {bad.group()!r}, which a Corefile "
                            "rule cannot carry")


def check_host(host: str) -> None:
    check_name(host, "host")
    labels = host.split(".")
    if any(label == "" for label in labels):
        raise CorefileError(f"host {host!r} has an empty label (leading, trailing or double dot)")
    if any("*" in label for label in labels[1:]) \
            or (labels[0] not in ("*", "**") and "*" in labels[0]):
        raise CorefileError(f"host {host!r}: '*' (or '**') may only be the whole first label")
    if labels[0] in ("*", "**") and len(labels) < 2:
        raise CorefileError(f"host {host!r}: a wildcard needs a domain after '*.'")
    if len(host) > MAX_HOST:
        raise CorefileError(f"host {host[:40]!r}... is longer than {MAX_HOST} characters")


def one_edit(old: Sequence[str], new: Sequence[str]) -> int | None:
    """Where ``new`` is ``old`` with one item inserted or deleted (both sorted and distinct,
    of one type): the index of that item in the longer; None when they differ otherwise.
    Costs a bisection and two comparisons of slices, whose items are mostly the very same
    objects (compared by identity, in C)."""
    if abs(len(new) - len(old)) != 1:
        return None
    longer, shorter = (new, old) if len(new) > len(old) else (old, new)
    i = bisect_left(range(len(shorter)), True, key=lambda k: longer[k] != shorter[k])
    return i if longer[:i] == shorter[:i] and longer[i + 1:] == shorter[i:] else None


def checked_hosts(hosts: Iterable[str]) -> list[str]:
    """Sorted, distinct, checked hosts; CorefileError names the first bad one."""
    if isinstance(hosts, str):
        raise TypeError("hosts must be an iterable of host names, not a single string")
    # Callers mostly pass sorted, distinct hosts: sorting a sorted list is one pass.
    return _checked_afresh(sorted(hosts))


def _checked_afresh(unique: list[str]) -> list[str]:
    if len(set(unique)) != len(unique):
        unique = sorted(set(unique))
    try:
        joined = "\n".join(unique)
    except TypeError:
        joined = ""
    if not all_valid(joined, len(unique)) or max(map(len, unique)) > MAX_HOST:
        for host in unique:
            check_host(host)
    return unique


# The ASCII characters a host may hold.
_HOST_ASCII = bytes(c for c in range(128) if not _FORBIDDEN_IN_NAME.match(chr(c)))
_NL_AS_DOT = bytes.maketrans(b"\n", b".")


def all_valid(joined: str, count: int) -> bool:
    """Whether the ``count`` hosts joined by "\n" all pass check_host, in a few passes of C
    string code (a regex walks 10,000 hosts ten times slower)."""
    if not joined:
        return False
    if joined.isascii():
        encoded = joined.encode("ascii")
        # Deleting the allowed characters leaves only the joining "\n"s if all is well.
        if encoded.translate(None, _HOST_ASCII) != b"\n" * (count - 1):
            return False
        # No empty label and no empty host: no two of "." and "\n" side by side, found in
        # one pass once every "\n" is a ".".
        adjacent = b".." in encoded.translate(_NL_AS_DOT)
    elif not _VALID_HOSTS.fullmatch(joined):
        return False
    else:
        adjacent = (".." in joined or "\n." in joined or ".\n" in joined
                    or "\n\n" in joined)
    return (not adjacent and joined.count("\n") == count - 1
            and not joined.startswith((".", "\n")) and not joined.endswith((".", "\n"))
            # A "*" (or "**") only as the whole first label: each opens a line, a dot follows.
            and joined.count("*") == joined.count("\n*.") + joined.startswith("*.")
            + 2 * (joined.count("\n**.") + joined.startswith("**.")))


# Escape ASCII punctuation only: RE2 (CoreDNS) rejects a backslash before anything else.
_REGEX_ESCAPES = {c: "\\" + chr(c) for c in range(128)
                  if not chr(c).isalnum() and chr(c) not in "-_"}


def regex_escape(s: str) -> str:
    return s.translate(_REGEX_ESCAPES)

