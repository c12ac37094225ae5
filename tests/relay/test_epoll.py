"""The epoll data path's own machinery: its dispatcher, resets behind slow receivers, running
out of descriptors, yielding the loop (tests/relay/test_pipe.py covers the relay's promises)."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from hairpin_proxy.relay import epoll, main
from hairpin_proxy.relay.epoll import Poller
from hairpin_proxy.settings import ProxySettings
from tests.peers import free_port
from tests.relay.helpers import (
    Upstream,
    black_hole,
    closed_promptly,
    connect,
    drain_hash,
    echo,
    elapsed,
    full_duplex,
    listening,
    relay_in_thread,
    relayed_pair,
    run_relay,
    send_stream,
    settled_fd_count,
    wait_until,
)
from tests.waiting import until

LOOPS = ("uvloop", "asyncio")
LINGER_ZERO = struct.pack("ii", 1, 0)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.usefixtures("data_path")
def test_a_client_reset_while_the_upstream_connects_ends_the_pair_at_once(
        tmp_path: Path, loop: str) -> None:
    """Not only when the connect times out: the client's socket is watched from the start."""
    hole, fillers = black_hole("127.0.0.1")
    try:
        with run_relay(tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:{hole.getsockname()[1]}"],
                       "--connect-timeout", "60", loop=loop) as relay:
            listener = f"127.0.0.1:{relay.ports[0]}"
            before = settled_fd_count(relay)

            def active() -> float:
                return relay.metric("hairpin_proxy_connections_active", listener=listener)

            s = connect(relay.ports[0])
            wait_until(lambda: active() == 1, 30, "the connection to be accepted")
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_ZERO)
            s.close()
            wait_until(lambda: active() == 0, 30, "the pair to end")
            # Ended by the reset, not by the 60 s connect timeout: the causes say which.
            assert relay.metric("hairpin_proxy_errors_total", listener=listener,
                                cause="reset") == 1
            assert relay.metric("hairpin_proxy_errors_total", listener=listener,
                                cause="connect_timeout") == 0
            wait_until(lambda: relay.fd_count() <= before, 30, "descriptors to be closed")
    finally:
        for sock in [hole, *fillers]:
            sock.close()


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("who", ["client", "upstream"])
@pytest.mark.usefixtures("data_path")
def test_a_reset_behind_a_slow_receiver_ends_the_pair_at_once(
        tmp_path: Path, loop: str, who: str) -> None:
    """The resetting side's direction is stuck behind a receiver that reads nothing: no read
    of that side would report the reset until the receiver caught up (or the idle timeout)."""
    with listening() as lsn, run_relay(tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:"
                                                  f"{lsn.getsockname()[1]}"], loop=loop
                                       ) as relay, relayed_pair(relay, lsn) as (client, up):
        sender, receiver = (client, up) if who == "client" else (up, client)
        sender.setblocking(False)
        started = time.monotonic()
        stalls = 0
        while stalls < 20 and elapsed(started) < 30:  # until the relay holds all it will
            try:
                sender.send(b"x" * 65536)
                stalls = 0
            except BlockingIOError:
                stalls += 1
                time.sleep(0.05)
        sender.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_ZERO)
        sender.close()
        listener = f"127.0.0.1:{relay.ports[0]}"
        wait_until(lambda: relay.metric("hairpin_proxy_connections_active",
                                        listener=listener) == 0, 30, "the pair to end")
        assert relay.metric("hairpin_proxy_errors_total", listener=listener,
                            cause="reset") == 1
        receiver.settimeout(30)
        with pytest.raises(ConnectionResetError):
            while receiver.recv(1 << 20):
                pass


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.usefixtures("data_path")
def test_out_of_descriptors_the_listener_rests_then_recovers(tmp_path: Path, loop: str) -> None:
    """Accepting fails while the process has no descriptor left: the listener pauses (no busy
    loop, a warning per pause) and takes the waiting client once descriptors are free."""
    with Upstream(echo) as up, run_relay(
            tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:{up.port}"], loop=loop) as relay:
        listener = f"127.0.0.1:{relay.ports[0]}"
        held = [connect(relay.ports[0])]
        held[0].sendall(b"a")
        assert held[0].recv(1) == b"a"
        # Room for exactly one more relayed pair (two descriptors), none for a third client.
        # (The limit is on descriptor numbers: the splice pool's idle pipes count too.)
        limit = settled_fd_count(relay) + relay.pipe_count() + 2
        original = resource.prlimit(relay.pid, resource.RLIMIT_NOFILE)
        resource.prlimit(relay.pid, resource.RLIMIT_NOFILE, (limit, original[1]))
        held.append(connect(relay.ports[0]))
        held[1].sendall(b"b")
        assert held[1].recv(1) == b"b"
        resting = time.monotonic()  # no pause can come before the third client
        waiting = connect(relay.ports[0])  # completes in the kernel's accept queue
        waiting.sendall(b"c")
        wait_until(lambda: any("cannot accept" in r.get("msg", "")
                               for r in relay.log_records()), 30, "the listener to pause")
        cpu_before = cpu_seconds(relay.pid)
        time.sleep(2.0)
        assert cpu_seconds(relay.pid) - cpu_before < 0.5, "the listener spins"
        pauses = [r for r in relay.log_records() if "cannot accept" in r.get("msg", "")]
        # Each pause lasts ACCEPT_RETRY: however long this took, no more than fit in it.
        assert 1 <= len(pauses) <= 1 + elapsed(resting) / epoll.ACCEPT_RETRY, pauses
        assert pauses[0]["level"] == "warning" and "Too many open files" in pauses[0]["msg"]
        held.pop(0).close()  # frees a pair
        waiting.settimeout(30)
        assert waiting.recv(1) == b"c"
        # The admin endpoint needs a descriptor of its own to answer the scrapes below.
        resource.prlimit(relay.pid, resource.RLIMIT_NOFILE, original)
        waiting.close()
        for sock in held:
            sock.close()
        wait_until(lambda: relay.metric("hairpin_proxy_connections_active",
                                        listener=listener) == 0, 30, "connections to end")
        assert relay.metric("hairpin_proxy_connections_total", listener=listener) == 3
        assert relay.proc.poll() is None


@pytest.mark.usefixtures("data_path")
def test_a_long_stream_yields_the_loop_between_turns_and_carries_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One read per turn here (16 by default): a direction that still has bytes waiting gives
    the loop back and is resumed by it, since no new edge will come for those bytes."""
    monkeypatch.setattr(epoll, "READS_PER_TURN", 1)
    resumed = []
    again = epoll.RelayedConnection._again

    def counted(conn: epoll.RelayedConnection) -> None:
        resumed.append(1)
        again(conn)

    monkeypatch.setattr(epoll.RelayedConnection, "_again", counted)
    size = 64 << 20
    results: dict[str, object] = {}

    port = free_port()
    with Upstream(full_duplex(size, 4, results, timeout=120)) as up, relay_in_thread(
            [f"127.0.0.1:{port}=127.0.0.1:{up.port}"],
            socket_buffer=0), connect(port) as s:  # autotuned: reads can outrun a turn
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        sender = threading.Thread(
            target=lambda: results.__setitem__("up_sent", send_stream(s, size, 3)))
        sender.start()
        down_received = drain_hash(s)
        sender.join(120)
        wait_until(lambda: "up_received" in results, 60, "the upstream to finish")
    assert results["up_received"] == (size, results["up_sent"])
    assert down_received == (size, results["down_sent"])
    assert resumed, "no direction ever used up its turn"


@pytest.mark.usefixtures("data_path")
def test_a_connection_that_cannot_be_watched_is_closed_not_leaked(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """epoll_ctl can fail (the per-user watch limit, memory): that client is closed at once,
    counted, and the next one is relayed."""
    watch = epoll.Poller.watch
    failures = [OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))]

    def flaky(poller: Poller, fd: int, handler: epoll.Handler, events: int = 0) -> None:
        if events == 0 and failures:
            raise failures.pop()
        watch(poller, fd, handler, *([events] if events else []))

    monkeypatch.setattr(epoll.Poller, "watch", flaky)
    port = free_port()
    caplog.set_level(logging.WARNING, logger="hairpin_proxy.relay")
    with Upstream(echo) as up, relay_in_thread(
            [f"127.0.0.1:{port}=127.0.0.1:{up.port}"]) as relay:
        listener = f"127.0.0.1:{port}"
        with connect(port) as s:
            s.sendall(b"x")
            assert closed_promptly(s)
        wait_until(lambda: not relay.live, 30, "the refused pair to be forgotten")
        assert relay.metrics.errors.value(listener, "io_error") == 1
        with connect(port) as s:
            s.sendall(b"y")
            assert s.recv(1) == b"y"
    messages = [r.getMessage() for r in caplog.records]
    assert "cannot watch the connection: No space left on device" in messages, messages
    assert not [m for m in messages if "internal error" in m]


# ----------------------------------------------------------------------------- the dispatcher

def run_poller(body: object) -> None:
    async def main() -> None:
        poller = Poller(asyncio.get_running_loop())
        try:
            await body(poller)  # type: ignore[operator]
        finally:
            poller.close()
    asyncio.run(main())


def test_a_handler_that_raises_costs_only_its_own_report(caplog: pytest.LogCaptureFixture
                                                           ) -> None:
    a, a_peer = socket.socketpair()
    b, b_peer = socket.socketpair()
    seen: list[str] = []

    def broken(events: int) -> None:
        seen.append("broken")
        raise RuntimeError("boom")

    async def body(poller: Poller) -> None:
        poller.watch(a.fileno(), broken)
        poller.watch(b.fileno(), lambda events: seen.append("fine"))
        a_peer.send(b"x")
        b_peer.send(b"x")
        await until(lambda: "fine" in seen and "broken" in seen, 2, "both handlers to run")

    with caplog.at_level(logging.ERROR, logger="hairpin_proxy.relay"):
        run_poller(body)
    assert "fine" in seen and "broken" in seen
    assert any("internal error" in r.getMessage() and r.exc_info for r in caplog.records)
    for sock in (a, a_peer, b, b_peer):
        sock.close()


def test_a_socket_released_during_a_batch_is_closed_after_it() -> None:
    """Its descriptor number cannot be reused by a connection accepted in the same batch."""
    a, a_peer = socket.socketpair()
    b, b_peer = socket.socketpair()
    fd = a.fileno()
    during: list[bool] = []
    released: list[socket.socket] = []

    def first(events: int) -> None:
        if not released:
            poller_ref[0].release(a)
            released.append(a)
            # Still open: a socket created now gets another number.
            with socket.socket() as fresh:
                during.append(fresh.fileno() != fd)
            os.fstat(fd)

    def second(events: int) -> None:
        pass

    poller_ref: list[Poller] = []

    async def body(poller: Poller) -> None:
        poller_ref.append(poller)
        poller.watch(a.fileno(), first)
        poller.watch(b.fileno(), second)
        a_peer.send(b"x")
        b_peer.send(b"x")
        await until(lambda: released and a.fileno() == -1, 2, "the released socket to close")

    run_poller(body)
    assert during == [True]
    assert a.fileno() == -1  # closed once the batch was done
    for sock in (a_peer, b, b_peer):
        sock.close()


def test_without_epoll_the_proxy_refuses_to_start(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delattr("select.epoll")
    assert main.run(ProxySettings(admin_listen="")) == 2
    assert "Linux's epoll" in capsys.readouterr().err
