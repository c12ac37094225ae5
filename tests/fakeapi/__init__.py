"""A fake kube-apiserver for tests: real HTTP on loopback, real watch semantics, fault injection.

See README.md in this directory for what is faithful and what is simplified.
"""

from tests.fakeapi.server import FakeApiServer, RequestRecord

__all__ = ["FakeApiServer", "RequestRecord"]
