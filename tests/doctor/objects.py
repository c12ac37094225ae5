"""Cluster objects the doctor reads, as plain dicts for the fake API server."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hairpin_proxy.corefile.nodelocal import apply_nodelocal
from tests.corefiles import NODE_LOCAL_UPSTREAM

Obj = dict[str, Any]

# NodeLocal DNSCache's Corefile as its upstream manifest installs it.
NODE_LOCAL_COREFILE = NODE_LOCAL_UPSTREAM


def _workload(kind: str, namespace: str, name: str, container: Obj,
              labels: dict[str, str] | None) -> Obj:
    match = {"app": name}
    return {
        "apiVersion": "apps/v1", "kind": kind,
        "metadata": {"namespace": namespace, "name": name, "labels": labels or {}},
        "spec": {"selector": {"matchLabels": match},
                 "template": {"metadata": {"labels": match},
                              "spec": {"containers": [container]}}},
    }


def deployment(namespace: str, name: str, image: str,
               labels: dict[str, str] | None = None) -> Obj:
    return _workload("Deployment", namespace, name, {"name": "coredns", "image": image}, labels)


def coredns_deployment(version: str) -> Obj:
    return deployment("kube-system", "coredns", f"registry.k8s.io/coredns/coredns:v{version}",
                      {"k8s-app": "kube-dns"})


def daemonset(namespace: str, name: str, labels: dict[str, str] | None = None) -> Obj:
    return _workload("DaemonSet", namespace, name,
                     {"name": "dns", "image": "k8s-dns-node-cache:1.23"}, labels)


def endpoint_slice(namespace: str, service: str, addresses: list[str], *,
                   ready: bool | None = True) -> Obj:
    conditions = {} if ready is None else {"ready": ready}
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"namespace": namespace, "name": f"{service}-abc12",
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [a], "conditions": conditions} for a in addresses],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }


def with_ingress_status(obj: Obj, *, ip: str = "", hostname: str = "") -> Obj:
    entry = {"ip": ip} if ip else {"hostname": hostname}
    obj["status"] = {"loadBalancer": {"ingress": [entry]}}
    return obj


def with_annotations(obj: Obj, annotations: dict[str, str]) -> Obj:
    obj["metadata"].setdefault("annotations", {}).update(annotations)
    return obj


def node_local_configmap(name: str, hosts: Iterable[str] = (), *, reconciled: bool = False,
                         text: str = NODE_LOCAL_COREFILE) -> Obj:
    """kube-system/<name> holding node-local-dns's Corefile with our block for ``hosts`` (none:
    no block), labelled as the addon manager's when ``reconciled``."""
    labels = {"k8s-app": "node-local-dns"}
    if reconciled:
        labels["addonmanager.kubernetes.io/mode"] = "Reconcile"
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": "kube-system", "name": name, "labels": labels},
        "data": {"Corefile": apply_nodelocal(text, hosts)},
    }
