"""pytest fixtures and object builders for tests that run against the fake API server.

Register with `pytest_plugins = ["tests.fakeapi.fixtures"]` in the top-level conftest.py, or
import the fixtures by name into a conftest. Builders return plain dicts with apiVersion/kind,
ready for `fake_api.create(...)` or for a client.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.fakeapi.server import FakeApiServer

Obj = dict[str, Any]


@pytest.fixture
def fake_api() -> Iterator[FakeApiServer]:
    """A started fake API server without authentication, stopped after the test."""
    with FakeApiServer(bookmark_interval=0.5) as server:
        yield server


@pytest.fixture
def kubeconfig(fake_api: FakeApiServer, tmp_path: Path) -> Path:
    """A kubeconfig for `fake_api` (context namespace "default")."""
    return fake_api.write_kubeconfig(tmp_path / "kubeconfig")


def _meta(namespace: str | None, name: str, labels: Mapping[str, str] | None,
          annotations: Mapping[str, str] | None) -> Obj:
    md: Obj = {"name": name}
    if namespace is not None:
        md["namespace"] = namespace
    if labels:
        md["labels"] = dict(labels)
    if annotations:
        md["annotations"] = dict(annotations)
    return md


def ingress(
    namespace: str,
    name: str,
    *,
    tls_hosts: Iterable[str] = (),
    rule_hosts: Iterable[str] = (),
    class_name: str | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    backend_service: str = "web",
    backend_port: int = 80,
) -> Obj:
    """A networking.k8s.io/v1 Ingress; each rule host routes / to the backend service (without
    rule hosts the service becomes the default backend)."""
    backend = {"service": {"name": backend_service, "port": {"number": backend_port}}}
    spec: Obj = {}
    if class_name is not None:
        spec["ingressClassName"] = class_name
    tls = list(tls_hosts)
    if tls:
        spec["tls"] = [{"hosts": tls, "secretName": f"{name}-tls"}]
    rules = [
        {"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                                           "backend": backend}]}}
        for host in rule_hosts
    ]
    if rules:
        spec["rules"] = rules
    if not rules:
        # The API rejects an Ingress with neither rules nor a default backend.
        spec["defaultBackend"] = backend
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": _meta(namespace, name, labels, annotations),
        "spec": spec,
    }


def ingress_class(name: str, default: bool = False,
                  controller: str = "k8s.io/ingress-nginx") -> Obj:
    annotations = {"ingressclass.kubernetes.io/is-default-class": "true"} if default else None
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IngressClass",
        "metadata": _meta(None, name, None, annotations),
        "spec": {"controller": controller},
    }


def configmap(namespace: str, name: str, data: Mapping[str, str] | None = None,
              labels: Mapping[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(namespace, name, labels, None),
        "data": dict(data or {}),
    }


def service(
    namespace: str,
    name: str,
    *,
    cluster_ips: Sequence[str] | None = None,
    type: str = "ClusterIP",
    lb_ingress: Sequence[Mapping[str, Any]] | None = None,
    ports: Sequence[Mapping[str, Any]] | None = None,
    selector: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> Obj:
    """A v1 Service; `lb_ingress` fills status.loadBalancer.ingress, e.g.
    [{"ip": "203.0.113.7", "ipMode": "Proxy"}]. Without cluster_ips one is allocated."""
    spec: Obj = {
        "type": type,
        "ports": [dict(p) for p in ports] if ports else [
            {"name": "http", "port": 80, "protocol": "TCP", "targetPort": 80},
            {"name": "https", "port": 443, "protocol": "TCP", "targetPort": 443},
        ],
    }
    if cluster_ips:
        spec["clusterIP"] = cluster_ips[0]
        spec["clusterIPs"] = list(cluster_ips)
    if selector:
        spec["selector"] = dict(selector)
    status: Obj = {"loadBalancer": {}}
    if lb_ingress:
        status["loadBalancer"]["ingress"] = [dict(i) for i in lb_ingress]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(namespace, name, labels, None),
        "spec": spec,
        "status": status,
    }


def namespace(name: str, labels: Mapping[str, str] | None = None) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(None, name, labels, None)}


def _workload(kind: str, namespace: str, name: str, image: str,
              labels: Mapping[str, str] | None) -> Obj:
    pod_labels = dict(labels or {"app.kubernetes.io/name": name})
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": _meta(namespace, name, pod_labels, None),
        "spec": {
            "selector": {"matchLabels": pod_labels},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {"containers": [{"name": name, "image": image}]},
            },
        },
    }


def deployment(namespace: str, name: str, image: str = "registry.example/app:1",
               replicas: int = 1, labels: Mapping[str, str] | None = None) -> Obj:
    obj = _workload("Deployment", namespace, name, image, labels)
    obj["spec"]["replicas"] = replicas
    return obj


def daemonset(namespace: str, name: str, image: str = "registry.example/agent:1",
              labels: Mapping[str, str] | None = None) -> Obj:
    return _workload("DaemonSet", namespace, name, image, labels)


def endpoint_slice(namespace: str, service_name: str, *, ready: bool | None = True,
                   addresses: Sequence[str] = ("10.244.0.10",), name: str | None = None) -> Obj:
    """A discovery.k8s.io/v1 EndpointSlice of a Service (one endpoint per address); ``ready``
    None leaves the condition unset, which the API defines as ready."""
    conditions: Obj = {} if ready is None else {"ready": ready}
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": _meta(namespace, name or f"{service_name}-abcde",
                          {"kubernetes.io/service-name": service_name}, None),
        "addressType": "IPv4",
        "endpoints": [{"addresses": [a], "conditions": dict(conditions)} for a in addresses],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }


def gateway_class(name: str, controller: str = "gateway.envoyproxy.io/gatewayclass-controller",
                  api_version: str = "gateway.networking.k8s.io/v1") -> Obj:
    return {"apiVersion": api_version, "kind": "GatewayClass",
            "metadata": _meta(None, name, None, None), "spec": {"controllerName": controller}}


def gateway(namespace: str, name: str, class_name: str, *,
            listeners: Sequence[Mapping[str, Any]] | None = None,
            labels: Mapping[str, str] | None = None,
            api_version: str = "gateway.networking.k8s.io/v1") -> Obj:
    """A Gateway; without `listeners` one HTTP listener on port 80 for any host."""
    return {"apiVersion": api_version, "kind": "Gateway",
            "metadata": _meta(namespace, name, labels, None),
            "spec": {"gatewayClassName": class_name, "listeners": [
                dict(x) for x in listeners or [{"name": "http", "port": 80,
                                                "protocol": "HTTP"}]]}}


def route(kind: str, namespace: str, name: str, *, hostnames: Iterable[str] = (),
          parent: str | None = None, parent_namespace: str | None = None,
          section: str | None = None,
          api_version: str = "gateway.networking.k8s.io/v1") -> Obj:
    """An HTTPRoute, GRPCRoute or TLSRoute (`kind`) attached to Gateway `parent`; pass
    api_version="gateway.networking.k8s.io/v1alpha2" for a TLSRoute of releases before 1.5."""
    spec: Obj = {}
    if hostnames:
        spec["hostnames"] = list(hostnames)
    if parent is not None:
        ref: Obj = {"name": parent}
        if parent_namespace is not None:
            ref["namespace"] = parent_namespace
        if section is not None:
            ref["sectionName"] = section
        spec["parentRefs"] = [ref]
    return {"apiVersion": api_version, "kind": kind,
            "metadata": _meta(namespace, name, None, None), "spec": spec}


# kube-up's addon manager as the mirror of its static pod (cluster/gce/manifests/
# kube-addon-manager.yaml) shows it.
ADDON_MANAGER_POD: Obj = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"namespace": "kube-system", "name": "kube-addon-manager-master-1",
                 "labels": {"component": "kube-addon-manager"}},
    "spec": {"containers": [{"name": "kube-addon-manager",
                             "image": "registry.k8s.io/addon-manager/kube-addon-manager:v9.1.8"}]},
    "status": {"phase": "Running"}}


def corefile_configmap(text: str) -> Obj:
    """kube-system/coredns with the given Corefile, as kubeadm and most distributions ship it."""
    return configmap("kube-system", "coredns", {"Corefile": text})


__all__ = ["ADDON_MANAGER_POD", "configmap", "corefile_configmap", "daemonset", "deployment",
           "endpoint_slice",
           "fake_api", "gateway", "gateway_class", "ingress", "ingress_class", "kubeconfig",
           "namespace", "route", "service"]
