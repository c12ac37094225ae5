"""The published ConfigMap's ``entries`` format: the reader refuses line by line, the writer
writes only what the reader accepts, and the two round-trip."""

from __future__ import annotations

import ipaddress
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.published import (
    EntriesReading,
    Refused,
    entries_text,
    parse_entries,
    parse_lines,
    read_entries,
)

V4, V6 = "10.96.0.10", "fd00:10:96::10"
T1_V4, T1_V6 = "10.96.0.21", "fd00:10:96::21"


def test_entries_are_read_one_host_a_line_sorted_by_host() -> None:
    text = (f"b.example.com {T1_V4} {T1_V6}\n"
            "\n"
            "# written by hand\n"
            f"  a.example.com\t{V4}  \n"
            f"C.Example.Com. {V6} {V4} # trailing comment\n"
            f"*.apps.example.com {V4}\r\n")
    assert parse_entries(text) == {
        "*.apps.example.com": (V4,), "a.example.com": (V4,),
        "b.example.com": (T1_V4, T1_V6), "c.example.com": (V6, V4)}
    assert list(parse_entries(text)) == sorted(parse_entries(text))
    assert read_entries(text).refused == ()


def test_malformed_lines_are_refused_one_by_one_with_a_reason() -> None:
    text = (f"good.example.com {V4}\n"                       # 1
            "lonely.example.com\n"                           # 2 no address
            "bad.example.com 10.96.0\n"                      # 3 no good address
            f"mixed.example.com 10.96.0 {V6} fe80::1%eth0\n"  # 4 two bad, one good
            f"{V4} swapped.example.com\n"                    # 5 hosts-file order
            f"twice.example.com {V4}\n"                      # 6 } same addresses:
            f"TWICE.example.com. {V4}\n"                     # 7 } one host
            f"split.example.com {V4}\n"                      # 8 } different addresses:
            f"split.example.com {T1_V4}\n"                   # 9 } refused on both lines
            f"dup.example.com {V4} {V4} 10.96.000.10\n")     # 10 duplicate, bad spelling
    reading = read_entries(text)
    assert reading.entries == {"dup.example.com": (V4,), "good.example.com": (V4,),
                               "mixed.example.com": (V6,), "twice.example.com": (V4,)}
    reasons = {(r.line, r.reason) for r in reading.refused}
    assert [r.line for r in reading.refused] == [2, 3, 3, 4, 5, 8, 9, 10]
    assert (2, "no valid address; the host is left out") in reasons
    assert (3, "not an IPv4 or IPv6 address, left out: 10.96.0") in reasons
    assert (4, "not an IPv4 or IPv6 address, left out: 10.96.0, fe80::1%eth0") in reasons
    assert any(line == 5 and "not a host name" in why for line, why in reasons)
    assert {r.reason for r in reading.refused if r.line in (8, 9)} == {
        "split.example.com is listed with different addresses (lines 8, 9); "
        "the host is left out"}
    assert (10, "not an IPv4 or IPv6 address, left out: 10.96.000.10") in reasons
    assert str(reading.refused[0]) == ("line 2 'lonely.example.com': no valid address; "
                                       "the host is left out")


@pytest.mark.parametrize("value", [None, 7, b"a.example.com 10.96.0.10\n", ["a"]])
def test_a_value_that_is_not_text_is_refused_as_a_whole(value: object) -> None:
    reading = read_entries(value)
    assert reading == EntriesReading({}, (Refused(0, "", "the value is not text"),))
    assert str(reading.refused[0]) == "value: the value is not text"
    assert parse_entries(value) == {}


def test_long_refused_lines_are_shortened_for_the_log() -> None:
    reading = read_entries("x.example.com " + "9" * 1000 + "\n")
    assert reading.entries == {}
    assert all(len(str(r)) < 400 for r in reading.refused)


def test_the_writer_sorts_normalises_and_leaves_out_what_the_reader_refuses() -> None:
    entries = {"b.example.com": [T1_V4, T1_V6], "a.example.com": ["FD00:10:96::0010", V4, V4],
               "nothing.example.com": [], "bad.example.com": ["10.96.0"],
               "half.example.com": ["10.96.0", V4], "with space.example.com": [V4],
               "#comment.example.com": [V4], "": [V4], "split.example.com": [V4],
               "Split.example.com.": [T1_V4], "Same.example.com": [V4],
               "same.example.com.": [V4], "dots.example.com..": [V4], ".": [V4]}
    text = entries_text(entries)
    assert text == (f"a.example.com {V6} {V4}\n"
                    f"b.example.com {T1_V4} {T1_V6}\n"
                    f"half.example.com {V4}\n"
                    f"same.example.com {V4}\n")
    assert read_entries(text).refused == ()
    assert entries_text({}) == ""
    with pytest.raises(TypeError):
        entries_text({"a.example.com": V4})


def test_the_older_keys_are_read_one_item_a_line() -> None:
    assert parse_lines("a.example.com\n\n  b.example.com \n# note\n") == ("a.example.com",
                                                                          "b.example.com")
    assert parse_lines(None) == parse_lines(7) == ()


# --------------------------------------------------------------------------- properties

names = st.from_regex(r"\A(\*\.)?[a-z0-9]{1,8}(\.[a-z0-9-]{1,6}){0,3}\Z")
v4 = st.ip_addresses(v=4).map(str)
v6 = st.ip_addresses(v=6).map(str).filter(lambda a: "%" not in a)
addresses = st.lists(st.one_of(v4, v6), min_size=1, max_size=3, unique=True)
good_entries = st.dictionaries(names, addresses, max_size=15).filter(
    lambda e: all(not _is_address(h) for h in e))


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


@given(good_entries)
@settings(max_examples=300)
def test_what_the_writer_writes_the_reader_reads_back(entries: dict[str, list[str]]) -> None:
    text = entries_text(entries)
    reading = read_entries(text)
    assert reading.refused == ()
    assert reading.entries == {h: tuple(a) for h, a in sorted(entries.items())}
    assert entries_text(reading.entries) == text
    assert text.count("\n") == len(entries)


messy_hosts = st.one_of(names, st.text(max_size=12), st.sampled_from(
    ["A.Example.com.", "a.example.com", ".", "10.0.0.1", "#x", "a b"]))
messy_addresses = st.lists(st.one_of(v4, v6, st.text(max_size=8),
                                     st.sampled_from(["fe80::1%eth0", "10.0.0", " 10.0.0.1 "])),
                           max_size=4)


@given(st.dictionaries(messy_hosts, messy_addresses, max_size=10))
@settings(max_examples=300)
def test_the_writer_never_writes_a_line_the_reader_refuses(
        entries: dict[str, list[str]]) -> None:
    text = entries_text(entries)
    reading = read_entries(text)
    assert reading.refused == ()
    assert entries_text(reading.entries) == text


@given(st.text(max_size=300))
@settings(max_examples=500)
def test_the_reader_never_crashes_and_keeps_only_usable_entries(text: str) -> None:
    reading = read_entries(text)
    lines = text.count("\n") + 1
    assert all(1 <= r.line <= lines and r.reason for r in reading.refused)
    for host, addrs in reading.entries.items():
        assert host and host == host.lower() and not host.endswith(".")
        assert not any(ch.isspace() for ch in host)
        assert addrs and len(set(addrs)) == len(addrs)
        assert all(str(ipaddress.ip_address(a)) == a for a in addrs)
    assert list(reading.entries) == sorted(reading.entries)


# No digit and no colon: such a line can hold no address, so it can never compete with a
# good line for its host.
garbage = st.text(alphabet=st.characters(exclude_characters="\n\r:0123456789",
                                         exclude_categories=["Cs"]), max_size=30)


@given(good_entries, st.lists(garbage, max_size=12), st.randoms())
@settings(max_examples=300)
def test_good_lines_survive_the_bad_lines_around_them(
        entries: dict[str, list[str]], noise: list[str], rnd: Any) -> None:
    lines = [*entries_text(entries).splitlines(), *noise]
    rnd.shuffle(lines)
    reading = read_entries("\n".join(lines))
    assert reading.entries == {h: tuple(a) for h, a in sorted(entries.items())}
    # Every refusal is about a line of noise.
    assert {lines[r.line - 1] for r in reading.refused} <= set(noise)


def test_many_bad_addresses_make_a_short_reason() -> None:
    reading = read_entries("a.example.com " + " ".join(f"bad{i}" for i in range(50)) + "\n")
    assert reading.refused[0].reason == ("not an IPv4 or IPv6 address, left out: "
                                         "bad0, bad1, bad2, bad3, bad4 and 45 more")


def test_the_agent_side_does_not_load_the_controller() -> None:
    code = ("import sys, hairpin_proxy.etchosts, hairpin_proxy.published; "
            "loaded = [m for m in sys.modules if m.startswith('hairpin_proxy.controller')]; "
            "print(loaded); sys.exit(1 if loaded else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
