"""Resolution and connect: round-robin over every answer, skipping addresses that refuse."""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from hairpin_proxy.relay.lookup import Address, ConnectError, Resolver
from tests.relay.helpers import black_hole
from tests.waiting import until

T = TypeVar("T")


def listener(host: str) -> socket.socket:
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    s.bind((host, 0))
    s.listen(64)
    return s


def refused_port(host: str) -> int:
    """A port on ``host`` that nothing listens on."""
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
    return port


def fake_dns(answers: dict[str, list[str]], calls: list[str]) -> Resolver:
    async def getaddrinfo(host: str, port: int) -> list[Address]:
        calls.append(host)
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, (ip, port)) for ip in answers[host]]
    return Resolver(getaddrinfo)


async def peer_of(resolver: Resolver, host: str, port: int, within: float = 10.0) -> str:
    sock = await resolver.connect(host, port, within)
    try:
        addr: str = sock.getpeername()[0]
        return addr
    finally:
        sock.close()


def test_round_robin_over_every_answer_resolving_per_connection() -> None:
    first = listener("127.0.0.1")
    port = first.getsockname()[1]
    servers = [first]
    for ip in ("127.0.0.2", "127.0.0.3"):
        s = socket.socket()
        s.bind((ip, port))
        s.listen(64)
        servers.append(s)
    calls: list[str] = []
    resolver = fake_dns({"svc.test": ["127.0.0.1", "127.0.0.2", "127.0.0.3"]}, calls)

    async def go() -> list[str]:
        return [await peer_of(resolver, "svc.test", port) for _ in range(9)]

    try:
        seen = asyncio.run(go())
    finally:
        for s in servers:
            s.close()
    assert Counter(seen) == {"127.0.0.1": 3, "127.0.0.2": 3, "127.0.0.3": 3}
    assert len(set(seen[:3])) == 3  # they take turns rather than repeat
    assert len(calls) == 9  # resolved for every connection


def test_an_address_that_refuses_is_skipped() -> None:
    good = listener("127.0.0.3")
    port = good.getsockname()[1]
    # 127.0.0.2 has nothing on that port: connects there are refused.
    resolver = fake_dns({"svc.test": ["127.0.0.2", "127.0.0.3"]}, [])

    async def go() -> list[str]:
        return [await peer_of(resolver, "svc.test", port) for _ in range(4)]

    try:
        assert asyncio.run(go()) == ["127.0.0.3"] * 4
    finally:
        good.close()


def test_an_address_that_never_answers_leaves_time_for_the_next() -> None:
    # A full accept queue drops SYNs: the first address hangs, the second accepts.
    hole = socket.socket()
    hole.bind(("127.0.0.2", 0))
    hole.listen(0)
    port = hole.getsockname()[1]
    fillers = []
    for _ in range(4):
        f = socket.socket()
        f.setblocking(False)
        f.connect_ex(("127.0.0.2", port))
        fillers.append(f)
    good = socket.socket()
    good.bind(("127.0.0.3", port))
    good.listen(8)
    resolver = fake_dns({"svc.test": ["127.0.0.2", "127.0.0.3"]}, [])

    async def go() -> str:
        return await peer_of(resolver, "svc.test", port, within=4.0)

    try:
        assert asyncio.run(go()) == "127.0.0.3"
    finally:
        for s in [hole, good, *fillers]:
            s.close()


@pytest.mark.parametrize(("answers", "cause", "needle"), [
    ({}, "dns", "cannot resolve svc.test"),
    ({"svc.test": []}, "dns", "no addresses"),
    ({"svc.test": ["127.0.0.2", "127.0.0.3"]}, "connect_refused", "127.0.0.3:{port} refused"),
])
def test_failures_name_their_cause(answers: dict[str, list[str]], cause: str,
                                   needle: str) -> None:
    port = refused_port("127.0.0.1")
    resolver = fake_dns(answers, [])
    with pytest.raises(ConnectError) as info:
        asyncio.run(peer_of(resolver, "svc.test", port))
    assert info.value.cause == cause
    assert needle.format(port=port) in info.value.detail


def test_ip_literals_skip_resolution() -> None:
    calls: list[str] = []
    resolver = fake_dns({}, calls)
    server = listener("127.0.0.1")
    try:
        ip = asyncio.run(peer_of(resolver, "127.0.0.1", server.getsockname()[1]))
    finally:
        server.close()
    assert ip == "127.0.0.1" and calls == []


def test_a_real_name_through_the_system_resolver() -> None:
    server = listener("127.0.0.1")
    try:
        ip = asyncio.run(peer_of(Resolver(), "localhost", server.getsockname()[1]))
    finally:
        server.close()
    assert ip in ("127.0.0.1", "::1")


def test_a_name_that_cannot_be_asked_for_is_a_dns_error() -> None:
    with pytest.raises(ConnectError) as info:
        asyncio.run(peer_of(Resolver(), "a..b", 80))
    assert info.value.cause == "dns" and "a..b" in info.value.detail


class Recorder(asyncio.Protocol):
    def __init__(self) -> None:
        self.made = 0
        self.lost = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.made += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost += 1


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_open_skips_a_silent_address_and_tells_the_protocol_only_of_success(loop: str) -> None:
    # The relay's path: the loop connects and builds the transport; failed attempts
    # (one that hangs, one that refuses) never reach the protocol.
    hole, fillers = black_hole("127.0.0.2")
    port = hole.getsockname()[1]
    good = socket.socket()
    good.bind(("127.0.0.3", port))
    good.listen(8)
    resolver = fake_dns({"svc.test": ["127.0.0.2", "127.0.0.4", "127.0.0.3"]}, [])
    proto = Recorder()

    async def go() -> tuple[str, float]:
        started = asyncio.get_running_loop().time()
        transport = await resolver.open("svc.test", port, 3.0, lambda: proto)
        took = asyncio.get_running_loop().time() - started
        peer: str = transport.get_extra_info("peername")[0]
        transport.close()
        await until(lambda: proto.lost, what="the protocol told of the close")
        return peer, took

    try:
        peer, took = run_on(loop, go())
        assert peer == "127.0.0.3"
        # The silent address had its share of the budget (a lower bound), no more: had it taken
        # the whole 3 s, the open would have failed instead of reaching the third address.
        assert took >= 0.5
        assert (proto.made, proto.lost) == (1, 1)
    finally:
        for s in [hole, good, *fillers]:
            s.close()


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_open_cancelled_from_outside_is_a_cancellation_not_a_timeout(loop: str) -> None:
    hole, fillers = black_hole("127.0.0.2")
    resolver = Resolver()
    proto = Recorder()

    async def go() -> None:
        task = asyncio.ensure_future(resolver.open("127.0.0.2", hole.getsockname()[1], 5.0,
                                                   lambda: proto))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        run_on(loop, go())
        assert proto.made == 0
    finally:
        for s in [hole, *fillers]:
            s.close()


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_open_times_out_with_its_cause(loop: str) -> None:
    hole, fillers = black_hole("127.0.0.2")
    resolver = Resolver()

    async def go() -> None:
        await resolver.open("127.0.0.2", hole.getsockname()[1], 0.5, Recorder)

    try:
        with pytest.raises(ConnectError) as info:
            run_on(loop, go())
        assert info.value.cause == "connect_timeout" and "timed out" in info.value.detail
    finally:
        for s in [hole, *fillers]:
            s.close()


def run_on(loop: str, coro: Coroutine[Any, Any, T]) -> T:
    factory = None
    if loop == "uvloop":
        import uvloop
        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)
