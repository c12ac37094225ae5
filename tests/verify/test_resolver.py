"""The resolvers against a real DNS server (dnsmasq on loopback)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable

import pytest

from hairpin_proxy.verify.resolver import (
    ServerResolver,
    SystemResolver,
    combine,
    from_gaierror,
    make_resolver,
    parse_servers,
)
from hairpin_proxy.verify.verdict import Answers, ResolveError
from tests.verify.dnsmasq import ELB_IP, LB_IP, BlackHole, Dnsmasq
from tests.waiting import PATIENCE


def resolve(servers: list[str], name: str, timeout: float = 1.0) -> Answers | ResolveError:
    async def go() -> Answers | ResolveError:
        async with asyncio.timeout(30):
            return await make_resolver(servers, timeout=timeout).resolve(name)
    return asyncio.run(go())


def test_a_record(dnsmasq: Dnsmasq) -> None:
    assert resolve([dnsmasq.server], "app.example.test") == \
        Answers("app.example.test", (LB_IP,))


def test_absolute_and_case_insensitive(dnsmasq: Dnsmasq) -> None:
    result = resolve([dnsmasq.server], "App.Example.TEST.")
    assert isinstance(result, Answers) and result.addresses == (LB_IP,)


def test_a_and_aaaa(dnsmasq: Dnsmasq) -> None:
    result = resolve([dnsmasq.server], "dual.example.test")
    assert isinstance(result, Answers)
    assert result.addresses == (LB_IP, "2001:db8::10")


def test_aaaa_only(dnsmasq: Dnsmasq) -> None:
    result = resolve([dnsmasq.server], "v6only.example.test")
    assert isinstance(result, Answers) and result.addresses == ("2001:db8::99",)


def test_wildcard_answers_any_label(dnsmasq: Dnsmasq) -> None:
    result = resolve([dnsmasq.server], "hairpin-proxy-check-q7x2k9.wild.example.test")
    assert isinstance(result, Answers) and result.addresses == (LB_IP,)


def test_nxdomain(dnsmasq: Dnsmasq) -> None:
    assert resolve([dnsmasq.server], "nope.example.test") == \
        Answers("nope.example.test", (), "NXDOMAIN")


def test_nodata(dnsmasq: Dnsmasq) -> None:
    assert resolve([dnsmasq.server], "txtonly.example.test") == \
        Answers("txtonly.example.test", (), "NODATA")


def test_cname_gives_canonical_name(dnsmasq: Dnsmasq) -> None:
    result = resolve([dnsmasq.server], "alias.example.test")
    assert isinstance(result, Answers)
    assert result.addresses == (ELB_IP,) and result.canonical == "lb.elb.example.test"


def test_refused_is_an_error(dnsmasq: Dnsmasq) -> None:
    # dnsmasq has no upstream: names outside its zone are REFUSED.
    result = resolve([dnsmasq.server], "example.org")
    assert isinstance(result, ResolveError) and result.kind == "refused"


def test_timeout(black_hole: BlackHole) -> None:
    start = time.monotonic()
    result = resolve([black_hole.server], "app.example.test", timeout=0.3)
    took = time.monotonic() - start
    assert isinstance(result, ResolveError) and result.kind == "timeout"
    # The silent server had its whole timeout; the upper bound only guards against a hang.
    assert 0.3 <= took < PATIENCE, took


def test_stopped_server_is_a_timeout(dnsmasq: Dnsmasq) -> None:
    dnsmasq.stop()
    result = resolve([dnsmasq.server], "app.example.test", timeout=0.3)
    assert isinstance(result, ResolveError) and result.kind == "timeout"


def test_next_server_answers_when_first_is_silent(black_hole: BlackHole,
                                                   dnsmasq: Dnsmasq) -> None:
    # Each server has its own port: the silent one first, then dnsmasq.
    result = resolve([black_hole.server, dnsmasq.server], "app.example.test", timeout=0.3)
    assert isinstance(result, Answers) and result.addresses == (LB_IP,)


_Call = tuple[tuple[object, ...], dict[str, object]]


def _system(name: str, fake: Callable[..., Awaitable[object]],
            timeout: float = 5.0) -> tuple[Answers | ResolveError, list[_Call]]:
    """SystemResolver with the loop's getaddrinfo replaced (the real one would ask the
    resolv.conf server, which is not on loopback)."""
    calls: list[_Call] = []

    async def go() -> Answers | ResolveError:
        loop = asyncio.get_running_loop()

        async def getaddrinfo(*args: object, **kwargs: object) -> object:
            calls.append((args, kwargs))
            return await fake(*args, **kwargs)
        loop.getaddrinfo = getaddrinfo  # type: ignore[method-assign, assignment]
        return await SystemResolver(timeout=timeout).resolve(name)
    return asyncio.run(go()), calls


def test_system_resolver_asks_for_both_families_absolutely() -> None:
    async def fake(*args: object, **kwargs: object) -> object:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "lb.elb.example.test", (LB_IP, 0)),
                (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("2001:db8::10", 0, 0, 0))]
    result, calls = _system("App.example.test", fake)
    assert result == Answers("app.example.test", (LB_IP, "2001:db8::10"),
                             canonical="lb.elb.example.test")
    (args, kwargs), = calls
    assert args == ("App.example.test.", None)
    assert kwargs["family"] == socket.AF_UNSPEC


def test_system_resolver_errors() -> None:
    async def nxdomain(*args: object, **kwargs: object) -> object:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    result, _ = _system("nope.example.test", nxdomain)
    assert result == Answers("nope.example.test", (), "no such name")

    async def hang(*args: object, **kwargs: object) -> object:
        await asyncio.sleep(30)
        return []
    result, _ = _system("slow.example.test", hang, timeout=0.2)
    assert isinstance(result, ResolveError) and result.kind == "timeout"


def test_make_resolver_picks_by_setting() -> None:
    assert isinstance(make_resolver(()), SystemResolver)
    assert isinstance(make_resolver(("127.0.0.1:5353",)), ServerResolver)


def test_parse_servers() -> None:
    assert parse_servers(["10.0.0.2", "127.0.0.1:5353", "[::1]:5300", "[2001:DB8::1]"]) == (
        ("10.0.0.2", 53), ("127.0.0.1", 5353), ("::1", 5300), ("2001:db8::1", 53))
    for bad in ["dns.google", "10.0.0.2:0", "10.0.0.2:99999", "[::1", ""]:
        with pytest.raises(ValueError):
            parse_servers([bad])


def test_from_gaierror() -> None:
    def gai(code: int) -> socket.gaierror:
        return socket.gaierror(code, "msg")
    assert from_gaierror("a.test", gai(socket.EAI_NONAME)) == Answers("a.test", (), "no such name")
    if hasattr(socket, "EAI_NODATA"):
        assert from_gaierror("a.test", gai(socket.EAI_NODATA)) == Answers("a.test", (), "NODATA")
    again = from_gaierror("a.test", gai(socket.EAI_AGAIN))
    assert isinstance(again, ResolveError) and again.kind == "temporary"
    fail = from_gaierror("a.test", gai(socket.EAI_FAIL))
    assert isinstance(fail, ResolveError) and fail.kind == "error"


def test_combine() -> None:
    err = ResolveError("a.test", "timeout")
    ok: tuple[tuple[str, ...], str, str] = (("192.0.2.1",), "", "")
    nodata: tuple[tuple[str, ...], str, str] = ((), "NODATA", "")
    nx: tuple[tuple[str, ...], str, str] = ((), "NXDOMAIN", "")
    assert combine("a.test", ok, nodata) == Answers("a.test", ("192.0.2.1",))
    assert combine("a.test", nodata, nodata) == Answers("a.test", (), "NODATA")
    assert combine("a.test", ok, nx) == Answers("a.test", ("192.0.2.1",))
    assert combine("a.test", nx, nx) == Answers("a.test", (), "NXDOMAIN")
    assert combine("a.test", ok, err) == Answers("a.test", ("192.0.2.1",), incomplete="timeout")
    assert combine("a.test", nx, err) == Answers("a.test", (), "NXDOMAIN")
    assert combine("a.test", nodata, err) == err
    assert combine("a.test", err, ResolveError("a.test", "servfail")) == err
