"""The controller's entry points: ``controller`` (run: settings checked, signals, admin
server, the reconciler until stopped) and ``cleanup`` (run_cleanup: the uninstall step)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from pathlib import Path

from hairpin_proxy import corefile
from hairpin_proxy.admin import AdminServer, serve_admin
from hairpin_proxy.controller import heap, holds
from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.controller.reconciler import Controller
from hairpin_proxy.controller.withdrawal import delete_import_configmap
from hairpin_proxy.controller.writers.netguard import POLICIES as GUARD_POLICIES
from hairpin_proxy.controller.writers.netguard import SELECTOR as GUARD_SELECTOR
from hairpin_proxy.edits.configmap import MANAGED_BY
from hairpin_proxy.edits.coredns import CorednsEdit, EditError
from hairpin_proxy.edits.coredns_import import ImportEdit
from hairpin_proxy.edits.nodelocal import CANDIDATES as NODE_LOCAL_CANDIDATES
from hairpin_proxy.edits.nodelocal import NodeLocalEdit
from hairpin_proxy.edits.slot_table import SLOT_LABEL
from hairpin_proxy.kube import config as kconfig
from hairpin_proxy.kube.client import ApiError, KubeClient, resource_path
from hairpin_proxy.kube.configmap import write_configmap
from hairpin_proxy.logs import quiet_http, setup_logging
from hairpin_proxy.metrics import Registry
from hairpin_proxy.settings import CleanupSettings, ControllerSettings, usage_error
from hairpin_proxy.sources.registry import KEY_KIND_SPECS
from hairpin_proxy.targets.mapping import TargetFlagError, parse_target_flags
from hairpin_proxy.targets.netguard import NETWORKPOLICY_API, CidrError, is_ours, parse_cidrs
from hairpin_proxy.verify import parse_servers

log = logging.getLogger("hairpin_proxy.controller")


MANAGED_SELECTOR = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())

# Two pod ports each: 1,000 targets take ports 20002-22001.
MAX_TARGETS = 1000
# Seconds a SIGTERM whose reads were refused waits for the watches to tell an uninstall:
# inside the pod's grace period (30 s by default), short enough not to slow a rollout much.
UNSURE_WAIT = 10.0


def _settings_error(s: ControllerSettings) -> str:
    if s.leader_elect and not s.retry_period < s.renew_deadline < s.lease_duration:
        return "--retry-period < --renew-deadline < --lease-duration is required"
    if not 0.0 <= s.mass_removal_fraction <= 1.0:
        return "--mass-removal-fraction must be between 0 and 1"
    if s.watch_timeout <= 0:
        return "--watch-timeout must be positive"
    if s.verify_interval <= 0:
        return "--verify-interval must be positive"
    if s.write_interval < 0 or s.rules_budget < 0 or s.proxy_grace < 0:
        return "--write-interval, --proxy-grace and --rules-budget must not be negative"
    if not 0 < s.dns_ttl <= corefile.MAX_TTL:
        return f"--dns-ttl must be 1 to {corefile.MAX_TTL} seconds"
    try:
        parse_servers(s.verify_resolver)
    except ValueError as exc:
        return f"--verify-resolver: {exc}"
    try:
        parse_target_flags(s.target, KEY_KIND_SPECS)
    except TargetFlagError as exc:
        return str(exc)
    if not 1 <= s.max_targets <= MAX_TARGETS:
        return f"--max-targets must be 1 to {MAX_TARGETS}"
    if not 0 < s.repair_backoff <= s.repair_backoff_max or s.revert_limit < 1 \
            or s.revert_window <= 0:
        return ("--repair-backoff must be positive and at most --repair-backoff-max, "
                "--revert-limit at least 1, --revert-window positive")
    if s.target_settle < 0 or s.api_discovery_interval <= 0:
        return "--target-settle must not be negative, --api-discovery-interval positive"
    try:
        parse_cidrs(s.pod_cidr)
    except CidrError as exc:
        return str(exc)
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
        "mode": settings.mode, "proxy_service": ctl.proxy_fqdn, "identity": ctl.identity,
        "configmap": ctl.rules.where})
    admin: AdminServer | None = None
    if settings.admin_listen:
        admin = await serve_admin(registry, settings.admin_listen, ready=ctl.ready)
        if admin is None:
            await client.close()
            return 1
    main = asyncio.create_task(ctl.run())
    stopper = asyncio.create_task(stop.wait())
    released = ctl.withdrawal.uninstall.released
    # Let go of by us or another replica: our ServiceAccount is going, and with it every
    # request we could still make; nothing is left to do but exit.
    uninstalled = asyncio.create_task(released.wait())
    code = 0
    try:
        await asyncio.wait([main, stopper, uninstalled], return_when=asyncio.FIRST_COMPLETED)
        if main.done() and not main.cancelled() and main.exception() is not None:
            log.critical("controller failed", exc_info=main.exception())
            code = 1
        elif released.is_set():
            log.info("uninstalled: every rule withdrawn and the held objects let go; exiting")
        else:
            log.info("stopping")
            await _finish_uninstall(ctl, client, namespace)
    finally:
        for task in (stopper, main, uninstalled):
            task.cancel()
        await asyncio.gather(main, stopper, uninstalled, return_exceptions=True)
        # After an uninstall the ServiceAccount's release was our last request.
        if ctl.elector is not None and not released.is_set():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ctl.elector.release(), 5)
        if admin is not None:
            await admin.close()
        await client.close()
    return code


async def _finish_uninstall(ctl: Controller, client: KubeClient, namespace: str) -> None:
    """SIGTERM: when this is an uninstall (the watches may not have told yet, so it is read
    afresh), withdraw the rules and let go of what was held for it before exiting, within
    --uninstall-timeout."""
    w = ctl.withdrawal
    pod = ctl.identity.rpartition("_")[0]
    if not w.uninstalling:
        said = await w.uninstall.confirm(client, namespace, pod)
        if said:
            w.begin("our namespace, Deployment, ServiceAccount or CoreDNS Role is being "
                    "deleted")
        elif said is None:
            await _watch_for_uninstall(ctl)
    if not w.uninstalling:
        return
    ctl.dirty.set()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(w.uninstall.left() + 1.0):
            await w.uninstall.released.wait()


async def _watch_for_uninstall(ctl: Controller) -> None:
    """SIGTERM with our reads refused: an uninstall may have taken our RBAC before it marked
    anything we can still read. The watches opened before keep telling (an API server does
    not authorize an open watch again), so let them, for a bounded time, before exiting."""
    w = ctl.withdrawal
    log.info("stopping: could not read whether this is an uninstall; watching for it",
             extra={"seconds": UNSURE_WAIT})
    deadline = asyncio.get_running_loop().time() + min(UNSURE_WAIT,
                                                       ctl.settings.uninstall_timeout)
    while not w.uninstalling and asyncio.get_running_loop().time() < deadline:
        w.check_uninstall()
        await asyncio.sleep(0.1)


def _setup_logging(level: str, fmt: str) -> None:
    setup_logging(level, fmt)
    quiet_http()


def run(settings: ControllerSettings) -> int:
    _setup_logging(settings.log_level, settings.log_format)
    problem = _settings_error(settings)
    if problem:
        return usage_error("controller", problem)
    cluster = _cluster(settings.kubeconfig)
    if cluster is None:
        return 1
    heap.map_large_blocks()
    # What the imports made (some hundred thousand objects) lives as long as the process:
    # out of the cyclic GC's sight, so that the full collections the first list's objects set
    # off do not walk it all again, on the way to the first write.
    gc.freeze()
    return asyncio.run(_serve(settings, cluster))


async def _cleanup(s: CleanupSettings, client: KubeClient, namespace: str) -> int:
    if s.mode == "coredns":
        edit = CorednsEdit(s.configmap_namespace, s.configmap_name, s.configmap_key,
                           corefile.DEFAULT_PROXY_FQDN, s.dns_port)
        try:
            outcome = (await write_configmap(client, edit.namespace, edit.name,
                                             edit.removal())).outcome
        except EditError as exc:
            log.warning("nothing to remove from CoreDNS", extra={"error": str(exc)})
            outcome = "absent"
        log.info("CoreDNS rules removed" if outcome == "updated" else "no CoreDNS rules to "
                 "remove", extra={"configmap": edit.where})
    else:
        import_edit = ImportEdit(s.configmap_namespace, s.import_configmap_name, s.import_key, "")
        outcome = (await write_configmap(client, import_edit.namespace, import_edit.name,
                                         import_edit.removal())).outcome
        log.info("import key removed" if outcome == "updated" else "no import key to remove",
                 extra={"configmap": import_edit.where})
        await delete_import_configmap(client, import_edit)
    for ns, name in NODE_LOCAL_CANDIDATES:
        nodelocal_edit = NodeLocalEdit(ns, name)
        try:
            outcome = (await write_configmap(client, ns, name, nodelocal_edit.removal())).outcome
        except (EditError, ApiError) as exc:
            log.debug("no node-local-dns rules removed",
                      extra={"configmap": nodelocal_edit.where, "error": str(exc)})
            continue
        if outcome == "updated":
            log.info("node-local-dns rules removed", extra={"configmap": nodelocal_edit.where})
    # Published by this version only with the etchosts agent, by earlier ones always.
    if s.publish_configmap and await client.delete(
            resource_path("v1", "configmaps", namespace, s.publish_configmap)):
        log.info("deleted the published hosts", extra={
            "configmap": f"{namespace}/{s.publish_configmap}"})
    # The DNS rules are gone: nothing leads to the per-target Services any more.
    services = resource_path("v1", "services", namespace)
    ours, _ = await client.list(services, {"labelSelector": f"{SLOT_LABEL},{MANAGED_SELECTOR}"})
    for svc in ours:
        svc_name = (svc.get("metadata") or {}).get("name")
        if await client.delete(f"{services}/{svc_name}"):
            log.info("deleted a per-target proxy Service", extra={
                "service": f"{namespace}/{svc_name}"})
    table = resource_path("v1", "configmaps", namespace, s.targets_configmap)
    if await client.delete(table):
        log.info("deleted the targets table", extra={
            "configmap": f"{namespace}/{s.targets_configmap}"})
    if s.guard_policies:
        await _delete_guard_policies(client)
    # The rules are gone: what a running controller held for their withdrawal goes too (the
    # recovery of an uninstall whose controller could not run).
    await holds.release(client, holds.Place(namespace, s.configmap_namespace))
    return 0


async def _delete_guard_policies(client: KubeClient) -> None:
    """The data-plane guard's NetworkPolicies: listed with our label selector, each checked
    for both our labels before it is deleted (a policy we did not make is never touched). A
    refused list is told, not fatal: without the guard's grant there is nothing of ours to
    find, and its owned policies go with its ClusterRole anyway."""
    try:
        found, _ = await client.list(GUARD_POLICIES, {"labelSelector": GUARD_SELECTOR})
    except ApiError as exc:
        if exc.status not in (401, 403):
            raise
        log.warning("cannot list NetworkPolicies; the data-plane guard's are left to the "
                    "garbage collector (with its ClusterRole) or an administrator's cleanup",
                    extra={"error": str(exc), "hint": "--no-guard-policies where the guard "
                                                      "was never installed"})
        return
    for obj in found:
        if not is_ours(obj):
            continue
        meta = obj.get("metadata") or {}
        ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        if await client.delete(resource_path(NETWORKPOLICY_API, "networkpolicies", ns,
                                             name)):
            log.info("deleted a data-plane guard NetworkPolicy",
                     extra={"networkpolicy": f"{ns}/{name}"})


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
    """The uninstall step: our Corefile block (or import key), the published hosts, the
    per-target Services and the data-plane guard's NetworkPolicies go."""
    _setup_logging(settings.log_level, settings.log_format)
    cluster = _cluster(settings.kubeconfig)
    return 1 if cluster is None else asyncio.run(_cleanup_main(settings, cluster))


def _cluster(kubeconfig: Path | None) -> kconfig.ClusterConfig | None:
    """The API's address and credentials, or None (told in the log)."""
    try:
        return kconfig.load(kubeconfig)
    except kconfig.KubeConfigError as exc:
        log.error("cannot reach Kubernetes", extra={"error": str(exc)})
        return None
