"""Splicing streams: the pipe pool and the start-up probe on real pipes and sockets, the memory
accounting, and through the running relay the threshold, the pool's bound, what a stalled
connection holds on either path and the fallback to copying where the kernel refuses splice.

(Every other relay test runs on both data paths through the ``data_path`` fixture.)
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import logging
import os
import shutil
import socket
import subprocess
import termios
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hairpin_proxy.relay import limits, splice
from hairpin_proxy.relay.limits import (
    PAGE,
    PIPE_OVERHEAD,
    connection_limit,
    default_limit,
    fds_needed,
    per_connection,
    pipe_bytes,
    unsent_read,
)
from hairpin_proxy.relay.splice import F_GETPIPE_SZ, PipePool, new_pipe, probe
from tests.relay.helpers import (
    Accepted,
    Upstream,
    chunks,
    connect,
    drain_hash,
    echo,
    listening,
    relayed_pair,
    run_relay,
    send_stream,
    settled_fd_count,
    wait_until,
)

MIB = 1 << 20


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


# ----------------------------------------------------------------------------- the pool

def test_a_pipe_holds_one_socket_buffer_rounded_up_to_pages() -> None:
    pipe = new_pipe(pipe_bytes(65536))
    try:
        assert fcntl.fcntl(pipe.w, F_GETPIPE_SZ) == 64 * 1024
        assert fcntl.fcntl(new_pipe(pipe_bytes(100_000)).w, F_GETPIPE_SZ) == 128 * 1024
        assert os.get_blocking(pipe.r) is False and os.get_blocking(pipe.w) is False
    finally:
        pipe.close()
    assert not is_open(pipe.r) and not is_open(pipe.w)


def test_the_pool_lends_at_most_its_limit_and_keeps_only_empty_pipes() -> None:
    pool = PipePool(PAGE, limit=2, threshold=0, idle_limit=1)
    a, b = pool.take(), pool.take()
    assert a is not None and b is not None
    assert pool.take() is None  # the limit counts lent pipes
    pool.give(a, empty=True)
    assert pool.take() is a  # reused, not made anew
    pool.give(a, empty=True)
    pool.give(b, empty=True)  # over the idle limit: closed
    assert pool.idle == [a] and pool.open == 1
    assert not is_open(b.r) and is_open(a.r)
    c = pool.take()
    assert c is a
    os.write(c.w, b"unsent")
    pool.give(c, empty=False)  # holds bytes: closed though the pool has room
    assert pool.idle == [] and not is_open(c.r)
    d = pool.take()
    assert d is not None
    pool.give(d, empty=True)
    pool.close()
    assert not is_open(d.r) and pool.open == 0


def test_a_pipe_that_cannot_be_made_is_said_once_and_the_stream_copies(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def refused(capacity: int) -> splice.Pipe:
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    monkeypatch.setattr(splice, "new_pipe", refused)
    pool = PipePool(PAGE, limit=4, threshold=0)
    caplog.set_level(logging.WARNING, logger="hairpin_proxy.relay")
    assert pool.take() is None
    assert pool.take() is None
    assert pool.lent == 0
    lines = [r for r in caplog.records if "cannot make a pipe" in r.getMessage()]
    assert len(lines) == 1 and lines[0].error == "Too many open files"  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------- the probe

def test_the_probe_passes_where_the_kernel_splices() -> None:
    assert probe(pipe_bytes(65536)) is None


@pytest.mark.parametrize("code", [errno.EINVAL, errno.ENOSYS, errno.EPERM])
def test_the_probe_names_a_refusal(code: int) -> None:
    """As an old kernel (ENOSYS, EINVAL) or a seccomp profile (EPERM) would refuse it."""
    def refuse(*args: object) -> int:
        raise OSError(code, os.strerror(code))

    assert probe(pipe_bytes(65536), refuse) == f"splice(2) failed: {os.strerror(code)}"


def test_the_probe_refuses_a_splice_that_moves_nothing() -> None:
    assert probe(PAGE, lambda *args: 0) == "splice from a socket moved 0 bytes of 5"


# ----------------------------------------------------------------------------- accounting

@given(st.integers(PAGE // 2 + PIPE_OVERHEAD // 2, 1 << 22) | st.just(0))
def test_a_stalled_spliced_direction_holds_no_more_than_a_copying_one(buffer: int) -> None:
    """The pipe's bytes and its own kernel memory together fit in the copying path's unsent
    read, so the per-connection bound (and the limit derived from it) is the same."""
    assert pipe_bytes(buffer) + PIPE_OVERHEAD <= unsent_read(buffer)
    assert pipe_bytes(buffer) >= PAGE
    if buffer:  # and a pipe holds no more than one socket buffer as set
        assert pipe_bytes(buffer) <= max(buffer, PAGE)


def test_the_default_bound_is_unchanged_and_the_pool_comes_out_of_the_reserve() -> None:
    assert per_connection(65536) == 784 * 1024
    assert pipe_bytes(65536) == 64 * 1024
    memory = str(256 * MIB)
    spliced = connection_limit(memory, None, 65536, splice=True)
    assert spliced == (256 * MIB - limits.RESERVE - limits.IDLE_PIPES * PIPE_OVERHEAD
                       ) // per_connection(65536)
    assert spliced <= connection_limit(memory, None, 65536)


@given(st.one_of(st.none(), st.integers(1, 1 << 40).map(str)), st.integers(0, 1 << 22),
       st.integers(0, 1 << 21))
def test_with_splice_the_default_limit_leaves_descriptors_for_the_pool(
        memory: str | None, buffer: int, open_files: int) -> None:
    got = default_limit(memory, None, buffer, open_files, splice=True)
    assert 1 <= got.connections <= default_limit(memory, None, buffer, open_files).connections
    if got.connections > 1:
        assert fds_needed(got.connections, splice=True) <= open_files


# ----------------------------------------------------------------------------- the relay

def to(up: Upstream) -> str:
    return f"127.0.0.1:{{port}}=127.0.0.1:{up.port}"


def echo_stream(port: int, size: int, seed: int) -> None:
    """``size`` bytes through an echoing upstream, checked byte for byte."""
    with connect(port, timeout=60) as s:
        sent: list[str] = []
        sender = threading.Thread(target=lambda: sent.append(send_stream(s, size, seed)))
        sender.start()
        got = drain_hash(s)
        sender.join(60)
    assert got == (size, sent[0])


def test_only_a_direction_past_the_threshold_takes_a_pipe_and_pipes_are_reused(
        tmp_path: Path) -> None:
    with Upstream(echo) as up, run_relay(tmp_path, [to(up)], "--splice-threshold",
                                         str(MIB)) as relay:
        settled_fd_count(relay)
        baseline = relay.pipe_count()
        echo_stream(relay.ports[0], 64 * 1024, 1)
        assert relay.pipe_count() == baseline  # below the threshold: copied
        for seed in range(4):  # one after another: two pipes at most, lent again and again
            echo_stream(relay.ports[0], 4 * MIB, seed)
        pipes = relay.pipe_count() - baseline
        assert 2 <= pipes <= 4, pipes  # one or two pipes (two descriptors each), kept idle
        listener = f"127.0.0.1:{relay.ports[0]}"
        assert relay.metric("hairpin_proxy_bytes_total", listener=listener,
                            direction="upstream") == 64 * 1024 + 16 * MIB
        assert relay.metric("hairpin_proxy_bytes_total", listener=listener,
                            direction="downstream") == 64 * 1024 + 16 * MIB


def test_splice_off_copies_every_byte_and_says_so(tmp_path: Path) -> None:
    with Upstream(echo) as up, run_relay(tmp_path, [to(up)], "--splice", "off",
                                         "--splice-threshold", "0") as relay:
        settled_fd_count(relay)
        baseline = relay.pipe_count()
        echo_stream(relay.ports[0], 4 * MIB, 5)
        assert relay.pipe_count() == baseline
    said = [r["msg"] for r in relay.log_records() if "splic" in r.get("msg", "")
            or "copying" in r.get("msg", "")]
    assert said == ["copying every byte (--splice off)"]


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to refuse splice(2)")
def test_a_kernel_that_refuses_splice_is_probed_once_and_the_relay_copies(
        tmp_path: Path) -> None:
    """strace fails every splice(2) with EPERM, as a seccomp profile would: the one probe
    at start says so once (the supervisor's, not each worker's) and every stream is copied."""
    refuse = ("strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=splice",
              "-e", "inject=splice:error=EPERM")
    with Upstream(echo) as up, run_relay(tmp_path, [to(up)], "--splice-threshold", "0",
                                         "--workers", "2", prefix=refuse) as relay:
        wait_until(lambda: relay.get("/readyz")[0] == 200, 60, "both workers ready")
        for seed in range(2):
            echo_stream(relay.ports[0], 2 * MIB, seed)
    said = [r for r in relay.log_records() if "splic" in r.get("msg", "")]
    assert [r["msg"] for r in said] == [
        "cannot splice, copying every byte instead: splice(2) failed: Operation not permitted"]
    assert "worker" not in said[0]
    assert [r for r in relay.log_records() if r.get("level") in ("error", "critical")] == []


def relay_socket_send_queue(listen_port: int, client_port: int) -> int:
    """Send-Q of the relay's socket to the client, as ``ss`` reports it."""
    out = subprocess.run(["ss", "-tnH", "state", "established", "(", "sport", "=",
                          f":{listen_port}", "and", "dport", "=", f":{client_port}", ")"],
                         capture_output=True, text=True, check=True).stdout.split()
    return int(out[1])


@pytest.mark.parametrize("loop", ["uvloop"])
def test_a_stalled_connection_holds_no_more_than_its_bound(
        tmp_path: Path, loop: str, data_path: str) -> None:
    """A client that never reads while its upstream sends without end: what the relay has
    read from the upstream and not yet handed to the client's socket (in user space when
    copying, in the pipe when splicing) stays within the bound the connection limit counts
    (limits.unsent_read, limits.pipe_bytes)."""
    stop = threading.Event()

    def pusher(acc: Accepted) -> None:
        acc.sock.settimeout(0.2)
        for piece in chunks(1 << 30, seed=9):
            while not stop.is_set():
                try:
                    acc.sock.sendall(piece)
                    break
                except TimeoutError:
                    continue
            if stop.is_set():
                return

    with Upstream(pusher) as up, run_relay(tmp_path, [to(up)], loop=loop) as relay:
        listener = f"127.0.0.1:{relay.ports[0]}"
        try:
            with connect(relay.ports[0]) as client:
                client.sendall(b"GET / HTTP/1.1\r\n\r\n")
                client_port = client.getsockname()[1]

                def held() -> tuple[float, int, int]:
                    read = relay.metric("hairpin_proxy_bytes_total", listener=listener,
                                        direction="downstream")
                    queued = fcntl.ioctl(client.fileno(), termios.FIONREAD, b"\0" * 4)
                    inq = int.from_bytes(queued, "little")
                    return read, inq, relay_socket_send_queue(relay.ports[0], client_port)

                last = [(-1.0, -1, -1)]

                def stalled() -> tuple[float, int, int] | None:
                    now = held()
                    before, last[0] = last[0], now
                    read, inq, outq = now
                    return now if now == before and read - inq - outq > 0 else None

                state = wait_until(stalled, 60, "the connection to stall", interval=0.3)
                assert state is not None
                read, inq, outq = state
                unsent = int(read) - inq - outq
                bound = pipe_bytes(65536) if data_path == "splice" else unsent_read(65536)
                print(f"{data_path}: {unsent} bytes held unsent (bound {bound})")
                assert 0 < unsent <= bound, (data_path, read, inq, outq)
        finally:
            stop.set()


def test_the_pool_lends_no_more_than_its_share_and_the_rest_is_copied(tmp_path: Path) -> None:
    """--max-connections 2 allows one pipe: a stream that wants two (one each way) splices one
    direction and copies the other, byte for byte."""
    with Upstream(echo) as up, run_relay(tmp_path, [to(up)], "--max-connections", "2",
                                         "--splice-threshold", "0") as relay:
        settled_fd_count(relay)
        baseline = relay.pipe_count()
        for seed in range(3):
            echo_stream(relay.ports[0], 8 * MIB, seed)
        assert relay.pipe_count() - baseline == 2  # the one pipe, lent and returned
    assert [r for r in relay.log_records() if r.get("level") in ("error", "critical")] == []


@pytest.mark.parametrize(("splice_flag", "limit"), [("auto", (1024 - 64) // 3),
                                                    ("off", (1024 - 64) // 2)])
def test_the_derived_limit_leaves_descriptors_for_the_pipes(
        tmp_path: Path, splice_flag: str, limit: int) -> None:
    """Under a 1024 open-file limit: two descriptors a connection when copying, three when
    splicing (a pipe's two per two connections)."""
    with Upstream(echo) as up, run_relay(tmp_path, [to(up)], "--splice", splice_flag,
                                         prefix=("prlimit", "--nofile=1024:1024")) as relay:
        pass
    lines = [r for r in relay.log_records() if r.get("msg", "").startswith("connection limit")]
    assert [(r["msg"], r["max_connections"]) for r in lines] == [
        ("connection limit from the open-file limit", limit)]


@pytest.mark.parametrize("loop", ["uvloop"])
def test_urgent_data_behind_a_stalled_stream_does_not_stop_it(
        tmp_path: Path, loop: str, data_path: str) -> None:
    """A splice stops at TCP's urgent mark for good (only recv reads past it): urgent data
    reported while a direction splices makes it finish its pipe and copy from then on. The
    urgent byte is dropped, as when copying; every byte around it arrives in order."""
    payload = b"".join(chunks(MIB, seed=11))
    with listening() as lsn, run_relay(tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:"
                                                  f"{lsn.getsockname()[1]}"], loop=loop
                                       ) as relay, relayed_pair(relay, lsn) as (client, up):
        # The upstream reads nothing until the end: the relay takes what its buffers and pipe
        # hold (and the upstream's autotuned receive buffer) and stalls, urgent byte behind.
        client.sendall(payload + b"abc")
        # One byte: a send of several with MSG_OOB that the send buffer cut short would make
        # another byte the urgent one.
        assert client.send(b"X", socket.MSG_OOB) == 1
        client.sendall(b"tail")
        client.shutdown(socket.SHUT_WR)
        got = drain_hash(up)
    want = payload + b"abctail"
    assert got == (len(want), hashlib.sha256(want).hexdigest()), data_path
