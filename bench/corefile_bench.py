"""Micro-benchmark of the Corefile engine on a kubeadm-style Corefile with many managed hosts.

    python -m bench.corefile_bench              # 100 / 1,000 / 10,000 hosts
    python -m bench.corefile_bench --sizes 10000 --repeat 21

Prints, per host count, the size of the whole Corefile after ``apply``, the CoreDNS rules in it
(``template`` stanzas and the ``match`` regexes in them; ``rewrite`` lines for the format of
earlier versions), its longest line, and the median wall time of each operation in
milliseconds. The Corefile already holds N hosts (one in fifty a wildcard, as Ingress rules
sometimes are); "apply (+1)" and "apply (-1)" ask for N+1 and N-1 hosts, which is what the
controller does on one Ingress event. Not part of the test suite.

Before and after: the same measures for the code of another commit (the one-``rewrite``-line-
per-host format of commit 0586156), run from a git worktree in a child process with that
tree's ``src`` first on the path; this script, the corpus and the host list stay this tree's::

    git worktree add /tmp/hp-before 0586156      # from the checkout's top
    .venv/bin/python -m bench.corefile_bench --before /tmp/hp-before
    git worktree remove --force /tmp/hp-before

(``--json`` prints the raw figures of the code that is imported; ``--before`` runs
``PYTHONPATH=/tmp/hp-before/src python -m bench.corefile_bench --json`` for the old side.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tests.corefiles import HERE as CORPUS
from tests.corefiles import PROXY_FQDN

import hairpin_proxy
from hairpin_proxy import corefile

ROOT = Path(__file__).resolve().parent.parent
# The kubeadm layout from the test corpus, and the corpus's proxy Service name.
KUBEADM = (CORPUS / "kubeadm.Corefile").read_text()
PROXY_IP = "10.96.0.50"
# The template format (with the Answers type) or the rewrite format of earlier versions.
TEMPLATE_FORMAT = hasattr(corefile, "Answers")


def apply(text: str, hosts: Iterable[str]) -> str:
    """``corefile.apply`` of whichever version is imported."""
    fn: Callable[..., str] = corefile.apply
    if TEMPLATE_FORMAT:
        answers = corefile.Answers.of([PROXY_IP])
        return fn(text, hosts, answers=answers, proxy_fqdn=PROXY_FQDN)
    return fn(text, hosts, proxy_fqdn=PROXY_FQDN)


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


def shape(text: str) -> dict[str, int]:
    """Bytes, longest line (bytes) and our CoreDNS rules in a Corefile.

    Counted by line (the first word of each line): the kubeadm Corefile has no ``rewrite``,
    ``template`` or ``match`` line of its own, so all of them are ours."""
    lines = text.encode().splitlines()
    first = [ln.split(maxsplit=1)[0] if ln.strip() else b"" for ln in lines]
    return {"bytes": len(text.encode()), "longest_line": max(map(len, lines)),
            "rewrite_rules": first.count(b"rewrite"), "template_stanzas": first.count(b"template"),
            "match_regexes": first.count(b"match")}


def measure(n: int, repeat: int) -> dict[str, Any]:
    """The shape of a Corefile holding ``n`` hosts and the median ms of each operation."""
    base = hosts(n)
    text = apply(KUBEADM, base)
    plus, minus = (*base, "one-more.example.com"), base[1:]
    assert corefile.managed_hosts(text) == tuple(sorted(base))
    ops: dict[str, Callable[[], object]] = {
        "parse": lambda: corefile.parse(text),
        "apply (no change)": lambda: apply(text, base),
        "apply (+1 host)": lambda: apply(text, plus),
        "apply (-1 host)": lambda: apply(text, minus),
        "managed_hosts": lambda: corefile.managed_hosts(text),
        "remove": lambda: corefile.remove(text),
    }
    return {"hosts": n, **shape(text), "ms": {k: median_ms(f, repeat) for k, f in ops.items()}}


def measure_all(sizes: list[int], repeat: int) -> dict[str, Any]:
    return {"code": str(Path(hairpin_proxy.__file__).resolve().parent.parent.parent),
            "format": "template" if TEMPLATE_FORMAT else "rewrite",
            "rows": [measure(n, repeat) for n in sizes]}


def measure_before(tree: Path, sizes: list[int], repeat: int) -> dict[str, Any]:
    """``measure_all`` in a child process importing hairpin_proxy from ``tree``/src."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree / "src"), str(ROOT)])}
    out = subprocess.run(
        [sys.executable, "-m", "bench.corefile_bench", "--json", "--repeat", str(repeat),
         "--sizes", *map(str, sizes)], cwd=ROOT, env=env, check=True, capture_output=True,
        text=True).stdout
    result: dict[str, Any] = json.loads(out)
    if Path(result["code"]) != tree.resolve():
        raise SystemExit(f"the child process imported hairpin_proxy from {result['code']}, "
                         f"not {tree}")
    return result


def rules(row: dict[str, Any]) -> str:
    if row["template_stanzas"]:
        return f"{row['template_stanzas']} stanzas, {row['match_regexes']} regexes"
    return f"{row['rewrite_rules']:,} rewrite lines"


def table(result: dict[str, Any]) -> str:
    names = list(result["rows"][0]["ms"])
    shown = "this checkout" if Path(result["code"]) == Path(__file__).resolve().parent.parent \
        else result["code"]
    out = [f"{result['format']} format, code from {shown}", "",
           "| hosts | Corefile bytes | longest line (bytes) | CoreDNS rules | "
           + " | ".join(f"{k} ms" for k in names) + " |",
           "|---:|---:|---:|---|" + "---:|" * len(names)]
    for r in result["rows"]:
        out.append(f"| {r['hosts']:,} | {r['bytes']:,} | {r['longest_line']:,} | {rules(r)} | "
                   + " | ".join(f"{r['ms'][k]:.2f}" for k in names) + " |")
    return "\n".join(out)


def comparison(old: dict[str, Any], new: dict[str, Any]) -> str:
    out = ["| hosts | old bytes | new bytes | old rules (rewrite lines) | new stanzas / regexes "
           "| longest line old / new (bytes) | apply (+1 host) ms old / new "
           "| remove ms old / new | managed_hosts ms old / new |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for o, n in zip(old["rows"], new["rows"], strict=True):
        assert o["hosts"] == n["hosts"]
        out.append(
            f"| {n['hosts']:,} | {o['bytes']:,} | {n['bytes']:,} | {o['rewrite_rules']:,} | "
            f"{n['template_stanzas']} / {n['match_regexes']} | "
            f"{o['longest_line']:,} / {n['longest_line']:,} | "
            + " | ".join(f"{o['ms'][k]:.2f} / {n['ms'][k]:.2f}"
                         for k in ("apply (+1 host)", "remove", "managed_hosts")) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1_000, 10_000])
    ap.add_argument("--repeat", type=int, default=11)
    ap.add_argument("--json", action="store_true", help="print the raw figures as JSON")
    ap.add_argument("--before", type=Path, metavar="TREE",
                    help="also measure the code of TREE/src (a git worktree) and compare")
    args = ap.parse_args()

    if args.json:
        print(json.dumps(measure_all(args.sizes, args.repeat)))
        return
    old = measure_before(args.before, args.sizes, args.repeat) if args.before else None
    new = measure_all(args.sizes, args.repeat)
    if old is not None:
        print(table(old), end="\n\n")
    print(table(new))
    if old is not None:
        print("\nBefore / after:\n")
        print(comparison(old, new))


if __name__ == "__main__":
    main()
