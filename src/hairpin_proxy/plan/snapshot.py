"""What the plan reads: the objects of each kind the sources read (slimmed or whole: only the
fields the sources read count), the settings that matter, the slot table, the verification
verdicts and what the DNS rules hold now."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from hairpin_proxy import corefile
from hairpin_proxy.jsonobj import Obj
from hairpin_proxy.policy import HostPolicy
from hairpin_proxy.targets.mapping import MapEntry
from hairpin_proxy.verify.verdict import Verdict


@dataclass(frozen=True)
class PlanSettings:
    """The controller settings the plan depends on (settings.py has their docs)."""

    policy: HostPolicy
    # The proxy's namespace and Service (its ClusterIPs answer the default target's hosts).
    namespace: str = "hairpin-proxy"
    proxy_service: str = "hairpin-proxy"
    target_map: Mapping[str, MapEntry] = field(default_factory=dict)
    cluster_domain: str = "cluster.local"
    target_server: str = ""
    max_targets: int = 32
    settle: float = 90.0
    dns_ttl: int = 10
    # --gateway-api auto (False: off) and --gateway-class.
    gateway_api: bool = True
    gateway_classes: tuple[str, ...] = ()
    # --verify-hosts on: only hosts with a verdict that redirects (or held and pending) go.
    verify_hosts: bool = False
    rules_budget: int = 0
    # --namespace-share-hosts and --namespace-share-bytes (0: none).
    share_hosts: int = 0
    share_bytes: int = 0
    # The registrations whose objects are read (registry.turned_on: those whose setting is
    # "auto", and those without one), by name.
    sources_on: frozenset[str] = frozenset({"ingress", "gateway"})


class PlanFlags(Protocol):
    """The flags of the controller, ``render`` and ``doctor`` that the plan reads alike."""

    @property
    def proxy_service(self) -> str: ...
    @property
    def cluster_domain(self) -> str: ...
    @property
    def target_server(self) -> str: ...
    @property
    def max_targets(self) -> int: ...
    @property
    def gateway_api(self) -> str: ...
    @property
    def gateway_class(self) -> Sequence[str]: ...


def plan_settings_of(s: PlanFlags, policy: HostPolicy, target_map: Mapping[str, MapEntry],
                     namespace: str) -> PlanSettings:
    """The PlanSettings of the flags every command shares, read one way. A command then sets
    with ``dataclasses.replace`` what it decides itself (render plans without a settle, the
    controller watches the Gateway API only where it is served, ...)."""
    return PlanSettings(
        policy, namespace=namespace, proxy_service=s.proxy_service, target_map=target_map,
        cluster_domain=s.cluster_domain, target_server=s.target_server,
        max_targets=s.max_targets, gateway_api=s.gateway_api == "auto",
        gateway_classes=tuple(s.gateway_class))


@dataclass(frozen=True)
class Rooms:
    """The bytes the rules and the published hosts may take: the room each ConfigMap they
    are written to leaves (budget.py's ``corefile_room``, ``configmap_room``)."""

    rules: int
    # The rules' ConfigMap and key, as refusals name it.
    rules_where: str
    # (what, "published" or "node-local", bytes, the ConfigMap): the other destinations.
    others: tuple[tuple[str, str, int, str], ...] = ()


@dataclass(frozen=True)
class Snapshot:
    settings: PlanSettings
    ingresses: Sequence[Obj] = ()
    # None: unknown (offline inputs without IngressClasses), and class names are not checked.
    ingress_classes: Sequence[Obj] | None = ()
    gateway_classes: Sequence[Obj] = ()
    gateways: Sequence[Obj] = ()
    # (kind, object): HTTPRoute, GRPCRoute, TLSRoute, …
    routes: Sequence[tuple[str, Obj]] = ()
    listener_sets: Sequence[Obj] = ()
    # Registered sources with claims of their own (registry ``claims_of``): registration
    # name → API group (served) → its claiming objects, slimmed as the controller slims them.
    registered: Mapping[str, Mapping[str, Sequence[Obj]]] = field(default_factory=dict)
    # Their facts for data-plane discovery: "<registration>/<plural>" → objects.
    extra_facts: Mapping[str, Sequence[Obj]] = field(default_factory=dict)
    # Namespace name → its labels (routes' allowedRoutes selectors read them).
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    services: Sequence[Obj] = ()
    # The implementations' settings objects: "NAMESPACE/NAME" → ConfigMap (ingress-nginx,
    # cilium), Envoy Gateway ClientTrafficPolicies, NGINX Gateway Fabric NginxProxies.
    configmaps: Mapping[str, Obj] = field(default_factory=dict)
    client_traffic_policies: Sequence[Obj] = ()
    nginx_proxies: Mapping[str, Obj] = field(default_factory=dict)
    # Resources (plurals) served but not readable: their silence is unknown, not "none".
    unreadable: frozenset[str] = frozenset()
    # The targets ConfigMap as it is now (the slot table and when each slot was published).
    targets_configmap: Obj | None = None
    # What the DNS rules answer for each host now.
    held: Mapping[str, corefile.Answers] = field(default_factory=dict)
    # The hosts the rules hold now, where the caller reads them apart from their answers
    # (verification keeps these while their verdict is unknown); None: the keys of ``held``.
    held_hosts: Sequence[str] | None = None
    # Host → verification verdict (read only with settings.verify_hosts).
    verdicts: Mapping[str, Verdict] = field(default_factory=dict)
    # Unix seconds: when the plan is made (slots settle against it).
    now: float = 0.0
    # The size limits (None: none is applied).
    rooms: Rooms | None = None
