"""Relay benchmark: direct to nginx, HAProxy (with and without splicing) and hairpin-proxy,
side by side in one run, same backend, same load generators.

    make bench                      # full run, writes docs/benchmarks.md and docs/benchmarks.png
    python -m bench.run --quick     # smoke run (1 repetition, short phases), prints only

Not part of the test suite. Every phase is bounded in count and time; all traffic is loopback.

The report replaces the file's text except its marked sections, written by other benchmarks or
by hand, which are kept as they are, in their order, after it::

    <!-- BEGIN name -->
    ...
    <!-- END name -->
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import re
import resource
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench import loadgen, peers
from bench.profile_relay import measure_stalled
from hairpin_proxy.relay import limits
from hairpin_proxy.settings import ProxySettings

FIGURES = {
    "gbits": ("single 1 GiB stream", "Gbit/s", True),
    "conn_rate": ("new connections", "conn/s", True),
    "ka_rps": ("keep-alive requests", "req/s", True),
    "p50_ms": ("p50 latency at fixed rate", "ms", False),
    "p99_ms": ("p99 latency at fixed rate", "ms", False),
    "idle_kib": ("RSS per idle connection", "KiB", False),
    # What the proxy process itself spent: the efficiency behind the rates, and the figure
    # least disturbed by whatever else runs on the machine.
    "conn_cpu_us": ("proxy CPU per new connection", "µs", False),
    "ka_cpu_us": ("proxy CPU per keep-alive request", "µs", False),
}
ANALYSIS = "benchmarks-analysis.md"
# The targets: (figure, bound, True for "at least" / False for "at most", relative to HAProxy
# or absolute). A target is met only against the better of HAProxy's two rows.
TARGETS = [
    ("gbits", 1.0, True, True),
    ("conn_rate", 1.1, True, True),
    ("ka_rps", 1.0, True, True),
    ("p99_ms", 1.0, False, True),
    ("idle_kib", 1.1, False, False),
]
STALLED_KIB = 330.0  # at most, per stalled connection, copying or spliced
SCALING = 1.9        # at least: new connections of two workers over one


@dataclass
class Scenario:
    name: str
    # Starts the thing under test in front of the backend; yields (port, pids or None).
    start: Callable[[Path, peers.Backend], contextlib.AbstractContextManager[peers.Proc | None]]
    direct: bool = False
    results: dict[str, list[float]] = field(default_factory=dict)

    def add(self, key: str, value: float) -> None:
        self.results.setdefault(key, []).append(value)

    def median(self, key: str) -> float | None:
        vals = self.results.get(key)
        return statistics.median(vals) if vals else None


@contextlib.contextmanager
def _nothing(_: Path, __: peers.Backend) -> Iterator[None]:
    yield None


@contextlib.contextmanager
def _off_cpus(cpus: str) -> Iterator[None]:
    """Run this process on the CPUs outside the taskset list ``cpus`` (if any remain)."""
    pinned: set[int] = set()
    for part in filter(None, cpus.split(",")):
        lo, _, hi = part.partition("-")
        pinned.update(range(int(lo), int(hi or lo) + 1))
    before = os.sched_getaffinity(0)
    others = before - pinned
    if not pinned or not others:
        yield
        return
    os.sched_setaffinity(0, others)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def measure(sc: Scenario, backend: peers.Backend, work: Path, args: argparse.Namespace) -> None:
    with sc.start(work / sc.name, backend) as proc:
        port = backend.pp_port if proc is None else proc.port
        direct = proc is None
        sc.add("gbits", loadgen.bulk_gbits(port, proxy_header=direct))
        # wrk only sends valid HTTP, so its direct runs use nginx's plain listener: parsing a
        # 40-byte header is noise beside a TCP handshake, and the direct row is a reference,
        # not a target.
        wrk_port = backend.plain_port if direct else port
        for key, conns, close in (("conn_rate", 32, True), ("ka_rps", 64, False)):
            pids = [] if proc is None else proc.pids()
            cpu0 = peers.cpu_seconds(pids)
            rate = loadgen.wrk_rps(wrk_port, seconds=args.seconds, connections=conns,
                                   close=close)
            cpu = peers.cpu_seconds(pids) - cpu0
            sc.add(key, rate)
            if proc is not None:
                key_cpu = "conn_cpu_us" if close else "ka_cpu_us"
                sc.add(key_cpu, cpu / (rate * args.seconds) * 1e6)
        # The paced client is Python and busy between requests: on the proxy's core it
        # would queue behind the proxy (and the proxy behind it), which made p99 a measure of
        # the scheduler. The proxy's core stays its own here (the rate phases leave the load
        # generators unpinned: pinned, they would cap both proxies alike).
        with _off_cpus(args.proxy_cpus):
            p50, p99 = loadgen.paced_latency(port, rate=args.rate, seconds=args.seconds,
                                             conns=20, proxy_header=direct)
        sc.add("p50_ms", p50)
        sc.add("p99_ms", p99)
        if proc is not None:
            pids = proc.pids()
            before = peers.rss_kib(pids)
            socks = loadgen.hold_idle(port, args.idle, proxy_header=False)
            try:
                time.sleep(2.0)  # let every upstream connection be established
                after = peers.rss_kib(proc.pids())
            finally:
                for s in socks:
                    s.close()
            sc.add("idle_kib", (after - before) / args.idle)


def scaling(backend: peers.Backend, work: Path, args: argparse.Namespace,
            runs: dict[int, Scenario]) -> None:
    """New connections through one worker and through two, neither pinned: what ``--workers``
    buys on this machine, where wrk and nginx share the same cores as the relay."""
    for workers, sc in runs.items():
        with peers.relay(work / f"workers{workers}", backend.pp_port, workers=workers,
                         cpus=None) as proc:
            pids = proc.pids()
            cpu0 = peers.cpu_seconds(pids)
            rate = loadgen.wrk_rps(proc.port, seconds=args.seconds, connections=64, close=True,
                                   threads=2)
            cpu = peers.cpu_seconds(pids) - cpu0
            sc.add("conn_rate", rate)
            sc.add("conn_cpu_us", cpu / (rate * args.seconds) * 1e6)
            # Connections per second of the proxy's CPU: how the work scales when each
            # worker has a core of its own, whatever else takes the machine's cores.
            sc.add("conn_per_cpu_s", rate * args.seconds / cpu if cpu else 0.0)


def stalled(work: Path, args: argparse.Namespace) -> dict[str, float]:
    """KiB one stalled connection holds, copying and spliced (the pipe's bound added: a
    pipe's pages are neither the process's resident memory nor socket memory)."""
    size = ProxySettings().socket_buffer
    out = {}
    for name, flags, pipe in (("copying", "--splice off", 0),
                              ("spliced", "--splice-threshold 0", limits.pipe_bytes(size))):
        cost = measure_stalled(work / f"stalled-{name}", args.stalled, flags,
                               args.proxy_cpus or None)
        out[name] = (cost.total + pipe) / 1024
    return out


def scenarios(args: argparse.Namespace) -> list[Scenario]:
    cpus = args.proxy_cpus or None
    out = [Scenario("direct (client sends header)", _nothing, direct=True)]
    for splice in (False, True):
        label = f"HAProxy {'splice' if splice else 'no splice'}"

        def start_hap(work: Path, b: peers.Backend, splice: bool = splice
                      ) -> contextlib.AbstractContextManager[peers.Proc]:
            return peers.haproxy(work, b.pp_port, threads=args.workers, splice=splice, cpus=cpus,
                                 maxconn=args.idle + 400)
        out.append(Scenario(label, start_hap))
    variants = [("hairpin-proxy", [])] + [
        (f"hairpin-proxy {v}", v.split()) for v in args.variant]
    for name, extra in variants:
        def start_relay(work: Path, b: peers.Backend, extra: list[str] = extra
                        ) -> contextlib.AbstractContextManager[peers.Proc]:
            return peers.relay(work, b.pp_port, workers=args.workers, cpus=cpus, extra=extra)
        out.append(Scenario(name, start_relay))
    return out


def fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f}" if value < 100 else f"{value:,.0f}"


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# A section this script does not write: from its BEGIN line to the END line of the same name.
SECTION = re.compile(r"^<!-- BEGIN (?P<name>[\w.-]+) -->$.*?^<!-- END (?P=name) -->$",
                     re.DOTALL | re.MULTILINE)
_BEGIN = re.compile(r"^<!-- BEGIN ([\w.-]+) -->$", re.MULTILINE)


def sections(text: str) -> dict[str, str]:
    """The marked sections of ``text`` by name, markers included; ValueError on a BEGIN marker
    without its END (rewriting would drop what follows it)."""
    found = {m["name"]: m.group(0) for m in SECTION.finditer(text)}
    unclosed = [name for name in _BEGIN.findall(text) if name not in found]
    if unclosed:
        raise ValueError(f"section {unclosed[0]!r} has no '<!-- END {unclosed[0]} -->' line")
    return found


def with_sections(generated: str, previous: str) -> str:
    """``generated`` followed by the marked sections of ``previous`` that it lacks."""
    own = sections(generated)
    kept = [text for name, text in sections(previous).items() if name not in own]
    return generated.rstrip("\n") + "".join(f"\n\n{text}" for text in kept) + "\n"


def report(scs: list[Scenario], args: argparse.Namespace, load: tuple[str, str],
           workers: dict[int, Scenario], held: dict[str, float]) -> str:
    hap = next(s for s in scs if s.name == "HAProxy no splice")
    hap_splice = next(s for s in scs if s.name == "HAProxy splice")
    lines = [
        "# Relay benchmark",
        "",
        f"Generated by `make bench` ({time.strftime('%Y-%m-%d')}); machine: {os.cpu_count()} "
        f"cores, {platform.machine()}, Python {platform.python_version()}. Proxy processes "
        f"pinned to CPU `{args.proxy_cpus or 'any'}`; relay workers = HAProxy nbthread = "
        f"{args.workers}; the fixed-rate latency client runs off the proxy's CPU. "
        f"Each figure is the median of {args.reps} runs (the scenario order rotates from one "
        "repetition to the next); ratios are against HAProxy "
        f"(without / with splicing). Idle-connection RSS is measured with {args.idle:,} "
        "connections held open through the proxy.",
        "",
        f"Load average (1, 5, 15 min) at the start: {load[0]}; at the end: {load[1]}. "
        "Proxy CPU figures are user plus system time of the proxy process over the phase, "
        "divided by the connections or requests served.",
        "",
        f"What was tried, kept and rejected, the targets and the gaps: [{ANALYSIS}]({ANALYSIS}).",
        "",
        "| scenario | " + " | ".join(f"{t} ({u})" for t, u, _ in FIGURES.values()) + " |",
        "|---|" + "---|" * len(FIGURES),
    ]
    for sc in scs:
        lines.append(f"| {sc.name} | " + " | ".join(fmt(sc.median(k)) for k in FIGURES) + " |")
    lines += ["", "Ratios to HAProxy (higher is better for rates, lower for latency and memory):",
              "",
              "| scenario | " + " | ".join(t for t, _, _ in FIGURES.values()) + " |",
              "|---|" + "---|" * len(FIGURES)]
    for sc in scs:
        if sc.name.startswith("hairpin-proxy"):
            cells = []
            for k in FIGURES:
                v, h1, h2 = sc.median(k), hap.median(k), hap_splice.median(k)
                cells.append("n/a" if v is None or not h1 or not h2
                             else f"{v / h1:.2f} / {v / h2:.2f}")
            lines.append(f"| {sc.name} | " + " | ".join(cells) + " |")
    ours = next(s for s in scs if s.name == "hairpin-proxy")
    lines += ["", "Targets (hairpin-proxy with its defaults against the better HAProxy row):", "",
              "| figure | target | measured | met |", "|---|---|---|---|"]
    for key, bound, at_least, relative in TARGETS:
        title, unit, higher = FIGURES[key]
        v = ours.median(key)
        if relative:
            hs = [h for h in (hap.median(key), hap_splice.median(key)) if h]
            best = (max(hs) if higher else min(hs)) if hs else None
            value = None if v is None or not best else v / best
            want = f"{'>=' if at_least else '<='} {bound:g} x HAProxy"
            got = "n/a" if value is None else f"{value:.2f} x"
        else:
            value = v
            want = f"{'>=' if at_least else '<='} {bound:g} {unit}"
            got = "n/a" if value is None else f"{value:.2f} {unit}"
        met = "n/a" if value is None else (
            "yes" if (value >= bound if at_least else value <= bound) else "**no**")
        lines.append(f"| {title} | {want} | {got} | {met} |")
    lines += _extra_targets(workers, held)
    lines += _scaling_table(workers)
    lines += ["", "Raw runs:", ""]
    for sc in [*scs, *workers.values()]:
        raw = "; ".join(f"{k}: {', '.join(fmt(v) for v in vals)}" for k, vals in sc.results.items())
        lines.append(f"- {sc.name}: {raw}")
    return "\n".join(lines) + "\n"


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def _extra_targets(workers: dict[int, Scenario], held: dict[str, float]) -> list[str]:
    lines = []
    for name, kib in held.items():
        lines.append(f"| memory per stalled connection, {name} | <= {STALLED_KIB:g} KiB | "
                     f"{kib:.0f} KiB | {_met(kib <= STALLED_KIB)} |")
    one, two = workers[1].median("conn_rate"), workers[2].median("conn_rate")
    if one and two:
        lines.append(f"| new connections, two workers over one (all CPUs) | >= {SCALING:g} x | "
                     f"{two / one:.2f} x | {_met(two / one >= SCALING)} |")
    return lines


def _scaling_table(workers: dict[int, Scenario]) -> list[str]:
    lines = ["", "Workers (neither pinned: the relay, wrk and nginx share all the machine's "
             "CPUs; 64 connections, 2 wrk threads):", "",
             "| relay | new connections (conn/s) | proxy CPU per new connection (µs) | "
             "connections per proxy CPU-second |", "|---|---|---|---|"]
    for sc in workers.values():
        lines.append(f"| {sc.name} | {fmt(sc.median('conn_rate'))} | "
                     f"{fmt(sc.median('conn_cpu_us'))} | {fmt(sc.median('conn_per_cpu_s'))} |")
    return lines


def chart(scs: list[Scenario], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hap = next(s for s in scs if s.name == "HAProxy no splice")
    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.8 / len(scs)
    keys = list(FIGURES)
    for i, sc in enumerate(scs):
        vals = []
        for k in keys:
            v, h = sc.median(k), hap.median(k)
            vals.append(0.0 if v is None or not h else v / h)
        ax.bar([x + i * width for x in range(len(keys))], vals, width, label=sc.name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([x + width * (len(scs) - 1) / 2 for x in range(len(keys))])
    ax.set_xticklabels([textwrap.fill(FIGURES[k][0], 16) for k in keys], fontsize=8)
    for key, bound, _, relative in TARGETS:
        if relative:
            x = keys.index(key)
            ax.hlines(bound, x - 0.1, x + 0.9, colors="red", linestyles="dashed", linewidth=1)
    ax.set_ylabel("ratio to HAProxy (no splice)")
    ax.set_title(f"Relay benchmark, {os.cpu_count()} cores; dashed red: targets "
                 "(rates higher is better, latency/memory/CPU lower)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--reps", type=int, default=3, help="repetitions per figure (median reported)")
    p.add_argument("--seconds", type=int, default=8, help="length of each rate phase")
    p.add_argument("--rate", type=float, default=2000, help="request rate of the latency phase")
    # A relayed connection costs two descriptors in one process; where the hard limit on open
    # files is below 20,000 (no CAP_SYS_RESOURCE to raise it) fewer idle connections fit.
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    fit = 10000 if hard == resource.RLIM_INFINITY else min(10000, (hard - 1000) // 2)
    p.add_argument("--idle", type=int, default=fit,
                   help="idle connections for the RSS phase (10,000 where the fd limit allows)")
    p.add_argument("--workers", type=int, default=1, help="relay workers = HAProxy threads")
    p.add_argument("--stalled", type=int, default=200,
                   help="stalled connections held at once for the memory figure")
    p.add_argument("--proxy-cpus", default="1" if (os.cpu_count() or 1) > 1 else "",
                   help="taskset CPU list for the proxy under test ('' = no pinning)")
    p.add_argument("--variant", action="append", default=[],
                   help="extra relay configuration to measure, as relay flags (repeatable; "
                        "default: --splice off, --loop asyncio, --socket-buffer 0)")
    p.add_argument("--quick", action="store_true", help="1 repetition, short phases, no files")
    p.add_argument("--out", type=Path, default=peers.REPO / "docs" / "benchmarks.md")
    args = p.parse_args()
    # Checked before the run, so that a broken marker is found now rather than after it; read
    # again at the end, as the sections may be edited meanwhile.
    if not args.quick and args.out.exists():
        sections(args.out.read_text())
    if args.quick:
        args.reps, args.seconds = 1, 3
    elif not args.variant:
        # The alternatives to the defaults, measured in the same run so their numbers stay
        # current: the copying path alone, the standard library's loop, and the kernel's
        # autotuned socket buffers (what the 64 KiB default costs a single stream).
        args.variant = ["--splice off", "--loop asyncio", "--socket-buffer 0"]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2 * args.idle + 1000
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), max(hard, want)))
    if args.quick:
        args.idle = min(args.idle, 2000)
    scs = scenarios(args)
    workers = {n: Scenario(f"hairpin-proxy --workers {n}", _nothing) for n in (1, 2)}
    with tempfile.TemporaryDirectory(prefix="hairpin-bench-") as tmp:
        work = Path(tmp)
        with peers.nginx(work / "nginx") as backend:
            load_start = loadavg()
            for rep in range(args.reps):
                # Other work on the machine comes and goes: rotating the order keeps any one
                # scenario from always running in the same slot of a repetition.
                shift = rep % len(scs)
                for sc in scs[shift:] + scs[:shift]:
                    print(f"[{rep + 1}/{args.reps}] {sc.name}", flush=True)
                    measure(sc, backend, work / f"rep{rep}", args)
                print(f"[{rep + 1}/{args.reps}] workers", flush=True)
                scaling(backend, work / f"rep{rep}", args, workers)
            print("stalled connections", flush=True)
            held = stalled(work, args)
            load_end = loadavg()
    text = report(scs, args, (load_start, load_end), workers, held)
    print(text)
    if not args.quick:
        previous = args.out.read_text() if args.out.exists() else ""
        args.out.write_text(with_sections(text, previous))
        chart(scs, args.out.with_suffix(".png"))
        print(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
