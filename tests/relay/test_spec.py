from __future__ import annotations

import pytest

from hairpin_proxy.relay.spec import (
    ListenerSpec,
    ListenerSpecError,
    parse_listener,
    parse_listeners,
)
from hairpin_proxy.settings import DEFAULT_TARGET_SERVER

TS = "ingress.example.svc"


def p(text: str, version: str = "v1") -> ListenerSpec:
    return parse_listener(text, target_server=TS, default_version=version)  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "want"), [
    ("0.0.0.0:8080", ("0.0.0.0", 8080, TS, 8080, "v1")),
    ("0.0.0.0:8080=127.0.0.1:80", ("0.0.0.0", 8080, "127.0.0.1", 80, "v1")),
    ("127.0.0.1:8443=nginx.test:443/v2", ("127.0.0.1", 8443, "nginx.test", 443, "v2")),
    ("[::]:8080=[::1]:80/v1", ("::", 8080, "::1", 80, "v1")),
    ("[::1]:9000/v2", ("::1", 9000, TS, 9000, "v2")),
    (":8080=backend", ("::", 8080, "backend", 8080, "v1")),
    (" 127.0.0.1:1=h:2 ", ("127.0.0.1", 1, "h", 2, "v1")),
])
def test_specs_parse(text: str, want: tuple[object, ...]) -> None:
    s = p(text)
    assert (s.listen_host, s.listen_port, s.upstream_host, s.upstream_port, s.version) == want


def test_default_version_applies_unless_the_suffix_says_otherwise() -> None:
    assert p("127.0.0.1:1=h:2", "v2").version == "v2"
    assert p("127.0.0.1:1=h:2/v1", "v2").version == "v1"


def test_names_for_logs_and_labels() -> None:
    s = p("[::]:8080=[::1]:80/v2")
    assert (s.name, s.upstream, str(s)) == ("[::]:8080", "[::1]:80", "[::]:8080=[::1]:80/v2")
    assert s.upstream_is_ip and not p("127.0.0.1:1=name.test:2").upstream_is_ip


@pytest.mark.parametrize(("text", "needle"), [
    ("", "empty"),
    ("127.0.0.1", "missing port"),
    ("127.0.0.1:8080/v3", "unknown PROXY protocol version"),
    ("127.0.0.1:99999", "bad port"),
    ("127.0.0.1:0", "port 0"),
    ("127.0.0.1:8080=", "empty target"),
    ("127.0.0.1:8080=h:x", "bad port"),
    ("127.0.0.1:8080=h:0", "target port 0"),
    ("[::1:8080", "unclosed"),
    ("127.0.0.1:8080@", "advertised port"),
    ("127.0.0.1:8080@0", "advertised port"),
    ("127.0.0.1:8080@70000", "advertised port"),
    ("127.0.0.1:8080@http", "advertised port"),
])
def test_bad_specs_are_refused_with_the_offending_text(text: str, needle: str) -> None:
    with pytest.raises(ListenerSpecError, match=needle):
        p(text)


def test_defaults_are_the_original_listeners_and_target() -> None:
    specs = parse_listeners((), target_server=DEFAULT_TARGET_SERVER, default_version="v1")
    assert [str(s) for s in specs] == [
        f"[::]:80={DEFAULT_TARGET_SERVER}:80/v1",
        f"[::]:443={DEFAULT_TARGET_SERVER}:443/v1",
    ]
    v6 = parse_listeners((), target_server="::1", default_version="v2")
    assert [s.upstream for s in v6] == ["[::1]:80", "[::1]:443"]


def test_target_server_must_not_carry_a_port() -> None:
    with pytest.raises(ListenerSpecError, match="without a port"):
        parse_listeners((), target_server="ingress:80", default_version="v1")


def test_one_address_twice_is_refused() -> None:
    with pytest.raises(ListenerSpecError, match="given twice"):
        parse_listeners(("127.0.0.1:1=a:1", "127.0.0.1:1=b:2"), target_server=TS,
                        default_version="v1")
    assert len(parse_listeners(("127.0.0.1:1", "127.0.0.2:1"), target_server=TS,
                               default_version="v1")) == 2


@pytest.mark.parametrize(("text", "want"), [
    ("0.0.0.0:8080=h:80@80", (8080, 80, "v1", 80, "0.0.0.0:8080=h:80/v1@80")),
    ("0.0.0.0:8443=h:443/v2@443", (8443, 443, "v2", 443, "0.0.0.0:8443=h:443/v2@443")),
    ("0.0.0.0:8443=h:443@443/v2", (8443, 443, "v2", 443, "0.0.0.0:8443=h:443/v2@443")),
    (":8080@80", (8080, 8080, "v1", 80, "[::]:8080=ingress.example.svc:8080/v1@80")),
    ("[::]:8080=[::1]:80", (8080, 80, "v1", 8080, "[::]:8080=[::1]:80/v1")),
])
def test_advertised_port_suffix(text: str, want: tuple[object, ...]) -> None:
    s = p(text)
    assert (s.listen_port, s.upstream_port, s.version, s.header_port, str(s)) == want
    assert s.name == f"{s.listen_host if s.listen_host != '::' else '[::]'}:{s.listen_port}"
