"""The resource types the fake API server serves, keyed as the real API addresses them."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


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
    categories: tuple[str, ...] = ()
    # Custom resources: every served version of a definition shares one storage, kept at
    # `storage_version`; generation counts every non-metadata change; PUT needs a version.
    crd: bool = False
    storage_version: str = ""
    # Sent as a `Warning: 299` header on every request to this version (deprecated versions).
    warning: str = ""

    @property
    def storage_id(self) -> str:
        """What objects are stored under: all served versions of a definition share it."""
        return self.qualified

    @property
    def storage_api_version(self) -> str:
        version = self.storage_version or self.version
        return f"{self.group}/{version}" if self.group else version

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
    ResourceType("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True,
                 has_generation=True, short_names=("netpol",)),
    ResourceType("", "v1", "nodes", "Node", False, has_status=True, short_names=("no",)),
    ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding",
                 False),
    ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True, short_names=("sa",)),
    ResourceType("apps", "v1", "replicasets", "ReplicaSet", True,
                 has_generation=True, has_status=True, short_names=("rs",)),
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


_KUBE_VERSION = re.compile(r"^v([1-9][0-9]*)(?:(alpha|beta)([1-9][0-9]*))?$")


def version_order(version: str) -> tuple[int, int, int, int, str]:
    """Sort key putting versions in the API server's "kube-aware" order: GA before beta
    before alpha, higher numbers first, then anything else alphabetically."""
    m = _KUBE_VERSION.match(version)
    if m is None:
        return (1, 0, 0, 0, version)
    level = {"": 0, "beta": 1, "alpha": 2}[m.group(2) or ""]
    return (0, level, -int(m.group(1)), -int(m.group(3) or 0), "")


def storage_version_hash(group: str, version: str, kind: str) -> str:
    """The opaque `storageVersionHash` discovery publishes: the first 8 bytes of the SHA-256
    of group/version/kind, base64 encoded."""
    digest = hashlib.sha256(f"{group}/{version}/{kind}".encode()).digest()
    return base64.b64encode(digest[:8]).decode()


@dataclass(frozen=True)
class CrdVersion:
    name: str
    served: bool = True
    storage: bool = False
    status: bool = True  # the status subresource
    deprecation_warning: str = ""


@dataclass(frozen=True)
class CrdSpec:
    """What the fake needs of a CustomResourceDefinition: names, scope and versions."""

    group: str
    plural: str
    kind: str
    versions: tuple[CrdVersion, ...]
    namespaced: bool = True
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The CRD's own name, `<plural>.<group>`."""
        return f"{self.plural}.{self.group}"

    @property
    def storage(self) -> str:
        return next(v.name for v in self.versions if v.storage)

    def check(self) -> None:
        if "." not in self.group:
            raise ValueError(f"{self.group!r}: a custom resource group must contain a dot")
        if sum(v.storage for v in self.versions) != 1:
            raise ValueError(f"{self.name}: exactly one version must be the storage version")
        if not any(v.served for v in self.versions):
            raise ValueError(f"{self.name}: no version is served")
        if len({v.name for v in self.versions}) != len(self.versions):
            raise ValueError(f"{self.name}: a version is listed twice")

    def types(self) -> list[ResourceType]:
        """One ResourceType per served version."""
        return [
            ResourceType(self.group, v.name, self.plural, self.kind, self.namespaced,
                         has_generation=True, has_status=v.status, short_names=self.short_names,
                         categories=self.categories, crd=True, storage_version=self.storage,
                         warning=v.deprecation_warning)
            for v in self.versions if v.served
        ]


def crd(group: str, versions: str | Iterable[str], plural: str, kind: str, *,
        namespaced: bool = True, served: Iterable[str] | None = None,
        storage: str | None = None, status: bool = True,
        short_names: Iterable[str] = (), categories: Iterable[str] = (),
        deprecated: Mapping[str, str] | None = None) -> CrdSpec:
    """A CrdSpec from plain arguments: `versions` are all the versions the definition lists,
    `served` those served (all when None), `storage` the storage version (default: the first
    served one in the server's preference order), `deprecated` version -> warning text."""
    names = [versions] if isinstance(versions, str) else list(versions)
    served_set = set(names if served is None else served)
    if not served_set <= set(names):
        raise ValueError(f"served versions {sorted(served_set - set(names))} are not listed")
    storage = storage or sorted(served_set or names, key=version_order)[0]
    return CrdSpec(group, plural, kind, tuple(
        CrdVersion(n, n in served_set, n == storage, status, (deprecated or {}).get(n, ""))
        for n in names), namespaced=namespaced, short_names=tuple(short_names),
        categories=tuple(categories))


@dataclass
class _Installed:
    spec: CrdSpec
    types: list[ResourceType]
    terminating: bool = False
    uid: str = ""


@dataclass
class Registry:
    """The types one server serves right now: the built-in ones plus installed definitions."""

    crds: dict[str, _Installed] = field(default_factory=dict)

    def types(self) -> list[ResourceType]:
        out = list(RESOURCES)
        for name in sorted(self.crds):
            out.extend(self.crds[name].types)
        return out

    def storages(self) -> list[ResourceType]:
        """One type per storage: the built-in types and each definition's storage version."""
        out = list(RESOURCES)
        for name in sorted(self.crds):
            inst = self.crds[name]
            out.append(next((t for t in inst.types if t.version == inst.spec.storage),
                            inst.types[0]))
        return out

    def install(self, spec: CrdSpec, uid: str) -> tuple[_Installed | None, _Installed]:
        """Add or replace a definition; returns (the one replaced or None, the new one)."""
        spec.check()
        for other in self.crds.values():
            if other.spec.name != spec.name and other.spec.group == spec.group and \
                    other.spec.kind == spec.kind:
                raise ValueError(f"kind {spec.kind} is already served by {other.spec.name}")
        old = self.crds.get(spec.name)
        if old is not None and old.terminating:
            raise ValueError(f"{spec.name} is being deleted")
        new = _Installed(spec, spec.types(), uid=old.uid if old else uid)
        self.crds[spec.name] = new
        return old, new

    def remove(self, name: str) -> _Installed | None:
        return self.crds.pop(name, None)

    def installed(self, name: str) -> _Installed | None:
        return self.crds.get(name)

    def by_path(self, group: str, version: str, plural: str) -> ResourceType | None:
        rt = by_path(group, version, plural)
        if rt is not None:
            return rt
        inst = self.crds.get(f"{plural}.{group}")
        if inst is None:
            return None
        return next((t for t in inst.types if t.version == version), None)

    def by_api_version_kind(self, api_version: str, kind: str) -> ResourceType | None:
        for r in self.types():
            if r.api_version == api_version and r.kind == kind:
                return r
        return None

    def resolve(self, ref: str | ResourceType) -> ResourceType:
        """As `resolve`, also knowing installed kinds (their storage version when the reference
        names no version; `plural.version.group` picks one)."""
        if isinstance(ref, ResourceType):
            return ref
        try:
            return resolve(ref)
        except KeyError:
            pass
        low = ref.lower()
        for inst in self.crds.values():
            s = inst.spec
            for t in inst.types:
                if low in (f"{s.plural}.{t.version}.{s.group}",
                           f"{t.singular}.{t.version}.{s.group}"):
                    return t
            if low in (s.plural, s.kind.lower(), s.name, f"{s.kind.lower()}.{s.group}",
                       *s.short_names):
                return next((t for t in inst.types if t.version == s.storage), inst.types[0])
        raise KeyError(f"unknown resource type {ref!r}")

    def terminating(self, rt: ResourceType) -> bool:
        inst = self.crds.get(rt.storage_id) if rt.crd else None
        return inst is not None and inst.terminating

    def groups(self) -> dict[str, list[str]]:
        """group -> served versions, preferred first, in the order /apis lists them: built-in
        groups first; custom groups (lower priority) ordered as the aggregator sorts their
        APIService names `<version>.<group>`."""
        out = groups()
        custom: dict[str, set[str]] = {}
        for inst in self.crds.values():
            custom.setdefault(inst.spec.group, set()).update(t.version for t in inst.types)
        order = sorted(custom, key=lambda g: min(f"{v}.{g}" for v in custom[g]))
        for g in order:
            out[g] = sorted(custom[g], key=version_order)
        return out
