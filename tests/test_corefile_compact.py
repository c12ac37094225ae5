"""The compact spelling of our regexes answers exactly as the plain one (hypothesis).

The plain spelling (each name in full) is what earlier versions wrote and what clusters hold
now; it is built here from the hosts, not by the code under test. Both Corefiles are read by
the project's own reader (``parse``, ``managed_groups``) and asked every query type of names
around the hosts, through a model of CoreDNS's template handler (plugin/template: the
stanzas of a server block tried in order; a stanza whose type is not the query's, or is
asked ANY, is passed over as CoreDNS does; the first whose regex matches answers with its
``answer`` lines, ``{{ .Name }}`` being the query name; else on to the next plugin).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.corefile import (
    Answers,
    apply,
    compact,
    managed_groups,
    managed_hosts,
    match_regexes,
    parse,
    remove,
    rules,
)
from hairpin_proxy.corefile.compact import decode, encode
from hairpin_proxy.corefile.incremental import bar_count
from hairpin_proxy.corefile.names import regex_escape
from tests.corefiles import BY_NAME
from tests.corefiles.oracle import plain

# Few characters, so that names share prefixes and suffixes and are prefixes of each other.
_CHARS = "abAB01-"
LABEL = st.one_of(st.text(_CHARS, min_size=1, max_size=4).filter(lambda s: s[0] != "-"),
                  st.sampled_from(["_acme-challenge", "www", "WWW", "api", "api-1", "ap"]))
DOMAIN = st.sampled_from(["example.com", "shop.example.com", "b.shop.example.com", "example.org",
                          "Example.COM", "xample.com", "com.example.com"])
NAME = st.builds(lambda labels, domain: ".".join([*labels, domain]),
                 st.lists(LABEL, min_size=0, max_size=3), DOMAIN)
HOST = st.one_of(NAME, NAME, NAME.map(lambda n: "*." + n), NAME.map(lambda n: "**." + n))
ANSWERS = [Answers.of(["10.96.0.20"]), Answers.of(["10.96.0.21", "fd00::21"], ttl=30),
           Answers.of(["fd00::22"])]
QTYPES = ("A", "AAAA", "ANY", "MX", "TXT", "CNAME")
ROOT = BY_NAME["kubeadm"]


def ask(text: str, name: str, qtype: str) -> tuple[tuple[str, ...], ...] | None:
    """What the root block's template stanzas answer for ``name`` (no trailing dot) and
    ``qtype``: the answering stanza's lines, or None (on to the next plugin)."""
    qname = name + "."
    (block, *_) = parse(text).root_blocks(ROOT.dns_port)
    for d in block.directives:
        if d.name != "template":
            continue
        if d.args[1] != qtype and qtype != "ANY":
            continue
        inner = [i for b in d.blocks for i in b.directives]
        if any(re.search(rx, qname) for i in inner if i.name == "match" for rx in i.args):
            return tuple((i.name, *(a.replace("{{ .Name }}", qname) for a in i.args))
                         for i in inner if i.name in ("answer", "rcode"))
    return None


def probes(hosts: list[str]) -> set[str]:
    out: set[str] = set()
    for host in hosts:
        base = host.lstrip("*").removeprefix(".")
        out |= {base, base.upper(), "x." + base, "x.y." + base, "_acme-challenge." + base,
                "a" + base, base[1:], base + ".x", base.rpartition(".")[0]}
        out |= {base.partition(".")[2], base.replace("-", "")}
    return {p for p in out if p and not p.startswith(".")}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(_CHARS + "._ü", min_size=1, max_size=8), unique=True, min_size=1,
                max_size=30))
def test_encode_reads_back_and_is_never_longer_than_the_names(names: list[str]) -> None:
    body = encode(names)
    assert decode(body) == sorted(names)
    # Every bar adds one name: the incremental edit counts a regex's names so.
    assert bar_count(body, 0, len(body)) == len(names)
    assert len(body.encode()) <= len("|".join(map(regex_escape, names)).encode())
    # It matches those names and no other (Python's re reads the subset as RE2 does).
    for name in {*names, *(n + "a" for n in names), *(n[1:] for n in names)}:
        assert (re.fullmatch(f"(?:{body})", name) is not None) is (name in names)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(HOST, st.sampled_from(range(len(ANSWERS)))), max_size=25))
def test_compact_rules_answer_every_name_and_type_as_the_plain_ones(
        owned: list[tuple[str, int]]) -> None:
    owner: dict[str, int] = {}
    for host, k in owned:
        owner.setdefault(host.lower(), k)
    groups = [([h for h, k in owner.items() if k == n], a) for n, a in enumerate(ANSWERS)]
    compact_text = apply(ROOT.text, groups)
    plain_text = plain(compact_text)
    assert managed_groups(compact_text) == managed_groups(plain_text)
    assert set(managed_hosts(compact_text)) == set(owner)
    for name in probes(list(owner)):
        for qtype in QTYPES:
            assert ask(compact_text, name, qtype) == ask(plain_text, name, qtype), (name, qtype)
    # A cluster's plain rules are ours: taken over in one write, withdrawn whole.
    assert apply(plain_text, groups) == compact_text
    assert remove(plain_text) == remove(compact_text) == ROOT.text


def test_a_domain_is_written_once_per_regex() -> None:
    hosts = sorted(f"customer-{i}.shop.example.com" for i in range(200))
    (rx,) = match_regexes(hosts)
    assert rx.count("shop") == 1
    assert rules.hosts_of_regex(rx) == hosts


def test_regexes_not_in_either_spelling_are_not_read() -> None:
    for body in (r"(?:a|b)\.example\.com|a\.example\.com",  # a name twice
                 r"(?:b|a)\.example\.com",  # not as we order it
                 r"(?:a|)\.example\.com",  # an empty name
                 r"(?:a\.example\.com",  # unbalanced
                 r"(a|b)\.example\.com",  # a capturing group
                 r"(?:a|b)?\.example\.com",  # a repetition
                 r"a\.example\.com(?:|\.)",  # a name with a trailing dot
                 r"(?:a|b|c)(?:a|b|c)(?:a|b|c)\.x"):  # more names than alternatives
        assert rules.hosts_of_regex(rules._OPEN + body + rules._CLOSE) is None, body


def test_bodies_are_remembered_by_their_names_and_the_memory_is_bounded() -> None:
    names = ["customer-1.shop.example.com", "customer-2.shop.example.com", "www.example.org"]
    body = encode(names)
    # The same names again, in another container: the very body, not a second encoding.
    assert encode(tuple(names)) is body
    assert decode(body) is not None and sorted(decode(body) or ()) == sorted(names)
    one = 49 + 6 + 40 + 57 + 1  # the body and the key, each name counted whole
    bodies = compact._Memo[str](most_bytes=2 * one)
    bodies.keep(("a",), "x" * 6, 6)
    bodies.keep(("b",), "y" * 6, 6)
    assert bodies.get(("a",)) == "x" * 6 and bodies.get(("b",)) == "y" * 6
    # A body that would take it past its bound starts it afresh; one alone past it is not kept.
    bodies.keep(("c",), "z" * 6, 6)
    assert bodies.get(("a",)) is None and bodies.get(("c",)) == "z" * 6
    bodies.keep(("d",), "w" * (2 * one), 2 * one)
    assert bodies.get(("d",)) is None and bodies.get(("c",)) == "z" * 6
    # Full, and a body it holds kept again (two threads that missed it at once): nothing
    # dropped.
    bodies.keep(("e",), "v" * 6, 6)
    bodies.keep(("c",), "z" * 6, 6)
    assert bodies.get(("c",)) == "z" * 6 and bodies.get(("e",)) == "v" * 6


@settings(max_examples=200, deadline=None)
@given(pool=st.lists(NAME, min_size=1, max_size=60, unique=True),
       toggles=st.lists(st.integers(0, 59), min_size=1, max_size=12))
def test_a_group_encoded_before_is_encoded_as_afresh(pool: list[str],
                                                     toggles: list[int]) -> None:
    """Regexes with a name more or less than the one before, encoded one after another (the
    size limits' fit tries, an edit's steps): each body is the one encoded with nothing
    remembered."""
    names = set(pool)
    sets = [sorted(names)]
    for k in toggles:
        names ^= {pool[k % len(pool)]}
        if names:
            sets.append(sorted(names))
    remembered = [encode(names) for names in sets]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(compact, "_SHARED_AT", 10**9)
        mp.setattr(compact, "_bodies", compact._Memo[str](0))
        afresh = [encode(names) for names in sets]
    assert remembered == afresh
