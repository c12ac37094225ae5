"""Read-modify-write of one ConfigMap with optimistic concurrency.

The change is a function of the current object, so after a 409 it is simply re-applied to the
fresh copy: another editor's change and ours both survive.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from hairpin_proxy.kube.client import ApiError, JsonObj, KubeClient, resource_path

# Given the current ConfigMap (None when absent), the object to write, or None for "as is".
Mutate = Callable[[JsonObj | None], JsonObj | None]

MANAGED_BY = {"app.kubernetes.io/managed-by": "hairpin-proxy"}


class _Unknown:
    pass


UNKNOWN = _Unknown()


async def write_configmap(client: KubeClient, namespace: str, name: str, mutate: Mutate, *,
                          current: JsonObj | _Unknown | None = UNKNOWN, attempts: int = 6,
                          on_conflict: Callable[[], None] | None = None) -> str:
    """Apply ``mutate``; returns "unchanged", "updated" or "created".

    ``current`` is the cached object (skips a GET when it is fresh); on a conflict the
    object is re-read from the API. Raises ApiError when the conflicts do not stop.
    """
    path = resource_path("v1", "configmaps", namespace, name)
    obj = await client.get(path) if isinstance(current, _Unknown) else current
    for _ in range(attempts):
        desired = mutate(copy.deepcopy(obj) if obj is not None else None)
        if desired is None:
            return "unchanged"
        try:
            if obj is None:
                desired.setdefault("apiVersion", "v1")
                desired.setdefault("kind", "ConfigMap")
                desired.setdefault("metadata", {}).update({"name": name, "namespace": namespace})
                await client.create(resource_path("v1", "configmaps", namespace), desired)
                return "created"
            meta = desired.setdefault("metadata", {})
            meta["resourceVersion"] = (obj.get("metadata") or {}).get("resourceVersion", "")
            await client.replace(path, desired)
            return "updated"
        except ApiError as exc:
            if exc.status != 409:
                raise
            if on_conflict is not None:
                on_conflict()
            obj = await client.get(path)
    raise ApiError(409, "Conflict", f"configmap {namespace}/{name}: still conflicting after "
                                    f"{attempts} attempts")
