"""Shared fixtures. Real peers (nginx, HAProxy, curl) live in tests/peers/; the fake
kube-apiserver and its fixtures (``fake_api``, ``kubeconfig``) in tests/fakeapi/."""

pytest_plugins = ["tests.fakeapi.fixtures", "tests.verify.fixtures"]
