from __future__ import annotations

import asyncio
import http.client
from collections.abc import Callable, Iterable

import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import parser as openmetrics_parser
from prometheus_client.parser import text_string_to_metric_families

from hairpin_proxy.admin import AdminServer, Check
from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.metrics import Registry
from hairpin_proxy.relay.stats import RelayMetrics
from tests.peers import has_ipv6_loopback

openmetrics_families: Callable[[str], Iterable[Metric]] = (
    openmetrics_parser.text_string_to_metric_families)


def fetch(port: int, path: str, method: str = "GET", accept: str | None = None,
          host: str = "127.0.0.1") -> tuple[int, str, str]:
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request(method, path, headers={"Accept": accept} if accept is not None else {})
    resp = conn.getresponse()
    body = resp.read().decode()
    conn.close()
    return resp.status, resp.getheader("Content-Type") or "", body


async def serve_and_query(server: AdminServer, paths: list[tuple[str, str]]
                          ) -> list[tuple[int, str, str]]:
    await server.start("127.0.0.1:0")
    try:
        return [await asyncio.to_thread(fetch, server.port, p, m) for m, p in paths]
    finally:
        await server.close()


def test_endpoints_answer_from_checks_and_registry() -> None:
    registry = Registry()
    registry.counter("demo_total", "Demo.").inc(3)
    ready = Check(False, "upstream refused")

    async def readiness() -> Check:
        return ready

    results = asyncio.run(serve_and_query(AdminServer(registry, ready=readiness), [
        ("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics"), ("GET", "/nope"),
        ("POST", "/metrics")]))
    assert results[0][0] == 200
    assert results[1][0] == 503 and "upstream refused" in results[1][2]
    assert results[2][0] == 200 and "demo_total 3" in results[2][2]
    assert "version=0.0.4" in results[2][1]
    assert results[3][0] == 404
    assert results[4][0] == 405


@pytest.mark.parametrize("failure", ["raise", "hang"])
def test_a_broken_check_is_a_503_not_a_crash(failure: str) -> None:
    async def readiness() -> Check:
        if failure == "raise":
            raise RuntimeError("boom")
        await asyncio.sleep(60)
        return Check(True)

    server = AdminServer(Registry(), ready=readiness, check_timeout=0.2)
    (status, _, body), = asyncio.run(serve_and_query(server, [("GET", "/readyz")]))
    assert status == 503
    assert ("boom" in body) if failure == "raise" else ("timed out" in body)


def test_metrics_scrape_parses_with_the_reference_parser() -> None:
    """A real scrape: our metrics, the build info and the standard collectors, correctly typed."""
    registry = Registry()
    relay = RelayMetrics(registry)
    stats = relay.for_listener("0.0.0.0:8080")
    stats.total.inc(4)
    stats.connect_seconds.observe(0.002)
    stats.errors["connect_refused"].inc()

    async def query() -> list[tuple[int, str, str]]:
        server = AdminServer(registry)
        await server.start("127.0.0.1:0")
        try:
            return [await asyncio.to_thread(fetch, server.port, "/metrics", "GET", accept)
                    for accept in (None, "application/openmetrics-text;version=1.0.0;q=0.5,"
                                         "text/plain;version=0.0.4;q=0.3")]
        finally:
            await server.close()

    (status, ctype, text), (om_status, om_ctype, om_text) = asyncio.run(query())
    assert status == 200 and ctype == "text/plain; version=0.0.4; charset=utf-8"
    types = {f.name: f.type for f in text_string_to_metric_families(text)}
    # The parser names a counter family without its _total.
    assert types["hairpin_proxy_connections"] == "counter"
    assert types["hairpin_proxy_errors"] == "counter"
    assert types["hairpin_proxy_connections_active"] == "gauge"
    assert types["hairpin_proxy_upstream_connect_seconds"] == "histogram"
    assert types["hairpin_proxy_build_info"] == "gauge"
    assert types["process_cpu_seconds"] == "counter"
    assert types["process_resident_memory_bytes"] == "gauge"
    assert types["python_gc_objects_collected"] == "counter"
    assert types["python_info"] == "gauge"
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples[("hairpin_proxy_connections_total", (("listener", "0.0.0.0:8080"),))] == 4
    assert samples[("hairpin_proxy_upstream_connect_seconds_bucket",
                    (("le", "0.005"), ("listener", "0.0.0.0:8080")))] == 1
    info = next(k for k in samples if k[0] == "hairpin_proxy_build_info")
    assert dict(info[1])["component"] == "proxy" and samples[info] == 1

    assert om_status == 200 and om_ctype.startswith("application/openmetrics-text")
    om = {f.name: f.type for f in openmetrics_families(om_text)}
    assert om["hairpin_proxy_connections"] == "counter"
    assert om["hairpin_proxy_upstream_connect_seconds"] == "histogram"


def test_controller_scrape_keeps_its_names_and_whole_numbers() -> None:
    """What the controller tests and existing dashboards grep for: names, labels, integers."""
    registry = Registry()
    metrics = ControllerMetrics(registry)
    metrics.hosts_managed.set(2)
    metrics.writes.labels("corefile").inc()
    metrics.last_sync.set(1700000000.5)
    (_, _, text), = asyncio.run(serve_and_query(AdminServer(registry), [("GET", "/metrics")]))
    lines = text.splitlines()
    assert "hairpin_controller_hosts_managed 2" in lines
    assert 'hairpin_controller_writes_total{target="corefile"} 1' in lines
    assert "hairpin_controller_last_successful_sync_timestamp_seconds 1.7000000005e+09" in lines
    types = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert types["hairpin_controller_reconcile_duration_seconds"] == "histogram"
    assert types["hairpin_controller_leader"] == "gauge"


@pytest.mark.usefixtures("own_network")  # binds a wildcard address
def test_the_default_address_serves_ipv4_and_ipv6_probes() -> None:
    """``[::]`` (the default of every admin endpoint) is one dual-stack socket: the kubelet's
    probes and Prometheus reach it over IPv4 and IPv6 alike. asyncio alone would make it
    IPv6-only."""
    async def query() -> list[int]:
        server = AdminServer(Registry())
        await server.start("[::]:0")
        try:
            return [(await asyncio.to_thread(fetch, server.port, "/healthz", "GET", None,
                                             host))[0] for host in ("127.0.0.1", "::1")]
        finally:
            await server.close()

    if not has_ipv6_loopback():
        pytest.skip("no IPv6 loopback here")
    assert asyncio.run(query()) == [200, 200]
