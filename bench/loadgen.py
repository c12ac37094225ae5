"""Load generators: wrk for rates, curl for one bulk stream, a paced asyncio client for latency
and an idle-connection holder for memory. Each run is bounded in time and in count."""

from __future__ import annotations

import asyncio
import re
import socket
import statistics
import subprocess
import time

# A v1 header for the direct runs, where the client speaks for the load balancer itself.
DIRECT_HEADER = "PROXY TCP4 127.0.0.1 127.0.0.1 40000 80\r\n"


def wrk_rps(port: int, *, seconds: int, connections: int, close: bool, threads: int = 1) -> float:
    """Requests per second from wrk; ``close`` makes every request a new connection."""
    argv = ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{seconds}s",
            "--timeout", "5s"]
    if close:
        argv += ["-H", "Connection: close"]
    argv.append(f"http://127.0.0.1:{port}/small")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 30,
                          check=False)
    out = proc.stdout
    if proc.returncode != 0:
        raise RuntimeError(f"wrk failed ({proc.returncode}): {proc.stderr}{out}")
    m = re.search(r"Requests/sec:\s*([\d.]+)", out)
    if not m:
        raise RuntimeError(f"wrk printed no rate:\n{out}")
    if re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        raise RuntimeError(f"wrk saw error responses:\n{out}")
    return float(m.group(1))


def curl_gbits(port: int, *, proxy_header: bool, timeout: float = 120.0) -> float:
    """Gbit/s of one 1 GiB download."""
    argv = ["curl", "-sS", "-o", "/dev/null", "-w", "%{speed_download} %{size_download}",
            "--max-time", str(timeout), f"http://127.0.0.1:{port}/big"]
    if proxy_header:
        argv.insert(1, "--haproxy-protocol")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 10,
                         check=True).stdout.split()
    speed, size = float(out[0]), int(out[1])
    if size != 1 << 30:
        raise RuntimeError(f"short download: {size} bytes")
    return speed * 8 / 1e9


async def _paced(port: int, rate: float, seconds: float, conns: int, proxy_header: bool
                 ) -> list[float]:
    request = b"GET /small HTTP/1.1\r\nHost: bench\r\n\r\n"
    latencies: list[float] = []
    interval = conns / rate
    deadline = time.monotonic() + seconds

    async def one(offset: float) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        if proxy_header:
            writer.write(DIRECT_HEADER.encode())
        next_at = time.monotonic() + offset
        try:
            while next_at < deadline:
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                # Latency is measured from the scheduled time, so a stall is not hidden by
                # the client waiting (no coordinated omission).
                scheduled = next_at
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(re.search(rb"Content-Length: (\d+)", head, re.I).group(1))  # type: ignore[union-attr]
                await reader.readexactly(length)
                latencies.append(time.monotonic() - scheduled)
                next_at += interval
        finally:
            writer.close()

    await asyncio.gather(*(one(i * interval / conns) for i in range(conns)))
    return latencies


def paced_latency(port: int, *, rate: float, seconds: float, conns: int,
                  proxy_header: bool) -> tuple[float, float]:
    """(p50, p99) in milliseconds at a fixed request rate over keep-alive connections."""
    lat = asyncio.run(_paced(port, rate, seconds, conns, proxy_header))
    if len(lat) < rate * seconds * 0.9:
        raise RuntimeError(f"only {len(lat)} of {rate * seconds:.0f} requests completed")
    q = statistics.quantiles(lat, n=100)
    return q[49] * 1000, q[98] * 1000


def hold_idle(port: int, count: int, *, proxy_header: bool, timeout: float = 60.0
              ) -> list[socket.socket]:
    """Open ``count`` connections and leave them idle (caller closes them)."""
    socks: list[socket.socket] = []
    deadline = time.monotonic() + timeout
    try:
        for _ in range(count):
            if time.monotonic() > deadline:
                raise RuntimeError(f"opened only {len(socks)} of {count} connections in time")
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            if proxy_header:
                s.sendall(DIRECT_HEADER.encode())
            socks.append(s)
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks
