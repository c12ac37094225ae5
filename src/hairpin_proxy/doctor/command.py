"""``hairpin-proxy doctor``: gather the facts, decide the verdicts, print the report.

Facts come from ``cluster`` (the API) and ``probe`` (DNS and connections); ``verdict`` and
``report`` are pure. Exit status: 0 when every host works, 1 when one does not, 2 when the
doctor could not run (bad flags, no hosts).

The whole run has a deadline, ``budget(--timeout)``: the sum of its three phases' limits
(API questions, DNS lookups with the host verification beside them, probes). Whatever is not
done by then is reported as timed out; every worker is a daemon thread (``pool``), so nothing
left running, not even a getaddrinfo call that cannot be cancelled, delays the exit.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from hairpin_proxy.addresses import format_hostport
from hairpin_proxy.doctor import facts as f
from hairpin_proxy.doctor.facts import DataPlaneFacts, PortProbe
from hairpin_proxy.doctor.forged import start_checks
from hairpin_proxy.doctor.pool import DaemonPool, run_async
from hairpin_proxy.doctor.probe import parse_overrides, start_probe, start_resolve
from hairpin_proxy.doctor.report import HostReport, Report, to_json, to_text
from hairpin_proxy.doctor.verdict import verdict as host_verdict
from hairpin_proxy.logs import quiet_http, setup_logging
from hairpin_proxy.manifests import collector_paused
from hairpin_proxy.settings import DoctorSettings, usage_error
from hairpin_proxy.sources.registry import KEY_KIND_SPECS
from hairpin_proxy.targets.mapping import MapEntry, TargetFlagError, parse_target_flags
from hairpin_proxy.wildcards import wildcard_base

if TYPE_CHECKING:
    from hairpin_proxy.verify import LbIndex

__all__ = ["run"]

log = logging.getLogger("hairpin_proxy.doctor")
# Stands in for the "*" of a wildcard host when probing it.
WILDCARD_LABEL = "hairpin-proxy-doctor"
MAX_THREADS = 64


def api_limit(timeout: float) -> float:
    """How long the API questions may take together: two rounds of requests."""
    return max(2 * timeout, 5.0)


def lookup_limit(timeout: float) -> float:
    """How long a DNS lookup may take: three probe timeouts, at least 5 s."""
    return max(3 * timeout, 5.0)


def budget(timeout: float) -> float:
    """The whole run's deadline, in seconds from its start: API, then DNS, then one probe
    timeout (default --timeout 3: 6 + 9 + 3 = 18 s; --timeout 1: 5 + 5 + 1 = 11 s)."""
    return api_limit(timeout) + lookup_limit(timeout) + timeout


class Progress:
    """One line on a terminal, rewritten as hosts are done; silent when not a terminal."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        try:
            self.enabled = stream.isatty()
        except (AttributeError, ValueError):
            self.enabled = False
        self.shown = False

    def show(self, text: str) -> None:
        if self.enabled:
            self.stream.write(f"\rhairpin-proxy doctor: {text}\x1b[K")
            self.stream.flush()
            self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False


class UsageError(Exception):
    """The doctor cannot run with these settings."""


@dataclass(frozen=True)
class _Cluster:
    facts: f.ClusterFacts | None
    # The hosts to check (``ClusterView.checked``: those the plan writes a rule for, then
    # the claimed ones it does not); None: unknown.
    managed: tuple[str, ...] | None
    note: str
    # This cluster's load balancer addresses as the controller gathers them (None: unknown).
    lb: LbIndex | None = None


# Where the manifests and the chart install the proxy and the controller.
INSTALL_NAMESPACE = "hairpin-proxy"


def install_namespace(s: DoctorSettings, environ: Mapping[str, str] | None = None) -> str:
    """Where hairpin-proxy is installed: --namespace, else POD_NAMESPACE (the controller's
    pod), else the manifests' namespace; never the namespace of the pod or kubeconfig context
    the doctor runs with (a `kubectl run` pod's is `default`)."""
    env = os.environ if environ is None else environ
    return s.namespace or env.get("POD_NAMESPACE") or INSTALL_NAMESPACE


def _ask_cluster(s: DoctorSettings, limit: float,
                 target_map: Mapping[str, MapEntry] | None = None) -> _Cluster:
    if not s.api:
        return _Cluster(None, None, "--no-api")
    # Imported here so that --no-api never loads the Kubernetes client.
    from hairpin_proxy.doctor.cluster import gather, policy_for
    from hairpin_proxy.kube.client import KubeClient
    from hairpin_proxy.kube.config import KubeConfigError, load

    try:
        cfg = load(s.kubeconfig)
    except KubeConfigError as exc:
        return _Cluster(None, None, str(exc))
    namespace = install_namespace(s)

    async def ask() -> _Cluster:
        client = KubeClient.from_cluster(cfg, timeout=max(s.timeout, 5.0))
        try:
            view = await gather(client, s, namespace, policy_for(s, namespace),
                                dict(target_map or {}))
        finally:
            await client.close()
        c = view.facts
        if (c.lb_services is None and c.proxy_service_found is None and c.node_local_dns is None
                and view.managed is None):
            return _Cluster(None, None, "the API did not answer: "
                            + (c.problems[0] if c.problems else "no reason given"))
        return _Cluster(c, view.checked, "", view.lb)
    try:
        return run_async(ask, limit)
    except TimeoutError:
        return _Cluster(None, None, f"the API did not answer within {limit:.3g}s")


def _proxy_addresses(target: f.HostTarget | None, c: f.ClusterFacts | None
                     ) -> tuple[str, ...]:
    """The addresses DNS should answer for a host: its own target's proxy Service's (each
    target has its own Service), else the main proxy Service's as before targets."""
    if target is not None and target.verdict == "redirected":
        return target.proxy_addresses
    return c.proxy_addresses if c else ()


def _probe_name(host: str) -> str:
    base = wildcard_base(host)
    return host if base is None else f"{WILDCARD_LABEL}.{base}"


def _match_lb(host: str, addresses: tuple[str, ...], kinds: tuple[f.AddressKind, ...],
              c: f.ClusterFacts | None) -> f.LbService | None:
    """The LoadBalancer Service behind this host: the one owning an answer, else the one
    owning an address in the status of the host's Ingress."""
    if c is None or not c.lb_services:
        return None
    by_name = {svc.name: svc for svc in c.lb_services}
    index = f.lb_address_index(c.lb_services)
    for a, k in zip(addresses, kinds, strict=False):
        if k == "lb":
            return by_name[index[f.normalize_address(a)].service]
    wanted = {f.normalize_address(a) for a in c.ingress_addresses.get(host, ())}
    for svc in c.lb_services:
        for e in svc.entries:
            if (e.ip and f.normalize_address(e.ip) in wanted) or (e.hostname
                                                                  and e.hostname in wanted):
                return svc
    return None


def _hosts(s: DoctorSettings, cluster: _Cluster) -> tuple[tuple[str, ...], tuple[str, ...]]:
    notes: list[str] = []
    if s.host:
        hosts = tuple(dict.fromkeys(h.strip().lower().rstrip(".") for h in s.host if h.strip()))
    elif cluster.managed is not None:
        hosts = cluster.managed
        if not hosts:
            notes.append("the controller would manage no hosts (no Ingress or route matches "
                         "the policy)")
    else:
        raise UsageError("no HOST given, and the hosts the controller would manage are unknown "
                         f"({cluster.note or 'Ingresses could not be listed'})")
    for h in hosts:
        if wildcard_base(h) is not None:
            notes.append(f"{h}: probed as {_probe_name(h)}")
    return hosts, tuple(notes)


def _start_verification(s: DoctorSettings, cluster: _Cluster, hosts: tuple[str, ...],
                        pool: ThreadPoolExecutor, end: float
                        ) -> Callable[[], list[f.Verification | None]]:
    """Start the controller's host verification of ``hosts`` (in ``pool``, beside the
    probes); the returned call waits for it. Not checked (None) without cluster facts."""
    from hairpin_proxy.doctor import verification as ver

    if s.verify_hosts == "off":
        off = f.Verification("off", ver.OFF_REASON)
        return lambda: [off for _ in hosts]
    if cluster.facts is None:
        return lambda: [None for _ in hosts]
    described = ver.describe_resolver(s.verify_resolver)
    if cluster.lb is None:
        unknown = ver.unknown("this cluster's load balancer addresses are unknown (Services or "
                              "Ingresses could not be listed)", described)
        return lambda: [unknown for _ in hosts]
    limit = ver.lookup_limit(s.timeout)
    resolver = ver.make(s.verify_resolver, s.timeout)
    fut = pool.submit(ver.check, hosts, cluster.lb, resolver, limit=limit, described=described)
    # Lookups run CONCURRENCY at a time; a margin for the loop itself.
    rounds = -(-(len(hosts) + len(cluster.lb.hostnames)) // ver.CONCURRENCY)
    deadline = min(time.monotonic() + limit * max(1, rounds) + 5.0, end)

    def wait() -> list[f.Verification | None]:
        try:
            return list(fut.result(timeout=max(0.0, deadline - time.monotonic())))
        except TimeoutError:
            fut.cancel()
            late = ver.unknown("the lookups did not finish by the doctor's deadline "
                               f"({limit:g}s each)", described)
            return [late for _ in hosts]
        except Exception as exc:  # a bug there must not cost the rest of the report
            log.warning("host verification failed", exc_info=True)
            failed = ver.unknown(f"the check failed: {exc or type(exc).__name__}", described)
            return [failed for _ in hosts]
    return wait


def _no_public_dns(checks: list[f.Verification | None]) -> tuple[str, ...]:
    """The controller's warning when no host resolves at all, over the doctor's checks."""
    from hairpin_proxy.verify import NO_PUBLIC_DNS, nothing_resolves

    if all(c is not None for c in checks) and nothing_resolves(
            [c.code for c in checks if c is not None]):
        return (f"verification: {NO_PUBLIC_DNS}",)
    return ()


def _forged_planes(s: DoctorSettings, c: f.ClusterFacts | None, api_note: str
                   ) -> tuple[tuple[DataPlaneFacts, ...], str]:
    """The data planes to send a forged PROXY header to, or why none is ("" when some)."""
    if not s.forged_header_probe:
        return (), "not checked (--no-forged-header-probe)"
    if c is None:
        return (), f"not checked: no cluster facts ({api_note})"
    if c.data_planes is None:
        return (), "not checked: the data planes are unknown (see the cluster notes)"
    if not c.data_planes:
        return (), ("no data plane of a managed host expects the PROXY protocol (the proxy's "
                    "--target-server is checked only when it is found among the Services)")
    return c.data_planes, ""


def _resolver(s: DoctorSettings, servers: tuple[tuple[str, int], ...],
              cluster: _Cluster) -> tuple[f.Resolver, tuple[str, ...]]:
    """Who resolves the hosts (``--resolver``), and a note when the cluster DNS Service an
    ordinary pod asks could not be found, so that the system resolver stands in for it."""
    if s.resolver == "system":
        return f.SYSTEM_RESOLVER, ()
    if servers:
        shown = ", ".join(format_hostport(a, p) for a, p in servers)
        return f.Resolver(servers, f"the DNS server {shown} (--resolver)"), ()
    c = cluster.facts
    if c is not None and c.cluster_dns is not None:
        return c.cluster_dns, ()
    if not s.api:
        return f.SYSTEM_RESOLVER, ()
    why = (f"no cluster facts: {cluster.note}" if c is None else
           f"no Service {'/'.join(f.CLUSTER_DNS_SERVICE)} nor one labelled "
           f"{'='.join(f.CLUSTER_DNS_LABEL)} with a ClusterIP was found")
    return f.SYSTEM_RESOLVER, (f"resolver: the cluster DNS Service is unknown ({why}); the "
                               f"hosts were resolved with {f.SYSTEM_RESOLVER.described}: "
                               "the cluster DNS in an ordinary pod, the node's resolver in "
                               "one with dnsPolicy Default (the controller's)",)


def _checked_flags(s: DoctorSettings) -> tuple[dict[str, tuple[str, ...]], dict[str, MapEntry]]:
    """``--resolve`` and ``--target`` parsed, every other flag checked (raises UsageError)."""
    if not (0 <= s.port <= 65535 and 0 <= s.tls_port <= 65535):
        raise UsageError("--port and --tls-port must be between 0 and 65535")
    if not s.timeout > 0:
        raise UsageError("--timeout must be positive")
    if not s.pod_start_timeout > 0:
        raise UsageError("--pod-start-timeout must be positive")
    try:
        overrides = parse_overrides(s.resolve)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        target_map = parse_target_flags(s.target, KEY_KIND_SPECS)
    except TargetFlagError as exc:
        raise UsageError(str(exc)) from None
    if s.verify_hosts == "on":
        from hairpin_proxy.verify import parse_servers
        try:
            parse_servers(s.verify_resolver)
        except ValueError as exc:
            raise UsageError(f"--verify-resolver: {exc}") from None
    return overrides, target_map


def _resolver_servers(s: DoctorSettings) -> tuple[tuple[str, int], ...]:
    """The DNS server ``--resolver`` names (none for ``cluster`` and ``system``; raises
    UsageError)."""
    if s.resolver in ("cluster", "system"):
        return ()
    from hairpin_proxy.verify import parse_servers
    try:
        return parse_servers((s.resolver,))
    except ValueError as exc:
        raise UsageError(f"--resolver: expected cluster, system or ADDR[:PORT] ({exc})") \
            from None


def diagnose(s: DoctorSettings, progress: Progress | None = None) -> Report:
    """Gather every fact and decide every verdict within ``budget(s.timeout)`` seconds
    (raises UsageError)."""
    started = time.monotonic()
    end = started + budget(s.timeout)
    show = progress.show if progress is not None else (lambda text: None)
    overrides, target_map = _checked_flags(s)
    servers = _resolver_servers(s)
    if s.api:
        show("asking the API")
    with collector_paused():
        cluster = _ask_cluster(s, min(api_limit(s.timeout), end - time.monotonic()),
                               target_map)
    # The cluster's facts stay until the report is printed: kept out of the collector's
    # passes over the verdicts and the report (run() hands them back).
    gc.freeze()
    hosts, notes = _hosts(s, cluster)
    resolver, resolver_notes = _resolver(s, servers, cluster)
    notes = (*notes, *resolver_notes)
    c = cluster.facts
    ports = [(p, tls) for p, tls in ((s.port, False), (s.tls_port, True)) if p]
    planes, forged_note = _forged_planes(s, c, cluster.note)
    # One more for the host verification, which runs its own event loop.
    workers = max(1, min(MAX_THREADS, len(hosts) * (1 + 3 * len(ports)))) + 1 + len(planes)
    # Daemon threads: past the deadline the report goes out and the process exits while a
    # lookup or a connection may still be running in one of them.
    pool = DaemonPool(workers, "doctor")
    try:
        forging = start_checks(planes, timeout=s.timeout, pool=pool, deadline=end)
        verifying = _start_verification(s, cluster, hosts, pool, end)
        reports = _probed(s, hosts, overrides, ports, pool=pool, end=end, show=show,
                          resolver=resolver)
        show(f"probing {len(hosts)}/{len(hosts)} hosts, checking public DNS")
        checks = verifying()
        if s.verify_hosts == "on":
            notes = (*notes, *_no_public_dns(checks))
        out = _host_reports(s, c, reports, checks)
        forged = tuple(forging())
    finally:
        # Lookups and probes that outlived the deadline must not hold the report back.
        pool.shutdown(wait=False, cancel_futures=True)
        if progress is not None:
            progress.clear()
    log.debug("doctor done", extra={"seconds": round(time.monotonic() - started, 3),
                                    "deadline": round(end - started, 3)})
    return Report(tuple(out), c, cluster.note, notes, forged=forged, forged_note=forged_note)


_Probed = tuple[str, f.Resolution, PortProbe | None, PortProbe | None]


def _probed(s: DoctorSettings, hosts: Sequence[str], overrides: Mapping[str, tuple[str, ...]],
            ports: list[tuple[int, bool]], *, pool: DaemonPool, end: float,
            show: Callable[[str], None], resolver: f.Resolver) -> list[_Probed]:
    """Each host resolved, then probed on the address a client tries first."""
    total = len(hosts)
    # The lookups leave one probe timeout for the probes.
    lookups = [start_resolve(_probe_name(h), overrides, s.timeout, pool,
                             deadline=end - s.timeout, resolver=resolver) for h in hosts]
    resolutions = []
    pending = []
    for i, (h, wait) in enumerate(zip(hosts, lookups, strict=True)):
        show(f"resolving {i}/{total} hosts")
        res = wait()
        resolutions.append(res)
        # Each host's probes start as soon as its answer is in.
        started_probes: dict[bool, Callable[[], PortProbe]] = {}
        if res.addresses:
            first = res.addresses[0]  # the address a client tries first
            for port, over_tls in ports:
                started_probes[over_tls] = start_probe(
                    first, port, host=_probe_name(h), tls=over_tls, timeout=s.timeout,
                    pool=pool, deadline=end)
        pending.append(started_probes)
    reports = []
    for i, (h, res, probes) in enumerate(zip(hosts, resolutions, pending, strict=True)):
        show(f"probing {i}/{total} hosts")
        http_probe = probes[False]() if False in probes else None
        tls_probe = probes[True]() if True in probes else None
        reports.append((h, res, http_probe, tls_probe))
    return reports


def _host_reports(s: DoctorSettings, c: f.ClusterFacts | None, reports: list[_Probed],
                  checks: Sequence[f.Verification | None]) -> list[HostReport]:
    """Each host's facts and verdict."""
    targets = (c.host_targets if c else None) or {}
    lb_index = f.lb_address_index(c.lb_services or ()) if c else {}
    out = []
    for (h, res, http_probe, tls_probe), check in zip(reports, checks, strict=True):
        target = targets.get(h)
        proxy_addrs = (*s.proxy_address, *_proxy_addresses(target, c))
        kinds = tuple(f.classify_address(a, lb_index, proxy_addrs) for a in res.addresses)
        facts = f.HostFacts(h, res, kinds, http_probe, tls_probe,
                            _match_lb(h, res.addresses, kinds, c), c, check, target)
        v = host_verdict(facts)
        log.debug("host checked", extra={"host": h, "verdict": v.code,
                                         "verification": check.code if check else None})
        out.append(HostReport(facts, v))
    return out


# What the doctor's own process needs beyond its deadline in a pod: the interpreter's start.
POD_MARGIN = 30.0


def run(settings: DoctorSettings) -> int:
    setup_logging(settings.log_level, settings.log_format)
    quiet_http()
    if settings.in_cluster:
        from hairpin_proxy.doctor.incluster import run_in_cluster
        try:
            _checked_flags(settings)
            _resolver_servers(settings)
        except UsageError as exc:
            return usage_error("doctor", str(exc))
        return run_in_cluster(settings, install_namespace(settings),
                              budget(settings.timeout) + POD_MARGIN)
    frozen_before = gc.get_freeze_count()
    try:
        report = diagnose(settings, Progress(sys.stderr))
        sys.stdout.write(to_json(report) if settings.output == "json" else to_text(report))
        sys.stdout.flush()
    except UsageError as exc:
        return usage_error("doctor", str(exc))
    finally:
        if not frozen_before:
            gc.unfreeze()
    return 0 if report.ok else 1
