"""IPv6-only and dual-stack clusters: listeners on ``[::]`` and ``[::1]``, the header's family
and addresses, and the fallback to IPv4 where a host has no IPv6."""

from __future__ import annotations

import errno
import socket
from pathlib import Path
from typing import Any

import pytest

from hairpin_proxy.admin import bind_stream
from tests.peers import free_port, has_ipv6_loopback
from tests.relay.helpers import Upstream, closed_promptly, connect, echo, recv_all, run_relay
from tests.waiting import PATIENCE

pytestmark = [pytest.mark.skipif(not has_ipv6_loopback(), reason="no IPv6 loopback here"),
              # The wildcard binds ([::], 0.0.0.0) stay inside a namespace of the test's own.
              pytest.mark.usefixtures("own_network")]


def roundtrip(port: int, host: str) -> tuple[str, int]:
    """One echoed byte over ``host``; the client's own (address, port)."""
    with connect(port, host) as s:
        s.sendall(b"6")
        s.shutdown(socket.SHUT_WR)
        assert recv_all(s) == b"6"
        name: tuple[str, int] = s.getsockname()[:2]
        return name


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_over_ipv6_loopback_the_header_is_tcp6_with_both_addresses(
        tmp_path: Path, version: str) -> None:
    """An IPv6 listener relaying to an IPv6 upstream: the header says TCP6 and names the
    client's and the dialed IPv6 address and ports."""
    with Upstream(echo, host="::1") as up, run_relay(
            tmp_path, [f"[::1]:{{port}}=[::1]:{up.port}/{version}"], loop="uvloop") as relay:
        client = roundtrip(relay.ports[0], "::1")
    header = up.headers[0]
    assert (header.version, header.family) == (int(version[1]), "TCP6")
    assert header.source == client
    assert header.destination == ("::1", relay.ports[0])


def test_an_ipv6_listener_is_ipv6_only(tmp_path: Path) -> None:
    """``[::1]`` is what it says: 127.0.0.1 on the same port is not served."""
    with Upstream(echo) as up, run_relay(
            tmp_path, [f"[::1]:{{port}}=127.0.0.1:{up.port}"], loop="uvloop") as relay, \
            pytest.raises(ConnectionRefusedError):
        connect(relay.ports[0], "127.0.0.1", timeout=5)


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_the_default_address_serves_both_families_and_names_ipv4_clients_as_ipv4(
        tmp_path: Path, version: str) -> None:
    """``:PORT`` (the default listeners' address, ``[::]``) is one dual-stack socket. An IPv4
    client reaches it as ``::ffff:127.0.0.1``, but its connection is IPv4: the header says
    TCP4 with dotted addresses, as the PROXY spec's TCP4 is for IPv4 connections and as an
    IPv4 listener would say; the log names it ``127.0.0.1`` as well."""
    port = free_port("::1")
    with Upstream(echo) as up, run_relay(tmp_path, [f":{port}=127.0.0.1:{up.port}/{version}"],
                                         loop="uvloop") as relay:
        v4 = roundtrip(port, "127.0.0.1")
        v6 = roundtrip(port, "::1")
        up.close()
        with connect(port, "127.0.0.1") as s:  # the upstream is gone: refused, logged
            refused_from = s.getsockname()
            s.sendall(b"x")
            assert closed_promptly(s)
        relay.terminate()
        relay.proc.wait(PATIENCE)
    four, six = up.headers
    assert (four.family, four.source, four.destination) == ("TCP4", v4, ("127.0.0.1", port))
    assert (six.family, six.source, six.destination) == ("TCP6", v6, ("::1", port))
    records = [r for r in relay.log_records() if r.get("cause") == "connect_refused"]
    assert [r["client"] for r in records] == [f"127.0.0.1:{refused_from[1]}"]
    assert [r["listen"] for r in relay.log_records() if r.get("msg") == "relaying"] == \
        [f"[::]:{port}"]


def test_the_per_source_cap_counts_an_ipv4_client_once_across_socket_families(
        tmp_path: Path) -> None:
    """The same IPv4 client on a dual-stack and on an IPv4 listener is one address."""
    dual = free_port("::1")
    with Upstream(echo) as up, run_relay(
            tmp_path, [f"[::]:{dual}=127.0.0.1:{up.port}", f"127.0.0.1:{{port}}=127.0.0.1:"
                                                           f"{up.port}"],
            "--max-connections-per-source", "1", loop="uvloop") as relay:
        with connect(dual, "127.0.0.1") as held:
            held.sendall(b"h")
            assert held.recv(1) == b"h"
            with connect(relay.ports[0], "127.0.0.1") as second:
                assert closed_promptly(second)
        assert relay.metric("hairpin_proxy_errors_total", listener=f"127.0.0.1:{relay.ports[0]}",
                            cause="over_source_limit") == 1


def test_without_ipv6_the_wildcard_falls_back_to_ipv4(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decided at bind time: a kernel without IPv6 (EAFNOSUPPORT) gets 0.0.0.0; an error
    about the port itself is not hidden by a fallback."""
    real = socket.socket

    def no_ipv6(family: int = socket.AF_INET, *args: Any, **kwargs: Any) -> socket.socket:
        if family == socket.AF_INET6:
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        return real(family, *args, **kwargs)

    monkeypatch.setattr(socket, "socket", no_ipv6)
    socks = bind_stream("::", 0)
    try:
        assert [(s.family, s.getsockname()[0]) for s in socks] == [(socket.AF_INET, "0.0.0.0")]
    finally:
        for s in socks:
            s.close()
    monkeypatch.undo()
    with real(socket.AF_INET6) as taken:
        taken.bind(("::", 0))
        taken.listen(1)
        with pytest.raises(OSError) as info:
            bind_stream("::", taken.getsockname()[1])
    assert info.value.errno == errno.EADDRINUSE


def test_the_dual_stack_socket_has_v6only_off() -> None:
    socks = bind_stream("::", 0)
    try:
        (sock,) = socks
        assert sock.family == socket.AF_INET6
        assert sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0
    finally:
        for s in socks:
            s.close()
