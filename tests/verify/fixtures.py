"""The real DNS server (dnsmasq) and a resolver black hole, as fixtures for every test package."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.verify.dnsmasq import BlackHole, Dnsmasq


@pytest.fixture
def dnsmasq(tmp_path: Path) -> Iterator[Dnsmasq]:
    server = Dnsmasq(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def black_hole() -> Iterator[BlackHole]:
    hole = BlackHole()
    try:
        yield hole
    finally:
        hole.close()
