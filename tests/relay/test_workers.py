"""--workers: processes sharing the listeners, one admin endpoint, one crash restarts one worker,
SIGTERM drains them all."""

from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from hairpin_proxy.relay import limits
from tests.peers import free_port
from tests.relay.helpers import (
    Relay,
    Upstream,
    closed_promptly,
    connect,
    echo,
    recv_all,
    run_relay,
)
from tests.waiting import PATIENCE, wait_until

ROUNDS = 40  # connections per check: all on one of two workers has odds of 2 in 2**40


def worker_pids(relay: Relay) -> set[int]:
    """The supervisor's worker processes (not multiprocessing's resource tracker)."""
    children = Path(f"/proc/{relay.pid}/task/{relay.pid}/children").read_text().split()
    return {int(pid) for pid in children
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()}


def round_trip(port: int, data: bytes = b"ping") -> bytes:
    with connect(port) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        return recv_all(s)


def per_worker(relay: Relay, name: str, **labels: str) -> list[float]:
    return [relay.metric(name, **labels, worker=str(i)) for i in range(2)]


def test_two_workers_share_the_listener_and_one_endpoint_speaks_for_both(
        tmp_path: Path) -> None:
    with Upstream(echo) as up, run_relay(tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:{up.port}"],
                                         "--workers", "2") as relay:
        wait_until(lambda: relay.get("/readyz")[0] == 200, what="both workers ready")
        assert len(worker_pids(relay)) == 2
        for i in range(ROUNDS):
            assert round_trip(relay.ports[0], b"r%d" % i) == b"r%d" % i
        listener = f"127.0.0.1:{relay.ports[0]}"
        # Counted when each connection is done: wait for the last of them.
        wait_until(lambda: sum(per_worker(relay, "hairpin_proxy_connections_total",
                                          listener=listener)) == ROUNDS,
                   what="every connection counted")
        counts = per_worker(relay, "hairpin_proxy_connections_total", listener=listener)
        assert all(n > 0 for n in counts), counts
        text = relay.get("/metrics")[1]
        assert text.count("\nhairpin_proxy_build_info{") + text.startswith(
            "hairpin_proxy_build_info{") <= 1
        assert relay.metric("hairpin_proxy_workers") == 2
        assert relay.metric("hairpin_proxy_worker_restarts_total") == 0


def test_a_crashed_worker_alone_is_restarted(tmp_path: Path) -> None:
    with Upstream(echo) as up, run_relay(tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:{up.port}"],
                                         "--workers", "2") as relay:
        wait_until(lambda: relay.get("/readyz")[0] == 200, what="both workers ready")
        before = worker_pids(relay)
        victim, survivor = sorted(before)
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: relay.metric("hairpin_proxy_worker_restarts_total") == 1,
                   what="the restart counted")
        wait_until(lambda: len(worker_pids(relay)) == 2 and relay.get("/readyz")[0] == 200,
                   what="two workers ready again")
        after = worker_pids(relay)
        assert survivor in after and victim not in after
        assert relay.proc.poll() is None
        for i in range(ROUNDS):
            assert round_trip(relay.ports[0], b"a%d" % i) == b"a%d" % i
        assert any(r.get("msg") == "a worker exited; restarting it" and r.get("status") == -9
                   for r in relay.log_records())


def test_sigterm_drains_every_worker_then_exits_zero(tmp_path: Path) -> None:
    with Upstream(echo) as up, run_relay(tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:{up.port}"],
                                         "--workers", "2", "--grace-period", "60") as relay:
        wait_until(lambda: relay.get("/readyz")[0] == 200, what="both workers ready")
        pids = worker_pids(relay)
        with connect(relay.ports[0]) as held:
            held.sendall(b"before")
            assert held.recv(6) == b"before"
            relay.terminate()
            # Draining: no new connections anywhere, the established one goes on.
            wait_until(lambda: _refused(relay.ports[0]), what="every listener closed")
            held.sendall(b"during")
            assert held.recv(6) == b"during"
            assert relay.proc.poll() is None
        assert relay.proc.wait(PATIENCE) == 0
        assert not any(Path(f"/proc/{pid}").exists() for pid in pids)


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def test_a_worker_that_cannot_start_stops_the_proxy_at_once(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        admin = free_port()
        proc = subprocess.run(
            [sys.executable, "-m", "hairpin_proxy", "proxy", "--workers", "2", "--listen",
             f"127.0.0.1:{port}=127.0.0.1:1", "--admin-listen", f"127.0.0.1:{admin}"],
            capture_output=True, text=True, timeout=60, check=False,
            stdin=subprocess.DEVNULL)
    assert proc.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr
    assert "a worker failed to start; stopping" in proc.stderr
    assert "restarting" not in proc.stderr


def test_default_is_one_worker_per_cpu_of_the_quota(tmp_path: Path) -> None:
    want = limits.auto_workers(limits.cpu_quota(*limits.read_cpu_cgroup()),
                               len(os.sched_getaffinity(0)))
    with Upstream(echo) as up, run_relay(tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:{up.port}"],
                                         "--workers", "0") as relay:
        wait_until(lambda: relay.get("/readyz")[0] == 200, what="ready")
        if want == 1:
            # One process, no supervisor: the relay's own metrics, without a worker label.
            assert relay.metric("hairpin_proxy_workers") == 0
        else:
            wait_until(lambda: relay.metric("hairpin_proxy_workers") == want,
                       what=f"{want} workers")
        assert round_trip(relay.ports[0]) == b"ping"


# --------------------------------------------------------------------------- limits

ATTEMPTS = 400  # connections tried to land enough on one worker: each has odds of 1 in 2


def _active(relay: Relay) -> list[float]:
    return per_worker(relay, "hairpin_proxy_connections_active",
                      listener=f"127.0.0.1:{relay.ports[0]}")


def _active_is(relay: Relay, counts: list[float]) -> bool:
    return _active(relay) == counts


def _works(s: socket.socket) -> bool:
    s.sendall(b"e")
    return s.recv(1) == b"e"


def _from(relay: Relay, ip: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", relay.ports[0]), timeout=10,
                                    source_address=(ip, 0))


def fill_one_worker(relay: Relay, n: int, held: list[socket.socket],
                    ip: str = "127.0.0.1") -> None:
    """Hold ``n`` more connections from ``ip``, all on worker 0 (the kernel spreads them by
    their ports: one that lands on worker 1 is closed again), each relaying; fails when
    one is refused."""
    for _ in range(ATTEMPTS):
        if n == 0:
            return
        before = _active(relay)
        s = _from(relay, ip)
        if not _works(s):
            s.close()
            raise AssertionError(f"refused with {before} held: {relay.log_text()[-2000:]}")
        now = _active(relay)
        if now[0] > before[0]:
            held.append(s)
            n -= 1
            continue
        s.close()
        wait_until(functools.partial(_active_is, relay, before), what="the other's closed")
    raise AssertionError(f"the kernel sent too few to worker 0: {n} left")


def test_the_connection_limit_counts_every_worker_together(tmp_path: Path) -> None:
    """--max-connections 8 with two workers: 8 connections however the kernel spreads them,
    all 8 on one worker included; the 9th is refused on either; places freed by closing and
    by a worker's crash are places again."""
    with Upstream(echo) as up, run_relay(tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:{up.port}"],
                                         "--workers", "2", "--max-connections", "8") as relay:
        wait_until(lambda: relay.get("/readyz")[0] == 200, what="both workers ready")
        held: list[socket.socket] = []
        try:
            fill_one_worker(relay, 8, held)
            assert _active(relay) == [8, 0]
            for _ in range(ROUNDS):
                with _from(relay) as extra:
                    assert closed_promptly(extra)
            # Half of them closed: four places, on whichever worker.
            for s in held[4:]:
                s.close()
            del held[4:]
            wait_until(lambda: sum(_active(relay)) == 4, what="four closed")
            held += [_from(relay) for _ in range(4)]
            assert all(_works(s) for s in held[4:])
            with _from(relay) as extra:
                assert closed_promptly(extra)
            for s in held:
                s.close()
            held.clear()
            wait_until(lambda: sum(_active(relay)) == 0, what="all closed")
            refused = sum(per_worker(relay, "hairpin_proxy_errors_total", cause="over_limit",
                                     listener=f"127.0.0.1:{relay.ports[0]}"))
            assert refused == ROUNDS + 1
            # A worker killed with its connections: what it held is free again.
            fill_one_worker(relay, 8, held)
            victim = min(worker_pids(relay))
            os.kill(victim, signal.SIGKILL)
            wait_until(lambda: relay.metric("hairpin_proxy_worker_restarts_total") == 1
                       and relay.get("/readyz")[0] == 200, what="worker restarted")
        finally:
            for s in held:
                s.close()
        wait_until(lambda: sum(_active(relay)) == 0, what="every connection gone")
        again = [_from(relay) for _ in range(8)]
        try:
            assert all(_works(s) for s in again)
        finally:
            for s in again:
                s.close()


def test_the_per_source_cap_counts_every_worker_together(tmp_path: Path) -> None:
    """--max-connections-per-source 5 with two workers: five from one address on one
    worker, a sixth refused wherever it lands, another address its own five."""
    with Upstream(echo) as up, run_relay(tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:{up.port}"],
                                         "--workers", "2", "--max-connections-per-source",
                                         "5") as relay:
        wait_until(lambda: relay.get("/readyz")[0] == 200, what="both workers ready")
        held: list[socket.socket] = []
        try:
            fill_one_worker(relay, 5, held)
            for _ in range(ROUNDS):
                with _from(relay) as extra:
                    assert closed_promptly(extra)
            others = [_from(relay, "127.0.0.2") for _ in range(5)]
            held += others
            assert all(_works(s) for s in others)
            with _from(relay, "127.0.0.2") as extra:
                assert closed_promptly(extra)
            held.pop(0).close()
            wait_until(lambda: sum(_active(relay)) == 9, what="one closed")
            held.append(_from(relay))
            assert _works(held[-1])
        finally:
            for s in held:
                s.close()
        refused = sum(per_worker(relay, "hairpin_proxy_errors_total",
                                 listener=f"127.0.0.1:{relay.ports[0]}",
                                 cause="over_source_limit"))
        assert refused == ROUNDS + 1
