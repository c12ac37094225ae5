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
import secrets
import shutil
import signal
import socket
import subprocess
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


# A TXT record only this instance serves: its answers are told from another server's.
INSTANCE = "hairpin-test-instance.example.test"
# Starts tried before giving up, each after dnsmasq said its port was taken.
START_ATTEMPTS = 5


def port_free(port: int) -> bool:
    """Whether ``port`` on 127.0.0.1 can be bound for both UDP and TCP now."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp, \
            socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
        try:
            udp.bind(("127.0.0.1", port))
            tcp.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


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
        self.token = secrets.token_hex(8)
        if hosts is not None:
            self.hosts_path = log_dir / "dnsmasq.hosts"
            self._write_hosts(hosts)

    @property
    def server(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> None:
        """Start and wait until it answers. The port can be taken between ``free_port`` and
        dnsmasq's bind (or, on a restart, by a client's ephemeral port): dnsmasq then exits
        saying so, and we try again (a bounded number of times) on a new port, or, when the
        test needs this one, once it is free again."""
        for _ in range(START_ATTEMPTS):
            outcome = self._start_once(timeout)
            if outcome == "serving":
                self.fixed_port = True
                return
            if outcome != "port taken":
                break
            if self.fixed_port:
                wait_until(lambda: port_free(self.port), what=f"port {self.port} to be free")
            else:
                self.port = free_port()
        pytest.fail(f"dnsmasq did not start on {self.server}:\n{read_text(self.log_path)}",
                    pytrace=False)

    def _start_once(self, timeout: float) -> str:
        """"serving", "port taken" (it exited saying so) or "failed"."""
        argv = [self.binary, "--no-daemon", "--no-resolv", "--no-hosts", "--bind-interfaces",
                "--listen-address=127.0.0.1", f"--port={self.port}", "--pid-file=",
                f"--user={getpass.getuser()}", "--log-queries", "--log-facility=-",
                *RECORDS, f"--txt-record={INSTANCE},{self.token}"]
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
            return "failed"
        if proc.poll() is not None:
            self.proc = None
            taken = "Address already in use" in read_text(self.log_path)
            return "port taken" if taken else "failed"
        return "serving"

    def answers(self) -> bool:
        """Whether this dnsmasq answers on its port: another server that got the port first
        (another test's dnsmasq, say) answers too, but not with this one's token."""
        query = dns.message.make_query(INSTANCE + ".", dns.rdatatype.TXT)
        try:
            reply = dns.query.udp(query, "127.0.0.1", port=self.port, timeout=0.2)
        except (OSError, dns.exception.DNSException):
            return False
        return any(rr.strings == (self.token.encode(),) for rrset in reply.answer
                   if rrset.rdtype == dns.rdatatype.TXT for rr in rrset)

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
        try:
            wait_until(lambda: all(self.lookup(name) == addrs for name, addrs in wanted.items()),
                       timeout, f"dnsmasq to serve {wanted} after SIGHUP")
        except WaitTimeout as exc:
            pytest.fail(f"{exc}:\n{read_text(self.log_path)}", pytrace=False)

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
