"""``--timeout`` bounds the whole doctor run (docs/doctor.md, "Deadline").

Each test runs the real CLI in a subprocess against a peer on loopback that misbehaves in
one way: a nameserver that never answers, an HTTP server that trickles one byte at a time, a
TLS peer that never finishes its handshake, an API server that accepts and says nothing.
The doctor must give up on its own and say so in its report (a ``timeout`` outcome, "did not
answer within", "no answer within"), where a loop that waited for the peer would report
something else, or nothing for minutes. Its wall time is not measured against the deadline:
on a busy machine start-up alone can take seconds. The process is given the deadline plus
``PATIENCE`` before the test calls it stuck, far short of what the misbehaving peers would
hold it for. Every peer loop is bounded in time.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hairpin_proxy.doctor.command import budget
from tests.waiting import PATIENCE

TIMEOUT = 1.0
DEADLINE = budget(TIMEOUT)  # 5 + 5 + 1 = 11 s
HOST = "slow.example.test"
# Peers give up by themselves after this long, whatever the doctor does.
PEER_LIFETIME = 60.0


def run_doctor(*args: str, prefix: tuple[str, ...] = ()) -> tuple[int, dict[str, Any], str,
                                                                     float]:
    """(exit status, JSON report, stderr, wall seconds) of one doctor run; a run still going
    ``PATIENCE`` seconds past its deadline fails the test."""
    cmd = [*prefix, sys.executable, "-m", "hairpin_proxy", "doctor", *args, "--output", "json",
           "--timeout", f"{TIMEOUT:g}", "--verify-hosts", "off"]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("HAIRPIN_") and k != "KUBECONFIG"}
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False,
                              timeout=DEADLINE + PATIENCE)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"doctor still running {time.monotonic() - started:.1f}s after its start "
                    f"(deadline {DEADLINE:g}s): {exc.stderr!r}")
    took = time.monotonic() - started
    report = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, report, proc.stderr, took


def one(report: dict[str, Any]) -> dict[str, Any]:
    (h,) = report["hosts"]
    assert isinstance(h, dict)
    return h


@contextlib.contextmanager
def peer(serve: Callable[[socket.socket, threading.Event], None]) -> Iterator[int]:
    """A TCP listener on 127.0.0.1 handing each connection to ``serve`` in its own thread."""
    lsock = socket.create_server(("127.0.0.1", 0))
    lsock.settimeout(0.1)
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def accept() -> None:
        end = time.monotonic() + PEER_LIFETIME
        while not stop.is_set() and time.monotonic() < end:
            try:
                conn, _ = lsock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            t = threading.Thread(target=serve, args=(conn, stop), daemon=True)
            threads.append(t)
            t.start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield lsock.getsockname()[1]
    finally:
        stop.set()
        acceptor.join(5)
        lsock.close()
        for t in threads:
            t.join(5)


def trickle(first: bytes, byte: bytes, *, read_first: bool = True,
            interval: float = 0.05) -> Callable[[socket.socket, threading.Event], None]:
    """Read what the client sends, send ``first``, then ``byte`` every ``interval`` seconds
    until the client goes or the peer's lifetime ends: never a line end, never a full TLS
    record."""

    def serve(conn: socket.socket, stop: threading.Event) -> None:
        end = time.monotonic() + PEER_LIFETIME
        with conn:
            conn.settimeout(1.0)
            try:
                if read_first:
                    conn.recv(65536)
                conn.sendall(first)
                while not stop.is_set() and time.monotonic() < end:
                    time.sleep(interval)
                    conn.sendall(byte)
            except OSError:
                return  # the client gave up: what we want
    return serve


def silent(conn: socket.socket, stop: threading.Event) -> None:
    """Accept and say nothing until the client goes."""
    end = time.monotonic() + PEER_LIFETIME
    with conn:
        conn.settimeout(0.2)
        while not stop.is_set() and time.monotonic() < end:
            try:
                if conn.recv(65536) == b"":
                    return
            except TimeoutError:
                continue
            except OSError:
                return


def test_a_trickling_http_server_cannot_stretch_the_run() -> None:
    # "HTTP/1.1 2" and then a digit every 5 ms: never a "\r\n", so a read loop that
    # restarts its timeout for each byte would wait for the full 4 KiB status line limit
    # (about 20 s), twice the deadline.
    with peer(trickle(b"HTTP/1.1 2", b"0", interval=0.005)) as port:
        rc, report, err, took = run_doctor(HOST, "--no-api", "--resolve", f"{HOST}:127.0.0.1",
                                           "--port", str(port), "--tls-port", "0")
    assert rc == 1, err
    bare = one(report)["http"]["bare"]
    assert bare["outcome"] == "timeout" and "reply" in bare["detail"], bare
    # The attempt waited its --timeout out, then gave up (a lower bound; the upper one is
    # the "timeout" outcome: a read loop restarting its timeout per byte ends at the status
    # line limit instead).
    assert took >= TIMEOUT, f"{took:.1f}s"


def test_a_tls_peer_that_never_finishes_the_handshake() -> None:
    # A handshake record header announcing 4 KiB, then its bytes one by one.
    with peer(trickle(b"\x16\x03\x03\x10\x00\x02", b"\x00")) as port:
        rc, report, err, _took = run_doctor(HOST, "--no-api", "--resolve", f"{HOST}:127.0.0.1",
                                           "--port", "0", "--tls-port", str(port))
    assert rc == 1, err
    tls = one(report)["tls"]
    for attempt in ("bare", "proxy_v1", "proxy_v2"):
        assert tls[attempt]["outcome"] == "timeout" and "tls" in tls[attempt]["detail"], tls


def test_an_api_server_that_never_answers(tmp_path: Path) -> None:
    with peer(silent) as port:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "silent",
            "clusters": [{"name": "silent",
                          "cluster": {"server": f"http://127.0.0.1:{port}"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "silent", "context": {"cluster": "silent", "user": "u",
                                                        "namespace": "hairpin-proxy"}}],
        }))
        rc, report, err, _took = run_doctor(HOST, "--kubeconfig", str(kubeconfig),
                                           "--resolve", f"{HOST}:127.0.0.1",
                                           "--port", "0", "--tls-port", "0")
    assert rc == 1, err
    assert report["cluster"] is None
    assert report["api"] == "the API did not answer within 5s", report["api"]


BLACK_HOLE = """\
import os, select, socket, sys, time
parent = os.getppid()
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(("127.0.0.1", 53))
open(sys.argv[1], "w").close()
end = time.monotonic() + float(sys.argv[2])
# Take every query, answer none; go when the doctor (our parent after exec) is gone.
while time.monotonic() < end and os.getppid() == parent:
    if select.select([sock], [], [], 0.2)[0]:
        sock.recvfrom(65536)
"""


def test_a_blackholed_nameserver_cannot_hold_the_exit(tmp_path: Path) -> None:
    """getaddrinfo against a nameserver that never answers, with resolv.conf asking for
    4 attempts of 30 s: the C library would block for minutes, and the call cannot be
    cancelled. The doctor gives up at its DNS limit and exits without waiting for it.

    Needs root: a network and mount namespace (unshare) where 127.0.0.1:53 is the black
    hole and /etc/resolv.conf names it."""
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        pytest.skip("needs root and unshare(1) for a private network and mount namespace")
    if subprocess.run([unshare, "--net", "--mount", "true"], capture_output=True,
                      timeout=30, check=False).returncode != 0:
        pytest.skip("unshare --net --mount does not work here")
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\noptions timeout:30 attempts:4\n")
    hole = tmp_path / "hole.py"
    hole.write_text(BLACK_HOLE)
    ready = tmp_path / "ready"
    script = textwrap.dedent(f"""\
        set -e
        ip link set lo up
        mount --bind {resolv} /etc/resolv.conf
        {sys.executable} {hole} {ready} {PEER_LIFETIME} &
        i=0
        while [ ! -e {ready} ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
        exec "$@"
        """)
    rc, report, err, _took = run_doctor(
        HOST, "--no-api", "--port", "80", "--tls-port", "0",
        prefix=(unshare, "--net", "--mount", "sh", "-c", script, "sh"))
    assert ready.exists(), err
    assert rc == 1, err
    h = one(report)
    assert h["verdict"] == "dns-failed", h
    assert h["dns"]["error"] == "no answer within 5s", h["dns"]
