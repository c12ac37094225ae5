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
