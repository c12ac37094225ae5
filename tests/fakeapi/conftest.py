"""Fixtures for the fake API server's own tests (other packages register tests.fakeapi.fixtures)."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from functools import cache

import httpx2 as httpx
import pytest

from tests.fakeapi.fixtures import fake_api, kubeconfig
from tests.fakeapi.server import FakeApiServer

__all__ = ["fake_api", "http", "kubeconfig"]


@cache
def _tls() -> ssl.SSLContext:
    # Loading the CA bundle dominates client setup; the server speaks plain HTTP anyway.
    return ssl.create_default_context()


@pytest.fixture
def http(fake_api: FakeApiServer) -> Iterator[httpx.Client]:
    """A plain HTTP client for `fake_api`."""
    with httpx.Client(base_url=fake_api.url, timeout=httpx.Timeout(10.0), verify=_tls()) as c:
        yield c
