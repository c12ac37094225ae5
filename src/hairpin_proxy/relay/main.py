"""The ``proxy`` command: checks its settings, then runs one relay process (server.py) or the
supervisor of several (workers.py), as uvicorn's ``main`` chooses between a server and its
supervisors."""

from __future__ import annotations

import asyncio
import logging
import os
import select

from hairpin_proxy.addresses import parse_hostport
from hairpin_proxy.logs import setup_logging
from hairpin_proxy.relay.limits import auto_workers, cpu_quota, read_cpu_cgroup
from hairpin_proxy.relay.server import (
    StartupError,
    check_fd_limit,
    decide_splice,
    derived_limit,
    loop_factory,
    raise_fd_limit,
    serve,
)
from hairpin_proxy.relay.spec import ListenerSpecError, is_ip_literal, parse_listeners
from hairpin_proxy.relay.workers import Supervisor
from hairpin_proxy.settings import ProxySettings, usage_error

log = logging.getLogger("hairpin_proxy.relay")


def run(settings: ProxySettings) -> int:
    setup_logging(settings.log_level, settings.log_format)
    try:
        if not hasattr(select, "epoll"):
            raise StartupError("the proxy relays with Linux's epoll, which this platform does "
                               "not have (select.epoll)")
        for name in ("connect_timeout", "grace_period", "targets_poll"):
            if getattr(settings, name) <= 0:
                raise StartupError(f"--{name.replace('_', '-')} must be positive")
        for name in ("max_connections", "max_connections_per_source", "socket_buffer",
                     "splice_threshold"):
            if getattr(settings, name) < 0:
                raise StartupError(f"--{name.replace('_', '-')} must not be negative")
        for server in settings.dns_server:
            if not is_ip_literal(parse_hostport(server, default_port=53)[0]):
                raise StartupError(f"--dns-server {server!r}: not an IP address")
        if settings.advertise_address and not is_ip_literal(settings.advertise_address):
            raise StartupError(f"--advertise-address {settings.advertise_address!r}: not an "
                               "IP address")
        specs = parse_listeners(settings.listen, target_server=settings.target_server,
                                default_version=settings.proxy_protocol)
        loop_name, factory = loop_factory(settings.loop)
    except (StartupError, ListenerSpecError, ValueError) as exc:
        return usage_error("proxy", str(exc))
    raise_fd_limit()
    settings = decide_splice(settings)
    count = settings.workers or auto_workers(cpu_quota(*read_cpu_cgroup()),
                                             len(os.sched_getaffinity(0)))
    if settings.max_connections:
        check_fd_limit(settings.max_connections, settings.splice != "off")
        limit = settings.max_connections
    else:
        derived = derived_limit(settings, count)
        limit = derived.connections
        log.info(f"connection limit from the {derived.bound_by}",
                 extra={"max_connections": limit, "workers": count})
    if count > 1:
        # The supervisor relays nothing: its own loop is plain asyncio.
        return asyncio.run(Supervisor(specs, settings, count, limit).run())
    log.debug("event loop", extra={"loop": loop_name})
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(serve(specs, settings))
