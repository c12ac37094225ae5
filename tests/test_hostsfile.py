"""Hosts-file engine: the managed block, foreign lines, migration, broken markers, and a
block where every host has its own addresses."""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.corefile import BEGIN_MARKER, END_MARKER
from hairpin_proxy.hostsfile import (
    MAX_LINE,
    MAX_NAMES,
    HostsFileError,
    HostsUpdate,
    apply,
    apply_entries,
    managed_entries,
    managed_hosts,
)

BASE = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n"
V4 = "10.43.0.10"
V6 = "fd00:10:43::10"


def test_block_is_appended_with_one_line_per_address() -> None:
    update = apply(BASE, ["b.example.com", "a.example.com"], [V4, V6])
    assert update == HostsUpdate(
        BASE + f"{BEGIN_MARKER}\n"
               f"{V4} a.example.com b.example.com\n"
               f"{V6} a.example.com b.example.com\n"
               f"{END_MARKER}\n", ())
    assert managed_hosts(update.text) == ("a.example.com", "b.example.com")


def test_apply_is_idempotent_and_replaces_in_place() -> None:
    first = apply(BASE + "# tail comment\n", ["a.example.com"], [V4]).text
    assert apply(first, ["a.example.com"], [V4]).text == first
    # Someone appended after our block: the block is updated where it stands.
    edited = first + "192.168.1.5 nas.lan\n"
    second = apply(edited, ["c.example.com", "a.example.com"], [V4]).text
    assert second == (BASE + "# tail comment\n" + f"{BEGIN_MARKER}\n"
                      f"{V4} a.example.com c.example.com\n{END_MARKER}\n"
                      "192.168.1.5 nas.lan\n")


@pytest.mark.parametrize(("hosts", "addresses"), [
    ([], [V4]),
    (["a.example.com"], []),
    (["*.example.com"], [V4]),
])
def test_nothing_to_map_removes_the_block(hosts: list[str], addresses: list[str]) -> None:
    with_block = apply(BASE, ["x.example.com"], [V4]).text
    assert apply(with_block, hosts, addresses).text == BASE
    assert apply(BASE, hosts, addresses).text == BASE
    assert managed_hosts(BASE) == ()


def test_round_trip_restores_the_original_bytes() -> None:
    original = "# hosts\r\n127.0.0.1 localhost\r\n\r\n  10.0.0.1   db  # primary\r\n"
    with_block = apply(original, ["a.example.com"], [V4]).text
    assert with_block.startswith(original)
    assert with_block.endswith(f"{BEGIN_MARKER}\r\n{V4} a.example.com\r\n{END_MARKER}\r\n")
    assert apply(with_block, [], [V4]).text == original


def test_line_endings_follow_the_file() -> None:
    assert apply("", ["a.example.com"], [V4]).text == (
        f"{BEGIN_MARKER}\n{V4} a.example.com\n{END_MARKER}\n")
    lf = apply("127.0.0.1 localhost\n", ["a.example.com"], [V4]).text
    assert "\r" not in lf
    crlf = apply("127.0.0.1 localhost\r\n", ["a.example.com"], [V4]).text
    assert crlf.count("\r\n") == crlf.count("\n") == 4


def test_a_file_without_final_newline() -> None:
    text = "127.0.0.1 localhost"
    added = apply(text, ["a.example.com"], [V4]).text
    assert added == f"{text}\n{BEGIN_MARKER}\n{V4} a.example.com\n{END_MARKER}\n"
    # A block in the middle leaves the unterminated last line alone.
    middle = f"{BEGIN_MARKER}\n{V4} old.example.com\n{END_MARKER}\n{text}"
    assert apply(middle, ["a.example.com"], [V4]).text == (
        f"{BEGIN_MARKER}\n{V4} a.example.com\n{END_MARKER}\n{text}")
    assert apply(middle, [], [V4]).text == text
    # An END marker on the unterminated last line: our block still ends with a newline.
    last = f"{text}\n{BEGIN_MARKER}\n{V4} old.example.com\n{END_MARKER}"
    assert apply(last, ["a.example.com"], [V4]).text == added


def test_original_tool_lines_are_migrated() -> None:
    text = (BASE + f"{V4}\tapi.example.com # Added by hairpin-proxy\n"
            "192.168.1.5 nas.lan\n"
            f"{V4}\tweb.example.com # Added by hairpin-proxy  \r\n")
    update = apply(text, ["api.example.com"], [V4])
    assert update.text == (BASE + "192.168.1.5 nas.lan\n"
                           f"{BEGIN_MARKER}\n{V4} api.example.com\n{END_MARKER}\n")
    assert apply(text, [], []).text == BASE + "192.168.1.5 nas.lan\n"


def test_mixed_line_endings_follow_the_lines_that_stay() -> None:
    # The dropped original-tool line ends in LF, the foreign line that stays in CRLF.
    text = f"{V4} old.example.com # Added by hairpin-proxy\n192.168.1.5 nas.lan\r\n"
    once = apply(text, ["a.example.com"], [V4]).text
    assert once == (f"192.168.1.5 nas.lan\r\n{BEGIN_MARKER}\r\n{V4} a.example.com\r\n"
                    f"{END_MARKER}\r\n")
    assert apply(once, ["a.example.com"], [V4]).text == once


def test_wildcards_and_invalid_names_are_skipped() -> None:
    update = apply(BASE, ["*.example.com", "a.example.com", "A.Example.Com.", "bad name",
                          "x#y.com", "", "a" * 64 + ".com", "localhost", "registry."], [V4])
    assert managed_hosts(update.text) == ("a.example.com",)
    assert update.skipped == ("", "*.example.com", "a" * 64 + ".com", "bad name", "localhost",
                              "registry.", "x#y.com")


def test_long_host_lists_are_split_into_short_lines() -> None:
    hosts = [f"service-{i:03d}.apps.example.com" for i in range(50)]
    long_name = ".".join(["l" * 60] * 4)
    text = apply(BASE, [*hosts, long_name], [V4, V6]).text
    block = text[len(BASE):].splitlines()[1:-1]
    for line in block:
        fields = line.split()
        assert len(fields) - 1 <= MAX_NAMES
        assert len(line) <= MAX_LINE or len(fields) == 2
    v4_names = [n for line in block if line.startswith(V4 + " ") for n in line.split()[1:]]
    v6_names = [n for line in block if line.startswith(V6 + " ") for n in line.split()[1:]]
    assert v4_names == v6_names == sorted([*hosts, long_name])
    assert managed_hosts(text) == tuple(sorted([*hosts, long_name]))


def test_addresses_are_validated_normalized_and_deduplicated() -> None:
    text = apply("", ["a.example.com"], ["FD00::0010", "10.0.0.1", "fd00::10", " 10.0.0.1 "]).text
    assert text == f"{BEGIN_MARKER}\nfd00::10 a.example.com\n10.0.0.1 a.example.com\n{END_MARKER}\n"
    for bad in ["10.0.0", "example.com", "fe80::1%eth0", "10.0.0.1 evil.com", "", "::g"]:
        with pytest.raises(HostsFileError, match="invalid address"):
            apply(BASE, ["a.example.com"], [bad])
    with pytest.raises(TypeError):
        apply(BASE, ["a.example.com"], V4)
    with pytest.raises(TypeError):
        apply(BASE, "a.example.com", [V4])


BROKEN = [
    (f"{BEGIN_MARKER}\n{V4} a.com\n", "BEGIN marker without an END marker"),
    (f"{V4} a.com\n{END_MARKER}\n", "END marker without a BEGIN marker"),
    (f"{BEGIN_MARKER}\n{BEGIN_MARKER}\n{END_MARKER}\n", "BEGIN marker inside the block"),
    (f"{BEGIN_MARKER}\n{END_MARKER}\n{BEGIN_MARKER}\n{END_MARKER}\n",
     "a second hairpin-proxy block"),
    (f"{BEGIN_MARKER}\n{END_MARKER}\n{END_MARKER}\n", "END marker without a BEGIN marker"),
    ("# BEGIN hairpin-proxy\n# END hairpin-proxy\n", "damaged hairpin-proxy marker"),
    (f"{BEGIN_MARKER}\n# END hairpin-proxy (edited)\n", "damaged hairpin-proxy marker"),
]


@pytest.mark.parametrize(("text", "message"), BROKEN)
def test_broken_markers_are_refused(text: str, message: str) -> None:
    for hosts in (["a.example.com"], []):
        with pytest.raises(HostsFileError, match=message):
            apply(BASE + text, hosts, [V4])
    with pytest.raises(HostsFileError, match=message):
        managed_hosts(BASE + text)


def test_markers_are_recognised_with_surrounding_whitespace() -> None:
    text = BASE + f"  {BEGIN_MARKER}  \r\n{V4} old.example.com\n{END_MARKER}\t\n"
    assert managed_hosts(text) == ("old.example.com",)
    assert apply(text, [], [V4]).text == BASE


def test_marker_text_inside_a_host_line_is_foreign() -> None:
    text = f"10.0.0.1 mirror.lan # {BEGIN_MARKER}\n"
    assert apply(text, ["a.example.com"], [V4]).text.startswith(text)


# --------------------------------------------------------------------------- properties

foreign_line = st.text(
    alphabet=st.characters(exclude_characters="\n", exclude_categories=["Cs"]),
    max_size=40,
).filter(lambda s: "hairpin-proxy" not in s)
foreign_text = st.builds(
    lambda lines, ending, final: ending.join(lines) + (ending if final and lines else ""),
    st.lists(foreign_line, max_size=8), st.sampled_from(["\n", "\r\n"]), st.booleans())
host_names = st.lists(st.from_regex(r"\A[a-z]{1,8}(\.[a-z0-9]{1,5}){1,3}\Z"), max_size=12)
address_lists = st.lists(st.sampled_from([V4, V6, "192.0.2.1", "2001:db8::5"]), max_size=3)


@given(foreign_text, host_names, address_lists)
@settings(max_examples=300)
def test_foreign_text_is_preserved_byte_for_byte(text: str, hosts: list[str],
                                                 addresses: list[str]) -> None:
    update = apply(text, hosts, addresses)
    if not hosts or not addresses:
        assert update.text == text
        return
    block_start = update.text.index(BEGIN_MARKER)
    before, block = update.text[:block_start], update.text[block_start:]
    # The foreign text is intact; at most a line ending was added to start our block.
    assert before in (text, text + "\n", text + "\r\n")
    assert block.endswith(END_MARKER + ("\r\n" if "\r\n" in block else "\n"))
    assert managed_hosts(update.text) == tuple(sorted(set(hosts)))
    assert apply(update.text, hosts, addresses) == update
    removed = apply(update.text, [], addresses).text
    assert removed == before


@given(foreign_text, foreign_text, host_names, host_names)
@settings(max_examples=200)
def test_updating_keeps_text_on_both_sides(head: str, tail: str, old: list[str],
                                           new: list[str]) -> None:
    head = head if not head or head.endswith("\n") else head + "\n"
    text = head + f"{BEGIN_MARKER}\n{V4} {' '.join(old)}\n{END_MARKER}\n" + tail
    result = apply(text, new, [V4]).text
    assert result.startswith(head)
    assert result.endswith(tail)
    assert managed_hosts(result) == tuple(sorted(set(new)))


# --------------------------------------------------------------------------- per-host addresses

T1_V4, T1_V6 = "10.43.0.21", "fd00:10:43::21"  # the proxy Service of a second target


def test_entries_give_each_host_its_own_addresses() -> None:
    entries = {"b.example.com": [V4, V6], "a.example.com": [V4, V6],
               "gw.example.com": [T1_V4, T1_V6], "v4only.example.com": [T1_V4]}
    update = apply_entries(BASE, entries)
    assert update == HostsUpdate(
        BASE + f"{BEGIN_MARKER}\n"
               f"{V4} a.example.com b.example.com\n"
               f"{V6} a.example.com b.example.com\n"
               f"{T1_V4} gw.example.com v4only.example.com\n"
               f"{T1_V6} gw.example.com\n"
               f"{END_MARKER}\n", ())
    assert managed_entries(update.text) == {
        "a.example.com": (V4, V6), "b.example.com": (V4, V6),
        "gw.example.com": (T1_V4, T1_V6), "v4only.example.com": (T1_V4,)}
    # Pairs instead of a mapping, in any order: the same block.
    pairs = list(reversed(list(entries.items())))
    assert apply_entries(BASE, pairs) == update
    assert apply_entries(BASE, iter(pairs)) == update


def test_entries_replace_the_block_and_keep_everything_else() -> None:
    text = "# head\r\n" + apply(BASE, ["old.example.com"], [V4]).text.replace(
        "\n", "\r\n") + "192.168.1.5 nas.lan\r\n"
    text = text.replace("\r\r\n", "\r\n")
    update = apply_entries(text, {"a.example.com": [T1_V4]})
    assert update.text == ("# head\r\n" + BASE.replace("\n", "\r\n")
                           + f"{BEGIN_MARKER}\r\n{T1_V4} a.example.com\r\n{END_MARKER}\r\n"
                           "192.168.1.5 nas.lan\r\n")
    assert apply_entries(update.text, {"a.example.com": [T1_V4]}) == update
    assert apply_entries(update.text, {}).text == "# head\r\n" + BASE.replace(
        "\n", "\r\n") + "192.168.1.5 nas.lan\r\n"


def test_entries_without_addresses_are_left_out() -> None:
    update = apply_entries(BASE, {"a.example.com": [V4], "b.example.com": []})
    assert managed_entries(update.text) == {"a.example.com": (V4,)}
    assert update.skipped == ()
    with_block = update.text
    assert apply_entries(with_block, {"a.example.com": [], "b.example.com": ()}).text == BASE
    assert apply_entries(with_block, {}).text == BASE
    assert apply_entries(with_block, []).text == BASE


def test_entries_skip_wildcards_and_names_a_hosts_file_cannot_hold() -> None:
    update = apply_entries(BASE, {"*.example.com": [V4], "A.Example.Com.": [T1_V4],
                                  "localhost": [V4], "bad name": [V4], "a" * 64 + ".com": [V4]})
    assert managed_entries(update.text) == {"a.example.com": (T1_V4,)}
    assert update.skipped == ("*.example.com", "a" * 64 + ".com", "bad name", "localhost")


def test_one_name_with_two_address_sets_is_skipped_not_guessed() -> None:
    # Two spellings of one name: with the same addresses it is one host ...
    same = apply_entries(BASE, [("a.example.com", [V4]), ("A.example.com.", [V4])])
    assert managed_entries(same.text) == {"a.example.com": (V4,)}
    assert same.skipped == ()
    # ... with different ones, either proxy could be wrong: it is skipped and reported.
    update = apply_entries(BASE, [("a.example.com", [V4]), ("b.example.com", [V4]),
                                  ("A.example.com.", [T1_V4])])
    assert managed_entries(update.text) == {"b.example.com": (V4,)}
    assert update.skipped == ("A.example.com.", "a.example.com")
    # The order of the addresses of one set does not make it another set.
    swapped = apply_entries(BASE, [("a.example.com", [V4, V6]), ("a.example.com.", [V6, V4])])
    assert managed_entries(swapped.text) == {"a.example.com": (V4, V6)}


def test_entries_validate_addresses_and_refuse_broken_markers() -> None:
    normalized = apply_entries("", {"a.example.com": ["FD00::0010", " 10.0.0.1 ", "fd00::10"]})
    assert normalized.text == (f"{BEGIN_MARKER}\nfd00::10 a.example.com\n"
                               f"10.0.0.1 a.example.com\n{END_MARKER}\n")
    for bad in ["10.0.0", "example.com", "fe80::1%eth0", "10.0.0.1 evil.com", ""]:
        with pytest.raises(HostsFileError, match="invalid address"):
            apply_entries(BASE, {"a.example.com": [V4], "b.example.com": [bad]})
    with pytest.raises(TypeError):
        apply_entries(BASE, {"a.example.com": V4})
    with pytest.raises(TypeError):
        apply_entries(BASE, "a.example.com")  # type: ignore[arg-type]
    for text, message in BROKEN:
        for entries in ({"a.example.com": [V4]}, {}):
            with pytest.raises(HostsFileError, match=message):
                apply_entries(BASE + text, entries)
        with pytest.raises(HostsFileError, match=message):
            managed_entries(BASE + text)


def test_long_entry_lists_are_split_per_address() -> None:
    entries = {f"svc-{i:03d}.apps.example.com": [V4 if i % 2 else T1_V4, V6 if i % 2 else T1_V6]
               for i in range(40)}
    text = apply_entries(BASE, entries).text
    block = text[len(BASE):].splitlines()[1:-1]
    assert all(len(line.split()) - 1 <= MAX_NAMES and len(line) <= MAX_LINE for line in block)
    assert managed_entries(text) == {h: tuple(a) for h, a in sorted(entries.items())}


def test_managed_entries_of_a_file_without_block() -> None:
    assert managed_entries(BASE) == {}
    assert managed_entries("") == {}


# --------------------------------------------------------------------------- properties, per host

V4_POOL = ["10.43.0.10", "10.43.0.21", "192.0.2.1", "10.96.7.3"]
V6_POOL = ["fd00:10:43::10", "fd00:10:43::21", "2001:db8::5"]
# A Service has at most one ClusterIP per family, so a host has at most one of each.
host_addresses = st.tuples(st.sampled_from([None, *V4_POOL]),
                           st.sampled_from([None, *V6_POOL]), st.booleans()).map(
    lambda t: [a for a in ((t[1], t[0]) if t[2] else (t[0], t[1])) if a is not None])
plain_names = st.from_regex(r"\A[a-z]{1,8}(\.[a-z0-9]{1,5}){1,3}\Z")
entry_maps = st.dictionaries(plain_names, host_addresses, max_size=12)


def _expected(entries: dict[str, list[str]]) -> dict[str, frozenset[str]]:
    return {h: frozenset(a) for h, a in sorted(entries.items()) if a}


def _read_back(text: str) -> dict[str, frozenset[str]]:
    # Lines are grouped by address, so a host's addresses come back in the block's order,
    # which is not always the order one host gave them in.
    return {h: frozenset(a) for h, a in managed_entries(text).items()}


def _block_of(text: str) -> list[str]:
    lines = text.splitlines()
    if BEGIN_MARKER not in lines:
        return []
    return lines[lines.index(BEGIN_MARKER) + 1:lines.index(END_MARKER)]


@given(foreign_text, entry_maps)
@settings(max_examples=300)
def test_entries_round_trip_and_are_idempotent(text: str,
                                               entries: dict[str, list[str]]) -> None:
    update = apply_entries(text, entries)
    want = _expected(entries)
    assert _read_back(update.text) == want
    assert managed_hosts(update.text) == tuple(want)
    assert update.skipped == ()
    assert apply_entries(update.text, entries) == update
    # The same entries given as pairs in reverse order: the same file.
    assert apply_entries(text, list(reversed(list(entries.items())))) == update
    # Taking the block out again gives the file back (a missing final newline stays added).
    removed = apply_entries(update.text, {}).text
    assert removed == text if not want else removed in (text, text + "\n", text + "\r\n")
    assert apply_entries(removed, entries) == update


@given(foreign_text, entry_maps)
@settings(max_examples=300)
def test_every_host_once_per_address_family(text: str, entries: dict[str, list[str]]) -> None:
    block = _block_of(apply_entries(text, entries).text)
    for host, addresses in entries.items():
        for family in (4, 6):
            lines = [line for line in block if host in line.split()[1:]
                     and (":" in line.split()[0]) == (family == 6)]
            mine = [a for a in addresses if (":" in a) == (family == 6)]
            assert sorted(line.split()[0] for line in lines) == sorted(mine)
            assert all(line.split()[1:].count(host) == 1 for line in lines)


@given(foreign_text, foreign_text, host_names, entry_maps)
@settings(max_examples=200)
def test_entries_keep_the_text_outside_the_block_byte_for_byte(
        head: str, tail: str, old: list[str], entries: dict[str, list[str]]) -> None:
    head = head if not head or head.endswith("\n") else head + "\n"
    block = f"{BEGIN_MARKER}\n{V4} {' '.join(old)}\n{END_MARKER}\n"
    result = apply_entries(head + block + tail, entries).text
    assert result.startswith(head)
    assert result.endswith(tail)
    middle = result[len(head):len(result) - len(tail)]
    # Only our block lies between them (in the line ending of the lines that stay).
    assert middle == "" if not _expected(entries) else (
        middle.startswith(BEGIN_MARKER) and middle.endswith((END_MARKER + "\n",
                                                             END_MARKER + "\r\n")))
    assert _read_back(result) == _expected(entries)


messy_names = st.one_of(plain_names,
                        st.from_regex(r"\A(\*\.)?[a-zA-Z]{1,6}(\.[a-z]{1,3}){0,2}\.?\Z"))


@given(foreign_text, st.lists(messy_names, max_size=10), address_lists, st.randoms())
@settings(max_examples=300)
def test_one_address_set_for_all_hosts_renders_exactly_as_apply(
        text: str, hosts: list[str], addresses: list[str], rnd: Any) -> None:
    expected = apply(text, hosts, addresses)
    assert apply_entries(text, dict.fromkeys(hosts, addresses)) == expected
    pairs = [(h, addresses) for h in hosts]
    rnd.shuffle(pairs)
    assert apply_entries(text, pairs) == expected
