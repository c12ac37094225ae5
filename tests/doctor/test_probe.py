"""Probes against real peers: nginx with and without proxy_protocol, plain and TLS."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from hairpin_proxy.doctor.probe import (
    Header,
    attempt,
    overridden,
    parse_overrides,
    start_probe,
    start_resolve,
)
from tests.peers.nginx import Nginx
from tests.waiting import PATIENCE, wait_until

HOST = "app.example.test"


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=8) as p:
        yield p


def last_entry(n: Nginx, path: str) -> dict[str, str]:
    def entry() -> dict[str, str] | None:
        for e in reversed(n.access_log_entries()):
            if e["request_uri"] == path:
                return {str(k): str(val) for k, val in e.items()}
        return None
    found = wait_until(entry, 30, f"an access log entry for {path}")
    assert found is not None
    return found


def test_parse_overrides() -> None:
    assert parse_overrides(("App.Example.test.:192.0.2.1", "app.example.test:[2001:db8::1]",
                            "b.example.test:2001:db8::2")) == {
        "app.example.test": ("192.0.2.1", "2001:db8::1"), "b.example.test": ("2001:db8::2",)}
    for bad in ("app.example.test", "app.example.test:", ":192.0.2.1",
                "app.example.test:not-an-ip", "app.example.test:192.0.2.300"):
        with pytest.raises(ValueError, match="--resolve"):
            parse_overrides((bad,))


def test_wildcard_overrides() -> None:
    """``*.example.test`` stands for every name under example.test, not for example.test;
    a name's own entry wins, then the closest wildcard, then ``*`` (curl's only wildcard)."""
    o = parse_overrides(("*.Example.test:192.0.2.1", "*.deep.example.test:192.0.2.2",
                         "exact.example.test:192.0.2.3"))
    assert o["*.example.test"] == ("192.0.2.1",)
    assert overridden("a.example.test", o) == ("192.0.2.1",)
    assert overridden("A.b.Example.test.", o) == ("192.0.2.1",)
    assert overridden("x.deep.example.test", o) == ("192.0.2.2",)
    assert overridden("exact.example.test", o) == ("192.0.2.3",)
    assert overridden("example.test", o) is None
    assert overridden("a.example.org", o) is None
    given = start_resolve("hairpin-proxy-doctor.example.test", o, 3.0,
                          ThreadPoolExecutor(max_workers=1))()
    assert given.addresses == ("192.0.2.1",) and given.overridden
    for bad in ("a*.example.test:192.0.2.1", "**:192.0.2.1", "a.*.example.test:192.0.2.1",
                "*.*.example.test:192.0.2.1", "*example.test:192.0.2.1", "*.:192.0.2.1"):
        with pytest.raises(ValueError, match="a wildcard is '\\*' alone or the whole first"):
            parse_overrides((bad,))


def test_a_bare_star_answers_every_name_after_any_other_entry() -> None:
    o = parse_overrides(("*:192.0.2.9", "*.example.test:192.0.2.1", "exact.example.org:192.0.2.3"))
    assert overridden("a.example.test", o) == ("192.0.2.1",)
    assert overridden("exact.example.org", o) == ("192.0.2.3",)
    assert overridden("example.test", o) == ("192.0.2.9",)
    assert overridden("anything.else", o) == ("192.0.2.9",)
    assert overridden("anything.else", parse_overrides(("a.test:192.0.2.1",))) is None


def test_resolve_uses_the_system_resolver(pool: ThreadPoolExecutor) -> None:
    res = start_resolve("localhost", {}, 3.0, pool)()
    assert "127.0.0.1" in res.addresses and not res.error and not res.overridden
    assert len(set(res.addresses)) == len(res.addresses)
    missing = start_resolve("no-such-host.invalid", {}, 3.0, pool)()
    assert missing.addresses == () and missing.error
    given = start_resolve("App.example.test", {"app.example.test": ("192.0.2.1",)}, 3.0, pool)()
    assert given.addresses == ("192.0.2.1",) and given.overridden


def test_proxy_protocol_listener_http(pp_nginx: Nginx) -> None:
    bare = attempt("127.0.0.1", pp_nginx.port, host=HOST, path="/.well-known/acme-challenge/a",
                   tls=False, header="", timeout=10)
    assert bare.outcome in ("empty", "reset")
    versions: tuple[Header, ...] = ("v1", "v2")
    for version in versions:
        path = f"/.well-known/acme-challenge/{version}"
        got = attempt("127.0.0.1", pp_nginx.port, host=HOST, path=path, tls=False,
                      header=version, timeout=10)
        assert (got.outcome, got.status) == ("http", 200)
        entry = last_entry(pp_nginx, path)
        # The header names our own socket: nginx saw it, and our Host header.
        assert entry["proxy_protocol_addr"] == "127.0.0.1"
        assert entry["host"] == HOST


def test_proxy_protocol_listener_tls_sends_sni(pp_nginx: Nginx) -> None:
    bare = attempt("127.0.0.1", pp_nginx.tls_port, host=HOST, path="/x", tls=True, header="",
                   timeout=10)
    assert bare.outcome in ("empty", "reset", "tls-error")
    path = "/.well-known/acme-challenge/tls"
    got = attempt("127.0.0.1", pp_nginx.tls_port, host=HOST, path=path, tls=True,
                  header="v2", timeout=10)
    assert (got.outcome, got.status) == ("http", 200)
    entry = last_entry(pp_nginx, path)
    assert entry["ssl_server_name"] == HOST and entry["scheme"] == "https"


def test_plain_listener_answers_bare_and_refuses_the_header(plain_nginx: Nginx,
                                                            pool: ThreadPoolExecutor) -> None:
    http = start_probe("127.0.0.1", plain_nginx.port, host=HOST, tls=False, timeout=10,
                       pool=pool)()
    assert (http.bare.status, http.v1.status, http.v2.status) == (200, 400, 400)
    assert (http.scheme, http.port) == ("http", plain_nginx.port)
    tls = start_probe("127.0.0.1", plain_nginx.tls_port, host=HOST, tls=True, timeout=10,
                      pool=pool)()
    assert tls.scheme == "tls" and tls.bare.status == 200
    assert not tls.v1.answered and not tls.v2.answered
    # The requests nginx could parse asked for an ACME challenge path. nginx logs a request
    # after it has answered it, so the log is read once both lines are there.
    def parsed() -> list[str]:
        return [e["request_uri"] for e in plain_nginx.access_log_entries() if e["request_uri"]]
    wait_until(lambda: len(parsed()) >= 2, what="two parsed requests logged")
    uris = parsed()
    assert all(u.startswith("/.well-known/acme-challenge/") for u in uris)


def test_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        got = attempt("127.0.0.1", port, host=HOST, path="/", tls=False, header="v1",
                      timeout=5)
    assert got.outcome == "refused"


@contextlib.contextmanager
def server(reply: bytes | None) -> Iterator[int]:
    """Accepts connections; sends ``reply`` and closes, or (None) stays silent."""
    lsock = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    held: list[socket.socket] = []

    def loop() -> None:
        lsock.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = lsock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if reply is None:
                held.append(conn)
            else:
                with conn:
                    conn.sendall(reply)
    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield lsock.getsockname()[1]
    finally:
        stop.set()
        t.join(10)
        lsock.close()
        for c in held:
            c.close()


def test_silence_is_a_bounded_timeout() -> None:
    with server(None) as port:
        started = time.monotonic()
        got = attempt("127.0.0.1", port, host=HOST, path="/", tls=False, header="", timeout=0.5)
        took = time.monotonic() - started
    assert got.outcome == "timeout" and "reply" in got.detail
    # It waited its timeout out; the upper bound only guards against a hang.
    assert 0.5 <= took < PATIENCE, took


def test_tls_against_silence_times_out_too() -> None:
    with server(None) as port:
        got = attempt("127.0.0.1", port, host=HOST, path="/", tls=True, header="v1", timeout=0.5)
    assert got.outcome == "timeout" and "tls" in got.detail


def test_not_http() -> None:
    with server(b"SSH-2.0-OpenSSH_9.2\r\n") as port:
        got = attempt("127.0.0.1", port, host=HOST, path="/", tls=False, header="", timeout=5)
    assert got.outcome == "garbage" and "SSH-2.0" in got.detail


def test_unreachable_address_is_not_a_crash() -> None:
    # An IPv6 literal on a host without IPv6 routes, or a connection to the discard port:
    # either way the attempt reports instead of raising.
    got = attempt("::1", 9, host=HOST, path="/", tls=False, header="v2", timeout=1)
    assert got.outcome in ("refused", "unreachable", "error", "timeout")
