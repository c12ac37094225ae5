"""The resource types the fake API server serves, keyed as the real API addresses them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    # Strategies that track spec changes set metadata.generation; others leave it unset.
    has_generation: bool = False
    has_status: bool = False
    # PUT on a missing name creates it for these kinds only (as the real registry strategies).
    create_on_update: bool = False
    # Delete answers with the object instead of a Status for these kinds.
    delete_returns_object: bool = False
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """`ingresses.networking.k8s.io` or `configmaps`: how error messages name it."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def singular(self) -> str:
        return self.kind.lower()

    def base_path(self, namespace: str | None = None) -> str:
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            return f"{root}/namespaces/{namespace}/{self.plural}"
        return f"{root}/{self.plural}"


RESOURCES: tuple[ResourceType, ...] = (
    ResourceType("networking.k8s.io", "v1", "ingresses", "Ingress", True,
                 has_generation=True, has_status=True, short_names=("ing",)),
    ResourceType("networking.k8s.io", "v1", "ingressclasses", "IngressClass", False,
                 has_generation=True),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, short_names=("cm",)),
    ResourceType("", "v1", "services", "Service", True, has_status=True, short_names=("svc",)),
    ResourceType("", "v1", "endpoints", "Endpoints", True, create_on_update=True,
                 short_names=("ep",)),
    ResourceType("", "v1", "namespaces", "Namespace", False, has_status=True,
                 delete_returns_object=True, short_names=("ns",)),
    ResourceType("", "v1", "pods", "Pod", True, has_generation=True, has_status=True,
                 delete_returns_object=True, short_names=("po",)),
    ResourceType("", "v1", "events", "Event", True, create_on_update=True, short_names=("ev",)),
    ResourceType("events.k8s.io", "v1", "events", "Event", True, create_on_update=True),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True, create_on_update=True),
    ResourceType("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True),
    ResourceType("apps", "v1", "deployments", "Deployment", True,
                 has_generation=True, has_status=True, short_names=("deploy",)),
    ResourceType("apps", "v1", "daemonsets", "DaemonSet", True,
                 has_generation=True, has_status=True, short_names=("ds",)),
    ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
    ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
)

_BY_PATH: dict[tuple[str, str, str], ResourceType] = {
    (r.group, r.version, r.plural): r for r in RESOURCES
}


def by_path(group: str, version: str, plural: str) -> ResourceType | None:
    return _BY_PATH.get((group, version, plural))


def by_api_version_kind(api_version: str, kind: str) -> ResourceType | None:
    for r in RESOURCES:
        if r.api_version == api_version and r.kind == kind:
            return r
    return None


def resolve(ref: str | ResourceType) -> ResourceType:
    """Find a type by kind, plural, short name or `plural.group` (core wins on a tie, as kubectl).

    Raises KeyError for an unknown reference, so a typo in a test fails loudly.
    """
    if isinstance(ref, ResourceType):
        return ref
    low = ref.lower()
    for r in RESOURCES:
        if low in (r.plural, r.singular, r.qualified, f"{r.singular}.{r.group}", *r.short_names):
            return r
    raise KeyError(f"unknown resource type {ref!r}")


def groups() -> dict[str, list[str]]:
    """group -> versions served ("" is the core group)."""
    out: dict[str, list[str]] = {}
    for r in RESOURCES:
        versions = out.setdefault(r.group, [])
        if r.version not in versions:
            versions.append(r.version)
    return out
