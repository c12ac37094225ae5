"""Where the relay's time goes under one wrk phase: CPU split and a sampled native profile.

    python -m bench.profile_relay --phase close     # one short request per connection
    python -m bench.profile_relay --phase ka        # keep-alive requests
    python -m bench.profile_relay --phase close --against HEAD~1 --pairs 6

Runs nginx, then HAProxy (send-proxy, one thread) and the relay, each pinned to the same core,
under the same wrk phase; prints each one's rate and its user and system CPU per operation.
The relay is also sampled with py-spy (``--native``, which needs the ``bench`` extra), and
the samples are summarised by where they were taken: inside a system call, in the Python
interpreter, in uvloop/libuv, or in our own code. Bounded in time; loopback only.

``--against REV`` (a git revision, or a directory holding a ``hairpin_proxy`` package) instead
compares the working tree's relay with that baseline: both run at once, pinned to the same core,
and the wrk phase alternates between them (ABBA order) so that other load on the machine falls
on both alike. It prints each run's CPU per operation and the median of the paired differences.
``--against haproxy`` does the same with HAProxy (one thread, no splicing) as the baseline, and
without py-spy, whose sampling stops the relay and inflates its CPU figures.

``--phase stalled --conns N`` measures instead what a stalled connection costs: N clients each
send a request and never read, while the upstream sends until the relay stops taking bytes.
It prints the relay's resident memory and its sockets' kernel memory (``ss -tm``: receive and
send queues plus forward allocations, which a cgroup v2 memory limit charges to the pod) per
connection, and how many such connections fit in a memory limit (``--memory-limit``, MiB).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench import loadgen, peers

SYSCALLS = {"accept4", "close", "connect", "epoll_ctl", "epoll_pwait", "epoll_wait",
            "getpeername", "getsockname", "getsockopt", "io_uring_enter", "read", "recv",
            "send", "setsockopt", "shutdown", "socket", "syscall", "write"}


def _ticks(pid: int) -> tuple[int, int]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def _where(frame: str) -> str:
    name = frame.split(" (", 1)[0]
    if name in SYSCALLS or name.startswith("__libc_") or name.startswith("__GI___"):
        return "inside a system call"
    if "hairpin_proxy/" in frame:
        return "hairpin_proxy code"
    if "libpython" in frame or ".py:" in frame or frame.startswith(("Py", "_Py")):
        return "Python interpreter and standard library"
    if "loop.c" in frame or "uv__" in frame or "uvloop" in frame:
        return "uvloop / libuv"
    return "other native code"


def summarise(raw: Path, top: int) -> str:
    where: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        leaf = stack.split(";")[-1]
        leaves[leaf] += n
        where[_where(leaf)] += n
    if not total:
        return "no samples"
    out = [f"{total} samples (wall clock, the relay pinned to one core)", "",
           "| where the sample was taken | share |", "|---|---|"]
    out += [f"| {k} | {100 * v / total:.1f}% |" for k, v in where.most_common()]
    out += ["", f"Top {top} leaf frames:", "", "| frame | share |", "|---|---|"]
    out += [f"| `{k[:90]}` | {100 * v / total:.1f}% |" for k, v in leaves.most_common(top)]
    return "\n".join(out)


def _baseline(rev: str, work: Path) -> Path:
    """A source tree (the directory holding ``hairpin_proxy``) for a revision or a path."""
    given = Path(rev)
    if (given / "hairpin_proxy").is_dir():
        return given.resolve()
    if (given / "src" / "hairpin_proxy").is_dir():
        return (given / "src").resolve()
    archive = work / "baseline.tar"
    subprocess.run(["git", "-C", str(peers.REPO), "archive", "-o", str(archive), rev,
                    "src/hairpin_proxy"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(work / "baseline", filter="data")
    return work / "baseline" / "src"


def _cpu_per_op(pid: int, port: int, seconds: int, conns: int, close: bool
                ) -> tuple[float, float, float]:
    """(rate, user µs, system µs per operation) of one wrk phase against ``port``."""
    u0, s0 = _ticks(pid)
    rate = loadgen.wrk_rps(port, seconds=seconds, connections=conns, close=close)
    u1, s1 = _ticks(pid)
    ops = rate * seconds
    tick = os.sysconf("SC_CLK_TCK")
    return rate, (u1 - u0) / tick / ops * 1e6, (s1 - s0) / tick / ops * 1e6


def compare(args: argparse.Namespace, work: Path, backend: peers.Backend) -> None:
    close = args.phase == "close"
    conns = 32 if close else 64
    extra = args.relay_args.split()
    base_extra = [*extra, *args.base_relay_args.split()]
    against: contextlib.AbstractContextManager[peers.Proc]
    if args.against == "haproxy":
        against = peers.haproxy(work / "base", backend.pp_port, threads=1, splice=False,
                                cpus=args.cpus, maxconn=1000)
    else:
        against = peers.relay(work / "base", backend.pp_port, workers=1, cpus=args.cpus,
                              extra=base_extra, src=_baseline(args.against, work),
                              upstream_host=args.target)
    with peers.relay(work / "new", backend.pp_port, workers=1, cpus=args.cpus,
                     extra=extra, upstream_host=args.target) as new, against as old:
        procs = {"new": new, "base": old}
        # HAProxy's master process forks the worker that does the work: its last pid.
        pids = {"new": new.pids()[0], "base": old.pids()[-1]}
        for proc in procs.values():  # warm up: imports, first allocations
            loadgen.wrk_rps(proc.port, seconds=1, connections=conns, close=close)
        cpu: dict[str, dict[str, list[float]]] = {
            name: {"user": [], "system": [], "total": []} for name in procs}
        unit = "conn/s" if close else "req/s"
        for i in range(args.pairs):
            order = ("base", "new") if i % 2 == 0 else ("new", "base")
            for name in order:
                proc = procs[name]
                rate, user, system = _cpu_per_op(pids[name], proc.port, args.seconds,
                                                 conns, close)
                for key, value in (("user", user), ("system", system),
                                   ("total", user + system)):
                    cpu[name][key].append(value)
                print(f"pair {i + 1} {name:>4}: {rate:8,.0f} {unit}; user {user:6.1f} µs, "
                      f"system {system:6.1f} µs, total {user + system:6.1f} µs", flush=True)
        for key in ("user", "system", "total"):
            before, after = cpu["base"][key], cpu["new"][key]
            diffs = [a - b for a, b in zip(after, before, strict=True)]
            wins = sum(d < 0 for d in diffs)
            print(f"{key:>6}: median base {statistics.median(before):6.1f} µs, new "
                  f"{statistics.median(after):6.1f} µs; paired difference new - base: median "
                  f"{statistics.median(diffs):+.1f} µs, new lower in {wins} of {len(diffs)}")


def _skmem(ports: set[int]) -> tuple[int, int]:
    """(sockets, bytes of kernel memory) of established TCP sockets with one of ``ports`` as
    their local port (ss -tm: rmem_alloc + wmem_queued + forward allocation)."""
    out = subprocess.run(["ss", "-tmnH", "state", "established"], capture_output=True,
                         text=True, check=True).stdout
    lines = out.splitlines()
    total = count = 0
    for i, line in enumerate(lines):
        fields = line.split()
        if len(fields) < 4 or i + 1 >= len(lines) or "skmem:(" not in lines[i + 1]:
            continue
        local = fields[2].rsplit(":", 1)[-1]
        if not local.isdigit() or int(local) not in ports:
            continue
        mem = dict((k[:1] if k[:2] not in ("rb", "tb", "bl") else k[:2], k)
                   for k in lines[i + 1].split("skmem:(")[1].rstrip(")").split(","))
        total += sum(int(mem[k][1:]) for k in ("r", "w", "f") if k in mem)
        count += 1
    return count, total


def _pusher(stop: threading.Event) -> tuple[socket.socket, threading.Thread]:
    """An upstream that reads the PROXY header and request, then sends until blocked."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(4096)
    lsock.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(lsock, selectors.EVENT_READ)
    blob = b"x" * (1 << 20)

    def run() -> None:
        while not stop.is_set():
            for key, _ in sel.select(0.1):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is lsock:
                    with contextlib.suppress(BlockingIOError):
                        conn, _ = lsock.accept()
                        conn.setblocking(False)
                        sel.register(conn, selectors.EVENT_READ | selectors.EVENT_WRITE)
                    continue
                with contextlib.suppress(BlockingIOError, ConnectionError):
                    sock.recv(65536)
                with contextlib.suppress(BlockingIOError, ConnectionError):
                    while sock.send(blob):
                        pass
        sel.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return lsock, thread


@dataclass(frozen=True)
class StalledCost:
    """What one stalled connection costs, in bytes."""

    idle_rss: int       # the relay's resident memory before the connections
    user: float         # resident memory per connection
    client_side: float  # kernel memory per client-facing socket
    upstream_side: float  # kernel memory per upstream-facing socket
    kernel: float       # kernel memory per connection (both sockets)

    @property
    def total(self) -> float:
        return self.user + self.kernel

    def fit(self, limit: int) -> int:
        """Stalled connections that fit in ``limit`` bytes beside the idle process."""
        return int((limit - self.idle_rss) // self.total)


def measure_stalled(work: Path, conns: int, relay_args: str, cpus: str | None) -> StalledCost:
    """Hold ``conns`` stalled connections through a relay started with ``relay_args`` and
    measure what they cost once its memory stops growing."""
    stop = threading.Event()
    upstream, thread = _pusher(stop)
    up_port = upstream.getsockname()[1]
    clients: list[socket.socket] = []
    try:
        with peers.relay(work / "relay", up_port, workers=1, cpus=cpus,
                         extra=relay_args.split()) as proc:
            pid = proc.pids()[0]
            rss0 = peers.rss_kib([pid])
            for _ in range(conns):
                c = socket.create_connection(("127.0.0.1", proc.port))
                c.sendall(b"GET / HTTP/1.1\r\nHost: stalled.test\r\n\r\n")
                clients.append(c)  # never read: the relay's send buffer towards it fills
            last = (-1, -1)
            for _ in range(60):  # until the relay's memory stops growing
                time.sleep(1.0)
                now = (peers.rss_kib([pid]), _skmem({proc.port})[1])
                if now == last:
                    break
                last = now
            rss1 = peers.rss_kib([pid])
            # The relay's sockets: the client-facing ones (local port = listen port) and
            # the upstream-facing ones (remote port = upstream's; local = ephemeral).
            n_client, k_client = _skmem({proc.port})
            out = subprocess.run(["ss", "-tnH", "state", "established", f"dport = :{up_port}"],
                                 capture_output=True, text=True, check=True).stdout
            eph = {int(line.split()[2].rsplit(":", 1)[1]) for line in out.splitlines()
                   if line.strip()}
            n_up, k_up = _skmem(eph)
            return StalledCost(idle_rss=rss0 * 1024, user=(rss1 - rss0) * 1024 / conns,
                               client_side=k_client / max(n_client, 1),
                               upstream_side=k_up / max(n_up, 1),
                               kernel=(k_client + k_up) / conns)
    finally:
        for c in clients:
            c.close()
        stop.set()
        thread.join(5)
        upstream.close()


def stalled(args: argparse.Namespace, work: Path) -> None:
    cost = measure_stalled(work, args.conns, args.relay_args, args.cpus)
    kib = 1024
    print(f"{args.conns} stalled connections (relay {args.relay_args or 'defaults'}): "
          f"idle RSS {cost.idle_rss / kib / kib:.1f} MiB; per connection: user "
          f"{cost.user / kib:.0f} KiB, kernel {cost.kernel / kib:.0f} KiB (client side "
          f"{cost.client_side / kib:.0f} KiB, upstream side {cost.upstream_side / kib:.0f} KiB "
          f"per socket); total {cost.total / kib:.0f} KiB", flush=True)
    print(f"fit in {args.memory_limit} MiB (minus the {cost.idle_rss / kib / kib:.0f} MiB idle "
          f"process): {cost.fit(args.memory_limit * kib * kib)} connections", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--phase", choices=("close", "ka", "stalled"), default="close")
    p.add_argument("--conns", type=int, default=200, help="stalled connections (--phase "
                   "stalled)")
    p.add_argument("--memory-limit", type=int, default=256, help="MiB (--phase stalled)")
    p.add_argument("--seconds", type=int, default=8)
    p.add_argument("--cpus", default="1")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--against", metavar="REV",
                   help="compare with this baseline revision, or 'haproxy' (see above)")
    p.add_argument("--pairs", type=int, default=6)
    p.add_argument("--relay-args", default="", help="extra relay flags, e.g. '--loop asyncio'")
    p.add_argument("--base-relay-args", default="",
                   help="extra flags for the baseline relay only (--against REV): the same "
                        "tree under another setting, e.g. --against . --base-relay-args "
                        "'--loop asyncio'")
    p.add_argument("--target", default="127.0.0.1",
                   help="the relay's target host: a name resolves through the DNS server "
                        "given in --relay-args '--dns-server ADDR:PORT' (nginx's address is "
                        "127.0.0.1)")
    args = p.parse_args()
    if args.phase == "stalled":
        with tempfile.TemporaryDirectory(prefix="hairpin-stalled-") as tmp:
            stalled(args, Path(tmp))
        return 0
    if args.against:
        with tempfile.TemporaryDirectory(prefix="hairpin-compare-") as tmp, \
                peers.nginx(Path(tmp) / "nginx") as backend:
            compare(args, Path(tmp), backend)
        return 0
    close = args.phase == "close"
    conns = 32 if close else 64
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    with tempfile.TemporaryDirectory(prefix="hairpin-profile-") as tmp:
        work = Path(tmp)
        with peers.nginx(work / "nginx") as backend:
            for name in ("HAProxy", "hairpin-proxy"):
                if name == "HAProxy":
                    cm = peers.haproxy(work / "hap", backend.pp_port, threads=1, splice=False,
                                       cpus=args.cpus, maxconn=1000)
                else:
                    cm = peers.relay(work / "relay", backend.pp_port, workers=1, cpus=args.cpus)
                with cm as proc:
                    pid = proc.pids()[-1] if name == "HAProxy" else proc.pids()[0]
                    sampler = None
                    raw = work / "relay.raw"
                    if name != "HAProxy" and Path(spy).exists():
                        sampler = subprocess.Popen(
                            [spy, "record", "--native", "-r", "250",
                             "-d", str(max(1, args.seconds - 1)), "-f", "raw",
                             "-o", str(raw), "-p", str(pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    u0, s0 = _ticks(pid)
                    rate = loadgen.wrk_rps(proc.port, seconds=args.seconds, connections=conns,
                                           close=close)
                    u1, s1 = _ticks(pid)
                    ops = rate * args.seconds
                    tick = os.sysconf("SC_CLK_TCK")
                    user = (u1 - u0) / tick / ops * 1e6
                    system = (s1 - s0) / tick / ops * 1e6
                    unit = "conn/s" if close else "req/s"
                    print(f"{name}: {rate:,.0f} {unit}; CPU per operation: user {user:.1f} µs, "
                          f"system {system:.1f} µs", flush=True)
                    if sampler is not None:
                        try:
                            sampler.wait(args.seconds + 30)
                        except subprocess.TimeoutExpired:
                            sampler.send_signal(signal.SIGINT)
                            sampler.wait(10)
                        if raw.exists():
                            print(summarise(raw, args.top))
                    elif name != "HAProxy":
                        print("py-spy not installed (pip install -e '.[bench]'): no profile")
    return 0


if __name__ == "__main__":
    sys.exit(main())
