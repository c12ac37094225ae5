"""Kube-layer tests run in-process against the fake API server."""

from tests.fakeapi.fixtures import fake_api, kubeconfig

__all__ = ["fake_api", "kubeconfig"]
