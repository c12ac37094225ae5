"""Relay semantics against Python peers, with the relay run as the CLI runs it.

Every test runs on both event loops, and on both data paths (copying, splicing: the
``data_path`` fixture).
"""

from __future__ import annotations

import contextlib
import hashlib
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from hairpin_proxy import proxyproto
from hairpin_proxy.relay.limits import IDLE_PIPES
from hairpin_proxy.relay.listener import MAX_TEMPLATES
from tests.peers import free_port
from tests.relay.helpers import (
    LOOPS,
    Accepted,
    Upstream,
    black_hole,
    chunks,
    closed_promptly,
    connect,
    drain_hash,
    echo,
    elapsed,
    frozen,
    listening,
    recv_all,
    relayed_pair,
    run_relay,
    send_stream,
    settled_fd_count,
    wait_until,
)
from tests.waiting import PATIENCE

pytestmark = [pytest.mark.parametrize("loop", LOOPS), pytest.mark.usefixtures("data_path")]

LINGER_ZERO = struct.pack("ii", 1, 0)  # close() then sends a reset


def to(up: Upstream) -> str:
    return f"127.0.0.1:{{port}}=127.0.0.1:{up.port}"


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_header_carries_the_client_and_the_address_it_connected_to(
        tmp_path: Path, loop: str, version: str) -> None:
    with Upstream(echo) as up, run_relay(tmp_path, [to(up)], "--proxy-protocol", version,
                                         loop=loop) as relay, connect(relay.ports[0]) as s:
        s.sendall(b"ping")
        s.shutdown(socket.SHUT_WR)
        assert recv_all(s) == b"ping"
        header = up.headers[0]
        assert header.version == int(version[1])
        assert header.family == "TCP4"
        assert header.source == s.getsockname()
        assert header.destination == ("127.0.0.1", relay.ports[0])


@pytest.mark.usefixtures("own_network")  # binds a wildcard address
def test_per_listener_version_and_dual_stack_wildcard(tmp_path: Path, loop: str) -> None:
    port = free_port("::1")
    with Upstream(echo) as up, run_relay(
            tmp_path, [f"[::]:{port}=127.0.0.1:{up.port}/v2"], "--proxy-protocol", "v1",
            loop=loop):
        for host, family in (("::1", "TCP6"), ("127.0.0.1", "TCP4")):
            with connect(port, host) as s:
                s.sendall(b"x")
                s.shutdown(socket.SHUT_WR)
                assert recv_all(s) == b"x"
                header = up.headers[-1]
                assert (header.version, header.family) == (2, family)
                assert header.source == s.getsockname()[:2]
                assert header.destination == (host, port)


@pytest.mark.usefixtures("own_network")  # binds a wildcard address
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_wildcard_listener_names_every_local_address_past_the_encoders_it_keeps(
        tmp_path: Path, version: str, loop: str) -> None:
    # One header encoder is kept per destination, up to MAX_TEMPLATES; past it the full
    # encoder serves, and the headers stay the same.
    port = free_port("127.0.0.1")
    hosts = [f"127.0.0.{i}" for i in range(1, MAX_TEMPLATES + 5)]
    with Upstream(echo) as up, run_relay(
            tmp_path, [f"0.0.0.0:{port}=127.0.0.1:{up.port}/{version}"], loop=loop):
        for host in hosts + hosts[:2]:
            with connect(port, host) as s:
                s.sendall(b"x")
                s.shutdown(socket.SHUT_WR)
                assert recv_all(s) == b"x"
                header = up.headers[-1]
                assert (header.version, header.family) == (int(version[1]), "TCP4")
                assert header.source == s.getsockname()
                assert header.destination == (host, port)


def test_header_precedes_everything_when_the_server_speaks_first(
        tmp_path: Path, loop: str) -> None:
    def greeter(acc: Accepted) -> None:
        acc.sock.sendall(b"220 hello\r\n")
        acc.sock.sendall(acc.rest + recv_all(acc.sock))

    with Upstream(greeter) as up, run_relay(tmp_path, [to(up)], loop=loop) as relay, \
            connect(relay.ports[0]) as s:
        # The client waits for the greeting before it says anything.
        assert s.recv(64) == b"220 hello\r\n"
        s.sendall(b"EHLO x\r\n")
        s.shutdown(socket.SHUT_WR)
        assert recv_all(s) == b"EHLO x\r\n"
        assert up.errors == []


def test_half_close_the_late_reply_still_arrives(tmp_path: Path, loop: str) -> None:
    def late(acc: Accepted) -> None:
        request = acc.rest + recv_all(acc.sock)  # to the client's EOF
        time.sleep(0.5)
        acc.sock.sendall(b"reply to " + request)

    with Upstream(late) as up, run_relay(tmp_path, [to(up)], loop=loop) as relay, \
            connect(relay.ports[0]) as s:
        s.sendall(b"question")
        s.shutdown(socket.SHUT_WR)
        assert recv_all(s) == b"reply to question"


def test_half_close_from_the_server_side_keeps_the_client_direction(
        tmp_path: Path, loop: str) -> None:
    got: list[bytes] = []

    def closes_first(acc: Accepted) -> None:
        acc.sock.sendall(b"banner")
        acc.sock.shutdown(socket.SHUT_WR)
        got.append(acc.rest + recv_all(acc.sock))

    with Upstream(closes_first) as up, run_relay(tmp_path, [to(up)], loop=loop) as relay, \
            connect(relay.ports[0]) as s:
        assert recv_all(s) == b"banner"  # the server's EOF reached us
        time.sleep(0.3)
        s.sendall(b"still talking")
        s.shutdown(socket.SHUT_WR)
        wait_until(lambda: got, 30, "the server to read to EOF")
    assert got == [b"still talking"]


def test_backend_down_closes_promptly_and_readyz_names_the_cause(
        tmp_path: Path, loop: str) -> None:
    dead = free_port()
    with run_relay(tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:{dead}"], "--connect-timeout",
                   "20", loop=loop) as relay:
        status, body = relay.get("/readyz")
        assert status == 503
        assert f"127.0.0.1:{dead}" in body and "connect_refused" in body
        assert relay.get("/healthz")[0] == 200
        with connect(relay.ports[0]) as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            assert closed_promptly(s)
        listener = f"127.0.0.1:{relay.ports[0]}"
        # Refused is answered at once, not after the (20 s) connect timeout: the cause says so.
        assert relay.metric("hairpin_proxy_errors_total", listener=listener,
                            cause="connect_refused") == 1
        assert relay.metric("hairpin_proxy_errors_total", listener=listener,
                            cause="connect_timeout") == 0
        assert relay.metric("hairpin_proxy_connections_active", listener=listener) == 0
    errors = [r for r in relay.log_records() if r.get("cause") == "connect_refused"]
    assert len(errors) == 1 and errors[0]["target"] == f"127.0.0.1:{dead}"


def test_readyz_reports_a_name_that_does_not_resolve(tmp_path: Path, loop: str) -> None:
    with run_relay(tmp_path, ["127.0.0.1:{port}=no-such-host.invalid:80"], "--connect-timeout",
                   "3", loop=loop) as relay:
        status, body = relay.get("/readyz")
    assert status == 503
    assert "no-such-host.invalid:80" in body and "(dns)" in body


def test_connect_timeout(tmp_path: Path, loop: str) -> None:
    hole, fillers = black_hole("127.0.0.1")
    try:
        with run_relay(tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:{hole.getsockname()[1]}"],
                       "--connect-timeout", "1", loop=loop) as relay:
            started = time.monotonic()
            with connect(relay.ports[0]) as s:
                assert closed_promptly(s)
            assert elapsed(started) >= 0.9  # not before the timeout (a lower bound)
            listener = f"127.0.0.1:{relay.ports[0]}"
            assert relay.metric("hairpin_proxy_errors_total", listener=listener,
                                cause="connect_timeout") == 1
            status, body = relay.get("/readyz")
            assert status == 503 and "timed out" in body
            target = f"127.0.0.1:{hole.getsockname()[1]}"
            lines = [r["msg"] for r in relay.log_records() if r.get("cause") == "connect_timeout"]
            assert lines == [f"cannot connect to {target}: {target} timed out"]
    finally:
        for s in [hole, *fillers]:
            s.close()


def test_a_pipe_ended_while_its_upstream_connects_cancels_the_connect(
        tmp_path: Path, loop: str) -> None:
    """Ended from outside (here by the idle sweep, shorter than the connect timeout), the
    pending connect is cancelled: its timer never fires later, only the idle timeout is
    counted, and every descriptor is released."""
    hole, fillers = black_hole("127.0.0.1")
    try:
        with run_relay(tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:{hole.getsockname()[1]}"],
                       "--connect-timeout", "2", "--idle-timeout", "0.5", loop=loop) as relay:
            before = settled_fd_count(relay)
            listener = f"127.0.0.1:{relay.ports[0]}"
            clients = [connect(relay.ports[0]) for _ in range(3)]
            try:
                for s in clients:
                    assert closed_promptly(s)
            finally:
                for s in clients:
                    s.close()
            time.sleep(2.5)  # past the connect timeout: a timer left behind would fire now
            wait_until(lambda: relay.fd_count() <= before, 10, "descriptors to be closed")
            assert relay.fd_count() == before
            errors = {cause: relay.metric("hairpin_proxy_errors_total", listener=listener,
                                          cause=cause)
                      for cause in ("connect_timeout", "connect_error", "idle_timeout")}
            assert errors == {"connect_timeout": 0, "connect_error": 0, "idle_timeout": 3}
            assert [r for r in relay.log_records() if r.get("level") in ("error", "critical")
                    ] == []
            assert relay.proc.poll() is None
    finally:
        for s in [hole, *fillers]:
            s.close()


def test_idle_timeout(tmp_path: Path, loop: str) -> None:
    # Activity every 0.1 s against a 2 s timeout: only a stall twenty times the pace ends it.
    with Upstream(echo) as up, run_relay(tmp_path, [to(up)], "--idle-timeout", "2",
                                         loop=loop) as relay, connect(relay.ports[0]) as s:
        # Activity keeps it open past the timeout ...
        began = sent = time.monotonic()
        while elapsed(began) < 2.5:
            time.sleep(0.1)
            sent = time.monotonic()
            s.sendall(b"x")
            assert s.recv(1) == b"x"
        # ... silence ends it, counted from the last byte, which moved after it was sent (the
        # sweep may notice that byte right after it moved, so not from any later moment).
        assert closed_promptly(s)
        assert elapsed(sent) >= 0.9 * 2  # a lower bound; the socket timeout guards a hang
        listener = f"127.0.0.1:{relay.ports[0]}"
        assert relay.metric("hairpin_proxy_errors_total", listener=listener,
                            cause="idle_timeout") == 1


def test_max_connections_refuses_the_excess_at_once(tmp_path: Path, loop: str) -> None:
    with Upstream(echo) as up, run_relay(tmp_path, [to(up)], "--max-connections", "2",
                                         loop=loop) as relay:
        held = [connect(relay.ports[0]) for _ in range(2)]
        for s in held:  # both are relayed
            s.sendall(b"a")
            assert s.recv(1) == b"a"
        with connect(relay.ports[0]) as extra:
            assert closed_promptly(extra)
        listener = f"127.0.0.1:{relay.ports[0]}"
        # At once: refused as over the limit, not held until some timeout ended it.
        assert relay.metric("hairpin_proxy_errors_total", listener=listener,
                            cause="over_limit") == 1
        assert relay.metric("hairpin_proxy_connections_active", listener=listener) == 2
        held.pop().close()
        wait_until(lambda: relay.metric("hairpin_proxy_connections_active",
                                        listener=listener) == 1, 30, "a slot to free up")
        with connect(relay.ports[0]) as again:
            again.sendall(b"b")
            assert again.recv(1) == b"b"
        for s in held:
            s.close()
    assert any(r.get("cause") == "over_limit" for r in relay.log_records())


def test_a_client_reset_is_passed_on(tmp_path: Path, loop: str) -> None:
    seen: list[str] = []

    def reader(acc: Accepted) -> None:
        try:
            recv_all(acc.sock)
            seen.append("eof")
        except ConnectionResetError:
            seen.append("reset")

    with Upstream(reader) as up, run_relay(tmp_path, [to(up)], loop=loop) as relay:
        s = connect(relay.ports[0])
        s.sendall(b"partial")
        wait_until(lambda: up.accepted, 30, "the upstream connection")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_ZERO)
        s.close()
        wait_until(lambda: seen, 30, "the upstream to notice")
        listener = f"127.0.0.1:{relay.ports[0]}"
        wait_until(lambda: relay.metric("hairpin_proxy_errors_total", listener=listener,
                                        cause="reset") == 1, 30, "the reset to be counted")
    assert seen == ["reset"]


def test_urgent_data_does_not_cut_the_stream_short(tmp_path: Path, loop: str) -> None:
    """A read stops at TCP's urgent mark even with more queued behind it. The urgent byte is
    out of band and not relayed (nor by HAProxy); every byte around it is, then the EOF."""
    with listening() as lsn, run_relay(tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:"
                                                  f"{lsn.getsockname()[1]}"], loop=loop
                                       ) as relay, relayed_pair(relay, lsn) as (client, up):
        with frozen(relay):
            client.send(b"abcX", socket.MSG_OOB)
            client.send(b"def")
        got = b""
        while len(got) < 6:
            chunk = up.recv(64)
            assert chunk, f"EOF after {got!r}"
            got += chunk
        assert got == b"abcdef"
        with frozen(relay):
            client.send(b"ghiY", socket.MSG_OOB)
            client.send(b"jkl")
            client.shutdown(socket.SHUT_WR)
        assert recv_all(up) == b"ghijkl"


def test_an_upstream_reset_after_the_client_half_closed_counts_as_a_reset(
        tmp_path: Path, loop: str) -> None:
    """Passing the client's EOF on to an upstream that has just reset fails with ENOTCONN;
    the cause reported is still the reset."""
    with listening() as lsn, run_relay(tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:"
                                                  f"{lsn.getsockname()[1]}"], loop=loop
                                       ) as relay, relayed_pair(relay, lsn) as (client, up):
        with frozen(relay):
            client.shutdown(socket.SHUT_WR)
            up.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_ZERO)
            up.close()
        assert closed_promptly(client)
        listener = f"127.0.0.1:{relay.ports[0]}"
        wait_until(lambda: relay.metric("hairpin_proxy_errors_total", listener=listener,
                                        cause="reset") == 1, 30, "the reset to be counted")
        assert relay.metric("hairpin_proxy_errors_total", listener=listener,
                            cause="io_error") == 0
        lost = [r for r in relay.log_records() if "connection lost" in r.get("msg", "")]
        assert len(lost) == 1 and lost[0]["side"] == "upstream", lost
        assert "reset" in lost[0]["msg"].lower(), lost


@pytest.mark.parametrize("direction", ["upstream", "downstream"])
def test_bytes_and_a_reset_arriving_together_are_relayed_in_order(
        tmp_path: Path, loop: str, direction: str) -> None:
    """The bytes queued before a reset are read first (a short read that does not mean the
    buffer is empty); the reset, which the next read reports, must still be passed on."""
    with listening() as lsn, run_relay(tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:"
                                                  f"{lsn.getsockname()[1]}"], loop=loop
                                       ) as relay, relayed_pair(relay, lsn) as (client, up):
        sender, receiver = (client, up) if direction == "upstream" else (up, client)
        receiver.settimeout(30)
        with frozen(relay):
            sender.sendall(b"last words")
            sender.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_ZERO)
            sender.close()
        got = b""
        with pytest.raises(ConnectionResetError):
            while chunk := receiver.recv(64):
                got += chunk
            pytest.fail(f"an orderly EOF after {got!r}, not a reset")
        assert got == b"last words"
        listener = f"127.0.0.1:{relay.ports[0]}"
        wait_until(lambda: relay.metric("hairpin_proxy_connections_active",
                                        listener=listener) == 0, 30, "the pair to end")


def test_sigterm_drains_in_flight_and_refuses_new(tmp_path: Path, loop: str) -> None:
    size = 8 << 20

    def slow_source(acc: Accepted) -> None:
        for piece in chunks(size, seed=7):
            for i in range(0, len(piece), 256 << 10):
                acc.sock.sendall(piece[i:i + (256 << 10)])
                time.sleep(0.05)

    want = hashlib.sha256(b"".join(chunks(size, seed=7))).hexdigest()
    with Upstream(slow_source) as up, run_relay(tmp_path, [to(up)], "--grace-period", "60",
                                                loop=loop) as relay:
        s = connect(relay.ports[0])
        first = s.recv(65536)
        assert first
        relay.terminate()

        def refused() -> bool:
            try:
                connect(relay.ports[0], timeout=2).close()
            except ConnectionRefusedError:
                return True
            return False

        wait_until(refused, 30, "new connections to be refused")
        assert relay.get("/readyz")[0] == 503
        n, digest = drain_hash(s, first)
        s.close()
        assert (n, digest) == (size, want)
        assert relay.proc.wait(PATIENCE) == 0


def test_sigterm_closes_what_outlives_the_grace_period(tmp_path: Path, loop: str) -> None:
    with Upstream(echo) as up, run_relay(tmp_path, [to(up)], "--grace-period", "1",
                                         loop=loop) as relay, connect(relay.ports[0]) as s:
        s.sendall(b"x")
        assert s.recv(1) == b"x"
        started = time.monotonic()
        relay.terminate()
        assert relay.proc.wait(PATIENCE) == 0
        assert elapsed(started) >= 0.9  # the grace period was given (a lower bound)
        assert closed_promptly(s)
    assert any(r.get("cause") == "shutdown" for r in relay.log_records())


def test_a_slow_reader_keeps_relay_memory_bounded(tmp_path: Path, loop: str) -> None:
    size = 512 << 20
    sent: list[str] = []

    def source(acc: Accepted) -> None:
        sent.append(send_stream(acc.sock, size, seed=3))

    with Upstream(source) as up, run_relay(tmp_path, [to(up)], loop=loop) as relay:
        baseline = relay.rss()
        with connect(relay.ports[0]) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
            h = hashlib.sha256()
            n = 0
            peak = 0
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:  # about 3 MiB/s for 3 s
                piece = s.recv(16 << 10)
                h.update(piece)
                n += len(piece)
                peak = max(peak, relay.rss())
                time.sleep(0.005)
            rest, _ = 0, None
            buf = bytearray(1 << 20)
            while got := s.recv_into(buf):
                h.update(memoryview(buf)[:got])
                rest += got
        assert n + rest == size
        wait_until(lambda: sent, 60, "the source to finish")
        assert h.hexdigest() == sent[0]
    # Without flow control the relay would buffer most of 512 MiB while the reader dawdles.
    assert peak - baseline < 48 << 20, (baseline, peak)


def test_ipv4_mapped_clients_and_threads_do_not_mix_up_headers(tmp_path: Path, loop: str) -> None:
    with Upstream(echo) as up, run_relay(tmp_path, [to(up)], loop=loop) as relay:
        results: list[bool] = []

        def one() -> None:
            for _ in range(20):
                with connect(relay.ports[0]) as s:
                    s.sendall(b"k")
                    s.shutdown(socket.SHUT_WR)
                    results.append(recv_all(s) == b"k")
        threads = [threading.Thread(target=one) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results == [True] * 80
        sources = {h.source for h in up.headers}
        assert len(sources) == 80  # each connection's own client port
        assert all(isinstance(h, proxyproto.ProxyHeader) for h in up.headers)


def test_abrupt_endings_in_every_order_leave_the_relay_healthy(tmp_path: Path, loop: str) -> None:
    """Resets, early closes and half-closes racing each other (the write_eof paths)."""
    def upstream(acc: Accepted) -> None:
        mode = acc.header.source[1] % 4 if acc.header.source else 0
        with contextlib.suppress(OSError):
            if mode == 0:  # a burst, then EOF, while the client may be gone already
                acc.sock.sendall(b"z" * (1 << 20))
                acc.sock.shutdown(socket.SHUT_WR)
                recv_all(acc.sock)
            elif mode == 1:  # reset at once
                acc.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_ZERO)
            elif mode == 2:  # echo
                echo(acc)
            else:  # close with unread data (a reset) after a reply
                acc.sock.sendall(b"bye")

    with Upstream(upstream) as up, run_relay(tmp_path, [to(up)], loop=loop) as relay:
        before = settled_fd_count(relay)
        pipes_before = relay.pipe_count()
        for i in range(300):
            s = connect(relay.ports[0])
            with contextlib.suppress(OSError):
                s.sendall(b"q" * 70000)
                if i % 3 == 0:
                    s.shutdown(socket.SHUT_WR)
                if i % 3 == 1:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_ZERO)
                if i % 5 == 0:
                    s.recv(1000)
            s.close()
        listener = f"127.0.0.1:{relay.ports[0]}"
        wait_until(lambda: relay.metric("hairpin_proxy_connections_active",
                                        listener=listener) == 0, 60, "every pipe to end")
        with contextlib.suppress(TimeoutError):
            wait_until(lambda: relay.fd_count() <= before, 10, "descriptors to be closed")
        assert relay.fd_count() == before
        # Pipes lent to the endings came back or were closed: the pool keeps a bounded few.
        assert relay.pipe_count() <= pipes_before + 2 * IDLE_PIPES
        # Still relaying normally afterwards.
        echoed = False
        while not echoed:  # until a client port the upstream echoes for comes up
            with connect(relay.ports[0]) as s:
                if s.getsockname()[1] % 4 == 2:
                    s.sendall(b"fine")
                    s.shutdown(socket.SHUT_WR)
                    assert recv_all(s) == b"fine"
                    echoed = True
        assert relay.proc.poll() is None
    crashes = [r for r in relay.log_records() if r.get("level") in ("error", "critical")]
    assert crashes == []
