from __future__ import annotations

import pytest

from hairpin_proxy.addresses import format_hostport, parse_hostport


@pytest.mark.parametrize(("text", "expected"), [
    ("0.0.0.0:8080", ("0.0.0.0", 8080)),
    ("127.0.0.1:0", ("127.0.0.1", 0)),
    ("[::]:8443", ("::", 8443)),
    ("svc.ns.svc.cluster.local:80", ("svc.ns.svc.cluster.local", 80)),
    (" host:1 ", ("host", 1)),
])
def test_parse(text: str, expected: tuple[str, int]) -> None:
    assert parse_hostport(text) == expected
    assert parse_hostport(format_hostport(*expected)) == expected


def test_default_port() -> None:
    assert parse_hostport("example.com", default_port=80) == ("example.com", 80)
    assert parse_hostport("::1", default_port=80) == ("::1", 80)


@pytest.mark.parametrize("bad", ["", "host", "host:70000", "host:x", ":80", "[::1",
                                 "[::1]x", "[::1]:"])
def test_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_hostport(bad)
