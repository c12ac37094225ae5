"""A real DNS server for the verification tests: dnsmasq on 127.0.0.1, a random high port.

The zone is fixed (``RECORDS``); everything under ``example.test`` that it does not list is
NXDOMAIN (``--local``), and any other name is REFUSED (no upstream servers). A missing dnsmasq
is a failure, not a skip: CI installs real peers (scripts/system-deps.sh).
"""

from __future__ import annotations

import getpass
import shutil
import socket
import subprocess
import time
from pathlib import Path

import dns.exception
import dns.message
import dns.query
import dns.rdatatype
import pytest

from tests.peers import read_text, stop_process

LB_IP = "203.0.113.10"
OTHER_IP = "198.51.100.7"
ELB_IP = "203.0.113.20"

# dnsmasq flags of the test zone.
RECORDS = (
    f"--address=/app.example.test/{LB_IP}",
    f"--address=/other.example.test/{OTHER_IP}",
    # --address covers every name under the domain: a wildcard record.
    f"--address=/wild.example.test/{LB_IP}",
    f"--address=/elsewhere-wild.example.test/{OTHER_IP}",
    f"--host-record=dual.example.test,{LB_IP},2001:db8::10",
    "--host-record=v6only.example.test,2001:db8::99",
    f"--host-record=lb.elb.example.test,{ELB_IP}",
    f"--host-record=direct.example.test,{ELB_IP}",
    "--cname=alias.example.test,lb.elb.example.test",
    "--txt-record=txtonly.example.test,no-address-here",
    "--local=/example.test/",
)


def dnsmasq_binary() -> str:
    path = shutil.which("dnsmasq") or shutil.which("dnsmasq", path="/usr/sbin:/sbin")
    if path is None:
        pytest.fail("dnsmasq is not installed: it is the real DNS server these tests need; "
                    "run `sudo bash scripts/system-deps.sh` (installs dnsmasq-base)",
                    pytrace=False)
    return path


def free_port() -> int:
    """A port free for both UDP and TCP on 127.0.0.1 a moment ago (dnsmasq binds both)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.bind(("127.0.0.1", 0))
            port: int = udp.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
                try:
                    tcp.bind(("127.0.0.1", port))
                except OSError:
                    continue  # the TCP side is taken (a client's ephemeral port): next one
            return port
    raise RuntimeError("no port free for both UDP and TCP on 127.0.0.1")


class Dnsmasq:
    """One dnsmasq process; ``stop`` and ``start`` again (same port) to make an outage."""

    def __init__(self, log_dir: Path, port: int | None = None) -> None:
        self.binary = dnsmasq_binary()
        # Once it has served on a port, clients are configured with it: restarts keep it.
        self.fixed_port = port is not None
        self.port = port or free_port()
        self.log_path = log_dir / "dnsmasq.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def server(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> None:
        """Start and wait until it answers. The port can be taken between ``free_port`` and
        the bind (or, on a restart, by a client's ephemeral port): then try again, on a new
        port unless the test needs this one."""
        for attempt in range(5):
            if self._start_once(timeout):
                self.fixed_port = True
                return
            if "Address already in use" not in read_text(self.log_path) or attempt == 4:
                break
            time.sleep(0.2)
            if not self.fixed_port and self.proc is None:
                self.port = free_port()
        pytest.fail(f"dnsmasq did not start on {self.server}:\n{read_text(self.log_path)}",
                    pytrace=False)

    def _start_once(self, timeout: float) -> bool:
        argv = [self.binary, "--no-daemon", "--no-resolv", "--no-hosts", "--bind-interfaces",
                "--listen-address=127.0.0.1", f"--port={self.port}", "--pid-file=",
                f"--user={getpass.getuser()}", "--log-queries", "--log-facility=-",
                *RECORDS]
        self.log_path.write_bytes(b"")
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.proc = None
                return False
            if self.answers():
                return True
            time.sleep(0.05)
        self.stop()
        return False

    def answers(self) -> bool:
        query = dns.message.make_query("app.example.test.", dns.rdatatype.A)
        try:
            dns.query.udp(query, "127.0.0.1", port=self.port, timeout=0.2)
        except (OSError, dns.exception.DNSException):
            return False
        return True

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, timeout=5.0)
            self.proc = None


class BlackHole:
    """A UDP socket on loopback that takes queries and never answers: a resolver timeout."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]

    @property
    def server(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self.sock.close()
