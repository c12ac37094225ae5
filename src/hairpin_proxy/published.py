"""The published hosts ConfigMap's format, shared by its writer and its readers. Pure.

The controller writes the ConfigMap, the etchosts agents read it; both import this module,
which depends on nothing of either, so the agent never loads the controller.

Keys (docs/etchosts.md, "The published ConfigMap"):

``entries``
    One line per host, sorted by host: ``HOST ADDR [ADDR...]``, the ClusterIPs (IPv4 and/or
    IPv6) of the proxy Service of that host's own target. Authoritative when present.
``hosts`` and ``addresses``
    The older format, one item a line: the hosts of the default target only, and the main
    proxy Service's ClusterIPs. Kept so that an agent that predates ``entries`` never points a
    host of another target at the main proxy Service.

The reader refuses a malformed ``entries`` line on its own, with a reason, and keeps the rest:
one bad line must not take every host of the node out of the hosts file.
"""

from __future__ import annotations

import bisect
import functools
import ipaddress
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from hairpin_proxy.ordered import has

ENTRIES_KEY = "entries"
HOSTS_KEY = "hosts"
ADDRESSES_KEY = "addresses"
# Every key of the published ConfigMap that is ours.
KEYS = (HOSTS_KEY, ADDRESSES_KEY, ENTRIES_KEY)

# A refused line is quoted in the reason; a hand-edited ConfigMap can hold very long lines,
# and log lines should stay readable.
_QUOTE_MAX = 120
_BAD_LISTED = 5


@dataclass(frozen=True)
class Refused:
    """Part of the ``entries`` value that was left out, and why."""

    line: int      # 1-based line number in the value (0: the value as a whole)
    text: str      # the line as written, shortened for logs
    reason: str

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line else "value"
        return f"{where} {self.text!r}: {self.reason}" if self.text else f"{where}: {self.reason}"


@dataclass(frozen=True)
class EntriesReading:
    """What ``read_entries`` found: the usable entries, sorted by host, and what it refused."""

    entries: dict[str, tuple[str, ...]]
    refused: tuple[Refused, ...]


def parse_lines(text: object) -> tuple[str, ...]:
    """The items of ``hosts`` or ``addresses``: one a line, blank and ``#`` lines ignored."""
    if not isinstance(text, str):
        return ()
    items = (line.strip() for line in text.splitlines())
    return tuple(item for item in items if item and not item.startswith("#"))


def _quote(text: str) -> str:
    return text if len(text) <= _QUOTE_MAX else text[:_QUOTE_MAX] + "..."


def _host_key(raw: object) -> tuple[str, str]:
    """(key, "") for a usable host, else ("", reason).

    Only what would break the line format or make the line mean something else is refused
    here; whether a hosts file can hold the name (wildcards, single labels) is the hosts-file
    editor's decision, which reports it in its own words.
    """
    if not isinstance(raw, str):
        return "", "the host is not text"
    if raw.split() != [raw]:
        # Empty, or white space somewhere (split() breaks at the same characters isspace()
        # names, in C).
        return "", "the host name is empty or contains white space"
    if raw.startswith("#"):
        return "", "the host name starts a comment"
    # Names are compared case-insensitively and without the root dot, so that two spellings
    # of one name are seen as one host (and, with different addresses, as a conflict).
    key = raw.lower().removesuffix(".")
    if key == raw:
        # The caller's string, not an equal copy: it is kept for every host.
        key = raw
    if not key or key.endswith("."):
        # Checked so that the key is its own key: the writer's output must read back as is.
        return "", "the host name is empty or ends in an empty label"
    if ":" not in key and not key.replace(".", "").isdigit():
        # Neither IPv6 (which needs a colon) nor IPv4 (ASCII digits and dots): a name. Most
        # hosts are; parsing each as an address costs more than the rest of the line.
        return key, ""
    try:
        ipaddress.ip_address(key)
    except ValueError:
        return key, ""
    # Most likely a hosts-file line pasted the other way round ("ADDR HOST").
    return "", "the first field is an address, not a host name (expected HOST ADDR [ADDR...])"


def _address(raw: object) -> str | None:
    """The canonical spelling of one IPv4 or IPv6 address, or None."""
    # A zone index ("fe80::1%eth0") names an interface of one node, never a Service address.
    if not isinstance(raw, str) or "%" in raw:
        return None
    return _canonical(raw)


@functools.lru_cache(maxsize=4096)
def _canonical(raw: str) -> str | None:
    # Tens of thousands of hosts share a few proxy Service addresses: each is parsed once.
    try:
        return str(ipaddress.ip_address(raw.strip()))
    except ValueError:
        return None


def _addresses(addresses: Sequence[object]) -> tuple[tuple[str, ...], list[str]]:
    """(the good addresses in canonical form, once each; the bad ones as written)."""
    good: list[str] = []
    bad: list[str] = []
    for raw in addresses:
        addr = _address(raw)
        if addr is None:
            bad.append(raw if isinstance(raw, str) else repr(raw))
        elif addr not in good:
            good.append(addr)
    return tuple(good), bad


HostKey = Callable[[object], tuple[str, str]]


def _collect(rows: Iterable[tuple[int, str, object, Sequence[object]]],
             host_key: HostKey = _host_key) -> EntriesReading:
    """The rule both the reader and the writer follow, so that they cannot disagree.

    ``rows`` are (line, text for reasons, host, addresses). A bad address is left out; a host
    without a good address is refused; a host given on several rows with the same addresses
    is one host, with different addresses it is refused on every row: which proxy Service
    it belongs to cannot be told, and a wrong one is worse than none.
    """
    refused: list[Refused] = []
    found: dict[str, tuple[int, str, tuple[str, ...]]] = {}
    again: dict[str, list[tuple[int, str, tuple[str, ...]]]] = {}
    # Thousands of hosts share a few address lists: each is read once.
    read: dict[tuple[object, ...], tuple[tuple[str, ...], list[str]]] = {}
    for line, text, host, addresses in rows:
        key, why = host_key(host)
        if why:
            refused.append(Refused(line, text, why))
            continue
        listed = tuple(addresses)
        got = read.get(listed)
        if got is None:
            got = read[listed] = _addresses(listed)
        good, bad = got
        if bad:
            shown = ", ".join(_quote(b) for b in bad[:_BAD_LISTED])
            more = f" and {len(bad) - _BAD_LISTED} more" if len(bad) > _BAD_LISTED else ""
            refused.append(Refused(line, text, "not an IPv4 or IPv6 address, left out: "
                                   + shown + more))
        if not good:
            refused.append(Refused(line, text, "no valid address; the host is left out"))
            continue
        if key in found:
            again.setdefault(key, [found[key]]).append((line, text, good))
        else:
            found[key] = (line, text, good)
    for key, rows_of_key in again.items():
        if len({frozenset(a) for _, _, a in rows_of_key}) > 1:
            lines = ", ".join(str(line) for line, _, _ in rows_of_key)
            refused.extend(Refused(line, text, f"{key} is listed with different addresses "
                                   f"(lines {lines}); the host is left out")
                           for line, text, _ in rows_of_key)
            del found[key]
    entries = {key: found[key][2] for key in sorted(found)}
    refused.sort(key=lambda r: r.line)
    return EntriesReading(entries, tuple(refused))


def _rows(text: str) -> Iterable[tuple[int, str, object, Sequence[object]]]:
    # Only "\n" ends a line (a "\r" before it is white space to split()): the line numbers in
    # the reasons must be the ones an editor shows, and str.splitlines() also breaks at form
    # feeds and other separators an editor does not.
    for number, line in enumerate(text.split("\n"), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue  # blank lines and comments are for people
        # A field starting with "#" starts a comment, as in a hosts file.
        cut = next((i for i, f in enumerate(fields) if f.startswith("#")), len(fields))
        yield number, _quote(line.strip()), fields[0], fields[1:cut]


def read_entries(text: object) -> EntriesReading:
    """Parse an ``entries`` value; never raises, every refusal comes with its reason."""
    if not isinstance(text, str):
        return EntriesReading({}, (Refused(0, "", "the value is not text"),))
    return _collect(_rows(text))


def parse_entries(text: object) -> dict[str, tuple[str, ...]]:
    """host -> addresses from an ``entries`` value, sorted by host; malformed lines skipped.

    Hosts are lower-case and without a final dot; addresses are canonical and unique per
    host, in the order written. ``read_entries`` also says what was skipped and why.
    """
    return read_entries(text).entries


def entries_text(entries: Mapping[str, Sequence[str]]) -> str:
    """The ``entries`` value for ``entries`` (host -> that host's proxy Service addresses).

    Follows the reader's rule, so that the agents read back exactly
    ``parse_entries(entries_text(entries))`` without refusing anything: what the reader
    would refuse (a bad address, a host without a good one, a host spelled twice with
    different addresses, a host that would break the line) is left out here already.
    """
    return _entries_text(entries, _host_key)


def _entries_text(entries: Mapping[str, Sequence[str]], host_key: HostKey) -> str:
    rows: list[tuple[int, str, object, Sequence[object]]] = []
    for number, (host, addresses) in enumerate(entries.items(), 1):
        if isinstance(addresses, str):
            # A lone string is a Sequence[str] too; iterating it would yield characters.
            raise TypeError(f"addresses of {host!r} must be a sequence of addresses, "
                            "not a single string")
        rows.append((number, "", host, tuple(addresses)))
    reading = _collect(rows, host_key)
    # One " ADDR..." tail per address list, shared by its hosts.
    tails: dict[tuple[str, ...], str] = {}
    for addrs in reading.entries.values():
        if addrs not in tails:
            tails[addrs] = " " + " ".join(addrs) + "\n"
    return "".join([host + tails[addrs] for host, addrs in reading.entries.items()])


# (the hosts added, the hosts removed) since the hosts of the last call.
Moved = tuple[Sequence[str], Sequence[str]]


class EntriesText:
    """``entries_text`` for a writer whose hosts change a few at a time: the last value with
    the lines of the hosts that came, went or changed addresses cut out or put in, rather
    than every line made and joined again (where many changed, it is made afresh). The same
    text as ``entries_text``, whatever the calls (tests/test_published.py).

    What came and went is the caller's to tell where it knows (the plan's change): then no
    set of the hosts is kept between calls (ten thousand hosts make half a megabyte of set).
    Where it does not, the hosts' set is made and kept for the next such call. The hosts
    checked already are those of the last value's lines."""

    # More changes than this in one call: the value is made afresh.
    SPLICES = 32

    def __init__(self) -> None:
        self._default: tuple[str, ...] | None = None
        self._routed: dict[str, tuple[str, ...]] = {}
        # Hosts whose key is another spelling of them: where one is written, the order and
        # the duplicates are the plain function's to sort out.
        self._odd: set[str] = set()
        self._tails: dict[tuple[str, ...], str] = {}
        # The last value (None: to be made afresh), the hosts it was made for (the caller's
        # tuple, not a copy) and their set where one was made (None: made when needed),
        # and those of them with a line, sorted (the value's lines in order).
        self._text: str | None = None
        self._hosts: tuple[str, ...] = ()
        self._present: set[str] | None = None
        self._order: list[str] = []

    @property
    def hosts(self) -> tuple[str, ...]:
        """The hosts of the last call, which ``moved`` counts from."""
        return self._hosts

    def text(self, hosts: Sequence[str], default: tuple[str, ...],
             routed: Mapping[str, tuple[str, ...]], moved: Moved | None = None) -> str:
        """``entries_text({h: routed.get(h, default) for h in hosts})``; ``moved``: the hosts
        added and removed since the last call's (``hosts`` then sorted and distinct)."""
        stale = self._forget_changed(default, routed)
        text, present = self._spliced(hosts, stale, moved)
        if text is None:
            text = self._joined(hosts, present)
        if self._odd and not self._odd.isdisjoint(hosts):
            self._text = None
            return _entries_text({h: routed.get(h, default) for h in hosts}, self._checked())
        self._text, self._present = text, present
        self._hosts = hosts if isinstance(hosts, tuple) else tuple(hosts)
        return text

    def _forget_changed(self, default: tuple[str, ...],
                        routed: Mapping[str, tuple[str, ...]]) -> set[str]:
        """The hosts whose addresses changed since the last call (none listed when the
        default's did: the value is then made afresh)."""
        stale: set[str] = set()
        if default != self._default:
            self._default = default
            self._text = None
        elif routed != self._routed:
            last = self._routed
            stale = {h for h in {*routed, *last} if routed.get(h) != last.get(h)}
        if routed != self._routed:
            self._routed = dict(routed)
        if len(self._tails) > 4096:
            self._tails.clear()
        return stale

    def _checked(self) -> HostKey:
        """``_host_key`` that knows the hosts with a line in the last value: their own key
        (a pass writes the same ten thousand hosts but a few, and each check costs)."""
        known = set(self._order)
        known.difference_update(self._odd)

        def host_key(raw: object) -> tuple[str, str]:
            if isinstance(raw, str) and raw in known:
                return raw, ""
            return _host_key(raw)
        return host_key

    def _joined(self, hosts: Sequence[str], present: set[str] | None) -> str:
        # Every host is its own key (or the plain function takes over): the lines in the
        # order of the hosts (sorted in C, which is linear when they come sorted, as a
        # pass's do), each once.
        check = self._checked()
        if present is None:
            present = set(hosts)
        self._odd &= present
        order = sorted(hosts) if len(present) == len(hosts) else sorted(present)
        lines = [self._line(h, check) for h in order]
        self._order = list(itertools.compress(order, lines))
        return "".join(lines)

    def _moves(self, hosts: Sequence[str], stale: set[str], moved: Moved | None
               ) -> tuple[set[str], set[str], set[str] | None]:
        """(the hosts whose lines may go, those whose lines may come: those removed or added
        since the last call and those whose addresses changed; the set of ``hosts`` where
        one was made)."""
        if moved is not None:
            added, removed = set(moved[0]), set(moved[1])
            now = [h for h in stale if has(hosts, h)]
            before = [h for h in stale if h in removed or (h not in added and has(hosts, h))]
            return removed.union(before), added.union(now), None
        present = set(hosts)
        last = set(self._hosts) if self._present is None else self._present
        added = present.difference(last)
        # Counted, not searched for, when nothing went (a pass that only adds).
        gone = len(last) - len(present) + len(added)
        out = (last.difference(present) if gone else set()) | stale.intersection(last)
        return out, added | stale.intersection(present), present

    def _spliced(self, hosts: Sequence[str], stale: set[str], moved: Moved | None
                 ) -> tuple[str | None, set[str] | None]:
        """The last value with the lines of the hosts that came, went or changed put in or
        cut out (None when there is no last value or too much changed), and the set of
        ``hosts`` where one was made."""
        text = self._text
        if text is None:
            return None, None
        out, into, present = self._moves(hosts, stale, moved)
        if len(out) + len(into) > self.SPLICES:
            return None, present
        order = self._order
        for host in out:
            at = bisect.bisect_left(order, host)
            if at < len(order) and order[at] == host:
                begin = _line_at(text, host)
                text = text[:begin] + text[text.index("\n", begin) + 1:]
                del order[at]
        for host in into:
            line = self._line(host, _host_key)
            if line:
                at = bisect.bisect_left(order, host)
                begin = len(text) if at == len(order) else _line_at(text, order[at])
                text = text[:begin] + line + text[begin:]
                order.insert(at, host)
        return text, present

    def _line(self, host: str, check: HostKey) -> str:
        """``host``'s line ("" when the reader would refuse it)."""
        key, why = check(host)
        if why:
            return ""
        if key != host:
            self._odd.add(host)
        addresses = self._routed.get(host, self._default or ())
        tail = self._tails.get(addresses)
        if tail is None:
            good = _addresses(addresses)[0]
            tail = self._tails[addresses] = " " + " ".join(good) + "\n" if good else ""
        return host + tail if tail else ""



def _line_at(text: str, host: str) -> int:
    """Where ``host``'s line begins in a value of lines "HOST ADDR...": a line ends at the
    only new line it holds, and a host holds no white space."""
    return 0 if text.startswith(host + " ") else text.index("\n" + host + " ") + 1
