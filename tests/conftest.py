"""Shared fixtures. Real peers (nginx, HAProxy, curl) live in tests/peers/; the fake
kube-apiserver and its fixtures (``fake_api``, ``kubeconfig``) in tests/fakeapi/; under CI a
skipped test fails (tests/ci_skips.py)."""

from collections.abc import Iterator

import pytest

from tests.peers.netns import private_network

pytest_plugins = ["tests.fakeapi.fixtures", "tests.verify.fixtures", "tests.ci_skips"]


@pytest.fixture
def own_network() -> Iterator[None]:
    """The test runs in a network namespace of its own (tests.peers.netns): for wildcard
    binds, which must reach no interface but the namespace's loopback."""
    with private_network():
        yield
