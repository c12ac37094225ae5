"""Which versions of an API group the server serves, resource by resource.

Custom resources (the Gateway API, an implementation's policies) may be installed or removed
at any time: their watches are started from what discovery says, never assumed.
"""

from __future__ import annotations

from typing import Any

from hairpin_proxy.kube.client import KubeClient


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


async def served(client: KubeClient, group: str) -> dict[str, str]:
    """plural → "group/version" for every resource of ``group`` the server serves now, in its
    preferred version where that serves it, else the first served version that does (the
    server lists versions most preferred first). Empty when the group is not served."""
    doc = await client.get(f"/apis/{group}")
    if doc is None:
        return {}
    preferred = _dict(doc.get("preferredVersion")).get("groupVersion")
    versions = [v.get("groupVersion") for v in doc.get("versions") or () if isinstance(v, dict)]
    order = [gv for gv in dict.fromkeys([preferred, *versions]) if isinstance(gv, str) and gv]
    out: dict[str, str] = {}
    for group_version in order:
        listing = await client.get(f"/apis/{group_version}")
        for resource in (listing or {}).get("resources") or ():
            name = _dict(resource).get("name")
            # "httproutes/status" and other subresources are not collections.
            if isinstance(name, str) and name and "/" not in name:
                out.setdefault(name, group_version)
    return out
