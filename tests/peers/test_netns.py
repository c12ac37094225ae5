"""The private network namespace that wildcard-binding tests run in."""

from __future__ import annotations

import socket
import subprocess

from tests.peers import has_ipv6_loopback, require_binary
from tests.peers.netns import inode_of_network, private_network


def test_a_private_namespace_has_only_loopback_and_is_left_afterwards() -> None:
    ip = require_binary("ip")
    before, ipv6 = inode_of_network(), has_ipv6_loopback()
    with private_network():
        assert inode_of_network() != before
        links = subprocess.run([ip, "-o", "link", "show"], capture_output=True, text=True,
                               check=True).stdout.splitlines()
        assert [line.split(":")[1].strip() for line in links] == ["lo"]
        # The wildcard bind reaches loopback, which is up.
        with socket.create_server(("0.0.0.0", 0)) as server, \
                socket.create_connection(("127.0.0.1", server.getsockname()[1]), timeout=5):
            pass
        assert has_ipv6_loopback() == ipv6  # IPv6 tests run inside as they would outside
    assert inode_of_network() == before
