"""The scale subresource of Deployments (autoscaling/v1 Scale), as the API server serves it:
GET reads the Scale view of the object, PUT and PATCH change `spec.replicas` through it (the
only field a Scale writes), and the answer is the Scale of the updated object."""

from __future__ import annotations

import copy
from typing import Any

Obj = dict[str, Any]
# The resources (group, plural) that have the subresource here.
SCALABLE = {("apps", "deployments")}


def scale_of(obj: Obj) -> Obj:
    meta = obj["metadata"]
    selector = (obj.get("spec") or {}).get("selector") or {}
    labels = selector.get("matchLabels") or {}
    return {
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                          "creationTimestamp") if k in meta},
        "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 1)},
        # metav1.FormatLabelSelector of matchLabels (sorted, as the API server prints them).
        "status": {"replicas": (obj.get("status") or {}).get("replicas", 0),
                   "selector": ",".join(f"{k}={v}" for k, v in sorted(labels.items()))},
    }


def with_scale(obj: Obj, scale: Obj) -> Obj:
    """The object with the Scale's replicas; anything else in the Scale is ignored."""
    replicas = (scale.get("spec") or {}).get("replicas")
    if not isinstance(replicas, int) or replicas < 0:
        raise ValueError(f"spec.replicas: Invalid value: {replicas!r}: must be greater than "
                         "or equal to 0")
    new = copy.deepcopy(obj)
    new.setdefault("spec", {})["replicas"] = replicas
    return new
