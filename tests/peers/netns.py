"""A network namespace of the test's own, for tests that must bind a wildcard address.

Tests use loopback only; a listener on ``0.0.0.0`` or ``[::]`` (the relay's defaults, the
admin endpoint's) would also listen on the machine's other interfaces. Inside a fresh network
namespace the only interface is the namespace's own loopback, so the wildcard binds reach
nothing else.

The namespace belongs to the calling thread: what it starts afterwards (threads, processes
such as the relay or nginx) is born in it, and the thread returns to its own namespace when
the block ends. Creating one needs root; without it the test is skipped with the reason
(CI runs as root and its real-peer check refuses skips).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.peers import require_binary

CLONE_NEWNET = 0x40000000
THREAD_NETWORK = Path("/proc/thread-self/ns/net")
_libc = ctypes.CDLL(None, use_errno=True)


def _call(name: str, *args: int) -> None:
    if getattr(_libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


@contextlib.contextmanager
def private_network() -> Iterator[None]:
    """Run the calling thread in a new network namespace with its loopback up (127.0.0.1/8
    and, where the kernel has IPv6, ::1)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a network namespace for wildcard binds")
    ip = require_binary("ip")
    home = os.open(THREAD_NETWORK, os.O_RDONLY)
    try:
        try:
            _call("unshare", CLONE_NEWNET)
        except OSError as exc:
            pytest.skip(f"cannot create a network namespace here: {exc.strerror}")
        try:
            subprocess.run([ip, "link", "set", "lo", "up"], check=True, capture_output=True,
                           timeout=30)
            yield
        finally:
            _call("setns", home, CLONE_NEWNET)
    finally:
        os.close(home)


def inode_of_network() -> int:
    """The calling thread's network namespace (its inode), to tell namespaces apart."""
    return THREAD_NETWORK.stat().st_ino
