"""What a target is: the data plane behind a set of host names. Pure.

A target key names where a host's traffic really goes:

- ``default``: the proxy's ``--target-server`` (slot 0, today's single target);
- ``ingressclass/NAME``: the data plane of an IngressClass;
- ``gateway/NAMESPACE/NAME``: the data plane of a Gateway;
- ``KIND/NAME`` or ``KIND/NAMESPACE/NAME`` for a kind a source declares (a ``KeyKindSpec`` in
  its registration, e.g. ``traefik/NAME`` for Traefik IngressRoutes).

``parse_key`` checks the grammar every key follows, all a reader of the targets table (the
proxy) needs; which kinds exist besides the built-in ones is the source registry's to say.

IngressClass and Gateway names are DNS-1123 *subdomains* in Kubernetes (dots allowed), so
they are checked as such; namespaces are DNS-1123 labels. Neither may contain ``/``, which is
what keeps a key unambiguous.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal, NamedTuple, get_args

ProxyMode = Literal["v1", "v2", "none", "unknown"]
PROXY_MODES: Final[tuple[ProxyMode, ...]] = get_args(ProxyMode)
# The modes under which a target's hosts are redirected: the other two leave them alone.
REDIRECTED_MODES: Final = frozenset({"v1", "v2"})

DEFAULT_KEY: Final = "default"
# Open: a source may declare its own kind (KeyKindSpec).
KeyKind = str

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_SUBDOMAIN_MAX = 253


def is_dns_label(name: str) -> bool:
    """A DNS-1123 label: what Kubernetes requires of namespace and Service names."""
    return _LABEL.fullmatch(name) is not None


def is_dns_subdomain(name: str) -> bool:
    """A DNS-1123 subdomain: what Kubernetes requires of IngressClass and Gateway names."""
    return (0 < len(name) <= _SUBDOMAIN_MAX
            and all(is_dns_label(part) for part in name.split(".")))


class KeyParts(NamedTuple):
    kind: KeyKind
    namespace: str  # "" unless the kind is namespaced ("gateway", or a registered one)
    name: str       # "" for the default target


@dataclass(frozen=True)
class KeyKindSpec:
    """A kind of target key a source adds: ``KIND/NAME`` (or ``KIND/NAMESPACE/NAME`` when
    ``namespaced``), written ``KIND:NAME`` in ``--target``. ``what`` names the object NAME
    is (for messages); ``default_when_shared``: when its data plane is the proxy's
    ``--target-server`` Service, its hosts go through the main proxy Service even when
    hairpin-proxy cannot read the data plane's PROXY setting (the main listeners already send
    the header that Service was installed with)."""

    kind: str
    what: str
    namespaced: bool = False
    default_when_shared: bool = False


BUILT_IN_KINDS: Final = frozenset({"default", "ingressclass", "gateway"})


def check_kind_spec(spec: KeyKindSpec) -> KeyKindSpec:
    """ValueError for a declared kind that is built in or not a DNS label."""
    if spec.kind in BUILT_IN_KINDS or not is_dns_label(spec.kind):
        raise ValueError(f"{spec.kind!r} cannot be a registered target key kind")
    return spec


def registered_key(spec: KeyKindSpec, name: str, namespace: str = "") -> str:
    """The key of a declared kind; ValueError when the parts are not valid for it."""
    kind = spec.kind
    if spec.namespaced and not is_dns_label(namespace):
        raise ValueError(f"{namespace!r} is not a valid namespace name")
    if not spec.namespaced and namespace:
        raise ValueError(f"a {kind} key has no namespace")
    if not is_dns_subdomain(name):
        raise ValueError(f"{name!r} is not a valid {spec.what} name")
    return f"{kind}/{namespace}/{name}" if spec.namespaced else f"{kind}/{name}"


def ingressclass_key(name: str) -> str:
    if not is_dns_subdomain(name):
        raise ValueError(f"{name!r} is not a valid IngressClass name")
    return f"ingressclass/{name}"


def gateway_key(namespace: str, name: str) -> str:
    if not is_dns_label(namespace):
        raise ValueError(f"{namespace!r} is not a valid namespace name")
    if not is_dns_subdomain(name):
        raise ValueError(f"{name!r} is not a valid Gateway name")
    return f"gateway/{namespace}/{name}"


def parse_key(key: str) -> KeyParts:
    """The parts of a target key; ValueError when it does not follow the grammar (a declared
    kind is any DNS label, with or without a namespace)."""
    if key == DEFAULT_KEY:
        return KeyParts("default", "", "")
    kind, _, rest = key.partition("/")
    if kind == "ingressclass" and is_dns_subdomain(rest):
        return KeyParts("ingressclass", "", rest)
    if kind == "gateway":
        namespace, _, name = rest.partition("/")
        if is_dns_label(namespace) and is_dns_subdomain(name):
            return KeyParts("gateway", namespace, name)
    elif kind not in BUILT_IN_KINDS and is_dns_label(kind):
        namespace, _, name = rest.rpartition("/")
        if (not namespace or is_dns_label(namespace)) and is_dns_subdomain(name):
            return KeyParts(kind, namespace, name)
    raise _not_a_key(key)


def _not_a_key(key: str) -> ValueError:
    return ValueError(f"{key!r} is not a target key (default, ingressclass/NAME, "
                      "gateway/NAMESPACE/NAME or a registered KIND/NAME)")


def parse_declared_key(key: str, specs: Mapping[str, KeyKindSpec]) -> KeyParts:
    """``parse_key``, and a kind other than the built-in ones is one of ``specs``, with a
    namespace exactly when it is namespaced: what the controller's own keys must be."""
    parts = parse_key(key)
    if parts.kind in BUILT_IN_KINDS:
        return parts
    spec = specs.get(parts.kind)
    if spec is None or spec.namespaced != bool(parts.namespace):
        raise _not_a_key(key)
    return parts


def is_target_key(key: str) -> bool:
    try:
        parse_key(key)
    except ValueError:
        return False
    return True


def split_service(service: str) -> tuple[str, str]:
    """``NAMESPACE/NAME`` → (namespace, name); ValueError when either part is not a label."""
    namespace, sep, name = service.partition("/")
    if not sep or not is_dns_label(namespace) or not is_dns_label(name):
        raise ValueError(f"{service!r} is not NAMESPACE/NAME of a Service")
    return namespace, name


def upstream_name(service: str, cluster_domain: str) -> str:
    """The in-cluster DNS name of a Service. Written relative (no final dot): making it
    absolute for the resolver is the relay's business."""
    namespace, name = split_service(service)
    domain = cluster_domain.strip(".")
    if not domain:
        raise ValueError("the cluster domain is empty")
    return f"{name}.{namespace}.svc.{domain}"


def is_port_or_zero(value: object) -> bool:
    # bool is an int subclass; True must not pass for port 1.
    return type(value) is int and 0 <= value <= 65535


def is_canonical_ip(text: str) -> bool:
    """An IP address written the way Python writes it back, so that stored tables compare
    equal byte for byte whatever produced them."""
    try:
        return str(ipaddress.ip_address(text)) == text
    except ValueError:
        return False


@dataclass(frozen=True)
class Target:
    """One data plane and how to talk to it. ``http_port``/``https_port`` are the data-plane
    Service's ports (0: it has none for that protocol)."""

    key: str
    service: str
    upstream: str
    http_port: int
    https_port: int
    proxy: ProxyMode
    proxy_source: str
    found_by: str
    advertise_address: str = ""

    def __post_init__(self) -> None:
        # Checked here so that a wrong Target fails where it is built, not in the relay.
        parse_key(self.key)
        split_service(self.service)
        if not self.upstream:
            raise ValueError(f"target {self.key}: empty upstream name")
        for field_name in ("http_port", "https_port"):
            if not is_port_or_zero(getattr(self, field_name)):
                raise ValueError(f"target {self.key}: {field_name} must be 0..65535")
        if self.proxy not in PROXY_MODES:
            raise ValueError(f"target {self.key}: proxy must be one of {', '.join(PROXY_MODES)}")
        if self.advertise_address and not is_canonical_ip(self.advertise_address):
            raise ValueError(f"target {self.key}: advertise address "
                             f"{self.advertise_address!r} is not an IP address")

    @property
    def redirected(self) -> bool:
        """Whether hosts of this target get rewritten to the proxy: only when we know which
        PROXY header the data plane expects (``none`` needs no hairpin fix, ``unknown`` might
        be made worse by one)."""
        return self.proxy in REDIRECTED_MODES


def class_target(name: str, defaults: frozenset[str]) -> str:
    """The target key an Ingress's hosts claim when it names the class ``name`` ("" for
    none): that class, else the cluster's one default IngressClass, else ``default``."""
    if not name and len(defaults) == 1:
        (name,) = defaults
    if not name:
        return DEFAULT_KEY
    try:
        return ingressclass_key(name)
    except ValueError:
        # Not a name an IngressClass can have: no data plane to find, so the default.
        return DEFAULT_KEY
    try:
        return ingressclass_key(name)
    except ValueError:
        # Not a name an IngressClass can have: no data plane to find, so the default.
        return DEFAULT_KEY
