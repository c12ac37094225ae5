"""Host policy against the Public Suffix List and the cluster-internal top-level labels."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import publicsuffixlist
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from publicsuffixlist import PublicSuffixList

from hairpin_proxy import policy as policy_mod
from hairpin_proxy.policy import CLUSTER_TLDS, HostPolicy, check_host, is_public_suffix
from hairpin_proxy.sources.ingress.policy import evaluate

POLICY = HostPolicy()
PSL = PublicSuffixList()  # the package's own answers are the reference


def _raw_rules() -> list[str]:
    """Every rule of the bundled list as written ("!www.ck", "*.ck", "ålesund.no"), read from its
    file (not from the package's internals)."""
    with Path(publicsuffixlist.PSLFILE).open(encoding="utf-8") as f:
        lines = (line.strip().split(" ")[0].lower() for line in f)
        return [line for line in lines if line and not line.startswith("//")]


def _rules() -> list[str]:
    """The names of every rule, internationalized ones as punycode."""
    return sorted({r.encode("idna").decode("ascii") if not r.isascii() else r
                   for r in (x.lstrip("!").removeprefix("*.") for x in _raw_rules())})


RULES = _rules()


def _near(rule: str) -> list[str]:
    """Names around a rule: itself, a child, a grandchild, its parent."""
    return [rule, f"x1.{rule}", f"www.{rule}", f"a.b.{rule}", rule.partition(".")[2]]


def test_the_rule_sets_answer_as_the_package_does_for_every_rule() -> None:
    assert len(RULES) > 5000
    # Ours, not the package's answers through the fallback.
    assert policy_mod._rule_sets() is not None
    for rule in RULES:
        for name in _near(rule):
            if "." in name:
                assert is_public_suffix(name) == PSL.is_public(name), name


def test_the_package_answers_when_its_internals_change(monkeypatch: pytest.MonkeyPatch) -> None:
    class Opaque:
        """A list object that keeps its rules somewhere else."""

        def is_public(self, name: str) -> bool:
            return PSL.is_public(name)

    class Lying(Opaque):
        _publicsuffix = frozenset({"example.com"})

    assert policy_mod._read_rules(PSL) is not None
    assert policy_mod._read_rules(Opaque()) is None  # type: ignore[arg-type]
    assert policy_mod._read_rules(Lying()) is None  # type: ignore[arg-type]
    # With no rule tables, every question goes to the package, and the answers stay the same.
    monkeypatch.setattr(policy_mod, "_suffixes", None)
    monkeypatch.setattr(policy_mod, "_suffixes_ready", True)
    policy_mod._public_by_package.cache_clear()
    fallback = HostPolicy()
    for host, reason in [("co.uk", "a public suffix (co.uk), shared by many owners"),
                         ("*.github.io", "wildcard covers a whole public suffix (github.io)"),
                         ("foo.ck", "a public suffix (foo.ck), shared by many owners")]:
        assert check_host(host, fallback) == (None, reason)
    assert check_host("www.ck", fallback) == ("www.ck", None)
    assert check_host("*.example.co.uk", fallback) == ("*.example.co.uk", None)
    assert policy_mod._public_by_package.cache_info().misses == 5


def test_one_list_per_process() -> None:
    assert policy_mod._psl() is policy_mod._psl()
    assert HostPolicy()._psl is not None
    assert HostPolicy()._psl is HostPolicy(hosts_from="all")._psl


@pytest.mark.parametrize(("host", "reason"), [
    # wildcard rules and their exceptions (*.ck, !www.ck; *.kawasaki.jp, !city.kawasaki.jp)
    ("foo.ck", "a public suffix (foo.ck), shared by many owners"),
    ("*.foo.ck", "wildcard covers a whole public suffix (foo.ck)"),
    ("*.kawasaki.jp", "wildcard covers a whole public suffix (kawasaki.jp)"),
    ("a.kawasaki.jp", "a public suffix (a.kawasaki.jp), shared by many owners"),
    # private section
    ("*.herokuapp.com", "wildcard covers a whole public suffix (herokuapp.com)"),
    ("s3.amazonaws.com", "a public suffix (s3.amazonaws.com), shared by many owners"),
    # trailing dot and case do not slip past
    ("*.CO.UK.", "wildcard covers a whole public suffix (co.uk)"),
    ("Co.Uk.", "a public suffix (co.uk), shared by many owners"),
])
def test_public_suffix_cases(host: str, reason: str) -> None:
    assert check_host(host, POLICY) == (None, reason)


@pytest.mark.parametrize("host", ["www.ck", "*.www.ck", "city.kawasaki.jp",
                                  "*.city.kawasaki.jp", "myapp.herokuapp.com", "example.com",
                                  "*.example.com", "*.example.co.uk", "foo.arpa"])
def test_names_below_a_registrable_domain_pass(host: str) -> None:
    assert check_host(host, POLICY) == (host, None)


def test_public_suffix_refusals_are_rejections_not_ignored() -> None:
    result = evaluate([{"metadata": {"name": "w"},
                        "spec": {"tls": [{"hosts": ["*.co.uk", "a.example.com", "x.svc"]}]}}],
                      [], POLICY)
    assert result.hosts == ("a.example.com",)
    assert [r.host for r in result.rejections] == ["*.co.uk", "x.svc"]
    assert result.ignored == ()


# --------------------------------------------------------------------------- properties

label = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?\Z")
near_rules = st.builds(lambda rule, i, prefix: [*(_near(rule)), prefix + rule][i],
                       st.sampled_from(RULES), st.integers(0, 5),
                       label.map(lambda lb: lb + "."))
names = near_rules | st.builds(lambda a, b: f"{a}.{b}", label, st.sampled_from(RULES))


@given(names, st.booleans())
@settings(max_examples=800)
def test_nothing_accepted_is_or_covers_a_public_suffix(name: str, wildcard: bool) -> None:
    host = f"*.{name}" if wildcard else name
    accepted, reason = check_host(host, POLICY)
    if accepted is not None:
        base = accepted.removeprefix("*.")
        assert not PSL.is_public(base), host
        assert PSL.privatesuffix(base) is not None
    elif name and "." in name and PSL.is_public(name):
        assert reason is not None
        assert "public suffix" in reason or "too broad" in reason \
            or "inside clusters" in reason or "home.arpa" in reason or " arpa" in reason \
            or "at or under" in reason or "numeric" in reason, (host, reason)


cluster_names = st.builds(lambda labels, tld: ".".join([*labels, tld]),
                          st.lists(label, min_size=1, max_size=3),
                          st.sampled_from([*sorted(CLUSTER_TLDS), "home.arpa"]))


@given(cluster_names, st.booleans(), st.booleans())
@settings(max_examples=400)
def test_names_under_cluster_labels_are_never_accepted(name: str, wildcard: bool,
                                                       allow: bool) -> None:
    # Not even when the allow-list names them: these never belong to the Internet.
    tld = "home.arpa" if name.endswith(".home.arpa") else name.rpartition(".")[2]
    policy = HostPolicy(domains=(name.partition(".")[2],) if allow else (),
                        cluster_domain="never.test", proxy_fqdn="proxy.never.test.")
    host = f"*.{name}" if wildcard else name
    accepted, reason = check_host(host, policy)
    assert accepted is None
    assert reason is not None and tld in reason


@given(st.lists(names | cluster_names, max_size=6))
@settings(max_examples=200)
def test_evaluate_accepts_no_public_suffix_and_no_internal_name(hosts: list[Any]) -> None:
    result = evaluate([{"metadata": {"name": "x"}, "spec": {"tls": [{"hosts": hosts}]}}], [],
                      POLICY)
    for host in result.hosts:
        base = host.removeprefix("*.")
        assert not PSL.is_public(base)
        assert base.rpartition(".")[2] not in CLUSTER_TLDS
        assert not (base == "home.arpa" or base.endswith(".home.arpa"))


# --------------------------------------------------------------------------- the packed rules

RAW = _raw_rules()
WILDCARD_ROOTS = sorted({r[2:] for r in RAW if r.startswith("*.")})
EXCEPTION_NAMES = sorted({r[1:] for r in RAW if r.startswith("!")})
# The rules' names as written too: the package answers for "ålesund.no" as for its punycode.
EVERY_RULE = sorted({*RULES, *(r.lstrip("!").removeprefix("*.") for r in RAW)})
assert WILDCARD_ROOTS and EXCEPTION_NAMES and any(not r.isascii() for r in EVERY_RULE)

any_label = label | st.text(alphabet="aø日z0-", min_size=1, max_size=4)
labels = st.lists(any_label, min_size=1, max_size=3).map(".".join)
rule = st.sampled_from(EVERY_RULE)
psl_names = st.one_of(
    rule,
    st.builds(lambda a, r: f"{a}.{r}", labels, rule),  # children and deeper names
    rule.map(lambda r: r.partition(".")[2]).filter(bool),  # parents
    st.sampled_from(EXCEPTION_NAMES),
    st.builds(lambda a, e: f"{a}.{e}", labels, st.sampled_from(EXCEPTION_NAMES)),
    st.builds(lambda a, w: f"{a}.{w}", labels, st.sampled_from(WILDCARD_ROOTS)),
    st.sampled_from(WILDCARD_ROOTS),
    labels,  # random names, nearly all under no rule
    st.builds(lambda a, r: f"{a}.{r.rpartition('.')[2]}", labels, rule),  # under a real TLD
)


@given(psl_names)
@settings(max_examples=3000)
def test_is_public_suffix_answers_as_the_package_does(name: str) -> None:
    rules = policy_mod._rule_sets()
    assert rules is not None  # ours, not the package's answers through the fallback
    expected = PSL.is_public(name)
    assert is_public_suffix(name) == expected, name
    if "." in name:
        assert policy_mod._public_by_sets(name, rules) == expected, name


strings = st.text(max_size=6)


@given(st.sets(strings, max_size=40), st.lists(strings, max_size=20),
       st.sampled_from([0, 0x3, policy_mod._HASH_BITS]))
def test_a_packed_set_holds_exactly_its_strings(members: set[str], others: list[str],
                                                mask: int) -> None:
    # The small masks make strings share hashes (all of them, for 0): then the bytes decide.
    packed = policy_mod._pack(members, mask)
    near = [*others, *(m + "x" for m in members), *(m[:-1] for m in members),
            *(m.upper() for m in members), "\udc80", "a\udc80"]
    for name in [*members, *near]:
        assert policy_mod._packed_has(packed, name) == (name in members), (name, mask)


def test_a_packed_set_tells_apart_names_of_the_same_hash_and_bytes_of_another_length() -> None:
    packed = policy_mod._pack(["ab", "abc", "b", "ø", "日本"], mask=0)
    for name in ["ab", "abc", "b", "ø", "日本"]:
        assert policy_mod._packed_has(packed, name)
    for name in ["a", "bc", "abcb", "", "o", "日", "\udc80", "\xc3\xb8"]:
        assert not policy_mod._packed_has(packed, name)
    assert not policy_mod._packed_has(policy_mod._pack([]), "com")


def test_a_policy_from_another_process_answers_with_this_process_list() -> None:
    # The tables follow the string hashes of the process that built them.
    seed = "1" if os.environ.get("PYTHONHASHSEED") == "0" else "0"
    made = subprocess.run(
        [sys.executable, "-c", "import pickle, sys; from hairpin_proxy.policy import HostPolicy; "
                               "sys.stdout.write(pickle.dumps(HostPolicy()).hex())"],
        env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True, text=True, check=True,
        timeout=120).stdout
    policy = pickle.loads(bytes.fromhex(made))
    assert check_host("co.uk", policy) == (None, "a public suffix (co.uk), shared by many owners")
    assert check_host("shop.example.co.uk", policy) == ("shop.example.co.uk", None)
    assert policy._psl is policy_mod._rule_sets()


# Measured in a fresh process: the figure is the list as the controller keeps it, nothing else.
_KEPT = """
import gc, tracemalloc
tracemalloc.start()
from hairpin_proxy import policy
import publicsuffixlist
"x".encode("idna")  # the package's first use imports the IDNA codec: not the list's to count
gc.collect()
before = tracemalloc.get_traced_memory()[0]
policy.HostPolicy()
gc.collect()
print(tracemalloc.get_traced_memory()[0] - before, policy._psl_instance is None)
"""


def test_the_list_is_kept_in_under_half_a_megabyte_without_the_package() -> None:
    out = subprocess.run([sys.executable, "-c", _KEPT], capture_output=True, text=True,
                         check=True, timeout=120).stdout.split()
    # Three frozensets of the rules kept 1.2 MiB; the packed tables keep about 0.3.
    assert int(out[0]) < 512 * 1024, out
    assert out[1] == "True"
