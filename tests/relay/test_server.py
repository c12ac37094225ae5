"""The relay process as a whole: round-robin upstreams, command line, environment, startup
errors."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from hairpin_proxy.relay.lookup import Address, Resolver
from tests.peers import free_port
from tests.relay.helpers import Upstream, connect, echo, recv_all, relay_in_thread, run_relay
from tests.waiting import PATIENCE


def test_round_robin_over_several_addresses_skipping_one_that_refuses() -> None:
    first = Upstream(echo, host="127.0.0.2")
    second = Upstream(echo, host="127.0.0.3", port=first.port)
    asked: list[str] = []

    async def dns(host: str, port: int) -> list[Address]:
        asked.append(host)
        # 127.0.0.4 has nothing listening: it refuses and is skipped.
        return [(socket.AF_INET, (ip, port)) for ip in ("127.0.0.2", "127.0.0.4", "127.0.0.3")]

    port = free_port()
    with first, second, relay_in_thread([f"127.0.0.1:{port}=ingress.test:{first.port}"],
                                        Resolver(dns)) as relay:
        for i in range(12):
            with connect(port) as s:
                s.sendall(b"%d" % i)
                s.shutdown(socket.SHUT_WR)
                assert recv_all(s) == b"%d" % i
        errors = relay.metrics.errors
    assert Counter({"a": first.accepted, "b": second.accepted}) == Counter(a=6, b=6)
    assert asked == ["ingress.test"] * 12
    assert sum(errors.value(f"127.0.0.1:{port}", c) for c in ("connect_refused", "reset")) == 0


def test_a_real_name_is_resolved_by_the_system_resolver(tmp_path: Path) -> None:
    with Upstream(echo) as up, run_relay(tmp_path, [f"127.0.0.1:{{port}}=localhost:{up.port}"]
                                         ) as relay, connect(relay.ports[0]) as s:
        s.sendall(b"named")
        s.shutdown(socket.SHUT_WR)
        assert recv_all(s) == b"named"
        assert relay.get("/readyz") == (200, f"ok: localhost:{up.port} reachable\n")


def test_listeners_from_the_environment(tmp_path: Path) -> None:
    with Upstream(echo) as a, Upstream(echo) as b:
        p1, p2 = free_port(), free_port()
        env = {"HAIRPIN_LISTEN": f"127.0.0.1:{p1}=127.0.0.1:{a.port}, "
                                 f"127.0.0.1:{p2}=127.0.0.1:{b.port}/v2"}
        with run_relay(tmp_path, [], env=env):
            for port in (p1, p2):
                with connect(port) as s:
                    s.sendall(b"e")
                    s.shutdown(socket.SHUT_WR)
                    assert recv_all(s) == b"e"
        assert [h.version for h in a.headers + b.headers] == [1, 2]


def test_target_server_fills_in_listeners_without_an_upstream(tmp_path: Path) -> None:
    with Upstream(echo) as up, run_relay(tmp_path, [f"127.0.0.2:{up.port}"],
                                         env={"TARGET_SERVER": "127.0.0.1"}) as relay, \
            connect(up.port, "127.0.0.2") as s:
        s.sendall(b"t")
        s.shutdown(socket.SHUT_WR)
        assert recv_all(s) == b"t"
        assert relay.get("/readyz")[0] == 200


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hairpin_proxy", "proxy", *args],
                          capture_output=True, text=True, timeout=60, check=False,
                          env=dict(os.environ, **(env or {})))


@pytest.mark.parametrize(("args", "code", "needle"), [
    (["--workers", "-1"], 2, "--workers / HAIRPIN_WORKERS: must not be negative"),
    (["--listen", "127.0.0.1:8080/v9"], 2, "unknown PROXY protocol version"),
    (["--listen", "127.0.0.1"], 2, "missing port"),
    (["--connect-timeout", "0"], 2, "must be positive"),
    (["--proxy-protocol", "v3"], 2, "invalid choice"),
    (["--splice-threshold", "-1"], 2,
     "--splice-threshold / HAIRPIN_SPLICE_THRESHOLD: must not be negative"),
    (["--splice", "always"], 2, "invalid choice"),
])
def test_bad_options_are_refused_clearly(args: list[str], code: int, needle: str) -> None:
    result = cli(*args, "--admin-listen", "")
    assert result.returncode == code
    assert needle in result.stderr


def test_a_taken_port_is_a_startup_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = cli("--listen", f"127.0.0.1:{port}=127.0.0.1:1", "--admin-listen", "")
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Address already in use" in result.stderr


def test_help_documents_flags_and_environment() -> None:
    out = cli("--help").stdout
    for needle in ("--listen", "HAIRPIN_LISTEN", "TARGET_SERVER", "--proxy-protocol",
                   "--admin-listen", "--connect-timeout", "--idle-timeout", "--max-connections",
                   "--grace-period", "--workers", "--loop", "--log-format"):
        assert needle in out


def test_text_logs_carry_the_cause(tmp_path: Path) -> None:
    dead = free_port()
    with run_relay(tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:{dead}"], "--log-format",
                   "text") as relay:
        with connect(relay.ports[0]) as s:
            s.recv(1)
        relay.terminate()
        relay.proc.wait(PATIENCE)
    lines = [line for line in relay.log_text().splitlines() if "WARNING" in line
             and "cause=" in line]
    assert len(lines) == 1
    assert "cause=connect_refused" in lines[0] and f"target=127.0.0.1:{dead}" in lines[0]


def test_default_start_raises_the_open_file_limit_and_warns_of_nothing(tmp_path: Path) -> None:
    """A default start lifts the soft open-file limit to the hard one (as HAProxy and nginx do),
    derives --max-connections from what fits, names what bounded it truthfully, and logs no
    warning."""
    from hairpin_proxy.relay.limits import memory_limit, read_cgroup

    with run_relay(tmp_path, ["127.0.0.1:{port}=127.0.0.1:1"], "--log-format", "text") as relay:
        limits = Path(f"/proc/{relay.pid}/limits").read_text()
        relay.terminate()
        relay.proc.wait(PATIENCE)
    soft, hard = next(line.split()[3:5] for line in limits.splitlines()
                      if line.startswith("Max open files"))
    assert soft == hard
    log = relay.log_text()
    assert "WARNING" not in log
    started = [line for line in log.splitlines() if "connection limit from the" in line]
    assert len(started) == 1
    if memory_limit(*read_cgroup()) is None:
        assert "memory limit" not in started[0]
