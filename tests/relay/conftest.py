"""The data path every relay test that takes ``data_path`` runs on: once copying every byte,
once splicing everything but the PROXY header and what came with it."""

from __future__ import annotations

import pytest

from hairpin_proxy.relay.limits import pipe_bytes
from hairpin_proxy.relay.splice import probe

DATA_PATHS = {
    "copy": {"HAIRPIN_SPLICE": "off"},
    "splice": {"HAIRPIN_SPLICE": "auto", "HAIRPIN_SPLICE_THRESHOLD": "0"},
}


@pytest.fixture(params=list(DATA_PATHS))
def data_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Set through the environment, as a deployment would: the relay processes run_relay
    starts and the in-process relays of relay_in_thread both read it."""
    if request.param == "splice":
        # Copying in its place would pass every test without testing splice.
        assert probe(pipe_bytes(65536)) is None, "this kernel refuses splice(2)"
    for name, value in DATA_PATHS[request.param].items():
        monkeypatch.setenv(name, value)
    return str(request.param)
