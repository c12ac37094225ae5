"""Golden vectors: headers real HAProxy sends, read by our decoder and rebuilt by our encoder."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from hairpin_proxy.proxyproto import (
    PP2_TYPE_CRC32C,
    PP2_TYPE_UNIQUE_ID,
    V2_SIGNATURE,
    crc32c,
    decode,
    encode,
    encode_v1,
    encode_v2,
)
from tests.peers import free_port, has_ipv6_loopback
from tests.peers.haproxy import run_haproxy

PAYLOAD = b"hello through haproxy\n"


def _capture(tmp_path: Path, *, v2: bool, family: int) -> tuple[bytes, tuple[str, int],
                                                                  tuple[str, int]]:
    """Send PAYLOAD through HAProxy; return (header bytes, client endpoint, frontend endpoint)."""
    if family == socket.AF_INET6 and not has_ipv6_loopback():
        pytest.skip("IPv6 loopback (::1) is not available here")
    loop = "::1" if family == socket.AF_INET6 else "127.0.0.1"
    client_ip = "::1" if family == socket.AF_INET6 else "127.0.0.2"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        listener.settimeout(30)
        backend_port = listener.getsockname()[1]
        front = free_port(loop)
        bind = f"[{loop}]:{front}" if ":" in loop else f"{loop}:{front}"
        server_opts = ("send-proxy-v2 proxy-v2-options crc32c,unique-id" if v2
                       else "send-proxy")
        config = f"""
frontend fe
    bind {bind}
    unique-id-format golden-%ci-%cp
    default_backend be
backend be
    server s1 127.0.0.1:{backend_port} {server_opts}
"""
        with run_haproxy(tmp_path, config), \
                socket.socket(family, socket.SOCK_STREAM) as client:
            client.settimeout(30)
            client.bind((client_ip, 0))
            client.connect((loop, front))
            client.sendall(PAYLOAD)
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(30)
                data = b""
                while not data.endswith(PAYLOAD):
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
            src = client.getsockname()[:2]
    assert data.endswith(PAYLOAD), data
    header = data[: -len(PAYLOAD)]
    # Frame the header independently of the code under test.
    if v2:
        assert header.startswith(V2_SIGNATURE)
        assert len(header) == 16 + int.from_bytes(header[14:16], "big")
    else:
        assert header.endswith(b"\r\n") and header.count(b"\r\n") == 1
    return header, (src[0], src[1]), (loop, front)


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6], ids=["ipv4", "ipv6"])
def test_haproxy_send_proxy_v1(tmp_path: Path, family: int) -> None:
    header, client, front = _capture(tmp_path, v2=False, family=family)
    tcp = "TCP6" if family == socket.AF_INET6 else "TCP4"
    assert header == f"PROXY {tcp} {client[0]} {front[0]} {client[1]} {front[1]}\r\n".encode()
    decoded, used = decode(header + b"rest")
    assert used == len(header)
    assert (decoded.version, decoded.family) == (1, tcp)
    assert decoded.source == client and decoded.destination == front
    assert encode(decoded) == header
    assert encode_v1(client, front) == header


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6], ids=["ipv4", "ipv6"])
def test_haproxy_send_proxy_v2_with_crc32c_and_unique_id(tmp_path: Path, family: int) -> None:
    header, client, front = _capture(tmp_path, v2=True, family=family)
    decoded, used = decode(header)
    assert used == len(header)
    assert (decoded.version, decoded.command) == (2, "PROXY")
    assert decoded.family == ("TCP6" if family == socket.AF_INET6 else "TCP4")
    assert decoded.source == client and decoded.destination == front
    unique_id = f"golden-{client[0]}-{client[1]}".encode()
    assert decoded.unique_id == unique_id
    assert [t for t, _ in decoded.tlvs] == [PP2_TYPE_CRC32C, PP2_TYPE_UNIQUE_ID]
    # The checksum HAProxy computed agrees with ours over the zeroed header.
    at = 16 + (36 if family == socket.AF_INET6 else 12) + 3  # CRC is HAProxy's first TLV
    assert header[at - 3:at] == b"\x03\x00\x04"
    assert decoded.crc32c == crc32c(header[:at] + bytes(4) + header[at + 4:])
    # Byte-identical re-encoding, from the decoded value and from the plain inputs.
    assert encode(decoded) == header
    assert encode_v2(client, front, tlvs=[(PP2_TYPE_CRC32C, b""),
                                          (PP2_TYPE_UNIQUE_ID, unique_id)]) == header
