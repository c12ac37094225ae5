"""Target key kinds are open: a source declares its own in its registration (a KeyKindSpec and
how it resolves), and keys, --target values and the targets table accept it as they accept
the built-in ones. Nothing is registered by importing a module: the kinds are data."""

from __future__ import annotations

import pytest

from hairpin_proxy.sources.registry import DECLARED_KINDS, KEY_KIND_SPECS
from hairpin_proxy.targets.mapping import TargetFlagError, parse_target_flag
from hairpin_proxy.targets.model import (
    KeyKindSpec,
    KeyParts,
    check_kind_spec,
    is_target_key,
    parse_declared_key,
    parse_key,
    registered_key,
)

EXAMPLE = check_kind_spec(KeyKindSpec("example-kind", "Example", namespaced=True))
KINDS = {**KEY_KIND_SPECS, EXAMPLE.kind: EXAMPLE}


def test_a_declared_kind_parses_like_a_built_in_one() -> None:
    assert parse_key("example-kind/ns/a.b") == KeyParts("example-kind", "ns", "a.b")
    assert registered_key(EXAMPLE, "a.b", "ns") == "example-kind/ns/a.b"
    assert parse_key("traefik/default") == KeyParts("traefik", "", "default")
    assert parse_declared_key("traefik/default", KINDS) == KeyParts("traefik", "", "default")


@pytest.mark.parametrize("key", [
    "example-kind/NS/a", "example-kind/ns/", "traefik/", "traefik/UPPER", "traefik",
    "Not_A_Label/a", "ingressclass/ns/a", "gateway/a",
])
def test_keys_outside_the_grammar_are_refused(key: str) -> None:
    assert not is_target_key(key)


@pytest.mark.parametrize("key", [
    "example-kind/a.b", "traefik/ns/name", "unknown-kind/a",
])
def test_keys_of_undeclared_kinds_or_the_wrong_form_are_refused_where_kinds_are_known(
        key: str) -> None:
    # The grammar alone (what the proxy reads the table with) lets them through.
    assert is_target_key(key)
    with pytest.raises(ValueError, match="is not a target key"):
        parse_declared_key(key, KINDS)


@pytest.mark.parametrize("spec", [
    KeyKindSpec("gateway", "clash"), KeyKindSpec("default", "clash"),
    KeyKindSpec("Not_A_Label", "bad")])
def test_declaring_a_kind_that_clashes_is_refused(spec: KeyKindSpec) -> None:
    with pytest.raises(ValueError):
        check_kind_spec(spec)


def test_the_registry_declares_each_kind_once_by_its_name() -> None:
    assert set(DECLARED_KINDS) == {"traefik"}
    assert all(kind == d.spec.kind for kind, d in DECLARED_KINDS.items())


@pytest.mark.parametrize("value,key,service,proxy", [
    ("traefik:default=kube-system/traefik:v2", "traefik/default", "kube-system/traefik", "v2"),
    ("traefik:edge=edge/traefik", "traefik/edge", "edge/traefik", None),
    ("example-kind:ns/a=ns/svc:none", "example-kind/ns/a", "ns/svc", "none"),
])
def test_target_flags_of_declared_kinds(value: str, key: str, service: str,
                                        proxy: str | None) -> None:
    entry = parse_target_flag(value, KINDS)
    assert (entry.key, entry.service, entry.proxy) == (key, service, proxy)


@pytest.mark.parametrize("value,words", [
    ("traefik:Bad_Name=ns/svc", "not a valid"),
    ("traefik:ns/name=ns/svc", "is not a valid Traefik IngressClass name"),
    ("example-kind:a=ns/svc", "namespace"),
])
def test_bad_target_flags_of_declared_kinds(value: str, words: str) -> None:
    with pytest.raises(TargetFlagError, match=words):
        parse_target_flag(value, KINDS)


def test_a_kind_the_flags_are_not_told_of_is_read_as_an_ingressclass_name() -> None:
    with pytest.raises(TargetFlagError, match="not a valid IngressClass name"):
        parse_target_flag("example-kind:a=ns/svc", KEY_KIND_SPECS)
