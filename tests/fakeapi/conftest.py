"""Fixtures for the fake API server's own tests (other packages register tests.fakeapi.fixtures)."""

from tests.fakeapi.fixtures import fake_api, kubeconfig

__all__ = ["fake_api", "kubeconfig"]
