"""What kube-controller-manager does to deleted objects: the garbage collector and the
namespace controller.

Garbage collector (pkg/controller/garbagecollector, background propagation, the default of
``kubectl delete`` and of the namespace controller): once an owner is gone from storage (not
merely Terminating), a dependent whose every ownerReference points at a vanished object is
deleted; a dependent with finalizers then waits for them like any other object. An owner
that is Terminating keeps its dependents. (Owners are matched by UID alone: the real
collector also refuses a namespaced owner in another namespace.)

Namespace controller (pkg/controller/namespace/deletion/namespaced_resources_deleter.go): a
Terminating namespace has its content deleted (pods first, the rest once no pod is left: the
OrderedNamespaceDeletion behaviour, default from Kubernetes 1.33 and locked on from 1.34);
objects held by finalizers stay, and the namespace waits for them (retrying); when nothing
is left, its ``kubernetes`` finalizer is cleared and it goes.
"""

from __future__ import annotations

import contextlib
from typing import Any

from tests.fakeapi import status as st
from tests.fakeapi.resources import Registry, ResourceType, resolve
from tests.fakeapi.store import Store

Obj = dict[str, Any]

PODS = resolve("pods")
NAMESPACES = resolve("namespaces")


def collect_garbage(store: Store, registry: Registry) -> int:
    """Delete every dependent whose owners are all gone; the number of deletions asked."""
    present: set[str] = set()
    owned: list[tuple[ResourceType, str, str, list[Obj]]] = []
    for rt in registry.storages():
        for (ns, name), obj in store.snapshot(rt).items():
            md = obj["metadata"]
            present.add(md["uid"])
            refs = md.get("ownerReferences") or []
            if refs and not md.get("deletionTimestamp"):
                owned.append((rt, ns, name, refs))
    asked = 0
    for rt, ns, name, refs in owned:
        if any(ref.get("uid") in present for ref in refs):
            continue
        with contextlib.suppress(st.ApiError):
            store.delete(rt, ns or None, name)
            asked += 1
    return asked


def sweep_namespaces(store: Store, registry: Registry) -> None:
    """One pass of the namespace controller over every Terminating namespace."""
    for (_, ns_name), namespace in store.snapshot(NAMESPACES).items():
        if not namespace["metadata"].get("deletionTimestamp"):
            continue
        left = 0
        pods = [name for (where, name) in store.snapshot(PODS) if where == ns_name]
        for name in pods:
            with contextlib.suppress(st.ApiError):
                store.delete(PODS, ns_name, name)
        if pods:
            continue
        for rt in registry.storages():
            if not rt.namespaced:
                continue
            for (ns, name), obj in store.snapshot(rt).items():
                if ns != ns_name:
                    continue
                left += 1
                if not obj["metadata"].get("deletionTimestamp"):
                    with contextlib.suppress(st.ApiError):
                        store.delete(rt, ns, name)
        if left:
            continue
        current = store.find(NAMESPACES, None, ns_name)
        if current is not None:
            done = {**current, "spec": {**(current.get("spec") or {}), "finalizers": []}}
            store.update(NAMESPACES, None, ns_name, done, from_api=False, check_rv=False)
            if store.find(NAMESPACES, None, ns_name) is not None:
                with contextlib.suppress(st.ApiError):
                    store.delete(NAMESPACES, None, ns_name)


__all__ = ["collect_garbage", "sweep_namespaces"]
