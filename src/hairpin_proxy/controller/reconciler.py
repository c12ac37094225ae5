"""The reconciler: caches → one pass → every writer, and the loop that decides when a pass runs.

    sources' caches (list+watch; Ingresses, Gateway API routes, ...), verification verdicts,
    what the rules hold and the room their ConfigMaps leave ──▶ one snapshot
        ──▶ the plan (plan/: claims through the host policy, routing, verification, rules
            budget and ConfigMap room) ──▶ removal guard
        ──▶ writers: targets table + per-target Services, DNS rules (Corefile block or import
            key), node-local-dns, published hosts
            (each a PUT with resourceVersion; 409 → re-read, re-apply)
        rejections, conflicts, unrouted hosts ──▶ rate-limited Events

Only the Lease holder writes, and every write is fenced: a Lease lost mid-pass stops the pass
before its next request. Standbys keep their caches warm so that a takeover needs no relist.
Every input change just marks the state dirty; one loop turns "dirty" into at most one write
per destination, so bursts coalesce and nothing is lost when changes arrive mid-write.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable

from hairpin_proxy import corefile
from hairpin_proxy.admin import Check
from hairpin_proxy.claims import ObjectRef
from hairpin_proxy.controller import heap, holds
from hairpin_proxy.controller.background import Background
from hairpin_proxy.controller.corefile_facts import CorefileFacts
from hairpin_proxy.controller.events import Reports
from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.controller.preflight import Preflight
from hairpin_proxy.controller.removal_guard import HeldDrops, RemovalGuard
from hairpin_proxy.controller.reverts import RevertWatch, as_is
from hairpin_proxy.controller.routing import Routing, pending_note
from hairpin_proxy.controller.routing import slim_service as slim_any_service
from hairpin_proxy.controller.sources import Source
from hairpin_proxy.controller.sources.gateway import GatewaySource
from hairpin_proxy.controller.sources.ingress import IngressSource
from hairpin_proxy.controller.sources.registered import RegisteredSource
from hairpin_proxy.controller.sources.registry import SourceContext, build_sources
from hairpin_proxy.controller.tracker import NotLeading, WriteTracker
from hairpin_proxy.controller.verification import Verification
from hairpin_proxy.controller.withdrawal import Withdrawal
from hairpin_proxy.controller.writers import Desired, Held, RulesWriter, Writer
from hairpin_proxy.controller.writers.netguard import POLICIES as GUARD_POLICIES
from hairpin_proxy.controller.writers.netguard import SELECTOR as GUARD_SELECTOR
from hairpin_proxy.controller.writers.netguard import DataPlaneGuard, slim_node
from hairpin_proxy.controller.writers.nodelocal import NodeLocalWriter, Reconcilers
from hairpin_proxy.controller.writers.nudge import CorednsNudge
from hairpin_proxy.controller.writers.published import PublishedWriter
from hairpin_proxy.controller.writers.rules import CorefileRules, ImportRules, RulesWriting
from hairpin_proxy.controller.writers.targets import TargetsWriter
from hairpin_proxy.edits.coredns import CorednsEdit, EditError
from hairpin_proxy.edits.coredns_import import ImportEdit
from hairpin_proxy.edits.nodelocal import CANDIDATES as NODE_LOCAL_CANDIDATES
from hairpin_proxy.edits.published import PublishedEdit
from hairpin_proxy.edits.revert_policy import RevertPolicy
from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube.client import ApiError, KubeClient, resource_path
from hairpin_proxy.kube.events import EventRecorder
from hairpin_proxy.kube.lease import LeaderElector
from hairpin_proxy.kube.watch import Backoff, Reflector
from hairpin_proxy.manifests import collector_paused
from hairpin_proxy.plan import DesiredState, PlanSettings
from hairpin_proxy.plan.budget import rooms_of, rules_limit
from hairpin_proxy.plan.snapshot import Rooms, plan_settings_of
from hairpin_proxy.policy import HostPolicy, proxy_service_fqdn
from hairpin_proxy.settings import ControllerSettings
from hairpin_proxy.sources.registry import KEY_KIND_SPECS
from hairpin_proxy.targets.mapping import parse_target_flags
from hairpin_proxy.targets.netguard import OWNER_ROLE as GUARD_OWNER
from hairpin_proxy.targets.netguard import parse_cidrs
from hairpin_proxy.verify import HostChecker, make_resolver

log = logging.getLogger("hairpin_proxy.controller")

# The plan's metrics (DesiredState.metrics) are the gauges of ControllerMetrics of the same
# name, but for hosts_managed: it counts what is written (after the removal guard), set then.
_WRITTEN = "hosts_managed"


def identity() -> str:
    """Pod name plus a random suffix, so a restarted pod is a new candidate."""
    host = os.environ.get("HOSTNAME") or socket.gethostname()
    return f"{host}_{secrets.token_hex(4)}"


class Controller:
    def __init__(self, settings: ControllerSettings, client: KubeClient, namespace: str,
                 metrics: ControllerMetrics) -> None:
        s = settings
        self.settings, self.client, self.namespace, self.metrics = s, client, namespace, metrics
        self.identity = identity()
        self.proxy_fqdn = s.legacy_target or proxy_service_fqdn(s.cluster_domain, s.proxy_service,
                                                                namespace)
        self.policy = HostPolicy.from_settings(s, self.proxy_fqdn)
        self.dirty = asyncio.Event()
        self._wakeup: asyncio.TimerHandle | None = None
        self._read_ahead_failed = False
        self._routes_read_ahead = False
        self._planned: PlanSettings | None = None
        self.synced_once = False
        self.collector = heap.Collector()
        # In order: each step builds its parts from those of the steps above it.
        self._wire_edits()
        self._wire_leadership()
        self._wire_sources()
        self._wire_watches()
        self._wire_reports()
        self._wire_verification()
        self._wire_limits()
        self._wire_rules()
        self._wire_writers()

    # ------------------------------------------------------------------ wiring

    def _reflector(self, path: str, kind: str, name: str | None = None,
                   labels: str | None = None,
                   transform: Callable[[JsonObj], JsonObj] | None = None) -> Reflector:
        """A cache of ``path`` (one object when ``name`` is given) whose changes wake a pass."""
        params = {"fieldSelector": f"metadata.name={name}"} if name else {}
        if labels:
            params["labelSelector"] = labels
        made = Reflector(self.client, path, kind=kind, params=params, on_change=self.dirty.set,
                         silence_timeout=self.settings.watch_timeout,
                         on_restart=self._watch_restarted, transform=transform)
        if name:
            made.on_change = lambda: self._one_changed(made)
        return made

    def _wire_edits(self) -> None:
        """The pure edits of the ConfigMaps, the removal guard."""
        s = self.settings
        self.corefile_edit = CorednsEdit(s.configmap_namespace, s.configmap_name,
                                         s.configmap_key, self.proxy_fqdn, s.dns_port)
        self.import_edit = ImportEdit(s.configmap_namespace, s.import_configmap_name,
                                      s.import_key, self.proxy_fqdn)
        # The published hosts, for the etchosts node agents: none without --publish-configmap.
        self.published = (PublishedEdit(self.namespace, s.publish_configmap)
                          if s.publish_configmap else None)
        self.guard = RemovalGuard(s.mass_removal_fraction, s.mass_removal_grace,
                                  s.allow_mass_removal)

    def _wire_leadership(self) -> None:
        """Events, the Lease, background tasks, fenced writes."""
        s, client = self.settings, self.client
        self.events = EventRecorder(client, instance=self.identity, interval=s.event_interval)
        self.elector: LeaderElector | None = None
        if s.leader_elect:
            self.elector = LeaderElector(
                client, namespace=self.namespace, name=s.lease_name, identity=self.identity,
                lease_duration=s.lease_duration, renew_deadline=s.renew_deadline,
                retry_period=s.retry_period, on_change=self._leader_changed)
        else:
            self.metrics.leader.set(1)
        self.background = Background()
        # Every replica writes the withdrawal of an uninstall: it must not wait for a Lease
        # that may be going with our namespace.
        self.tracker = WriteTracker(client, lambda: self.is_leader() or self.uninstalling(),
                                    self.metrics.conflicts.inc)

    def _wire_sources(self) -> None:
        """Where hosts come from, every Service, routing."""
        s = self.settings
        # Where hosts come from, one registration each (hairpin_proxy.sources.registry); their
        # claims meet in the plan.
        built = build_sources(SourceContext(s, self.client, self._reflector, self.policy,
                                            self.metrics, self.dirty.set))
        self.sources: list[Source] = list(built.values())
        ingress = built["ingress"]
        assert isinstance(ingress, IngressSource)
        self.source = ingress
        gateway = built.get("gateway")
        self.gateway: GatewaySource | None = gateway if isinstance(gateway, GatewaySource) \
            else None
        # Every Service of the cluster: data planes are found among them, host verification
        # reads the load balancers' addresses, and our per-target Services are among them.
        self.services = self._reflector(resource_path("v1", "services"), "services",
                                        transform=slim_any_service)
        self.routing = Routing(self._reflector, self.namespace, services=self.services,
                               ingress=self.source, gateway=self.gateway,
                               table_configmap=s.targets_configmap, wake_in=self._wake_in,
                               registered=[x for x in self.sources
                                           if isinstance(x, RegisteredSource)])
        self.target_map = parse_target_flags(s.target, KEY_KIND_SPECS)
        listings = self.source.ingresses
        for i, listing in enumerate(listings):
            listing.on_listed = functools.partial(self._read_ahead, listings[:i])

    def _wire_watches(self) -> None:
        """The single objects read and written; readiness's caches."""
        s, namespace, reflector = self.settings, self.namespace, self._reflector
        # The ConfigMaps we edit keep their managedFields: they name who reverted us.
        self.coredns = reflector(resource_path("v1", "configmaps", s.configmap_namespace),
                                 "coredns-configmap", s.configmap_name, transform=as_is)
        self.import_cm = reflector(resource_path("v1", "configmaps", s.configmap_namespace),
                                   "import-configmap", s.import_configmap_name, transform=as_is)
        self.service = reflector(resource_path("v1", "services", namespace), "proxy-service",
                                 s.proxy_service)
        self.published_cm = (reflector(resource_path("v1", "configmaps", namespace),
                                       "published-configmap", s.publish_configmap)
                             if s.publish_configmap else None)
        self.slices = reflector(resource_path("discovery.k8s.io/v1", "endpointslices", namespace),
                                "proxy-endpointslices",
                                labels=f"kubernetes.io/service-name={s.proxy_service}")
        self.own_namespace = reflector(resource_path("v1", "namespaces"), "own-namespace",
                                       namespace)
        self.node_local = [reflector(resource_path("v1", "configmaps", ns), f"configmap {name}",
                                     name, transform=as_is) for ns, name in NODE_LOCAL_CANDIDATES]
        # The caches readiness waits for.
        published = [] if self.published_cm is None else [self.published_cm]
        self.reflectors = [*(r for src in self.sources for r in src.reflectors), self.coredns,
                           self.service, *published, self.slices, self.own_namespace,
                           self.services, *self.routing.reflectors]
        if s.node_local_dns == "auto":
            self.reflectors += self.node_local
        if s.mode == "coredns-import":
            self.reflectors.append(self.import_cm)

    def _wire_reports(self) -> None:
        """Events on objects, reverts, the targets table."""
        s = self.settings
        self.reports = Reports(self.events, self.metrics, self.background, s.event_interval,
                               self._involved)
        self.reverts = RevertWatch(RevertPolicy(s.repair_backoff, s.repair_backoff_max,
                                                s.revert_limit, s.revert_window),
                                   self.metrics, self.reports, self._wake_in)
        self.targets_writer = TargetsWriter(self.client, self.tracker, self.metrics,
                                            namespace=self.namespace,
                                            configmap=s.targets_configmap,
                                            table_cm=self.routing.table_cm,
                                            services=self.services, proxy_service=self.service,
                                            proxy_service_name=s.proxy_service)

    def _wire_verification(self) -> None:
        """The hosts' own answers (--verify-hosts)."""
        s = self.settings
        self.verification: Verification | None = None
        if s.verify_hosts == "on":
            checker = HostChecker(make_resolver(s.verify_resolver), interval=s.verify_interval,
                                  on_change=self.dirty.set)
            self.verification = Verification(checker, self.services, self.source, self.metrics,
                                             self.reports, wake=self.dirty.set)

    def _wire_limits(self) -> None:
        """Held drops, the rules budget, the uninstall's withdrawal."""
        s, namespace = self.settings, self.namespace
        self.held = HeldDrops(self.guard, self.metrics, self.dirty.set)
        # The objects the size limits refused in the last pass (told when they change).
        self._over: tuple[ObjectRef, ...] = ()
        self.withdrawal = Withdrawal(s, namespace, service=self.service, slices=self.slices,
                                     own_namespace=self.own_namespace, coredns=self.coredns,
                                     metrics=self.metrics, reports=self.reports,
                                     wake=self.dirty.set)
        # The objects held for the uninstall's withdrawal (controller/holds.py), watched so
        # that their deletion is noticed; not needed for readiness (an older RBAC may not
        # grant reading them).
        uninstall = self.withdrawal.uninstall
        uninstall.account = self._reflector(resource_path("v1", "serviceaccounts", namespace),
                                            "held-serviceaccount", holds.SERVICE_ACCOUNT)
        uninstall.role = self._reflector(
            resource_path(holds.RBAC, "roles", s.configmap_namespace), "held-role",
            holds.COREDNS_ROLE)
        self.held_reflectors = [uninstall.account, uninstall.role]
        for held in self.held_reflectors:
            held.on_change = functools.partial(self._held_changed, held)

    def _wire_rules(self) -> None:
        """The Corefile's facts, warnings, the DNS rules' writers."""
        s = self.settings
        self.facts = CorefileFacts(self.corefile_edit, self.metrics, self.reports,
                                   self._served_zones)
        self.preflight = Preflight(s, self.client, self.coredns, self.corefile_edit,
                                   self.metrics, services=self.services)
        self.rules = self._rules_writer()
        self.node_local_writer = NodeLocalWriter(self.node_local, s.cluster_domain,
                                                 self.tracker, self.metrics, self.reports,
                                                 reconcilers=Reconcilers(self.client),
                                                 reverts=self.reverts)

    def _wire_writers(self) -> None:
        """Every destination, in the order a pass writes them."""
        s = self.settings
        # In the order a pass writes them: the targets the proxies serve (the DNS rules answer
        # with their Services), the DNS rules, then what follows the rules.
        self.writers: list[Writer] = [self.targets_writer, self.rules]
        if s.node_local_dns == "auto":
            self.writers.append(self.node_local_writer)
        self.netguard = self._netguard()
        # Not among the caches readiness waits for: a guard whose RBAC is missing must
        # not hold back the DNS rules (the writer waits for them on its own).
        self.side_reflectors: list[Reflector] = \
            list(self.netguard.reflectors) if self.netguard is not None else []
        if self.netguard is not None:
            # Before the published hosts, which stop a pass while uninstalling.
            self.writers.append(self.netguard)
        if self.published is not None and self.published_cm is not None:
            self.writers.append(PublishedWriter(
                self.published, self.tracker, self.metrics, configmap=self.published_cm,
                service=self.service, service_key=f"{self.namespace}/{s.proxy_service}"))

    def _netguard(self) -> DataPlaneGuard | None:
        s, reflector = self.settings, self._reflector
        if not s.guard_data_planes:
            return None
        return DataPlaneGuard(
            self.client, self.tracker, self.metrics, self.reports, namespace=self.namespace,
            services=self.services, proxy_service=self.withdrawal.proxy_service,
            nodes=reflector(resource_path("v1", "nodes"), "nodes", transform=slim_node),
            policies=reflector(GUARD_POLICIES, "guard-networkpolicies", labels=GUARD_SELECTOR),
            owner=reflector(resource_path("rbac.authorization.k8s.io/v1", "clusterroles"),
                            "guard-clusterrole", name=GUARD_OWNER),
            pod_cidrs=parse_cidrs(s.pod_cidr), wake_in=self._wake_in)

    def _rules_writer(self) -> RulesWriter:
        s = self.settings
        nudge = CorednsNudge(self.client, s.configmap_namespace, s.coredns_selector,
                             lambda: self.is_leader() or self.withdrawal.uninstalling)
        writing = RulesWriting(self.tracker, self.metrics, self.background, nudge,
                               s.nudge_coredns, lambda: self.withdrawal.uninstalling,
                               self.reverts)
        if s.mode == "coredns":
            return CorefileRules(self.corefile_edit, writing)
        return ImportRules(self.import_edit, writing, import_cm=self.import_cm,
                           published=self.published, published_cm=self.published_cm)

    # ------------------------------------------------------------------ state

    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader

    def uninstalling(self) -> bool:
        return self.withdrawal.uninstalling

    def caches_synced(self) -> bool:
        return all(r.synced.is_set() for r in self.reflectors) and all(
            src.synced() for src in self.sources)

    def _involved(self, ref: ObjectRef) -> JsonObj | None:
        """An object as an Event's involved object: from the source of its kind."""
        for src in self.sources:
            found = src.involved(ref)
            if found is not None:
                return found
        return None

    def _wake_in(self, delay: float) -> None:
        """A pass in ``delay`` seconds (the earliest asked for wins)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        when = now + delay
        # A handle whose time has come has fired (or is firing): it stands for nothing later.
        pending = self._wakeup is not None and not self._wakeup.cancelled() \
            and self._wakeup.when() > now
        if pending and self._wakeup is not None and self._wakeup.when() <= when:
            return
        if pending and self._wakeup is not None:
            self._wakeup.cancel()
        self._wakeup = loop.call_at(when, self.dirty.set)

    def _leader_changed(self, leading: bool) -> None:
        self.metrics.leader.set(1 if leading else 0)
        if leading:
            # Write at once: the previous leader may have died with work pending.
            self.dirty.set()

    def _one_changed(self, reflector: Reflector) -> None:
        """A watched single object changed: dirty, unless its data is what we last wrote
        there (our own write coming back, often before the answer to the PUT: that change was
        the outcome of a pass, and another would find nothing to do)."""
        self.tracker.caught_up(reflector)
        objs = list(reflector.cache.values())
        if not (objs and all(map(self.tracker.is_ours, objs))):
            self.dirty.set()

    def _held_changed(self, reflector: Reflector) -> None:
        self.withdrawal.uninstall.observe()
        self._one_changed(reflector)

    def _watch_restarted(self, kind: str, why: str) -> None:
        self.metrics.watch_restarts.labels(kind, why).inc()

    def _served_zones(self, zones: tuple[str, ...]) -> None:
        """Zones the Corefile serves itself are refused as hosts: a policy change."""
        if zones != self.policy.served_zones:
            self.policy = dataclasses.replace(self.policy, served_zones=zones)
            log.info("zones the Corefile serves itself are never redirected",
                     extra={"zones": ",".join(zones)})

    async def ready(self) -> Check:
        if not self.caches_synced():
            waiting = [r.kind for r in self.reflectors if not r.synced.is_set()]
            for src in self.sources:
                waiting += [w for w in src.waiting() if w not in waiting]
            return Check(False, "caches not synced: " + ", ".join(waiting))
        if self.elector is not None and not self.elector.decided:
            return Check(False, "leader election pending")
        if self.is_leader() and not self.synced_once:
            return Check(False, "first sync not done")
        withdrawn = self.withdrawal.reason
        notes = "".join(f"; {note}" for note in (
            f"rules withdrawn: {withdrawn}" if withdrawn and self.is_leader() else "",
            *self.node_local_writer.notes.values(), *self.reverts.notes.values(),
            pending_note(self.routing.pending) if self.is_leader() else "",
            self.verification.note() if self.verification and self.is_leader() else "",
        ) if note)
        return Check(True, ("ok (leader)" if self.is_leader() else "ok (standby)") + notes)

    # ------------------------------------------------------------------ loop

    async def run(self) -> None:
        tasks = [asyncio.create_task(r.run(), name=f"watch {r.kind}")
                 for r in (*self.reflectors, *self.side_reflectors, *self.held_reflectors)]
        if self.elector is not None:
            tasks.append(asyncio.create_task(self.elector.run(), name="leader election"))
        tasks.append(asyncio.create_task(self._loop(), name="reconcile"))
        tasks += [asyncio.create_task(job, name=f"{type(src).__name__} background")
                  for src in self.sources for job in src.background()]
        if self.verification is not None:
            tasks.append(self.verification.checker.start())
        # The start-up checks end when done; every other task runs as long as we do.
        checks = asyncio.create_task(self.preflight.run(), name="warnings")
        try:
            await _until_one_ends(tasks)
        finally:
            tasks.append(checks)
            if self.verification is not None:
                await self.verification.checker.stop()
            background = self.background.tasks
            for task in [*tasks, *background]:
                task.cancel()
            await asyncio.gather(*tasks, *background, return_exceptions=True)

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
                    # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
                    # cancellation that comes as the change does, and shutdown then hangs.
                    async with asyncio.timeout(min(debounce, left)):
                        await self.dirty.wait()
                except TimeoutError:
                    break
            self.dirty.clear()
            hold = self.tracker.last_rules_write + self.settings.write_interval - loop.time()
            if hold > 0 and not self.withdrawal.uninstalling:
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
                self.tracker.forget_writes()
                ok = False
            last_pass = loop.time()
            if ok:
                backoff.reset()
            else:
                await asyncio.sleep(backoff.next_delay())
                self.dirty.set()

    async def reconcile(self) -> bool:
        """One pass; False when it should be retried after a backoff."""
        self.tracker.new_pass()
        if not self.caches_synced():
            self._read_routes_ahead()
            return True
        self.collector.first_list_done()
        self.withdrawal.check_uninstall()
        if not self.is_leader() and not self.withdrawal.uninstalling:
            return self._not_leading()
        # No cyclic collection during a pass: each of its automatic ones would walk the
        # pass's new lists of every host again (milliseconds apiece at 50,000 hosts). What
        # the pass leaves is collected right after it (heap.Collector.after_pass).
        with collector_paused():
            return await self._pass()

    async def _pass(self) -> bool:
        started = time.perf_counter()
        s = self.settings
        coredns_cm = self.tracker.current(self.coredns, s.configmap_namespace, s.configmap_name)
        self.facts.learn(coredns_cm)
        try:
            # What the rules hold first: the plan keeps held hosts whose verdict is unknown,
            # and measures the room their ConfigMap leaves.
            held = await self.rules.read(coredns_cm)
            state = await self._route(coredns_cm, held)
            hosts = await self._write(held, state)
        except NotLeading:
            return self._not_leading(started)
        except corefile.CorefileError as exc:
            return await self._corefile_refused(exc, coredns_cm)
        except EditError as exc:
            self.metrics.reconciles.labels("target_missing").inc()
            log.error("cannot write the rules", extra={"error": str(exc)})
            return await self._uninstall_end(withdrawn=False)
        except ApiError as exc:
            return await self._api_failed(exc)
        return await self._written(hosts, state, started)

    async def _route(self, coredns_cm: JsonObj | None, held: Held) -> DesiredState | None:
        """The plan of the caches' snapshot, with the verdicts and the rooms the ConfigMaps
        leave, and what it tells (nothing while uninstalling)."""
        # Uninstalling is a race with the namespace's deletion (our service account goes with
        # it): the withdrawal is written before anything else is computed.
        if self.withdrawal.uninstalling:
            return None
        rules, verification = self.rules, self.verification
        verdicts = await verification.verdicts() if verification is not None else {}
        rooms = self._rooms(held)
        snap = dataclasses.replace(
            self.routing.snapshot(self._plan_settings(), self.targets_writer.current(),
                                  lambda: rules.held_answers(coredns_cm), time.time()),
            held_hosts=held.hosts, verdicts=verdicts, rooms=rooms)
        state = await self.routing.plan(snap)
        self._report_routing(state)
        if verification is not None:
            verification.planned(state, verdicts)
        self._report_limits(state, rules_limit(self.settings.rules_budget, rooms.rules))
        self.reports.rejections(state.refusals)
        return state

    def _plan_settings(self) -> PlanSettings:
        """The settings the plan reads (made again when the policy changes)."""
        made = self._planned
        if made is not None and made.policy is self.policy:
            return made
        s = self.settings
        self._planned = dataclasses.replace(
            plan_settings_of(s, self.policy, self.target_map, self.namespace),
            settle=s.target_settle, dns_ttl=s.dns_ttl, gateway_api=self.gateway is not None,
            rules_budget=s.rules_budget, share_hosts=s.namespace_share_hosts,
            share_bytes=s.namespace_share_bytes, verify_hosts=self.verification is not None)
        return self._planned

    def _rooms(self, held: Held) -> Rooms:
        """The room the ConfigMaps the pass writes leave: the rules' (as the pass read it),
        the published hosts' (when published), node-local-dns's where we edit it."""
        s = self.settings
        pub, pub_where = None, None
        if self.published is not None and self.published_cm is not None:
            pub = self.tracker.current(self.published_cm, self.published.namespace,
                                       self.published.name)
            pub_where = self.published.where
        node_local: list[tuple[JsonObj | None, str]] = []
        if s.node_local_dns == "auto":
            for (ns, name), reflector in zip(NODE_LOCAL_CANDIDATES, self.node_local,
                                             strict=True):
                cm = self.tracker.current(reflector, ns, name)
                if cm is not None and self.node_local_writer.edits(cm):
                    node_local.append((cm, f"{ns}/{name}"))
        key = s.configmap_key if s.mode == "coredns" else s.import_key
        return rooms_of(s.mode, held.cm, rules_key=key, rules_where=self.rules.where,
                        published_cm=pub, published_where=pub_where,
                        node_local=node_local)

    async def _write(self, held: Held, state: DesiredState | None) -> tuple[str, ...]:
        """The plan's hosts through the removal guard, written to every writer; the hosts
        written."""
        answers, withdrawn = self.withdrawal.answers()
        self.withdrawal.set_reason(withdrawn)
        wanted = state.hosts if state is not None else ()
        since = state.since if state is not None else None
        hosts = () if withdrawn else self.held.hosts(wanted, held.hosts, since, state)
        desired = Desired(hosts, answers, held,
                          routed=state.routed.answers if state is not None else {},
                          plan=state.plan if state is not None else None,
                          since=since if hosts is wanted else None,
                          grouped=state.groups() if state is not None and hosts is wanted
                          and answers == state.default_answers else None)
        if hosts and not self.withdrawal.uninstalling:
            # Before any rule exists: what its withdrawal on uninstall will need.
            await self.withdrawal.uninstall.hold(self.client)
        for writer in self.writers:
            if self.withdrawal.uninstalling and not writer.during_uninstall:
                # Our namespace, and what lives there, is going away: nothing can be
                # created there any more, and the DNS rules are already gone.
                break
            await writer.write(desired)
        return hosts

    async def _corefile_refused(self, exc: corefile.CorefileError,
                                coredns_cm: JsonObj | None) -> bool:
        # Never write what we cannot parse; the next change to the ConfigMap retries.
        self.metrics.parse_errors.inc()
        self.metrics.reconciles.labels("corefile_error").inc()
        log.error("cannot edit the Corefile; leaving it alone",
                  extra={"configmap": self.corefile_edit.where, "error": str(exc)})
        if self.settings.mode == "coredns" and coredns_cm is not None:
            # Someone's edit, not an object's: told on the ConfigMap (rate-limited).
            self.reports.event({"apiVersion": "v1", "kind": "ConfigMap", **coredns_cm},
                               "CorefileNotEdited", f"hairpin-proxy leaves every rule as "
                               f"it is until the Corefile can be edited: {exc}", "Warning")
        return await self._uninstall_end(withdrawn=False)

    async def _api_failed(self, exc: ApiError) -> bool:
        self.tracker.forget_writes()
        self.metrics.reconciles.labels("error").inc()
        # An unreachable server is said once per outage by the client.
        (log.debug if exc.reason == "Unreachable" else log.warning)(
            "reconcile failed; will retry", extra={"error": str(exc)})
        await self._uninstall_end(withdrawn=False)
        return False

    async def _written(self, hosts: tuple[str, ...], state: DesiredState | None,
                       started: float) -> bool:
        """A pass that wrote what it meant to: its metrics, and what follows the first."""
        self.metrics.reconciles.labels("ok").inc()
        self.metrics.hosts_managed.set(len(hosts))
        self.metrics.last_sync.set(time.time())
        self.metrics.duration.observe(time.perf_counter() - started)
        if self.withdrawal.uninstalling:
            self.withdrawal.written.set()
            return await self._uninstall_end(withdrawn=True)
        if not self.synced_once:
            self.synced_once = True
            self.collector.first_sync()
            # Once this pass's own objects are gone too (the loop's next turn).
            asyncio.get_running_loop().call_soon(heap.give_back)
            log.info("first sync done", extra={
                "hosts": len(hosts), "rejected": len(state.refusals) if state else 0,
                "pending": state.routed.pending_hosts if state is not None else 0,
                "verifying": self.verification.pending if self.verification else 0})
        else:
            # Once this pass's own objects are gone (the loop's next turn).
            asyncio.get_running_loop().call_soon(self._after_pass)
        return True

    def _read_ahead(self, before: list[Reflector], ingresses: list[JsonObj], at: int) -> bool:
        """Ingresses of the first list (the first at place ``at`` of a listing that comes
        after the listings ``before``) through the host policy as they come in, while the
        list waits for its next page: the first pass takes what they made (Planner.prime).
        Not yet (False: they come again with the next ones) while the IngressClasses, the
        Corefile (the zones it serves are part of the policy) or the listings before are
        not known; a failure leaves them to the pass."""
        classes, s = self.source.classes, self.settings
        # A relist's Ingresses are mostly those the plan holds: only the first list's.
        if self.synced_once or self._read_ahead_failed:
            return True
        if not (classes.synced.is_set() and self.coredns.synced.is_set()
                and all(r.synced.is_set() for r in before)):
            return False
        try:
            self.facts.learn(self.tracker.current(self.coredns, s.configmap_namespace,
                                                  s.configmap_name))
            planner = self.routing.planner
            read = planner.ingresses_read
            planner.prime(self._plan_settings(), list(classes.cache.values()), ingresses,
                          at + sum(len(r.cache) for r in before))
            self.source.metrics.evaluations.inc(planner.ingresses_read - read)
        except Exception as exc:  # the pass reads them, and says what fails
            self._read_ahead_failed = True
            log.debug("reading Ingresses ahead stopped", extra={"error": str(exc)})
        self.collector.listed(len(ingresses))
        return True

    def _read_routes_ahead(self) -> None:
        """The Gateway API routes of the first list through their reading once they and
        what they are read against are listed, while the Ingresses' list goes on: the first
        pass takes what they made (``Routing.read_routes_ahead``). Once; a failure leaves
        them to the pass."""
        gateway, s = self.routing.gateway, self.settings
        if (gateway is None or self.synced_once or self._routes_read_ahead
                or not (gateway.synced() and self.coredns.synced.is_set())):
            return
        self._routes_read_ahead = True
        try:
            self.facts.learn(self.tracker.current(self.coredns, s.configmap_namespace,
                                                  s.configmap_name))
            self.routing.read_routes_ahead(self._plan_settings())
        except Exception as exc:  # the pass reads them, and says what fails
            log.debug("reading routes ahead stopped", extra={"error": str(exc)})

    def _after_pass(self) -> None:
        """What a written pass leaves to do, off the way from an event to its write: free
        what it replaced, then collect what it left."""
        self.routing.planner.let_go()
        self.collector.after_pass()

    async def _uninstall_end(self, *, withdrawn: bool) -> bool:
        """After an uninstall pass: let go of what was held for it when due; False when that
        failed and should be retried (True when not uninstalling)."""
        if not self.withdrawal.uninstalling:
            return True
        s = self.settings
        try:
            await self.withdrawal.uninstall.finish(
                self.client, self.elector is not None and self.elector.others_may_lead(),
                withdrawn, self.coredns.get(f"{s.configmap_namespace}/{s.configmap_name}"))
        except ApiError as exc:
            log.warning("could not let go of what was held for the uninstall; will retry",
                        extra={"error": str(exc)})
            return False
        if not self.withdrawal.uninstall.released.is_set():
            # Another replica may still lead: look again once its Lease may have lapsed.
            self._wake_in(max(0.5, s.retry_period))
        return True

    def _report_routing(self, state: DesiredState) -> None:
        """Metrics, log lines and Events for what the plan leaves out."""
        plan, m = state.plan, self.metrics
        for name, values in state.metrics.items():
            if name == _WRITTEN:
                continue
            gauge = getattr(m, name)
            for label, value in values.items():
                (gauge.labels(label) if label else gauge).set(value)
        origins = plan.origins
        for loser, winner in plan.losers:
            self.reports.notice(loser.origin, loser.host,
                                reason="HostClaimedElsewhere",
                                message=f"claimed by the older {winner.origin} for "
                                        f"{plan.fallbacks.get(winner.target, winner.target)}; "
                                        "not relayed to "
                                        f"{plan.fallbacks.get(loser.target, loser.target)}",
                                event_type="Warning")
        for host, why in plan.excluded.items():
            for origin in origins.get(host, ()) or ():
                self.reports.notice(origin, host,
                                    reason="HostNotRedirected", message=why.message,
                                    event_type=("Normal" if why.problem == "target-no-proxy"
                                                else "Warning"))

    def _report_limits(self, state: DesiredState, limit: int) -> None:
        """One log line when the objects the size limits refuse change (the refusals
        themselves are told on each object), one when every object fits again."""
        got = state.fitted
        refused = got.refused if got is not None else ()
        if got is None or not refused:
            if self._over:
                log.info("every object fits the rules budget again")
        elif refused != self._over:
            log.warning("over a size limit: the newest objects are refused", extra={
                "wanted": got.wanted, "budget": limit, "refused": len(refused),
                "objects": ", ".join(map(str, refused[:10]))
                           + (f" and {len(refused) - 10} more" if len(refused) > 10 else "")})
        self._over = refused

    def _not_leading(self, started: float | None = None) -> bool:
        """The pass ends unwritten for want of a fresh Lease (``started``: it was under
        way); False when it should be retried."""
        # A standby is done. A leader whose renewal is merely overdue must try again soon:
        # it will not hear "became leader" again when the renewal goes through.
        if self.elector is None or not self.elector.holds_lease:
            return True
        self.metrics.reconciles.labels("lease_overdue").inc()
        took = {"seconds": round(time.perf_counter() - started, 3)} if started is not None else {}
        log.warning("pass not written: the Lease's renewal is overdue; will retry",
                    extra={**took, "renew_deadline": self.settings.renew_deadline})
        return False


async def _until_one_ends(tasks: list[asyncio.Task[None]]) -> None:
    """Wait while every task runs; raise when one ends, however it ends (its exception, or
    a RuntimeError naming it): a controller that has lost its reconcile loop, its Lease or a
    watch would go on answering ready and write nothing, where a restart recovers it."""
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    task = next(iter(done))
    if not task.cancelled() and task.exception() is not None:
        raise task.exception()  # type: ignore[misc]
    how = "was cancelled" if task.cancelled() else "returned"
    raise RuntimeError(f"the task {task.get_name()!r} {how}; the controller stops")
