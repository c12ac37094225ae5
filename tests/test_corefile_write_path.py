"""The rules' write path takes shortcuts at 10,000 hosts: each must give exactly the answer of
the plain computation it replaces, which these properties spell out beside it."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy import corefile
from hairpin_proxy.corefile import Answers, CorefileError, editor, names, rules
from hairpin_proxy.edits.coredns import CorednsEdit, _hosts_of, same_groups
from tests.corefiles import BY_NAME

A1 = Answers.of(["10.96.0.20"])
A2 = Answers.of(["10.96.0.21", "fd00::21"])
A3 = Answers.of(["fd00::22"])
POOL = (A1, A2, A3)
KUBEADM = BY_NAME["kubeadm"].text

# Spellings that differ by case only, in ASCII and beyond (final sigma, dotted capital I).
LABEL = st.sampled_from(["a", "A", "web", "WEB", "x-1", "_acme", "σς", "ΣΣ", "İx", "ix", "ß"])
DOMAIN = st.sampled_from(["example.com", "Example.COM", "b.example.org", "svc.test"])
HOST = st.one_of(st.builds(lambda lab, d: f"{lab}.{d}", LABEL, DOMAIN),
                 DOMAIN.map(lambda d: "*." + d), DOMAIN.map(lambda d: "**." + d))
GROUPS = st.lists(st.tuples(st.lists(HOST, max_size=8), st.sampled_from(POOL)), max_size=4)


def _conflict(groups: list[tuple[list[str], Answers]]) -> bool:
    """The plain rule: a name (case aside) in two groups of different answers."""
    owner: dict[str, Answers] = {}
    for hosts, answers in groups:
        for host in hosts:
            if owner.setdefault(host.lower(), answers) != answers:
                return True
    return False


@settings(max_examples=300, deadline=None)
@given(groups=GROUPS)
def test_answer_sets_refuses_exactly_the_names_in_two_sets(
        groups: list[tuple[list[str], Answers]]) -> None:
    try:
        rules.answer_sets(groups)
    except CorefileError as exc:
        assert "two answer sets" in str(exc)
        assert _conflict(groups)
    else:
        assert not _conflict(groups)


@settings(max_examples=100, deadline=None)
@given(groups=st.lists(st.tuples(st.lists(st.builds(lambda lab, d: f"{lab}.{d}", LABEL, DOMAIN),
                                          max_size=8), st.sampled_from(POOL)), max_size=4))
def test_exact_hosts_alone_are_laid_out_as_given(groups: list[tuple[list[str], Answers]]
                                                 ) -> None:
    if _conflict(groups):
        return
    sets = rules.answer_sets(groups)
    assert rules.layout(sets) == [s for s in sets if s.hosts]


def _plain_unit(text: str) -> str:
    head = text[:editor._UNIT_SAMPLE]
    tabs = len(re.findall(r"(?m)^\t+\S", head))
    spaces = len(re.findall(r"(?m)^ +\S", head))
    return "\t" if tabs > spaces else "    "


@settings(max_examples=400, deadline=None)
@given(text=st.text(st.sampled_from([" ", "\t", "\n", "\r", "a", "{", "\x0b", "\xa0",
                                     "\u2028", "\x85", "#"]), max_size=60))
def test_the_indent_unit_is_the_one_the_regexes_find(text: str) -> None:
    assert editor._indent_unit(text) == _plain_unit(text)


def test_the_indent_unit_reads_only_the_sample() -> None:
    text = "x\n" * (editor._UNIT_SAMPLE // 2) + "\tb\n" * 10
    assert editor._indent_unit(text) == _plain_unit(text) == "    "


@settings(max_examples=200, deadline=None)
@given(groups=st.lists(st.tuples(st.lists(st.text("abc.", min_size=1, max_size=4), max_size=6)
                                 .map(tuple), st.sampled_from(POOL)), max_size=3))
def test_every_host_once_and_sorted(groups: list[tuple[tuple[str, ...], Answers]]) -> None:
    assert _hosts_of(tuple(groups)) == tuple(sorted({h for hs, _ in groups for h in hs}))


# A random walk of lone changes: hosts added and removed, moved between answer sets.
NAMES = [f"app{i}.example.com" for i in range(30)] + ["*.w.example.com", "**.d.example.com",
                                                      "x.w.example.com", "y.z.d.example.com"]
STEPS = st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from((None, *POOL))),
                 min_size=1, max_size=12)


BASE = [f"h{i:03}.example.com" for i in range(80)]


def _groups_of(owner: dict[str, Answers]) -> tuple[tuple[tuple[str, ...], Answers], ...]:
    by: dict[Answers, list[str]] = {}
    for host, answers in owner.items():
        by.setdefault(answers, []).append(host)
    return tuple((tuple(sorted(hs)), a) for a, hs in by.items())


@settings(max_examples=60, deadline=None)
@given(steps=STEPS)
def test_kept_renderings_give_the_text_of_a_fresh_edit(
        steps: list[tuple[str, Answers | None]]) -> None:
    edit = CorednsEdit("kube-system", "coredns", "Corefile", corefile.DEFAULT_PROXY_FQDN)
    owner: dict[str, Answers] = dict.fromkeys(BASE, A1)
    text = KUBEADM
    for host, answers in steps:
        owner.pop(host, None)
        if answers is not None:
            owner[host] = answers
        groups = _groups_of(owner)
        text = edit.edit(text, groups)
        # The plain computation, from the original text.
        fresh = corefile.apply(KUBEADM, groups, proxy_fqdn=corefile.DEFAULT_PROXY_FQDN)
        assert text == fresh
        sets = rules.answer_sets(groups)
        assert rules.all_stanzas(sets, "  ", "\t", "\r\n") == "".join(
            rules.stanzas(g.hosts, g.answers, "  ", "\t", "\r\n") for g in rules.layout(sets))


@given(old=st.lists(st.sampled_from("abcdefgh"), unique=True).map(sorted),
       new=st.lists(st.sampled_from("abcdefgh"), unique=True).map(sorted))
def test_one_edit_finds_exactly_one_name_in_or_out(old: list[str], new: list[str]) -> None:
    i = names.one_edit(old, new)
    longer, shorter = (new, old) if len(new) > len(old) else (old, new)
    if i is None:
        assert len(set(old) ^ set(new)) != 1
    else:
        assert set(old) ^ set(new) == {longer[i]} and longer[:i] + longer[i + 1:] == shorter


def test_edited_from_tells_our_edit_of_a_text() -> None:
    edit = CorednsEdit("kube-system", "coredns", "Corefile", corefile.DEFAULT_PROXY_FQDN)
    groups = ((("a.example.com", "b.example.com"), A1),)
    edited = edit.edit(KUBEADM, groups)
    # The watch's copy of the texts: equal, other objects.
    echo, source = "".join(list(edited)), "".join(list(KUBEADM))
    assert edit.edited_from(echo, source)
    # Another text of the same length as the source is not it.
    other = KUBEADM.replace("cache 30", "cache 31")
    assert len(other) == len(KUBEADM) and not edit.edited_from(echo, other)
    # A text that is not our result was edited from nothing we know.
    assert not edit.edited_from(other, source)
    # The same edit asked again from the text it started from (the write after the edit
    # made off the event loop): the remembered result (the watch's copy, adopted above), no
    # new edit.
    assert edit.edit(source, groups) is echo
    assert edit.edited_from(edited, KUBEADM)
    # Other groups from that text: a new edit.
    assert edit.edit(source, ((("c.example.com",), A1),)) != edited


def test_an_edit_from_our_own_echoed_result_keeps_no_second_copy_of_it() -> None:
    edit = CorednsEdit("kube-system", "coredns", "Corefile", corefile.DEFAULT_PROXY_FQDN)
    first = edit.edit(KUBEADM, ((("a.example.com",), A1),))
    echo = "".join(list(first))  # the watch's copy: equal, another object
    second = edit.edit(echo, ((("a.example.com", "b.example.com"), A1),))
    assert edit.edited_from(second, echo) and edit.edited_from(second, first)
    assert edit._memo["last"].source is first
    # A text that is not our last result is kept as given.
    third = edit.edit(KUBEADM, ((("c.example.com",), A1),))
    assert edit._memo["last"].source is KUBEADM and edit.edited_from(third, KUBEADM)


@settings(max_examples=300, deadline=None)
@given(a=GROUPS, b=GROUPS, share=st.booleans())
def test_same_groups_is_equality_of_groups(a: list[tuple[list[str], Answers]],
                                           b: list[tuple[list[str], Answers]],
                                           share: bool) -> None:
    left = tuple((tuple(hosts), answers) for hosts, answers in a)
    right = tuple((tuple(hosts), answers) for hosts, answers in b)
    if share and left:
        # The very hosts tuple with other answers: not the same groups.
        right = ((left[0][0], next(x for x in POOL if x != left[0][1])), *right[1:])
    assert same_groups(left, right) == (left == right)
    # Equal hosts in other tuples are the same groups; one host changed is not.
    copied = tuple((tuple(list(h)), x) for h, x in left)
    assert all(c[0] is not g[0] or not g[0] for c, g in zip(copied, left, strict=True))
    assert same_groups(left, copied)
    if left and left[0][0]:
        (hosts, x), *rest = left
        changed = ((*hosts[:-1], hosts[-1] + "x"), x)
        assert not same_groups(left, (changed, *rest))
