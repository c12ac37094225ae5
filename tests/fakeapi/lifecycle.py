"""What kube-controller-manager does to deleted objects: the garbage collector and the
namespace controller.

Garbage collector (pkg/controller/garbagecollector/garbagecollector.go: attemptToDeleteItem,
classifyReferences, isDangling), background propagation, the default of ``kubectl delete`` and
of the namespace controller. Each ownerReference is resolved as the real collector does it:
its apiVersion and kind name a served type (else the reference cannot be resolved and the
dependent is left alone, retried); a namespaced owner is looked up in the dependent's own
namespace (so one in another namespace counts as absent), a cluster-scoped owner by name
alone, and a cluster-scoped dependent naming a namespaced kind is never collected. An owner
is dangling when no object has that name or it has another UID (deleted and re-created).
A dependent with at least one owner that exists (Terminating or not) stays, and its dangling
references are removed; one whose every owner is dangling is deleted (its own finalizers
then hold it like any other object). An owner Terminating with the ``foregroundDeletion``
finalizer is waiting for its dependents: they are deleted (foreground propagation is not
modelled further). A dependent already being deleted is left to its finalizers.

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


FOREGROUND = "foregroundDeletion"


class Unresolvable(Exception):
    """An ownerReference the collector cannot resolve: the dependent is left as it is."""


def _owner_type(registry: Registry, ref: Obj) -> ResourceType:
    """The type an ownerReference names (as the collector's REST mapper: group, version and
    kind must be served)."""
    group, _, version = str(ref.get("apiVersion") or "").rpartition("/")
    served = [t for t in registry.types() if t.group == group and t.version == version
              and t.kind == ref.get("kind")]
    if not served:
        raise Unresolvable(f"{ref.get('apiVersion')} {ref.get('kind')}")
    return next((t for t in registry.storages() if t.storage_id == served[0].storage_id),
                served[0])


Index = dict[tuple[str, str, str], Obj]


def classify(index: Index, registry: Registry, namespace: str, refs: list[Obj]
             ) -> tuple[list[Obj], list[Obj], list[Obj]]:
    """(solid, dangling, waiting for their dependents' deletion) references of a dependent in
    ``namespace`` ("" when cluster-scoped), against ``index`` (storage id, namespace, name) →
    metadata, the store as the pass began (the real collector's graph lags the store too: a
    chain of owners goes one link per pass); Unresolvable when one cannot be looked up."""
    solid: list[Obj] = []
    dangling: list[Obj] = []
    waiting: list[Obj] = []
    for ref in refs:
        rt = _owner_type(registry, ref)
        if rt.namespaced and not namespace:
            raise Unresolvable("a cluster-scoped object refers to a namespaced owner")
        owner = index.get((rt.storage_id, namespace if rt.namespaced else "",
                           str(ref.get("name"))))
        if owner is None or owner.get("uid") != ref.get("uid"):
            dangling.append(ref)
        elif owner.get("deletionTimestamp") and FOREGROUND in (owner.get("finalizers") or ()):
            waiting.append(ref)
        else:
            solid.append(ref)
    return solid, dangling, waiting


def collect_garbage(store: Store, registry: Registry) -> int:
    """One pass over every dependent; the number of deletions asked."""
    owned: list[tuple[ResourceType, str, str, list[Obj]]] = []
    index: Index = {}
    for rt in registry.storages():
        for (ns, name), obj in store.snapshot(rt).items():
            md = obj["metadata"]
            index[(rt.storage_id, ns, name)] = md
            refs = md.get("ownerReferences") or []
            if refs and not md.get("deletionTimestamp"):
                owned.append((rt, ns, name, refs))
    asked = 0
    for rt, ns, name, refs in owned:
        try:
            solid, dangling, waiting = classify(index, registry, ns, refs)
        except Unresolvable:
            continue
        if solid:
            gone = {r.get("uid") for r in (*dangling, *waiting)}
            current = store.find(rt, ns or None, name)
            if gone and current is not None:
                kept = [r for r in current["metadata"].get("ownerReferences") or ()
                        if r.get("uid") not in gone]
                current["metadata"]["ownerReferences"] = kept
                if not kept:
                    del current["metadata"]["ownerReferences"]
                with contextlib.suppress(st.ApiError):
                    store.update(rt, ns or None, name, current, from_api=False,
                                 check_rv=False)
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


__all__ = ["classify", "collect_garbage", "sweep_namespaces"]
