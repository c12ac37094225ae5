"""--target KEY=NAMESPACE/SERVICE[:v1|v2|none]."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hairpin_proxy.sources.registry import KEY_KIND_SPECS
from hairpin_proxy.targets.mapping import (
    MapEntry,
    TargetFlagError,
    parse_target_flag,
    parse_target_flags,
)

labels = st.from_regex(r"[a-z]([-a-z0-9]{0,10}[a-z0-9])?", fullmatch=True)


def test_ingressclass_entry() -> None:
    got = parse_target_flag("nginx=ingress-nginx/ingress-nginx-controller:v1", KEY_KIND_SPECS)
    assert got == MapEntry(
        "ingressclass/nginx", "ingress-nginx/ingress-nginx-controller", "v1")


def test_gateway_entry_without_mode() -> None:
    got = parse_target_flag("gateway:web/public=envoy-gateway-system/envoy-x", KEY_KIND_SPECS)
    assert got == MapEntry(
        "gateway/web/public", "envoy-gateway-system/envoy-x", None)


@pytest.mark.parametrize("mode", ["v1", "v2", "none"])
def test_modes(mode: str) -> None:
    assert parse_target_flag(f"a=b/c:{mode}", KEY_KIND_SPECS).proxy == mode


@pytest.mark.parametrize(("value", "words"), [
    ("nginx", "no '='"),
    ("=ns/svc", "IngressClass name before '=' is empty"),
    ("Nginx=ns/svc", "'Nginx' is not a valid IngressClass name"),
    ("gateway:web=ns/svc", "must be written NAMESPACE/NAME"),
    ("gateway:We/x=ns/svc", "'We' is not a valid namespace name"),
    ("gateway:web/-x=ns/svc", "'-x' is not a valid Gateway name"),
    ("nginx=svc", "Service 'svc' must be written NAMESPACE/NAME"),
    ("nginx=ns/svc:v3", "PROXY mode 'v3' is not one of v1, v2, none"),
    ("nginx=ns/svc:", "PROXY mode '' is not one of"),
    ("nginx=n_s/svc", "'n_s' is not a valid namespace name"),
    ("nginx=ns/s.vc", "'s.vc' is not a valid Service name"),
    ("nginx=ns/svc/x", "'svc/x' is not a valid Service name"),
])
def test_errors_are_one_line_and_say_why(value: str, words: str) -> None:
    with pytest.raises(TargetFlagError) as info:
        parse_target_flag(value, KEY_KIND_SPECS)
    message = str(info.value)
    assert words in message
    assert "\n" not in message and "--target" in message
    assert isinstance(info.value, ValueError)


def test_duplicate_key_refused() -> None:
    with pytest.raises(TargetFlagError, match="already mapped"):
        parse_target_flags(["nginx=a/b", "nginx=a/b"], KEY_KIND_SPECS)
    got = parse_target_flags(["nginx=a/b", "gateway:a/nginx=a/c:none"], KEY_KIND_SPECS)
    assert sorted(got) == ["gateway/a/nginx", "ingressclass/nginx"]


@given(labels, labels, labels, st.sampled_from(["", ":v1", ":v2", ":none"]))
def test_any_valid_value_parses(cls: str, ns: str, svc: str, mode: str) -> None:
    entry = parse_target_flag(f"{cls}={ns}/{svc}{mode}", KEY_KIND_SPECS)
    assert entry.key == f"ingressclass/{cls}" and entry.service == f"{ns}/{svc}"
    assert entry.proxy == (mode[1:] or None)


@given(st.text(max_size=40))
def test_never_crashes_otherwise(value: str) -> None:
    # Anything at all either parses or is refused with our own message, never another error.
    try:
        entry = parse_target_flag(value, KEY_KIND_SPECS)
    except TargetFlagError as err:
        assert str(err).startswith(f"--target {value!r}: ")
        assert "\n" not in str(err).replace(repr(value), "")
    else:
        assert entry.key.startswith(("ingressclass/", "gateway/"))
