"""Holds: what keeps the rules' withdrawal possible however an uninstall deletes things.

``kubectl delete -f`` (or ``-k``, or ``helm uninstall``) sends every DELETE at once: our
ServiceAccount, our Roles and bindings may all be gone a few milliseconds after the namespace
starts terminating, and the withdrawal of the DNS rules would then be refused (401, 403),
leaving every managed name on a proxy that is gone. So two objects carry the finalizer
``FINALIZER`` from before our first rule is written until the rules are withdrawn:

- the kube-system Role that lets us write the CoreDNS ConfigMap (the RBAC authorizer reads
  Roles and bindings whether or not they are Terminating: rule.go's VisitRulesFor);
- our ServiceAccount (its tokens stay valid while it is Terminating, for the one-minute leeway
  claims.go grants after the deletion began; gone, they are refused at once).

A held Role needs a binding that outlives it, and so does the request that lets the
ServiceAccount go: those bindings are ours, made at run time (not in any manifest, so no
uninstall deletes them) and owned by what they serve, so that the garbage collector removes
them once it is gone:

- ``WITHDRAWAL`` RoleBinding in kube-system: the held Role, to our account; owned by the Role;
- ``RELEASE`` Role and RoleBinding in our namespace: patch our ServiceAccount; owned by it
  (the namespace controller deletes pods before anything else, so they outlive our pods).

The Role is let go first, then the ServiceAccount: the last request we make.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from hairpin_proxy.edits.configmap import MANAGED_BY
from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube.client import ApiError, KubeClient, resource_path

log = logging.getLogger("hairpin_proxy.controller")

FINALIZER = "hairpin-proxy.io/withdraw-rules"
SERVICE_ACCOUNT = "hairpin-proxy-controller"
COREDNS_ROLE = "hairpin-proxy-controller-coredns"
WITHDRAWAL = "hairpin-proxy-controller-withdrawal"
RELEASE = "hairpin-proxy-controller-release"
RBAC = "rbac.authorization.k8s.io/v1"
LABELS = {"app.kubernetes.io/name": "hairpin-proxy",
          "app.kubernetes.io/component": "controller",
          "app.kubernetes.io/part-of": "hairpin-proxy", **MANAGED_BY}


# --- pure ----------------------------------------------------------------------------------


def finalizers_after(obj: JsonObj | None, hold: bool) -> list[str] | None:
    """The finalizer list ``obj`` should get to hold (or let go), or None when there is
    nothing to write: already so, gone, or being deleted (no finalizer may be added then)."""
    if obj is None:
        return None
    meta = obj.get("metadata") or {}
    current = [str(f) for f in meta.get("finalizers") or ()]
    if hold:
        if FINALIZER in current or meta.get("deletionTimestamp"):
            return None
        return [*current, FINALIZER]
    return [f for f in current if f != FINALIZER] if FINALIZER in current else None


def deleting(objs: Iterable[JsonObj | None]) -> bool:
    """Whether any of ``objs`` has started being deleted."""
    return any(o is not None and (o.get("metadata") or {}).get("deletionTimestamp")
               for o in objs)


def owner_gone(ref: JsonObj, owner_obj: JsonObj | None) -> bool:
    """Whether the owner an ownerReference names is gone, replaced, or being deleted."""
    if owner_obj is None:
        return True
    meta = owner_obj.get("metadata") or {}
    return meta.get("uid") != ref.get("uid") or bool(meta.get("deletionTimestamp"))


def held(obj: JsonObj | None) -> bool:
    return obj is not None and FINALIZER in ((obj.get("metadata") or {}).get("finalizers") or ())


def owner(kind: str, obj: JsonObj, api_version: str) -> JsonObj:
    meta = obj.get("metadata") or {}
    return {"apiVersion": api_version, "kind": kind, "name": meta.get("name"),
            "uid": meta.get("uid")}


def binding(name: str, namespace: str, role: str, account_namespace: str,
            owned_by: JsonObj) -> JsonObj:
    return {"apiVersion": RBAC, "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(LABELS),
                         "ownerReferences": [owned_by]},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT,
                          "namespace": account_namespace}]}


def release_role(namespace: str, owned_by: JsonObj) -> JsonObj:
    return {"apiVersion": RBAC, "kind": "Role",
            "metadata": {"name": RELEASE, "namespace": namespace, "labels": dict(LABELS),
                         "ownerReferences": [owned_by]},
            "rules": [{"apiGroups": [""], "resources": ["serviceaccounts"],
                       "resourceNames": [SERVICE_ACCOUNT], "verbs": ["get", "patch"]}]}


# --- Kubernetes ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Place:
    """Where the held objects are."""

    namespace: str            # ours: the ServiceAccount, the RELEASE Role and binding
    dns_namespace: str        # the CoreDNS ConfigMap's: the Role and the WITHDRAWAL binding

    @property
    def account(self) -> str:
        return resource_path("v1", "serviceaccounts", self.namespace, SERVICE_ACCOUNT)

    @property
    def role(self) -> str:
        return resource_path(RBAC, "roles", self.dns_namespace, COREDNS_ROLE)


async def _set_finalizers(client: KubeClient, path: str, hold: bool) -> JsonObj | None:
    """Add or remove our finalizer (optimistically: a conflict re-reads); the object after,
    or None when it is gone."""
    for _ in range(5):
        obj = await client.get(path)
        finalizers = finalizers_after(obj, hold)
        if finalizers is None:
            return obj
        assert obj is not None
        version = (obj.get("metadata") or {}).get("resourceVersion")
        try:
            return await client.merge_patch(path, {"metadata": {
                "finalizers": finalizers, "resourceVersion": version}})
        except ApiError as exc:
            if exc.status == 404:
                return None
            if exc.status != 409:
                raise
    raise ApiError(409, "Conflict", f"{path}: kept changing while its finalizers were edited")


async def _create(client: KubeClient, obj: JsonObj) -> None:
    meta = obj["metadata"]
    kind = "roles" if obj["kind"] == "Role" else "rolebindings"
    try:
        await client.create(resource_path(RBAC, kind, meta["namespace"]), obj)
    except ApiError as exc:
        if exc.status != 409:  # made by an earlier start, still owned by the same object
            raise


async def hold(client: KubeClient, place: Place) -> bool:
    """Hold the Role and the ServiceAccount, each with the binding that outlives it; whether
    either exists to be held."""
    role = await _set_finalizers(client, place.role, hold=True)
    if role is not None and held(role):
        await _create(client, binding(WITHDRAWAL, place.dns_namespace, COREDNS_ROLE,
                                      place.namespace, owner("Role", role, RBAC)))
    account = await _set_finalizers(client, place.account, hold=True)
    if account is not None and held(account):
        by_account = owner("ServiceAccount", account, "v1")
        await _create(client, release_role(place.namespace, by_account))
        await _create(client, binding(RELEASE, place.namespace, RELEASE, place.namespace,
                                      by_account))
    return held(role) or held(account)


async def release(client: KubeClient, place: Place) -> None:
    """Let the Role go, then the ServiceAccount (after which our token is refused)."""
    for what, path in ((f"Role {place.dns_namespace}/{COREDNS_ROLE}", place.role),
                       (f"ServiceAccount {place.namespace}/{SERVICE_ACCOUNT}", place.account)):
        before = await client.get(path)
        if held(before):
            await _set_finalizers(client, path, hold=False)
            log.info("let go of an object held for the withdrawal of the rules",
                     extra={"object": what})


__all__ = ["FINALIZER", "Place", "deleting", "finalizers_after", "held", "hold", "release"]
