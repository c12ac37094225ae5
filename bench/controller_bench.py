"""Controller benchmark against the fake API server (loopback HTTPS), 10,000 Ingresses.

    python -m bench.controller_bench            # full run, writes docs/benchmarks-controller.md
    python -m bench.controller_bench --quick    # smaller and shorter, prints only
    python -m bench.controller_bench --py-spy /tmp/passes.txt   # also profile the passes

Measures: list-of-N to first write, event-to-write latency (p50/p99), controller RSS once
synced, the Corefile's size before and after, and API requests per minute at steady state. The
controller runs exactly as deployed (`python -m hairpin_proxy controller` with the image's
Python settings, tests/image.py), in its own process, with the proxy Service (a ClusterIP) and
a ready EndpointSlice of it in place, without which it withdraws every rule. Not part of the
test suite.

Before and after: the controller of another commit (commit 0586156, which wrote one
``rewrite`` line per host) runs from a git worktree with that tree's ``src`` first on the path
(the benchmark driver, the fake API server and the report stay this tree's); its figures go to
a JSON file, which the run of this tree's code then sets beside its own in the report::

    git worktree add /tmp/hp-before 0586156      # from the checkout's top
    PYTHONPATH=/tmp/hp-before/src .venv/bin/python -m bench.controller_bench \\
        --save-json /tmp/controller-before.json --output /tmp/controller-before.md
    .venv/bin/python -m bench.controller_bench --before /tmp/controller-before.json
    git worktree remove --force /tmp/hp-before
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fakeapi.crds import ENVOY_CLIENT_TRAFFIC_POLICY
from tests.fakeapi.fixtures import (
    corefile_configmap,
    endpoint_slice,
    gateway,
    gateway_class,
    ingress,
    route,
    service,
)
from tests.fakeapi.server import FakeApiServer
from tests.fakeapi.tls import make_serving_cert
from tests.image import as_in_image

from bench import corefile_bench, names
from bench.corefile_bench import PROXY_IP, TEMPLATE_FORMAT, median_ms
from bench.run import sections, with_sections
from hairpin_proxy import corefile
from hairpin_proxy.policy import HostPolicy
from hairpin_proxy.settings import ControllerSettings

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


def has_setting(name: str) -> bool:
    return any(f.name == name for f in dataclasses.fields(ControllerSettings))


def controller_default(name: str) -> float | None:
    """The default of a controller setting in the code under test (None: no such setting)."""
    for f in dataclasses.fields(ControllerSettings):
        if f.name == name and isinstance(f.default, (int, float)):
            return float(f.default)
    return None


DEFAULT_DEBOUNCE = controller_default("debounce") or 0.0
# Least seconds between two Corefile writes (a flapping Ingress must not make CoreDNS reload
# without end); versions before it wrote at once.
WRITE_INTERVAL = controller_default("write_interval") or 0.0
# The hosts here resolve nowhere (no network, made-up names): checking their public DNS, where
# the version does, would refuse them all. Its cost is not what this benchmark measures.
FIXED_FLAGS = ["--verify-hosts", "off"] if has_setting("verify_hosts") else []
CODE = str(Path(corefile.__file__).resolve().parents[3 if TEMPLATE_FORMAT else 2])
FORMAT = "template" if TEMPLATE_FORMAT else "rewrite"


def _shown(code: str) -> str:
    """A code path as the report shows it: this checkout by that name, others as given."""
    here = Path(__file__).resolve().parent.parent
    return "this checkout" if Path(code).resolve() == here else code


def realistic_ingress(namespace: str, name: str, host: str) -> dict[str, Any]:
    """An Ingress as `kubectl apply` leaves it: a rule with a path, TLS, a few annotations and
    labels, and the last-applied-configuration annotation (a copy of the whole object), which
    is what most of a real Ingress's bytes are."""
    obj = ingress(namespace, name, tls_hosts=[host], rule_hosts=[host],
                  labels={"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "bench"},
                  annotations={"cert-manager.io/cluster-issuer": "letsencrypt",
                               "nginx.ingress.kubernetes.io/proxy-body-size": "8m"})
    obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = (
        json.dumps(obj, sort_keys=True) + "\n")
    return obj


GATEWAY = ("gateway-system", "public")
ENVOY = "gateway.envoyproxy.io/gatewayclass-controller"


def realistic_route(namespace: str, name: str, host: str) -> dict[str, Any]:
    """An HTTPRoute as Envoy Gateway leaves it: attached to the bench's Gateway, accepted in
    its status, with the last-applied-configuration annotation."""
    obj = route("HTTPRoute", namespace, name, hostnames=[host], parent=GATEWAY[1],
                parent_namespace=GATEWAY[0])
    obj["spec"]["rules"] = [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                             "backendRefs": [{"name": name, "port": 80}]}]
    obj["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": json.dumps(obj, sort_keys=True)}
    obj["status"] = {"parents": [{
        "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                      "namespace": GATEWAY[0], "name": GATEWAY[1]},
        "controllerName": ENVOY,
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                        "message": "", "observedGeneration": 1,
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]}
    return obj


def gateway_objects() -> list[dict[str, Any]]:
    """Envoy Gateway's class, one Gateway for every namespace's routes, its data-plane Service
    and the ClientTrafficPolicy that makes it expect PROXY: its routes get a slot."""
    ns, name = GATEWAY
    svc = service("envoy-gateway-system", "envoy-gateway-system-public-1a2b3c4d",
                  type="LoadBalancer", lb_ingress=[{"ip": "203.0.113.20"}],
                  labels={"gateway.envoyproxy.io/owning-gateway-name": name,
                          "gateway.envoyproxy.io/owning-gateway-namespace": ns},
                  ports=[{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 80},
                         {"name": "https", "port": 443, "protocol": "TCP", "targetPort": 443}])
    ctp = {"apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "ClientTrafficPolicy",
           "metadata": {"namespace": ns, "name": "proxy-protocol"},
           "spec": {"targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                    "name": name}], "proxyProtocol": {}}}
    listeners = [{"name": "http", "port": 80, "protocol": "HTTP", "hostname": "*.example.com",
                  "allowedRoutes": {"namespaces": {"from": "All"}}}]
    return [gateway_class("eg", ENVOY), gateway(ns, name, "eg", listeners=listeners), svc, ctp]


def settled_slots(api: FakeApiServer) -> None:
    """The targets table and slot Services as a controller that has run for a while leaves
    them (its slots published an hour ago): a restart, not a first install, so that the
    Gateway's hosts are in the first write rather than waiting --target-settle."""
    from hairpin_proxy.edits.slot_table import slot_service, table_data
    from hairpin_proxy.plan import PlanSettings, plan
    from hairpin_proxy.plan.objects import snapshot_of
    from hairpin_proxy.policy import proxy_service_fqdn
    from hairpin_proxy.targets.slots import service_name

    kinds = ("Service", "GatewayClass", "Gateway", "ClientTrafficPolicy", "HTTPRoute")
    objs = [{"apiVersion": o.get("apiVersion", "v1"), "kind": k, **o}
            for k in kinds for o in listed(api, k)]
    fqdn = proxy_service_fqdn("cluster.local", "hairpin-proxy", NAMESPACE)
    p = plan(snapshot_of(objs, PlanSettings(HostPolicy(proxy_fqdn=fqdn), namespace=NAMESPACE),
                         targets_configmap="hairpin-proxy-targets")).plan
    cm = api.create({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"namespace": NAMESPACE, "name": "hairpin-proxy-targets"},
                     "data": table_data(p, {}, time.time() - 3600)})
    proxy = api.get("Service", NAMESPACE, "hairpin-proxy")
    assert proxy is not None and p.targets, "the Gateway has no slot"
    for key, slot in p.slots.items():
        if key in p.targets:
            api.create(slot_service(NAMESPACE, slot, key, proxy, cm))
            assert api.get("Service", NAMESPACE, service_name(slot)) is not None


def wait_until(predicate: object, limit: float, what: str) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"benchmark: {what} not reached within {limit}s")
        time.sleep(0.005)


def watched(api: FakeApiServer, kind: str, name: str) -> float | None:
    """When the API server first wrote the event of ``name``'s creation to a watch (None:
    not written yet)."""
    times = [e.time for e in api.sent_events(kind, name) if e.type == "ADDED"]
    return min(times) if times else None


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def passes(port: int) -> float:
    """The controller's reconcile passes so far, from its /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("hairpin_controller_reconciles_total"))


def settle(port: int, seconds: float) -> None:
    """Return once ``seconds`` went by without a pass: what the start-up set off (the
    Services and EndpointSlices that follow the first write) is over, and a change is judged
    after a quiet spell, as a lone change in a cluster is."""
    def quiet() -> bool:
        before = passes(port)
        time.sleep(seconds)
        return passes(port) == before

    wait_until(quiet, 120, "a quiet controller")


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def edit_ms(text: str) -> dict[str, float]:
    """The controller's Corefile edit of one new host from its last result (the way a lone
    change's pass edits), in this process: median of 20; empty for versions without it."""
    try:
        from hairpin_proxy.edits.coredns import CorednsEdit
        from hairpin_proxy.policy import proxy_service_fqdn
    except ImportError:
        return {}
    fqdn = proxy_service_fqdn("cluster.local", "hairpin-proxy", NAMESPACE)
    by: dict[corefile.Answers, list[str]] = {}
    for host, answers in corefile.managed_groups(text, proxy_fqdn=fqdn).items():
        by.setdefault(answers, []).append(host)
    groups = sorted(((tuple(hs), a) for a, hs in by.items()), key=lambda g: -len(g[0]))
    edit = CorednsEdit("kube-system", "coredns", "Corefile", fqdn)
    result = edit.edit(text, tuple(groups))
    hosts, answers = list(groups[0][0]), groups[0][1]
    times = []
    for i in range(20):
        bisect.insort(hosts, f"edit{i}.example.com")
        now = ((tuple(hosts), answers), *groups[1:])
        t0 = time.perf_counter()
        result = edit.edit(result, now)
        times.append(time.perf_counter() - t0)
    return {"edit_ms": statistics.median(times) * 1000}


def listed(api: FakeApiServer, kind: str) -> list[dict[str, Any]]:
    """The objects of ``kind``; none where it is not served (no routes: no Gateway API)."""
    try:
        return api.list(kind)
    except KeyError:
        return []


def plan_ms(api: FakeApiServer) -> dict[str, float]:
    """The plan's share of a pass, in this process, on a snapshot of the API server's objects:
    the whole plan (what a first pass computes) against the controller's incremental plan
    (``Planner``) after one new Ingress; empty for versions before the one plan."""
    try:
        from hairpin_proxy.plan import PlanSettings, plan
        from hairpin_proxy.plan.incremental import Planner
        from hairpin_proxy.plan.objects import snapshot_of
        from hairpin_proxy.policy import proxy_service_fqdn
    except ImportError:
        return {}
    kinds = ("Service", "IngressClass", "Ingress", "GatewayClass", "Gateway",
             "ClientTrafficPolicy", "HTTPRoute", "ConfigMap")
    objs = [{"apiVersion": o.get("apiVersion", "v1"), "kind": k, **o}
            for k in kinds for o in listed(api, k)]
    fqdn = proxy_service_fqdn("cluster.local", "hairpin-proxy", NAMESPACE)
    snap = snapshot_of(objs, PlanSettings(HostPolicy(proxy_fqdn=fqdn), namespace=NAMESPACE),
                       targets_configmap="hairpin-proxy-targets", now=time.time())
    full = median_ms(lambda: plan(snap), 5)
    planner = Planner()
    t0 = time.perf_counter()
    planner.plan(snap)
    first = (time.perf_counter() - t0) * 1000
    ingresses = list(snap.ingresses)
    times = per_new_ingress(planner, snap, ingresses, "plan")
    return {"plan_full_ms": full, "plan_first_ms": first,
            "plan_incremental_ms": statistics.median(times) * 1000,
            "plan_incremental_max_ms": max(times) * 1000,
            **plan_verified_ms(snap, ingresses)}


def plan_verified_ms(snap: Any, ingresses: list[Any]) -> dict[str, float]:
    """The incremental plan per new Ingress with ``--verify-hosts on`` (the default), every
    host already verified: the bench's controller runs with it off, as its hosts resolve
    nowhere."""
    from hairpin_proxy.plan import plan
    from hairpin_proxy.plan.incremental import Planner
    from hairpin_proxy.verify.verdict import Code, Verdict

    settings = dataclasses.replace(snap.settings, verify_hosts=True)
    base = dataclasses.replace(snap, settings=settings)
    hosts = plan(base).candidates
    base = dataclasses.replace(base, verdicts={h: Verdict(h, Code.VERIFIED, "") for h in hosts})
    planner = Planner()
    planner.plan(base)
    times = per_new_ingress(planner, base, ingresses, "verify")
    return {"plan_verify_ms": statistics.median(times) * 1000}


def per_new_ingress(planner: Any, snap: Any, ingresses: list[Any], name: str) -> list[float]:
    """Seconds of ``planner.plan`` for each of 50 Ingresses added one at a time to
    ``ingresses`` (which keeps them)."""
    times = []
    for i in range(50):
        obj = ingress(f"bench-{name}", f"{name}{i}", tls_hosts=[f"{name}{i}.example.com"])
        obj["metadata"].update(uid=f"bench-{name}-{i}", resourceVersion=f"bench-{name}-{i}")
        ingresses.append({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", **obj})
        one_more = dataclasses.replace(snap, ingresses=list(ingresses))
        t0 = time.perf_counter()
        planner.plan(one_more)
        times.append(time.perf_counter() - t0)
    return times


def start_profiler(pid: int, path: Path | None) -> subprocess.Popen[bytes] | None:
    """py-spy sampling the controller (every thread, idle time left out) into ``path``, in
    its raw format (one line per distinct stack, then its count); None without a path."""
    if path is None:
        return None
    spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen([str(spy), "record", "--pid", str(pid), "--rate", "1000",
                             "--threads", "--nonblocking", "--format", "raw", "-o", str(path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_profiler(spy: subprocess.Popen[bytes] | None) -> None:
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(60)


def host_names(kind: str, count: int, routes: int) -> tuple[list[str], list[str]]:
    """The Ingresses' and the routes' hosts: ``numbered`` (``app<N>.example.com``, as the
    figures before had them) or ``realistic`` (``bench.names``)."""
    if kind == "realistic":
        drawn = names.hosts(count + routes)
        # The routes' under the Gateway listener's *.example.com: their first labels there.
        return drawn[:count], [f"{h.removeprefix('*.').split('.')[0]}-{i}.routes.example.com"
                               for i, h in enumerate(drawn[count:])]
    return ([f"app{i}.example.com" for i in range(count)],
            [f"route{i}.example.com" for i in range(routes)])


def run(count: int, events: int, steady: float, debounce: float | None,
        profile: Path | None = None, *, routes: int = 0, kind: str = "numbered"
        ) -> dict[str, Any]:
    out: dict[str, Any] = {"ingresses": count, "routes": routes, "events": events,
                           "names": kind,
                           "debounce": debounce,
                           "default_debounce": DEFAULT_DEBOUNCE, "write_interval": WRITE_INTERVAL,
                           "code": CODE, "format": FORMAT, "load_start": loadavg()}
    flags = [*FIXED_FLAGS, *([] if debounce is None else ["--debounce", str(debounce)])]
    out["fixed_flags"] = " ".join(FIXED_FLAGS)
    # An event comes after a quiet spell: past the debounce, and past the least interval
    # between two writes, which would otherwise hold the write back by design.
    quiet = max(DEFAULT_DEBOUNCE if debounce is None else debounce, WRITE_INTERVAL) + 0.05
    # HTTPS with the server's certificate as the kubeconfig's CA, as in a cluster: the
    # client's trust store and its TLS streams are part of what the controller keeps.
    with tempfile.TemporaryDirectory() as tmp, \
            FakeApiServer(tls=make_serving_cert(Path(tmp))) as api:
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        # The events' namespace exists before they come: a new namespace is a change of its
        # own, and a change right behind it would wait for the burst to end, by design.
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}})
        # The proxy Service and a ready endpoint of it: without them the rules are withdrawn.
        api.create(service(NAMESPACE, "hairpin-proxy", cluster_ips=[PROXY_IP]))
        api.create(endpoint_slice(NAMESPACE, "hairpin-proxy"))
        api.create(corefile_configmap(COREFILE))
        out["corefile_bytes_before"] = len(COREFILE.encode())
        ingress_hosts, route_hosts = host_names(kind, count, routes)
        for i, host in enumerate(ingress_hosts):
            api.create(realistic_ingress(f"ns{i % 100}", f"ing{i}", host))
        if routes:
            api.install_gateway_api("1.4", "standard")
            api.install(ENVOY_CLIENT_TRAFFIC_POLICY)
            for obj in gateway_objects():
                api.create(obj)
            for i, host in enumerate(route_hosts):
                api.create(realistic_route(f"gw{i % 20}", f"route{i}", host))
            settled_slots(api)
        kubeconfig = api.write_kubeconfig(Path(tmp) / "kubeconfig")
        api.clear_requests()
        log = (Path(tmp) / "controller.log").open("wb")

        # The admin endpoint is on, as it is by default: its /metrics tells when passes stop.
        admin = free_port()

        def controller(*extra: str) -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                [sys.executable, "-m", "hairpin_proxy", "controller", "--kubeconfig",
                 str(kubeconfig), "--namespace", NAMESPACE,
                 "--admin-listen", f"127.0.0.1:{admin}",
                 *flags, *extra, "--log-level", "info"],
                stdout=log, stderr=log, cwd=ROOT, env=as_in_image(os.environ))

        proc = controller()
        try:
            wait_until(lambda: api.count("PUT", COREFILE_PUT) >= 1, 120, "first write")
            pages = api.requests("GET", r"/apis/networking.k8s.io/v1/ingresses", watch=False)
            first_put = api.requests("PUT", COREFILE_PUT)[0].time
            out["first_write_s"] = first_put - pages[0].time
            # The list is served in pages (limit/continue); what follows the request for the
            # last page is that page, then the controller's own first pass.
            out["last_page_to_write_s"] = first_put - max(
                r.time for r in pages if r.time <= first_put)

            def corefile_text() -> str:
                cm = api.get("ConfigMap", "kube-system", "coredns")
                return str((cm or {}).get("data", {}).get("Corefile", ""))

            # The request log records a PUT on arrival; wait for the store to hold it.
            wait_until(lambda: corefile_text() != COREFILE, 30, "stored")
            first = corefile_text()
            assert len(corefile.managed_hosts(first)) == count + routes, \
                "not every host in the write"
            assert api.count("PUT", COREFILE_PUT) == 1, "more than one write at start"
            out["corefile_bytes_after"] = len(first.encode())
            time.sleep(max(1.0, quiet))
            out["rss_mib"] = rss_kib(proc.pid) / 1024

            latencies: list[float] = []
            # From the moment the API server wrote the event to the controller's watch: the
            # controller's own share of each latency (the rest is the fake API server's
            # create and its fan-out to the watches).
            own: list[float] = []
            settle(admin, quiet)
            spy = start_profiler(proc.pid, profile)
            for i in range(events):
                # A short request log keeps the polling below from loading the API server.
                api.clear_requests()
                done = passes(admin)
                t0 = time.time()
                api.create(ingress("bench", f"ev{i}", tls_hosts=[f"event{i}.example.com"]))
                wait_until(lambda: api.count("PUT", COREFILE_PUT) > 0, 30,
                           "write after an event")
                put = api.requests("PUT", COREFILE_PUT, since=t0)[0]
                latencies.append(put.time - t0)
                told = watched(api, "Ingress", f"ev{i}")
                if told is not None:
                    own.append(put.time - told)
                # The next Ingress comes once the pass is over and after a quiet spell, as a
                # lone change does (one inside a burst waits for the debounce, one right
                # after a write for the write interval, by design).
                wait_until(lambda done=done: passes(admin) > done, 30, "pass end")
                time.sleep(quiet)
            stop_profiler(spy)
            # After the events: what the controller keeps once the first pass's leftovers
            # have gone and the caches have taken in the changes.
            out["rss_end_mib"] = rss_kib(proc.pid) / 1024
            out["latency_p50_ms"] = pct(latencies, 0.5) * 1000
            out["latency_p99_ms"] = pct(latencies, 0.99) * 1000
            out["latency_max_ms"] = max(latencies) * 1000
            out["latency_mean_ms"] = statistics.fmean(latencies) * 1000
            # Every sample, in order, for --save-json: where the tail comes from.
            out["latencies_ms"] = [round(x * 1000, 2) for x in latencies]
            if own:
                out["own_p50_ms"] = pct(own, 0.5) * 1000
                out["own_p99_ms"] = pct(own, 0.99) * 1000
                out["own_ms"] = [round(x * 1000, 2) for x in own]
            # The share of one pure Corefile edit (same size, in this process) in that latency.
            text = corefile_text()
            hosts = corefile.managed_hosts(text)
            assert len(hosts) == count + routes + events, \
                "not every event's host in the Corefile"
            out["corefile_bytes_end"] = len(text.encode())
            t0 = time.perf_counter()
            corefile_bench.apply(text, (*hosts, "one-more.example.com"))
            out["apply_ms"] = (time.perf_counter() - t0) * 1000
            out.update(edit_ms(text))
            out.update(plan_ms(api))

            time.sleep(1.0)
            out["steady_seconds"] = steady
            out["requests_per_minute"], out["requests_breakdown"] = steady_state(api, steady)
            out["open_watches"] = api.open_watches

            # The same without leader election: what is left is the watches alone.
            proc.terminate()
            proc.wait(20)
            wait_until(lambda: api.open_watches == 0, 30, "the first controller's watches closed")
            admin = free_port()
            proc = controller("--no-leader-elect")
            wait_until(lambda: api.open_watches == out["open_watches"], 60,
                       "the second controller's watches open")
            # Its first pass (the holds' requests, say) is start-up, not steady state: at
            # 50,000 Ingresses it ends seconds after the watches open.
            wait_until(lambda: passes(admin) >= 1, 120, "the second controller's first pass")
            settle(admin, quiet)
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


Row = tuple[str, Callable[[dict[str, Any]], str], str]


def _pair(x: dict[str, Any], a: str, b: str, unit: str) -> str:
    """Two figures of a result, or "n/a" where its version did not have them."""
    if a not in x or b not in x:
        return "n/a"
    return f"{x[a]:.1f} {unit}, {x[b]:.1f} {unit}"


# The targets each size was given (the first write, the RSS); other sizes have none.
TARGETS = {10_000: ("<= 1 s", "<= 60 MiB"), 50_000: ("<= 3 s", "<= 100 MiB")}


def rows(r: dict[str, Any]) -> list[Row]:
    """(measure, its value in a result, target) for each line of the table."""
    n = r["ingresses"]
    first_write, rss = TARGETS.get(n, ("", ""))
    return [
        (f"List of {n:,} Ingresses to first Corefile write",
         lambda x: f"{x['first_write_s']:.2f} s", first_write),
        ("of which from the request for the list's last page",
         lambda x: f"{x['last_page_to_write_s']:.2f} s" if "last_page_to_write_s" in x
         else "n/a", ""),
        (f"Event-to-write latency p50 ({r['events']} Ingress creations)",
         lambda x: f"{x['latency_p50_ms']:.1f} ms", ""),
        ("Event-to-write latency p99", lambda x: f"{x['latency_p99_ms']:.1f} ms", "<= 20 ms"),
        ("Event-to-write latency max", lambda x: f"{x['latency_max_ms']:.1f} ms", ""),
        ("of which the controller's own: from the watch event's leaving the API server to "
         "the write's arrival (p50, p99)",
         lambda x: _pair(x, "own_p50_ms", "own_p99_ms", "ms"), ""),
        ("of which the Corefile edit of one new host (`CorednsEdit.edit` from its last "
         "result, as a pass edits; measured alone, median of 20)",
         lambda x: f"{x['edit_ms']:.1f} ms" if "edit_ms" in x else "n/a", ""),
        ("one whole `corefile.apply` on that Corefile (another writer's edit; measured alone)",
         lambda x: f"{x['apply_ms']:.1f} ms", ""),
        ("of which the plan per pass, one new Ingress (`Planner.plan` measured alone; "
         "median, max of 50)",
         lambda x: _pair(x, "plan_incremental_ms", "plan_incremental_max_ms", "ms"), ""),
        ("the same with `--verify-hosts on` (the default), every host verified (median of 50)",
         lambda x: f"{x['plan_verify_ms']:.1f} ms" if "plan_verify_ms" in x else "n/a", ""),
        ("the whole plan of every object: a first `Planner.plan`, then `plan.plan` (median of 5)",
         lambda x: _pair(x, "plan_first_ms", "plan_full_ms", "ms"), ""),
        (f"Controller RSS with {n:,} Ingresses cached (after the first write)",
         lambda x: f"{x['rss_mib']:.1f} MiB", rss),
        ("the same after the events",
         lambda x: f"{x['rss_end_mib']:.1f} MiB" if "rss_end_mib" in x else "n/a", ""),
        ("Corefile bytes: before the controller / after its first write / after the events",
         lambda x: f"{x['corefile_bytes_before']:,} / {x['corefile_bytes_after']:,} / "
                   f"{x['corefile_bytes_end']:,}", "<= 1,048,576 (ConfigMap)"),
        (f"API requests per minute at steady state ({r['steady_seconds']:.0f} s window)",
         lambda x: f"{x['requests_per_minute']:.1f}", "only the open watches"),
        (f"the same with `--no-leader-elect` (one replica; {r['steady_no_lease_seconds']:.0f} s "
         "window)", lambda x: f"{x['requests_per_minute_no_lease']:.1f}", ""),
        ("Open watches", lambda x: f"{x['open_watches']}", ""),
    ]


def describe(r: dict[str, Any]) -> str:
    rules = ("`template` stanzas answering the proxy Service's ClusterIP"
             if r["format"] == "template" else "one `rewrite` line per host")
    return f"{rules}; code from `{_shown(str(r['code']))}`"


def report(r: dict[str, Any], before: dict[str, Any] | None = None) -> str:
    breakdown, quiet = r["requests_breakdown"], r["requests_breakdown_no_lease"]
    assert isinstance(breakdown, dict) and isinstance(quiet, dict)
    if before is None:
        head = ["| Measure | Result | Target |", "|---|---|---|"]
        table = [f"| {m} | {f(r)} | {t} |" for m, f, t in rows(r)]
        compared = []
    else:
        head = ["| Measure | Result | Before | Target |", "|---|---|---|---|"]
        table = [f"| {m} | {f(r)} | {f(before)} | {t} |" for m, f, t in rows(r)]
        compared = [
            f"- Before: {describe(before)}; {before['ingresses']:,} Ingresses, "
            f"{before['events']} events; load average at the start: {before['load_start']}; at "
            f"the end: {before['load_end']}",
        ]
    lines = [
        "# Controller benchmark",
        "",
        "Written by `python -m bench.controller_bench` (not part of the test suite). The",
        "controller runs as deployed, in its own process, against the in-repository fake API",
        "server over loopback HTTPS; the API server and the benchmark driver share the machine.",
        "The proxy Service (one ClusterIP) and a ready EndpointSlice of it exist throughout.",
        "",
        f"- Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, {platform.system()} {platform.release()}",
        f"- Result: {describe(r)}",
        *compared,
        f"- Ingresses present at start: {r['ingresses']:,} (one TLS host each, "
        f"{r.get('names', 'numbered')} names)"
        + (f"; HTTPRoutes: {r['routes']:,} (one host each, on one Envoy Gateway with a slot)"
           if r.get("routes") else ""),
        "- " + (f"default settings (`--debounce {r['default_debounce']:g}`" if r["debounce"] is None
                else f"`--debounce {r['debounce']}`")
        + (f", `--write-interval {r['write_interval']:g}`" if r["write_interval"] else "")
        + (")" if r["debounce"] is None else "") + "; leader election on (default timings)"
        + (f"; `{r['fixed_flags']}` (the hosts resolve nowhere)" if r.get("fixed_flags")
           else ""),
        f"- Load average (1, 5, 15 min) at the start: {r['load_start']}; at the end: "
        f"{r['load_end']}",
        "",
        *head,
        *table,
        "",
        "Steady-state requests per minute by kind:",
        "",
        *[f"- {k}: {v}" for k, v in sorted(breakdown.items())],
        *[f"- with `--no-leader-elect`, {k}: {v}" for k, v in sorted(quiet.items())],
        "",
        "Latency is measured from the Ingress creation at the API server to the arrival of",
        "the controller's PUT of the Corefile ConfigMap there (the request log's clock). Each",
        "Ingress is created after the previous pass has ended and the debounce (and the least",
        "interval between two writes, where the version has one) has passed, as a lone change",
        "arrives: such a change starts a pass at once. Changes inside a burst wait until it is",
        "over (the debounce), and a change right after a write waits for the write interval, by",
        "design; they coalesce into one or two writes.",
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
    parser.add_argument("--routes", type=int, default=1_000,
                        help="HTTPRoutes on one Envoy Gateway with a slot of its own")
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--steady", type=float, default=60.0)
    parser.add_argument("--debounce", type=float, default=None,
                        help="controller --debounce (default: the controller's own)")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks-controller.md",
                        help="where a full run writes its report")
    parser.add_argument("--save-json", type=Path, metavar="FILE",
                        help="also write the raw figures to FILE")
    parser.add_argument("--py-spy", type=Path, metavar="FILE", dest="py_spy",
                        help="profile the controller over the events with py-spy (raw "
                             "stacks to FILE)")
    parser.add_argument("--names", choices=("numbered", "realistic"), default="numbered",
                        help="hosts app<N>.example.com (numbered) or of 25 to 45 characters "
                             "over ten shared domains (realistic: bench/names.py)")
    parser.add_argument("--before", type=Path, metavar="FILE",
                        help="figures of another version (from --save-json) to set beside")
    args = parser.parse_args()
    # The report keeps the file's marked sections (see bench.run); a broken marker stops the
    # run now rather than after it.
    if not args.quick and args.output.exists():
        sections(args.output.read_text())
    before = json.loads(args.before.read_text()) if args.before else None
    if args.quick:
        result = run(1000, 20, 5.0, args.debounce, args.py_spy, routes=100)
    else:
        result = run(args.ingresses, args.events, args.steady, args.debounce, args.py_spy,
                     routes=args.routes, kind=args.names)
    if args.save_json:
        args.save_json.write_text(json.dumps(result, indent=1) + "\n")
    text = report(result, before)
    print(text)
    if not args.quick:
        previous = args.output.read_text() if args.output.exists() else ""
        args.output.write_text(with_sections(text, previous))
    return 0


if __name__ == "__main__":
    sys.exit(main())
