"""Only what the controller reads of an Ingress, for its caches.

A cached Ingress is read by the host policy (namespace, name, class, hosts), by the policy
cache (uid and resourceVersion), by the Events recorded on it (uid, resourceVersion), by the
rules budget (creationTimestamp) and by host verification (status addresses). Everything else
(other annotations, backends, paths, managedFields) is dropped as the object arrives: at 10,000
Ingresses that is most of the controller's memory. The result has the shape of the original
object, so every reader works on either.
"""

from __future__ import annotations

from typing import Any

from hairpin_proxy.kube.client import JsonObj
from hairpin_proxy.policy import CLASS_ANNOTATION

_META = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")


def _pick(src: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: src[k] for k in keys if k in src} if isinstance(src, dict) else {}


def slim_ingress(obj: JsonObj) -> JsonObj:
    """The fields of ``obj`` the controller reads; malformed parts are kept as they are, so
    that the policy still reports them."""
    out: JsonObj = {}
    for key in ("apiVersion", "kind"):
        if key in obj:
            out[key] = obj[key]
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        slim_meta = _pick(meta, _META)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict) and CLASS_ANNOTATION in annotations:
            slim_meta["annotations"] = {CLASS_ANNOTATION: annotations[CLASS_ANNOTATION]}
        elif annotations is not None and not isinstance(annotations, dict):
            slim_meta["annotations"] = annotations
        out["metadata"] = slim_meta
    elif "metadata" in obj:
        out["metadata"] = meta
    spec = obj.get("spec")
    if isinstance(spec, dict):
        slim_spec = _pick(spec, ("ingressClassName",))
        rules = spec.get("rules")
        if isinstance(rules, list):
            slim_spec["rules"] = [_pick(r, ("host",)) if isinstance(r, dict) else r
                                  for r in rules]
        elif "rules" in spec:
            slim_spec["rules"] = rules
        tls = spec.get("tls")
        if isinstance(tls, list):
            slim_spec["tls"] = [_pick(t, ("hosts",)) if isinstance(t, dict) else t
                                for t in tls]
        elif "tls" in spec:
            slim_spec["tls"] = tls
        out["spec"] = slim_spec
    elif "spec" in obj:
        out["spec"] = spec
    status = obj.get("status")
    if isinstance(status, dict) and isinstance(status.get("loadBalancer"), dict):
        out["status"] = {"loadBalancer": status["loadBalancer"]}
    return out


def slim_service(obj: JsonObj) -> JsonObj:
    """What host verification reads of a Service: its type and load balancer status."""
    out: JsonObj = {k: obj[k] for k in ("apiVersion", "kind") if k in obj}
    out["metadata"] = _pick(obj.get("metadata"), _META)
    spec = obj.get("spec")
    out["spec"] = _pick(spec, ("type",))
    status = obj.get("status")
    if isinstance(status, dict) and isinstance(status.get("loadBalancer"), dict):
        out["status"] = {"loadBalancer": status["loadBalancer"]}
    return out
