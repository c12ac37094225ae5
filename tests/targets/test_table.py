"""targets.json: canonical encoding, strict decoding."""
from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hairpin_proxy.targets import table
from hairpin_proxy.targets.model import Target
from hairpin_proxy.targets.slots import MAX_SLOT, listen_ports
from hairpin_proxy.targets.table import TableEntry, TableError, decode, encode, entry_for


def entry(slot: int = 1, key: str = "gateway/web/public", **kw: Any) -> TableEntry:
    base: dict[str, Any] = dict(
        key=key, slot=slot, listen=listen_ports(slot),
        upstream="public-envoy.envoy-gateway-system.svc.cluster.local", ports=(80, 443),
        advertise_ports=(80, 443), advertise_address="203.0.113.10", proxy="v2")
    base.update(kw)
    return TableEntry(**base)


def test_design_example_decodes() -> None:
    text = json.dumps({"version": 1, "targets": [{
        "key": "gateway/web/public", "slot": 1, "listen": [20002, 20003],
        "upstream": "public-envoy.envoy-gateway-system.svc.cluster.local",
        "ports": [80, 443], "advertise_ports": [80, 443],
        "advertise_address": "203.0.113.10", "proxy": "v2"}]})
    assert decode(text) == (entry(),)
    assert decode(text.encode()) == (entry(),)


def test_encode_is_canonical() -> None:
    a, b = entry(2, "ingressclass/nginx", proxy="v1"), entry(1)
    text = encode([a, b])
    assert text == encode([b, a]) and text.endswith("\n")
    top = json.loads(text)
    assert [t["slot"] for t in top["targets"]] == [1, 2]
    assert list(top) == ["targets", "version"]
    assert list(top["targets"][0]) == sorted(top["targets"][0])
    assert encode([]) == '{\n "targets": [],\n "version": 1\n}\n'


def test_encode_refuses_duplicates() -> None:
    with pytest.raises(TableError, match="appears twice"):
        encode([entry(1), entry(2)])
    with pytest.raises(TableError, match="slot 1 is given to two"):
        encode([entry(1), entry(1, "ingressclass/x")])


def good() -> dict[str, Any]:
    top: dict[str, Any] = json.loads(encode([entry()]))
    return top


def mutate(path: tuple[Any, ...], value: Any) -> str:
    top: Any = good()
    obj = top
    for p in path[:-1]:
        obj = obj[p]
    if value is KeyError:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value
    return json.dumps(top)


T0 = ("targets", 0)


@pytest.mark.parametrize(("path", "value", "words"), [
    (("version",), 2, "version 2 is not 1"),
    (("version",), True, "version True"),
    (("version",), KeyError, "lacks version"),
    (("extra",), 1, "unknown field(s) extra"),
    (("targets",), {}, "targets is not a list"),
    ((*T0,), "x", "targets[0] is not a JSON object"),
    ((*T0, "key"), "default", "default target has no place"),
    ((*T0, "key"), "gateway/x", "not a target key"),
    ((*T0, "key"), 5, "not a string"),
    ((*T0, "slot"), 0, "slot 0 is not in"),
    ((*T0, "slot"), MAX_SLOT + 1, "is not in"),
    ((*T0, "slot"), "1", "slot '1'"),
    ((*T0, "slot"), 1.0, "slot 1.0"),
    ((*T0, "listen"), [20004, 20005], "does not match slot 1"),
    ((*T0, "listen"), [20002], "list of two"),
    ((*T0, "upstream"), "bad_name.svc", "not a DNS name"),
    ((*T0, "upstream"), "", "not a DNS name"),
    ((*T0, "ports"), [0, 0], "neither an HTTP nor a TLS port"),
    ((*T0, "ports"), [80, 70000], "70000"),
    ((*T0, "ports"), [80, True], "True"),
    ((*T0, "advertise_ports"), [0, 443], "not a port number 1..65535"),
    ((*T0, "advertise_address"), "203.0.113", "neither empty nor an IP"),
    ((*T0, "advertise_address"), "2001:DB8::1", "canonical"),
    ((*T0, "advertise_address"), None, "neither empty"),
    ((*T0, "proxy"), "none", "not v1 or v2"),
    ((*T0, "proxy"), KeyError, "lacks proxy"),
    ((*T0, "bonus"), 1, "unknown field(s) bonus"),
])
def test_every_malformed_field_is_named(path: tuple[Any, ...], value: Any, words: str) -> None:
    with pytest.raises(TableError) as info:
        decode(mutate(path, value))
    assert words in str(info.value)


@pytest.mark.parametrize(("text", "words"), [
    ("", "not JSON"), ("[]", "not a JSON object"), ('{"version": NaN}', "NaN"),
    ('{"version": 1, "version": 1, "targets": []}', "appears twice"),
    (b"\xff", "not UTF-8"), ("[" * 100000, "nested too deeply")])
def test_bad_documents(text: str | bytes, words: str) -> None:
    with pytest.raises(TableError, match=words):
        decode(text)


def test_size_limit() -> None:
    with pytest.raises(TableError, match="larger than"):
        decode(" " * (4 * 1024 * 1024 + 1))


def test_entry_for() -> None:
    t = Target(key="ingressclass/nginx", service="ingress-nginx/c",
               upstream="c.ingress-nginx.svc.cluster.local", http_port=80, https_port=0,
               proxy="v1", proxy_source="x", found_by="y")
    e = entry_for(t, 3)
    assert e.listen == (20006, 20007) and e.ports == (80, 0) and e.proxy == "v1"
    assert e.advertise_ports == (80, 443) and e.advertise_address == ""
    with pytest.raises(TableError, match="gets no slot"):
        entry_for(Target(**{**t.__dict__, "proxy": "none"}), 1)


keys = st.one_of(
    st.from_regex(r"ingressclass/[a-z]([a-z0-9.-]{0,8}[a-z0-9])?", fullmatch=True),
    st.from_regex(r"gateway/[a-z]{1,5}/[a-z]{1,5}", fullmatch=True)).filter(
        lambda k: ".." not in k and ".-" not in k and "-." not in k)
ports = st.integers(0, 65535)
addresses = st.one_of(st.just(""), st.ip_addresses().map(str))


@st.composite
def tables(draw: st.DrawFn) -> list[TableEntry]:
    chosen = draw(st.lists(keys, unique=True, max_size=6))
    slots = draw(st.lists(st.integers(1, MAX_SLOT), unique=True, min_size=len(chosen),
                          max_size=len(chosen)))
    out = []
    for key, slot in zip(chosen, slots, strict=True):
        http = draw(ports)
        https = draw(st.integers(1 if http == 0 else 0, 65535))
        out.append(TableEntry(
            key=key, slot=slot, listen=listen_ports(slot),
            upstream=draw(st.from_regex(r"[a-z]{1,6}\.[a-z]{1,6}\.svc\.cluster\.local",
                                        fullmatch=True)),
            ports=(http, https), advertise_ports=(draw(st.integers(1, 65535)),
                                                  draw(st.integers(1, 65535))),
            advertise_address=draw(addresses), proxy=draw(st.sampled_from(["v1", "v2"]))))
    return out


@given(tables())
def test_round_trip(entries: list[TableEntry]) -> None:
    text = encode(entries)
    back = decode(text)
    assert back == tuple(sorted(entries, key=lambda e: e.slot))
    assert encode(back) == text


def test_published_times_are_read_leniently_and_settle_from_them() -> None:
    text = '{"ingressclass/a": 1000, "ingressclass/b": 1000.5, "x": true, "y": "no"}'
    assert table.decode_published(text) == {"ingressclass/a": 1000.0, "ingressclass/b": 1000.5}
    for bad in (None, "", "[1]", "{", 7):
        assert table.decode_published(bad) == {}
    published = {"ingressclass/a": 1000.0}
    assert table.settles_at(published, "ingressclass/a", 90, now=5000) == 1090
    # Not in the table yet: it will be published now, and settles from then.
    assert table.settles_at(published, "ingressclass/b", 90, now=5000) == 5090
    assert table.clock(1090) == "00:18:10"
