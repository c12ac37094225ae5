"""PROXY protocol encoding and strict decoding (v1 and v2)."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hairpin_proxy.proxyproto import (
    PP2_SUBTYPE_SSL_CN,
    PP2_SUBTYPE_SSL_VERSION,
    PP2_TYPE_ALPN,
    PP2_TYPE_AUTHORITY,
    PP2_TYPE_CRC32C,
    PP2_TYPE_NOOP,
    PP2_TYPE_SSL,
    PP2_TYPE_UNIQUE_ID,
    V1_MAX_LENGTH,
    V2_SIGNATURE,
    IncompleteHeader,
    ProxyHeader,
    ProxyProtocolError,
    crc32c,
    decode,
    encode,
    encode_v1,
    encode_v2,
    encoder_to,
    parse_ssl_tlv,
)
from tests.peers import has_ipv6_loopback

# Other suites load this machine too: no per-example deadline.
relaxed = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- strategies -------------------------------------------------------------------------------

ipv4 = st.ip_addresses(v=4).map(str)
ipv6 = st.ip_addresses(v=6).map(str)
ports = st.integers(0, 65535)


def _tlv(t: int, v: bytes) -> bytes:
    return bytes((t, len(v) >> 8, len(v) & 0xFF)) + v


ssl_values = st.builds(
    lambda client, verify, subs: bytes((client,)) + verify.to_bytes(4, "big")
    + b"".join(_tlv(t, v) for t, v in subs),
    st.integers(0, 7), st.integers(0, 2**32 - 1),
    st.lists(st.tuples(st.integers(0x21, 0x25), st.binary(max_size=20)), max_size=3))
plain_tlv = st.tuples(
    st.integers(0, 255).filter(lambda t: t not in (PP2_TYPE_CRC32C, PP2_TYPE_UNIQUE_ID,
                                                   PP2_TYPE_SSL)),
    st.binary(max_size=40))
tlv_lists = st.lists(st.one_of(
    plain_tlv,
    st.tuples(st.just(PP2_TYPE_UNIQUE_ID), st.binary(max_size=128)),
    st.tuples(st.just(PP2_TYPE_SSL), ssl_values)), max_size=5)


@st.composite
def headers(draw: st.DrawFn, crc: bool | None = False) -> ProxyHeader:
    version = draw(st.sampled_from([1, 2]))
    command = "PROXY" if version == 1 else draw(st.sampled_from(["PROXY", "LOCAL"]))
    family = "UNKNOWN" if command == "LOCAL" else draw(st.sampled_from(
        ["TCP4", "TCP6", "UNKNOWN"]))
    src = dst = None
    if family != "UNKNOWN":
        ip = ipv4 if family == "TCP4" else ipv6
        src, dst = (draw(ip), draw(ports)), (draw(ip), draw(ports))
    tlvs: list[tuple[int, bytes]] = []
    if version == 2:
        tlvs = draw(tlv_lists)
        if crc or (crc is None and draw(st.booleans())):
            tlvs.insert(draw(st.integers(0, len(tlvs))), (PP2_TYPE_CRC32C, b"\0\0\0\0"))
    return ProxyHeader(version, command, family, src, dst, tuple(tlvs))  # type: ignore[arg-type]


def tlv_offsets(wire: bytes) -> dict[int, int]:
    """Offset of each TLV's value in a v2 header, by type (last one wins)."""
    i = 16 + {0x11: 12, 0x21: 36}.get(wire[13], 0) if wire[12] == 0x21 else 16
    end = 16 + int.from_bytes(wire[14:16], "big")
    out = {}
    while i < end:
        out[wire[i]] = i + 3
        i += 3 + int.from_bytes(wire[i + 1:i + 3], "big")
    return out


def with_crc_filled(h: ProxyHeader, wire: bytes) -> ProxyHeader:
    """``h`` with its CRC32C placeholder replaced by the checksum in ``wire``."""
    if h.tlv(PP2_TYPE_CRC32C) is None:
        return h
    at = tlv_offsets(wire)[PP2_TYPE_CRC32C]
    value = wire[at:at + 4]
    return dataclasses.replace(h, tlvs=tuple(
        (t, value if t == PP2_TYPE_CRC32C else v) for t, v in h.tlvs))


# --- CRC32c -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("data", "expected"), [
    (b"123456789", 0xE3069283),
    (bytes(32), 0x8A9136AA),            # RFC 3720 B.4 test vectors
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
    (b"", 0),
])
def test_crc32c_known_vectors(data: bytes, expected: int) -> None:
    assert crc32c(data) == expected


# --- round trips ------------------------------------------------------------------------------

@relaxed
@given(headers(crc=None), st.binary(max_size=20))
def test_decode_inverts_encode(h: ProxyHeader, payload: bytes) -> None:
    wire = encode(h)
    got, used = decode(wire + payload)
    assert used == len(wire)
    assert got == with_crc_filled(h, wire)
    assert encode(got) == wire


@relaxed
@given(headers(crc=False))
def test_round_trip_is_exact_without_crc(h: ProxyHeader) -> None:
    assert decode(encode(h)) == (h, len(encode(h)))


@relaxed
@given(headers(crc=True))
def test_crc_is_verified_wherever_the_tlv_sits(h: ProxyHeader) -> None:
    assume(h.version == 2)
    wire = encode(h)
    got, _ = decode(wire)
    assert got.crc32c is not None
    # Recompute independently: zero the 4 value bytes of the CRC TLV.
    at = tlv_offsets(wire)[PP2_TYPE_CRC32C]
    assert crc32c(wire[:at] + bytes(4) + wire[at + 4:]) == got.crc32c
    for i in range(len(wire)):  # any single corrupted bit inside the header is caught...
        if i == at - 3:
            continue  # ...except in the CRC TLV's own type byte, which removes the check
        bad = bytearray(wire)
        bad[i] ^= 0x01
        with pytest.raises(ProxyProtocolError):
            decode(bytes(bad))


@relaxed
@given(headers(crc=None))
def test_every_strict_prefix_is_incomplete(h: ProxyHeader) -> None:
    wire = encode(h)
    for i in range(len(wire)):
        with pytest.raises(IncompleteHeader):
            decode(wire[:i])


@relaxed
@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_protocol_errors(data: bytes) -> None:
    try:
        h, used = decode(data)
    except ProxyProtocolError:
        return
    assert 0 < used <= len(data)
    assert decode(data[:used]) == (h, used)


@relaxed
@given(headers(crc=None), st.data())
def test_mutated_headers_raise_only_protocol_errors(h: ProxyHeader, data: st.DataObject) -> None:
    wire = bytearray(encode(h))
    for _ in range(data.draw(st.integers(1, 3))):
        op = data.draw(st.sampled_from(["flip", "insert", "delete"]))
        i = data.draw(st.integers(0, max(0, len(wire) - 1)))
        if op == "flip" and wire:
            wire[i] = data.draw(st.integers(0, 255))
        elif op == "insert":
            wire.insert(i, data.draw(st.integers(0, 255)))
        elif wire:
            del wire[i]
    try:
        got, used = decode(bytes(wire))
    except ProxyProtocolError:
        return
    assert used <= len(wire)
    assert encode(got)[:1] == bytes(wire[:1])


@relaxed
@given(ipv4, ports, ipv4, ports)
def test_v1_ipv4_line(s: str, sp: int, d: str, dp: int) -> None:
    wire = encode_v1((s, sp), (d, dp))
    assert wire == f"PROXY TCP4 {s} {d} {sp} {dp}\r\n".encode()
    assert decode(wire)[0] == ProxyHeader(1, "PROXY", "TCP4", (s, sp), (d, dp))


@relaxed
@given(ipv6, ports, ipv6, ports)
def test_v1_ipv6_line_uses_inet_ntop_text(s: str, sp: int, d: str, dp: int) -> None:
    s_packed = socket.inet_pton(socket.AF_INET6, s)
    d_packed = socket.inet_pton(socket.AF_INET6, d)
    mapped = bytes(10) + b"\xff\xff"
    assume(not s_packed.startswith(mapped) and not d_packed.startswith(mapped))
    s_txt = socket.inet_ntop(socket.AF_INET6, s_packed)
    d_txt = socket.inet_ntop(socket.AF_INET6, d_packed)
    wire = encode_v1((s.upper(), sp), (d, dp))
    assert wire == f"PROXY TCP6 {s_txt} {d_txt} {sp} {dp}\r\n".encode()
    assert len(wire) <= V1_MAX_LENGTH


@relaxed
@given(st.binary(min_size=16, max_size=16), st.binary(min_size=16, max_size=16), ports, ports)
def test_v2_ipv6_addresses_decode_to_inet_ntop_text(s: bytes, d: bytes, sp: int, dp: int) -> None:
    wire = (V2_SIGNATURE + b"\x21\x21\x00\x24" + s + d + sp.to_bytes(2, "big")
            + dp.to_bytes(2, "big"))
    h, _ = decode(wire)
    assert h.source == (socket.inet_ntop(socket.AF_INET6, s), sp)
    assert h.destination == (socket.inet_ntop(socket.AF_INET6, d), dp)
    assert encode(h) == wire


@relaxed
@given(st.text(alphabet="0123456789abcdefABCDEF:.%", max_size=45))
def test_v1_ipv6_text_accepted_exactly_like_inet_pton(text: str) -> None:
    try:
        packed: bytes | None = socket.inet_pton(socket.AF_INET6, text)
    except OSError:
        packed = None
    line = f"PROXY TCP6 {text} ::1 1 2\r\n".encode()
    if packed is None or not text:
        with pytest.raises(ProxyProtocolError):
            decode(line)
    else:
        h, _ = decode(line)
        assert h.source == (socket.inet_ntop(socket.AF_INET6, packed), 1)


@relaxed
@given(st.text(alphabet="0123456789.", max_size=20))
def test_v1_ipv4_text_accepted_only_in_strict_dotted_decimal(text: str) -> None:
    parts = text.split(".")
    strict = (len(parts) == 4 and all(p.isdigit() and int(p) <= 255 and (p == "0" or p[0] != "0")
                                      for p in parts))
    line = f"PROXY TCP4 {text} 127.0.0.1 1 2\r\n".encode()
    if strict:
        assert decode(line)[0].source == (text, 1)
    else:
        with pytest.raises(ProxyProtocolError) as exc:
            decode(line)
        assert not isinstance(exc.value, IncompleteHeader)


@relaxed
@given(st.one_of(st.tuples(ipv4, ports, ipv4, ports), st.tuples(ipv6, ports, ipv6, ports),
                 st.tuples(ipv4, ports, ipv6, ports)),
       tlv_lists, st.booleans())
def test_encoders_agree_with_header_values(
        ends: tuple[str, int, str, int], tlvs: list[tuple[int, bytes]], crc: bool) -> None:
    src, dst = (ends[0], ends[1]), (ends[2], ends[3])
    assert encode_v1(src, dst) == encode(ProxyHeader.for_connection(src, dst, version=1))
    want = [*tlvs, (PP2_TYPE_CRC32C, b"")] if crc else tlvs
    assert encode_v2(src, dst, tlvs=tlvs, crc32c=crc) == encode(
        ProxyHeader.for_connection(src, dst, version=2, tlvs=want))


# Endpoints as the relay may hand them over, and some it never should: IPv4-mapped and
# non-canonical IPv6 text, socket 4-tuples, bad text, ports out of range, a missing end.
any_ip = st.one_of(ipv4, ipv6, ipv4.map(lambda ip: "::ffff:" + ip),
                   ipv6.map(str.upper), st.sampled_from(["1.2.3", "01.2.3.4", "fe80::1%eth0",
                                                         "example.test", ""]))
any_port = st.one_of(ports, st.sampled_from([-1, 65536, True]))
endpoints = st.one_of(st.none(), st.tuples(any_ip, any_port),
                      st.tuples(any_ip, any_port, st.just(0), st.just(0)))


def _outcome(encode: Callable[..., bytes], *args: object) -> bytes | str:
    try:
        return encode(*args)
    except ValueError as exc:
        return f"ValueError: {exc}"


@relaxed
@given(st.sampled_from([1, 2]), endpoints, st.lists(endpoints, min_size=1, max_size=4))
def test_encoder_to_a_fixed_destination_equals_the_full_encoder(
        version: int, destination: tuple[object, ...] | None,
        sources: list[tuple[object, ...] | None]) -> None:
    full = encode_v1 if version == 1 else encode_v2
    encode = encoder_to(version, destination)  # type: ignore[arg-type]
    for source in sources + sources:  # one encoder serves many connections, some again
        assert _outcome(encode, source) == _outcome(full, source, destination)


@pytest.mark.parametrize("version", [1, 2])
def test_encoder_to_stays_equal_past_its_memo_of_source_addresses(version: int) -> None:
    full = encode_v1 if version == 1 else encode_v2
    destination = ("10.0.0.1", 443)
    encode = encoder_to(version, destination)  # type: ignore[arg-type]
    sources = [(f"10.1.{i // 256}.{i % 256}", 1000 + i) for i in range(2500)]
    for source in sources + sources[:10]:  # the first ones again, after the memo started over
        assert encode(source) == full(source, destination)


# --- encoder specifics ------------------------------------------------------------------------

def test_v1_examples() -> None:
    assert encode_v1(("192.168.0.1", 56324), ("192.168.0.11", 443)) == \
        b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n"
    assert encode_v1(None, ("10.0.0.1", 80)) == b"PROXY UNKNOWN\r\n"
    assert encode_v1(("10.0.0.1", 80), None) == b"PROXY UNKNOWN\r\n"
    worst = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
    assert len(encode_v1((worst, 65535), (worst, 65535))) == 104


def test_v4_mapped_addresses_are_sent_as_ipv4() -> None:
    assert encode_v1(("::ffff:1.2.3.4", 1000), ("::FFFF:10.0.0.1", 443)) == \
        b"PROXY TCP4 1.2.3.4 10.0.0.1 1000 443\r\n"
    assert encode_v1(("::ffff:1.2.3.4", 1000), ("10.0.0.1", 443)) == \
        b"PROXY TCP4 1.2.3.4 10.0.0.1 1000 443\r\n"
    assert encode_v1(("0:0:0:0:0:ffff:102:304", 1), ("10.0.0.1", 2)) == \
        b"PROXY TCP4 1.2.3.4 10.0.0.1 1 2\r\n"
    v2 = encode_v2(("::ffff:1.2.3.4", 1000), ("::ffff:10.0.0.1", 443))
    assert v2 == V2_SIGNATURE + b"\x21\x11\x00\x0c" + bytes([1, 2, 3, 4, 10, 0, 0, 1]) + \
        (1000).to_bytes(2, "big") + (443).to_bytes(2, "big")


def test_socket_address_tuples_are_accepted_as_they_are() -> None:
    if not has_ipv6_loopback():
        pytest.skip("IPv6 loopback (::1) is not available here")
    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", 0))
        name = s.getsockname()
    assert len(name) == 4
    assert encode_v1(name, name) == f"PROXY TCP6 ::1 ::1 {name[1]} {name[1]}\r\n".encode()
    assert decode(encode_v2(name, name))[0].source == ("::1", name[1])


def test_mixed_families_fall_back_to_unknown() -> None:
    assert encode_v1(("1.2.3.4", 1), ("2001:db8::1", 2)) == b"PROXY UNKNOWN\r\n"
    # v2: still a PROXY command (not LOCAL), with the UNSPEC family and no address block.
    assert encode_v2(("2001:db8::1", 1), ("1.2.3.4", 2)) == V2_SIGNATURE + b"\x21\x00\x00\x00"
    h, _ = decode(encode_v2(("2001:db8::1", 1), ("1.2.3.4", 2)))
    assert (h.command, h.family, h.source) == ("PROXY", "UNKNOWN", None)


def test_v2_exact_bytes() -> None:
    assert encode_v2(("10.0.0.1", 40000), ("10.0.0.2", 443)) == (
        b"\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c\x0a\x00\x00\x01\x0a\x00\x00\x02"
        b"\x9c\x40\x01\xbb")
    v6 = encode_v2(("::1", 1), ("::2", 2))
    assert v6[12:16] == b"\x21\x21\x00\x24" and len(v6) == 52
    assert encode_v2(None, None) == V2_SIGNATURE + b"\x21\x00\x00\x00"
    assert encode_v2(("10.0.0.1", 1), ("10.0.0.2", 2), command="LOCAL") == \
        V2_SIGNATURE + b"\x20\x00\x00\x00"


def test_v2_tlvs_in_order_and_crc_appended() -> None:
    tlvs = [(PP2_TYPE_AUTHORITY, b"app.example.test"), (PP2_TYPE_NOOP, b""),
            (PP2_TYPE_AUTHORITY, b"again")]
    wire = encode_v2(("10.0.0.1", 1), ("10.0.0.2", 2), tlvs=tlvs, crc32c=True)
    h, used = decode(wire)
    assert used == len(wire)
    assert h.tlvs[:3] == tuple(tlvs)
    assert h.tlvs[3][0] == PP2_TYPE_CRC32C
    assert h.authority == "app.example.test"
    assert h.tlv_all(PP2_TYPE_AUTHORITY) == (b"app.example.test", b"again")
    assert h.tlv(PP2_TYPE_ALPN) is None and h.alpn is None and h.unique_id is None
    # A placeholder among the TLVs takes the checksum in place; no second CRC is appended.
    first = encode_v2(("10.0.0.1", 1), ("10.0.0.2", 2),
                      tlvs=[(PP2_TYPE_CRC32C, b""), *tlvs], crc32c=True)
    g, _ = decode(first)
    assert [t for t, _ in g.tlvs] == [PP2_TYPE_CRC32C, 2, 4, 2]


def test_local_with_tlvs_and_crc() -> None:
    wire = encode_v2(None, None, command="LOCAL", tlvs=[(PP2_TYPE_NOOP, b"xyz")], crc32c=True)
    h, _ = decode(wire)
    assert (h.command, h.family, h.source, h.destination) == ("LOCAL", "UNKNOWN", None, None)
    assert h.tlvs[0] == (PP2_TYPE_NOOP, b"xyz")
    bad = bytearray(wire)
    bad[-1] ^= 0xFF
    with pytest.raises(ProxyProtocolError, match="CRC32c"):
        decode(bytes(bad))


@pytest.mark.parametrize(("call", "match"), [
    (lambda: encode_v1(("1.2.3", 1), ("1.2.3.4", 2)), "not an IP address"),
    (lambda: encode_v1(("01.2.3.4", 1), ("1.2.3.4", 2)), "not an IP address"),
    (lambda: encode_v1(("fe80::1%eth0", 1), ("::1", 2)), "not an IP address"),
    (lambda: encode_v1(("example.test", 1), ("1.2.3.4", 2)), "not an IP address"),
    (lambda: encode_v1(("1.2.3.4", 65536), ("1.2.3.4", 2)), "port"),
    (lambda: encode_v1(("1.2.3.4", -1), ("1.2.3.4", 2)), "port"),
    (lambda: encode_v1(("1.2.3.4", True), ("1.2.3.4", 2)), "port"),
    (lambda: encode_v2(("1.2.3.4", 1), ("1.2.3.4", 70000)), "port"),
    (lambda: encode_v2(None, None, command="BOGUS"), "command"),  # type: ignore[arg-type]
    (lambda: encode_v2(None, None, tlvs=[(256, b"")]), "TLV type"),
    (lambda: encode_v2(None, None, tlvs=[(0xE0, bytes(65536))]), "65535"),
    (lambda: encode_v2(None, None, tlvs=[(0xE0, bytes(40000))] * 2), "too long"),
    (lambda: encode_v2(None, None, tlvs=[(3, b""), (3, b"")]), "one CRC32C"),
])
def test_encoders_reject_bad_input(call: object, match: str) -> None:
    assert callable(call)
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"version": 3}, "version"),
    ({"version": 1, "tlvs": ((4, b""),)}, "version 1"),
    ({"version": 1, "command": "LOCAL"}, "version 1"),
    ({"command": "LOCAL", "family": "TCP4", "source": ("1.2.3.4", 1),
      "destination": ("1.2.3.4", 2)}, "LOCAL"),
    ({"family": "TCP4", "source": ("::1", 1), "destination": ("1.2.3.4", 2)}, "IPv4"),
    ({"family": "TCP6", "source": ("1.2.3.4", 1), "destination": ("::1", 2)}, "IPv6"),
    ({"family": "TCP4", "source": ("1.2.3.4", 1)}, "both"),
    ({"family": "UNKNOWN", "source": ("1.2.3.4", 1)}, "no addresses"),
    ({"family": "TCP4", "source": ("1.2.3.4", 99999), "destination": ("1.2.3.4", 2)}, "port"),
    ({"tlvs": ((3, b""), (3, b""))}, "one CRC32C"),
    ({"tlvs": ((-1, b""),)}, "TLV type"),
    ({"family": "UDP4"}, "family"),
])
def test_header_value_is_validated(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ProxyHeader(**kwargs)  # type: ignore[arg-type]


def test_header_canonicalises_ipv6_text() -> None:
    h = ProxyHeader(2, "PROXY", "TCP6", ("2001:DB8:0:0:0:0:0:1", 1), ("::FFFF:1.2.3.4", 2))
    assert h.source == ("2001:db8::1", 1)
    assert h.destination == ("::ffff:1.2.3.4", 2)


def test_ssl_tlv_parsing() -> None:
    value = b"\x01" + (0).to_bytes(4, "big") + _tlv(PP2_SUBTYPE_SSL_VERSION, b"TLSv1.3") + \
        _tlv(PP2_SUBTYPE_SSL_CN, b"client.example.test")
    assert parse_ssl_tlv(value) == (1, 0, ((PP2_SUBTYPE_SSL_VERSION, b"TLSv1.3"),
                                           (PP2_SUBTYPE_SSL_CN, b"client.example.test")))
    with pytest.raises(ProxyProtocolError):
        parse_ssl_tlv(b"\x01\x00")
    with pytest.raises(ProxyProtocolError):
        parse_ssl_tlv(value[:-1])


def test_decode_takes_bytearray_and_memoryview() -> None:
    wire = encode_v2(("10.0.0.1", 1), ("10.0.0.2", 2)) + b"GET /"
    assert decode(bytearray(wire))[1] == 28
    assert decode(memoryview(wire))[1] == 28
    line = b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\nGET /"
    assert decode(memoryview(line))[0].source == ("1.2.3.4", 1)


# --- rejections -------------------------------------------------------------------------------

def rejected(data: bytes) -> ProxyProtocolError:
    """Assert ``data`` is refused for good (not merely incomplete)."""
    with pytest.raises(ProxyProtocolError) as exc:
        decode(data)
    assert not isinstance(exc.value, IncompleteHeader), exc.value
    return exc.value


V1_BAD = {
    "lowercase signature": b"proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n",
    "no family": b"PROXY\r\n",
    "empty family": b"PROXY \r\n",
    "unknown family": b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n",
    "udp family": b"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n",
    "lowercase family": b"PROXY tcp4 1.2.3.4 5.6.7.8 1 2\r\n",
    "UNKNOWN glued": b"PROXY UNKNOWNX\r\n",
    "missing field": b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",
    "extra field": b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n",
    "double space": b"PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n",
    "trailing space": b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n",
    "tab": b"PROXY TCP4 1.2.3.4\t5.6.7.8 1 2\r\n",
    "leading zero octet": b"PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n",
    "zero-padded octet": b"PROXY TCP4 1.2.3.00 5.6.7.8 1 2\r\n",
    "octet out of range": b"PROXY TCP4 1.2.3.256 5.6.7.8 1 2\r\n",
    "three octets": b"PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n",
    "five octets": b"PROXY TCP4 1.2.3.4.5 5.6.7.8 1 2\r\n",
    "hex octet": b"PROXY TCP4 0x1.2.3.4 5.6.7.8 1 2\r\n",
    "ipv6 in TCP4": b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n",
    "ipv4 in TCP6": b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n",
    "zone id": b"PROXY TCP6 fe80::1%eth0 ::1 1 2\r\n",
    "two double colons": b"PROXY TCP6 1::2::3 ::1 1 2\r\n",
    "too many groups": b"PROXY TCP6 1:2:3:4:5:6:7:8:9 ::1 1 2\r\n",
    "long group": b"PROXY TCP6 12345::1 ::1 1 2\r\n",
    "leading zero port": b"PROXY TCP4 1.2.3.4 5.6.7.8 080 2\r\n",
    "zero-padded zero port": b"PROXY TCP4 1.2.3.4 5.6.7.8 00 2\r\n",
    "port out of range": b"PROXY TCP4 1.2.3.4 5.6.7.8 1 65536\r\n",
    "huge port": b"PROXY TCP4 1.2.3.4 5.6.7.8 1 9999999\r\n",
    "negative port": b"PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n",
    "plus port": b"PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n",
    "empty port": b"PROXY TCP4 1.2.3.4 5.6.7.8  2\r\n",
    "non-ascii": "PROXY TCP4 1.2.3.4 5.6.7.8 1 ２\r\n".encode(),
    "bare LF terminator": b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n",
    "bare CR terminator": b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX",
    "LF CR terminator": b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n\r",
    "bare CR inside": b"PROXY TCP4 1.2.3.4\r5.6.7.8 1 2\r\n",
    "bare LF inside": b"PROXY TCP4 1.2.3.4\n5.6.7.8 1 2\r\n",
    "bare CR in UNKNOWN": b"PROXY UNKNOWN a\rb\r\n",
    "bare LF in UNKNOWN": b"PROXY UNKNOWN a\nb\r\n",
    "over-long UNKNOWN": b"PROXY UNKNOWN " + b"x" * 92 + b"\r\n",
    "over-long without CRLF": b"PROXY UNKNOWN " + b"x" * 200,
}


@pytest.mark.parametrize("data", V1_BAD.values(), ids=V1_BAD.keys())
def test_v1_rejections(data: bytes) -> None:
    rejected(data)


def test_v1_length_limit_is_exactly_107() -> None:
    longest = b"PROXY UNKNOWN " + b"x" * 91 + b"\r\n"
    assert len(longest) == V1_MAX_LENGTH
    assert decode(longest + b"payload") == (ProxyHeader(1, "PROXY", "UNKNOWN"), 107)
    with pytest.raises(IncompleteHeader):
        decode(longest[:-1])
    rejected(b"PROXY UNKNOWN " + b"x" * 92 + b"\r")
    rejected(b"PROXY UNKNOWN " + b"x" * 92)


def test_v1_unknown_ignores_the_rest_of_the_line() -> None:
    h, used = decode(b"PROXY UNKNOWN ffff::1 ffff::2 65535 65535\r\nGET")
    assert (h.family, h.source, used) == ("UNKNOWN", None, 43)


def _v2(ver_cmd: int, fam: int, body: bytes, length: int | None = None) -> bytes:
    n = len(body) if length is None else length
    return V2_SIGNATURE + bytes((ver_cmd, fam, n >> 8, n & 0xFF)) + body


ADDR4 = bytes([10, 0, 0, 1, 10, 0, 0, 2, 0, 1, 0, 2])
ADDR6 = bytes(15) + b"\x01" + bytes(15) + b"\x02" + b"\x00\x01\x00\x02"


def _with_crc(ver_cmd: int, fam: int, addr: bytes, before: bytes, after: bytes) -> bytes:
    wire = bytearray(_v2(ver_cmd, fam, addr + before + b"\x03\x00\x04\x00\x00\x00\x00" + after))
    at = 16 + len(addr) + len(before) + 3
    wire[at:at + 4] = crc32c(bytes(wire)).to_bytes(4, "big")
    return bytes(wire)


V2_BAD = {
    "version 1": _v2(0x11, 0x11, ADDR4),
    "version 3": _v2(0x31, 0x11, ADDR4),
    "version 15": _v2(0xF1, 0x11, ADDR4),
    "command 2": _v2(0x22, 0x11, ADDR4),
    "command 15": _v2(0x2F, 0x11, ADDR4),
    "family 0x01": _v2(0x21, 0x01, ADDR4),
    "family 0x10": _v2(0x21, 0x10, ADDR4),
    "family 0x13": _v2(0x21, 0x13, ADDR4),
    "family 0x41": _v2(0x21, 0x41, ADDR4),
    "family 0xff": _v2(0x21, 0xFF, ADDR4),
    "TCP4 block too short": _v2(0x21, 0x11, ADDR4[:11]),
    "TCP6 block too short": _v2(0x21, 0x21, ADDR6[:35]),
    "TCP6 given an IPv4 block": _v2(0x21, 0x21, ADDR4),
    "UDP4 block too short": _v2(0x21, 0x12, ADDR4[:8]),
    "UNIX block too short": _v2(0x21, 0x31, bytes(215)),
    "LOCAL TCP4 block too short": _v2(0x20, 0x11, bytes(4)),
    "truncated TLV header (1 byte)": _v2(0x21, 0x11, ADDR4 + b"\x04"),
    "truncated TLV header (2 bytes)": _v2(0x21, 0x11, ADDR4 + b"\x04\x00"),
    "TLV past the end": _v2(0x21, 0x11, ADDR4 + b"\x04\x00\x05abcd"),
    "TLV past the end (UNSPEC)": _v2(0x21, 0x00, b"\x04\x00\x05abcd"),
    "second TLV truncated": _v2(0x21, 0x11, ADDR4 + b"\x04\x00\x00\x02\x00"),
    "CRC TLV of 3 bytes": _v2(0x21, 0x11, ADDR4 + b"\x03\x00\x03abc"),
    "CRC TLV of 5 bytes": _v2(0x21, 0x11, ADDR4 + b"\x03\x00\x05abcde"),
    "CRC wrong (first TLV)": _v2(0x21, 0x11, ADDR4 + b"\x03\x00\x04\x00\x00\x00\x00"),
    "two CRC TLVs": _v2(0x21, 0x11, ADDR4 + b"\x03\x00\x04abcd\x03\x00\x04abcd"),
    "UNIQUE_ID over 128 bytes": _v2(0x21, 0x11, ADDR4 + _tlv(PP2_TYPE_UNIQUE_ID, bytes(129))),
    "SSL TLV too short": _v2(0x21, 0x11, ADDR4 + _tlv(PP2_TYPE_SSL, b"\x01\x00\x00\x00")),
    "SSL sub-TLV past its end": _v2(
        0x21, 0x11, ADDR4 + _tlv(PP2_TYPE_SSL, b"\x01" + bytes(4) + b"\x21\x00\x09x")),
}


@pytest.mark.parametrize("data", V2_BAD.values(), ids=V2_BAD.keys())
def test_v2_rejections(data: bytes) -> None:
    rejected(data)


@pytest.mark.parametrize("where", ["first", "middle", "last"])
@pytest.mark.parametrize("fam", [0x11, 0x21, 0x00])
def test_v2_crc_checked_in_any_position(where: str, fam: int) -> None:
    addr = {0x11: ADDR4, 0x21: ADDR6, 0x00: b""}[fam]
    noop, auth = _tlv(PP2_TYPE_NOOP, b"pad"), _tlv(PP2_TYPE_AUTHORITY, b"a.example.test")
    before, after = {"first": (b"", noop + auth), "middle": (noop, auth),
                     "last": (noop + auth, b"")}[where]
    good = _with_crc(0x21, fam, addr, before, after)
    h, used = decode(good)
    assert used == len(good) and h.authority == "a.example.test"
    assert encode(h) == good
    crc_type_at = 16 + len(addr) + len(before)
    for i in range(len(good)):
        for bit in (0x01, 0x80):
            if i == crc_type_at:
                continue  # turns the CRC TLV into another type: nothing left to check
            bad = bytearray(good)
            bad[i] ^= bit
            with pytest.raises(ProxyProtocolError):
                decode(bytes(bad))


def test_v2_signature_byte_by_byte() -> None:
    for i in range(12):
        bad = bytearray(encode_v2(("10.0.0.1", 1), ("10.0.0.2", 2)))
        bad[i] ^= 0x40
        rejected(bytes(bad))
        rejected(bytes(bad[:i + 1]))  # refused as soon as the wrong byte arrives


def test_v2_unsupported_but_valid_families_fall_back_to_unknown() -> None:
    for fam, block in [(0x12, 12), (0x22, 36), (0x31, 216), (0x32, 216)]:
        wire = _v2(0x21, fam, bytes(block) + _tlv(PP2_TYPE_AUTHORITY, b"x.test"))
        h, used = decode(wire + b"data")
        assert (h.family, h.source, h.authority, used) == ("UNKNOWN", None, "x.test", len(wire))


def test_v2_local_ignores_addresses_but_skips_them() -> None:
    wire = _v2(0x20, 0x11, ADDR4 + _tlv(PP2_TYPE_NOOP, b""))
    h, used = decode(wire + b"x")
    assert (h.command, h.family, h.source, h.tlvs, used) == \
        ("LOCAL", "UNKNOWN", None, ((PP2_TYPE_NOOP, b""),), len(wire))


NOT_PROXY = [b"GET / HTTP/1.1\r\n", b"\x16\x03\x01\x02\x00", b"PROXZ", b"PROXY TCP4 1.2.3.4x",
             b"\r\n\r\n\x01", b"\r\r", b" PROXY", b"\x00"]


@pytest.mark.parametrize("data", NOT_PROXY)
def test_other_protocols_are_refused_at_once(data: bytes) -> None:
    rejected(data)


INVALID_PREFIXES = {
    "octet with leading zero": b"PROXY TCP4 01",
    "octet too big": b"PROXY TCP4 256",
    "fifth octet": b"PROXY TCP4 1.2.3.4.",
    "port with leading zero": b"PROXY TCP4 1.2.3.4 5.6.7.8 08",
    "port too big": b"PROXY TCP4 1.2.3.4 5.6.7.8 65536",
    "seventh field": b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 ",
    "double space": b"PROXY TCP4  ",
    "family typo": b"PROXY TCP9",
    "ipv4 text in TCP6": b"PROXY TCP6 1.2.3.4 ",
    "long ipv6 group": b"PROXY TCP6 12345",
    "ipv6 triple colon": b"PROXY TCP6 1:::",
    "bad char in ipv6": b"PROXY TCP6 fe80::g",
    "CR then more": b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r ",
    "CR after partial line": b"PROXY TCP4 1.2.3.4\r",
    "v2 bad version": V2_SIGNATURE + b"\x11",
    "v2 bad family": V2_SIGNATURE + b"\x21\x13",
    "v2 block too short": V2_SIGNATURE + b"\x21\x11\x00\x05",
    "v2 TLV beyond length": _v2(0x21, 0x11, ADDR4 + b"\x04\x00\x09", length=14),
    "v2 CRC of 5 bytes, partial": _v2(0x21, 0x11, ADDR4 + b"\x03\x00\x05", length=20),
    "v2 UNIQUE_ID too long, partial": _v2(0x21, 0x11, ADDR4 + b"\x05\x00\x90", length=200),
}


@pytest.mark.parametrize("data", INVALID_PREFIXES.values(), ids=INVALID_PREFIXES.keys())
def test_hopeless_prefixes_are_not_incomplete(data: bytes) -> None:
    rejected(data)


VALID_PREFIXES = [b"", b"P", b"PROXY", b"PROXY ", b"PROXY T", b"PROXY UNK", b"PROXY TCP4 1",
                  b"PROXY TCP4 255.", b"PROXY TCP4 1.2.3.4 5.6.7.8 6553", b"PROXY TCP6 ::",
                  b"PROXY TCP6 ::ffff:1.2.", b"PROXY TCP6 1:2:3:4:5:6:7:", b"PROXY UNKNOWN junk",
                  b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r", b"\r", V2_SIGNATURE[:5], V2_SIGNATURE,
                  V2_SIGNATURE + b"\x21\x11\x00", _v2(0x21, 0x11, ADDR4 + b"\x04", length=20)]


@pytest.mark.parametrize("data", VALID_PREFIXES)
def test_genuine_prefixes_are_incomplete(data: bytes) -> None:
    with pytest.raises(IncompleteHeader):
        decode(data)
