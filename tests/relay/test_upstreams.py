"""The targets table as the relay uses it (relay/upstreams.py): decoding (pure), polling, and
listeners that follow the table without a restart, with real sockets on loopback while a
long-lived connection stays up."""

from __future__ import annotations

import asyncio
import json
import random
import socket
from pathlib import Path
from typing import Any

import pytest

from hairpin_proxy.relay.upstreams import (
    TableError,
    TableSlot,
    TableWatcher,
    load_table,
    slot_listeners,
)
from hairpin_proxy.targets.slots import listen_ports
from tests.relay.helpers import Upstream, connect, echo, recv_all, run_relay, wait_until
from tests.waiting import PATIENCE


def slot(**changes: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "key": "gateway/web/public", "slot": 1, "listen": [20002, 20003],
        "upstream": "public-envoy.envoy-gateway-system.svc.cluster.local", "ports": [80, 443],
        "advertise_ports": [80, 443], "advertise_address": "203.0.113.10", "proxy": "v2"}
    entry.update(changes)
    return entry


def table(*entries: dict[str, Any], version: Any = 1) -> bytes:
    return json.dumps({"version": version, "targets": list(entries)}, sort_keys=True).encode()


# --------------------------------------------------------------------------- decoding
# What a table is belongs to hairpin_proxy.targets.table (tests/targets/test_table.py); here
# only what the relay makes of it.

def test_a_slot_becomes_its_listeners() -> None:
    (got,) = load_table(table(slot(ports=[8080, 0], advertise_ports=[8080, 443],
                                   advertise_address="")))
    ((spec, advertise),) = slot_listeners(got)  # port 0: no TLS listener
    assert (spec.name, spec.upstream, spec.version, spec.header_port, advertise) == (
        "[::]:20002", "public-envoy.envoy-gateway-system.svc.cluster.local:8080", "v2", 8080,
        None)
    (got,) = load_table(table(slot()))
    assert [(spec.name, spec.header_port, advertise)
            for spec, advertise in slot_listeners(got)] == [
        ("[::]:20002", 80, "203.0.113.10"), ("[::]:20003", 443, "203.0.113.10")]
    assert load_table(table()) == ()


@pytest.mark.parametrize("data", [
    b"{", table(version=2), table(slot(listen=[20004, 20005])), table(slot(ports=[0, 0])),
    table(slot(proxy="none")), table(slot(), slot(key="gateway/web/other")),
])
def test_a_faulty_table_is_malformed(data: bytes) -> None:
    with pytest.raises(TableError) as info:
        load_table(data)
    assert info.value.reason == "malformed" and info.value.detail


# --------------------------------------------------------------------------- polling

def write(path: Path, data: bytes) -> None:
    """As the kubelet updates a ConfigMap volume: a new file swapped in whole."""
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def test_the_watcher_applies_each_new_table_once_and_reports_each_refusal_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "targets.json"
    applied: list[tuple[TableSlot, ...]] = []
    refused: list[tuple[str, str]] = []
    watcher = TableWatcher(path, applied.append, lambda r, d: refused.append((r, d)))

    async def polls(n: int) -> None:
        for _ in range(n):
            await watcher.poll()

    caplog.set_level("INFO", "hairpin_proxy.relay")
    asyncio.run(polls(3))  # no table yet: normal, said once, not an error
    assert (applied, refused) == ([], [])
    assert sum("no targets table" in r.getMessage() for r in caplog.records) == 1
    write(path, table(slot()))
    asyncio.run(polls(3))
    assert len(applied) == 1
    write(path, table(slot()))  # a new file, the same content: nothing to do
    asyncio.run(polls(2))
    assert len(applied) == 1
    write(path, b"{not json")
    asyncio.run(polls(3))
    assert [r for r, _ in refused] == ["malformed"]
    write(path, table(slot(proxy="v1")))
    asyncio.run(polls(1))
    assert len(applied) == 2 and applied[-1][0].proxy == "v1"
    path.unlink()  # gone after a table was loaded: refused once, the last one stays
    asyncio.run(polls(3))
    assert [r for r, _ in refused] == ["malformed", "unreadable"]
    assert len(applied) == 2


def test_a_table_that_cannot_be_applied_now_is_tried_again(tmp_path: Path) -> None:
    path = tmp_path / "targets.json"
    write(path, table(slot()))
    calls: list[int] = []
    refused: list[str] = []

    def apply(slots: tuple[TableSlot, ...]) -> None:
        calls.append(len(slots))
        if len(calls) < 3:
            raise TableError("conflict", "cannot listen on [::]:20002: Address already in use")

    watcher = TableWatcher(path, apply, lambda r, d: refused.append(r))

    async def polls() -> None:
        for _ in range(4):
            await watcher.poll()

    asyncio.run(polls())
    assert calls == [1, 1, 1]  # again at each poll until it worked, then left alone
    assert refused == ["conflict"]  # reported once


# --------------------------------------------------------------------------- the relay

# The table's listeners bind loopback here (in a pod: [::], the default).
LOOPBACK = ("--targets-address", "127.0.0.1")


def free_slot() -> int:
    """A slot whose two listen ports (fixed by the slot) are free on loopback now."""
    rng = random.Random()
    for _ in range(200):
        number = rng.randrange(5000, 22000)
        try:
            for port in listen_ports(number):
                with socket.socket(socket.AF_INET) as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return number
    raise RuntimeError("no slot with free ports")


def slots_gauge(relay: Any) -> float:
    value: float = relay.metric("hairpin_proxy_targets_table_slots")
    return value


def table_errors(relay: Any, reason: str) -> float:
    value: float = relay.metric("hairpin_proxy_targets_table_errors_total", reason=reason)
    return value


def echoes(sock: socket.socket, data: bytes) -> bool:
    sock.sendall(data)
    got = b""
    while len(got) < len(data):
        chunk = sock.recv(len(data) - len(got))
        if not chunk:
            return False
        got += chunk
    return got == data


def reaches(port: int, up: Upstream) -> bool:
    """A fresh connection to ``port`` is relayed to ``up``."""
    before = up.accepted
    try:
        with connect(port, timeout=5) as s:
            s.sendall(b"?")
            s.shutdown(socket.SHUT_WR)
            if recv_all(s) != b"?":
                return False
    except OSError:
        return False
    return up.accepted > before


def refused(port: int) -> bool:
    try:
        with connect(port, timeout=5):
            return False
    except ConnectionRefusedError:
        return True


def test_listeners_follow_the_table_while_a_long_connection_stays_up(tmp_path: Path) -> None:
    path = tmp_path / "targets.json"
    number = free_slot()
    http, tls = listen_ports(number)
    with Upstream(echo) as first, Upstream(echo) as second, Upstream(echo) as fixed, run_relay(
            tmp_path, [f"127.0.0.1:{{port}}=127.0.0.1:{fixed.port}"], "--targets-file",
            str(path), "--targets-poll", "0.1", *LOOPBACK, loop="uvloop") as relay:
        assert slots_gauge(relay) == 0  # no table yet: only --listen serves
        assert refused(http)

        # The table appears: both listeners, v2, the advertised destination.
        write(path, table(slot(slot=number, listen=[http, tls], upstream="127.0.0.1",
                               ports=[first.port, first.port])))
        wait_until(lambda: reaches(http, first), 30, "the new slot to serve")
        assert reaches(tls, first)
        assert slots_gauge(relay) == 1
        assert [(h.version, h.destination) for h in first.headers] == [
            (2, ("203.0.113.10", 80)), (2, ("203.0.113.10", 443))]

        with connect(http, timeout=10) as long_lived:
            assert echoes(long_lived, b"before")

            # The slot changes: new connections go the new way (upstream, version, dialed
            # destination); the established one goes on the old way.
            write(path, table(slot(slot=number, listen=[http, tls], upstream="127.0.0.1",
                                   ports=[second.port, second.port], proxy="v1",
                                   advertise_address="")))
            wait_until(lambda: reaches(http, second), 30, "the changed slot to serve")
            assert (second.headers[-1].version, second.headers[-1].destination) == (
                1, ("127.0.0.1", 80))
            assert echoes(long_lived, b"during")

            # A malformed table: refused once, the last good one keeps serving.
            write(path, b'{"version": 1, "targets": [{"key": "gateway/web/broken"}]}')
            wait_until(lambda: table_errors(relay, "malformed") == 1, 30, "the refusal")
            assert reaches(http, second) and reaches(tls, second)
            assert slots_gauge(relay) == 1
            assert echoes(long_lived, b"refused")

            # The slot goes: its ports stop accepting, the established connection goes on.
            write(path, table())
            wait_until(lambda: refused(http) and refused(tls), 30, "the slot to stop")
            assert slots_gauge(relay) == 0
            assert echoes(long_lived, b"after")
            assert reaches(relay.ports[0], fixed)  # --listen was never touched
        first_listener = f"[::]:{http}"
        wait_until(lambda: relay.metric("hairpin_proxy_connections_active",
                                        listener=first_listener) == 0, 30, "the end")
        assert table_errors(relay, "malformed") == 1
        relay.terminate()
        relay.proc.wait(PATIENCE)
    refusals = [r for r in relay.log_records() if "targets table refused" in r.get("msg", "")]
    assert len(refusals) == 1 and refusals[0]["reason"] == "malformed"


def test_a_table_using_a_listen_port_of_its_own_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "targets.json"
    number = free_slot()
    other, taken = listen_ports(number)
    with Upstream(echo) as up, run_relay(
            tmp_path, [f"127.0.0.1:{taken}=127.0.0.1:{up.port}"], "--targets-file", str(path),
            "--targets-poll", "0.1", *LOOPBACK, loop="uvloop") as relay:
        relay.ports.append(taken)
        write(path, table(slot(slot=number, listen=[other, taken], upstream="127.0.0.1",
                               ports=[up.port, up.port])))
        wait_until(lambda: table_errors(relay, "conflict") == 1, 30, "the refusal")
        assert refused(other)  # nothing of that table was applied
        assert slots_gauge(relay) == 0
        assert reaches(relay.ports[0], up)
