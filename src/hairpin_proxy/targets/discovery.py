"""Which Service is the data plane of a Gateway or an IngressClass. Pure.

Input is the controller's slim Services (``metadata`` name/namespace/labels, ``spec``
type/ports/clusterIPs, ``status.loadBalancer.ingress``) as plain dicts; malformed entries are
skipped, never raised on. A Service qualifies only if it has a ClusterIP (not headless, not
ExternalName: the proxy dials the Service's own port) and a TCP port for HTTP or TLS.

Conventions relied on, each checked in the implementation's own source or docs:

=====================  ===========================================  ==============================
Implementation         What marks its data-plane Service            Where it is defined
=====================  ===========================================  ==============================
Gateway API (any)      label ``gateway.networking.k8s.io/           kubernetes-sigs/gateway-api,
                       gateway-name: <gateway>`` in the Gateway's   geps/gep-1762/index.md (MUST
                       namespace; name ``<gateway>-<class>``        label; SHOULD name)
Envoy Gateway          labels ``gateway.envoyproxy.io/owning-       envoyproxy/gateway,
                       gateway-name`` + ``…/owning-gateway-         internal/gatewayapi/
                       namespace`` (Service lives in Envoy          translator.go, helpers.go
                       Gateway's own namespace, usually             (GatewayOwnerLabels,
                       ``envoy-gateway-system``); merged gateways:  OwnerLabels); internal/
                       ``gateway.envoyproxy.io/owning-              infrastructure/kubernetes/
                       gatewayclass: <class>``; GEP-1762 label in   proxy/resource_provider.go
                       "gateway namespace" mode                     (envoyLabels, Service)
Cilium                 ``cilium-gateway-<gateway>`` in the          cilium/cilium, operator/pkg/
                       Gateway's namespace, GEP-1762 label, old     model/translation/gateway-api
                       label ``io.cilium.gateway/owning-gateway``   (ciliumGatewayPrefix,
                                                                    owningGatewayLabel; testdata
                                                                    service-output.yaml)
NGINX Gateway Fabric   ``<gateway>-<class>`` (hashed past 63        nginx/nginx-gateway-fabric,
                       characters) in the Gateway's namespace,      internal/framework/controller/
                       GEP-1762 label (an annotation instead when   resource.go, labels.go;
                       the Gateway name is longer than 63)          internal/controller/
                                                                    provisioner/objects.go
Istio                  ``<gateway>-<class>`` in the Gateway's       istio/istio, pilot/pkg/config/
                       namespace (no suffix for some classes),      kube/gatewaycommon/
                       GEP-1762 label                               gateway_utils.go
                                                                    (GetDefaultName), testdata/
                                                                    deployment/*.yaml
ingress-nginx          IngressClass controller                      kubernetes/ingress-nginx,
                       ``k8s.io/ingress-nginx``; Service labels     charts/ingress-nginx/values.yaml
                       ``app.kubernetes.io/name: ingress-nginx``,   (controllerValue), templates/
                       ``app.kubernetes.io/component: controller``, _helpers.tpl, controller-
                       ``app.kubernetes.io/instance: <release>``    service.yaml, controller-
                       (the IngressClass carries the same)          ingressclass.yaml
Traefik                controller ``traefik.io/ingress-controller``; traefik/traefik-helm-chart,
                       labels ``app.kubernetes.io/name: traefik``,  traefik/templates/
                       ``app.kubernetes.io/instance: <release>-     ingressclass.yaml, _helpers.tpl
                       <namespace>`` on IngressClass and Service;   (traefik.labelselector),
                       ports ``web`` 80 / ``websecure`` 443         values.yaml (exposedPort)
HAProxy (haproxytech)  controller ``haproxy.org/ingress-controller`` haproxytech/helm-charts,
                       or ``…/ingress-controller/<class>``; labels  kubernetes-ingress/templates/
                       ``app.kubernetes.io/name: kubernetes-        controller-ingressclass.yaml,
                       ingress``, ``app.kubernetes.io/instance``    _helpers.tpl, controller-
                                                                    service.yaml
Cilium Ingress         controller ``cilium.io/ingress-controller``; cilium/cilium Helm chart
                       shared Service ``cilium-ingress``            (cilium-ingress-class.yaml,
                                                                    cilium-ingress-service.yaml;
                                                                    ingress-shared-lb-service-name)
Contour                defines no controller value (it filters      projectcontour/contour,
                       Ingresses by class *name*); the values in    site/content/docs/main/config/
                       use are ``projectcontour.io/ingress-         ingress.md; examples/contour/
                       controller`` and ``projectcontour.io/        02-service-envoy.yaml
                       contour``; Service ``envoy`` (namespace
                       ``projectcontour`` in its example install)
=====================  ===========================================  ==============================

Port choice: the TCP port numbered 80 (HTTP) / 443 (TLS), else the one named ``http`` /
``https``; 0 when there is none. The number comes first because the client dials the host on
80/443 and the load balancer forwards that same Service port; Envoy Gateway names its ports
``http-80``/``https-443``, NGINX Gateway Fabric and Cilium ``port-80``, Traefik ``web``, so
names alone would miss most of them. UDP ports are skipped (Envoy Gateway adds a UDP 443 for
HTTP/3 next to the TCP one).

Several candidates: a LoadBalancer Service first (that is the one the outside world, and so
the PROXY-sending load balancer, talks to), then by namespace/name; ``found_by`` says how
many there were.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from hairpin_proxy.targets.model import (
    ProxyMode,
    Target,
    is_dns_label,
    is_port_or_zero,
    upstream_name,
)

GEP1762_GATEWAY_LABEL: Final = "gateway.networking.k8s.io/gateway-name"
ENVOY_GATEWAY_NAME_LABEL: Final = "gateway.envoyproxy.io/owning-gateway-name"
ENVOY_GATEWAY_NAMESPACE_LABEL: Final = "gateway.envoyproxy.io/owning-gateway-namespace"
ENVOY_GATEWAYCLASS_LABEL: Final = "gateway.envoyproxy.io/owning-gatewayclass"
CILIUM_GATEWAY_LABEL: Final = "io.cilium.gateway/owning-gateway"
CILIUM_GATEWAY_PREFIX: Final = "cilium-gateway-"
INSTANCE_LABEL: Final = "app.kubernetes.io/instance"
# IngressClass spec.controller of the implementations recognised by name.
INGRESS_NGINX: Final = "k8s.io/ingress-nginx"
TRAEFIK_INGRESS: Final = "traefik.io/ingress-controller"
HAPROXY_INGRESS: Final = "haproxy.org/ingress-controller"
CILIUM_INGRESS: Final = "cilium.io/ingress-controller"
NAME_LABEL: Final = "app.kubernetes.io/name"
COMPONENT_LABEL: Final = "app.kubernetes.io/component"

Service = Mapping[str, Any]


@dataclass(frozen=True)
class DataPlane:
    """A data-plane Service as found: everything of a Target except how it speaks PROXY."""

    service: str            # NAMESPACE/NAME
    http_port: int
    https_port: int
    advertise_address: str
    found_by: str

    def to_target(self, key: str, proxy: ProxyMode, proxy_source: str,
                  cluster_domain: str) -> Target:
        return Target(key=key, service=self.service,
                      upstream=upstream_name(self.service, cluster_domain),
                      http_port=self.http_port, https_port=self.https_port, proxy=proxy,
                      proxy_source=proxy_source, found_by=self.found_by,
                      advertise_address=self.advertise_address)


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _meta(svc: Service) -> tuple[str, str, Mapping[str, Any]]:
    meta = _dict(svc.get("metadata"))
    return _str(meta.get("namespace")), _str(meta.get("name")), _dict(meta.get("labels"))


def _tcp_ports(svc: Service) -> list[Mapping[str, Any]]:
    ports = _dict(svc.get("spec")).get("ports")
    if not isinstance(ports, list):
        return []
    # An absent protocol is TCP (the API's default).
    return [p for p in ports if isinstance(p, Mapping)
            and p.get("protocol", "TCP") == "TCP" and is_port_or_zero(p.get("port"))
            and p.get("port") != 0]


def _pick_port(ports: list[Mapping[str, Any]], number: int, name: str) -> int:
    for p in ports:
        if p.get("port") == number:
            return number
    for p in ports:
        if p.get("name") == name:
            port: int = p["port"]
            return port
    return 0


def service_addresses(svc: Service | None) -> tuple[str, ...]:
    """The Service's ClusterIPs (both families when dual-stack); none when headless or absent."""
    if svc is None:
        return ()
    spec = _dict(svc.get("spec"))
    ips = spec.get("clusterIPs") or [spec.get("clusterIP")]
    return tuple(ip for ip in ips if isinstance(ip, str) and ip and ip != "None")


def service_of_host(target_server: str, cluster_domain: str,
                    services: Iterable[Service] = ()) -> str:
    """The Service (``NAMESPACE/NAME``) a proxy's ``--target-server`` names, "" when it names
    none: ``NAME.NAMESPACE[.svc[.CLUSTER_DOMAIN]]`` (a final dot allowed), or a ClusterIP of
    one of ``services``. The default install's is ingress-nginx's own Service."""
    host = target_server.strip().rstrip(".").lower()
    try:
        ip = str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        ip = ""
    if ip:
        for svc in services:
            if isinstance(svc, Mapping) and ip in service_addresses(svc):
                namespace, name, _ = _meta(svc)
                return f"{namespace}/{name}"
        return ""
    labels = host.split(".")
    domain = cluster_domain.strip(".").lower()
    tail = ".".join(labels[2:])
    if len(labels) < 2 or tail not in ("", "svc", f"svc.{domain}"):
        return ""
    name, namespace = labels[0], labels[1]
    return f"{namespace}/{name}" if is_dns_label(name) and is_dns_label(namespace) else ""


def service_ports(svc: Service) -> tuple[int, int]:
    """(HTTP port, TLS port) of a Service, 0 for a missing one."""
    ports = _tcp_ports(svc)
    return _pick_port(ports, 80, "http"), _pick_port(ports, 443, "https")


def advertise_address(svc: Service) -> str:
    """The first IP of ``status.loadBalancer.ingress`` (entries with only a hostname are
    passed over), written canonically; "" when there is none."""
    ingress = _dict(_dict(svc.get("status")).get("loadBalancer")).get("ingress")
    if not isinstance(ingress, list):
        return ""
    for entry in ingress:
        ip = _str(_dict(entry).get("ip"))
        try:
            return str(ipaddress.ip_address(ip))
        except ValueError:
            continue
    return ""


def _is_load_balancer(svc: Service) -> bool:
    return _dict(svc.get("spec")).get("type") == "LoadBalancer"


def usable(svc: Service) -> bool:
    """Whether the proxy could dial this Service: it has a cluster IP and a web port."""
    namespace, name, _ = _meta(svc)
    if not namespace or not name:
        return False
    spec = _dict(svc.get("spec"))
    if spec.get("type") == "ExternalName":
        return False
    ips = spec.get("clusterIPs")
    if not isinstance(ips, list) or not ips or "None" in ips:
        return False
    return service_ports(svc) != (0, 0)


def dataplane_of(svc: Service, found_by: str) -> DataPlane:
    """Describe one Service (found by the caller, e.g. through the ``--target`` map)."""
    namespace, name, _ = _meta(svc)
    http_port, https_port = service_ports(svc)
    return DataPlane(service=f"{namespace}/{name}", http_port=http_port,
                     https_port=https_port, advertise_address=advertise_address(svc),
                     found_by=found_by)


def _best(candidates: list[Service], how: str) -> DataPlane | None:
    usable_ones = [s for s in candidates if usable(s)]
    if not usable_ones:
        return None

    def rank(svc: Service) -> tuple[bool, str, str]:
        namespace, name, _ = _meta(svc)
        return (not _is_load_balancer(svc), namespace, name)

    usable_ones.sort(key=rank)
    if len(usable_ones) > 1:
        how = f"{how} (first of {len(usable_ones)} matching Services)"
    return dataplane_of(usable_ones[0], how)


def _select(services: Iterable[Service], test: Callable[[str, str, Mapping[str, Any]], bool],
            ) -> list[Service]:
    out = []
    for svc in services:
        if not isinstance(svc, Mapping):
            continue
        namespace, name, labels = _meta(svc)
        if test(namespace, name, labels):
            out.append(svc)
    return out


def find_gateway_service(services: Iterable[Service], namespace: str, name: str,
                         gateway_class: str = "") -> DataPlane | None:
    """The data-plane Service of Gateway ``namespace/name``; ``gateway_class`` (its
    ``spec.gatewayClassName``) enables the ``<gateway>-<class>`` name and Envoy Gateway's
    merged-gateways label. Strategies run from the most specific evidence to the least, and
    the first that yields a usable Service wins."""
    pool = [s for s in services if isinstance(s, Mapping)]
    strategies: list[tuple[str, Callable[[str, str, Mapping[str, Any]], bool]]] = [
        (f"label {GEP1762_GATEWAY_LABEL}",
         lambda ns, _n, lb: ns == namespace and lb.get(GEP1762_GATEWAY_LABEL) == name),
        (f"labels {ENVOY_GATEWAY_NAME_LABEL} and {ENVOY_GATEWAY_NAMESPACE_LABEL}",
         lambda _ns, _n, lb: (lb.get(ENVOY_GATEWAY_NAME_LABEL) == name
                              and lb.get(ENVOY_GATEWAY_NAMESPACE_LABEL) == namespace)),
        (f"label {CILIUM_GATEWAY_LABEL}",
         lambda ns, _n, lb: ns == namespace and lb.get(CILIUM_GATEWAY_LABEL) == name),
        ("name cilium-gateway-<name>",
         lambda ns, n, _lb: ns == namespace and n == CILIUM_GATEWAY_PREFIX + name),
    ]
    if gateway_class:
        strategies += [
            ("name <gateway>-<gatewayclass>",
             lambda ns, n, _lb: ns == namespace and n == f"{name}-{gateway_class}"),
            (f"label {ENVOY_GATEWAYCLASS_LABEL} (merged gateways)",
             lambda _ns, _n, lb: lb.get(ENVOY_GATEWAYCLASS_LABEL) == gateway_class),
        ]
    for how, test in strategies:
        found = _best(_select(pool, test), how)
        if found is not None:
            return found
    return None


@dataclass(frozen=True)
class _Controller:
    labels: Mapping[str, str]   # Service labels every install of it sets
    names: tuple[str, ...] = ()  # or, where it sets no labels, the Service name
    namespaces: tuple[str, ...] = ()  # the namespaces those names live in (empty: any)


# IngressClass spec.controller → how to recognise its Service.
CONTROLLERS: Final[Mapping[str, _Controller]] = {
    INGRESS_NGINX: _Controller(
        {NAME_LABEL: "ingress-nginx", COMPONENT_LABEL: "controller"}),
    TRAEFIK_INGRESS: _Controller({NAME_LABEL: "traefik"}),
    HAPROXY_INGRESS: _Controller({NAME_LABEL: "kubernetes-ingress"}),
    CILIUM_INGRESS: _Controller({}, names=("cilium-ingress",)),
    "projectcontour.io/ingress-controller": _Controller(
        {}, names=("envoy",), namespaces=("projectcontour",)),
    "projectcontour.io/contour": _Controller(
        {}, names=("envoy",), namespaces=("projectcontour",)),
}
_HAPROXY_PREFIX: Final = HAPROXY_INGRESS + "/"


def controller_of(controller: str) -> str:
    """The CONTROLLERS entry for an IngressClass ``spec.controller`` ("" when unknown):
    HAProxy's chart appends the class to its controller value."""
    if controller in CONTROLLERS:
        return controller
    if controller.startswith(_HAPROXY_PREFIX):
        return HAPROXY_INGRESS
    return ""


def find_ingressclass_service(services: Iterable[Service],
                              ingressclass: Mapping[str, Any]) -> DataPlane | None:
    """The data-plane Service of an IngressClass (its object as a dict). When the class
    carries the Helm ``app.kubernetes.io/instance`` label, only Services of that same
    release count: two installs of one controller share the controller value, and the
    wrong one's Service would send hosts to the wrong data plane."""
    spec = _dict(ingressclass.get("spec"))
    known = controller_of(_str(spec.get("controller")))
    if not known:
        return None
    rule = CONTROLLERS[known]
    class_labels = _dict(_dict(ingressclass.get("metadata")).get("labels"))
    instance = _str(class_labels.get(INSTANCE_LABEL)) if rule.labels else ""

    def test(ns: str, n: str, lb: Mapping[str, Any]) -> bool:
        if rule.names and n not in rule.names:
            return False
        if rule.namespaces and ns not in rule.namespaces:
            return False
        if instance and lb.get(INSTANCE_LABEL) != instance:
            return False
        return all(lb.get(k) == v for k, v in rule.labels.items())

    parts = [f"{k}={v}" for k, v in sorted(rule.labels.items())]
    if instance:
        parts.append(f"{INSTANCE_LABEL}={instance}")
    how = (f"IngressClass controller {known}: "
           + (f"labels {', '.join(parts)}" if parts else f"name {'/'.join(rule.names)}"))
    return _best(_select(services, test), how)
