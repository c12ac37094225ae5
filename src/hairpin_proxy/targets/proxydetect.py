"""Whether a data plane expects the PROXY protocol, read from the implementation's own
configuration. Pure: each function takes the object(s) as dicts and answers
``(mode, reason)``; the reason is a phrase for doctor, logs and Events.

The version we choose when a data plane accepts both: Envoy's ``proxy_protocol`` listener
filter takes v1 and v2 unless told otherwise, and we send it v2 (what cloud network load
balancers send). nginx's ``listen … proxy_protocol`` takes v1 since 1.5.12 and v2 only since
1.13.11, so nginx-based data planes get v1, which every version understands.

Fields, as defined by each project:

- ingress-nginx: ConfigMap key ``use-proxy-protocol`` (internal/ingress/controller/config/
  config.go ``UseProxyProtocol``), decoded with weak typing, i.e. Go's ``strconv.ParseBool``
  with "" read as false (template/configmap.go, ``WeaklyTypedInput``); default false.
- Envoy Gateway: ClientTrafficPolicy ``spec.proxyProtocol`` (an object, possibly empty) and
  the deprecated ``spec.enableProxyProtocol`` (bool); the first wins when both are set. A
  policy attaches through ``spec.targetRef``, ``spec.targetRefs`` (group
  ``gateway.networking.k8s.io``, kind Gateway, same namespace, optional ``sectionName``) or
  ``spec.targetSelectors``; among policies for the same Gateway the oldest wins (creation
  time, then namespace/name) (api/v1alpha1/clienttrafficpolicy_types.go, policy_helpers.go;
  internal/gatewayapi/resource/resource.go).
- NGINX Gateway Fabric: NginxProxy ``spec.rewriteClientIP.mode: ProxyProtocol``; referenced
  by the GatewayClass ``spec.parametersRef`` (with a namespace) and/or the Gateway
  ``spec.infrastructure.parametersRef`` (the Gateway's namespace); the Gateway's settings
  override the class's (apis/v1alpha2/nginxproxy_types.go; internal/controller/state/graph/
  nginxproxy.go, gatewayclass.go, gateway.go).
- Cilium: ``cilium-config`` keys ``enable-gateway-api-proxy-protocol`` and
  ``enable-ingress-proxy-protocol`` (operator flags; once on, only PROXY traffic is accepted).
- Istio: ProxyConfig ``gatewayTopology.proxyProtocol`` (present → the gateway listeners get
  the PROXY filter: pilot/pkg/networking/core/gateway.go), set through the
  ``proxy.istio.io/config`` annotation, which a Gateway API gateway takes from
  ``spec.infrastructure.annotations`` or else the Gateway's own annotations
  (pilot/pkg/config/kube/gatewaycommon/deploymentcontroller.go); the mesh-wide
  ``defaultConfig`` applies under it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, NamedTuple

import yaml

from hairpin_proxy.apis import GATEWAY_GROUP, ISTIO_PROXY_CONFIG
from hairpin_proxy.targets.model import ProxyMode


class Detected(NamedTuple):
    mode: ProxyMode
    reason: str


NGINX_MODE: Final[ProxyMode] = "v1"
ENVOY_MODE: Final[ProxyMode] = "v2"

_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _ref(obj: Mapping[str, Any]) -> str:
    meta = _dict(obj.get("metadata"))
    namespace, name = meta.get("namespace"), meta.get("name")
    return f"{namespace}/{name}" if namespace else str(name)


def _go_bool(value: object) -> bool | None:
    """A ConfigMap string as Go's ParseBool reads it; None when Go would refuse it."""
    if isinstance(value, bool):
        return value
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    return None


def _configmap_flag(configmap: Mapping[str, Any] | None, key: str, *, default: bool,
                    on: ProxyMode, what: str, empty_is_false: bool = False) -> Detected:
    if configmap is None:
        return Detected("unknown", f"{what} ConfigMap not found")
    where = f"ConfigMap {_ref(configmap)}"
    data = _dict(configmap.get("data"))
    if key not in data:
        mode: ProxyMode = on if default else "none"
        return Detected(mode, f"{where} does not set {key} (default {str(default).lower()})")
    flag = False if empty_is_false and data[key] == "" else _go_bool(data[key])
    if flag is None:
        return Detected("unknown", f"{where} {key}={data[key]!r} is not a boolean")
    return Detected(on if flag else "none", f"{where} {key}={str(flag).lower()}")


def ingress_nginx(configmap: Mapping[str, Any] | None) -> Detected:
    """From the controller's ConfigMap (its ``--configmap``); None when it is missing."""
    # mapstructure's weak decoding reads an empty string as false.
    return _configmap_flag(configmap, "use-proxy-protocol", default=False, on=NGINX_MODE,
                           what="ingress-nginx",
                           empty_is_false=True)


def cilium_gateway(configmap: Mapping[str, Any] | None) -> Detected:
    """Cilium's Gateway API listeners, from ``cilium-config``."""
    return _configmap_flag(configmap, "enable-gateway-api-proxy-protocol", default=False,
                           on=ENVOY_MODE, what="cilium-config")


def cilium_ingress(configmap: Mapping[str, Any] | None) -> Detected:
    """Cilium's Ingress listeners, from ``cilium-config``."""
    return _configmap_flag(configmap, "enable-ingress-proxy-protocol", default=False,
                           on=ENVOY_MODE, what="cilium-config")


# --- Envoy Gateway -------------------------------------------------------------------------

def _ctp_setting(policy: Mapping[str, Any]) -> ProxyMode | None:
    """What one ClientTrafficPolicy says about PROXY: None when it says nothing."""
    spec = _dict(policy.get("spec"))
    pp = spec.get("proxyProtocol")
    if isinstance(pp, Mapping):
        return ENVOY_MODE
    enable = spec.get("enableProxyProtocol")
    if isinstance(enable, bool):
        return ENVOY_MODE if enable else "none"
    return None


def _ctp_attaches(policy: Mapping[str, Any], name: str,
                  gateway_labels: Mapping[str, str] | None) -> tuple[bool, list[str], bool]:
    """(to the whole Gateway, to these listeners only, cannot tell)."""
    spec = _dict(policy.get("spec"))
    refs: list[Any] = []
    if isinstance(spec.get("targetRefs"), list):
        refs += spec["targetRefs"]
    if isinstance(spec.get("targetRef"), Mapping):
        refs.append(spec["targetRef"])
    whole, sections, unsure = False, [], False
    for raw_ref in refs:
        ref = _dict(raw_ref)
        if (ref.get("group") != GATEWAY_GROUP or ref.get("kind") != "Gateway"
                or ref.get("name") != name):
            continue
        section = ref.get("sectionName")
        if isinstance(section, str) and section:
            sections.append(section)
        else:
            whole = True
    selectors = spec.get("targetSelectors")
    for raw_sel in selectors if isinstance(selectors, list) else []:
        sel = _dict(raw_sel)
        if sel.get("kind") != "Gateway" or sel.get("group", GATEWAY_GROUP) != GATEWAY_GROUP:
            continue
        if sel.get("matchExpressions") or gateway_labels is None:
            # Expressions are not evaluated here; without the labels nothing can be.
            unsure = True
            continue
        match = _dict(sel.get("matchLabels"))
        if all(gateway_labels.get(k) == v for k, v in match.items()):
            whole = True
    return whole, sections, unsure


def _age_key(policy: Mapping[str, Any]) -> tuple[str, str, str]:
    # RFC 3339 UTC timestamps as the API server writes them sort as text.
    meta = _dict(policy.get("metadata"))
    return (str(meta.get("creationTimestamp", "")), str(meta.get("namespace", "")),
            str(meta.get("name", "")))


def envoy_gateway(policies: Iterable[Mapping[str, Any]], namespace: str, name: str,
                  gateway_labels: Mapping[str, str] | None = None) -> Detected:
    """From the ClientTrafficPolicies (any namespace; only the Gateway's count) for Gateway
    ``namespace/name``. A listener-scoped policy that would make one listener differ from
    the rest gives ``unknown``: one target speaks one way on all its ports."""
    whole: list[tuple[Mapping[str, Any], ProxyMode]] = []
    per_listener: list[tuple[str, str, ProxyMode]] = []
    for policy in policies:
        if not isinstance(policy, Mapping):
            continue
        if _dict(policy.get("metadata")).get("namespace") != namespace:
            continue
        setting = _ctp_setting(policy)
        if setting is None:
            continue
        is_whole, sections, unsure = _ctp_attaches(policy, name, gateway_labels)
        if unsure:
            return Detected("unknown", f"ClientTrafficPolicy {_ref(policy)} sets PROXY "
                            "through targetSelectors that cannot be evaluated here")
        if is_whole:
            whole.append((policy, setting))
        per_listener += [(_ref(policy), s, setting) for s in sections]
    base: ProxyMode = "none"
    reason = f"no ClientTrafficPolicy for Gateway {namespace}/{name} sets proxyProtocol"
    if whole:
        oldest, base = min(whole, key=lambda item: _age_key(item[0]))
        field = ("proxyProtocol" if isinstance(_dict(oldest.get("spec")).get("proxyProtocol"),
                                               Mapping) else "enableProxyProtocol")
        state = "on" if base != "none" else "off"
        reason = f"ClientTrafficPolicy {_ref(oldest)} {field} {state}"
    for ref, section, setting in sorted(per_listener):
        if setting != base:
            return Detected("unknown", f"ClientTrafficPolicy {ref} sets PROXY "
                            f"{'on' if setting != 'none' else 'off'} for listener {section} "
                            "only")
    return Detected(base, reason)


# --- NGINX Gateway Fabric ------------------------------------------------------------------

def nginxproxy_ref_of_gatewayclass(gatewayclass: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, name) of the NginxProxy a GatewayClass points to; None without one (a
    reference without namespace is ignored by NGINX Gateway Fabric too)."""
    ref = _dict(_dict(gatewayclass.get("spec")).get("parametersRef"))
    if ref.get("kind") != "NginxProxy" or ref.get("group") != "gateway.nginx.org":
        return None
    namespace, name = ref.get("namespace"), ref.get("name")
    if not isinstance(namespace, str) or not namespace or not isinstance(name, str) or not name:
        return None
    return namespace, name


def nginxproxy_ref_of_gateway(gateway: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, name) of the NginxProxy a Gateway points to: always in its namespace."""
    spec = _dict(gateway.get("spec"))
    ref = _dict(_dict(spec.get("infrastructure")).get("parametersRef"))
    if ref.get("kind") != "NginxProxy" or ref.get("group") != "gateway.nginx.org":
        return None
    namespace = _dict(gateway.get("metadata")).get("namespace")
    name = ref.get("name")
    if not isinstance(namespace, str) or not namespace or not isinstance(name, str) or not name:
        return None
    return namespace, name


def _np_mode(nginxproxy: Mapping[str, Any] | None) -> object:
    if nginxproxy is None:
        return None
    return _dict(_dict(nginxproxy.get("spec")).get("rewriteClientIP")).get("mode")


def nginx_gateway_fabric(gateway_nginxproxy: Mapping[str, Any] | None,
                         gatewayclass_nginxproxy: Mapping[str, Any] | None) -> Detected:
    """From the NginxProxy objects the Gateway and its class reference (None: no reference).
    A mode set on the Gateway's overrides the class's."""
    for np in (gateway_nginxproxy, gatewayclass_nginxproxy):
        mode = _np_mode(np)
        if mode is None or np is None:
            continue
        where = f"NginxProxy {_ref(np)} rewriteClientIP.mode={mode}"
        if mode == "ProxyProtocol":
            return Detected(NGINX_MODE, where)
        if mode == "XForwardedFor":
            return Detected("none", where)
        return Detected("unknown", f"{where} is not a mode we know")
    return Detected("none", "no NginxProxy sets rewriteClientIP.mode")


# --- Istio ---------------------------------------------------------------------------------

def istio_annotations(gateway: Mapping[str, Any]) -> Mapping[str, Any]:
    """The annotations Istio puts on a Gateway API gateway's pods: the Gateway's
    ``spec.infrastructure.annotations`` when set, else its own."""
    infra = _dict(_dict(gateway.get("spec")).get("infrastructure"))
    if isinstance(infra.get("annotations"), Mapping):
        return _dict(infra["annotations"])
    return _dict(_dict(gateway.get("metadata")).get("annotations"))


def _topology_proxy(config: Mapping[str, Any]) -> object:
    return _dict(config.get("gatewayTopology")).get("proxyProtocol")


def istio(annotations: Mapping[str, Any],
          mesh_default_config: Mapping[str, Any] | None = None) -> Detected:
    """From the gateway pods' ``proxy.istio.io/config`` annotation (YAML or JSON) and the
    mesh-wide ``defaultConfig`` (None: not read). Fields the annotation leaves out come
    from the mesh default, so without it only a "yes" can be certain."""
    raw = annotations.get(ISTIO_PROXY_CONFIG)
    if raw is not None:
        try:
            config = yaml.safe_load(raw) if isinstance(raw, str) else None
        except yaml.YAMLError:
            config = None
        if not isinstance(config, Mapping):
            return Detected("unknown", f"annotation {ISTIO_PROXY_CONFIG} is not a ProxyConfig")
        value = _topology_proxy(config)
        if isinstance(value, Mapping):
            return Detected(ENVOY_MODE,
                            f"annotation {ISTIO_PROXY_CONFIG} gatewayTopology.proxyProtocol")
        if value is not None:
            return Detected("unknown", f"annotation {ISTIO_PROXY_CONFIG} "
                            "gatewayTopology.proxyProtocol is not an object")
    if mesh_default_config is None:
        return Detected("unknown", "gatewayTopology.proxyProtocol not set on the gateway; "
                        "the mesh-wide defaultConfig was not read")
    if isinstance(_topology_proxy(mesh_default_config), Mapping):
        return Detected(ENVOY_MODE, "mesh defaultConfig gatewayTopology.proxyProtocol")
    return Detected("none", "neither the gateway nor the mesh defaultConfig sets "
                    "gatewayTopology.proxyProtocol")
