"""Target key kinds are open: a source registers its own (targets.model.register_key_kind),
and keys, --target values and the targets table accept it as they accept the built-in ones."""

from __future__ import annotations

import pytest

from hairpin_proxy.targets.mapping import TargetFlagError, parse_target_flag
from hairpin_proxy.targets.model import (
    KeyKindSpec,
    KeyParts,
    is_target_key,
    key_kind,
    parse_key,
    register_key_kind,
    registered_key,
)

EXAMPLE = register_key_kind(KeyKindSpec("example-kind", "Example", namespaced=True))


def test_a_registered_kind_parses_like_a_built_in_one() -> None:
    assert parse_key("example-kind/ns/a.b") == KeyParts("example-kind", "ns", "a.b")
    assert registered_key("example-kind", "a.b", "ns") == "example-kind/ns/a.b"
    assert parse_key("traefik/default") == KeyParts("traefik", "", "default")


@pytest.mark.parametrize("key", [
    "example-kind/a.b", "example-kind/NS/a", "example-kind/ns/", "traefik/ns/name",
    "traefik/", "traefik/UPPER", "unknown-kind/a", "traefik",
])
def test_malformed_keys_of_registered_kinds_are_refused(key: str) -> None:
    assert not is_target_key(key)


@pytest.mark.parametrize("spec", [
    KeyKindSpec("gateway", "clash"), KeyKindSpec("default", "clash"),
    KeyKindSpec("Not_A_Label", "bad"), KeyKindSpec("example-kind", "Other")])
def test_registering_a_kind_that_clashes_is_refused(spec: KeyKindSpec) -> None:
    with pytest.raises(ValueError):
        register_key_kind(spec)


def test_registering_the_same_spec_again_is_harmless() -> None:
    assert register_key_kind(EXAMPLE) == EXAMPLE
    assert key_kind("example-kind") == EXAMPLE
    assert key_kind("gateway") is None


@pytest.mark.parametrize("value,key,service,proxy", [
    ("traefik:default=kube-system/traefik:v2", "traefik/default", "kube-system/traefik", "v2"),
    ("traefik:edge=edge/traefik", "traefik/edge", "edge/traefik", None),
    ("example-kind:ns/a=ns/svc:none", "example-kind/ns/a", "ns/svc", "none"),
])
def test_target_flags_of_registered_kinds(value: str, key: str, service: str,
                                          proxy: str | None) -> None:
    entry = parse_target_flag(value)
    assert (entry.key, entry.service, entry.proxy) == (key, service, proxy)


@pytest.mark.parametrize("value,words", [
    ("traefik:Bad_Name=ns/svc", "not a valid"),
    ("traefik:ns/name=ns/svc", "is not a valid Traefik IngressClass name"),
    ("example-kind:a=ns/svc", "namespace"),
])
def test_bad_target_flags_of_registered_kinds(value: str, words: str) -> None:
    with pytest.raises(TargetFlagError, match=words):
        parse_target_flag(value)
