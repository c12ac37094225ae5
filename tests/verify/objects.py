"""Small Kubernetes objects (dicts) for the verification tests."""

from __future__ import annotations

from typing import Any


def lb_service(ns: str, name: str, *entries: object,
               type_: str = "LoadBalancer") -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name}, "spec": {"type": type_},
            "status": {"loadBalancer": {"ingress": list(entries)}}}


def ingress(ns: str, name: str, *entries: object) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name},
            "status": {"loadBalancer": {"ingress": list(entries)}}}
