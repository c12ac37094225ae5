"""Load generators: wrk for rates, a large-read client for one bulk stream, a paced asyncio
client for latency and an idle-connection holder for memory. Each run is bounded in time and
in count."""

from __future__ import annotations

import asyncio
import re
import socket
import statistics
import subprocess
import time

# A v1 header for the direct runs, where the client speaks for the load balancer itself.
DIRECT_HEADER = "PROXY TCP4 127.0.0.1 127.0.0.1 40000 80\r\n"


def wrk_rps(port: int, *, seconds: int, connections: int, close: bool, threads: int = 1,
            path: str = "/small") -> float:
    """Requests per second from wrk; ``close`` makes every request a new connection."""
    argv = ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{seconds}s",
            "--timeout", "5s"]
    if close:
        argv += ["-H", "Connection: close"]
    argv.append(f"http://127.0.0.1:{port}{path}")
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


def bulk_gbits(port: int, *, proxy_header: bool, timeout: float = 120.0) -> float:
    """Gbit/s of one 1 GiB download, read with 1 MiB ``recv_into`` calls.

    curl reads 16 KiB at a time and became the bottleneck (the direct row came out slower
    than the proxied ones), so the stream is read here with large reads instead.
    """
    total = 1 << 30
    buf = bytearray(1 << 20)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        started = time.monotonic()
        request = b"GET /big HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"
        s.sendall((DIRECT_HEADER.encode() if proxy_header else b"") + request)
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError(f"no response head: {head[:200]!r}")
            head += chunk
        head, _, body = head.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"unexpected response: {head[:200]!r}")
        got = len(body)
        deadline = started + timeout
        while got < total:
            n = s.recv_into(buf)
            if not n:
                break
            got += n
            if time.monotonic() > deadline:
                raise RuntimeError(f"1 GiB stream not done after {timeout:g}s")
        elapsed = time.monotonic() - started
    if got != total:
        raise RuntimeError(f"short download: {got} bytes")
    return total * 8 / elapsed / 1e9


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
