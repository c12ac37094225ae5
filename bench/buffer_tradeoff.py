"""What ``--socket-buffer`` trades: one stream's throughput against a stalled connection's memory.

    python -m bench.buffer_tradeoff                        # 0, 64, 128, 256 and 512 KiB
    python -m bench.buffer_tradeoff --sizes 65536 0 --reps 5

For each size: the single 1 GiB stream through the relay (median of ``--reps``, the relay
pinned as in ``bench.run``) with the relay's CPU time per byte, what one stalled connection
holds (``bench.profile_relay --phase stalled``: a client that never reads while the upstream
sends until the relay stops taking bytes), how many such connections fit in
``--memory-limit``, and the ``--max-connections`` the relay derives from that limit. Each size
is measured copying (``--splice off``) and splicing (``--splice auto``, the default threshold
for the stream; ``--splice-threshold 0`` for the stalled connections, so that they splice):
a stalled spliced connection's pipe is neither resident memory nor socket memory, so its
column adds the pipe's bound (``limits.pipe_bytes``), not a measurement. HAProxy (one thread,
with and without splicing) streams through the same nginx for reference.
Prints a Markdown table. Not part of the test suite; bounded in time; loopback only.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench import loadgen, peers
from bench.profile_relay import measure_stalled
from hairpin_proxy.relay import limits

KIB = 1024
MIB = 1024 * KIB


@dataclass(frozen=True)
class Stream:
    gbits: float
    ns_per_byte: float  # proxy CPU time (user + system) per byte relayed


def stream(proc: peers.Proc, pids: list[int]) -> Stream:
    cpu0 = peers.cpu_seconds(pids)
    gbits = loadgen.bulk_gbits(proc.port, proxy_header=False)
    cpu = peers.cpu_seconds(pids) - cpu0
    return Stream(gbits, cpu * 1e9 / (1 << 30))


def median(runs: list[Stream]) -> Stream:
    return Stream(statistics.median(r.gbits for r in runs),
                  statistics.median(r.ns_per_byte for r in runs))


def relay_key(size: int, splice: bool) -> str:
    return f"{size} {'splice' if splice else 'copy'}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+",
                   default=[65536, 0, 131072, 262144, 524288],
                   help="--socket-buffer values to measure, in bytes (0: autotuned)")
    p.add_argument("--reps", type=int, default=5, help="streams per size (median reported)")
    p.add_argument("--conns", type=int, default=200, help="stalled connections per size")
    p.add_argument("--memory-limit", type=int, default=256, help="MiB")
    p.add_argument("--cpus", default="1", help="taskset CPU list for the proxies")
    args = p.parse_args()
    limit = args.memory_limit * MIB
    streams: dict[str, list[Stream]] = {}
    with tempfile.TemporaryDirectory(prefix="hairpin-buffers-") as tmp:
        work = Path(tmp)
        with peers.nginx(work / "nginx") as backend:
            # The first stream after nginx starts runs at a fraction of the rate (the file's
            # pages are not cached yet); it is not measured.
            loadgen.bulk_gbits(backend.pp_port, proxy_header=True)
            # Rotated, so that whatever else loads the machine falls on every row alike.
            for rep in range(args.reps):
                rows: list[tuple[str, int, bool]] = [
                    *(("haproxy", 0, splice) for splice in (False, True)),
                    *(("relay", size, splice) for size in args.sizes
                      for splice in (False, True))]
                rows = rows[rep % len(rows):] + rows[:rep % len(rows)]
                for kind, value, splice in rows:
                    if kind == "haproxy":
                        key = f"HAProxy {'splice' if splice else 'no splice'}"
                        cm = peers.haproxy(work / "hap", backend.pp_port, threads=1,
                                           splice=splice, cpus=args.cpus)
                    else:
                        key = relay_key(value, splice)
                        cm = peers.relay(work / "relay", backend.pp_port, workers=1,
                                         cpus=args.cpus,
                                         extra=["--socket-buffer", str(value), "--splice",
                                                "auto" if splice else "off"])
                    with cm as proc:
                        pids = proc.pids()
                        streams.setdefault(key, []).append(stream(proc, pids))
        stalled = {relay_key(size, splice): measure_stalled(
            work / f"stalled-{relay_key(size, splice)}", args.conns,
            f"--socket-buffer {size} " + ("--splice-threshold 0" if splice else "--splice off"),
            args.cpus) for size in args.sizes for splice in (False, True)}
    print(f"Single 1 GiB stream, median of {args.reps}; stalled connections: {args.conns} "
          f"held at once; fit and derived limit for a {args.memory_limit} MiB memory limit.\n")
    print("| `--socket-buffer` | `--splice` | stream (Gbit/s) | proxy CPU per byte (ns) | "
          "stalled connection: proxy RSS / kernel (+ pipe bound) (KiB) | stalled connections "
          "that fit (measured) | derived `--max-connections` |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for size in args.sizes:
        for splice in (False, True):
            key = relay_key(size, splice)
            s, cost = median(streams[key]), stalled[key]
            name = f"{size // KIB} KiB" if size else "0 (autotuned)"
            derived = limits.connection_limit(str(limit), None, size, splice=splice)
            pipe = limits.pipe_bytes(size) if splice else 0  # one direction stalled
            held = f"{cost.user / KIB:.0f} / {cost.kernel / KIB:.0f}" + (
                f" (+ {pipe / KIB:.0f})" if splice else "")
            fit = int((limit - cost.idle_rss) // (cost.total + pipe))
            print(f"| {name} | {'auto' if splice else 'off'} | {s.gbits:.2f} | "
                  f"{s.ns_per_byte:.2f} | {held} | {fit:,} | {derived:,} |")
    for key in ("HAProxy no splice", "HAProxy splice"):
        s = median(streams[key])
        print(f"| {key} | | {s.gbits:.2f} | {s.ns_per_byte:.2f} | | | |")
    print("\nRaw streams (Gbit/s): " + "; ".join(
        f"{k}: {', '.join(f'{r.gbits:.2f}' for r in v)}" for k, v in streams.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
