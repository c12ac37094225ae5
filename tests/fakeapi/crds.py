"""Custom resource definitions the fake can install, with the versions the real ones serve.

Only what the API server acts on is kept: group, names, scope, which versions are served, the
storage version, the status subresource and deprecation warnings. Schemas are not (the fake
does not validate custom resources against one).

Gateway API (gateway.networking.k8s.io), as published in the release manifests
(config/crd/{standard,experimental}/ of kubernetes-sigs/gateway-api):

| release | GatewayClass, Gateway, HTTPRoute | GRPCRoute | ReferenceGrant | TLSRoute |
|---|---|---|---|---|
| 1.2, 1.3 | v1 (storage), v1beta1 | v1 | v1beta1 | experimental only: v1alpha2 |
| 1.4 | same | v1 | v1beta1 | experimental only: v1alpha2, v1alpha3 (storage) |
| 1.5, 1.6 | same | v1 | v1beta1 (storage), v1 | v1 (storage), and in experimental (1) |

(1) v1alpha2 and v1alpha3 are listed in both channels but served, with a deprecation
warning, only in experimental.

Every Gateway API kind has the status subresource except ReferenceGrant. ListenerSet
(`listenersets`, v1 only) is in the standard channel from 1.5 on: its definition is the
upstream one, vendored with its version and provenance in tests/deploy/crds/ and read by
`from_definition` (before 1.5 the experimental channel had `XListenerSet` in another group,
not modelled). The experimental channel has more kinds (TCPRoute, UDPRoute, BackendTLSPolicy,
...) that are not modelled here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.fakeapi.resources import CrdSpec, CrdVersion

VENDORED = Path(__file__).resolve().parents[1] / "deploy" / "crds"


def from_definition(crd: dict[str, Any]) -> CrdSpec:
    """What the fake serves of a CustomResourceDefinition object (apiextensions.k8s.io/v1)."""
    spec, names = crd["spec"], crd["spec"]["names"]
    versions = tuple(CrdVersion(v["name"], served=bool(v.get("served")),
                                storage=bool(v.get("storage")),
                                status="status" in (v.get("subresources") or {}),
                                deprecation_warning=str(v.get("deprecationWarning") or ""))
                     for v in spec["versions"])
    return CrdSpec(spec["group"], names["plural"], names["kind"], versions,
                   namespaced=spec["scope"] == "Namespaced",
                   singular=names.get("singular", ""),
                   short_names=tuple(names.get("shortNames") or ()),
                   categories=tuple(names.get("categories") or ()))


def vendored(name: str) -> dict[str, Any]:
    """A vendored definition document of tests/deploy/crds (``<group>_<plural>``)."""
    doc: dict[str, Any] = json.loads((VENDORED / f"{name}.json").read_text())
    return doc


# The upstream standard-channel definition (the version is in the vendored file).
LISTENER_SET = from_definition(vendored("gateway.networking.k8s.io_listenersets")["definition"])

GATEWAY_GROUP = "gateway.networking.k8s.io"
RELEASES = ("1.2", "1.3", "1.4", "1.5", "1.6")
_CATEGORY = ("gateway-api",)


def _v1_and_beta() -> tuple[CrdVersion, ...]:
    return (CrdVersion("v1", storage=True), CrdVersion("v1beta1"))


def _tls_route(release: str, channel: str) -> CrdSpec | None:
    minor = int(release.split(".")[1])
    versions: tuple[CrdVersion, ...]
    if minor >= 5:
        warning = ("The {} version of TLSRoute has been deprecated and will be removed in a "
                   "future release of the API. Please upgrade to v1.")
        old_served = channel == "experimental"
        versions = (CrdVersion("v1", storage=True),
                    CrdVersion("v1alpha2", served=old_served,
                               deprecation_warning=warning.format("v1alpha2")),
                    CrdVersion("v1alpha3", served=old_served,
                               deprecation_warning=warning.format("v1alpha3")))
    elif channel != "experimental":
        return None
    elif minor == 4:
        versions = (CrdVersion("v1alpha2"), CrdVersion("v1alpha3", storage=True))
    else:
        versions = (CrdVersion("v1alpha2", storage=True),)
    return CrdSpec(GATEWAY_GROUP, "tlsroutes", "TLSRoute", versions, categories=_CATEGORY)


def gateway_api(release: str = "1.4", channel: str = "standard") -> list[CrdSpec]:
    """The Gateway API definitions of `release` ("1.2" to "1.6"; later releases serve as
    1.6 does) in `channel` ("standard" or "experimental")."""
    if release not in RELEASES:
        raise ValueError(f"unknown Gateway API release {release!r}; known: {RELEASES}")
    if channel not in ("standard", "experimental"):
        raise ValueError(f"unknown channel {channel!r}")
    minor = int(release.split(".")[1])
    grant_versions: tuple[CrdVersion, ...] = (CrdVersion("v1beta1", storage=True,
                                                         status=False),)
    if minor >= 5:
        grant_versions += (CrdVersion("v1", status=False),)
    out = [
        CrdSpec(GATEWAY_GROUP, "gatewayclasses", "GatewayClass", _v1_and_beta(),
                namespaced=False, short_names=("gc",), categories=_CATEGORY),
        CrdSpec(GATEWAY_GROUP, "gateways", "Gateway", _v1_and_beta(), short_names=("gtw",),
                categories=_CATEGORY),
        CrdSpec(GATEWAY_GROUP, "httproutes", "HTTPRoute", _v1_and_beta(),
                categories=_CATEGORY),
        CrdSpec(GATEWAY_GROUP, "grpcroutes", "GRPCRoute", (CrdVersion("v1", storage=True),),
                categories=_CATEGORY),
        CrdSpec(GATEWAY_GROUP, "referencegrants", "ReferenceGrant", grant_versions,
                short_names=("refgrant",), categories=_CATEGORY),
    ]
    tls = _tls_route(release, channel)
    if tls is not None:
        out.append(tls)
    if minor >= 5:
        out.append(LISTENER_SET)
    return out


# Envoy Gateway: the policy that turns on PROXY protocol on a Gateway's listeners.
ENVOY_CLIENT_TRAFFIC_POLICY = CrdSpec(
    "gateway.envoyproxy.io", "clienttrafficpolicies", "ClientTrafficPolicy",
    (CrdVersion("v1alpha1", storage=True),), short_names=("ctp",),
    categories=("envoy-gateway",))

# NGINX Gateway Fabric 2.x: namespaced, v1alpha2 only, and without a status subresource
# (its definition has `subresources: {}`). 1.x served a cluster-scoped v1alpha1.
NGINX_PROXY = CrdSpec(
    "gateway.nginx.org", "nginxproxies", "NginxProxy",
    (CrdVersion("v1alpha2", storage=True, status=False),),
    categories=("nginx-gateway-fabric",))



def from_manifest(name: str) -> CrdSpec:
    """The CrdSpec of a stored CustomResourceDefinition (a file of tests/deploy/crds that
    holds the definition itself)."""
    return from_definition(json.loads((VENDORED / name).read_text()))


# Traefik's IngressRoute, in the group Traefik reads since v2.10 and in the one before.
TRAEFIK_INGRESSROUTE = from_manifest("traefik.io_ingressroutes.json")
TRAEFIK_INGRESSROUTE_LEGACY = from_manifest("traefik.containo.us_ingressroutes.json")

__all__ = ["ENVOY_CLIENT_TRAFFIC_POLICY", "GATEWAY_GROUP", "LISTENER_SET", "NGINX_PROXY",
           "RELEASES", "TRAEFIK_INGRESSROUTE", "TRAEFIK_INGRESSROUTE_LEGACY", "VENDORED",
           "from_definition", "from_manifest", "gateway_api", "vendored"]
