"""What the doctor gathers, as values, and pure readings of API objects. Pure.

The I/O modules (``probe``, ``cluster``) fill these in; ``verdict`` and ``report`` only read
them. Readings of Kubernetes objects (PROXY-protocol annotations, ``ipMode``, image tags,
EndpointSlice readiness) live here so they can be tested without a cluster.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from hairpin_proxy.addresses import format_hostport
from hairpin_proxy.wildcards import ANY_DEPTH, wildcard_base

# What one probe connection saw.
Outcome = Literal["http", "empty", "reset", "refused", "timeout", "unreachable", "tls-error",
                  "garbage", "error"]
AddressKind = Literal["lb", "proxy", "other"]

# The rules are `template` stanzas, and the AAAA one answers an empty NOERROR (no answer, no
# authority section: the proxy has no IPv6 address, or no IPv4 one for the A stanza). CoreDNS
# refused such a stanza at start-up ("no answer section for template found") until 1.5.1,
# which dropped that check (coredns/coredns#2855): an older CoreDNS rejects the whole Corefile
# on reload and keeps running its previous one, so no rule takes effect.
MIN_COREDNS = (1, 5, 1)


def version_text(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


@dataclass(frozen=True)
class Attempt:
    """One connection: ``outcome`` and, for ``http``, the status code."""
    outcome: Outcome
    status: int | None = None
    detail: str = ""

    @property
    def answered(self) -> bool:
        return self.outcome == "http"

    def describe(self) -> str:
        if self.outcome == "http":
            return f"HTTP {self.status}"
        text = {"empty": "empty reply", "reset": "connection reset", "refused":
                "connection refused", "timeout": "timed out", "unreachable": "unreachable",
                "tls-error": "TLS handshake failed", "garbage": "not an HTTP reply",
                "error": "error"}[self.outcome]
        return f"{text} ({self.detail})" if self.detail else text


@dataclass(frozen=True)
class PortProbe:
    """A port probed three times: bare, after a PROXY v1 header, after a PROXY v2 header."""
    scheme: Literal["http", "tls"]
    address: str
    port: int
    bare: Attempt
    v1: Attempt
    v2: Attempt


@dataclass(frozen=True)
class Resolution:
    """The host's addresses in resolver order, or why there are none."""
    addresses: tuple[str, ...] = ()
    error: str = ""
    # True when --resolve supplied the answer instead of the resolver.
    overridden: bool = False
    # Who answered (``Resolver.described``); "" for --resolve.
    resolver: str = ""


# The cluster DNS Service: kubeadm, k3s, EKS, AKS and GKE name it kube-system/kube-dns; other
# distributions (RKE2's rke2-coredns-rke2-coredns) keep the k8s-app label that kubelet's
# --cluster-dns address is taken from.
CLUSTER_DNS_SERVICE = ("kube-system", "kube-dns")
CLUSTER_DNS_LABEL = ("k8s-app", "kube-dns")


@dataclass(frozen=True)
class Resolver:
    """Where the doctor resolves the hosts: DNS servers (address, port), or the system
    resolver when ``servers`` is empty; ``described`` names it in the report."""
    servers: tuple[tuple[str, int], ...]
    described: str


SYSTEM_RESOLVER = Resolver((), "the system resolver (this pod's resolv.conf)")


def _dns_port(svc: Mapping[str, Any]) -> int:
    """The Service's DNS port: the UDP port named dns, else its first UDP port, else 53."""
    udp = [p for p in (svc.get("spec") or {}).get("ports") or []
           if isinstance(p, Mapping) and p.get("protocol", "TCP") == "UDP"
           and isinstance(p.get("port"), int)]
    named = [p for p in udp if p.get("name") == "dns"]
    return int((named or udp or [{"port": 53}])[0]["port"])


def cluster_dns(services: Iterable[Mapping[str, Any]], namespace: str) -> Resolver | None:
    """The cluster DNS Service an ordinary pod's resolv.conf names (kubelet's --cluster-dns
    is its ClusterIP): kube-system/kube-dns, else one labelled k8s-app=kube-dns in
    ``namespace`` (where the CoreDNS ConfigMap is), then in kube-system. None: none found."""
    def meta(svc: Mapping[str, Any]) -> Mapping[str, Any]:
        return svc.get("metadata") or {}

    def labelled(svc: Mapping[str, Any], ns: str) -> bool:
        key, value = CLUSTER_DNS_LABEL
        return meta(svc).get("namespace") == ns and (meta(svc).get("labels") or {}).get(
            key) == value

    listed = list(services)
    found = [s for s in listed if (meta(s).get("namespace"), meta(s).get("name"))
             == CLUSTER_DNS_SERVICE] or [s for s in listed if labelled(s, namespace)] or [
        s for s in listed if labelled(s, CLUSTER_DNS_SERVICE[0])]
    for svc in found:
        spec = svc.get("spec") or {}
        ips = [str(ip) for ip in spec.get("clusterIPs") or [spec.get("clusterIP")]
               if ip and ip != "None"]
        if ips:
            port = _dns_port(svc)
            where = f"{meta(svc).get('namespace')}/{meta(svc).get('name')}"
            shown = ", ".join(format_hostport(ip, port) for ip in ips)
            return Resolver(tuple((ip, port) for ip in ips),
                            f"the cluster DNS Service {where} ({shown})")
    return None


@dataclass(frozen=True)
class LbEntry:
    """One ``status.loadBalancer.ingress`` entry of a LoadBalancer Service."""
    service: str  # namespace/name
    ip: str
    hostname: str
    ip_mode: str  # "VIP", "Proxy" or "" when not reported


@dataclass(frozen=True)
class ProxyProtocolSetting:
    """A cloud controller's PROXY-protocol annotation found on a Service."""
    provider: str
    annotation: str
    value: str
    enabled: bool | None  # None: a value we cannot read (e.g. a list of ports)


@dataclass(frozen=True)
class LbService:
    name: str  # namespace/name
    entries: tuple[LbEntry, ...]
    proxy_protocol: tuple[ProxyProtocolSetting, ...]

    @property
    def hostname_only(self) -> bool:
        return bool(self.entries) and all(e.hostname and not e.ip for e in self.entries)


# What the controller's target plan does with a host (``targets.routing_plan``): sends it to its
# target's proxy Service, or leaves it alone for one of three reasons.
TargetVerdict = Literal["redirected", "target-no-proxy", "target-proxy-unknown",
                        "target-not-found"]
TARGET_VERDICTS: tuple[TargetVerdict, ...] = ("redirected", "target-no-proxy",
                                              "target-proxy-unknown", "target-not-found")


@dataclass(frozen=True)
class LostClaim:
    """A claim of the host for another target that an older one beat."""
    origin: str         # "HTTPRoute web/shop"
    target: str         # the target key it asked for
    winner: str         # the origin that won
    winner_target: str  # and its target key
    asked: str = ""     # the key the loser's origin asked for, when it fell back to ``target``


@dataclass(frozen=True)
class HostTarget:
    """Where the controller sends one host, as ``targets.routing_plan`` decides it."""
    key: str                   # the winning target key ("default": the proxy's own target)
    verdict: TargetVerdict
    # Why the host is not redirected, or why its claims fell back to the default target.
    message: str = ""
    asked: str = ""            # the key its claims asked for, when they fell back
    service: str = ""          # the data plane's Service, NAMESPACE/NAME ("" unknown)
    found_by: str = ""
    proxy: str = ""            # v1, v2, none, unknown ("" not known)
    proxy_source: str = ""
    slot: int | None = None    # 0 for the default target; None when it gets none
    proxy_service: str = ""    # our Service for the slot, NAMESPACE/NAME
    proxy_service_found: bool | None = None
    proxy_addresses: tuple[str, ...] = ()
    # Whether the slot is in the published targets table (None: the table is unknown).
    published: bool | None = None
    # When a new slot's hosts get their DNS rules ("HH:MM:SS UTC"; "": not waiting).
    rules_at: str = ""
    origins: tuple[str, ...] = ()
    losers: tuple[LostClaim, ...] = ()
    # The plan's refusal of every object asking for a host it routes, by a size limit (the
    # room, the --rules-budget, a namespace's share): object and reason ("": none). Whether a
    # rule is in effect is the verdict's to read from the Corefile.
    refused: str = ""


# The forged-PROXY-header check's verdicts (doctor/forged.py).
ForgedVerdict = Literal["forgeable", "not-believed", "guarded", "unknown"]


@dataclass(frozen=True)
class DataPlaneFacts:
    """A data plane the controller relays to, as the doctor probes it."""

    key: str
    service: str
    addresses: tuple[str, ...]
    http_port: int
    https_port: int
    proxy: str  # v1 or v2
    controller: str  # IngressClass spec.controller or GatewayClass controllerName ("": unknown)
    host: str = ""  # a host routed to it, for the Host header


@dataclass(frozen=True)
class ForgedCheck:
    """One data plane's forged-header check: where it was sent, the verdict, what it rests
    on, and the fix ("" when there is nothing to fix)."""

    plane: DataPlaneFacts
    address: str
    port: int
    tls: bool
    verdict: ForgedVerdict | Literal["not-probed"]
    detail: str
    fix: str


@dataclass(frozen=True)
class ClusterFacts:
    """Cluster-wide facts; a None field means it could not be found out (see ``problems``)."""
    lb_services: tuple[LbService, ...] | None = None
    proxy_service_found: bool | None = None
    proxy_addresses: tuple[str, ...] = ()
    proxy_ready_endpoints: int | None = None
    # Hosts (and wildcards) whose DNS rule (template stanza, or an earlier version's rewrite
    # rule) is in effect; None when the Corefile is unknown.
    rule_hosts: tuple[str, ...] | None = None
    reload_plugin: bool | None = None
    # The NodeLocal DNSCache DaemonSet is deployed (None: it could not be looked for).
    node_local_dns: bool | None = None
    # Its ConfigMap (namespace/name) when found under one of the names the controller edits.
    node_local_configmap: str | None = None
    # That ConfigMap carries addonmanager.kubernetes.io/mode: Reconcile and an addon manager
    # runs (its pod in kube-system, or GKE's), so the controller leaves it alone (False when
    # not so or there is none; None when it could not be read).
    node_local_reconciled: bool | None = None
    # The field manager that removed our block there, when the controller told of a revert
    # (a ConfigMapReverted Event); None otherwise.
    node_local_reverted_by: str | None = None
    # The zones of our server block there (a ``*.d`` host shows as ``d``); empty when there
    # is no block or no such ConfigMap; None when it could not be read.
    node_local_zones: frozenset[str] | None = None
    coredns_image: str | None = None
    coredns_version: tuple[int, int, int] | None = None
    # host -> "ip or hostname" entries from the status of the Ingresses that name it.
    ingress_addresses: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    # The target of every host claimed by an Ingress or route (None: the claims or the data
    # planes could not be read, see ``problems``).
    host_targets: Mapping[str, HostTarget] | None = None
    # How the Gateway API was read: "group/version", "not served", "off (--gateway-api
    # off)"; None when that could not be found out.
    gateway_api: str | None = None
    # The published targets table, key -> slot (None: it could not be read).
    target_slots: Mapping[str, int] | None = None
    # What the route matching left out and why, in words.
    gateway_notes: tuple[str, ...] = ()
    # The data planes the controller relays to (PROXY v1/v2), for the forged-header check
    # (None: the plan could not be made).
    data_planes: tuple[DataPlaneFacts, ...] | None = None
    # The cluster DNS Service that ordinary pods ask (None: not found or not listed).
    cluster_dns: Resolver | None = None

    @property
    def coredns_ok(self) -> bool | None:
        return None if self.coredns_version is None else self.coredns_version >= MIN_COREDNS


# --------------------------------------------------------------------------- readings

# PROXY-protocol annotations of the cloud controllers, as their documentation gives them.
# Values: "true"/"false" flags, a version ("v1"/"v2"/"none"), or "*"/a port list for AWS and
# Scaleway (any non-empty value other than "false" turns it on for some port).
PP_ANNOTATIONS: tuple[tuple[str, str], ...] = (
    ("AWS (in-tree / CLB)", "service.beta.kubernetes.io/aws-load-balancer-proxy-protocol"),
    ("AWS Load Balancer Controller",
     "service.beta.kubernetes.io/aws-load-balancer-target-group-attributes"),
    ("DigitalOcean", "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol"),
    ("Hetzner Cloud", "load-balancer.hetzner.cloud/uses-proxyprotocol"),
    ("Linode / Akamai", "service.beta.kubernetes.io/linode-loadbalancer-default-proxy-protocol"),
    ("Linode / Akamai", "service.beta.kubernetes.io/linode-loadbalancer-proxy-protocol"),
    ("OpenStack", "loadbalancer.openstack.org/proxy-protocol"),
    ("Scaleway", "service.beta.kubernetes.io/scw-loadbalancer-proxy-protocol-v1"),
    ("Scaleway", "service.beta.kubernetes.io/scw-loadbalancer-proxy-protocol-v2"),
    ("Oracle (OKE network load balancer)",
     "oci-network-load-balancer.oraclecloud.com/is-ppv2-enabled"),
)

_OFF = {"", "false", "no", "0", "none", "off", "disabled"}
_ON = {"true", "yes", "1", "on", "enabled", "*", "v1", "v2"}
_PORTS = re.compile(r"\s*\d{1,5}(\s*,\s*\d{1,5})*\s*")
_TG_PP2 = re.compile(r"(?:^|,)\s*proxy_protocol_v2\.enabled\s*=\s*(\w+)")


def _flag(value: str) -> bool | None:
    low = value.strip().lower()
    if low in _OFF:
        return False
    if low in _ON or _PORTS.fullmatch(low):
        return True
    return None


def proxy_protocol_settings(annotations: Mapping[str, Any]) -> tuple[ProxyProtocolSetting, ...]:
    """The PROXY-protocol annotations present, each read as on, off or unreadable."""
    out = []
    for provider, key in PP_ANNOTATIONS:
        raw = annotations.get(key)
        if not isinstance(raw, str):
            continue
        if key.endswith("target-group-attributes"):
            m = _TG_PP2.search(raw)
            if m is None:
                continue  # other attributes only: says nothing about the PROXY protocol
            enabled = _flag(m[1])
        else:
            enabled = _flag(raw)
        out.append(ProxyProtocolSetting(provider, key, raw, enabled))
    return tuple(out)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def object_name(obj: Mapping[str, Any]) -> str:
    meta = _mapping(obj.get("metadata"))
    ns, name = _str(meta.get("namespace")), _str(meta.get("name"))
    return f"{ns}/{name}" if ns else name


def lb_service(svc: Mapping[str, Any]) -> LbService | None:
    """A LoadBalancer Service's status entries and PROXY-protocol annotations; None otherwise."""
    if _mapping(svc.get("spec")).get("type") != "LoadBalancer":
        return None
    name = object_name(svc)
    raw = _mapping(_mapping(svc.get("status")).get("loadBalancer")).get("ingress")
    entries = tuple(
        LbEntry(name, _str(e.get("ip")), _str(e.get("hostname")), _str(e.get("ipMode")))
        for e in (raw if isinstance(raw, list) else []) if isinstance(e, Mapping))
    annotations = _mapping(_mapping(svc.get("metadata")).get("annotations"))
    return LbService(name, entries, proxy_protocol_settings(annotations))


def ready_endpoints(slices: Iterable[Mapping[str, Any]]) -> int:
    """Ready endpoints over EndpointSlices; an unset ``ready`` counts as ready, as the API says."""
    count = 0
    for s in slices:
        eps = s.get("endpoints")
        for ep in eps if isinstance(eps, list) else []:
            if not isinstance(ep, Mapping):
                continue
            ready = _mapping(ep.get("conditions")).get("ready")
            if ready is None or ready is True:
                count += 1
    return count


_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


def image_version(image: str) -> tuple[int, int, int] | None:
    """The x.y.z version in an image reference's tag (``coredns/coredns:v1.11.1``,
    ``.../eks/coredns:v1.11.1-eksbuild.4``); None without a tag or without a version in it."""
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    m = _VERSION.match(last.split(":", 1)[1])
    if m is None:
        return None
    return int(m[1]), int(m[2]), int(m[3])


def coredns_image(deployment: Mapping[str, Any]) -> str | None:
    """The image of the container named coredns (else the first container)."""
    spec = _mapping(_mapping(_mapping(deployment.get("spec")).get("template")).get("spec"))
    containers = [c for c in spec.get("containers") or [] if isinstance(c, Mapping)]
    if not containers:
        return None
    chosen = next((c for c in containers if c.get("name") == "coredns"), containers[0])
    image = chosen.get("image")
    return image if isinstance(image, str) else None


NODE_LOCAL_DNS_NAMES = frozenset({"node-local-dns", "nodelocaldns"})


def is_node_local_dns(daemonset: Mapping[str, Any]) -> bool:
    """The NodeLocal DNSCache add-on, by its usual names (upstream, GKE: node-local-dns;
    kubespray: nodelocaldns) or its k8s-app label."""
    meta = _mapping(daemonset.get("metadata"))
    labels = _mapping(meta.get("labels"))
    return (_str(meta.get("name")) in NODE_LOCAL_DNS_NAMES
            or _str(labels.get("k8s-app")) in NODE_LOCAL_DNS_NAMES)


def ingress_hosts_and_status(ingress: Mapping[str, Any]) -> tuple[tuple[str, ...],
                                                                   tuple[str, ...]]:
    """Every host an Ingress names (rules and tls) and its status addresses (ip or hostname)."""
    spec = _mapping(ingress.get("spec"))
    hosts: list[str] = []
    for rule in spec.get("rules") or []:
        if isinstance(rule, Mapping) and isinstance(rule.get("host"), str):
            hosts.append(rule["host"].lower())
    for tls in spec.get("tls") or []:
        if isinstance(tls, Mapping):
            hosts.extend(h.lower() for h in tls.get("hosts") or [] if isinstance(h, str))
    raw = _mapping(_mapping(ingress.get("status")).get("loadBalancer")).get("ingress")
    addresses = tuple(_str(e.get("ip")) or _str(e.get("hostname"))
                      for e in (raw if isinstance(raw, list) else []) if isinstance(e, Mapping))
    return tuple(dict.fromkeys(hosts)), tuple(a for a in addresses if a)


@dataclass(frozen=True)
class _RuleIndex:
    """``rule_hosts`` as ``rule_covers`` asks them: every rule by its name, and the domains
    under the ``*.`` and ``**.`` wildcards (what ``covers`` compares, lower-cased)."""
    names: frozenset[str]
    one_label: frozenset[str]
    any_depth: frozenset[str]

    @classmethod
    def of(cls, rule_hosts: Iterable[str]) -> _RuleIndex:
        names: set[str] = set()
        one: set[str] = set()
        deep: set[str] = set()
        for r in rule_hosts:
            rule = r.lower()
            names.add(rule.rstrip("."))
            base = wildcard_base(rule)
            if base is not None:
                (deep if rule.startswith(ANY_DEPTH) else one).add(base)
        return cls(frozenset(names), frozenset(one), frozenset(deep))

    def covers(self, name: str) -> bool:
        """``wildcards.covers`` of any rule, by looking up each domain ``name`` lies under."""
        if name in self.names:
            return True
        if not (self.one_label or self.any_depth):
            return False
        labels_ok = True
        dot = name.find(".")
        while dot >= 0:
            label = name[name.rfind(".", 0, dot) + 1:dot]
            labels_ok = labels_ok and bool(label) and not label.startswith("_")
            if not labels_ok:
                return False
            base = name[dot + 1:]
            if base in self.any_depth or (base in self.one_label and "." not in name[:dot]):
                return True
            dot = name.find(".", dot + 1)
        return False


# The index of the last ``rule_hosts`` tuple asked about: the doctor asks of the same one
# for every host.
_last_index: tuple[tuple[str, ...], _RuleIndex] | None = None


def rule_covers(host: str, rule_hosts: Sequence[str]) -> bool:
    """Whether the DNS rule for one of ``rule_hosts`` applies to ``host`` (a ``*.`` wildcard
    covers exactly one more label, a ``**.`` one any number, as the generated regexes do)."""
    global _last_index
    name = host.lower().rstrip(".")
    if not isinstance(rule_hosts, tuple):
        return _RuleIndex.of(rule_hosts).covers(name)
    last = _last_index
    if last is None or last[0] is not rule_hosts:
        last = _last_index = (rule_hosts, _RuleIndex.of(rule_hosts))
    return last[1].covers(name)


def zone_covers(host: str, zones: Iterable[str]) -> bool:
    """Whether a server block for ``zones`` takes queries for ``host``: the name is one of the
    zones or lies under one, at any depth (our node-local-dns block's zones)."""
    name = host.lower().rstrip(".")
    for zone in zones:
        z = zone.lower().rstrip(".")
        if z and (name == z or name.endswith("." + z)):
            return True
    return False


# A report asks of the same few addresses (the proxy's, the load balancers', the answers)
# for every host.
@functools.lru_cache(maxsize=4096)
def normalize_address(address: str) -> str:
    """An IP address in its canonical text (IPv6 without brackets, lower case, zeros
    compressed), so resolver answers, API values and flags compare; other text lower-cased."""
    text = address.strip().strip("[]")
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return text.lower()


def classify_address(address: str, lb_addresses: Mapping[str, LbEntry],
                     proxy_addresses: Iterable[str]) -> AddressKind:
    a = normalize_address(address)
    if a in {normalize_address(p) for p in proxy_addresses}:
        return "proxy"
    if a in lb_addresses:
        return "lb"
    return "other"


def lb_address_index(services: Iterable[LbService]) -> dict[str, LbEntry]:
    """IP (normalised) -> its status entry, over every LoadBalancer Service."""
    out: dict[str, LbEntry] = {}
    for svc in services:
        for e in svc.entries:
            if e.ip:
                out.setdefault(normalize_address(e.ip), e)
    return out


# Verification codes (``hairpin_proxy.verify.Code`` values, spelled out here so that this
# module stays free of the resolver's imports) and the doctor's own two.
VERIFY_REDIRECT = frozenset({"verified", "off"})
VERIFY_REFUSED = frozenset({"not-this-cluster", "unresolved", "ip-mode-proxy"})


@dataclass(frozen=True)
class Verification:
    """What the controller's host verification says of a host, computed with its code
    (``hairpin_proxy.verify``: ``lb_addresses``, ``make_resolver``, ``decide``).

    ``code`` is a verify verdict code (verified, ip-mode-proxy, not-this-cluster, unresolved,
    resolver-error), ``off`` (``--verify-hosts off``: every host the policy allows is
    redirected) or ``unknown`` (the load balancer addresses could not be gathered).
    """
    code: str
    reason: str
    # The name resolved (the probe name under a wildcard) and its public answer.
    queried: str = ""
    addresses: tuple[str, ...] = ()
    # Our load balancer addresses among them.
    matched: tuple[str, ...] = ()
    # The resolver asked: "system" or the --verify-resolver servers.
    resolver: str = ""

    @property
    def redirect(self) -> bool | None:
        """Whether the controller redirects the host; None when that is unknown."""
        if self.code in VERIFY_REDIRECT:
            return True
        if self.code in VERIFY_REFUSED:
            return False
        return None


@dataclass(frozen=True)
class HostFacts:
    """Everything found out about one host."""
    host: str
    resolution: Resolution
    kinds: tuple[AddressKind, ...] = ()  # one per resolved address
    http: PortProbe | None = None  # None: the port was skipped (or DNS failed)
    tls: PortProbe | None = None
    # The LoadBalancer Service this host is served by (from its answers or its Ingress status).
    lb: LbService | None = None
    cluster: ClusterFacts | None = None  # None: the API was not asked or not reachable
    # The controller's verdict on the host's public DNS (None: not checked, e.g. no API).
    verification: Verification | None = None
    # Where the controller sends the host (None: not claimed, or the plan is unknown).
    target: HostTarget | None = None
