"""Several answer sets (one per proxy Service): apply, managed_groups, import and removal.

Besides the text oracles (tests/corefiles/oracle.py), results are checked by what CoreDNS would
answer: ``answer`` below walks the root block's template stanzas the way the template plugin
does (all stanzas form one handler; they are tried in file order, a stanza for another query
type is skipped, the first whose regex matches answers, a non-matching stanza without
``fallthrough`` answers SERVFAIL, and when none matches the query goes on to the next plugin).
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.corefile import (
    BEGIN_MARKER,
    END_MARKER,
    MAX_CONFIGMAP_BYTES,
    Answers,
    CorefileError,
    apply,
    import_snippet,
    managed_groups,
    managed_hosts,
    parse,
    remove,
    rules,
    rules_bytes,
    strays,
)
from tests.corefiles import BY_NAME, SAMPLES, Sample
from tests.corefiles.migrate import migrate
from tests.corefiles.oracle import (
    check_groups_per_root,
    expected_groups_set,
    expected_pairs,
    plain,
    strip_ours,
)

A1 = Answers.of(["10.96.0.20"])
A2 = Answers.of(["10.96.0.21", "fd00::21"])
A3 = Answers.of(["fd00::22"])
A4 = Answers.of(["10.96.0.23"], ttl=60)
A5 = Answers.of(["10.96.0.20"], ttl=30)  # A1's address, another TTL: another answer set
POOL = (A1, A2, A3, A4, A5)
KUBEADM = BY_NAME["kubeadm"].text
Groups = list[tuple[list[str], Answers]]

# --- CoreDNS's template plugin, as far as our stanzas use it ----------------------------------

_RR = re.compile(r"\{\{ \.Name \}\} (\d+) IN (A|AAAA) (\S+)")
SERVFAIL = ("SERVFAIL",)


def answer(text: str, qtype: str, name: str, dns_port: int = 53) -> tuple[str, ...] | None:
    """The addresses CoreDNS answers ``name`` (lower-cased, fully qualified) with, from the
    first root block's templates; None when the query goes on to the next plugin."""
    block = parse(text).root_blocks(dns_port)[0]
    for d in block.directives:
        if d.name != "template":
            continue
        if d.args[1] not in (qtype, "ANY"):
            continue
        inner = [i for b in d.blocks for i in b.directives]
        regexes = [rx for i in inner if i.name == "match" for rx in i.args]
        if any(re.search(rx, name) for rx in regexes):
            return tuple(m[3] for i in inner if i.name == "answer" for rr in i.args
                         if (m := _RR.fullmatch(rr)))
        if not any(i.name == "fallthrough" for i in inner):
            return SERVFAIL
    return None


def wanted_answer(groups: Groups, qtype: str, name: str) -> tuple[str, ...] | None:
    """What a name should resolve to: the group of its most specific host. That is its exact
    host, else the one-label wildcard of the domain right under its first label, else the
    any-depth wildcard of the nearest domain above it; a wildcard never stands for a label
    starting with "_"."""
    labels = name.lower().removesuffix(".").split(".")
    wanted = [".".join(labels)]
    for i in range(1, len(labels)):
        if not labels[i - 1] or labels[i - 1].startswith("_"):
            break
        domain = ".".join(labels[i:])
        wanted += ["*." + domain] if i == 1 else []
        wanted.append("**." + domain)
    # The one-label wildcard before the any-depth one of the same domain.
    for host in wanted:
        for hosts, answers in groups:
            if host in {h.lower() for h in hosts}:
                return answers.ipv4 if qtype == "A" else answers.ipv6
    return None


def probes(groups: Groups) -> list[str]:
    names = ["nothing.example.invalid."]
    for hosts, _ in groups:
        for h in hosts:
            base = h.removeprefix("*").removeprefix("*.")
            names += [f"{base}.", f"x.{base}.", f"_acme.{base}.", f"a.b.{base}.",
                      f"a._b.{base}.", f"{h.upper().replace('*', 'w')}."]
    return names


def check_dns(text: str, groups: Groups, dns_port: int = 53) -> None:
    for name in probes(groups):
        for qtype in ("A", "AAAA"):
            assert answer(text, qtype, name.lower(), dns_port) == \
                wanted_answer(groups, qtype, name), (qtype, name)


def mapping(groups: Groups) -> dict[str, Answers]:
    return {h: a for hosts, a in groups for h in hosts}


# --- strategies ------------------------------------------------------------------------------

# Few labels and domains, so that exact hosts of one group fall under wildcards of another.
DOMAIN = st.sampled_from(["example.com", "apps.example.com", "b.example.org", "svc.test"])
LABEL = st.sampled_from(["a", "b", "web", "x-1", "_acme", "apps", "w", "b.c"])
HOST = st.one_of(st.builds(lambda lab, d: f"{lab}.{d}", LABEL, DOMAIN),
                 DOMAIN.map(lambda d: "*." + d), DOMAIN.map(lambda d: "**." + d), DOMAIN)


@st.composite
def partitions(draw: st.DrawFn, max_groups: int = 4, max_hosts: int = 12) -> Groups:
    """Distinct hosts (case-insensitively) split over groups with distinct answers."""
    hosts = draw(st.lists(HOST, max_size=max_hosts, unique_by=str.lower))
    answers = draw(st.lists(st.sampled_from(POOL), min_size=1, max_size=max_groups,
                            unique=True))
    owners = draw(st.lists(st.integers(0, len(answers) - 1), min_size=len(hosts),
                           max_size=len(hosts)))
    groups: Groups = [([], a) for a in answers]
    for host, k in zip(hosts, owners, strict=True):
        groups[k][0].append(host)
    return groups


PROPERTY = settings(max_examples=12, deadline=None)
# Corpus files without rules of ours, and a few holding some (converted on the first write).
PLAIN = [s for s in SAMPLES if not s.managed and not s.strays and not s.legacy_lines]
WITH_RULES = [BY_NAME[n] for n in ("old-rewrite", "legacy", "duplicated", "split-in-root",
                                   "kubeadm-migrated", "groups")]


# --- properties ------------------------------------------------------------------------------


@pytest.mark.parametrize("sample", PLAIN, ids=lambda s: s.name)
@PROPERTY
@given(groups=partitions())
def test_apply_groups_over_the_corpus(sample: Sample, groups: Groups) -> None:
    text, port = sample.text, sample.dns_port
    out = apply(text, groups, dns_port=port)
    check_groups_per_root(out, groups, port)
    assert strip_ours(out, port) == strip_ours(text, port)
    # Round trip: what the rules say is what was asked.
    assert managed_groups(out, dns_port=port) == dict(sorted(mapping(groups).items()))
    assert managed_hosts(out, dns_port=port) == tuple(sorted(mapping(groups)))
    # Idempotent, whatever the order of the groups and of their hosts.
    assert apply(out, groups, dns_port=port) == out
    shuffled = [(list(reversed(h)), a) for h, a in reversed(groups)]
    assert apply(out, shuffled, dns_port=port) == out
    read = managed_groups(out, dns_port=port)
    assert apply(out, [([h], a) for h, a in read.items()], dns_port=port) == out
    # Removing all of them gives back the file as it was before ours were added.
    assert remove(out, dns_port=port) == text
    assert strays(out, dns_port=port) == strays(text, dns_port=port)


@pytest.mark.parametrize("sample", WITH_RULES, ids=lambda s: s.name)
@PROPERTY
@given(groups=partitions())
def test_earlier_rules_are_converted_in_one_write(sample: Sample, groups: Groups) -> None:
    text, port = sample.text, sample.dns_port
    out = apply(text, groups, dns_port=port)
    check_groups_per_root(out, groups, port)
    assert strip_ours(out, port) == strip_ours(text, port)
    assert apply(out, groups, dns_port=port) == out
    assert remove(out, dns_port=port) == remove(text, dns_port=port) == strip_ours(text, port)


@settings(max_examples=150, deadline=None)
@given(groups=partitions(max_groups=5, max_hosts=16))
def test_each_name_gets_its_own_groups_answer(groups: Groups) -> None:
    out = apply(KUBEADM, groups)
    check_dns(out, groups)
    # Every host is in exactly one A stanza and one AAAA stanza.
    block = parse(out).root_blocks(53)[0]
    for qtype in ("A", "AAAA"):
        seen: list[str] = []
        for d in block.directives:
            if d.name == "template" and d.args[1] == qtype:
                seen += sorted(rules.template_hosts(d))
        assert sorted(seen) == sorted(mapping(groups))
    # The same rules survive kubeadm's migration (no comments, re-indented), read back alike.
    migrated = migrate(out)
    check_dns(migrated, groups)
    assert managed_groups(migrated) == managed_groups(out)
    again = apply(migrated, groups)
    check_groups_per_root(again, groups)
    assert strip_ours(again) == strip_ours(migrated)


@settings(max_examples=80, deadline=None)
@given(groups=partitions(max_groups=5, max_hosts=16))
def test_both_ways_of_finding_hosts_under_any_depth_wildcards_agree(groups: Groups) -> None:
    # Few any-depth wildcards are matched against the exact hosts by substring search, many
    # by a walk over each host's labels: the same layout either way.
    with mock.patch.object(rules, "_FEW_DOMAINS", 0):
        walked = apply(KUBEADM, groups)
    assert walked == apply(KUBEADM, groups)
    check_dns(walked, groups)


@PROPERTY
@given(groups=partitions())
def test_import_snippet_with_groups(groups: Groups) -> None:
    snippet = import_snippet(groups)
    assert snippet == expected_groups_set(groups, "", "    ", "\n")
    spliced = ".:53 {\n" + snippet + "}\n"
    assert managed_groups(spliced) == dict(sorted(mapping(groups).items()))
    check_dns(spliced, groups)


@PROPERTY
@given(hosts=st.lists(HOST, max_size=10), answers=st.sampled_from(POOL))
def test_one_group_is_exactly_the_single_answer_form(hosts: list[str], answers: Answers) -> None:
    for sample in (BY_NAME["kubeadm"], BY_NAME["crlf"], BY_NAME["tabs"], BY_NAME["old-rewrite"]):
        single = apply(sample.text, hosts, answers=answers)
        assert apply(sample.text, [(hosts, answers)]) == single
        # Extra groups without hosts change nothing.
        assert apply(sample.text, [([], A3), (hosts, answers), ([], A4)]) == single
    assert import_snippet([(hosts, answers)]) == import_snippet(hosts, answers=answers)


# --- layout, examples ------------------------------------------------------------------------


def pair(hosts: list[str], answers: Answers) -> str:
    return expected_groups_set([(hosts, answers)], "    ", "    ", "\n").split("\n", 1)[1] \
        .rsplit("    # END", 1)[0]


def test_two_groups_golden() -> None:
    out = apply(".:53 {\n    errors\n}\n", [(["b.example.com", "*.apps.example.com"], A2),
                                            (["a.example.com"], A1)])
    assert out == (
        ".:53 {\n"
        f"    {BEGIN_MARKER}\n"
        "    template IN A {\n"
        r"        match (?i)^(?P<hairpin_proxy>a\.example\.com)\.$" "\n"
        '        answer "{{ .Name }} 10 IN A 10.96.0.20"\n'
        "        fallthrough\n"
        "    }\n"
        "    template IN AAAA {\n"
        r"        match (?i)^(?P<hairpin_proxy>a\.example\.com)\.$" "\n"
        "        rcode NOERROR\n"
        "        fallthrough\n"
        "    }\n"
        "    template IN A {\n"
        r"        match (?i)^(?P<hairpin_proxy>b\.example\.com)\.$" "\n"
        r"        match (?i)^(?P<hairpin_proxy>[^._][^.]*\.(?:apps\.example\.com))\.$" "\n"
        '        answer "{{ .Name }} 10 IN A 10.96.0.21"\n'
        "        fallthrough\n"
        "    }\n"
        "    template IN AAAA {\n"
        r"        match (?i)^(?P<hairpin_proxy>b\.example\.com)\.$" "\n"
        r"        match (?i)^(?P<hairpin_proxy>[^._][^.]*\.(?:apps\.example\.com))\.$" "\n"
        '        answer "{{ .Name }} 10 IN AAAA fd00::21"\n'
        "        fallthrough\n"
        "    }\n"
        f"    {END_MARKER}\n"
        "    errors\n"
        "}\n")
    assert managed_groups(out) == {"*.apps.example.com": A2, "a.example.com": A1,
                                   "b.example.com": A2}


def test_a_wildcard_over_another_groups_host_comes_after_every_other_stanza() -> None:
    # "*.example.com" would also match a.example.com: its stanzas must come after the exact
    # name's, although its group sorts first.
    groups: Groups = [(["*.example.com", "*.example.org", "z.example.net"], A1),
                      (["a.example.com"], A2)]
    out = apply(".:53 {\n}\n", groups)
    assert out == (".:53 {\n" f"    {BEGIN_MARKER}\n"
                   + pair(["*.example.org", "z.example.net"], A1)
                   + pair(["a.example.com"], A2)
                   + pair(["*.example.com"], A1)
                   + f"    {END_MARKER}\n" + "}\n")
    assert answer(out, "A", "a.example.com.") == ("10.96.0.21",)
    assert answer(out, "A", "b.example.com.") == ("10.96.0.20",)
    assert answer(out, "AAAA", "a.example.com.") == ("fd00::21",)
    assert answer(out, "AAAA", "b.example.com.") == ()
    assert answer(out, "A", "_acme.example.com.") is None
    # An exact host starting with "_" is not matched by the wildcard: no second pair needed.
    out = apply(".:53 {\n}\n", [(["*.example.com"], A1), (["_x.example.com"], A2)])
    assert out.count("template IN A ") == 2


def test_a_host_goes_to_one_group_only() -> None:
    with pytest.raises(CorefileError, match=r"'a\.b' is in two answer sets .*10\.96\.0\.20"):
        apply(KUBEADM, [(["a.b", "c.d"], A1), (["a.b"], A2)])
    # The regexes ignore case: two spellings are one name.
    with pytest.raises(CorefileError, match="two answer sets"):
        apply(KUBEADM, [(["A.b"], A1), (["a.B"], A2)])
    with pytest.raises(CorefileError, match="two answer sets"):
        import_snippet([(["*.b"], A1), (["*.B"], A2)])
    # Equal answers are one group.
    assert apply(KUBEADM, [(["a.b"], A1), (["c.d", "a.b"], A1)]) == \
        apply(KUBEADM, ["a.b", "c.d"], answers=A1)


def test_bad_groups_are_refused() -> None:
    with pytest.raises(CorefileError, match="no proxy address"):
        apply(KUBEADM, [(["a.b"], A1), (["c.d"], Answers())])
    assert apply(KUBEADM, [([], Answers())]) == KUBEADM
    with pytest.raises(CorefileError):
        apply(KUBEADM, [(["a b"], A1)])
    for bad in (["a.b"], [("a.b",)], [(["a.b"], "10.0.0.1")], "ab", [("a.b", A1)]):
        with pytest.raises((TypeError, CorefileError)):
            apply(KUBEADM, bad)  # type: ignore[arg-type]


def test_several_groups_over_the_size_limits() -> None:
    groups: Groups = [([f"h{i:05d}.{k}.a-long-subdomain.example.com" for i in range(900)]
                       + [f"*.w{i}.g{k}.example.org" for i in range(100)], POOL[k])
                      for k in range(3)]
    out = apply(KUBEADM, groups)
    regexes = [rx for line in out.splitlines() if line.lstrip().startswith("match ")
               for rx in line.split()[1:]]
    assert len(regexes) > 12  # several per stanza
    assert all(len(rx.encode()) <= rules.MAX_REGEX for rx in regexes)
    assert managed_groups(out) == dict(sorted(mapping(groups).items()))
    check_dns(out, [(g[:3] + g[-3:], a) for g, a in groups])
    # Over the ConfigMap limit in total, though each group alone would fit.
    # (Names that share little: the compact spelling cannot shrink them much.)
    big: Groups = [([f"{hashlib.sha256(f'{k}-{i}'.encode()).hexdigest()[:40]}.g{k}.example"
                     for i in range(5000)], POOL[k]) for k in range(3)]
    apply(KUBEADM, big[:1])
    with pytest.raises(CorefileError, match="ConfigMap limit"):
        apply(KUBEADM, big)
    assert MAX_CONFIGMAP_BYTES == 1024 * 1024


def test_rules_bytes_of_groups() -> None:
    groups: Groups = [([f"h{i}.example.com" for i in range(50)] + ["*.apps.example.com"], A1),
                      ([f"x{i}.example.org" for i in range(30)], A2), ([], A3)]
    hosts = [h for g, _ in groups for h in g]
    size = rules_bytes(groups)
    # The hosts' bytes, plus each non-empty group's fixed stanza text.
    assert size > rules_bytes(hosts) + 2 * 200
    # Close to what the stanzas take in the plain spelling, and no less than they take.
    text = apply(".:53 {\n}\n", groups)
    frame = len(".:53 {\n}\n") + len(f"    {BEGIN_MARKER}\n    {END_MARKER}\n")
    assert abs(len(plain(text).encode()) - frame - size) <= 8
    assert len(text.encode()) - frame <= size
    assert rules_bytes([(hosts[:50], A1)]) < rules_bytes([(hosts[:50], A1), (hosts[50:], A2)])
    assert rules_bytes([]) == 0
    with pytest.raises(TypeError):
        rules_bytes(["a.b", (["c.d"], A1)])  # type: ignore[arg-type]


def test_stanzas_of_several_groups_outside_the_root_are_strays() -> None:
    out = apply(".:53 {\n}\n", [(["a.b"], A1), (["c.d"], A2)])
    moved = "x.org {\n" + out.split("{\n", 1)[1] + ".:53 {\n    errors\n}\n"
    assert [s.line for s in strays(moved)] == [3, 8, 13, 18]
    assert managed_groups(moved) == {}
    assert remove(moved) == moved


def test_managed_groups_reads_what_coredns_would_answer() -> None:
    # Hand-edited: the same host in two of our stanzas of one type; the first one answers.
    text = ".:53 {\n" + pair(["a.b"], A1) + pair(["a.b", "c.d"], A4) + "}\n"
    assert text.count("template IN A ") == 2
    assert managed_groups(text) == {"a.b": A1, "c.d": A4}
    assert answer(text, "A", "a.b.") == A1.ipv4
    # Rewrite rules of earlier versions: the hosts, without addresses we could name.
    assert managed_groups(BY_NAME["old-rewrite"].text) == {
        "*.apps.example.com": Answers(), "a.example.com": Answers(), "b.example.com": Answers()}
    # Answers not as we write them are not read.
    odd = apply(".:53 {\n}\n", ["a.b"], answers=A1).replace(
        '"{{ .Name }} 10 IN A 10.96.0.20"', '"{{ .Name }} 10 IN A 10.0.0.300"')
    assert managed_groups(odd) == {"a.b": Answers()}


def test_the_groups_corpus_file() -> None:
    sample = BY_NAME["groups"]
    read = managed_groups(sample.text)
    assert set(read.values()) == {Answers.of(["10.96.0.20", "fd00:10:96::20"]),
                                  Answers.of(["10.96.0.40"])}
    groups: Groups = [([h for h, a in read.items() if a == answers], answers)
                      for answers in set(read.values())]
    # Written by this version: applying what it says changes nothing, and it layers a
    # wildcard over another group's host as the layout requires.
    assert apply(sample.text, groups) == sample.text
    assert len(expected_pairs(groups)) == 3
    check_dns(sample.text, groups)
    migrated = BY_NAME["groups-migrated"]
    assert managed_groups(migrated.text) == read
    assert strip_ours(apply(migrated.text, groups)) == strip_ours(migrated.text)


def test_apply_is_independent_of_the_order_of_groups() -> None:
    groups: Groups = [(["a.example.com", "*.x.example"], A1), (["b.example.com"], A2),
                      (["c.example.com", "q.x.example"], A3), (["d.example.com"], A4)]
    out = apply(KUBEADM, groups)
    rng = random.Random(7)
    for _ in range(10):
        shuffled = groups[:]
        rng.shuffle(shuffled)
        assert apply(KUBEADM, shuffled) == out
    check_dns(out, groups)


def _hosts(groups: Sequence[tuple[Sequence[str], Answers]]) -> list[str]:
    return [h for hosts, _ in groups for h in hosts]


def test_changing_the_groups_rewrites_the_set_in_place() -> None:
    first = apply(BY_NAME["talos"].text, [(["a.b"], A1), (["c.d"], A2)])
    second = apply(first, [(["a.b", "c.d"], A3)])
    assert second == apply(BY_NAME["talos"].text, ["a.b", "c.d"], answers=A3)
    assert _hosts([(["a.b"], A1), (["c.d"], A2)]) == list(managed_groups(first))
