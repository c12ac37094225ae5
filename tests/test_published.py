"""The published ``entries`` format (hairpin_proxy.published): a host spelled as an address is
refused whichever way it is written, and names are never taken for addresses."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy import published
from hairpin_proxy.published import EntriesText, entries_text, read_entries

ADDRESS_LIKE = st.text(alphabet="0123456789abcdefABCDEF.:%x٣", min_size=1, max_size=24)


def is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text.lower().removesuffix("."))
    except ValueError:
        return False
    return True


@given(st.one_of(ADDRESS_LIKE, st.ip_addresses().map(str),
                 st.from_regex(r"[a-z0-9-]{1,10}(\.[a-z0-9-]{1,10}){0,3}", fullmatch=True)))
def test_a_host_is_refused_exactly_when_it_reads_as_an_address(host: str) -> None:
    got = read_entries(f"{host} 10.96.0.50\n")
    kept = host.lower().removesuffix(".") in got.entries
    if is_address(host):
        assert not kept
        assert any("address, not a host name" in r.reason for r in got.refused)
    elif host.endswith("..") or host == ".":
        assert not kept
    else:
        assert kept
        assert entries_text({host: ("10.96.0.50",)}) == f"{host.lower().removesuffix('.')} " \
                                                         "10.96.0.50\n"


HOSTS = st.sampled_from(["a.example.com", "A.example.com", "a.example.com.", "b.example.com",
                         "10.0.0.1", "bad host", "", "#c", "c.example.com"])
ADDRESSES = st.lists(st.sampled_from(["10.96.0.50", "10.96.0.51", "fd00::1", "FD00::1",
                                      "nope", "fe80::1%eth0"]), max_size=3)


def good_of(addresses: list[str]) -> frozenset[str]:
    return frozenset(str(ipaddress.ip_address(a)) for a in addresses
                     if "%" not in a and is_address(a))


def a_name(host: str) -> bool:
    return host.split() == [host] and not host.startswith("#") and not is_address(host)


@given(st.dictionaries(HOSTS, ADDRESSES, max_size=8))
def test_what_the_writer_writes_reads_back_whole(entries: dict[str, list[str]]) -> None:
    """The writer leaves out what the reader would refuse (a bad address, a host without a
    good one, a name spelled twice with other addresses, an address for a host): its text
    reads back without a refusal, and a name is kept exactly when its spellings with good
    addresses agree on them."""
    back = read_entries(entries_text(entries))
    assert back.refused == ()
    sets: dict[str, set[frozenset[str]]] = {}
    for host, addresses in entries.items():
        if a_name(host) and good_of(addresses):
            sets.setdefault(host.lower().removesuffix("."), set()).add(good_of(addresses))
    assert {k: frozenset(v) for k, v in back.entries.items()} == {
        k: next(iter(v)) for k, v in sets.items() if len(v) == 1}


# Hosts as a pass has them (sorted, plain) and as the plain function must sort out: other
# spellings of a name, names refused for their form, an address as a name.
PASS_HOSTS = st.sampled_from(["a.example.com", "b.example.com", "c.example.com",
                              "d.example.com", "*.e.example.com", "A.example.com",
                              "b.example.com.", "10.0.0.1", "bad host", "#c", "", "x..",
                              "é.example.com"])
ADDRESS_TUPLES = st.lists(st.sampled_from(["10.96.0.50", "10.96.0.51", "fd00::1", "FD00::1",
                                           "nope", "fe80::1%eth0"]), max_size=3).map(tuple)
# One call: the hosts (sorted and distinct, or as they come), the default target's
# addresses, the routed hosts' addresses.
# (A few tuples, so that consecutive calls often keep them.)
FEW_TUPLES = st.one_of(st.sampled_from([("10.96.0.50",), ("10.96.0.51", "fd00::1"), ()]),
                       ADDRESS_TUPLES)
CALL = st.tuples(st.lists(PASS_HOSTS, max_size=10), st.booleans(), FEW_TUPLES,
                 st.dictionaries(PASS_HOSTS, FEW_TUPLES, max_size=4))


@settings(max_examples=300, deadline=None)
@given(calls=st.lists(CALL, min_size=1, max_size=12))
def test_the_kept_lines_give_the_plain_text_whatever_the_calls(
        calls: list[tuple[list[str], bool, tuple[str, ...], dict[str, tuple[str, ...]]]]
        ) -> None:
    """Hosts added and removed, other spellings and refused names among them, the default
    and the routed addresses changed, what came and went told by the caller or not: the
    text made from the kept lines is always the plain function's text of the same
    entries."""
    kept, joined, told = EntriesText(), FewSplices(), EntriesText()
    for hosts, tidy, default, routed in calls:
        given_hosts = sorted(set(hosts)) if tidy else hosts
        plain = entries_text({h: routed.get(h, default) for h in given_hosts})
        assert kept.text(given_hosts, default, routed) == plain
        assert joined.text(given_hosts, default, routed) == plain
        last = set(told.hosts)
        # Told only of sorted, distinct hosts (a pass's), as the writer does.
        moved = (sorted(set(given_hosts) - last), sorted(last - set(given_hosts))) \
            if tidy else None
        assert told.text(given_hosts, default, routed, moved) == plain


class FewSplices(EntriesText):
    """Joins the lines afresh as soon as more than one host changed."""

    SPLICES = 1


def test_many_changes_make_the_value_afresh_and_keep_nothing_of_the_gone() -> None:
    kept = EntriesText()
    many = [f"h{i:05}.example.com" for i in range(3000)]
    kept.text(many, ("10.96.0.50",), {})
    few = many[:10]
    assert kept.text(few, ("10.96.0.50",), {}) == "".join(f"{h} 10.96.0.50\n" for h in few)
    assert kept._order == few
    assert kept.hosts == tuple(few)
    assert kept._present == set(few)


def sets_of_hosts(*owners: object) -> list[int]:
    """The sizes of the sets and dicts the ``owners`` (objects or modules) hold by name."""
    return [len(v) for owner in owners for k, v in vars(owner).items()
            if isinstance(v, set | frozenset | dict) and not k.startswith("__")]


def test_no_set_of_the_hosts_is_kept_between_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither the module nor the writer's value keeps a set or a dict of the hosts (half a
    megabyte at ten thousand hosts) after the first call, or once told what moved (only
    calls not told keep the set made for them, for the next such call); a host with a line
    in the last value is not checked again when the value is made afresh (a pass rewrites
    the same hosts but a few)."""
    kept = EntriesText()
    many = tuple(f"h{i:05}.example.com" for i in range(3000))
    kept.text(many, ("10.96.0.50",), {})
    assert max(sets_of_hosts(kept, published), default=0) < 100
    kept.text(many[1:], ("10.96.0.50",), {})
    assert kept._present == set(many[1:])
    kept.text((*many[1:], "z.example.com"), ("10.96.0.50",), {}, (("z.example.com",), ()))
    assert max(sets_of_hosts(kept, published), default=0) < 100
    checked: list[object] = []
    fresh = published._host_key

    def counted(raw: object) -> tuple[str, str]:
        checked.append(raw)
        return fresh(raw)

    monkeypatch.setattr(published, "_host_key", counted)
    # Another default address: every line is made again.
    text = kept.text((*many[1:], "y.example.com"), ("10.96.0.51",), {}, (("y.example.com",),
                                                                        ("z.example.com",)))
    assert checked == ["y.example.com"]
    assert text == entries_text({h: ("10.96.0.51",) for h in (*many[1:], "y.example.com")})
    assert max(sets_of_hosts(kept, published), default=0) < 100
