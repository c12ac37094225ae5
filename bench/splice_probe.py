"""Would an ``os.splice`` path pay off for one bulk stream? An upper bound, measured.

    python -m bench.splice_probe            # 3 interleaved runs, prints a table

The candidate is the cheapest splice relay Python can have: blocking sockets, one thread per
direction, socket -> pipe -> socket with 1 MiB pipes and no event loop at all (a real relay
path would add readiness callbacks and EAGAIN handling on top). It streams 1 GiB from the
nginx backend, pinned to the same core as the relay and HAProxy, next to them in the same run.
If this bound is not clearly ahead of the relay's Protocol path, a splice path is not worth its
complexity. Every phase is bounded; all traffic is loopback.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from bench import loadgen, peers

PIPE_BYTES = 1 << 20
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def _pump(src: socket.socket, dst: socket.socket) -> None:
    r, w = os.pipe()
    with contextlib.suppress(OSError):
        fcntl.fcntl(w, F_SETPIPE_SZ, PIPE_BYTES)
    try:
        while True:
            n = os.splice(src.fileno(), w, PIPE_BYTES)
            if not n:
                break
            while n:
                n -= os.splice(r, dst.fileno(), n)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    finally:
        os.close(r)
        os.close(w)


def serve(port: int, backend: int, count: int) -> None:
    """Relay ``count`` connections (one at a time) to ``backend`` with a v1 header."""
    with socket.create_server(("127.0.0.1", port)) as srv:
        for _ in range(count):
            client, addr = srv.accept()
            with client, socket.create_connection(("127.0.0.1", backend)) as up:
                local = client.getsockname()
                up.sendall(f"PROXY TCP4 {addr[0]} {local[0]} {addr[1]} {local[1]}\r\n".encode())
                down = threading.Thread(target=_pump, args=(up, client))
                down.start()
                _pump(client, up)
                down.join(300)


@contextlib.contextmanager
def splice_relay(backend: int, cpus: str, count: int) -> Iterator[int]:
    port = peers.free_port()
    argv = ["taskset", "-c", cpus, sys.executable, "-m", "bench.splice_probe", "--serve",
            str(port), str(backend), str(count)]
    env = {**os.environ, "PYTHONPATH": str(peers.REPO)}
    popen = subprocess.Popen(argv, env=env, cwd=peers.REPO)
    try:
        peers.wait_for_port(port)
        yield port
    finally:
        popen.kill()
        popen.wait(10)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--cpus", default="1")
    p.add_argument("--serve", nargs=3, type=int, metavar=("PORT", "BACKEND", "COUNT"),
                   help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(*args.serve)
        return 0
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="hairpin-splice-") as tmp:
        work = Path(tmp)
        with peers.nginx(work / "nginx") as backend:
            for rep in range(args.reps):
                for name in ("HAProxy no splice", "HAProxy splice", "hairpin-proxy",
                             "Python os.splice, 2 threads"):
                    proc: contextlib.AbstractContextManager[peers.Proc | int]
                    if name.startswith("HAProxy"):
                        proc = peers.haproxy(work / "hap", backend.pp_port, threads=1,
                                             splice="no" not in name, cpus=args.cpus,
                                             maxconn=1000)
                    elif name == "hairpin-proxy":
                        proc = peers.relay(work / "relay", backend.pp_port, workers=1,
                                           cpus=args.cpus)
                    else:
                        # One connection for the readiness check, one for the stream.
                        proc = splice_relay(backend.pp_port, args.cpus, 2)
                    with proc as running:
                        port = running if isinstance(running, int) else running.port
                        gbits = loadgen.bulk_gbits(port, proxy_header=False)
                    results.setdefault(name, []).append(gbits)
                    print(f"[{rep + 1}/{args.reps}] {name}: {gbits:.2f} Gbit/s", flush=True)
    print("\n| relay | single 1 GiB stream, Gbit/s (median) | runs |\n|---|---|---|")
    for name, vals in results.items():
        runs = ", ".join(f"{v:.2f}" for v in vals)
        print(f"| {name} | {statistics.median(vals):.2f} | {runs} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
