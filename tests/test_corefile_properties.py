"""Properties of apply/remove over every corpus file, random host sets and answers (hypothesis).

The oracles (tests/corefiles/oracle.py) find our lines by their text, not with the editor's
logic: each root block must hold one run of exactly the expected set, and every other line
must be the input's, byte for byte.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.corefile import (
    LEGACY_MARKER,
    Answers,
    apply,
    managed_hosts,
    parse,
    remove,
    strays,
)
from tests.corefiles import SAMPLES, Sample
from tests.corefiles.migrate import migrate
from tests.corefiles.oracle import check_one_set_per_root, lines, strip_ours

_ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"
LABEL = st.one_of(st.sampled_from(_ALNUM), st.builds(
    lambda a, mid, z: a + mid + z,
    st.sampled_from(_ALNUM), st.text(_ALNUM + "-_", max_size=6), st.sampled_from(_ALNUM)))
NAME = st.lists(LABEL, min_size=1, max_size=4).map(".".join)
HOST = st.one_of(NAME, NAME.map(lambda n: "*." + n),
                 st.sampled_from(["a.example.com", "*.apps.example.com", "c.example.com"]))
HOSTS = st.lists(HOST, max_size=8)
ANSWERS = st.sampled_from([
    Answers.of(["10.96.0.20"]),
    Answers.of(["fd00:10:96::20"]),
    Answers.of(["10.96.0.20", "fd00:10:96::20"]),
    Answers.of(["10.96.0.20", "10.96.0.21", "fd00::1", "fd00::2"], ttl=60),
])

PROPERTY = settings(max_examples=25, deadline=None)
# Layouts kubeadm's migration reads as CoreDNS does (it splits neither ".{" nor inline blocks).
MIGRATABLE = [s for s in SAMPLES if s.name not in ("helm-no-port", "multi-block")]


def check_result(sample: Sample, out: str, hosts: list[str], answers: Answers) -> None:
    port = sample.dns_port
    parse(out)
    check_one_set_per_root(out, hosts, answers, port)
    # Every line that is not ours is the input's, in order.
    assert strip_ours(out, port) == strip_ours(sample.text, port)
    assert managed_hosts(out, dns_port=port) == tuple(sorted(set(hosts)))
    # Rules elsewhere are reported, never edited.
    assert [(s.where, s.what) for s in strays(out, dns_port=port)] == [
        (s.where, s.what) for s in strays(sample.text, dns_port=port)]
    # Line ends of the new lines follow the file's.
    if "\r\n" in sample.text:
        assert out.count("\n") == out.count("\r\n")
    else:
        assert "\r" not in out


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
@PROPERTY
@given(hosts=HOSTS, answers=ANSWERS)
def test_apply_properties(sample: Sample, hosts: list[str], answers: Answers) -> None:
    text, port = sample.text, sample.dns_port
    out = apply(text, hosts, answers=answers, dns_port=port)
    check_result(sample, out, hosts, answers)
    # Idempotent, whatever the order or repetition of the hosts.
    assert apply(out, hosts, answers=answers, dns_port=port) == out
    assert apply(out, list(reversed(hosts)) + hosts, answers=answers, dns_port=port) == out
    # Removal gives the same text whether or not our rules were applied first.
    assert remove(out, dns_port=port) == remove(text, dns_port=port) == strip_ours(text, port)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
@PROPERTY
@given(first=HOSTS, second=HOSTS, answers=ANSWERS, other=ANSWERS)
def test_last_apply_wins(sample: Sample, first: list[str], second: list[str],
                         answers: Answers, other: Answers) -> None:
    text, port = sample.text, sample.dns_port
    once = apply(text, first, answers=answers, dns_port=port)
    twice = apply(once, second, answers=other, dns_port=port)
    if first:
        # Where the earlier set stood, the new one stands.
        assert twice == apply(text, second, answers=other, dns_port=port)
    check_result(sample, twice, second, other)


@pytest.mark.parametrize("sample", MIGRATABLE, ids=lambda s: s.name)
@PROPERTY
@given(first=HOSTS, second=HOSTS, answers=ANSWERS)
def test_apply_after_kubeadm_migration_gives_one_set(sample: Sample, first: list[str],
                                                     second: list[str],
                                                     answers: Answers) -> None:
    port = sample.dns_port
    out = apply(sample.text, first, answers=answers, dns_port=port)
    # Comments (our markers) gone, everything re-indented.
    migrated = migrate(out)
    assert managed_hosts(migrated, dns_port=port) == tuple(sorted(set(first)))
    again = apply(migrated, second, answers=answers, dns_port=port)
    check_one_set_per_root(again, second, answers, port)
    assert strip_ours(again, port) == strip_ours(migrated, port)
    assert apply(again, second, answers=answers, dns_port=port) == again
    assert managed_hosts(again, dns_port=port) == tuple(sorted(set(second)))


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
def test_the_corpus_as_it_is(sample: Sample) -> None:
    text, port = sample.text, sample.dns_port
    assert managed_hosts(text, dns_port=port) == sample.managed
    assert len(strays(text, dns_port=port)) == sample.strays
    assert sum(line.rstrip().endswith(LEGACY_MARKER) for line in lines(text)) \
        == sample.legacy_lines
    assert remove(text, dns_port=port) == strip_ours(text, port)
    if sample.managed:
        # Keeping what is there converts it to one set of the current form in one write.
        answers = Answers.of(["10.96.0.20"])
        kept = apply(text, sample.managed, answers=answers, dns_port=port)
        check_one_set_per_root(kept, sample.managed, answers, port)
        assert strip_ours(kept, port) == strip_ours(text, port)
