"""Hosts-file engine: the managed block, foreign lines, migration, broken markers."""
from __future__ import annotations

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
