"""Target keys and the Target dataclass."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hairpin_proxy.targets.model import (
    DEFAULT_KEY,
    KeyParts,
    Target,
    gateway_key,
    ingressclass_key,
    is_dns_label,
    is_dns_subdomain,
    is_target_key,
    parse_declared_key,
    parse_key,
    upstream_name,
)

labels = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)


def make(**kw: object) -> Target:
    base: dict[str, object] = dict(
        key="gateway/web/public", service="envoy-gateway-system/envoy-web-public",
        upstream="envoy-web-public.envoy-gateway-system.svc.cluster.local", http_port=80,
        https_port=443, proxy="v2", proxy_source="--target map", found_by="--target map",
        advertise_address="203.0.113.10")
    base.update(kw)
    return Target(**base)  # type: ignore[arg-type]


def test_keys() -> None:
    assert ingressclass_key("nginx") == "ingressclass/nginx"
    assert gateway_key("web", "public") == "gateway/web/public"
    assert parse_key("default") == KeyParts("default", "", "")
    assert parse_key("ingressclass/nginx.internal") == KeyParts("ingressclass", "",
                                                                "nginx.internal")
    assert parse_key("gateway/web/public") == KeyParts("gateway", "web", "public")


@pytest.mark.parametrize("bad", ["", "Default", "ingressclass/", "ingressclass/Nginx",
                                 "ingressclass/a/b", "gateway/web", "gateway//x",
                                 "gateway/web/", "gateway/we.b/x", "gateway/a/b/c"])
def test_bad_keys(bad: str) -> None:
    assert not is_target_key(bad)
    with pytest.raises(ValueError, match="not a target key"):
        parse_key(bad)
    with pytest.raises(ValueError, match="not a target key"):
        parse_declared_key(bad, {})


def test_a_kind_nobody_declares_follows_the_grammar_but_is_no_key_of_ours() -> None:
    assert parse_key("service/a") == KeyParts("service", "", "a")
    with pytest.raises(ValueError, match="not a target key"):
        parse_declared_key("service/a", {})


@given(labels, labels)
def test_key_round_trip(ns: str, name: str) -> None:
    assert parse_key(gateway_key(ns, name)) == KeyParts("gateway", ns, name)
    assert parse_key(ingressclass_key(name)) == KeyParts("ingressclass", "", name)


def test_label_and_subdomain_limits() -> None:
    assert is_dns_label("a" * 63) and not is_dns_label("a" * 64)
    assert not is_dns_label("-a") and not is_dns_label("a-") and not is_dns_label("a.b")
    assert is_dns_subdomain("a.b") and not is_dns_subdomain("a..b")
    assert not is_dns_subdomain(".".join(["a" * 63] * 4) + "x")  # 256 > 253
    with pytest.raises(ValueError):
        ingressclass_key("UPPER")
    with pytest.raises(ValueError):
        gateway_key("a.b", "x")


def test_upstream_name() -> None:
    assert upstream_name("ns/svc", "cluster.local.") == "svc.ns.svc.cluster.local"
    with pytest.raises(ValueError):
        upstream_name("ns/svc", ".")
    with pytest.raises(ValueError):
        upstream_name("nsvc", "cluster.local")


def test_target_checks_itself() -> None:
    t = make()
    assert t.redirected
    assert not make(proxy="none").redirected and not make(proxy="unknown").redirected
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.proxy = "v1"  # type: ignore[misc]
    for bad in (dict(key="nope"), dict(service="x"), dict(http_port=70000),
                dict(https_port=True), dict(proxy="v3"), dict(advertise_address="1.2.3"),
                dict(advertise_address="2001:DB8::1"), dict(upstream="")):
        with pytest.raises(ValueError):
            make(**bad)
    assert make(advertise_address="", http_port=0).advertise_address == ""
    assert make(key="default").key == DEFAULT_KEY
