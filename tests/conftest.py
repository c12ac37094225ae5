"""Shared fixtures. Real peers (nginx, HAProxy, curl) live in tests/peers/; the fake
kube-apiserver and its fixtures (``fake_api``, ``kubeconfig``) in tests/fakeapi/; under CI a
skipped test fails (tests/ci_skips.py)."""

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from tests.peers.netns import private_network

pytest_plugins = ["tests.fakeapi.fixtures", "tests.verify.fixtures", "tests.ci_skips"]

# Property tests assert what holds, never how fast: on a busy machine one example can take
# longer than Hypothesis's default deadline (200 ms) or its too-slow health check allows.
settings.register_profile("hairpin", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("hairpin")


@pytest.fixture
def own_network() -> Iterator[None]:
    """The test runs in a network namespace of its own (tests.peers.netns): for wildcard
    binds, which must reach no interface but the namespace's loopback."""
    with private_network():
        yield
