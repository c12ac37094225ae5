"""A snapshot from a list of objects as the API (or a manifest file) holds them: what
``render`` reads from files and ``doctor`` from its listing. Pure: the objects are kept
whole, and only the kinds and names the controller watches are read."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hairpin_proxy.gateway.model import GROUP as GATEWAY_GROUP
from hairpin_proxy.gateway.model import ROUTE_KINDS
from hairpin_proxy.plan.snapshot import PlanSettings, Snapshot
from hairpin_proxy.policy import INGRESS_GROUP
from hairpin_proxy.targets.resolve import CILIUM_CONFIGMAP, INGRESS_NGINX_CONFIGMAP

_ENVOY_GROUP = "gateway.envoyproxy.io"
_NGINX_GATEWAY_GROUP = "gateway.nginx.org"


def _group(obj: Mapping[str, Any]) -> str:
    api = obj.get("apiVersion")
    return api.split("/", 1)[0] if isinstance(api, str) and "/" in api else ""


def _where(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _is(obj: Mapping[str, Any], kind: str, *groups: str) -> bool:
    return obj.get("kind") == kind and _group(obj) in groups


def _settings_configmap(obj: Mapping[str, Any]) -> bool:
    """Whether the controller reads this ConfigMap for a data plane's PROXY setting."""
    ns, name = _where(obj)
    return name == INGRESS_NGINX_CONFIGMAP or (ns, name) == CILIUM_CONFIGMAP


def snapshot_of(objects: Iterable[Mapping[str, Any]], settings: PlanSettings, *,
                targets_configmap: str, now: float = 0.0,
                classes_known: bool | None = None) -> Snapshot:
    """``classes_known``: whether the IngressClasses are among ``objects`` (None: when any
    is; an offline input that has none leaves the class names unchecked)."""
    objs = list(objects)
    classes = [o for o in objs if _is(o, "IngressClass", INGRESS_GROUP)]
    known = bool(classes) if classes_known is None else classes_known
    configmaps = [o for o in objs if _is(o, "ConfigMap", "")]
    table = [o for o in configmaps if _where(o) == (settings.namespace, targets_configmap)]
    return Snapshot(
        settings=settings,
        ingresses=[o for o in objs if _is(o, "Ingress", INGRESS_GROUP, "extensions")],
        ingress_classes=classes if known else None,
        gateway_classes=[o for o in objs if _is(o, "GatewayClass", GATEWAY_GROUP)],
        gateways=[o for o in objs if _is(o, "Gateway", GATEWAY_GROUP)],
        routes=[(str(o["kind"]), o) for o in objs
                if o.get("kind") in ROUTE_KINDS and _group(o) == GATEWAY_GROUP],
        namespace_labels={_where(o)[1]: {str(k): str(v) for k, v in (
            (o.get("metadata") or {}).get("labels") or {}).items()}
            for o in objs if _is(o, "Namespace", "")},
        services=[o for o in objs if _is(o, "Service", "")],
        configmaps={"/".join(_where(o)): o for o in configmaps if _settings_configmap(o)},
        client_traffic_policies=[o for o in objs
                                 if _is(o, "ClientTrafficPolicy", _ENVOY_GROUP)],
        nginx_proxies={"/".join(_where(o)): o for o in objs
                       if _is(o, "NginxProxy", _NGINX_GATEWAY_GROUP)},
        targets_configmap=table[-1] if table else None,
        now=now)
