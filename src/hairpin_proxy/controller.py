"""The controller: watch Ingresses, keep CoreDNS rewrite rules and the published hosts in step.

    reflectors (list+watch) ──▶ caches ──debounce──▶ policy.evaluate ──▶ removal guard
        ──▶ Corefile block / import key (PUT with resourceVersion, 409 → re-read, re-apply)
        ──▶ published hosts ConfigMap            rejections ──▶ rate-limited Events

Only the Lease holder writes; standbys keep their caches warm so that a takeover needs no
relist. Every input change just marks the state dirty; one loop turns "dirty" into at most one
write per target, so bursts coalesce and nothing is lost when changes arrive mid-write.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import itertools
import logging
import operator
import os
import secrets
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from hairpin_proxy import corefile
from hairpin_proxy.admin import AdminServer, Check, serve_admin
from hairpin_proxy.kube import config as kconfig
from hairpin_proxy.kube.client import ApiError, JsonObj, KubeClient, resource_path
from hairpin_proxy.kube.events import EventRecorder
from hairpin_proxy.kube.lease import LeaderElector
from hairpin_proxy.kube.watch import Backoff, Reflector
from hairpin_proxy.logs import setup_logging
from hairpin_proxy.metrics import Registry
from hairpin_proxy.policy import (
    HostPolicy,
    PolicyResult,
    Rejection,
    default_target,
)
from hairpin_proxy.policy_cache import PolicyCache
from hairpin_proxy.settings import CleanupSettings, ControllerSettings
from hairpin_proxy.sinks.configmap import Mutate, WriteResult, write_configmap
from hairpin_proxy.sinks.coredns import CorednsSink, SinkError
from hairpin_proxy.sinks.coredns_import import ImportSink
from hairpin_proxy.sinks.nodelocal import CANDIDATES as NODE_LOCAL_CANDIDATES
from hairpin_proxy.sinks.nodelocal import NodeLocalSink
from hairpin_proxy.sinks.published import PublishedSink, parse_lines, service_addresses
from hairpin_proxy.slim import slim_ingress, slim_service
from hairpin_proxy.verify import (
    HostChecker,
    LbIndex,
    lb_addresses,
    make_resolver,
    parse_servers,
)

log = logging.getLogger("hairpin_proxy.controller")

INGRESS_API = "networking.k8s.io/v1"


# Ingress changes since the last pass that are evaluated on the event loop (more: in a thread).
_INLINE_CHANGES = 64


def _few_changes(key: tuple[int, ...], last: tuple[int, ...]) -> bool:
    """Whether the policy can catch up on the event loop: since ``last`` (the caches'
    generations, then the policy's and the IngressClasses') only a few Ingresses changed, and
    neither the policy nor any IngressClass."""
    return (len(key) == len(last) and key[-2:] == last[-2:]
            and sum(key) - sum(last) <= _INLINE_CHANGES)


NUDGE_ANNOTATION = "hairpin-proxy.io/corefile-version"
# Seconds between rebuilds of the load balancer index for Ingress status changes.
_LB_REBUILD = 10.0
_VERDICTS = ("verified", "ip-mode-proxy", "not-this-cluster", "unresolved", "pending",
             "resolver-error")
# Verdicts told on the Ingress: (Event reason, Event type).
_REPORTED = {"not-this-cluster": ("HostNotOnThisCluster", "Warning"),
             "unresolved": ("HostNotOnThisCluster", "Warning"),
             "ip-mode-proxy": ("HostBehindProxyLoadBalancer", "Normal")}


class _Done(Exception):
    """The pass has nothing more to write."""


class _NotLeading(Exception):
    """The Lease was lost during the pass: no further write."""


def _has_ready_endpoint(slices: Iterable[JsonObj]) -> bool:
    """Whether any EndpointSlice has an endpoint that is ready (unset counts as ready)."""
    return any(isinstance(ep, dict) and (ep.get("conditions") or {}).get("ready") is not False
               for sl in slices for ep in (sl.get("endpoints") or ()))


class ControllerMetrics:
    def __init__(self, registry: Registry) -> None:
        p = "hairpin_controller_"
        self.reconciles = registry.counter(p + "reconciles_total", "Reconcile passes by result.",
                                           ("result",))
        self.writes = registry.counter(p + "writes_total", "ConfigMap writes by target.",
                                       ("target",))
        self.conflicts = registry.counter(p + "conflicts_total",
                                          "Writes refused with 409 Conflict and retried.")
        self.watch_restarts = registry.counter(p + "watch_restarts_total",
                                               "Watches re-established, by kind and reason.",
                                               ("kind", "reason"))
        self.hosts_managed = registry.gauge(p + "hosts_managed", "Hosts in the managed rules.")
        self.hosts_rejected = registry.gauge(p + "hosts_rejected",
                                             "Ingress hosts refused by the policy.")
        self.last_sync = registry.gauge(p + "last_successful_sync_timestamp_seconds",
                                        "Unix time of the last reconcile that left every "
                                        "target in step.")
        self.leader = registry.gauge(p + "leader", "1 while this replica holds the Lease.")
        self.warnings = registry.gauge(p + "warnings", "Configuration warnings found at start "
                                                       "(1 = present).", ("kind",))
        self.parse_errors = registry.counter(p + "corefile_errors_total",
                                             "Reconciles that did not write because the "
                                             "Corefile could not be edited.")
        self.held = registry.gauge(p + "mass_removal_held",
                                   "1 while a large drop in hosts is being held back.")
        self.events = registry.counter(p + "events_total", "Kubernetes Events recorded.",
                                       ("reason",))
        self.requests = registry.counter(p + "api_requests_total",
                                         "Kubernetes API requests by verb and status code "
                                         "(0: no answer).", ("verb", "code"))
        self.duration = registry.histogram(p + "reconcile_duration_seconds",
                                           "Time from a reconcile's start to its last write.")
        self.withdrawn = registry.gauge(p + "rules_withdrawn",
                                        "1 while every rule is withdrawn (proxy Service missing "
                                        "or without ready endpoints, or uninstalling).")
        self.strays = registry.gauge(p + "stray_rules",
                                     "Rules of ours found outside the root server blocks "
                                     "(reported, never edited).")
        self.node_local_blocked = registry.gauge(
            p + "node_local_dns_reconciled",
            "1 while NodeLocal DNSCache's ConfigMap is managed by the addon manager (not "
            "edited).")
        self.throttled = registry.counter(p + "writes_throttled_total",
                                          "Passes held back by --write-interval.")
        self.rules_bytes = registry.gauge(p + "rules_bytes",
                                          "Bytes the managed hosts take in our rules (the "
                                          "budget is --rules-budget).")
        self.over_budget = registry.gauge(p + "ingresses_over_budget",
                                          "Ingresses refused because their hosts would "
                                          "overflow --rules-budget.")
        self.verdicts = registry.gauge(p + "host_verdicts",
                                       "Managed-host candidates by verification verdict.",
                                       ("verdict",))
        self.verify_checks = registry.counter(p + "verify_lookups_total",
                                              "Public DNS lookups made to verify hosts.")
        self.verify_errors = registry.counter(p + "verify_lookup_errors_total",
                                              "Verification lookups the resolver failed.")
        # Read at scrape time: a kept verdict ages while nothing else happens.
        self.kept_age_source: Callable[[], float] = lambda: 0.0
        self.verify_kept_age = registry.gauge(p + "verify_oldest_kept_verdict_seconds",
                                              "Age of the oldest verdict kept through resolver "
                                              "failures (0: none).",
                                              callback=lambda: self.kept_age_source())  # noqa: PLW0108 - set later
        self.evaluations = registry.counter(p + "ingress_evaluations_total",
                                            "Ingresses run through the host policy (new or "
                                            "changed ones; all of them after an IngressClass "
                                            "default change).")


class RemovalGuard:
    """Holds back sudden large drops in the host set until they have persisted for ``grace``.

    ``previous`` is what the target holds now. While a drop is held the old hosts stay (new
    ones are still added); once it has lasted ``grace`` seconds it goes through.
    """

    def __init__(self, fraction: float, grace: float, allow: bool,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.fraction = fraction
        self.grace = grace
        self.allow = allow
        self.clock = clock
        self.held_since: float | None = None

    def decide(self, desired: Sequence[str], previous: Iterable[str]) -> tuple[tuple[str, ...],
                                                                              bool]:
        """(hosts to write, whether a drop is being held back)."""
        prev = set(previous)
        # The policy's hosts come sorted and unique: checking that (in C) is several times
        # cheaper than sorting a set of 10,000 names, which comes out in hash order.
        if all(map(operator.lt, desired, itertools.islice(desired, 1, None))):
            want = tuple(desired)
        else:
            want = tuple(sorted(set(desired)))
        if self.allow or not prev:
            self.held_since = None
            return want, False
        removed = len(prev.difference(want))
        if want and removed / len(prev) <= self.fraction:
            self.held_since = None
            return want, False
        now = self.clock()
        if self.held_since is None:
            self.held_since = now
        if now - self.held_since >= self.grace:
            self.held_since = None
            return want, False
        return tuple(sorted(prev | set(want))), True

    def release_in(self) -> float:
        if self.held_since is None:
            return 0.0
        return max(0.0, self.held_since + self.grace - self.clock())


def _rv(obj: JsonObj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def identity() -> str:
    """Pod name plus a random suffix, so a restarted pod is a new candidate."""
    host = os.environ.get("HOSTNAME") or socket.gethostname()
    return f"{host}_{secrets.token_hex(4)}"


class Controller:
    def __init__(self, settings: ControllerSettings, client: KubeClient, namespace: str,
                 metrics: ControllerMetrics) -> None:
        s = settings
        self.settings = s
        self.client = client
        self.namespace = namespace
        self.metrics = metrics
        self.identity = identity()
        self.target = s.target or default_target(s.cluster_domain, s.proxy_service, namespace)
        self.policy = HostPolicy.from_settings(s, self.target)
        self.dirty = asyncio.Event()
        self.corefile_sink = CorednsSink(s.configmap_namespace, s.configmap_name,
                                         s.configmap_key, self.target, s.dns_port)
        self.import_sink = ImportSink(s.configmap_namespace, s.import_configmap_name,
                                      s.import_key, self.target)
        self.published = PublishedSink(namespace, s.publish_configmap)
        self.guard = RemovalGuard(s.mass_removal_fraction, s.mass_removal_grace,
                                  s.allow_mass_removal)
        self.events = EventRecorder(client, instance=self.identity, interval=s.event_interval)
        self.elector: LeaderElector | None = None
        if s.leader_elect:
            self.elector = LeaderElector(
                client, namespace=namespace, name=s.lease_name, identity=self.identity,
                lease_duration=s.lease_duration, renew_deadline=s.renew_deadline,
                retry_period=s.retry_period, on_change=self._leader_changed)
        else:
            metrics.leader.set(1)

        def reflector(path: str, kind: str, name: str | None = None,
                      labels: str | None = None,
                      transform: Callable[[JsonObj], JsonObj] | None = None) -> Reflector:
            params = {"fieldSelector": f"metadata.name={name}"} if name else {}
            if labels:
                params["labelSelector"] = labels
            made = Reflector(client, path, kind=kind, params=params, on_change=self.dirty.set,
                             silence_timeout=s.watch_timeout, on_restart=self._watch_restarted,
                             transform=transform)
            if name:
                made.on_change = lambda: self._one_changed(made)
            return made

        if s.include_namespace:
            # dict.fromkeys: a namespace given twice is watched once.
            self.ingresses = [reflector(resource_path(INGRESS_API, "ingresses", ns),
                                        f"ingresses/{ns}", transform=slim_ingress)
                              for ns in dict.fromkeys(s.include_namespace)]
        else:
            self.ingresses = [reflector(resource_path(INGRESS_API, "ingresses"), "ingresses",
                                        transform=slim_ingress)]
        self.classes = reflector(resource_path(INGRESS_API, "ingressclasses"), "ingressclasses")
        self.coredns = reflector(resource_path("v1", "configmaps", s.configmap_namespace),
                                 "coredns-configmap", s.configmap_name)
        self.import_cm = reflector(resource_path("v1", "configmaps", s.configmap_namespace),
                                   "import-configmap", s.import_configmap_name)
        self.service = reflector(resource_path("v1", "services", namespace), "proxy-service",
                                 s.proxy_service)
        self.published_cm = reflector(resource_path("v1", "configmaps", namespace),
                                      "published-configmap", s.publish_configmap)
        self.slices = reflector(resource_path("discovery.k8s.io/v1", "endpointslices", namespace),
                                "proxy-endpointslices",
                                labels=f"kubernetes.io/service-name={s.proxy_service}")
        self.own_namespace = reflector(resource_path("v1", "namespaces"), "own-namespace",
                                       namespace)
        self.node_local = [reflector(resource_path("v1", "configmaps", ns), f"configmap {name}",
                                     name) for ns, name in NODE_LOCAL_CANDIDATES]
        self.reflectors = [*self.ingresses, self.classes, self.coredns, self.service,
                           self.published_cm, self.slices, self.own_namespace]
        # Host verification: a host is redirected only when its public DNS answer is one of
        # this cluster's load balancers (every LoadBalancer Service's and Ingress's status).
        self.checker: HostChecker | None = None
        self.lb_services: Reflector | None = None
        if s.verify_hosts == "on":
            self.checker = HostChecker(make_resolver(s.verify_resolver),
                                       interval=s.verify_interval, on_change=self.dirty.set)
            self.lb_services = reflector(resource_path("v1", "services"), "services",
                                         transform=slim_service)
            self.reflectors.append(self.lb_services)
            checker = self.checker
            metrics.kept_age_source = lambda: checker.stats().oldest_kept_age or 0.0
        self._lb = LbIndex()
        self._lb_key: tuple[int, int] | None = None
        self._lb_at = -1e9
        self._verify_counts = (0, 0)
        if s.node_local_dns == "auto":
            self.reflectors += self.node_local
        if s.mode == "coredns-import":
            self.reflectors.append(self.import_cm)
        self.synced_once = False
        self._result: PolicyResult | None = None
        self._policy_cache = PolicyCache(self.policy)
        self._result_key: tuple[int, ...] = ()
        self._logged: dict[tuple[str, str, str, str], float] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._held_logged = False
        self._wakeup: asyncio.TimerHandle | None = None
        self._written: dict[str, tuple[str, JsonObj]] = {}
        # "namespace/name" → the data this pass wrote there, or found already right.
        self._sent: dict[str, object] = {}
        # Why every rule is withdrawn now ("" while they stand), and since when the proxy has
        # had no ready endpoint.
        self.withdrawn = ""
        self._proxy_down_since: float | None = None
        self._grace_timer: asyncio.TimerHandle | None = None
        self.uninstalling = False
        self._last_write = -1e9  # event-loop time of the last DNS ConfigMap write
        self._refused_for_budget = 0
        self._verdicts_logged: dict[tuple[str, str], float] = {}
        # Set once a pass has written the withdrawal that uninstalling asks for.
        self.withdrawal_written = asyncio.Event()
        # What the Corefile told last: (its text, zones it serves, strays), parsed once per text.
        self._corefile_facts: tuple[str, tuple[str, ...], tuple[corefile.Stray, ...]] = (
            "", (), ())
        self._policy_gen = 0
        self._reported_strays: tuple[corefile.Stray, ...] = ()
        self.node_local_notes: dict[str, str] = {}

    # ------------------------------------------------------------------ state

    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader

    def caches_synced(self) -> bool:
        return all(r.synced.is_set() for r in self.reflectors)

    def _leader_changed(self, leading: bool) -> None:
        self.metrics.leader.set(1 if leading else 0)
        if leading:
            # Write at once: the previous leader may have died with work pending.
            self.dirty.set()

    def _one_changed(self, reflector: Reflector) -> None:
        """A watched single object changed: dirty, unless its data is what we last wrote
        there (our own write coming back, often before the answer to the PUT: that change was
        the outcome of a pass, and another would find nothing to do)."""
        objs = list(reflector.cache.values())
        if not (objs and all(map(self._is_ours, objs))):
            self.dirty.set()

    def _is_ours(self, obj: JsonObj) -> bool:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        return key in self._sent and self._sent[key] == obj.get("data")

    def _sending(self, namespace: str, name: str, mutate: Mutate) -> Mutate:
        """``mutate``, remembering the data it asks to write."""
        def run(cm: JsonObj | None) -> JsonObj | None:
            # Runs right before every POST/PUT, the retries after a 409 included: a replica
            # that has lost the Lease sends nothing more (fenced leadership).
            if not self.is_leader():
                raise _NotLeading
            out = mutate(cm)
            # Nothing to write: the data there now is what this pass wants.
            have = out if out is not None else cm
            if have is not None:
                self._sent[f"{namespace}/{name}"] = have.get("data")
            return out
        return run

    def _watch_restarted(self, kind: str, why: str) -> None:
        self.metrics.watch_restarts.labels(kind, why).inc()

    async def ready(self) -> Check:
        if not self.caches_synced():
            waiting = [r.kind for r in self.reflectors if not r.synced.is_set()]
            return Check(False, "caches not synced: " + ", ".join(waiting))
        if self.elector is not None and not self.elector.decided:
            return Check(False, "leader election pending")
        if self.is_leader() and not self.synced_once:
            return Check(False, "first sync not done")
        notes = "".join(f"; {note}" for note in (
            f"rules withdrawn: {self.withdrawn}" if self.withdrawn and self.is_leader() else "",
            *self.node_local_notes.values()) if note)
        return Check(True, ("ok (leader)" if self.is_leader() else "ok (standby)") + notes)

    # ------------------------------------------------------------------ loop

    async def run(self) -> None:
        tasks = [asyncio.create_task(r.run(), name=f"watch {r.kind}") for r in self.reflectors]
        if self.elector is not None:
            tasks.append(asyncio.create_task(self.elector.run(), name="leader election"))
        tasks.append(asyncio.create_task(self._loop(), name="reconcile"))
        if self.checker is not None:
            tasks.append(self.checker.start())
        tasks.append(asyncio.create_task(self._startup_warnings(), name="warnings"))
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                if not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
        finally:
            if self.checker is not None:
                await self.checker.stop()
            for task in [*tasks, *self._tasks]:
                task.cancel()
            await asyncio.gather(*tasks, *self._tasks, return_exceptions=True)

    async def _loop(self) -> None:
        debounce = max(0.0, self.settings.debounce)
        # A steady trickle of changes must not postpone the write for ever.
        cap = max(1.0, 10 * debounce)
        backoff = Backoff(base=0.5, cap=10.0)
        loop = asyncio.get_running_loop()
        last_pass = -cap
        while True:
            await self.dirty.wait()
            first = loop.time()
            # A change after a quiet spell is written at once; more changes right behind a
            # pass are a burst, and wait until it is over (or the cap).
            while first - last_pass < debounce:
                self.dirty.clear()
                left = first + cap - loop.time()
                if left <= 0:
                    break
                try:
                    await asyncio.wait_for(self.dirty.wait(), min(debounce, left))
                except TimeoutError:
                    break
            self.dirty.clear()
            hold = self._last_write + self.settings.write_interval - loop.time()
            if hold > 0 and not self.uninstalling:
                # A write not long ago: CoreDNS reloads on every change, so an Ingress that
                # flaps in a loop must not make it reload without end.
                self.metrics.throttled.inc()
                await asyncio.sleep(hold)
                self.dirty.clear()
            try:
                ok = await self.reconcile()
            except Exception:
                # A defect must not stop the other watches or the lease; keep the last good
                # state and try again later.
                log.exception("reconcile crashed; will retry")
                self.metrics.reconciles.labels("crash").inc()
                self._written.clear()
                ok = False
            last_pass = loop.time()
            if ok:
                backoff.reset()
            else:
                await asyncio.sleep(backoff.next_delay())
                self.dirty.set()

    async def _evaluate(self) -> PolicyResult:
        key = (*(r.generation for r in self.ingresses), self._policy_gen,
               self.classes.generation)
        if self._result is None or key != self._result_key:
            # Copies taken on the event loop, where the watches change the caches (a C-level
            # dict copy, well under a millisecond for 10,000). A full pass (the first, or
            # after a change of IngressClasses) over 10,000 Ingresses takes 100-200 ms and
            # runs in a thread; a few changed Ingresses cost about a millisecond, less than
            # the trip to a thread and back.
            if len(self.ingresses) == 1:
                items = dict(self.ingresses[0].cache)
            else:
                items = {k: v for r in self.ingresses for k, v in r.cache.items()}
            classes = list(self.classes.cache.values())
            if _few_changes(key, self._result_key):
                result, evaluated = self._policy_cache.update(items, classes, self.policy)
            else:
                result, evaluated = await asyncio.to_thread(self._policy_cache.update, items,
                                                            classes, self.policy)
            self._result, self._result_key = result, key
            self.metrics.evaluations.inc(evaluated)
            return result
        return self._result

    async def reconcile(self) -> bool:
        """One pass; False when it should be retried after a backoff."""
        # What earlier passes sent says nothing once this one may end without writing (a
        # Corefile that cannot be edited, a missing ConfigMap): the data they sent can come
        # back later, restored by someone, while the Ingresses have changed since.
        self._sent.clear()
        if not self.caches_synced():
            return True
        self._check_uninstall()
        if not self.is_leader():
            return self._not_leading()
        started = time.perf_counter()
        s = self.settings
        coredns_cm = self._current(self.coredns, s.configmap_namespace, s.configmap_name)
        self._learn_corefile(coredns_cm)
        # Uninstalling is a race with the namespace's deletion (our service account goes with
        # it): the withdrawal is written before anything else is computed.
        result = PolicyResult((), (), {}, ()) if self.uninstalling else await self._evaluate()
        result = self._within_budget(result)
        self.metrics.hosts_rejected.set(len(result.rejections))
        self._report(result.rejections)
        try:
            answers, withdrawn = self._proxy_answers()
            self._set_withdrawn(withdrawn)
            if s.mode == "coredns":
                cm = coredns_cm
                # Parsing and editing a large Corefile takes a while: off the event loop, so
                # Lease renewals and watches are never held up by it. The write below then
                # finds the edit remembered.
                previous = self.corefile_sink.remembered_hosts(cm)
                if previous is None:
                    previous = await asyncio.to_thread(self.corefile_sink.current_hosts, cm)
                wanted = await self._verified(result, previous)
                hosts = () if withdrawn else self._guarded(wanted, previous)
                await asyncio.to_thread(self.corefile_sink.edit, self.corefile_sink.text(cm),
                                        hosts, answers)
                what, sink_name = "corefile", self.corefile_sink.where
                mutate = self.corefile_sink.mutate(hosts, answers)
                ns, name = self.corefile_sink.namespace, self.corefile_sink.name
            else:
                cm = self._current(self.import_cm, self.settings.configmap_namespace,
                                   self.settings.import_configmap_name)
                pub = self._current(self.published_cm, self.published.namespace,
                                    self.published.name)
                previous = parse_lines((pub or {}).get("data", {}).get("hosts"))
                wanted = await self._verified(result, previous)
                hosts = () if withdrawn else self._guarded(wanted, previous)
                what, sink_name = "import", self.import_sink.where
                mutate = self.import_sink.mutate(hosts, answers)
                ns, name = self.import_sink.namespace, self.import_sink.name
            if not self.is_leader():
                return self._not_leading()
            written = await write_configmap(self.client, ns, name,
                                            self._sending(ns, name, mutate), current=cm,
                                            on_conflict=self.metrics.conflicts.inc)
            self._remember(written)
            if written.changed:
                self._last_write = asyncio.get_running_loop().time()
                self.metrics.writes.labels(what).inc()
                before = set(previous)
                kept = len(before.intersection(hosts))
                log.info("rules updated", extra={"target": sink_name,
                                                  "action": written.outcome,
                                                  "hosts": len(hosts),
                                                  "added": len(hosts) - kept,
                                                  "removed": len(before) - kept})
                if (s.nudge_coredns or self.uninstalling) and written.obj is not None:
                    # On uninstall it is tried anyway: without the permission it is refused,
                    # and the kubelet's own sync brings the withdrawal a minute or so later.
                    self._spawn(self._nudge(_rv(written.obj), quiet=not s.nudge_coredns))
            if not await self._write_node_local(hosts):
                return self._not_leading()
            if self.uninstalling:
                # Our namespace, and the published hosts with it, is going away: nothing can
                # be created there any more, and the DNS rules are already gone.
                raise _Done
            svc = self.service.get(f"{self.namespace}/{self.settings.proxy_service}")
            pub = self._current(self.published_cm, self.published.namespace,
                                self.published.name)
            if not self.is_leader():
                return self._not_leading()
            written = await write_configmap(
                self.client, self.published.namespace, self.published.name,
                self._sending(self.published.namespace, self.published.name,
                              self.published.mutate(hosts, service_addresses(svc))),
                current=pub,
                on_conflict=self.metrics.conflicts.inc)
            self._remember(written)
            if written.changed:
                self.metrics.writes.labels("published").inc()
                log.info("published hosts updated", extra={"configmap": self.published.where,
                                                           "hosts": len(hosts)})
        except _Done:
            pass
        except _NotLeading:
            return self._not_leading()
        except corefile.CorefileError as exc:
            # Never write what we cannot parse; the next change to the ConfigMap retries.
            self.metrics.parse_errors.inc()
            self.metrics.reconciles.labels("corefile_error").inc()
            log.error("cannot edit the Corefile; leaving it alone",
                      extra={"configmap": self.corefile_sink.where, "error": str(exc)})
            return True
        except SinkError as exc:
            self.metrics.reconciles.labels("target_missing").inc()
            log.error("cannot write the rules", extra={"error": str(exc)})
            return True
        except ApiError as exc:
            self._written.clear()
            self.metrics.reconciles.labels("error").inc()
            log.warning("reconcile failed; will retry", extra={"error": str(exc)})
            return False
        self.metrics.reconciles.labels("ok").inc()
        self.metrics.hosts_managed.set(len(hosts))
        self.metrics.last_sync.set(time.time())
        self.metrics.duration.observe(time.perf_counter() - started)
        if self.uninstalling:
            self.withdrawal_written.set()
        if not self.synced_once:
            self.synced_once = True
            # The caches now hold most of what this process will keep (tens of thousands of
            # dicts with 10,000 Ingresses): out of the cyclic GC's sight, so its full
            # collections no longer walk them in the middle of later reconciles.
            gc.freeze()
            log.info("first sync done", extra={"hosts": len(hosts),
                                               "rejected": len(result.rejections)})
        return True

    def _within_budget(self, result: PolicyResult) -> PolicyResult:
        """``result`` with the Ingresses refused whose hosts would overflow --rules-budget:
        the oldest Ingresses keep their hosts, so one new object can never stop the rules
        of every other from being written."""
        budget = self.settings.rules_budget
        size = corefile.rules_bytes(result.hosts)
        if size <= budget:
            self.metrics.rules_bytes.set(size)
            self.metrics.over_budget.set(0)
            self._refused_for_budget = 0
            return result
        by_origin: dict[str, list[str]] = {}
        for host, origins in result.sources.items():
            for origin in origins:
                by_origin.setdefault(origin, []).append(host)

        def age(origin: str) -> tuple[str, str]:
            ns, _, name = origin.partition("/")
            obj = self._find_ingress(ns, name) or {}
            return str((obj.get("metadata") or {}).get("creationTimestamp") or "~"), origin

        kept: set[str] = set()
        total = 0
        refused: list[Rejection] = []
        for origin in sorted(by_origin, key=age):
            new = [h for h in by_origin[origin] if h not in kept]
            cost = corefile.rules_bytes(new)
            if total + cost > budget:
                ns, _, name = origin.partition("/")
                refused.append(Rejection(ns, name, "", (
                    f"its {len(by_origin[origin])} host(s) would take the rules past "
                    f"--rules-budget ({budget} bytes); newer Ingresses are refused first")))
                continue
            kept.update(new)
            total += cost
        self.metrics.rules_bytes.set(total)
        self.metrics.over_budget.set(len(refused))
        if len(refused) != self._refused_for_budget:
            log.warning("rules budget exceeded; the newest Ingresses are refused",
                        extra={"budget": budget, "wanted": size, "refused": len(refused)})
        self._refused_for_budget = len(refused)
        return dataclasses.replace(result, hosts=tuple(sorted(kept)),
                                   rejections=(*result.rejections, *refused))

    # ------------------------------------------------------------------ host verification

    async def _lb_index(self) -> LbIndex:
        """This cluster's load balancer addresses. Rebuilt at once when a Service changes; for
        Ingress changes (their status rarely changes) at most every 10 s, off the event loop:
        at 10,000 Ingresses a rebuild takes tens of milliseconds."""
        assert self.lb_services is not None
        key = (self.lb_services.generation, sum(r.generation for r in self.ingresses))
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._lb_key is None or key[0] != self._lb_key[0] or (
                key[1] != self._lb_key[1] and now - self._lb_at >= _LB_REBUILD):
            services = list(self.lb_services.cache.values())
            ingresses = [obj for r in self.ingresses for obj in r.cache.values()]
            self._lb = await asyncio.to_thread(lb_addresses, services, ingresses)
            self._lb_key, self._lb_at = key, now
        elif key[1] != self._lb_key[1]:
            loop.call_later(self._lb_at + _LB_REBUILD - now + 0.05, self.dirty.set)
        return self._lb

    async def _verified(self, result: PolicyResult, previous: Iterable[str]
                        ) -> tuple[str, ...]:
        """The hosts of ``result`` whose public DNS leads to this cluster's load balancer.

        A host not checked yet keeps what the rules hold now (a restart or a new leader
        neither withdraws nor adds anything before its first answer); a host that cannot be
        checked because the resolver fails keeps its last verdict (the checker's rule)."""
        if self.checker is None or self.uninstalling:
            return result.hosts
        self.checker.update(result.hosts, await self._lb_index())
        verdicts = self.checker.verdicts()
        had = set(previous)
        out: list[str] = []
        counts: dict[str, int] = {}
        for host in result.hosts:
            verdict = verdicts.get(host)
            code = verdict.code if verdict is not None else "pending"
            counts[code] = counts.get(code, 0) + 1
            if (verdict is not None and verdict.redirect) or (code == "pending" and host in had):
                out.append(host)
            elif verdict is not None and code in _REPORTED:
                self._report_verdict(host, code, verdict.reason, result.sources.get(host, ()))
        for code in _VERDICTS:
            self.metrics.verdicts.labels(code).set(counts.get(code, 0))
        stats = self.checker.stats()
        checks, errors = self._verify_counts
        self.metrics.verify_checks.inc(max(0, stats.checks - checks))
        self.metrics.verify_errors.inc(max(0, stats.errors - errors))
        self._verify_counts = (stats.checks, stats.errors)
        return tuple(out)

    def _report_verdict(self, host: str, code: str, reason: str,
                        origins: Sequence[str]) -> None:
        reason_name, kind = _REPORTED[code]
        key = (host, code)
        now = time.monotonic()
        last = self._verdicts_logged.get(key)
        if last is not None and now - last < self.settings.event_interval:
            return
        self._verdicts_logged[key] = now
        (log.info if kind == "Normal" else log.warning)(
            "host not redirected", extra={"host": host, "verdict": code, "reason": reason})
        for origin in origins:
            ns, _, name = origin.partition("/")
            obj = self._find_ingress(ns, name)
            if obj is not None:
                self._event({"apiVersion": INGRESS_API, "kind": "Ingress", **obj}, reason_name,
                             f"{reason}: not redirected by hairpin-proxy", kind)

    # ------------------------------------------------------------------ the proxy's health

    def _proxy_answers(self) -> tuple[corefile.Answers, str]:
        """(what managed names resolve to, why every rule must be withdrawn now or "").

        Rules that lead to a proxy that is not there would be worse than no rules: without a
        Service there is no address to answer with, and without a ready endpoint for longer
        than the grace period the names are given back to their public answers until the
        proxy is back. A rolling update keeps endpoints ready; a brief gap is what the grace
        period is for.
        """
        s = self.settings
        if self.uninstalling:
            return corefile.Answers(ttl=s.dns_ttl), ("hairpin-proxy is being uninstalled (its "
                                                     "namespace is terminating)")
        svc = self.service.get(f"{self.namespace}/{s.proxy_service}")
        if svc is None:
            self._proxy_down_since = None
            return corefile.Answers(ttl=s.dns_ttl), (f"the proxy Service {self.namespace}/"
                                                     f"{s.proxy_service} does not exist")
        answers = corefile.Answers.of(service_addresses(svc), s.dns_ttl)
        if not answers:
            return answers, "the proxy Service has no ClusterIP"
        if _has_ready_endpoint(self.slices.cache.values()):
            self._proxy_down_since = None
            return answers, ""
        now = time.monotonic()
        if self._proxy_down_since is None:
            self._proxy_down_since = now
        left = self._proxy_down_since + s.proxy_grace - now
        if left > 0:
            if self._grace_timer is not None:
                self._grace_timer.cancel()
            self._grace_timer = asyncio.get_running_loop().call_later(left + 0.05,
                                                                      self.dirty.set)
            return answers, ""
        return answers, (f"the proxy Service has had no ready endpoint for {s.proxy_grace:g}s "
                         "or more")

    def _set_withdrawn(self, reason: str) -> None:
        if reason == self.withdrawn:
            return
        before, self.withdrawn = self.withdrawn, reason
        self.metrics.withdrawn.set(1 if reason else 0)
        svc = self.service.get(f"{self.namespace}/{self.settings.proxy_service}")
        involved = ({"apiVersion": "v1", "kind": "Service", **svc} if svc is not None else
                    {"apiVersion": "v1", "kind": "ConfigMap",
                     **(self.coredns.get(f"{self.settings.configmap_namespace}/"
                                         f"{self.settings.configmap_name}") or {})})
        if reason:
            log.warning("every rule withdrawn; managed names get their public answers again",
                        extra={"reason": reason})
            self._event(involved, "RulesWithdrawn", f"hairpin-proxy withdrew its DNS rules: "
                        f"{reason}", "Warning")
        elif before:
            log.info("rules restored", extra={"was": before})
            self._event(involved, "RulesRestored", "hairpin-proxy restored its DNS rules: the "
                        "proxy is back", "Normal")

    def _event(self, involved: JsonObj, reason: str, message: str, kind: str) -> None:
        if not (involved.get("metadata") or {}).get("name"):
            return

        async def send() -> None:
            if await self.events.warn(involved, reason=reason, message=message,
                                      key=f"{reason}|{message}", event_type=kind):
                self.metrics.events.labels(reason).inc()
        self._spawn(send())

    # ------------------------------------------------------------------ uninstall

    def _check_uninstall(self) -> None:
        """Our namespace terminating means an uninstall (``kubectl delete -f``/``-k``, or of
        the namespace): every rule is withdrawn at once, before the namespace controller
        deletes our service account and the manifests' RBAC goes (deleted after the
        namespace: see docs/install.md). A rolling update, a drained node, a crash or a lost
        leadership never withdraw anything."""
        if self.uninstalling:
            return
        ns = self.own_namespace.get(f"/{self.namespace}")
        if ns is not None and (ns.get("metadata") or {}).get("deletionTimestamp"):
            self.uninstalling = True
            log.warning("our namespace is being deleted: withdrawing every rule",
                        extra={"namespace": self.namespace})

    # ------------------------------------------------------------------ the Corefile's facts

    def _learn_corefile(self, cm: JsonObj | None) -> None:
        """Zones the Corefile already serves (refused as hosts) and rules of ours outside the
        root blocks (reported), read once per Corefile text."""
        s = self.settings
        try:
            text = self.corefile_sink.text(cm)
        except SinkError:
            return
        known = self._corefile_facts[0]
        if text == known:
            return
        if known and self.corefile_sink.source_of(text) == known:
            # Our own edit of the text the facts were read from: it changed only our rules.
            self._corefile_facts = (text, *self._corefile_facts[1:])
            return
        try:
            cf = corefile.parse(text)
            zones = corefile.served_zones(cf, dns_port=s.dns_port)
            strays = corefile.strays(cf, target=self.target, dns_port=s.dns_port)
        except corefile.CorefileError:
            return  # the edit reports it
        self._corefile_facts = (text, zones, strays)
        if zones != self.policy.served_zones:
            self.policy = dataclasses.replace(self.policy, served_zones=zones)
            self._policy_gen += 1
            log.info("zones the Corefile serves itself are never redirected",
                     extra={"zones": ",".join(zones)})
        self.metrics.strays.set(len(strays))
        if strays and strays != self._reported_strays:
            message = ("rules of hairpin-proxy outside the root server block, left as they "
                       "are (copied by hand?): " + "; ".join(map(str, strays)))
            log.warning(message, extra={"configmap": self.corefile_sink.where})
            if cm is not None:
                self._event({"apiVersion": "v1", "kind": "ConfigMap", **cm}, "StrayRules",
                            message, "Warning")
        self._reported_strays = strays

    # ------------------------------------------------------------------ node-local-dns

    async def _write_node_local(self, hosts: Sequence[str]) -> bool:
        """Our hosts in NodeLocal DNSCache's Corefile, where it runs and is ours to edit;
        False when leadership was lost on the way."""
        if self.settings.node_local_dns != "auto":
            return True
        for (ns, name), reflector in zip(NODE_LOCAL_CANDIDATES, self.node_local, strict=True):
            cm = self._current(reflector, ns, name)
            where = f"{ns}/{name}"
            if cm is None:
                self.node_local_notes.pop(where, None)
                continue
            if NodeLocalSink.reconciled_by_addon_manager(cm):
                self._node_local_reconciled(cm, where)
                continue
            self.node_local_notes.pop(where, None)
            sink = NodeLocalSink(ns, name, cluster_domain=self.settings.cluster_domain)
            if not self.is_leader():
                return False
            try:
                written = await write_configmap(self.client, ns, name,
                                                self._sending(ns, name, sink.mutate(hosts)),
                                                current=cm,
                                                on_conflict=self.metrics.conflicts.inc)
            except (corefile.CorefileError, SinkError) as exc:
                # Its own problem: CoreDNS's rules are written all the same.
                self.node_local_notes[where] = f"node-local-dns {where} not edited: {exc}"
                log.error("cannot edit node-local-dns's Corefile; leaving it alone",
                          extra={"configmap": where, "error": str(exc)})
                continue
            self._remember(written)
            if written.changed:
                self._last_write = asyncio.get_running_loop().time()
                self.metrics.writes.labels("node-local-dns").inc()
                log.info("node-local-dns rules updated", extra={"configmap": where,
                                                                "hosts": len(hosts)})
        self.metrics.node_local_blocked.set(1 if any(
            "addon manager" in n for n in self.node_local_notes.values()) else 0)
        return True

    def _node_local_reconciled(self, cm: JsonObj, where: str) -> None:
        note = (f"node-local-dns {where} is reconciled by the addon manager "
                "(addonmanager.kubernetes.io/mode: Reconcile): not edited, so pods that resolve "
                "through it bypass our rules; see docs/platforms/node-local-dns.md")
        if self.node_local_notes.get(where) != note:
            log.warning(note)
            self._event({"apiVersion": "v1", "kind": "ConfigMap", **cm},
                        "NodeLocalDNSReconciled", note, "Warning")
        self.node_local_notes[where] = note

    # ------------------------------------------------------------------ propagation

    async def _nudge(self, version: str, *, quiet: bool = False) -> None:
        """Annotate the CoreDNS pods: the kubelet then syncs them, and with them their
        ConfigMap volume, within seconds instead of at its next periodic sync (a minute or
        more). The containers are not restarted."""
        s = self.settings
        base = resource_path("v1", "pods", s.configmap_namespace)
        try:
            pods, _ = await self.client.list(base, {"labelSelector": s.coredns_selector})
            for pod in pods:
                if not self.is_leader() and not self.uninstalling:
                    return
                name = (pod.get("metadata") or {}).get("name")
                await self.client.merge_patch(f"{base}/{name}", {"metadata": {"annotations": {
                    NUDGE_ANNOTATION: version}}})
        except ApiError as exc:
            (log.debug if quiet else log.warning)("could not nudge the CoreDNS pods",
                                                  extra={"error": str(exc)})

    def _not_leading(self) -> bool:
        # A standby is done. A leader whose renewal is merely overdue must try again soon:
        # it will not hear "became leader" again when the renewal goes through.
        return self.elector is None or not self.elector.holds_lease

    def _current(self, reflector: Reflector, namespace: str, name: str) -> JsonObj | None:
        """The freshest copy we know: our own last write until the watch has delivered it.

        While the cache still shows the version our write replaced, it lags behind us; once
        it shows anything else it has caught up (watch events arrive in order).
        """
        key = f"{namespace}/{name}"
        cached = reflector.get(key)
        entry = self._written.get(key)
        if entry is None:
            return cached
        replaced, ours = entry
        if (cached is None and not replaced) or (cached is not None and _rv(cached) == replaced):
            return ours
        del self._written[key]
        return cached

    def _remember(self, written: WriteResult) -> None:
        if written.changed and written.obj is not None:
            meta = written.obj.get("metadata") or {}
            key = f"{meta.get('namespace')}/{meta.get('name')}"
            self._written[key] = (written.replaced, written.obj)

    def _guarded(self, desired: Sequence[str], previous: Sequence[str]) -> tuple[str, ...]:
        hosts, held = self.guard.decide(desired, previous)
        self.metrics.held.set(1 if held else 0)
        if held:
            if not self._held_logged:
                self._held_logged = True
                log.warning("large drop in hosts held back; keeping the old rules",
                            extra={"previous": len(set(previous)), "desired": len(desired),
                                   "release_in": round(self.guard.release_in(), 1),
                                   "hint": "--allow-mass-removal applies such drops at once"})
            if self._wakeup is not None:
                self._wakeup.cancel()
            self._wakeup = asyncio.get_running_loop().call_later(
                self.guard.release_in() + 0.05, self.dirty.set)
        elif self._held_logged:
            self._held_logged = False
            log.info("held-back drop in hosts released or withdrawn",
                     extra={"hosts": len(hosts)})
        return hosts

    # ------------------------------------------------------------------ rejections

    def _report(self, rejections: Sequence[Rejection]) -> None:
        now = time.monotonic()
        interval = self.settings.event_interval
        pending: list[tuple[JsonObj, Rejection]] = []
        for rej in rejections:
            key = (rej.namespace, rej.name, rej.host, rej.reason)
            last = self._logged.get(key)
            if last is not None and now - last < interval:
                continue
            self._logged[key] = now
            log.warning("host rejected", extra={"ingress": f"{rej.namespace}/{rej.name}",
                                                "host": rej.host, "reason": rej.reason})
            ingress = self._find_ingress(rej.namespace, rej.name)
            if ingress is not None:
                pending.append((ingress, rej))
        if len(self._logged) > 50_000:
            self._logged = {k: t for k, t in self._logged.items() if now - t < interval}
        if pending:
            self._spawn(self._record(pending))

    def _find_ingress(self, namespace: str, name: str) -> JsonObj | None:
        for r in self.ingresses:
            obj = r.get(f"{namespace}/{name}")
            if obj is not None:
                return obj
        return None

    async def _record(self, pending: Sequence[tuple[JsonObj, Rejection]]) -> None:
        for ingress, rej in pending:
            what = f"host {rej.host!r}" if rej.host else "Ingress"
            message = f"{what} not redirected by hairpin-proxy: {rej.reason}"
            involved = {"apiVersion": INGRESS_API, "kind": "Ingress", **ingress}
            if await self.events.warn(involved, reason="HostRejected", message=message,
                                      key=f"{rej.host}|{rej.reason}"):
                self.metrics.events.labels("HostRejected").inc()

    def _spawn(self, coro: Awaitable[None]) -> None:
        async def wrapped() -> None:
            await coro
        task = asyncio.create_task(wrapped())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ warnings

    def _warn(self, kind: str, message: str, **fields: Any) -> None:
        self.metrics.warnings.labels(kind).set(1)
        log.warning(message, extra={"warning": kind, **fields})

    async def _startup_warnings(self) -> None:
        """Checks that are worth a line once per start; missing permissions skip them."""
        try:
            await self._checks()
        except Exception as exc:
            log.debug("start-up checks failed", extra={"error": repr(exc)})

    async def _checks(self) -> None:
        await self.coredns.synced.wait()
        s = self.settings
        cm = self.coredns.get(f"{s.configmap_namespace}/{s.configmap_name}")
        try:
            text = self.corefile_sink.text(cm)
            if not corefile.has_plugin(text, "reload", dns_port=s.dns_port):
                self._warn("no-reload", "the Corefile has no reload plugin: CoreDNS will not "
                           "pick up rule changes until it restarts",
                           configmap=self.corefile_sink.where)
            if s.mode == "coredns-import" and not corefile.imports_key(text, s.import_key,
                                                                       dns_port=s.dns_port):
                self._warn("import-not-imported", "the Corefile does not import our key; the "
                           "rules written there have no effect",
                           configmap=self.corefile_sink.where, key=s.import_key)
        except (SinkError, corefile.CorefileError) as exc:
            log.debug("Corefile checks skipped", extra={"error": str(exc)})
        await self._check_node_local_dns()
        await self._check_proxy_ip_mode()

    async def _optional_get(self, path: str) -> JsonObj | None:
        try:
            return await self.client.get(path)
        except ApiError as exc:
            log.debug("optional check skipped", extra={"path": path, "error": str(exc)})
            return None

    async def _check_node_local_dns(self) -> None:
        if self.settings.node_local_dns != "off":
            return  # kept in step by every pass
        for ns, name in NODE_LOCAL_CANDIDATES:
            if await self._optional_get(resource_path("v1", "configmaps", ns, name)):
                self._warn("node-local-dns", "node-local-dns is present and --node-local-dns "
                           "is off: pods that resolve through it bypass our rules",
                           configmap=f"{ns}/{name}")

    async def _check_proxy_ip_mode(self) -> None:
        try:
            services, _ = await self.client.list(resource_path("v1", "services"))
        except ApiError as exc:
            log.debug("ipMode check skipped", extra={"error": str(exc)})
            return
        for svc in services:
            if (svc.get("spec") or {}).get("type") != "LoadBalancer":
                continue
            lb = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
            if any(isinstance(i, dict) and i.get("ipMode") == "Proxy" for i in lb):
                meta = svc.get("metadata") or {}
                self._warn("ip-mode-proxy", "a LoadBalancer Service reports ipMode Proxy: "
                           "in-cluster traffic to it goes through the load balancer, so the "
                           "hairpin problem does not occur for it",
                           service=f"{meta.get('namespace')}/{meta.get('name')}")


# ---------------------------------------------------------------------- entry points

def _settings_error(s: ControllerSettings) -> str:
    if s.leader_elect and not s.retry_period < s.renew_deadline < s.lease_duration:
        return "--retry-period < --renew-deadline < --lease-duration is required"
    if not 0.0 <= s.mass_removal_fraction <= 1.0:
        return "--mass-removal-fraction must be between 0 and 1"
    if s.watch_timeout <= 0:
        return "--watch-timeout must be positive"
    if s.verify_interval <= 0:
        return "--verify-interval must be positive"
    if s.write_interval < 0 or s.rules_budget <= 0 or s.proxy_grace < 0:
        return "--write-interval and --proxy-grace must not be negative, --rules-budget positive"
    if not 0 < s.dns_ttl <= corefile.MAX_TTL:
        return f"--dns-ttl must be 1 to {corefile.MAX_TTL} seconds"
    try:
        parse_servers(s.verify_resolver)
    except ValueError as exc:
        return f"--verify-resolver: {exc}"
    return ""


def _install_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        # Not available off the main thread (in-process runs); the caller stops us then.
        with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
            loop.add_signal_handler(sig, stop.set)


def _client(cluster: kconfig.ClusterConfig, metrics: ControllerMetrics | None) -> KubeClient:
    def count(verb: str, status: int) -> None:
        if metrics is not None:
            metrics.requests.labels(verb, str(status)).inc()
    return KubeClient.from_cluster(cluster, on_response=count)


async def _serve(settings: ControllerSettings, cluster: kconfig.ClusterConfig,
                 stop: asyncio.Event | None = None) -> int:
    stop = stop or asyncio.Event()
    _install_signals(stop)
    registry = Registry()
    metrics = ControllerMetrics(registry)
    namespace = kconfig.own_namespace(settings.namespace, cluster)
    client = _client(cluster, metrics)
    ctl = Controller(settings, client, namespace, metrics)
    log.info("controller starting", extra={
        "server": cluster.server, "config": cluster.source, "namespace": namespace,
        "mode": settings.mode, "target": ctl.target, "identity": ctl.identity,
        "configmap": (ctl.corefile_sink.where if settings.mode == "coredns"
                      else ctl.import_sink.where)})
    admin: AdminServer | None = None
    if settings.admin_listen:
        admin = await serve_admin(registry, settings.admin_listen, ready=ctl.ready)
        if admin is None:
            await client.close()
            return 1
    main = asyncio.create_task(ctl.run())
    stopper = asyncio.create_task(stop.wait())
    code = 0
    try:
        await asyncio.wait([main, stopper], return_when=asyncio.FIRST_COMPLETED)
        if main.done() and not main.cancelled() and main.exception() is not None:
            log.critical("controller failed", exc_info=main.exception())
            code = 1
        else:
            log.info("stopping")
            if ctl.uninstalling and not ctl.withdrawal_written.is_set():
                # SIGTERM in the middle of an uninstall: finish withdrawing the rules first.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ctl.withdrawal_written.wait(), 5.0)
    finally:
        stopper.cancel()
        main.cancel()
        await asyncio.gather(main, stopper, return_exceptions=True)
        if ctl.elector is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ctl.elector.release(), 5)
        if admin is not None:
            await admin.close()
        await client.close()
    return code


def _setup_logging(level: str, fmt: str) -> None:
    setup_logging(level, fmt)
    # The HTTP stack logs every request at INFO and every socket step at DEBUG.
    for name in ("httpx2", "httpcore2", "httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)


def run(settings: ControllerSettings) -> int:
    _setup_logging(settings.log_level, settings.log_format)
    problem = _settings_error(settings)
    if problem:
        log.error("bad settings", extra={"error": problem})
        return 2
    try:
        cluster = kconfig.load(settings.kubeconfig)
    except kconfig.KubeConfigError as exc:
        log.error("cannot reach Kubernetes", extra={"error": str(exc)})
        return 1
    return asyncio.run(_serve(settings, cluster))


async def _cleanup(s: CleanupSettings, client: KubeClient, namespace: str) -> int:
    if s.mode == "coredns":
        sink = CorednsSink(s.configmap_namespace, s.configmap_name, s.configmap_key,
                           corefile.DEFAULT_TARGET, s.dns_port)
        try:
            outcome = (await write_configmap(client, sink.namespace, sink.name,
                                             sink.removal())).outcome
        except SinkError as exc:
            log.warning("nothing to remove from CoreDNS", extra={"error": str(exc)})
            outcome = "absent"
        log.info("CoreDNS rules removed" if outcome == "updated" else "no CoreDNS rules to "
                 "remove", extra={"configmap": sink.where})
    else:
        isink = ImportSink(s.configmap_namespace, s.import_configmap_name, s.import_key, "")
        outcome = (await write_configmap(client, isink.namespace, isink.name,
                                         isink.removal())).outcome
        log.info("import key removed" if outcome == "updated" else "no import key to remove",
                 extra={"configmap": isink.where})
        path = resource_path("v1", "configmaps", isink.namespace, isink.name)
        if ImportSink.ours_and_empty(await client.get(path)) and await client.delete(path):
            log.info("deleted the import ConfigMap we had created",
                     extra={"configmap": f"{isink.namespace}/{isink.name}"})
    for ns, name in NODE_LOCAL_CANDIDATES:
        nsink = NodeLocalSink(ns, name)
        try:
            outcome = (await write_configmap(client, ns, name, nsink.removal())).outcome
        except (SinkError, ApiError) as exc:
            log.debug("no node-local-dns rules removed", extra={"configmap": nsink.where,
                                                                "error": str(exc)})
            continue
        if outcome == "updated":
            log.info("node-local-dns rules removed", extra={"configmap": nsink.where})
    published = resource_path("v1", "configmaps", namespace, s.publish_configmap)
    if await client.delete(published):
        log.info("deleted the published hosts", extra={
            "configmap": f"{namespace}/{s.publish_configmap}"})
    return 0


async def _cleanup_main(s: CleanupSettings, cluster: kconfig.ClusterConfig) -> int:
    client = _client(cluster, None)
    namespace = kconfig.own_namespace(s.namespace, cluster)
    try:
        return await _cleanup(s, client, namespace)
    except corefile.CorefileError as exc:
        log.error("cleanup failed: the Corefile cannot be parsed; nothing was changed",
                  extra={"error": str(exc)})
    except ApiError as exc:
        log.error("cleanup failed", extra={"error": str(exc)})
    finally:
        await client.close()
    return 1


def run_cleanup(settings: CleanupSettings) -> int:
    """The uninstall step: our Corefile block (or import key) and the published hosts go."""
    _setup_logging(settings.log_level, settings.log_format)
    try:
        cluster = kconfig.load(settings.kubeconfig)
    except kconfig.KubeConfigError as exc:
        log.error("cannot reach Kubernetes", extra={"error": str(exc)})
        return 1
    return asyncio.run(_cleanup_main(settings, cluster))
