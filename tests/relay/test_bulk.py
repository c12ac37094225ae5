"""Volume: 1 GiB each way byte-identical, and 20,000 connections leaving no descriptor behind."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from tests.relay.helpers import (
    LOOPS,
    Upstream,
    connect,
    drain_hash,
    full_duplex,
    run_relay,
    send_stream,
    settled_fd_count,
    wait_until,
)

GIB = 1 << 30


@pytest.mark.slow
@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.usefixtures("data_path")
def test_a_gibibyte_each_way_arrives_intact(tmp_path: Path, loop: str) -> None:
    results: dict[str, object] = {}
    with Upstream(full_duplex(GIB, 2, results)) as up, run_relay(
            tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:{up.port}"], loop=loop) as relay:
        with connect(relay.ports[0], timeout=120) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
            sender = threading.Thread(
                target=lambda: results.__setitem__("up_sent", send_stream(s, GIB, 1)))
            sender.start()
            down_received = drain_hash(s)
            wait_until(lambda: not sender.is_alive(), 300, "the sender to finish")
        wait_until(lambda: "up_received" in results, 60, "the upstream to finish")
        listener = f"127.0.0.1:{relay.ports[0]}"
        assert relay.metric("hairpin_proxy_bytes_total", listener=listener,
                            direction="upstream") == GIB
        assert relay.metric("hairpin_proxy_bytes_total", listener=listener,
                            direction="downstream") == GIB
    assert up.errors == []
    assert results["up_received"] == (GIB, results["up_sent"])
    assert down_received == (GIB, results["down_sent"])


def serve_sequentially(listener: socket.socket, count: int, served: list[int]) -> None:
    """Accept ``count`` connections one by one: read the header and a byte, answer, close.

    One thread instead of one per connection keeps 20,000 connections quick."""
    for _ in range(count):
        conn, _ = listener.accept()
        with conn:
            data = b""
            while not data.endswith(b"\r\nx"):
                chunk = conn.recv(256)
                if not chunk:
                    break
                data += chunk
            conn.sendall(b"y")
            served.append(1)


@pytest.mark.slow
def test_many_connections_leave_no_descriptors_behind(tmp_path: Path) -> None:
    count = 20_000
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    served: list[int] = []
    server = threading.Thread(target=serve_sequentially, args=(listener, count + 10, served),
                              daemon=True)
    server.start()
    port = listener.getsockname()[1]
    try:
        # The default loop, as deployed (uvloop when installed); test_pipe checks descriptors
        # after abrupt endings on both loops.
        with run_relay(tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:{port}"], loop="auto") as relay:
            listen = f"127.0.0.1:{relay.ports[0]}"

            def one() -> None:
                with connect(relay.ports[0]) as s:
                    s.sendall(b"x")
                    assert s.recv(1) == b"y"
                    assert s.recv(1) == b""

            for _ in range(10):  # warm up: lazily opened descriptors are not leaks
                one()
            wait_until(lambda: relay.metric("hairpin_proxy_connections_active",
                                            listener=listen) == 0, 30, "warm-up to finish")
            before = settled_fd_count(relay)
            for _ in range(count):
                one()
            wait_until(lambda: relay.metric("hairpin_proxy_connections_active",
                                            listener=listen) == 0, 30, "connections to end")
            # The admin connection of the last scrape may still be closing: poll, don't race.
            wait_until(lambda: relay.fd_count() <= before, 10, "descriptors to be closed")
            after = relay.fd_count()
            assert relay.metric("hairpin_proxy_connections_total", listener=listen) == count + 10
            assert after == before, (before, after)
            errors = [r for r in relay.log_records() if "cause" in r]
            assert errors == []
    finally:
        listener.close()
