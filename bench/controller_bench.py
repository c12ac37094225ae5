"""Controller benchmark against the fake API server (loopback HTTP), 10,000 Ingresses.

    python -m bench.controller_bench            # full run, writes docs/benchmarks-controller.md
    python -m bench.controller_bench --quick    # smaller and shorter, prints only

Measures: list-of-N to first write, event-to-write latency (p50/p99), controller RSS once
synced, and API requests per minute at steady state. The controller runs exactly as deployed
(`python -m hairpin_proxy controller`), in its own process. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tests.fakeapi.fixtures import corefile_configmap, ingress
from tests.fakeapi.server import FakeApiServer

from bench.corefile_bench import median_ms
from hairpin_proxy import corefile
from hairpin_proxy.controller import PolicyCache
from hairpin_proxy.kube.watch import object_key
from hairpin_proxy.policy import HostPolicy, evaluate

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "hairpin-proxy"
COREFILE = """\
.:53 {
    errors
    health
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
    }
    prometheus :9153
    forward . /etc/resolv.conf
    cache 30
    loop
    reload
    loadbalance
}
"""
COREFILE_PUT = r"/namespaces/kube-system/configmaps/coredns$"
PUBLISHED_PUT = rf"/namespaces/{NAMESPACE}/configmaps/hairpin-proxy-hosts$"
DEFAULT_DEBOUNCE = 0.2  # the controller's default
TARGET = "hairpin-proxy.hairpin-proxy.svc.cluster.local."


def wait_until(predicate: object, limit: float, what: str) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"benchmark: {what} not reached within {limit}s")
        time.sleep(0.005)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def policy_ms(api: FakeApiServer) -> dict[str, float]:
    """The policy's share of a reconcile on these Ingresses, in this process: a full evaluate
    (what every reconcile did before the per-Ingress cache, and what the first one still does)
    against the controller's incremental pass after one new Ingress."""
    objs = {object_key(o): o for o in api.list("Ingress")}
    policy = HostPolicy()
    full = median_ms(lambda: evaluate(list(objs.values()), [], policy), 9)
    cache = PolicyCache(policy)
    t0 = time.perf_counter()
    cache.update(dict(objs), [])
    first = (time.perf_counter() - t0) * 1000
    times = []
    for i in range(50):
        obj = ingress("bench-policy", f"p{i}", tls_hosts=[f"policy{i}.example.com"])
        obj["metadata"].update(uid=f"bench-policy-{i}", resourceVersion=f"bench-{i}")
        objs[object_key(obj)] = obj
        t0 = time.perf_counter()
        cache.update(dict(objs), [])
        times.append(time.perf_counter() - t0)
    return {"evaluate_full_ms": full, "policy_first_ms": first,
            "policy_incremental_ms": statistics.median(times) * 1000,
            "policy_incremental_max_ms": max(times) * 1000}


def run(count: int, events: int, steady: float, debounce: float | None
        ) -> dict[str, object]:
    out: dict[str, object] = {"ingresses": count, "events": events, "debounce": debounce,
                              "load_start": loadavg()}
    flags = [] if debounce is None else ["--debounce", str(debounce)]
    quiet = (DEFAULT_DEBOUNCE if debounce is None else debounce) + 0.05
    with FakeApiServer() as api, tempfile.TemporaryDirectory() as tmp:
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        api.create(corefile_configmap(COREFILE))
        for i in range(count):
            api.create(ingress(f"ns{i % 100}", f"ing{i}", tls_hosts=[f"app{i}.example.com"]))
        kubeconfig = api.write_kubeconfig(Path(tmp) / "kubeconfig")
        api.clear_requests()
        log = (Path(tmp) / "controller.log").open("wb")

        def controller(*extra: str) -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                [sys.executable, "-m", "hairpin_proxy", "controller", "--kubeconfig",
                 str(kubeconfig), "--namespace", NAMESPACE, "--admin-listen", "",
                 *flags, *extra, "--log-level", "info"],
                stdout=log, stderr=log, cwd=ROOT)

        proc = controller()
        try:
            wait_until(lambda: api.count("PUT", COREFILE_PUT) >= 1, 120, "first write")
            first_list = api.requests("GET", r"/apis/networking.k8s.io/v1/ingresses",
                                      watch=False)[0].time
            first_put = api.requests("PUT", COREFILE_PUT)[0].time
            out["first_write_s"] = first_put - first_list

            def corefile_text() -> str:
                cm = api.get("ConfigMap", "kube-system", "coredns")
                return str((cm or {}).get("data", {}).get("Corefile", ""))

            # The request log records a PUT on arrival; wait for the store to hold it.
            wait_until(lambda: corefile_text().count("rewrite name") >= count, 30, "stored")
            assert len(corefile.managed_hosts(corefile_text())) == count
            assert api.count("PUT", COREFILE_PUT) == 1, "more than one write at start"
            time.sleep(1.0)
            out["rss_mib"] = rss_kib(proc.pid) / 1024

            latencies: list[float] = []
            for i in range(events):
                # A short request log keeps the polling below from loading the API server.
                api.clear_requests()
                t0 = time.time()
                api.create(ingress("bench", f"ev{i}", tls_hosts=[f"event{i}.example.com"]))
                wait_until(lambda: api.count("PUT", COREFILE_PUT) > 0, 30,
                           "write after an event")
                put = api.requests("PUT", COREFILE_PUT, since=t0)[0]
                latencies.append(put.time - t0)
                # The pass ends with the published hosts; the next Ingress comes after a
                # quiet spell, as a lone change does (one inside a burst waits for the
                # debounce by design).
                wait_until(lambda: api.count("PUT", PUBLISHED_PUT) > 0, 30, "pass end")
                time.sleep(quiet)
            out["latency_p50_ms"] = pct(latencies, 0.5) * 1000
            out["latency_p99_ms"] = pct(latencies, 0.99) * 1000
            out["latency_max_ms"] = max(latencies) * 1000
            out["latency_mean_ms"] = statistics.fmean(latencies) * 1000
            # The share of one pure Corefile edit (same size, in this process) in that latency.
            text = corefile_text()
            hosts = corefile.managed_hosts(text)
            t0 = time.perf_counter()
            corefile.apply(text, (*hosts, "one-more.example.com"), target=TARGET)
            out["apply_ms"] = (time.perf_counter() - t0) * 1000
            out.update(policy_ms(api))

            time.sleep(1.0)
            out["steady_seconds"] = steady
            out["requests_per_minute"], out["requests_breakdown"] = steady_state(api, steady)
            out["open_watches"] = api.open_watches

            # The same without leader election: what is left is the watches alone.
            proc.terminate()
            proc.wait(20)
            wait_until(lambda: api.open_watches == 0, 30, "the first controller's watches closed")
            proc = controller("--no-leader-elect")
            wait_until(lambda: api.open_watches == out["open_watches"], 60,
                       "the second controller's watches open")
            time.sleep(2.0)
            out["steady_no_lease_seconds"] = steady / 2
            out["requests_per_minute_no_lease"], out["requests_breakdown_no_lease"] = \
                steady_state(api, steady / 2)
            out["load_end"] = loadavg()
        except BaseException:
            sys.stderr.write("controller log (tail):\n" + "\n".join(
                (Path(tmp) / "controller.log").read_text(errors="replace").splitlines()[-40:])
                + "\n")
            raise
        finally:
            proc.terminate()
            proc.wait(20)
            log.close()
    return out


def steady_state(api: FakeApiServer, seconds: float) -> tuple[float, dict[str, float]]:
    """API requests per minute over the next ``seconds``, and per minute by kind."""
    start = time.time()
    time.sleep(seconds)
    reqs = api.requests(since=start)
    kinds: Counter[str] = Counter()
    for r in reqs:
        if r.watch:
            kinds["watch (re)connects"] += 1
        elif "/leases" in r.path:
            kinds[f"lease {r.method}"] += 1
        else:
            kinds[f"other {r.method} {r.path}"] += 1
    return len(reqs) * 60 / seconds, {k: round(v * 60 / seconds, 1) for k, v in kinds.items()}


def report(r: dict[str, object]) -> str:
    breakdown, quiet = r["requests_breakdown"], r["requests_breakdown_no_lease"]
    assert isinstance(breakdown, dict) and isinstance(quiet, dict)
    lines = [
        "# Controller benchmark",
        "",
        "Written by `python -m bench.controller_bench` (not part of the test suite). The",
        "controller runs as deployed, in its own process, against the in-repository fake API",
        "server over loopback HTTP; the API server and the benchmark driver share the machine.",
        "",
        f"- Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, {platform.system()} {platform.release()}",
        f"- Ingresses present at start: {r['ingresses']:,} (one TLS host each)",
        "- " + ("default settings (`--debounce 0.2`)" if r["debounce"] is None
                else f"`--debounce {r['debounce']}`") + "; leader election on (default timings)",
        f"- Load average (1, 5, 15 min) at the start: {r['load_start']}; at the end: "
        f"{r['load_end']}",
        "",
        "| Measure | Result | Target |",
        "|---|---|---|",
        f"| List of {r['ingresses']:,} Ingresses to first Corefile write | "
        f"{r['first_write_s']:.2f} s | <= 2 s |",
        f"| Event-to-write latency p50 ({r['events']} Ingress creations) | "
        f"{r['latency_p50_ms']:.1f} ms | |",
        f"| Event-to-write latency p99 | {r['latency_p99_ms']:.1f} ms | <= 100 ms |",
        f"| Event-to-write latency max | {r['latency_max_ms']:.1f} ms | |",
        f"| of which one `corefile.apply` on that Corefile (measured alone) | "
        f"{r['apply_ms']:.1f} ms | |",
        f"| of which the host policy per reconcile, one new Ingress (measured alone; median, "
        f"max of 50) | {r['policy_incremental_ms']:.1f} ms, {r['policy_incremental_max_ms']:.1f}"
        f" ms | |",
        f"| host policy, full pass over all Ingresses: first reconcile / `policy.evaluate` "
        f"(median) | {r['policy_first_ms']:.0f} ms / {r['evaluate_full_ms']:.0f} ms | |",
        f"| Controller RSS with {r['ingresses']:,} Ingresses cached | {r['rss_mib']:.0f} MiB | |",
        f"| API requests per minute at steady state ({r['steady_seconds']:.0f} s window) | "
        f"{r['requests_per_minute']:.1f} | only the open watches |",
        f"| the same with `--no-leader-elect` (one replica; "
        f"{r['steady_no_lease_seconds']:.0f} s window) | "
        f"{r['requests_per_minute_no_lease']:.1f} | |",
        f"| Open watches | {r['open_watches']} | |",
        "",
        "Steady-state requests per minute by kind:",
        "",
        *[f"- {k}: {v}" for k, v in sorted(breakdown.items())],
        *[f"- with `--no-leader-elect`, {k}: {v}" for k, v in sorted(quiet.items())],
        "",
        "Latency is measured from the Ingress creation at the API server to the arrival of",
        "the controller's PUT of the Corefile ConfigMap there (the request log's clock). Each",
        "Ingress is created after the previous pass has ended and the debounce has passed, as",
        "a lone change arrives: such a change starts a pass at once. Changes inside a burst",
        "wait until it is over (the debounce) by design, and coalesce into one or two writes.",
        "The steady-state requests are the Lease renewals (one PUT per",
        "retry period, 2 s by default) and watch reconnects (each stream is ended by the server",
        "every 5-10 minutes); no polling. Without leader election only the watches remain.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="1,000 Ingresses, short phases")
    parser.add_argument("--ingresses", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--steady", type=float, default=60.0)
    parser.add_argument("--debounce", type=float, default=None,
                        help="controller --debounce (default: the controller's own)")
    args = parser.parse_args()
    if args.quick:
        result = run(1000, 20, 5.0, args.debounce)
    else:
        result = run(args.ingresses, args.events, args.steady, args.debounce)
    text = report(result)
    print(text)
    if not args.quick:
        (ROOT / "docs" / "benchmarks-controller.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
