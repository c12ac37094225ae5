from __future__ import annotations

import asyncio
import http.client

import pytest

from hairpin_proxy.admin import AdminServer, Check
from hairpin_proxy.metrics import Registry


def fetch(port: int, path: str, method: str = "GET") -> tuple[int, str, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(method, path)
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
