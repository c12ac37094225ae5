"""Every source of hosts, as one table: what each watches, how it slims what it watches, its
claims, the facts it adds for finding data planes, its target key kinds and the RBAC it needs.

The controller builds its sources from this table (controller/sources/registry.py), the RBAC
manifests are checked against it (tests/deploy/test_source_rbac.py) and the fake API serves
the custom resources it names. Adding a source is one module plus one entry here: a source of
custom resources needs no controller code (the generic shell reads its declaration).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from hairpin_proxy.apis import GATEWAY_GROUP, INGRESS_GROUP
from hairpin_proxy.claims import Claim
from hairpin_proxy.jsonobj import JsonObj, Obj
from hairpin_proxy.policy import HostPolicy, Rejection
from hairpin_proxy.sources import traefik
from hairpin_proxy.sources.gateway.model import ROUTE_RESOURCES
from hairpin_proxy.sources.gateway.watched import WANTED
from hairpin_proxy.sources.ingress.slim import slim_ingress
from hairpin_proxy.targets.resolve import DeclaredKind

Slim = Callable[[JsonObj], JsonObj]


@dataclass(frozen=True)
class Resource:
    """One resource a source reads. ``group`` "" is the core group; ``versions`` in order of
    preference; ``names`` limits it to objects of those names (RBAC ``resourceNames``, read
    with a ``metadata.name`` field selector); ``fact``: read for data-plane discovery only
    (its list may be refused without holding back the rules)."""

    group: str
    versions: tuple[str, ...]
    plural: str
    kind: str
    namespaced: bool = True
    crd: bool = False
    slim: Slim | None = None
    names: tuple[str, ...] = ()
    fact: bool = False
    verbs: tuple[str, ...] = ("list", "watch")


@dataclass(frozen=True)
class Claims:
    claims: tuple[Claim, ...] = ()
    rejections: tuple[Rejection, ...] = ()


# What a source's claims are computed from: API group → its objects of the source's one
# claiming kind (already slimmed); the policy.
ClaimsOf = Callable[[Mapping[str, Sequence[Obj]], HostPolicy], Claims]


@dataclass(frozen=True)
class Registration:
    name: str
    resources: tuple[Resource, ...]
    # The kinds of target key its claims name (targets.model; built-in or declared below).
    key_kinds: tuple[str, ...]
    # Pure claims of its claiming resources (None: the wrapped module computes them itself).
    claims_of: ClaimsOf | None = None
    # The resources (plurals) its claims come from; the others are facts.
    claiming: tuple[str, ...] = ()
    # The settings field that turns it on ("auto"); "" always on.
    setting: str = ""
    # Where its RBAC is granted: "deploy/base" or the opt-in component's directory.
    rbac_in: str = "deploy/base"
    # The key kinds it adds to the built-in ones: their form and how each resolves.
    declared_kinds: tuple[DeclaredKind, ...] = ()

    def rbac_rules(self) -> set[tuple[str, str, str, str]]:
        """(group, resource, verb, resourceName or "") for every permission it needs."""
        return {(r.group, r.plural, verb, name)
                for r in self.resources for verb in r.verbs for name in (r.names or ("",))}


def _traefik_claims(objects: Mapping[str, Sequence[Obj]], policy: HostPolicy) -> Claims:
    found = traefik.claims_of(traefik.preferred(objects), policy)
    return Claims(found.claims, found.rejections)



INGRESS: Final = Registration(
    "ingress",
    (Resource(INGRESS_GROUP, ("v1",), "ingresses", "Ingress", slim=slim_ingress),
     Resource(INGRESS_GROUP, ("v1",), "ingressclasses", "IngressClass", namespaced=False),
     # ingress-nginx's settings (use-proxy-protocol), in whatever namespace it runs.
     Resource("", ("v1",), "configmaps", "ConfigMap", names=("ingress-nginx-controller",),
              fact=True)),
    key_kinds=("default", "ingressclass"), claiming=("ingresses",))

# Kind and the versions served over the releases (the server's preferred one is watched).
_GATEWAY_KINDS: Final = {
    "gatewayclasses": ("GatewayClass", ("v1", "v1beta1")),
    "gateways": ("Gateway", ("v1", "v1beta1")),
    "httproutes": (ROUTE_RESOURCES["httproutes"], ("v1", "v1beta1")),
    "grpcroutes": (ROUTE_RESOURCES["grpcroutes"], ("v1",)),
    "tlsroutes": (ROUTE_RESOURCES["tlsroutes"], ("v1", "v1alpha3", "v1alpha2")),
    "listenersets": ("ListenerSet", ("v1",)),
    "clienttrafficpolicies": ("ClientTrafficPolicy", ("v1alpha1",)),
    "nginxproxies": ("NginxProxy", ("v1alpha2", "v1alpha1"))}
GATEWAY: Final = Registration(
    "gateway",
    (*(Resource(w.group, _GATEWAY_KINDS[w.plural][1], w.plural, _GATEWAY_KINDS[w.plural][0],
                namespaced=w.plural != "gatewayclasses", crd=True, slim=w.transform,
                fact=w.group != GATEWAY_GROUP)
       for w in WANTED),
     # allowedRoutes namespace selectors read the Namespaces' labels.
     Resource("", ("v1",), "namespaces", "Namespace", namespaced=False, fact=True)),
    key_kinds=("gateway",), claiming=tuple(ROUTE_RESOURCES),
    setting="gateway_api")

TRAEFIK_INGRESSROUTE: Final = Registration(
    "traefik-ingressroute",
    (Resource(traefik.GROUP, traefik.VERSIONS, traefik.PLURAL, traefik.KIND, crd=True,
              slim=traefik.slim_ingressroute),
     Resource(traefik.LEGACY_GROUP, traefik.VERSIONS, traefik.PLURAL, traefik.KIND, crd=True,
              slim=traefik.slim_ingressroute),
     # Traefik's static configuration (its PROXY protocol settings) is in its Deployment's
     # arguments: only the Deployments named like the Helm chart's (and k3s's) Service.
     Resource("apps", ("v1",), "deployments", "Deployment", names=("traefik",),
              slim=traefik.slim_deployment, fact=True)),
    key_kinds=(traefik.KEY_KIND.kind,), claims_of=_traefik_claims, claiming=(traefik.PLURAL,),
    setting="traefik_ingressroute", rbac_in="deploy/components/traefik-ingressroute",
    declared_kinds=(traefik.DECLARED_KIND,))

REGISTRATIONS: Final = (INGRESS, GATEWAY, TRAEFIK_INGRESSROUTE)
# Every declared key kind by name, and its form alone (what --target values are read with).
DECLARED_KINDS: Final = {d.spec.kind: d for r in REGISTRATIONS for d in r.declared_kinds}
KEY_KIND_SPECS: Final = {kind: d.spec for kind, d in DECLARED_KINDS.items()}

# What the controller reads and writes cluster-wide for itself, not for a source: the
# Services (data planes, load balancers, our per-target Services), Events, our own namespace.
CORE_RULES: Final = frozenset({
    ("", "services", "get", ""), ("", "services", "list", ""), ("", "services", "watch", ""),
    ("", "events", "create", ""),
    ("", "namespaces", "list", ""), ("", "namespaces", "watch", "")})


def turned_on(settings: object) -> frozenset[str]:
    """The registrations a command's settings turn on: those whose setting is "auto", and
    those without a setting."""
    return frozenset(r.name for r in REGISTRATIONS
                     if not r.setting or getattr(settings, r.setting, "off") == "auto")


def settings_objects(reg: Registration) -> tuple[Resource, ...]:
    """The implementations' settings objects a source reads to tell whether a data plane
    expects the PROXY protocol (Envoy Gateway's ClientTrafficPolicies, NGINX Gateway
    Fabric's NginxProxies): its custom resources read as facts only."""
    return tuple(r for r in reg.resources if r.crd and r.fact)


def by_name(name: str) -> Registration:
    return next(r for r in REGISTRATIONS if r.name == name)
