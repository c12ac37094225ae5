"""Hosts-file editing: one managed block mapping the hosts to their proxy addresses. Pure.

The block sits between the same markers as the Corefile's; every other line is kept byte for
byte, except the lines the original hairpin-proxy added (ending ``# Added by hairpin-proxy``),
which are removed. Wildcards, single-label names and names a hosts file cannot hold are
skipped and reported. ``apply`` maps every host to the same addresses; ``apply_entries``
gives each host its own (hosts of different targets go to different proxy Services).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hairpin_proxy.corefile import BEGIN_MARKER, END_MARKER, LEGACY_MARKER

# Some resolvers cap the line length or the number of aliases per line (glibc once had 35,
# other stub resolvers fewer), so long host lists are spread over several lines.
MAX_LINE = 200
MAX_NAMES = 8

_NAME = re.compile(r"(?=.{1,253}\Z)[a-z0-9](?:[a-z0-9-]*[a-z0-9])?"
                   r"(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*", re.ASCII)
_LABEL_MAX = 63


class HostsFileError(ValueError):
    """The file's markers are duplicated or unbalanced, or an address is invalid."""


@dataclass(frozen=True)
class HostsUpdate:
    text: str
    # Hosts left out: wildcards, single labels, names that are not plain DNS names, and (from
    # apply_entries) names given different addresses by two entries.
    skipped: tuple[str, ...]


@dataclass(frozen=True)
class _Layout:
    lines: list[str]          # every line with its own ending ("\n", "\r\n" or none at EOF)
    block: tuple[int, int] | None  # [begin, end] line indexes of our block, inclusive
    legacy: list[int]         # lines the original tool added, outside our block


def _split(text: str) -> list[str]:
    # Only "\n" ends a line here: str.splitlines() would also split on \v, \f, \x1c or
    # U+2028, and foreign lines must come back exactly as they were.
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _layout(text: str) -> _Layout:
    lines = _split(text)
    begin: int | None = None
    block: tuple[int, int] | None = None
    legacy: list[int] = []
    for i, line in enumerate(lines):
        content = line.rstrip("\r\n").strip()
        if content == BEGIN_MARKER:
            if begin is not None:
                raise HostsFileError(f"line {i + 1}: BEGIN marker inside the block opened on "
                                     f"line {begin + 1}")
            if block is not None:
                raise HostsFileError(f"line {i + 1}: a second hairpin-proxy block (the first "
                                     f"is on lines {block[0] + 1}-{block[1] + 1})")
            begin = i
        elif content == END_MARKER:
            if begin is None:
                raise HostsFileError(f"line {i + 1}: END marker without a BEGIN marker")
            block, begin = (begin, i), None
        elif content.startswith("#") and ("BEGIN hairpin-proxy" in content
                                          or "END hairpin-proxy" in content):
            raise HostsFileError(f"line {i + 1}: damaged hairpin-proxy marker; expected exactly "
                                 f"{BEGIN_MARKER!r} or {END_MARKER!r}")
        elif begin is None and content.endswith(LEGACY_MARKER):
            legacy.append(i)
    if begin is not None:
        raise HostsFileError(f"line {begin + 1}: BEGIN marker without an END marker")
    return _Layout(lines, block, legacy)


def _addresses(addresses: Sequence[str]) -> list[str]:
    if isinstance(addresses, str):
        raise TypeError("addresses must be a sequence of addresses, not a single string")
    out: list[str] = []
    for raw in addresses:
        try:
            if not isinstance(raw, str) or "%" in raw:
                # A zone index ("fe80::1%eth0") is no address for a Service.
                raise ValueError
            addr = str(ipaddress.ip_address(raw.strip()))
        except ValueError:
            raise HostsFileError(f"invalid address {raw!r}: expected an IPv4 or IPv6 "
                                 "address") from None
        if addr not in out:
            out.append(addr)
    return out


def _name(host: object) -> str | None:
    """The name as the block writes it, or None when a hosts file must not hold it."""
    if not isinstance(host, str) or not host.isascii():
        return None
    name = host.lower().removesuffix(".")
    # A single-label name (localhost, a bare node name) would shadow the node's own names;
    # the host policy never yields one, so one arriving here is refused, not written.
    if (_NAME.fullmatch(name) and "." in name
            and all(len(label) <= _LABEL_MAX for label in name.split("."))):
        return name
    return None


def _names(hosts: Iterable[str]) -> tuple[list[str], tuple[str, ...]]:
    if isinstance(hosts, str):
        raise TypeError("hosts must be an iterable of host names, not a single string")
    names: set[str] = set()
    skipped: set[str] = set()
    for host in hosts:
        name = _name(host)
        if name is not None:
            names.add(name)
        else:
            skipped.add(host if isinstance(host, str) else repr(host))
    return sorted(names), tuple(sorted(skipped))


def _lines_for(address: str, names: Sequence[str], nl: str) -> list[str]:
    out: list[str] = []
    line, count = address, 0
    for name in names:
        if count and (count >= MAX_NAMES or len(line) + 1 + len(name) > MAX_LINE):
            out.append(line + nl)
            line, count = address, 0
        line, count = f"{line} {name}", count + 1
    if count:
        out.append(line + nl)
    return out


def _newline(lines: Sequence[str]) -> str:
    for line in lines:
        if line.endswith("\n"):
            return "\r\n" if line.endswith("\r\n") else "\n"
    return "\n"


def _block(mapping: Mapping[str, Sequence[str]], nl: str) -> list[str]:
    """Our block for name -> addresses: one group of lines per address, names sorted.

    Addresses come in the order they first appear, walking the names in sorted order: with
    one address set for every name this is the order given, so ``apply`` renders as it
    always has, and the output never depends on the order of the input's entries.
    """
    by_address: dict[str, list[str]] = {}
    for name in sorted(mapping):
        for address in mapping[name]:
            by_address.setdefault(address, []).append(name)
    if not by_address:
        return []
    block = [BEGIN_MARKER + nl]
    for address, names in by_address.items():
        block.extend(_lines_for(address, names, nl))
    block.append(END_MARKER + nl)
    return block


def _rewrite(layout: _Layout, mapping: Mapping[str, Sequence[str]],
             skipped: tuple[str, ...]) -> HostsUpdate:
    lines = layout.lines
    drop = set(layout.legacy)
    if layout.block is not None:
        begin, end = layout.block
        drop.update(range(begin, end + 1))
        at = begin
    else:
        at = len(lines)
    kept_before = [line for i, line in enumerate(lines[:at]) if i not in drop]
    kept_after = [line for i, line in enumerate(lines[at:], at) if i not in drop]
    # The line ending of the lines that stay (else of any line): taken from lines about to be
    # dropped, a file of mixed endings would change again on the next apply.
    kept = [*kept_before, *kept_after]
    nl = _newline(kept if any(line.endswith("\n") for line in kept) else lines)
    block = _block(mapping, nl)
    if block and kept_before and not kept_before[-1].endswith("\n"):
        # Only the file's last line can lack an ending, and our block must start a line.
        kept_before[-1] += nl
    return HostsUpdate("".join([*kept_before, *block, *kept_after]), skipped)


def apply(text: str, hosts: Iterable[str], addresses: Sequence[str]) -> HostsUpdate:
    """``text`` with our block mapping ``hosts`` to every one of ``addresses``.

    No hosts (after skipping) or no addresses removes the block. Raises HostsFileError,
    before changing anything, when the markers are broken or an address is invalid.
    """
    layout = _layout(text)
    addrs = _addresses(addresses)
    names, skipped = _names(hosts)
    return _rewrite(layout, dict.fromkeys(names, addrs), skipped)


Entries = Mapping[str, Sequence[str]] | Iterable[tuple[str, Sequence[str]]]


def apply_entries(text: str, entries: Entries) -> HostsUpdate:
    """``text`` with our block mapping each host of ``entries`` to its own addresses.

    ``entries`` is host -> addresses, as a mapping or as (host, addresses) pairs. A host
    without addresses is left out (it has nowhere to point); when none is left the block is
    removed. A name given twice (``A.example.com`` and ``a.example.com.`` are one name) with
    the same addresses is written once; with different ones it is skipped and reported,
    since pointing it at either proxy could be wrong. Raises HostsFileError, before changing
    anything, when the markers are broken or an address is invalid. With one address set
    for every host the result is exactly ``apply``'s.
    """
    if isinstance(entries, str | bytes):
        raise TypeError("entries must map host names to addresses, not be a single string")
    layout = _layout(text)
    pairs = entries.items() if isinstance(entries, Mapping) else entries
    wanted: dict[str, list[str]] = {}
    spellings: dict[str, set[str]] = {}
    conflicting: set[str] = set()
    skipped: set[str] = set()
    for host, addresses in pairs:
        addrs = _addresses(addresses)
        name = _name(host)
        if name is None:
            skipped.add(host if isinstance(host, str) else repr(host))
            continue
        if not addrs:
            continue
        spellings.setdefault(name, set()).add(host)
        if name not in wanted:
            wanted[name] = addrs
        elif set(wanted[name]) != set(addrs):
            conflicting.add(name)
    for name in conflicting:
        del wanted[name]
        skipped.update(spellings[name])
    return _rewrite(layout, wanted, tuple(sorted(skipped)))


def managed_hosts(text: str) -> tuple[str, ...]:
    """The hosts in our block, sorted; raises HostsFileError when the markers are broken."""
    layout = _layout(text)
    if layout.block is None:
        return ()
    begin, end = layout.block
    found: set[str] = set()
    for line in layout.lines[begin + 1:end]:
        fields = line.split("#", 1)[0].split()
        found.update(fields[1:])
    return tuple(sorted(found))


def managed_entries(text: str) -> dict[str, tuple[str, ...]]:
    """host -> addresses as our block holds them, sorted by host; raises HostsFileError when
    the markers are broken."""
    layout = _layout(text)
    if layout.block is None:
        return {}
    begin, end = layout.block
    found: dict[str, list[str]] = {}
    for line in layout.lines[begin + 1:end]:
        fields = line.split("#", 1)[0].split()
        for name in fields[1:]:
            addrs = found.setdefault(name, [])
            if fields[0] not in addrs:
                addrs.append(fields[0])
    return {name: tuple(found[name]) for name in sorted(found)}
