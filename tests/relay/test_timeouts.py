"""Timeouts a stalled or hostile client cannot outlive, and the per-address cap, with real
sockets on loopback; every wait is bounded."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from tests.relay.helpers import (
    Accepted,
    Upstream,
    closed_promptly,
    connect,
    echo,
    elapsed,
    run_relay,
    wait_until,
)
from tests.waiting import PATIENCE

pytestmark = [pytest.mark.parametrize("loop", ["uvloop"]), pytest.mark.usefixtures("data_path")]


def errors(relay: object, port: int, cause: str) -> float:
    return relay.metric("hairpin_proxy_errors_total",  # type: ignore[attr-defined, no-any-return]
                        listener=f"127.0.0.1:{port}", cause=cause)


def test_first_byte_timeout(tmp_path: Path, loop: str) -> None:
    with Upstream(echo) as up, run_relay(
            tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:{up.port}"], "--first-byte-timeout",
            "0.5", "--idle-timeout", "60", loop=loop) as relay:
        port = relay.ports[0]
        with connect(port, timeout=PATIENCE) as talker:
            talker.sendall(b"a")
            assert talker.recv(1) == b"a"
            # The relay's clock for the silent one starts once it is connected: after this.
            started = time.monotonic()
            with connect(port, timeout=PATIENCE) as silent:
                assert closed_promptly(silent)  # connected, sent nothing: closed
            # Not before its timeout (a lower bound; the socket timeout guards against a hang).
            assert elapsed(started) >= 0.5
            # Past the timeout (a lower bound): the one that spoke is not subject to it.
            time.sleep(0.6)
            talker.sendall(b"b")
            assert talker.recv(1) == b"b"
        wait_until(lambda: errors(relay, port, "first_byte_timeout") == 1, 10)
        assert errors(relay, port, "idle_timeout") == 0


RELEASE = threading.Event()


def silent_after_eof(acc: Accepted) -> None:
    """Read the request to its end, then say nothing and keep the connection open (until the
    test is over, 10 s at most)."""
    while acc.sock.recv(65536):
        pass
    RELEASE.wait(10)


def test_half_close_timeout(tmp_path: Path, loop: str) -> None:
    RELEASE.clear()
    with Upstream(silent_after_eof) as up, run_relay(
            tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:{up.port}"], "--half-close-timeout",
            "0.5", "--idle-timeout", "60", loop=loop) as relay:
        port = relay.ports[0]
        with connect(port, timeout=PATIENCE) as s:
            s.sendall(b"request")
            # The relay's clock starts when it sees the end of the request: after this.
            started = time.monotonic()
            s.shutdown(socket.SHUT_WR)  # the client has finished; the upstream stays silent
            assert closed_promptly(s)
            # Not before its timeout (a lower bound; the socket timeout guards against a hang).
            assert elapsed(started) >= 0.5
        wait_until(lambda: errors(relay, port, "half_close_timeout") == 1, 10)
        assert errors(relay, port, "idle_timeout") == 0
        RELEASE.set()


BYTES = 25


def test_a_half_closed_connection_that_keeps_moving_is_left_alone(
        tmp_path: Path, loop: str) -> None:
    def slow_reply(acc: Accepted) -> None:
        while acc.sock.recv(65536):
            pass
        for _ in range(BYTES):  # a byte every 0.1 s: the reply lasts past the timeout
            acc.sock.sendall(b"r")
            time.sleep(0.1)
    # A pause of 2 s between two bytes (twenty times the pace) would be a stall, not load.
    with Upstream(slow_reply) as up, run_relay(
            tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:{up.port}"], "--half-close-timeout",
            "2", loop=loop) as relay, connect(relay.ports[0], timeout=PATIENCE) as s:
        started = time.monotonic()
        s.sendall(b"q")
        s.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := s.recv(16):
            got += chunk
        assert got == b"r" * BYTES
        assert elapsed(started) >= 2  # it did outlast the timeout (a lower bound)
        assert errors(relay, relay.ports[0], "half_close_timeout") == 0


def test_per_source_cap(tmp_path: Path, loop: str) -> None:
    with Upstream(echo) as up, run_relay(
            tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:{up.port}"],
            "--max-connections-per-source", "2", loop=loop) as relay:
        port = relay.ports[0]

        def from_(ip: str) -> socket.socket:
            return socket.create_connection(("127.0.0.1", port), timeout=10,
                                            source_address=(ip, 0))

        def works(s: socket.socket) -> bool:
            s.sendall(b"e")
            return s.recv(1) == b"e"

        held = [from_("127.0.0.1"), from_("127.0.0.1")]
        try:
            assert all(works(s) for s in held)
            with from_("127.0.0.1") as third:
                assert closed_promptly(third)
            with from_("127.0.0.2") as other:  # another address has its own allowance
                assert works(other)
            held.pop().close()
            wait_until(lambda: relay.metric("hairpin_proxy_connections_active",
                                            listener=f"127.0.0.1:{port}") == 1, 10)
            held.append(from_("127.0.0.1"))  # a slot freed is a slot again
            assert works(held[-1])
        finally:
            for s in held:
                s.close()
        assert errors(relay, port, "over_source_limit") == 1
        assert errors(relay, port, "over_limit") == 0
