"""A snapshot from a list of objects as the API (or a manifest file) holds them: what
``render`` reads from files and ``doctor`` from its listing. Pure: the objects are kept
whole (a registered source's slimmed as its shell slims them), and only the kinds the source
registry names (hairpin_proxy.sources.registry) are read, besides the Services and the
ConfigMaps the controller reads for itself."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from hairpin_proxy.apis import INGRESS_GROUP
from hairpin_proxy.jsonobj import Obj
from hairpin_proxy.plan.snapshot import PlanSettings, Snapshot
from hairpin_proxy.sources.gateway.model import ROUTE_KINDS, ROUTE_RESOURCES
from hairpin_proxy.sources.registry import REGISTRATIONS, Registration, Resource
from hairpin_proxy.targets.resolve import CILIUM_CONFIGMAP, INGRESS_NGINX_CONFIGMAP

# The snapshot field each resource of the Ingress and Gateway API registrations fills (their
# kinds and groups are the registry's); a registration with claims of its own fills
# ``registered`` and ``extra_facts`` instead.
_FIELDS: Final = {
    "ingresses": "ingresses", "ingressclasses": "ingress_classes",
    "gatewayclasses": "gateway_classes", "gateways": "gateways",
    "listenersets": "listener_sets", "clienttrafficpolicies": "client_traffic_policies",
    "nginxproxies": "nginx_proxies", "namespaces": "namespace_labels",
    **{plural: "routes" for plural in ROUTE_RESOURCES}}
# Groups older manifests still name a registered kind by (render reads files of any age).
_ALIASES: Final = {("extensions", "Ingress"): INGRESS_GROUP}


def _group(obj: Mapping[str, Any]) -> str:
    api = obj.get("apiVersion")
    return api.split("/", 1)[0] if isinstance(api, str) and "/" in api else ""


def _where(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _is(obj: Mapping[str, Any], kind: str, group: str) -> bool:
    return obj.get("kind") == kind and _group(obj) == group


def _settings_configmap(obj: Mapping[str, Any]) -> bool:
    """Whether the controller reads this ConfigMap for a data plane's PROXY setting."""
    ns, name = _where(obj)
    return name == INGRESS_NGINX_CONFIGMAP or (ns, name) == CILIUM_CONFIGMAP


def enabled(settings: PlanSettings) -> tuple[Registration, ...]:
    """The registrations the settings turn on, in the registry's order."""
    return tuple(r for r in REGISTRATIONS if r.name in settings.sources_on)


def _resources(regs: Iterable[Registration]) -> dict[tuple[str, str], tuple[Registration,
                                                                              Resource]]:
    """(group, kind) → the registration and resource that read it (a kind two sources read
    goes to the first, as the registry's order has it)."""
    out: dict[tuple[str, str], tuple[Registration, Resource]] = {}
    for reg in regs:
        for r in reg.resources:
            if r.kind not in ("ConfigMap", "Service"):
                out.setdefault((r.group, r.kind), (reg, r))
    return out


def _sorted(objs: list[Mapping[str, Any]], settings: PlanSettings
            ) -> tuple[dict[str, list[Obj]], dict[str, dict[str, list[Obj]]],
                       dict[str, list[Obj]]]:
    """The objects by snapshot field; the registered sources' by name and group; their facts
    by "<registration>/<plural>"."""
    table = _resources(enabled(settings))
    fields: dict[str, list[Obj]] = {}
    registered: dict[str, dict[str, list[Obj]]] = {}
    extra: dict[str, list[Obj]] = {}
    for obj in objs:
        kind = str(obj.get("kind"))
        group = _ALIASES.get((_group(obj), kind), _group(obj))
        found = table.get((group, kind))
        if found is None:
            continue
        reg, r = found
        if reg.claims_of is None:
            fields.setdefault(_FIELDS.get(r.plural, ""), []).append(obj)
        elif r.names and _where(obj)[1] not in r.names:
            continue
        elif r.plural in reg.claiming:
            slim = r.slim(dict(obj)) if r.slim else obj
            registered.setdefault(reg.name, {}).setdefault(group, []).append(slim)
        else:
            extra.setdefault(f"{reg.name}/{r.plural}", []).append(
                r.slim(dict(obj)) if r.slim else obj)
    return fields, registered, extra


def registered_of(objects: Iterable[Mapping[str, Any]], settings: PlanSettings
                  ) -> tuple[dict[str, dict[str, list[Obj]]], dict[str, list[Obj]]]:
    """The snapshot's ``registered`` and ``extra_facts`` from ``objects``."""
    _, registered, extra = _sorted(list(objects), settings)
    return registered, extra


def snapshot_of(objects: Iterable[Mapping[str, Any]], settings: PlanSettings, *,
                targets_configmap: str, now: float = 0.0,
                classes_known: bool | None = None) -> Snapshot:
    """``classes_known``: whether the IngressClasses are among ``objects`` (None: when any
    is; an offline input that has none leaves the class names unchecked)."""
    objs = list(objects)
    fields, registered, extra = _sorted(objs, settings)
    classes = fields.get("ingress_classes", [])
    known = bool(classes) if classes_known is None else classes_known
    configmaps = [o for o in objs if _is(o, "ConfigMap", "")]
    table = [o for o in configmaps if _where(o) == (settings.namespace, targets_configmap)]
    return Snapshot(
        settings=settings,
        ingresses=fields.get("ingresses", []),
        ingress_classes=classes if known else None,
        gateway_classes=fields.get("gateway_classes", []),
        gateways=fields.get("gateways", []),
        routes=[(str(o["kind"]), o) for o in fields.get("routes", ())
                if o.get("kind") in ROUTE_KINDS],
        listener_sets=fields.get("listener_sets", []),
        registered=registered, extra_facts=extra,
        namespace_labels={_where(o)[1]: {str(k): str(v) for k, v in (
            (o.get("metadata") or {}).get("labels") or {}).items()}
            for o in fields.get("namespace_labels", ())},
        services=[o for o in objs if _is(o, "Service", "")],
        configmaps={"/".join(_where(o)): o for o in configmaps if _settings_configmap(o)},
        client_traffic_policies=fields.get("client_traffic_policies", []),
        nginx_proxies={"/".join(_where(o)): o for o in fields.get("nginx_proxies", ())},
        targets_configmap=table[-1] if table else None,
        now=now)
