"""An edit from the last edit's result (``corefile.apply_kept``, which ``CorednsEdit`` uses)
gives exactly the text, or the error, of the plain ``corefile.apply`` of that text: over
random walks of hosts added, removed and moved between answer sets, answers changed, texts
edited by someone else in between, with enough hosts of every form for several regexes each
(so that changes land on the regexes' boundaries)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy import corefile
from hairpin_proxy.corefile import (
    Answers,
    CorefileError,
    compact,
    editor,
    incremental,
    names,
    rules,
)
from hairpin_proxy.corefile.incremental import bar_count
from hairpin_proxy.corefile.rules import chunk_counts
from hairpin_proxy.edits.coredns import CorednsEdit, Groups
from hairpin_proxy.edits.coredns_import import ImportEdit
from tests.corefiles import BY_NAME

FQDN = corefile.DEFAULT_PROXY_FQDN
POOL = (Answers.of(["10.96.0.20"]), Answers.of(["10.96.0.21", "fd00::21"]),
        Answers.of(["fd00::22"]))
OTHER = Answers.of(["10.96.0.99"], ttl=30)

TWO_ROOTS = """\
.:53 {
    bind 10.0.0.1
    errors
    forward . /etc/resolv.conf
}
dns://.:53 {
    bind 10.0.0.2
    forward . /etc/resolv.conf
}
"""
TEXTS = (BY_NAME["kubeadm"].text, BY_NAME["tabs"].text, BY_NAME["crlf"].text, TWO_ROOTS)

# Names of many lengths: each form fills several regexes (8,000 bytes each), with the room
# left at a regex's end varying, so that a change moves one boundary or several.
BASE = ([f"h{i}-{'x' * (i % 23)}.example.com" for i in range(900)]
        + [f"*.w{i}-{'y' * (i % 17)}.example.org" for i in range(450)]
        + [f"**.d{i}-{'z' * (i % 11)}.example.net" for i in range(420)])
LABEL = st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=40)
NAME = st.one_of(
    st.builds(lambda lab, i: f"h{i}-{lab}.example.com", LABEL, st.integers(0, 950)),
    st.builds(lambda lab: f"*.w{lab}.example.org", LABEL),
    st.builds(lambda lab: f"**.d{lab}.example.net", LABEL),
    st.sampled_from(["H5-XXXXX.example.com", "_x.example.com", "a..b", "a b.example.com",
                     "x+y.example.com", "*.example.org", "**.example.net", "h0-.example.com"]))
STEP = st.one_of(
    st.tuples(st.just("add"), NAME, st.integers(0, 2)),
    st.tuples(st.just("drop"), st.integers(0, 5000)),
    st.tuples(st.just("move"), st.integers(0, 5000), st.integers(0, 2)),
    st.tuples(st.just("answers"), st.integers(0, 2)),
    st.tuples(st.just("foreign"), st.integers(0, 3)),
    st.tuples(st.just("list"), st.just(0)))


def _groups(owner: dict[str, int], pool: list[Answers], as_list: bool = False) -> Groups:
    by: dict[int, list[str]] = {}
    for host, k in owner.items():
        by.setdefault(k, []).append(host)
    return tuple(((sorted(hs) if as_list else tuple(sorted(hs))), pool[k])  # type: ignore[misc]
                 for k, hs in sorted(by.items()))


def _plain(text: str, groups: Groups) -> str:
    gs = [(hosts, answers) for hosts, answers in groups if answers and hosts]
    try:
        if len(gs) == 1:
            return corefile.apply(text, gs[0][0], answers=gs[0][1], proxy_fqdn=FQDN)
        return corefile.apply(text, gs, proxy_fqdn=FQDN)
    except CorefileError as exc:
        return f"error: {exc}"


def _edited(edit: CorednsEdit, text: str, groups: Groups) -> str:
    try:
        return edit.edit(text, groups)
    except CorefileError as exc:
        return f"error: {exc}"


def _foreign(text: str, kind: int) -> str:
    """Someone else's edit of our last write."""
    if kind == 0:
        return "# edited by hand\n" + text
    if kind == 1:
        return text.replace("    # END hairpin-proxy\n", "", 1)
    if kind == 2:
        return text.replace("forward", "forward", 1) + "\n"
    return text[:]


def _change(owner: dict[str, int], pool: list[Answers], step: tuple[object, ...]) -> None:
    what, hosts = step[0], list(owner)
    if what == "add":
        owner[str(step[1])] = int(str(step[2]))
    elif what == "drop" and hosts:
        del owner[hosts[int(str(step[1])) % len(hosts)]]
    elif what == "move" and hosts:
        owner[hosts[int(str(step[1])) % len(hosts)]] = int(str(step[2]))
    elif what == "answers":
        k = int(str(step[1]))
        pool[k] = OTHER if pool[k] != OTHER else POOL[k]


def _start() -> tuple[dict[str, int], list[Answers]]:
    # Most in one set, as a cluster's hosts mostly go to one proxy Service.
    return {h: int(i % 5 == 0) for i, h in enumerate(BASE)}, list(POOL)


def _walk(start: str, steps: list[tuple[object, ...]]) -> None:
    edit = CorednsEdit("kube-system", "coredns", "Corefile", FQDN)
    owner, pool = _start()
    text = start
    for step in [("list", 0), *steps]:
        _change(owner, pool, step)
        if step[0] == "foreign":
            text = _foreign(text, int(str(step[1])))
        groups = _groups(owner, pool, as_list=step[0] == "list")
        want = _plain(text, groups)
        # The watch's echo of our write: an equal text, another object.
        got = _edited(edit, "".join([text[:1], text[1:]]), groups)
        assert got == want
        if want.startswith("error: "):
            continue
        cm = {"data": {"Corefile": want}}
        assert edit.remembered_hosts(cm) == corefile.managed_hosts(want, proxy_fqdn=FQDN)
        assert edit.held_answers(cm) == corefile.managed_groups(want, proxy_fqdn=FQDN)
        text = want


@pytest.mark.parametrize("start", TEXTS, ids=["kubeadm", "tabs", "crlf", "two-roots"])
@settings(max_examples=40, deadline=None)
@given(steps=st.lists(STEP, min_size=1, max_size=10))
def test_an_edit_from_the_last_result_is_the_plain_edit(start: str,
                                                        steps: list[tuple[object, ...]]) -> None:
    _walk(start, steps)


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(STEP, min_size=1, max_size=10))
def test_a_snippet_from_the_last_one_is_the_plain_snippet(steps: list[tuple[object, ...]]
                                                          ) -> None:
    edit = ImportEdit("kube-system", "coredns-custom", "hairpin.override", FQDN)
    owner, pool = _start()
    for step in [("list", 0), *steps]:
        _change(owner, pool, step)
        groups = _groups(owner, pool, as_list=step[0] == "list")
        try:
            want = ImportEdit.snippet(groups)
        except CorefileError as exc:
            want = f"error: {exc}"
        try:
            got = edit.kept_snippet(groups)
        except CorefileError as exc:
            got = f"error: {exc}"
        assert got == want


def _no_full_edit(*args: object, **kwargs: object) -> object:
    raise AssertionError("the full edit was taken")


@pytest.mark.parametrize("change", ["first", "middle", "last", "wildcard", "deep", "move"])
def test_a_lone_host_is_spliced_in_without_a_full_edit(change: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    edit = CorednsEdit("kube-system", "coredns", "Corefile", FQDN)
    owner = {h: i % 2 for i, h in enumerate(BASE)}
    text = edit.edit(BY_NAME["kubeadm"].text, _groups(owner, list(POOL)))
    host = {"first": "a.example.com", "middle": "h5-q.example.com", "last": "z.example.com",
            "wildcard": "*.w3.example.org", "deep": "**.d1-a.example.net"}.get(change)
    if host is None:
        owner[BASE[7]] = 1 - owner[BASE[7]]
    else:
        owner[host] = 0
    groups = _groups(owner, list(POOL))
    want = _plain(text, groups)
    monkeypatch.setattr(editor, "_apply", _no_full_edit)
    assert edit.edit("".join([text[:1], text[1:]]), groups) == want
    if host is not None:
        del owner[host]
        groups = _groups(owner, list(POOL))
        monkeypatch.undo()
        before, want = want, _plain(want, groups)
        monkeypatch.setattr(editor, "_apply", _no_full_edit)
        assert edit.edit(before[:], groups) == want


def test_a_line_that_would_not_read_back_takes_the_full_edit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The new lines are checked: one that would not parse as one bare word, or not read
    back as its hosts, is never spliced in; the full edit (its own rendering, its own full
    check) decides."""
    owner = {h: 0 for h in BASE}
    text = corefile.apply(BY_NAME["kubeadm"].text, _groups(owner, list(POOL)), proxy_fqdn=FQDN)
    owner["h5-q.example.com"] = 0
    groups = _groups(owner, list(POOL))
    want = _plain(text, groups)
    real = editor._apply
    full: list[object] = []

    def counted(*args: Any) -> Any:
        full.append(args)
        return real(*args)

    for broken in ('"', " ", "{", "#", "|x"):
        edit = CorednsEdit("kube-system", "coredns", "Corefile", FQDN)
        edit.edit(text, _groups({h: 0 for h in BASE}, list(POOL)))
        full.clear()
        monkeypatch.setattr(incremental, "compact_body",
                            lambda names, b=broken: compact.encode(names) + b)
        monkeypatch.setattr(editor, "_apply", counted)
        assert edit.edit(text[:], groups) == want
        assert full, "a broken line was spliced in"
        monkeypatch.undo()


def test_held_answers_of_our_own_result_are_read_without_a_parse(
        monkeypatch: pytest.MonkeyPatch) -> None:
    edit = CorednsEdit("kube-system", "coredns", "Corefile", FQDN)
    owner = {h: i % 3 for i, h in enumerate(BASE)}
    text = edit.edit(BY_NAME["kubeadm"].text, _groups(owner, list(POOL)))
    want = corefile.managed_groups(text, proxy_fqdn=FQDN)
    monkeypatch.setattr(corefile, "managed_groups", _no_full_edit)
    assert edit.held_answers({"data": {"Corefile": text[:]}}) == want


def test_a_lone_host_is_spliced_into_the_import_snippet(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    edit = ImportEdit("kube-system", "coredns-custom", "hairpin.override", FQDN)
    owner, pool = _start()
    edit.kept_snippet(_groups(owner, pool))
    owner["h5-q.example.com"] = 0
    groups = _groups(owner, pool)
    want = ImportEdit.snippet(groups)
    monkeypatch.setattr(editor, "_snippet", _no_full_edit)
    assert edit.kept_snippet(groups) == want


def test_the_import_snippet_reads_back_as_the_groups_written() -> None:
    """What our key holds, from our last snippet (remembered) or read afresh (another
    process wrote it): the same hosts and answers either way."""
    owner, pool = _start()
    groups = _groups(owner, pool)
    ours = ImportEdit("kube-system", "coredns-custom", "hairpin.override", FQDN)
    cm = {"data": {"hairpin.override": ours.kept_snippet(groups), "other": "x"}}
    fresh = ImportEdit("kube-system", "coredns-custom", "hairpin.override", FQDN)
    want = dict(sorted((h, answers) for hosts, answers in groups for h in hosts))
    assert ours.remembered_hosts(cm) == tuple(want)
    assert fresh.remembered_hosts(cm) is None
    for edit in (ours, fresh):
        assert edit.current_hosts(cm) == tuple(want)
        assert edit.held_answers(cm) == want
    for empty in (None, {"data": {"other": "x"}}):
        assert fresh.current_hosts(empty) == () and fresh.held_answers(empty) == {}


def test_the_watchs_copy_of_our_write_is_kept_instead_of_ours() -> None:
    """The watch's cache holds its copy of our write anyway: once seen, the edit keeps that
    one, and its own result can go."""
    edit = CorednsEdit("kube-system", "coredns", "Corefile", FQDN)
    owner, pool = _start()
    ours = edit.edit(BY_NAME["kubeadm"].text, _groups(owner, pool))
    echo = "".join([ours[:1], ours[1:]])
    assert echo is not ours
    assert edit.remembered_hosts({"data": {"Corefile": echo}}) is not None
    assert edit._memo["last"].edited.text is echo
    owner["h5-q.example.com"] = 0
    assert edit.edit(echo, _groups(owner, pool)) == _plain(echo, _groups(owner, pool))


def test_a_step_counts_no_name_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A step never counts the names of a form from the first: after a full edit it reads how
    many names each regex holds from the regex itself, after a step it takes the chunks that
    step kept; and it still gives the plain edit's text."""
    edit = CorednsEdit("kube-system", "coredns", "Corefile", FQDN)
    owner = {h: 0 for h in BASE}
    text = edit.edit(BY_NAME["kubeadm"].text, _groups(owner, list(POOL)))
    counted: list[object] = []
    read: list[object] = []

    def counting(*args: Any) -> Any:
        counted.append(args)
        return chunk_counts(*args)

    def reading(*args: Any) -> int:
        read.append(args)
        return bar_count(*args)

    monkeypatch.setattr(rules, "chunk_counts", counting)
    monkeypatch.setattr(incremental, "bar_count", reading)
    for host in ("h5-q.example.com", "h6-q.example.com", "h7-q.example.com", "a.example.com"):
        owner[host] = 0
        groups = _groups(owner, list(POOL))
        text = edit.edit(text, groups)
        assert not counted
        # The first step after the full edit reads the regexes; the next ones need not.
        assert bool(read) is (host == "h5-q.example.com")
        read.clear()
        assert text == _plain(BY_NAME["kubeadm"].text, groups)
        counted.clear()


def test_the_hosts_the_groups_were_made_from_are_kept_as_held() -> None:
    """Given the sorted hosts its groups were made from, the edit keeps that very tuple as
    what the rules hold (the removal guard finds it again next pass); where the groups left
    one out (a host with no address to answer with), the hosts are those of the groups."""
    edit = CorednsEdit("kube-system", "coredns", "Corefile", FQDN)
    owner, pool = _start()
    every = tuple(sorted(owner))
    text = edit.edit(BY_NAME["kubeadm"].text, _groups(owner, pool), every)
    cm = {"data": {"Corefile": text}}
    assert edit.remembered_hosts(cm) is every
    owner["h5-q.example.com"] = 1
    more = (*owner, "zz.example.com")
    text = edit.edit(text, _groups(owner, pool), tuple(sorted(more)))
    got = edit.remembered_hosts({"data": {"Corefile": text}})
    assert got == tuple(sorted(owner)) and got != tuple(sorted(more))


def test_a_step_the_groups_state_is_taken_without_comparing_the_names(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Groups that say which host went in or out where (``corefile.Stepped``, as the
    plan's regrouping makes them) are edited without a search for it, to the plain edit's
    text; a step that the hosts next to it belie is searched for after all."""
    edit = CorednsEdit("kube-system", "coredns", "Corefile", FQDN)
    owner, pool = _start()
    groups = _groups(owner, pool)
    text = edit.edit(BY_NAME["kubeadm"].text, groups)
    searched: list[object] = []

    def searching(old: Any, new: Any) -> Any:
        searched.append(new)
        return names.one_edit(old, new)

    monkeypatch.setattr(incremental, "one_edit", searching)
    for host, lie in (("h5-q.example.com", 0), ("h6-q.example.com", 1), ("zz.example.com", 0),
                      ("h5-q.example.com", 0)):
        old = groups[0][0]
        if host in owner:
            del owner[host]
        else:
            owner[host] = 0
        new = tuple(sorted(h for h, k in owner.items() if k == 0))
        at = names.one_edit(old, new)
        assert at is not None
        groups = corefile.Stepped.of(((new, groups[0][1]), *groups[1:]), [(old, new, at + lie)])
        text = edit.edit(text, groups)
        assert text == _plain(BY_NAME["kubeadm"].text, groups)
        assert searched == ([new] if lie else [])
        searched.clear()
