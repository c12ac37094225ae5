"""Doctor tests run the real CLI against real nginx, the relay and the fake API server."""

from tests.fakeapi.fixtures import fake_api, kubeconfig

__all__ = ["fake_api", "kubeconfig"]
