"""A real DNS server for the verification tests: dnsmasq on 127.0.0.1, a random high port.

The zone is fixed (``RECORDS``); everything under ``example.test`` that it does not list is
NXDOMAIN (``--local``), and any other name is REFUSED (no upstream servers). A missing dnsmasq
is a failure, not a skip: CI installs real peers (scripts/system-deps.sh).

``Dnsmasq(..., hosts={name: [addresses]})`` adds records that can change at runtime: they are
served from an ``--addn-hosts`` file, and ``reload(hosts)`` rewrites it and sends SIGHUP, on
which dnsmasq re-reads the file and clears its cache; ``reload`` returns once the new records
are served. Use names that ``RECORDS`` does not cover (``--address`` ones win).
"""

from __future__ import annotations

import getpass
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import dns.exception
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

from tests.peers import read_text, stop_process
from tests.waiting import WaitTimeout, wait_until

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

    def __init__(self, log_dir: Path, port: int | None = None, *,
                 hosts: Mapping[str, Sequence[str]] | None = None) -> None:
        self.binary = dnsmasq_binary()
        # Once it has served on a port, clients are configured with it: restarts keep it.
        self.fixed_port = port is not None
        self.port = port or free_port()
        self.log_path = log_dir / "dnsmasq.log"
        self.proc: subprocess.Popen[bytes] | None = None
        # The --addn-hosts file (None: no such records).
        self.hosts_path: Path | None = None
        self.hosts: dict[str, tuple[str, ...]] = {}
        if hosts is not None:
            self.hosts_path = log_dir / "dnsmasq.hosts"
            self._write_hosts(hosts)

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
        if self.hosts_path is not None:
            argv.append(f"--addn-hosts={self.hosts_path}")
        self.log_path.write_bytes(b"")
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
        proc = self.proc
        try:
            wait_until(lambda: proc.poll() is not None or self.answers(), timeout,
                       "dnsmasq to answer")
        except WaitTimeout:
            self.stop()
            return False
        if proc.poll() is not None:  # it exited (its port was taken, mostly)
            self.proc = None
            return False
        return True

    def answers(self) -> bool:
        query = dns.message.make_query("app.example.test.", dns.rdatatype.A)
        try:
            dns.query.udp(query, "127.0.0.1", port=self.port, timeout=0.2)
        except (OSError, dns.exception.DNSException):
            return False
        return True

    def _write_hosts(self, hosts: Mapping[str, Sequence[str]]) -> None:
        assert self.hosts_path is not None
        self.hosts = {name.lower(): tuple(addrs) for name, addrs in hosts.items()}
        text = "".join(f"{addr} {name}\n" for name, addrs in self.hosts.items()
                       for addr in addrs)
        tmp = self.hosts_path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(self.hosts_path)  # dnsmasq never reads half a file

    def lookup(self, name: str) -> tuple[str, ...] | None:
        """The A and AAAA addresses dnsmasq serves for ``name`` now (sorted), or None when it
        does not answer."""
        found: list[str] = []
        for rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA):
            query = dns.message.make_query(name.rstrip(".") + ".", rdtype)
            try:
                reply = dns.query.udp(query, "127.0.0.1", port=self.port, timeout=0.5)
            except (OSError, dns.exception.DNSException):
                return None
            if reply.rcode() not in (dns.rcode.NOERROR, dns.rcode.NXDOMAIN):
                return None
            found.extend(rr.to_text() for rrset in reply.answer if rrset.rdtype == rdtype
                         for rr in rrset)
        return tuple(sorted(found))

    def reload(self, hosts: Mapping[str, Sequence[str]], timeout: float = 10.0) -> None:
        """Serve ``hosts`` instead of the current --addn-hosts records (a name left out
        no longer resolves); returns once dnsmasq answers with them."""
        assert self.hosts_path is not None, "started without hosts="
        assert self.proc is not None and self.proc.poll() is None, "dnsmasq is not running"
        before = set(self.hosts)
        self._write_hosts(hosts)
        self.proc.send_signal(signal.SIGHUP)
        wanted = {name: tuple(sorted(self.hosts.get(name, ())))
                  for name in before | set(self.hosts)}
        deadline = time.monotonic() + timeout
        while any(self.lookup(name) != addrs for name, addrs in wanted.items()):
            if time.monotonic() > deadline:
                pytest.fail(f"dnsmasq did not serve {wanted} within {timeout}s of SIGHUP:\n"
                            f"{read_text(self.log_path)}", pytrace=False)
            time.sleep(0.05)

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
