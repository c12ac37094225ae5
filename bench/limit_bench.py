"""The plan over a size limit: how long a pass takes when the rules' limit refuses objects.

    python -m bench.limit_bench --objects 4400 --budget 60000
    python -m bench.limit_bench --objects 22000 --budget 300000 --events 10

Builds ``--objects`` Ingresses (one host each, drawn by bench.names: realistic names over
shared domains, a few wildcards; as bench.controller_bench's ``realistic_ingress`` makes them,
each a second newer than the one before) and plans them in process, as the controller's
incremental plan does, with the rules' room and ``--rules-budget`` set to ``--budget`` bytes:
the oldest objects that fit keep their hosts, the rest are refused. Then ``--events`` passes,
each for one new Ingress (the newest), as a lone creation reaches the controller. Reports the
first plan's time, the hosts kept and the objects refused, and each event pass's median and
maximum (``time.perf_counter``, the garbage collector off during the passes as the controller
has it). Not part of the test suite.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from tests.fakeapi.fixtures import service

from bench import names
from bench.controller_bench import NAMESPACE, realistic_ingress
from bench.corefile_bench import PROXY_IP
from hairpin_proxy.plan import PlanSettings
from hairpin_proxy.plan.incremental import Planner
from hairpin_proxy.plan.objects import snapshot_of
from hairpin_proxy.plan.snapshot import Rooms, Snapshot
from hairpin_proxy.policy import HostPolicy, proxy_service_fqdn

EPOCH = 1_700_000_000


def _stamp(i: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(EPOCH + i))


def _ingress(i: int, host: str) -> dict[str, Any]:
    obj = realistic_ingress(f"ns{i % 100}", f"ing{i}", host)
    obj["metadata"].update(uid=f"uid-{i}", resourceVersion=str(i + 1),
                           creationTimestamp=_stamp(i))
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", **obj}


def _proxy_service() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            **service(NAMESPACE, "hairpin-proxy", cluster_ips=[PROXY_IP])}


def _snapshot(count: int, budget: int) -> Snapshot:
    objs = [_proxy_service(), *(_ingress(i, h) for i, h in enumerate(names.hosts(count)))]
    fqdn = proxy_service_fqdn("cluster.local", "hairpin-proxy", NAMESPACE)
    settings = PlanSettings(HostPolicy(proxy_fqdn=fqdn), namespace=NAMESPACE,
                            rules_budget=budget)
    snap = snapshot_of(objs, settings, targets_configmap="hairpin-proxy-targets",
                       now=time.time())
    return dataclasses.replace(snap, rooms=Rooms(budget, "kube-system/coredns[Corefile]"))


def run(count: int, budget: int, events: int) -> dict[str, Any]:
    snap = _snapshot(count, budget)
    planner = Planner()
    gc.disable()
    started = time.perf_counter()
    state = planner.plan(snap)
    first = time.perf_counter() - started
    out: dict[str, Any] = {"objects": count, "budget": budget, "first_plan_s": round(first, 3),
                           "hosts_kept": len(state.hosts), "refused": len(state.refusals)}
    ingresses = list(snap.ingresses)
    passes: list[float] = []
    for k in range(events):
        ingresses.append(_ingress(count + k, f"new-{k}.events.example.com"))
        started = time.perf_counter()
        state = planner.plan(dataclasses.replace(snap, ingresses=list(ingresses)))
        passes.append((time.perf_counter() - started) * 1000)
    gc.enable()
    if passes:
        out["event_pass_ms_median"] = round(statistics.median(passes), 1)
        out["event_pass_ms_max"] = round(max(passes), 1)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=4400, help="Ingresses (one host each)")
    parser.add_argument("--budget", type=int, default=60_000,
                        help="the rules' limit in bytes (room and --rules-budget)")
    parser.add_argument("--events", type=int, default=10, help="passes for one new Ingress")
    parser.add_argument("--save-json", type=Path, metavar="FILE", help="keep the figures")
    args = parser.parse_args()
    got = run(args.objects, args.budget, args.events)
    text = json.dumps(got, indent=2)
    print(text)
    if args.save_json:
        args.save_json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
