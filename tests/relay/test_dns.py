"""Upstream names through a real DNS server (dnsmasq): absolute names, answers kept for their
TTL, the last good answer when the DNS fails, and the failures counted."""

from __future__ import annotations

import asyncio
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hairpin_proxy.relay import lookup
from hairpin_proxy.relay.lookup import ConnectError, Resolver, dns_resolver
from tests.relay.helpers import Upstream, connect, echo, recv_all, relay_in_thread, wait_until
from tests.verify import dnsmasq as dnsmasq_module
from tests.verify.dnsmasq import Dnsmasq

NAME = "ingress.example.test"
TTL = 2


def serving(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ttl: int) -> Iterator[Dnsmasq]:
    """dnsmasq serving NAME -> 127.0.0.1 with a TTL of ``ttl`` seconds (its default is 0)."""
    monkeypatch.setattr(dnsmasq_module, "RECORDS", (*dnsmasq_module.RECORDS, f"--local-ttl={ttl}"))
    server = Dnsmasq(tmp_path, hosts={NAME: ["127.0.0.1"]})
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def dns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Dnsmasq]:
    """dnsmasq serving NAME -> 127.0.0.1 with a TTL of TTL seconds."""
    yield from serving(tmp_path, monkeypatch, TTL)


def queries(server: Dnsmasq, rdtype: str = "A") -> list[str]:
    """Names asked for that start with NAME (search-list expansions included), in order, from
    dnsmasq's query log (dnsmasq's own readiness probe asks for another name)."""
    text = server.log_path.read_text(errors="replace")
    return [q for q in re.findall(rf"query\[{rdtype}\] (\S+) from", text)
            if q.startswith(NAME)]


def resolv_conf(tmp_path: Path, server: Dnsmasq) -> Path:
    """A pod's resolv.conf: a search list and ndots:5, pointing at dnsmasq."""
    path = tmp_path / "resolv.conf"
    path.write_text("nameserver 127.0.0.1\n"
                    "search hairpin-proxy.svc.cluster.local svc.cluster.local cluster.local\n"
                    "options ndots:5\n")
    return path


def pod_resolver(tmp_path: Path, server: Dnsmasq) -> Resolver:
    client = dns_resolver(filename=str(resolv_conf(tmp_path, server)))
    assert client is not None
    client.port = server.port
    return Resolver(dns_client=client)


def test_the_name_is_asked_for_as_an_absolute_name_once_per_ttl(
        tmp_path: Path, dns: Dnsmasq) -> None:
    resolver = pod_resolver(tmp_path, dns)
    with Upstream(echo) as up:
        async def main() -> list[str]:
            peers = []
            for _ in range(5):
                sock = await resolver.connect(NAME, up.port, 5.0)
                peers.append(sock.getpeername()[0])
                sock.close()
            # Concurrent connections share one lookup.
            socks = await asyncio.gather(*(resolver.connect(NAME, up.port, 5.0)
                                           for _ in range(20)))
            for sock in socks:
                sock.close()
            return peers
        assert asyncio.run(main()) == ["127.0.0.1"] * 5
    # One A (and one AAAA) query, for the name itself: no search-list expansion.
    assert queries(dns, "A") == [NAME]
    assert queries(dns, "AAAA") == [NAME]


@pytest.mark.usefixtures("own_network")  # binds a wildcard address
def test_answers_expire_with_their_ttl_and_a_dns_outage_keeps_the_last_good_one(
        tmp_path: Path, dns: Dnsmasq) -> None:
    failures: list[tuple[str, bool]] = []
    resolver = pod_resolver(tmp_path, dns)
    resolver.on_failure = lambda host, stale, why: failures.append((host, stale))
    with Upstream(echo, host="0.0.0.0") as up:  # 127.0.0.1 and 127.0.0.2
        async def peer() -> str:
            sock = await resolver.connect(NAME, up.port, 2.0)
            try:
                return str(sock.getpeername()[0])
            finally:
                sock.close()

        async def main() -> None:
            assert await peer() == "127.0.0.1"
            await asyncio.to_thread(dns.reload, {NAME: ["127.0.0.2"]})
            assert await peer() == "127.0.0.1"  # cached: the TTL has not run out
            await asyncio.sleep(TTL + 0.2)
            assert await peer() == "127.0.0.2"  # asked again, new answer
            await asyncio.to_thread(dns.stop)
            await asyncio.sleep(TTL + 0.2)
            # DNS down: the last good answer, and a connect within the 2 s budget, so the
            # failed lookup left it time (one that took the budget would end in an error).
            assert await peer() == "127.0.0.2"
            assert failures == [(NAME, True)]
            for _ in range(5):  # ... then at once for STALE_RETRY, not asked again each time
                assert await peer() == "127.0.0.2"
            assert failures == [(NAME, True)]  # asking again would have failed again
        asyncio.run(main())
    assert queries(dns, "A").count(NAME) >= 2


def test_a_name_the_dns_says_does_not_exist_is_a_dns_error_counted(
        tmp_path: Path, dns: Dnsmasq) -> None:
    failures: list[tuple[str, bool]] = []
    resolver = pod_resolver(tmp_path, dns)
    resolver.on_failure = lambda host, stale, why: failures.append((host, stale))
    with pytest.raises(ConnectError) as info:
        asyncio.run(resolver.connect("missing.example.test", 80, 3.0))
    assert info.value.cause == "dns" and "missing.example.test" in info.value.detail
    assert failures == [("missing.example.test", False)]


def test_the_relay_counts_failures_and_serves_the_last_good_answer(
        tmp_path: Path, dns: Dnsmasq) -> None:
    resolver = pod_resolver(tmp_path, dns)
    port = free_tcp_port()

    def roundtrip(port: int = port) -> bool:
        with connect(port) as s:
            s.sendall(b"x")
            s.shutdown(socket.SHUT_WR)
            return recv_all(s) == b"x"

    with Upstream(echo) as up, relay_in_thread(
            [f"127.0.0.1:{port}={NAME}:{up.port}"], resolver=resolver) as relay:
        assert roundtrip()
        dns.stop()
        try:
            stale = relay.dns_failures.labels(NAME, "stale")
            wait_until(lambda s=stale: roundtrip() and s.value >= 1, 20,  # type: ignore[misc]
                       "a stale answer to be used")
            assert relay.dns_failures.labels(NAME, "error").value == 0
            assert relay.metrics.errors.value(f"127.0.0.1:{port}", "dns") == 0
        finally:
            dns.start()


@pytest.fixture
def dns_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Dnsmasq]:
    """dnsmasq whose answers outlive any test (TTL 300 s): what the relay caches stays
    cached, so its connections take the cached-address path whatever the load."""
    yield from serving(tmp_path, monkeypatch, 300)


def test_a_cached_name_is_connected_to_at_once_and_fails_as_through_the_resolver(
        tmp_path: Path, dns_kept: Dnsmasq, data_path: str) -> None:
    resolver = pod_resolver(tmp_path, dns_kept)
    port = free_tcp_port()
    up = Upstream(echo)
    with up, relay_in_thread([f"127.0.0.1:{port}={NAME}:{up.port}"], resolver=resolver) as relay:
        for _ in range(3):  # the first resolves; the others find the answer cached
            with connect(port) as s:
                s.sendall(b"hello")
                s.shutdown(socket.SHUT_WR)
                assert recv_all(s) == b"hello"
        cached = resolver.cached(NAME, up.port, time.monotonic())
        assert cached == [(socket.AF_INET, ("127.0.0.1", up.port))]
        assert len(up.headers) == 3 and all(h.destination == ("127.0.0.1", port)
                                            for h in up.headers)
        up.close()  # nothing listens there now: refused, named as the resolver names it
        with connect(port) as s:
            assert recv_all(s) == b""
        errors = relay.metrics.errors
        wait_until(lambda: errors.value(f"127.0.0.1:{port}", "connect_refused") == 1, 20,
                   "the refusal to be counted")
    assert queries(dns_kept, "A") == [NAME]


def test_a_cached_name_with_several_addresses_still_fails_over(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data_path: str) -> None:
    monkeypatch.setattr(dnsmasq_module, "RECORDS", (*dnsmasq_module.RECORDS, "--local-ttl=300"))
    server = Dnsmasq(tmp_path, hosts={NAME: ["127.0.0.1", "127.0.0.2"]})
    server.start()
    try:
        resolver = pod_resolver(tmp_path, server)
        port = free_tcp_port()
        # Bound to 127.0.0.1 only: 127.0.0.2 refuses, and every connection must still land.
        with Upstream(echo) as up, relay_in_thread(
                [f"127.0.0.1:{port}={NAME}:{up.port}"], resolver=resolver) as relay:
            for _ in range(4):
                with connect(port) as s:
                    s.sendall(b"x")
                    s.shutdown(socket.SHUT_WR)
                    assert recv_all(s) == b"x"
            cached = resolver.cached(NAME, up.port, time.monotonic())
            assert cached is not None and len(cached) == 2
            assert relay.metrics.errors.value(f"127.0.0.1:{port}", "connect_refused") == 0
    finally:
        server.stop()


def free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_without_a_resolv_conf_getaddrinfo_is_used(tmp_path: Path) -> None:
    assert dns_resolver(filename=str(tmp_path / "absent")) is None
    resolver = Resolver(dns_client=None)
    with Upstream(echo) as up:
        sock = asyncio.run(resolver.connect("localhost", up.port, 5.0))
        sock.close()


def test_single_label_and_hosts_file_names_go_to_the_system_resolver(
        tmp_path: Path, dns: Dnsmasq) -> None:
    resolver = pod_resolver(tmp_path, dns)
    with Upstream(echo) as up:
        sock = asyncio.run(resolver.connect("localhost", up.port, 5.0))
        sock.close()
    assert "localhost" not in queries(dns, "A")
    assert lookup.STALE_RETRY > TTL
