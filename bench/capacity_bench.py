"""Capacity benchmark of the offline and diagnostic commands: `render` and `doctor` at scale.

    python -m bench.capacity_bench --objects 50000
    python -m bench.capacity_bench --objects 2000 --keep /tmp/capacity   # keep the inputs

Writes ``--objects`` Ingresses (one host each, drawn by bench.names: realistic names over
shared domains, a few wildcards; each with TLS, a rule, labels and the last-applied annotation,
as bench.controller_bench's ``realistic_ingress`` makes them) as one multi-document YAML file,
as `kubectl get ingress -A -o yaml` would give them one by one, and a kubeadm-style Corefile.
Then it times, each in its own process as an operator runs it:

- ``hairpin-proxy render --proxy-ip 10.96.0.50 --corefile Corefile --ingress ingresses.yaml``
  (docs/render.md);
- ``hairpin-proxy doctor --kubeconfig K --resolve '*:127.0.0.1' --port 0 --tls-port 0
  --verify-hosts off --no-forged-header-probe --output json --timeout T`` (docs/doctor.md)
  against the in-repository fake API server (loopback HTTPS) holding the same Ingresses, the
  proxy Service with a ready endpoint, and the Corefile `render` wrote: the doctor's cluster
  section and a verdict for every host, no DNS query and no probe (the names resolve
  nowhere).

Reports each command's wall time, CPU time (the child's user and system time), peak RSS (its
``ru_maxrss``) and exit status, the hosts `render` writes a rule for and those it refuses (its
``rejected host`` log lines), and the hosts the doctor checks, of which redirected and in
effect in the Corefile. ``--save-json`` keeps the figures, ``--keep DIR`` the inputs and the
outputs. Not part of the test suite.

Before and after: the commands of another commit run from an export of it, its ``src`` first
on the path (the driver, the names and the fake API server stay this tree's); the outputs of
the two are compared byte for byte, the log lines less their timestamps::

    mkdir /tmp/hp-before && git archive 953604a | tar -x -C /tmp/hp-before
    PYTHONPATH=/tmp/hp-before/src .venv/bin/python -m bench.capacity_bench --keep /tmp/before
    .venv/bin/python -m bench.capacity_bench --keep /tmp/after
    cmp /tmp/before/render.out /tmp/after/render.out
    cmp /tmp/before/doctor.out /tmp/after/doctor.out
    cmp <(cut -d' ' -f3- /tmp/before/render.err) <(cut -d' ' -f3- /tmp/after/render.err)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml
from tests.fakeapi.fixtures import corefile_configmap, endpoint_slice, service
from tests.fakeapi.server import FakeApiServer
from tests.fakeapi.tls import make_serving_cert

from bench.controller_bench import COREFILE, NAMESPACE, loadavg, realistic_ingress
from bench.corefile_bench import PROXY_IP
from bench.names import hosts
from hairpin_proxy import corefile

ROOT = Path(__file__).resolve().parent.parent
# Namespaces the Ingresses are spread over.
NAMESPACES = 100
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@dataclass
class Timed:
    """One command's run: wall seconds, the child's CPU seconds (user and system: on a shared
    machine, steadier than the wall time), its peak RSS, its exit status."""
    command: list[str]
    seconds: float
    cpu_seconds: float
    peak_rss_mib: float
    status: int


# With --py-spy DIR: each command runs under py-spy, its stacks in DIR/<command>.txt.
PROFILE: Path | None = None


def command(name: str) -> list[str]:
    """`hairpin-proxy NAME` as installed beside this Python (the console script), else the
    module; under py-spy with --py-spy."""
    script = Path(sys.executable).with_name("hairpin-proxy")
    base = [str(script)] if script.exists() else [sys.executable, "-m", "hairpin_proxy"]
    if PROFILE is None:
        return [*base, name]
    spy = Path(sys.executable).with_name("py-spy")
    return [str(spy), "record", "--rate", "250", "--format", "raw", "--subprocesses",
            "-o", str(PROFILE / f"{name}.txt"), "--", *base, name]


def timed(args: list[str], stdout: Path, stderr: Path, limit: float) -> Timed:
    """Run ``args`` with its output in files, killed after ``limit`` seconds (status -9)."""
    with stdout.open("wb") as out, stderr.open("wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(args, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                cwd=ROOT)
        watchdog = threading.Timer(limit, proc.kill)
        watchdog.start()
        try:
            _, raw, usage = os.wait4(proc.pid, 0)
        finally:
            watchdog.cancel()
        seconds = time.perf_counter() - t0
    # Popen did not reap the child itself: tell it the status, so that it does not try.
    proc.returncode = os.waitstatus_to_exitcode(raw)
    if PROFILE is not None:
        # py-spy says what it does on the command's standard output: not the command's.
        with stdout.open("rb") as f:
            kept = [line for line in f if not line.startswith(b"py-spy> ")]
        stdout.write_bytes(b"".join(kept))
    return Timed(args, seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024,
                 proc.returncode)


def ingresses(count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` realistic Ingresses, one host each, over NAMESPACES namespaces."""
    return [{"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
             **realistic_ingress(f"ns{i % NAMESPACES}", f"ing{i}", host)}
            for i, host in enumerate(hosts(count, seed))]


def write_inputs(where: Path, objs: list[dict[str, Any]]) -> tuple[Path, Path]:
    """The Ingresses as one multi-document YAML file, and the Corefile."""
    manifest, core = where / "ingresses.yaml", where / "Corefile"
    with manifest.open("w") as out:
        yaml.dump_all(objs, out, Dumper=_DUMPER, sort_keys=False, explicit_start=True)
    core.write_text(COREFILE)
    return manifest, core


def rejected(log: str) -> int:
    """The hosts `render` logged as refused."""
    return sum(" rejected host " in line for line in log.splitlines())


def run_render(where: Path, manifest: Path, core: Path, limit: float) -> dict[str, Any]:
    out, err = where / "render.out", where / "render.err"
    t = timed([*command("render"), "--proxy-ip", PROXY_IP, "--corefile", str(core),
               "--ingress", str(manifest)], out, err, limit)
    text = out.read_text()
    return {**asdict(t), "served": len(corefile.managed_hosts(text)) if t.status == 0 else None,
            "refused": rejected(err.read_text()), "corefile_bytes": len(text.encode())}


def run_doctor(where: Path, objs: list[dict[str, Any]], rendered: str, timeout: float,
               limit: float) -> dict[str, Any]:
    """The doctor against the fake API server holding ``objs`` and the rendered Corefile."""
    with FakeApiServer(tls=make_serving_cert(where)) as api:
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        api.create(service(NAMESPACE, "hairpin-proxy", cluster_ips=[PROXY_IP]))
        api.create(endpoint_slice(NAMESPACE, "hairpin-proxy"))
        api.create(corefile_configmap(rendered))
        t0 = time.perf_counter()
        for obj in objs:
            api.create(obj)
        loaded = time.perf_counter() - t0
        kubeconfig = api.write_kubeconfig(where / "kubeconfig")
        api.clear_requests()
        out, err = where / "doctor.out", where / "doctor.err"
        t = timed([*command("doctor"), "--kubeconfig", str(kubeconfig), "--namespace",
                   NAMESPACE, "--resolve", "*:127.0.0.1", "--port", "0", "--tls-port", "0",
                   "--verify-hosts", "off", "--no-forged-header-probe", "--output", "json",
                   "--timeout", f"{timeout:g}"], out, err, limit)
        pages = api.count("GET", r"/apis/networking.k8s.io/v1/ingresses(\?|$)")
    result: dict[str, Any] = {**asdict(t), "api_load_seconds": loaded, "ingress_pages": pages}
    try:
        doc = json.loads(out.read_text())
    except ValueError:
        return {**result, "checked": None, "api": None}
    checked = doc.get("hosts") or []
    targets = Counter(((h.get("target") or {}).get("verdict") or "none") for h in checked)
    rules = set((doc.get("cluster") or {}).get("rule_hosts") or [])
    return {**result, "api": doc.get("api"), "checked": len(checked),
            "redirected": targets.get("redirected", 0),
            "rule_in_effect": sum(h.get("host") in rules for h in checked),
            "verdicts": dict(Counter(h.get("verdict") for h in checked))}


def report(r: dict[str, Any]) -> str:
    rd, dr = r["render"], r["doctor"]
    return "\n".join([
        f"{r['objects']:,} Ingresses ({r['yaml_mib']:.1f} MiB of YAML), machine "
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"load average at the start {r['load_start']}, at the end {r['load_end']}",
        f"render: {rd['seconds']:.2f} s ({rd['cpu_seconds']:.2f} s CPU), peak RSS "
        f"{rd['peak_rss_mib']:.0f} MiB, exit "
        f"{rd['status']}; hosts served {rd['served']}, refused {rd['refused']}; Corefile "
        f"{rd['corefile_bytes']:,} bytes",
        f"doctor: {dr['seconds']:.2f} s ({dr['cpu_seconds']:.2f} s CPU), peak RSS "
        f"{dr['peak_rss_mib']:.0f} MiB, exit "
        f"{dr['status']}; API: {dr['api']}; {dr['ingress_pages']} pages of Ingresses; hosts "
        f"checked {dr['checked']}, redirected {dr.get('redirected')}, rule in effect "
        f"{dr.get('rule_in_effect')}; verdicts {dr.get('verdicts')}",
    ])


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Time `hairpin-proxy render` and `hairpin-proxy doctor` over many "
                    "Ingresses with realistic host names.")
    parser.add_argument("--objects", type=int, default=50_000, help="Ingresses (one host each)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the host names")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="the doctor's --timeout (its API phase gets twice that)")
    parser.add_argument("--limit", type=float, default=600.0,
                        help="seconds after which a command is killed")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="write the inputs and outputs to DIR and keep them")
    parser.add_argument("--save-json", type=Path, metavar="FILE",
                        help="also write the figures to FILE")
    parser.add_argument("--py-spy", type=Path, metavar="DIR", dest="py_spy",
                        help="profile each command with py-spy (raw stacks in DIR; the "
                             "peak RSS is then py-spy's own)")
    args = parser.parse_args()
    global PROFILE
    PROFILE = args.py_spy
    if PROFILE is not None:
        PROFILE.mkdir(parents=True, exist_ok=True)
    if args.objects < 1:
        parser.error("--objects must be at least 1")
    result: dict[str, Any] = {"objects": args.objects, "seed": args.seed,
                              "load_start": loadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        where = args.keep or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        objs = ingresses(args.objects, args.seed)
        manifest, core = write_inputs(where, objs)
        result["yaml_mib"] = manifest.stat().st_size / 2**20
        result["render"] = run_render(where, manifest, core, args.limit)
        rendered = (where / "render.out").read_text() or COREFILE
        result["doctor"] = run_doctor(where, objs, rendered, args.timeout, args.limit)
    result["load_end"] = loadavg()
    if args.save_json:
        args.save_json.write_text(json.dumps(result, indent=1) + "\n")
    print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
