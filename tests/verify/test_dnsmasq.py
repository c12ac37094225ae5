"""The dnsmasq peer itself: a port taken before dnsmasq binds it does not fail a test."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from tests.peers import read_text
from tests.verify.dnsmasq import LB_IP, Dnsmasq
from tests.waiting import wait_until


def test_a_port_taken_before_the_bind_moves_dnsmasq_to_another(tmp_path: Path) -> None:
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    first = Dnsmasq(tmp_path / "first")
    first.start()
    try:
        # The race, made certain: the port picked for the second is the first one's, which
        # answers DNS there; the second must neither fail nor take the first for its own.
        second = Dnsmasq(tmp_path / "second")
        second.port = first.port
        second.start()
        try:
            assert second.port != first.port
            assert second.answers() and first.answers()
            assert second.lookup("app.example.test") == (LB_IP,)
        finally:
            second.stop()
    finally:
        first.stop()


def test_a_restart_waits_for_its_port_to_be_free(tmp_path: Path) -> None:
    server = Dnsmasq(tmp_path)
    server.start()
    port = server.port
    server.stop()
    # A client's socket holds the port when dnsmasq comes back (the test needs that port):
    # it lets go once dnsmasq has said the port is taken.
    holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    holder.bind(("127.0.0.1", port))

    def let_go() -> None:
        try:
            wait_until(lambda: "Address already in use" in read_text(server.log_path),
                       what="dnsmasq to find its port taken")
        finally:
            holder.close()

    releaser = threading.Thread(target=let_go, daemon=True)
    releaser.start()
    try:
        server.start()
        assert server.port == port
        assert server.lookup("app.example.test") == (LB_IP,)
    finally:
        server.stop()
        releaser.join()
        holder.close()
