"""The controller's start-up line names what it is configured with, in today's words."""

from __future__ import annotations

from collections.abc import Callable

from tests.controller.conftest import Controller

Start = Callable[..., Controller]


def test_start_up_line_names_the_proxy_service(start: Start) -> None:
    ctl = start()
    ctl.wait_ready()
    line = next(r for r in ctl.records() if r.get("msg") == "controller starting")
    # "target" now names a data plane; the proxy's own Service has its own word.
    assert "target" not in line
    assert line["proxy_service"] == "hairpin-proxy.hairpin-proxy.svc.cluster.local."
