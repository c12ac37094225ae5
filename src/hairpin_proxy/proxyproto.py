"""PROXY protocol v1 (text) and v2 (binary) headers: encoding and strict decoding. Pure.

Follows HAProxy's proxy-protocol.txt. Address text is handled here without the socket or
ipaddress modules: IPv4 text is validated with a regex, IPv6 is converted by hand with the
same rules (and the same canonical output) as the C library's inet_pton/inet_ntop.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

__all__ = [
    "PP2_SUBTYPE_SSL_CIPHER",
    "PP2_SUBTYPE_SSL_CN",
    "PP2_SUBTYPE_SSL_KEY_ALG",
    "PP2_SUBTYPE_SSL_SIG_ALG",
    "PP2_SUBTYPE_SSL_VERSION",
    "PP2_TYPE_ALPN",
    "PP2_TYPE_AUTHORITY",
    "PP2_TYPE_CRC32C",
    "PP2_TYPE_NETNS",
    "PP2_TYPE_NOOP",
    "PP2_TYPE_SSL",
    "PP2_TYPE_UNIQUE_ID",
    "V1_MAX_LENGTH",
    "V2_SIGNATURE",
    "Command",
    "Endpoint",
    "Family",
    "IncompleteHeader",
    "ProxyHeader",
    "ProxyProtocolError",
    "crc32c",
    "decode",
    "encode",
    "encode_v1",
    "encode_v2",
    "encoder_to",
    "parse_ssl_tlv",
]

Endpoint = tuple[str, int]
Command = Literal["PROXY", "LOCAL"]
Family = Literal["TCP4", "TCP6", "UNKNOWN"]

PP2_TYPE_ALPN = 0x01
PP2_TYPE_AUTHORITY = 0x02
PP2_TYPE_CRC32C = 0x03
PP2_TYPE_NOOP = 0x04
PP2_TYPE_UNIQUE_ID = 0x05
PP2_TYPE_SSL = 0x20
PP2_SUBTYPE_SSL_VERSION = 0x21
PP2_SUBTYPE_SSL_CN = 0x22
PP2_SUBTYPE_SSL_CIPHER = 0x23
PP2_SUBTYPE_SSL_SIG_ALG = 0x24
PP2_SUBTYPE_SSL_KEY_ALG = 0x25
PP2_TYPE_NETNS = 0x30

V1_MAX_LENGTH = 107  # "PROXY UNKNOWN <v6> <v6> 65535 65535\r\n", the spec's worst case
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
UNIQUE_ID_MAX = 128

_V1_UNKNOWN = b"PROXY UNKNOWN\r\n"
_V1_BODY_MAX = V1_MAX_LENGTH - 2
_V2_HEADER = 16
# Address block sizes of the family/transport bytes the spec lists as valid.
_V2_BLOCK = {0x00: 0, 0x11: 12, 0x12: 12, 0x21: 36, 0x22: 36, 0x31: 216, 0x32: 216}
_V4_MAPPED = b"\x00" * 10 + b"\xff\xff"
_V2_TCP4 = V2_SIGNATURE + b"\x21\x11\x00\x0c"
_V2_TCP6 = V2_SIGNATURE + b"\x21\x21\x00\x24"


class ProxyProtocolError(ValueError):
    """The bytes are not a valid PROXY protocol header."""


class IncompleteHeader(ProxyProtocolError):
    """The bytes so far are a valid beginning of a header; more could complete it."""


# ---------------------------------------------------------------------------------------------
# CRC32c (Castagnoli, reflected polynomial 0x82F63B78), as RFC 4960 appendix B.

def _crc_table() -> tuple[int, ...]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


_CRC_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    """CRC32c of ``data`` (the checksum PP2_TYPE_CRC32C carries, big-endian on the wire)."""
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


# ---------------------------------------------------------------------------------------------
# Address text.

_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}\Z")
_IPV4_PREFIX = re.compile(rf"(?:{_OCTET}\.){{0,3}}{_OCTET}?\Z")
_PORT = re.compile(r"(?:0|[1-9][0-9]{0,4})\Z")
_V6_CHARS = frozenset("0123456789abcdefABCDEF:.")


def _pton4(text: str) -> bytes | None:
    if _IPV4.match(text) is None:
        return None
    a, b, c, d = text.split(".")
    return bytes((int(a), int(b), int(c), int(d)))


def _pton6(text: str) -> bytes | None:
    """IPv6 text to 16 bytes with inet_pton's grammar (embedded IPv4 tail included)."""
    if not text or not _V6_CHARS.issuperset(text):
        return None
    tail = b""
    if "." in text:
        head, sep, v4 = text.rpartition(":")
        packed4 = _pton4(v4) if sep else None
        if packed4 is None:
            return None
        tail = packed4
        # The dotted quad stands for two groups; stand them in so the counting below holds.
        text = head + ":0:0"
    if "::" in text:
        if text.count("::") > 1:
            return None
        left, right = text.split("::")
        lg = left.split(":") if left else []
        rg = right.split(":") if right else []
        if len(lg) + len(rg) > 7:
            return None
        groups = [*lg, *(["0"] * (8 - len(lg) - len(rg))), *rg]
    else:
        groups = text.split(":")
        if len(groups) != 8:
            return None
    value = 0
    for g in groups:
        # Only hex digits are left here (checked above, dots gone), so length is all to check.
        if not 0 < len(g) <= 4:
            return None
        value = (value << 16) | int(g, 16)
    packed = value.to_bytes(16, "big")
    return packed[:12] + tail if tail else packed


def _ntop4(packed: bytes) -> str:
    return f"{packed[0]}.{packed[1]}.{packed[2]}.{packed[3]}"


@lru_cache(maxsize=4096)
def _ntop6(packed: bytes) -> str:
    """16 bytes to the text inet_ntop gives: RFC 5952 compression, dotted IPv4 tails."""
    words = [(packed[i] << 8) | packed[i + 1] for i in range(0, 16, 2)]
    best_base, best_len, cur_base, cur_len = -1, 0, -1, 0
    for i, w in enumerate(words):
        if w == 0:
            if cur_base < 0:
                cur_base, cur_len = i, 1
            else:
                cur_len += 1
            if cur_len > best_len:
                best_base, best_len = cur_base, cur_len
        else:
            cur_base = -1
    if best_len < 2:
        best_base = -1
    if best_base < 0:
        return ":".join(f"{w:x}" for w in words)
    left = [f"{w:x}" for w in words[:best_base]]
    right = [f"{w:x}" for w in words[best_base + best_len:]]
    if best_base == 0 and (best_len == 6 or (best_len == 5 and words[5] == 0xFFFF)):
        # IPv4-compatible and IPv4-mapped addresses end in a dotted quad.
        right[-2:] = [_ntop4(packed[12:])]
    return ":".join(left) + "::" + ":".join(right)


@lru_cache(maxsize=4096)
def _classify(ip: str) -> tuple[bool, bytes]:
    """(is IPv4 or IPv4-mapped, packed address: 4 bytes when IPv4, else 16)."""
    if ":" not in ip:
        packed4 = _pton4(ip)
        if packed4 is None:
            raise ValueError(f"not an IP address: {ip!r}")
        return True, packed4
    packed = _pton6(ip)
    if packed is None:
        raise ValueError(f"not an IP address: {ip!r}")
    if packed[:12] == _V4_MAPPED:
        return True, packed[12:]
    return False, packed


def _check_port(port: int) -> int:
    if type(port) is not int or not 0 <= port <= 0xFFFF:
        raise ValueError(f"port out of range: {port!r}")
    return port


# ---------------------------------------------------------------------------------------------
# The header value.

@dataclass(frozen=True, slots=True)
class ProxyHeader:
    """One PROXY header as it is (or would be) on the wire.

    ``source``/``destination`` are None exactly when ``family`` is UNKNOWN; IPv6 text is kept
    in canonical form. ``tlvs`` (v2 only) are (type, value) pairs in wire order, repeats kept.
    A PP2_TYPE_CRC32C entry marks where the checksum goes; ``encode`` recomputes its value.
    LOCAL headers carry no addresses: the receiver must use the connection's own endpoints.
    """

    version: Literal[1, 2] = 2
    command: Command = "PROXY"
    family: Family = "UNKNOWN"
    source: Endpoint | None = None
    destination: Endpoint | None = None
    tlvs: tuple[tuple[int, bytes], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.version not in (1, 2):
            raise ValueError(f"unknown PROXY protocol version {self.version!r}")
        if self.command not in ("PROXY", "LOCAL"):
            raise ValueError(f"unknown command {self.command!r}")
        if self.family not in ("TCP4", "TCP6", "UNKNOWN"):
            raise ValueError(f"unknown family {self.family!r}")
        if self.version == 1 and (self.command != "PROXY" or self.tlvs):
            raise ValueError("version 1 headers have no LOCAL command and no TLVs")
        if self.command == "LOCAL" and self.family != "UNKNOWN":
            raise ValueError("LOCAL headers carry no addresses (family must be UNKNOWN)")
        if self.family == "UNKNOWN":
            if self.source is not None or self.destination is not None:
                raise ValueError("an UNKNOWN header carries no addresses")
        else:
            if self.source is None or self.destination is None:
                raise ValueError(f"a {self.family} header needs both addresses")
            object.__setattr__(self, "source", self._endpoint(self.source))
            object.__setattr__(self, "destination", self._endpoint(self.destination))
        tlvs = tuple((t, bytes(v)) for t, v in self.tlvs)
        for t, v in tlvs:
            if type(t) is not int or not 0 <= t <= 0xFF:
                raise ValueError(f"TLV type out of range: {t!r}")
            if len(v) > 0xFFFF:
                raise ValueError(f"TLV 0x{t:02x} value longer than 65535 bytes")
        if sum(1 for t, _ in tlvs if t == PP2_TYPE_CRC32C) > 1:
            raise ValueError("at most one CRC32C TLV")
        object.__setattr__(self, "tlvs", tlvs)

    def _endpoint(self, ep: Endpoint) -> Endpoint:
        ip, port = ep
        _check_port(port)
        if not isinstance(ip, str):
            raise ValueError(f"address must be text: {ip!r}")
        if self.family == "TCP4":
            if _pton4(ip) is None:
                raise ValueError(f"not an IPv4 address: {ip!r}")
            return ip, port
        packed = _pton6(ip)
        if packed is None:
            raise ValueError(f"not an IPv6 address: {ip!r}")
        return _ntop6(packed), port

    @classmethod
    def for_connection(cls, source: Endpoint | None, destination: Endpoint | None, *,
                       version: Literal[1, 2] = 2,
                       tlvs: Sequence[tuple[int, bytes]] = ()) -> ProxyHeader:
        """The header ``encode_v1``/``encode_v2`` would send for these endpoints."""
        if source is None or destination is None:
            return cls(version, "PROXY", "UNKNOWN", None, None, tuple(tlvs))
        s4, sp = _classify(source[0])
        d4, dp = _classify(destination[0])
        if s4 and d4:
            return cls(version, "PROXY", "TCP4", (_ntop4(sp), source[1]),
                       (_ntop4(dp), destination[1]), tuple(tlvs))
        if not s4 and not d4:
            return cls(version, "PROXY", "TCP6", (_ntop6(sp), source[1]),
                       (_ntop6(dp), destination[1]), tuple(tlvs))
        return cls(version, "PROXY", "UNKNOWN", None, None, tuple(tlvs))

    def tlv(self, tlv_type: int) -> bytes | None:
        """Value of the first TLV of this type, or None."""
        for t, v in self.tlvs:
            if t == tlv_type:
                return v
        return None

    def tlv_all(self, tlv_type: int) -> tuple[bytes, ...]:
        return tuple(v for t, v in self.tlvs if t == tlv_type)

    @property
    def authority(self) -> str | None:
        """PP2_TYPE_AUTHORITY (the client's SNI/host name), decoded as UTF-8."""
        v = self.tlv(PP2_TYPE_AUTHORITY)
        return None if v is None else v.decode("utf-8", "replace")

    @property
    def alpn(self) -> bytes | None:
        return self.tlv(PP2_TYPE_ALPN)

    @property
    def unique_id(self) -> bytes | None:
        return self.tlv(PP2_TYPE_UNIQUE_ID)

    @property
    def crc32c(self) -> int | None:
        v = self.tlv(PP2_TYPE_CRC32C)
        return None if v is None else int.from_bytes(v, "big")


# ---------------------------------------------------------------------------------------------
# Encoding.

def encode_v1(source: Endpoint | None, destination: Endpoint | None) -> bytes:
    """A v1 line: TCP4 when both ends are IPv4 (or IPv4-mapped), TCP6 when both are IPv6,
    ``PROXY UNKNOWN`` when an end is unknown or the families differ.

    Like ``encode_v2`` it reads only the first two items of each endpoint, so the 4-tuples
    ``getpeername()`` gives for IPv6 sockets can be passed as they are.
    """
    if source is None or destination is None:
        return _V1_UNKNOWN
    s_ip, s_port = source[0], source[1]
    d_ip, d_port = destination[0], destination[1]
    _check_port(s_port)
    _check_port(d_port)
    s4, sp = _classify(s_ip)
    d4, dp = _classify(d_ip)
    if s4 and d4:
        # Plain IPv4 text that passed the strict check is already canonical.
        s_txt = s_ip if ":" not in s_ip else _ntop4(sp)
        d_txt = d_ip if ":" not in d_ip else _ntop4(dp)
        return f"PROXY TCP4 {s_txt} {d_txt} {s_port} {d_port}\r\n".encode("ascii")
    if not s4 and not d4:
        return f"PROXY TCP6 {_ntop6(sp)} {_ntop6(dp)} {s_port} {d_port}\r\n".encode("ascii")
    return _V1_UNKNOWN


def _tlv_bytes(tlvs: Sequence[tuple[int, bytes]]) -> tuple[bytes, int]:
    """Serialised TLVs and the offset of the CRC32C value within them (-1 if none)."""
    out = bytearray()
    crc_at = -1
    for t, v in tlvs:
        if type(t) is not int or not 0 <= t <= 0xFF:
            raise ValueError(f"TLV type out of range: {t!r}")
        n = len(v)
        if n > 0xFFFF:
            raise ValueError(f"TLV 0x{t:02x} value longer than 65535 bytes")
        if t == PP2_TYPE_CRC32C:
            if crc_at >= 0:
                raise ValueError("at most one CRC32C TLV")
            crc_at = len(out) + 3
            out += b"\x03\x00\x04\x00\x00\x00\x00"
            continue
        out += bytes((t, n >> 8, n & 0xFF))
        out += v
    return bytes(out), crc_at


def _assemble_v2(ver_cmd: int, fam: int, addr: bytes,
                 tlvs: Sequence[tuple[int, bytes]], crc: bool) -> bytes:
    body, crc_at = _tlv_bytes(tlvs)
    if crc and crc_at < 0:
        crc_at = len(body) + 3
        body += b"\x03\x00\x04\x00\x00\x00\x00"
    length = len(addr) + len(body)
    if length > 0xFFFF:
        raise ValueError(f"v2 header too long ({length} bytes after the fixed part)")
    head = V2_SIGNATURE + bytes((ver_cmd, fam, length >> 8, length & 0xFF)) + addr
    if crc_at < 0:
        return head + body
    whole = bytearray(head + body)
    at = len(head) + crc_at
    whole[at:at + 4] = crc32c(bytes(whole)).to_bytes(4, "big")
    return bytes(whole)


def encode_v2(source: Endpoint | None, destination: Endpoint | None, *,
              command: Command = "PROXY", tlvs: Sequence[tuple[int, bytes]] = (),
              crc32c: bool = False) -> bytes:
    """A v2 header: TCP over IPv4 (0x11) or IPv6 (0x21); UNSPEC when an end is unknown, the
    families differ, or ``command`` is LOCAL. TLVs go in the given order; a PP2_TYPE_CRC32C
    entry among them is a placeholder whose value is computed, and ``crc32c=True`` appends one
    when there is none."""
    if command == "PROXY":
        ver_cmd = 0x21
    elif command == "LOCAL":
        ver_cmd = 0x20
    else:
        raise ValueError(f"unknown command {command!r}")
    fam, addr = 0x00, b""
    if command == "PROXY" and source is not None and destination is not None:
        s_port = _check_port(source[1])
        d_port = _check_port(destination[1])
        s4, sp = _classify(source[0])
        d4, dp = _classify(destination[0])
        if s4 == d4:
            if not tlvs and not crc32c:  # the relay's usual case, kept short
                return ((_V2_TCP4 if s4 else _V2_TCP6) + sp + dp
                        + bytes((s_port >> 8, s_port & 0xFF, d_port >> 8, d_port & 0xFF)))
            fam = 0x11 if s4 else 0x21
            addr = sp + dp + bytes((s_port >> 8, s_port & 0xFF, d_port >> 8, d_port & 0xFF))
    return _assemble_v2(ver_cmd, fam, addr, tlvs, crc32c)


def encoder_to(version: Literal[1, 2], destination: Endpoint | None
               ) -> Callable[[Endpoint | None], bytes]:
    """``encode_v1``/``encode_v2`` (no TLVs) with ``destination`` fixed, for a relay listener
    whose every header names the same one: what depends on it alone (the fixed part of its
    family, its address, its port) is built here once, the part up to the ports once per
    source address (a bounded memo), and each call adds only the ports. Returns what the
    full encoder returns, and raises what it raises, for every source.
    """
    full = encode_v1 if version == 1 else encode_v2
    if destination is None:
        constant = full(None, None)  # neither encoder looks at the source then
        return lambda source: constant
    d_ip, d_port = destination[0], destination[1]
    try:
        _check_port(d_port)
        d4, dp = _classify(d_ip)
    except ValueError:
        return lambda source: full(source, destination)  # raises for every source
    if version == 1:
        return _v1_to(d4, d_ip if d4 and ":" not in d_ip else
                      (_ntop4(dp) if d4 else _ntop6(dp)), d_port)
    return _v2_to(d4, dp, d_port)


# Source addresses whose header beginning an encoder keeps (a relay sees the same few clients
# again and again); past this many it starts over.
_PREFIXES_MAX = 256
_PORTS = struct.Struct("!HH").pack


def _v1_to(d4: bool, d_txt: str, d_port: int) -> Callable[[Endpoint | None], bytes]:
    head = "PROXY TCP4 " if d4 else "PROXY TCP6 "
    end = f" {d_port}\r\n"
    prefixes: dict[str, bytes] = {}  # source text -> the line up to its port

    def encode(source: Endpoint | None) -> bytes:
        if source is None:
            return _V1_UNKNOWN
        s_ip, s_port = source[0], source[1]
        _check_port(s_port)
        prefix = prefixes.get(s_ip)
        if prefix is None:
            s4, sp = _classify(s_ip)
            if s4 != d4:
                return _V1_UNKNOWN
            s_txt = (s_ip if ":" not in s_ip else _ntop4(sp)) if s4 else _ntop6(sp)
            if len(prefixes) >= _PREFIXES_MAX:
                prefixes.clear()
            prefix = prefixes[s_ip] = f"{head}{s_txt} {d_txt} ".encode("ascii")
        return prefix + f"{s_port}{end}".encode("ascii")

    return encode


def _v2_to(d4: bool, dp: bytes, d_port: int) -> Callable[[Endpoint | None], bytes]:
    unspec = encode_v2(None, None)
    head = _V2_TCP4 if d4 else _V2_TCP6
    prefixes: dict[str, bytes] = {}  # source text -> the header up to the ports

    def encode(source: Endpoint | None) -> bytes:
        if source is None:
            return unspec
        s_ip = source[0]
        s_port = _check_port(source[1])
        prefix = prefixes.get(s_ip)
        if prefix is None:
            s4, sp = _classify(s_ip)
            if s4 != d4:
                return unspec
            if len(prefixes) >= _PREFIXES_MAX:
                prefixes.clear()
            prefix = prefixes[s_ip] = head + sp + dp
        return prefix + _PORTS(s_port, d_port)

    return encode


def encode(header: ProxyHeader) -> bytes:
    """The wire bytes of ``header`` (a CRC32C TLV, if any, gets its computed value)."""
    if header.version == 1:
        if header.source is None or header.destination is None:
            return _V1_UNKNOWN
        (s_ip, s_port), (d_ip, d_port) = header.source, header.destination
        return f"PROXY {header.family} {s_ip} {d_ip} {s_port} {d_port}\r\n".encode("ascii")
    ver_cmd = 0x21 if header.command == "PROXY" else 0x20
    fam, addr = 0x00, b""
    if header.source is not None and header.destination is not None:
        (s_ip, s_port), (d_ip, d_port) = header.source, header.destination
        if header.family == "TCP4":
            fam = 0x11
            packed = (_pton4(s_ip) or b"") + (_pton4(d_ip) or b"")
        else:
            fam = 0x21
            packed = (_pton6(s_ip) or b"") + (_pton6(d_ip) or b"")
        addr = packed + bytes((s_port >> 8, s_port & 0xFF, d_port >> 8, d_port & 0xFF))
    return _assemble_v2(ver_cmd, fam, addr, header.tlvs, False)


# ---------------------------------------------------------------------------------------------
# Decoding.

def decode(data: bytes | bytearray | memoryview) -> tuple[ProxyHeader, int]:
    """Decode the header at the start of ``data``: (header, bytes it used).

    Raises IncompleteHeader when ``data`` is a valid beginning of a header (wait for more
    bytes), ProxyProtocolError when it can never become one. A v2 checksum can only be
    checked once the whole header is there.
    """
    if not data:
        raise IncompleteHeader("no data yet")
    first = data[0]
    if first == 0x50:  # "P"
        return _decode_v1(bytes(data[:V1_MAX_LENGTH]))
    if first == 0x0D:
        return _decode_v2(data)
    raise ProxyProtocolError("not a PROXY protocol header (neither v1 'PROXY' nor the v2 "
                             "signature)")


def _decode_v1(head: bytes) -> tuple[ProxyHeader, int]:
    end = head.find(b"\r\n")
    if end < 0:
        _check_v1_prefix(head)
        raise IncompleteHeader("v1 line not terminated yet")
    body = head[:end]
    if b"\r" in body or b"\n" in body:
        raise ProxyProtocolError("v1 line contains a bare CR or LF")
    return _parse_v1_body(body), end + 2


def _parse_v1_body(body: bytes) -> ProxyHeader:
    try:
        text = body.decode("ascii")
    except UnicodeDecodeError:
        raise ProxyProtocolError("v1 line is not US-ASCII") from None
    parts = text.split(" ")
    if parts[0] != "PROXY":
        raise ProxyProtocolError("not a PROXY protocol header (bad v1 signature)")
    if len(parts) < 2:
        raise ProxyProtocolError("v1 line has no protocol family")
    family = parts[1]
    if family == "UNKNOWN":
        # The receiver must ignore whatever follows UNKNOWN on the line.
        return ProxyHeader(1, "PROXY", "UNKNOWN")
    if family not in ("TCP4", "TCP6"):
        raise ProxyProtocolError(f"unknown v1 protocol family {family[:16]!r}")
    if len(parts) != 6:
        raise ProxyProtocolError(f"v1 {family} line needs exactly 4 fields after the family, "
                                 f"separated by single spaces")
    fam: Family = "TCP4" if family == "TCP4" else "TCP6"
    src, dst = _v1_addr(family, parts[2]), _v1_addr(family, parts[3])
    sport, dport = _v1_port(parts[4]), _v1_port(parts[5])
    return ProxyHeader(1, "PROXY", fam, (src, sport), (dst, dport))


def _v1_addr(family: str, text: str) -> str:
    if family == "TCP4":
        if _IPV4.match(text) is None:
            raise ProxyProtocolError(f"bad IPv4 address in v1 line: {text[:40]!r}")
        return text
    packed = _pton6(text)
    if packed is None:
        raise ProxyProtocolError(f"bad IPv6 address in v1 line: {text[:40]!r}")
    return _ntop6(packed)


def _v1_port(text: str) -> int:
    if _PORT.match(text) is None or int(text) > 0xFFFF:
        raise ProxyProtocolError(f"bad port in v1 line: {text[:8]!r}")
    return int(text)


_V6_COMPLETIONS = ("", "0", ":0", ":", "::", "::0", "0::", ".0", ".0.0", ".0.0.0", "0.0",
                   "0.0.0", "0.0.0.0")


def _v6_prefix_ok(text: str) -> bool:
    if not _V6_CHARS.issuperset(text):
        return False
    if text in ("", ":"):
        return True
    return any(_pton6(text + c) is not None for c in _V6_COMPLETIONS)


def _check_v1_prefix(head: bytes) -> None:
    """Raise unless ``head`` (no CRLF in it) can still grow into a valid v1 line."""
    bad = ProxyProtocolError
    if len(head) >= V1_MAX_LENGTH:
        raise bad(f"v1 line longer than {V1_MAX_LENGTH} bytes without CRLF")
    if b"\n" in head:
        raise bad("v1 line contains a bare LF")
    if head.endswith(b"\r"):
        body = head[:-1]
        if b"\r" in body:
            raise bad("v1 line contains a bare CR")
        _parse_v1_body(body)  # only the LF is missing: the rest must be a whole valid line
        return
    if b"\r" in head:
        raise bad("v1 line contains a bare CR")
    if len(head) > _V1_BODY_MAX:
        raise bad(f"v1 line longer than {V1_MAX_LENGTH} bytes")
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise bad("v1 line is not US-ASCII") from None
    parts = text.split(" ")
    if len(parts) == 1:
        if not "PROXY".startswith(parts[0]):
            raise bad("not a PROXY protocol header (bad v1 signature)")
        return
    if parts[0] != "PROXY":
        raise bad("not a PROXY protocol header (bad v1 signature)")
    family = parts[1]
    if len(parts) == 2:
        if not any(f.startswith(family) for f in ("TCP4", "TCP6", "UNKNOWN")):
            raise bad(f"unknown v1 protocol family {family[:16]!r}")
        return
    if family == "UNKNOWN":
        return
    if family not in ("TCP4", "TCP6"):
        raise bad(f"unknown v1 protocol family {family[:16]!r}")
    if len(parts) > 6:
        raise bad(f"v1 {family} line has too many fields")
    *done, last = parts[2:]
    for i, tok in enumerate(done):
        if i < 2:
            _v1_addr(family, tok)
        else:
            _v1_port(tok)
    i = len(done)
    if i < 2:
        ok = (_IPV4_PREFIX.match(last) is not None if family == "TCP4"
              else _v6_prefix_ok(last))
    else:
        ok = last == "" or (_PORT.match(last) is not None and int(last) <= 0xFFFF)
    if not ok:
        what = "address" if i < 2 else "port"
        raise bad(f"bad {what} in v1 line: {last[:40]!r}")


def _decode_v2(data: bytes | bytearray | memoryview) -> tuple[ProxyHeader, int]:
    n = len(data)
    sig = bytes(data[:12])
    if sig != V2_SIGNATURE[:len(sig)]:
        raise ProxyProtocolError("not a PROXY protocol header (bad v2 signature)")
    if n < 12:
        raise IncompleteHeader("v2 signature incomplete")
    if n > 12:
        ver_cmd = data[12]
        if ver_cmd >> 4 != 2:
            raise ProxyProtocolError(f"unknown PROXY protocol version {ver_cmd >> 4}")
        if ver_cmd & 0x0F > 1:
            raise ProxyProtocolError(f"unknown v2 command 0x{ver_cmd & 0x0F:x}")
    if n > 13:
        fam = data[13]
        if fam not in _V2_BLOCK:
            raise ProxyProtocolError(f"unknown v2 address family/protocol 0x{fam:02x}")
    if n < _V2_HEADER:
        raise IncompleteHeader("v2 fixed header incomplete")
    ver_cmd, fam = data[12], data[13]
    length = (data[14] << 8) | data[15]
    block = _V2_BLOCK[fam]
    if length < block:
        raise ProxyProtocolError(f"v2 address block of {length} bytes is too short for "
                                 f"family 0x{fam:02x} ({block} needed)")
    total = _V2_HEADER + length
    buf = bytes(data[:total])
    complete = len(buf) == total
    crc_at = _walk_tlvs(buf, _V2_HEADER + block, total, top=True)
    if not complete:
        raise IncompleteHeader(f"v2 header incomplete ({len(buf)} of {total} bytes)")
    if crc_at >= 0:
        got = int.from_bytes(buf[crc_at:crc_at + 4], "big")
        if crc32c(buf[:crc_at] + b"\x00\x00\x00\x00" + buf[crc_at + 4:]) != got:
            raise ProxyProtocolError("v2 header fails its CRC32c check")
    tlvs = _tlv_list(buf, _V2_HEADER + block, total)
    if ver_cmd == 0x20 or fam not in (0x11, 0x21):
        return ProxyHeader(2, "LOCAL" if ver_cmd == 0x20 else "PROXY", "UNKNOWN", None, None,
                           tlvs), total
    if fam == 0x11:
        src, dst = _ntop4(buf[16:20]), _ntop4(buf[20:24])
        ports = buf[24:28]
        family: Family = "TCP4"
    else:
        src, dst = _ntop6(buf[16:32]), _ntop6(buf[32:48])
        ports = buf[48:52]
        family = "TCP6"
    sport, dport = (ports[0] << 8) | ports[1], (ports[2] << 8) | ports[3]
    return ProxyHeader(2, "PROXY", family, (src, sport), (dst, dport), tlvs), total


def _walk_tlvs(buf: bytes, start: int, end: int, *, top: bool) -> int:
    """Check the TLVs in buf[start:end] (buf may stop early: a prefix is fine so far).

    Returns the offset of the CRC32C value (-1 if none). Raises on anything a complete header
    could not contain.
    """
    have = min(len(buf), end)
    crc_at = -1
    i = start
    while i < end:
        if i + 3 > have:
            if i + 3 > end:
                raise ProxyProtocolError("truncated TLV header at the end of the v2 header")
            return crc_at
        t, n = buf[i], (buf[i + 1] << 8) | buf[i + 2]
        v_end = i + 3 + n
        if v_end > end:
            raise ProxyProtocolError(f"TLV 0x{t:02x} runs past the end of the v2 header")
        if top:
            if t == PP2_TYPE_CRC32C:
                if n != 4:
                    raise ProxyProtocolError(f"CRC32C TLV must hold 4 bytes, not {n}")
                if crc_at >= 0:
                    raise ProxyProtocolError("more than one CRC32C TLV")
                crc_at = i + 3
            elif t == PP2_TYPE_UNIQUE_ID and n > UNIQUE_ID_MAX:
                raise ProxyProtocolError(f"UNIQUE_ID TLV longer than {UNIQUE_ID_MAX} bytes")
            elif t == PP2_TYPE_SSL:
                if n < 5:
                    raise ProxyProtocolError("SSL TLV shorter than its 5-byte fixed part")
                _walk_tlvs(buf, i + 8, v_end, top=False)
        i = v_end
    return crc_at


def _tlv_list(buf: bytes, start: int, end: int) -> tuple[tuple[int, bytes], ...]:
    out = []
    i = start
    while i < end:
        n = (buf[i + 1] << 8) | buf[i + 2]
        out.append((buf[i], buf[i + 3:i + 3 + n]))
        i += 3 + n
    return tuple(out)


def parse_ssl_tlv(value: bytes) -> tuple[int, int, tuple[tuple[int, bytes], ...]]:
    """Split a PP2_TYPE_SSL value into (client flags, verify result, sub-TLVs)."""
    if len(value) < 5:
        raise ProxyProtocolError("SSL TLV shorter than its 5-byte fixed part")
    _walk_tlvs(value, 5, len(value), top=False)
    return value[0], int.from_bytes(value[1:5], "big"), _tlv_list(value, 5, len(value))
