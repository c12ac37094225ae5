"""The published ``entries`` format (hairpin_proxy.published): a host spelled as an address is
refused whichever way it is written, and names are never taken for addresses."""

from __future__ import annotations

import ipaddress

from hypothesis import given
from hypothesis import strategies as st

from hairpin_proxy.published import entries_text, read_entries

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
