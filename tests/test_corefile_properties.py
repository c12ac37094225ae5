"""Properties of apply/remove over every corpus file and random host sets (hypothesis).

The oracles here are deliberately line-based and independent of the module's parser: the
managed block is found by its marker lines, rules are read by splitting on blanks.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hairpin_proxy.corefile import (
    BEGIN_MARKER,
    END_MARKER,
    LEGACY_MARKER,
    apply,
    managed_hosts,
    parse,
    remove,
)
from tests.corefiles import SAMPLES, TARGET, Sample

_ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"
LABEL = st.one_of(st.sampled_from(_ALNUM), st.builds(
    lambda a, mid, z: a + mid + z,
    st.sampled_from(_ALNUM), st.text(_ALNUM + "-", max_size=6), st.sampled_from(_ALNUM)))
NAME = st.lists(LABEL, min_size=1, max_size=4).map(".".join)
HOST = st.one_of(NAME, NAME.map(lambda n: "*." + n))
HOSTS = st.lists(HOST, max_size=8)

PROPERTY = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def strip_managed(text: str) -> str:
    out: list[str] = []
    inside = False
    for line in lines(text):
        stripped = line.strip()
        if stripped == BEGIN_MARKER:
            assert not inside
            inside = True
        elif stripped == END_MARKER:
            assert inside
            inside = False
        elif not inside:
            out.append(line)
    assert not inside
    return "".join(out)


def strip_legacy(text: str) -> str:
    return "".join(line for line in lines(text) if not line.rstrip().endswith(LEGACY_MARKER))


def managed_sections(text: str) -> list[list[str]]:
    sections: list[list[str]] = []
    current: list[str] | None = None
    for line in lines(text):
        stripped = line.strip()
        if stripped == BEGIN_MARKER:
            current = []
        elif stripped == END_MARKER:
            assert current is not None
            sections.append(current)
            current = None
        elif current is not None:
            current.append(line)
    return sections


def hosts_in(section: list[str]) -> list[str]:
    found = []
    for line in section:
        words = line.split()
        assert words[:2] == ["rewrite", "name"]
        if words[2] == "exact":
            assert len(words) == 5 and words[4] == TARGET
            found.append(words[3])
        else:
            assert words[2] == "regex" and words[4:] == [TARGET, "answer", "auto"]
            m = re.fullmatch(r"\^\[\^\.\]\+\\\.(.+)\\\.\?\$", words[3])
            assert m, words[3]
            found.append("*." + m[1].replace("\\.", "."))
    return found


def check_regexes(section: list[str], hosts: set[str]) -> None:
    """Each wildcard's regex matches one label in front of its domain, and nothing more."""
    for line in section:
        words = line.split()
        if words[2] != "regex":
            continue
        pattern = re.compile(words[3])
        domain = next(h[2:] for h in hosts if h.startswith("*.") and
                      pattern.search("x." + h[2:] + "."))
        assert pattern.search(f"label.{domain}.") and pattern.search(f"label.{domain}")
        assert not pattern.search(f"{domain}.")
        assert not pattern.search(f"a.b.{domain}.")


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
@PROPERTY
@given(hosts=HOSTS)
def test_apply_properties(sample: Sample, hosts: list[str]) -> None:
    text, port = sample.text, sample.dns_port
    out = apply(text, hosts, target=TARGET, dns_port=port)

    # Output parses, and applying again changes nothing.
    parse(out)
    assert apply(out, hosts, target=TARGET, dns_port=port) == out
    assert apply(out, list(reversed(hosts)) + hosts, target=TARGET, dns_port=port) == out

    # Everything outside the managed block is the input, less the original tool's lines.
    assert strip_managed(out) == strip_legacy(text)

    # One block per root server block, holding exactly the hosts, sorted.
    sections = managed_sections(out)
    if hosts:
        assert len(sections) == sample.root_blocks
        for section in sections:
            assert hosts_in(section) == sorted(set(hosts))
            check_regexes(section, set(hosts))
    else:
        assert sections == []
    assert managed_hosts(out, dns_port=port) == tuple(sorted(set(hosts)))

    # Line ends of the new lines follow the file's.
    if "\r\n" in text:
        assert out.count("\n") == out.count("\r\n")
    else:
        assert "\r" not in out


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
@PROPERTY
@given(first=HOSTS, second=HOSTS)
def test_last_apply_wins_and_removal_round_trips(sample: Sample, first: list[str],
                                                 second: list[str]) -> None:
    text, port = sample.text, sample.dns_port
    once = apply(text, first, target=TARGET, dns_port=port)
    assert apply(once, second, target=TARGET, dns_port=port) == apply(
        text, second, target=TARGET, dns_port=port)
    baseline = strip_legacy(text)
    assert remove(once, dns_port=port) == baseline
    assert apply(once, [], target=TARGET, dns_port=port) == baseline


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
def test_empty_host_set_leaves_a_file_without_our_block_untouched(sample: Sample) -> None:
    text = sample.text
    expected = text if sample.legacy_lines == 0 else strip_legacy(text)
    assert len(lines(text)) - len(lines(expected)) == sample.legacy_lines
    assert apply(text, [], target=TARGET, dns_port=sample.dns_port) == expected
    assert remove(text, dns_port=sample.dns_port) == expected
