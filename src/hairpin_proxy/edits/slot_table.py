"""The slot table's ConfigMap data and the per-slot proxy Services, as the controller writes
them and ``render`` prints them. Pure; the controller's TargetsWriter applies them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hairpin_proxy.edits.configmap import MANAGED_BY
from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.targets import table
from hairpin_proxy.targets.routing_plan import Plan
from hairpin_proxy.targets.slots import listen_ports, service_name
from hairpin_proxy.targets.table import PUBLISHED_KEY, TABLE_KEY

SLOT_LABEL = "hairpin-proxy.io/slot"
TARGET_ANNOTATION = "hairpin-proxy.io/target"


def table_data(p: Plan, before: Mapping[str, float], now: float) -> dict[str, str]:
    """The ConfigMap's data for ``p``: the table, and when each target first appeared."""
    entries = [table.entry_for(target, p.slots[key]) for key, target in p.targets.items()]
    published = {key: before.get(key, now) for key in p.targets}
    return {TABLE_KEY: table.encode(entries),
            PUBLISHED_KEY: json.dumps(published, sort_keys=True, indent=1) + "\n"}


def slot_service(namespace: str, slot: int, key: str, proxy_service: JsonObj,
                 owner: JsonObj) -> JsonObj:
    """Our Service for ``slot``: the proxy pods (the main Service's selector and IP families),
    ports 80/443 to the slot's pod ports."""
    spec = proxy_service.get("spec") or {}
    http, tls = listen_ports(slot)
    out_spec: dict[str, Any] = {
        "type": "ClusterIP",
        "selector": dict(spec.get("selector") or {}),
        "ports": [{"name": "http", "port": 80, "targetPort": http, "protocol": "TCP"},
                  {"name": "https", "port": 443, "targetPort": tls, "protocol": "TCP"}]}
    for k in ("ipFamilyPolicy", "ipFamilies"):
        if k in spec:
            out_spec[k] = spec[k]
    meta = owner.get("metadata") or {}
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": service_name(slot), "namespace": namespace,
                         "labels": {**MANAGED_BY, SLOT_LABEL: str(slot)},
                         "annotations": {TARGET_ANNOTATION: key},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                                              "name": meta.get("name"), "uid": meta.get("uid"),
                                              "blockOwnerDeletion": False}]},
            "spec": out_spec}
