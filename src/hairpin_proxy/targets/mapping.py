"""The controller's explicit target map: repeatable ``--target KEY=NAMESPACE/SERVICE[:MODE]``.

KEY is an IngressClass name, ``gateway:NAMESPACE/NAME`` for a Gateway, or ``KIND:NAME``
(``KIND:NAMESPACE/NAME``) for a kind a source registers (``traefik:NAME``); MODE is ``v1``,
``v2`` or ``none`` and, when left out, is detected from the data plane's configuration. An
entry always wins over discovery. Every malformed value is refused with one line saying what
is wrong, so a typo stops the controller at start instead of silently mapping nothing. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from hairpin_proxy.targets.model import (
    KeyKindSpec,
    gateway_key,
    ingressclass_key,
    is_dns_label,
    is_dns_subdomain,
    registered_key,
)

MapMode = Literal["v1", "v2", "none"]
_MODES: Final[dict[str, MapMode]] = {"v1": "v1", "v2": "v2", "none": "none"}
FLAG: Final = "--target"
_FORM: Final = "KEY=NAMESPACE/SERVICE[:v1|v2|none]"


class TargetFlagError(ValueError):
    """A ``--target`` value that cannot be used; the message is one line for the user."""


@dataclass(frozen=True)
class MapEntry:
    key: str                # target key (ingressclass/NAME or gateway/NAMESPACE/NAME)
    service: str            # NAMESPACE/NAME of the data-plane Service
    proxy: MapMode | None   # None: not given, detect it


def _fail(value: str, why: str) -> TargetFlagError:
    return TargetFlagError(f"{FLAG} {value!r}: {why} (expected {_FORM})")


def _key(value: str, raw: str, kinds: Mapping[str, KeyKindSpec]) -> str:
    if raw.startswith("gateway:"):
        ref = raw[len("gateway:"):]
        namespace, sep, name = ref.partition("/")
        if not sep:
            raise _fail(value, f"Gateway {ref!r} must be written NAMESPACE/NAME")
        if not is_dns_label(namespace):
            raise _fail(value, f"{namespace!r} is not a valid namespace name")
        if not is_dns_subdomain(name):
            raise _fail(value, f"{name!r} is not a valid Gateway name")
        return gateway_key(namespace, name)
    kind, colon, ref = raw.partition(":")
    if colon and (spec := kinds.get(kind)) is not None:
        namespace, _, name = ref.rpartition("/") if spec.namespaced else ("", "", ref)
        try:
            return registered_key(spec, name, namespace)
        except ValueError as exc:
            raise _fail(value, str(exc)) from None
    if not raw:
        raise _fail(value, "the IngressClass name before '=' is empty")
    if not is_dns_subdomain(raw):
        raise _fail(value, f"{raw!r} is not a valid IngressClass name "
                    "(for a Gateway write gateway:NAMESPACE/NAME)")
    return ingressclass_key(raw)


def parse_target_flag(value: str, kinds: Mapping[str, KeyKindSpec]) -> MapEntry:
    """One ``--target`` value (``kinds``: the key kinds the sources declare, by name).
    TargetFlagError says what is wrong with it."""
    raw_key, sep, rest = value.partition("=")
    if not sep:
        # Before targets, --target named the proxy Service (an upgrade may still pass one).
        raise _fail(value, "no '=' (the proxy Service name of earlier versions is now "
                           "--legacy-target)")
    key = _key(value, raw_key.strip(), kinds)
    service, colon, mode_text = rest.strip().partition(":")
    proxy: MapMode | None = None
    if colon:
        if mode_text not in _MODES:
            raise _fail(value, f"PROXY mode {mode_text!r} is not one of v1, v2, none")
        proxy = _MODES[mode_text]
    namespace, slash, name = service.partition("/")
    if not slash:
        raise _fail(value, f"Service {service!r} must be written NAMESPACE/NAME")
    if not is_dns_label(namespace):
        raise _fail(value, f"{namespace!r} is not a valid namespace name")
    if not is_dns_label(name):
        raise _fail(value, f"{name!r} is not a valid Service name")
    return MapEntry(key=key, service=f"{namespace}/{name}", proxy=proxy)


def parse_target_flags(values: Iterable[str], kinds: Mapping[str, KeyKindSpec]
                       ) -> dict[str, MapEntry]:
    """All ``--target`` values, by target key. The same key given twice is refused even
    with the same value: which one was meant cannot be told."""
    out: dict[str, MapEntry] = {}
    for value in values:
        entry = parse_target_flag(value, kinds)
        if entry.key in out:
            raise TargetFlagError(f"{FLAG} {value!r}: {entry.key} is already mapped by an "
                                  "earlier --target")
        out[entry.key] = entry
    return out
