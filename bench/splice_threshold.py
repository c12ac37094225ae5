"""Where splicing starts to pay: the default ``--splice-threshold``, chosen by measurement.

    python -m bench.splice_threshold                 # 3 interleaved repetitions, a table
    python -m bench.splice_threshold --reps 5 --seconds 6

For each response size, wrk fetches the response over new connections (one response per
connection) through the relay pinned to one CPU, copying (``--splice off``) and splicing from
the first byte (``--splice-threshold 0``); the relay's CPU time (user plus system) per response
is read from ``/proc``. A straight line through each mode's points, CPU = fixed + size x
per-byte, gives what a pipe costs a connection once (borrowing it, the extra EAGAIN) and what
splicing saves per byte; the threshold at which the two lines cross is where a direction that
has moved that much starts to gain by splicing what follows. Prints a Markdown table and the
fit. Not part of the test suite; bounded in time; loopback only.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench import loadgen, peers

KIB = 1024
SIZES = [4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, 1024 * KIB, 4096 * KIB]
MODES = {"copying": ["--splice", "off"], "splicing": ["--splice-threshold", "0"]}


@dataclass(frozen=True)
class Point:
    rps: float
    cpu_us: float  # relay CPU per response


def fetch(port: int, path: str, seconds: int, pids: list[int]) -> Point:
    cpu0 = peers.cpu_seconds(pids)
    rps = loadgen.wrk_rps(port, seconds=seconds, connections=16, close=True, path=path)
    cpu = peers.cpu_seconds(pids) - cpu0
    return Point(rps, cpu / (rps * seconds) * 1e6)


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares ``y = a + b x``: (a, b)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs)
    return my - b * mx, b


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--reps", type=int, default=3, help="repetitions (median reported)")
    p.add_argument("--seconds", type=int, default=4, help="length of each wrk phase")
    p.add_argument("--cpus", default="1", help="taskset CPU list for the relay")
    args = p.parse_args()
    runs: dict[tuple[str, int], list[Point]] = {}
    with tempfile.TemporaryDirectory(prefix="hairpin-splice-") as tmp:
        work = Path(tmp)
        with peers.nginx(work / "nginx") as backend:
            for size in SIZES:  # sparse files, served from the page cache
                with (work / "nginx" / f"r{size}").open("wb") as f:
                    f.truncate(size)
            for rep in range(args.reps):
                modes = list(MODES.items())
                for name, flags in modes[rep % 2:] + modes[:rep % 2]:
                    with peers.relay(work / name, backend.pp_port, workers=1, cpus=args.cpus,
                                     extra=flags) as proc:
                        pids = proc.pids()
                        for size in SIZES:
                            runs.setdefault((name, size), []).append(
                                fetch(proc.port, f"/r{size}", args.seconds, pids))
    med = {k: Point(statistics.median(r.rps for r in v), statistics.median(r.cpu_us for r in v))
           for k, v in runs.items()}
    print(f"One response per connection, 16 connections, median of {args.reps}; relay pinned "
          f"to CPU {args.cpus}.\n")
    print("| response | copying (resp/s) | splicing (resp/s) | copying CPU (µs/resp) | "
          "splicing CPU (µs/resp) | splicing / copying CPU |")
    print("|---:|---:|---:|---:|---:|---:|")
    for size in SIZES:
        c, s = med["copying", size], med["splicing", size]
        print(f"| {size // KIB} KiB | {c.rps:,.0f} | {s.rps:,.0f} | {c.cpu_us:.1f} | "
              f"{s.cpu_us:.1f} | {s.cpu_us / c.cpu_us:.2f} |")
    xs = [float(size) for size in SIZES]
    (ac, bc), (as_, bs) = (fit(xs, [med[m, size].cpu_us for size in SIZES]) for m in MODES)
    print(f"\nFit: copying {ac:.1f} µs + {bc * KIB * 1000:.1f} ns/KiB; splicing {as_:.1f} µs + "
          f"{bs * KIB * 1000:.1f} ns/KiB.")
    if bc > bs:
        cross = (as_ - ac) / (bc - bs)
        print(f"The lines cross at {cross / KIB:,.0f} KiB: past it, splicing what follows "
              "costs less CPU than copying it.")
    else:
        print("Splicing saves nothing per byte here: no threshold pays.")
    for k, v in runs.items():
        print(f"- {k[0]} {k[1] // KIB} KiB: " + ", ".join(f"{r.cpu_us:.1f}" for r in v))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
