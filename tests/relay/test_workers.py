"""--workers: processes sharing the listeners, one admin endpoint, one crash restarts one worker,
SIGTERM drains them all."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from hairpin_proxy.relay import limits
from tests.peers import free_port
from tests.relay.helpers import Relay, Upstream, connect, echo, recv_all, run_relay
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
