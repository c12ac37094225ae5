"""Read-modify-write of one ConfigMap with optimistic concurrency.

The change is a function of the current object, so after a 409 it is simply re-applied to the
fresh copy: another editor's change and ours both survive. The changes themselves are pure
(hairpin_proxy.edits).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

from hairpin_proxy.jsonobj import JsonObj, Mutate
from hairpin_proxy.kube.client import ApiError, KubeClient, resource_path


class _Unknown:
    pass


UNKNOWN = _Unknown()


@dataclass(frozen=True)
class WriteResult:
    # "unchanged", "updated" or "created"
    outcome: str
    # The object as the API now holds it (None: absent and left absent).
    obj: JsonObj | None
    # resourceVersion of the object our write replaced ("" when created or unchanged).
    replaced: str = ""

    @property
    def changed(self) -> bool:
        return self.outcome != "unchanged"


async def write_configmap(client: KubeClient, namespace: str, name: str, mutate: Mutate, *,
                          current: JsonObj | _Unknown | None = UNKNOWN, attempts: int = 6,
                          on_conflict: Callable[[], None] | None = None) -> WriteResult:
    """Apply ``mutate``: write the result unless it is None.

    ``current`` is the cached object (skips a GET when it is fresh); on a conflict the
    object is re-read from the API. Raises ApiError when the conflicts do not stop.
    """
    path = resource_path("v1", "configmaps", namespace, name)
    obj = await client.get(path) if isinstance(current, _Unknown) else current
    for _ in range(attempts):
        desired = mutate(copy.deepcopy(obj) if obj is not None else None)
        if desired is None:
            return WriteResult("unchanged", obj)
        try:
            if obj is None:
                desired.setdefault("apiVersion", "v1")
                desired.setdefault("kind", "ConfigMap")
                desired.setdefault("metadata", {}).update({"name": name, "namespace": namespace})
                made = await client.create(resource_path("v1", "configmaps", namespace), desired)
                return WriteResult("created", made)
            meta = desired.setdefault("metadata", {})
            base = str((obj.get("metadata") or {}).get("resourceVersion") or "")
            meta["resourceVersion"] = base
            return WriteResult("updated", await client.replace(path, desired), base)
        except ApiError as exc:
            # 404: deleted since we read it; re-read, and create it if that is the change.
            if exc.status not in (404, 409):
                raise
            if exc.status == 409 and on_conflict is not None:
                on_conflict()
            obj = await client.get(path)
    raise ApiError(409, "Conflict", f"configmap {namespace}/{name}: still conflicting after "
                                    f"{attempts} attempts")
