"""Micro-benchmark of the Corefile engine on a kubeadm-style Corefile with a large managed block.

    python -m bench.corefile_bench              # 100 / 1,000 / 10,000 hosts
    python -m bench.corefile_bench --sizes 10000 --repeat 21

Prints the median wall time of each operation, in milliseconds. The Corefile already holds N
hosts (one in fifty a wildcard, as Ingress rules sometimes are); "apply (+1)" and "apply (-1)"
ask for N+1 and N-1 hosts, which is what the controller does on one Ingress event. Not part of
the test suite.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from tests.corefiles import HERE as CORPUS
from tests.corefiles import TARGET

from hairpin_proxy import corefile

# The kubeadm layout from the test corpus, and the corpus's rewrite target.
KUBEADM = (CORPUS / "kubeadm.Corefile").read_text()


def hosts(n: int) -> list[str]:
    return [f"*.team-{i}.example.com" if i % 50 == 0 else f"app-{i}.ns-{i % 97}.example.com"
            for i in range(n)]


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm-up: compiled regexes, first allocations
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def measure(n: int, repeat: int) -> tuple[int, dict[str, float]]:
    """(Corefile bytes, median ms per operation) for a Corefile holding ``n`` hosts."""
    base = hosts(n)
    text = corefile.apply(KUBEADM, base, target=TARGET)
    plus, minus = (*base, "one-more.example.com"), base[1:]
    assert corefile.managed_hosts(text) == tuple(sorted(base))
    ops: dict[str, Callable[[], object]] = {
        "parse": lambda: corefile.parse(text),
        "apply (no change)": lambda: corefile.apply(text, base, target=TARGET),
        "apply (+1 host)": lambda: corefile.apply(text, plus, target=TARGET),
        "apply (-1 host)": lambda: corefile.apply(text, minus, target=TARGET),
        "managed_hosts": lambda: corefile.managed_hosts(text),
        "remove": lambda: corefile.remove(text),
    }
    return len(text.encode()), {k: median_ms(f, repeat) for k, f in ops.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1_000, 10_000])
    ap.add_argument("--repeat", type=int, default=11)
    args = ap.parse_args()

    rows = [(n, *measure(n, args.repeat)) for n in args.sizes]
    names = list(rows[0][2])
    print("| hosts | Corefile bytes | " + " | ".join(f"{k} ms" for k in names) + " |")
    print("|---:|---:|" + "---:|" * len(names))
    for n, size, r in rows:
        print(f"| {n:,} | {size:,} | " + " | ".join(f"{r[k]:.2f}" for k in names) + " |")


if __name__ == "__main__":
    main()
