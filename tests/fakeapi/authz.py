"""Service-account tokens and RBAC, as kube-apiserver checks them.

Authentication (pkg/serviceaccount/claims.go, ``validator.Validate``): a bound token names its
service account by namespace, name and UID. It is refused (401) once the account is gone or
has another UID, and once the account's ``deletionTimestamp`` is older than ``now - leeway``
(``jwt.DefaultLeeway``, one minute): a service account held by a finalizer keeps its tokens
valid for that minute only. (Legacy secret-based tokens, pkg/serviceaccount/legacy.go, are
refused as soon as the account has a deletionTimestamp; they are not modelled.)

Authorization (pkg/registry/rbac/validation/rule.go, ``DefaultRuleResolver.VisitRulesFor``):
the rules of every ClusterRoleBinding and of the RoleBindings in the request's namespace whose
subjects match, read from the informer caches with no look at ``deletionTimestamp``: a Role or
binding that is Terminating (held by a finalizer) still grants, and one that is gone grants
nothing. ``resourceNames`` match only requests that name an object (get, update, patch,
delete, and list/watch with ``fieldSelector=metadata.name=X``), never create.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tests.fakeapi import status as st
from tests.fakeapi.resources import ResourceType, resolve

Obj = dict[str, Any]

SERVICE_ACCOUNTS = resolve("serviceaccounts")
ROLES = resolve("roles")
ROLE_BINDINGS = resolve("rolebindings")
CLUSTER_ROLES = resolve("clusterroles")
CLUSTER_ROLE_BINDINGS = resolve("clusterrolebindings")


@dataclass(frozen=True)
class ServiceAccountUser:
    """Who a bound token says it is."""

    namespace: str
    name: str
    uid: str

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.name}"

    @property
    def groups(self) -> tuple[str, ...]:
        return ("system:serviceaccounts", f"system:serviceaccounts:{self.namespace}",
                "system:authenticated")


@dataclass(frozen=True)
class Attributes:
    """One request as the authorizer sees it (RequestInfo)."""

    verb: str
    group: str
    resource: str
    namespace: str = ""
    name: str = ""
    subresource: str = ""


def _timestamp(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


Find = Callable[[ResourceType, str | None, str], Obj | None]
Listing = Callable[[ResourceType], list[Obj]]


class Authz:
    """The tokens issued for service accounts, and the checks on requests that carry one."""

    def __init__(self, find: Find, listing: Listing, *, leeway: float = 60.0,
                 clock: Callable[[], float] | None = None) -> None:
        import time
        self._find = find
        self._list = listing
        self.leeway = leeway
        self.clock = clock or time.time
        self._tokens: dict[str, ServiceAccountUser] = {}

    def issue(self, namespace: str, name: str) -> str:
        """A token for an existing service account (as the kubelet's TokenRequest does)."""
        sa = self._find(SERVICE_ACCOUNTS, namespace, name)
        if sa is None:
            raise st.not_found(SERVICE_ACCOUNTS, name)
        token = f"sa.{secrets.token_urlsafe(24)}"
        self._tokens[token] = ServiceAccountUser(namespace, name, sa["metadata"]["uid"])
        return token

    def knows(self, token: str) -> bool:
        return token in self._tokens

    def authenticate(self, token: str) -> ServiceAccountUser:
        user = self._tokens[token]
        sa = self._find(SERVICE_ACCOUNTS, user.namespace, user.name)
        if sa is None or sa["metadata"]["uid"] != user.uid:
            raise st.unauthorized()
        deleted = sa["metadata"].get("deletionTimestamp")
        if deleted and _timestamp(deleted) < self.clock() - self.leeway:
            raise st.unauthorized()
        return user

    def rules_for(self, user: ServiceAccountUser, namespace: str) -> list[Obj]:
        rules: list[Obj] = []
        for crb in self._list(CLUSTER_ROLE_BINDINGS):
            if _applies(user, crb, ""):
                rules += self._role_rules(crb.get("roleRef") or {}, "")
        if namespace:
            for rb in self._list(ROLE_BINDINGS):
                if rb["metadata"].get("namespace") == namespace and _applies(user, rb,
                                                                             namespace):
                    rules += self._role_rules(rb.get("roleRef") or {}, namespace)
        return rules

    def _role_rules(self, ref: Obj, namespace: str) -> list[Obj]:
        kind, name = ref.get("kind"), str(ref.get("name") or "")
        role = (self._find(ROLES, namespace, name) if kind == "Role" and namespace else
                self._find(CLUSTER_ROLES, None, name) if kind == "ClusterRole" else None)
        return list((role or {}).get("rules") or [])

    def authorize(self, user: ServiceAccountUser, a: Attributes) -> None:
        if any(_allows(rule, a) for rule in self.rules_for(user, a.namespace)):
            return
        resource = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
        where = f' in the namespace "{a.namespace}"' if a.namespace else " at the cluster scope"
        qualified = f"{a.resource}.{a.group}" if a.group else a.resource
        subject = f'{qualified} "{a.name}"' if a.name else qualified
        details: Obj = {"name": a.name, "kind": a.resource}
        if a.group:
            details["group"] = a.group
        raise st.ApiError(st.status(
            403, "Forbidden",
            f'{subject} is forbidden: User "{user.username}" cannot {a.verb} resource '
            f'"{resource}" in API group "{a.group}"{where}', details))


def _applies(user: ServiceAccountUser, binding: Obj, namespace: str) -> bool:
    for s in binding.get("subjects") or []:
        kind = s.get("kind")
        if kind == "ServiceAccount":
            if s.get("name") == user.name and (s.get("namespace") or namespace) == \
                    user.namespace:
                return True
        elif (kind == "Group" and s.get("name") in user.groups) or (
                kind == "User" and s.get("name") == user.username):
            return True
    return False


def _allows(rule: Obj, a: Attributes) -> bool:
    resource = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
    names = rule.get("resourceNames") or []
    return (any(g in ("*", a.group) for g in rule.get("apiGroups") or [])
            and any(r in ("*", resource) for r in rule.get("resources") or [])
            and any(v in ("*", a.verb) for v in rule.get("verbs") or [])
            and (not names or (bool(a.name) and a.name in names)))


def attributes(method: str, query: dict[str, str], rt: ResourceType, *, namespace: str | None,
               name: str | None, subresource: str | None) -> Attributes:
    """RequestInfo's verb and name for a resource request."""
    watch = query.get("watch") in ("1", "true")
    if name is None:
        verb = {"GET": "watch" if watch else "list", "POST": "create",
                "DELETE": "deletecollection"}.get(method, method.lower())
        selector = query.get("fieldSelector", "")
        for part in selector.split(","):
            key, _, value = part.partition("=")
            if key == "metadata.name" and value and verb in ("list", "watch"):
                name = value.lstrip("=")
    else:
        verb = {"GET": "get", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete"}.get(method, method.lower())
    return Attributes(verb, rt.group, rt.plural, namespace or "", name or "",
                      subresource or "")


__all__ = ["Attributes", "Authz", "ServiceAccountUser", "attributes"]
