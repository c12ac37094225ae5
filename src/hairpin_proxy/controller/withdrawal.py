"""Withdrawal: every rule goes when the proxy is gone or we are being uninstalled.

Rules that lead to a proxy that is not there would be worse than no rules: the managed names
then get their public answers again until the proxy is back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from hairpin_proxy import corefile
from hairpin_proxy.controller import holds
from hairpin_proxy.controller.events import Reports
from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.edits.coredns_import import ImportEdit
from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.kube.client import ApiError, KubeClient, resource_path
from hairpin_proxy.kube.watch import Reflector
from hairpin_proxy.settings import ControllerSettings
from hairpin_proxy.targets.discovery import service_addresses

log = logging.getLogger("hairpin_proxy.controller")


async def delete_import_configmap(client: KubeClient, edit: ImportEdit) -> bool:
    """Delete the import ConfigMap when it is ours and holds nothing any more (our key already
    removed; ``ImportEdit.ours_and_empty``), only as read: a key added since keeps it. Whether
    it was deleted. The one home of this step, for cleanup and for the uninstall's end."""
    path = resource_path("v1", "configmaps", edit.namespace, edit.name)
    cm = await client.get(path)
    if cm is None or not ImportEdit.ours_and_empty(cm):
        return False
    where = f"{edit.namespace}/{edit.name}"
    try:
        deleted = await client.delete(path, resource_version=str(
            (cm.get("metadata") or {}).get("resourceVersion") or ""))
    except ApiError as exc:
        if exc.status != 409:
            raise
        log.info("the import ConfigMap changed since it was read; left as it is",
                 extra={"configmap": where})
        return False
    if deleted:
        log.info("deleted the import ConfigMap we had created", extra={"configmap": where})
    return deleted


def has_ready_endpoint(slices: Iterable[JsonObj]) -> bool:
    """Whether any EndpointSlice has an endpoint that is ready (unset counts as ready)."""
    return any(isinstance(ep, dict) and (ep.get("conditions") or {}).get("ready") is not False
               for sl in slices for ep in (sl.get("endpoints") or ()))


class Withdrawal:
    """``service``/``slices`` watch the proxy's Service and its EndpointSlices,
    ``own_namespace`` our namespace, ``coredns`` the CoreDNS ConfigMap (told about the
    withdrawal when the Service is gone)."""

    def __init__(self, settings: ControllerSettings, namespace: str, *, service: Reflector,
                 slices: Reflector, own_namespace: Reflector, coredns: Reflector,
                 metrics: ControllerMetrics, reports: Reports,
                 wake: Callable[[], None]) -> None:
        self.settings = settings
        self.namespace = namespace
        self.service = service
        self.slices = slices
        self.own_namespace = own_namespace
        self.coredns = coredns
        self.metrics = metrics
        self.reports = reports
        self.wake = wake
        # Why every rule is withdrawn now ("" while they stand), and since when the proxy has
        # had no ready endpoint.
        self.reason = ""
        self._proxy_down_since: float | None = None
        self._grace_timer: asyncio.TimerHandle | None = None
        self.uninstalling = False
        # Set once a pass has written the withdrawal that uninstalling asks for.
        self.written = asyncio.Event()
        self.uninstall = Uninstall(settings, namespace, reports, wake)

    def proxy_service(self) -> JsonObj | None:
        return self.service.get(f"{self.namespace}/{self.settings.proxy_service}")

    def check_uninstall(self) -> None:
        """Our namespace terminating means an uninstall (``kubectl delete -f``/``-k``, or of
        the namespace): every rule is withdrawn at once, before the namespace controller
        deletes our service account and the manifests' RBAC goes (deleted after the
        namespace: see docs/install.md). A rolling update, a drained node, a crash or a lost
        leadership never withdraw anything."""
        if self.uninstalling:
            return
        ns = self.own_namespace.get(f"/{self.namespace}")
        why = self.uninstall.why(ns)
        if why:
            self.begin(why)

    def begin(self, why: str) -> None:
        """The uninstall has begun: every rule goes, from every replica, at once."""
        if self.uninstalling:
            return
        self.uninstalling = True
        self.uninstall.started()
        log.warning(f"{why}: withdrawing every rule", extra={"namespace": self.namespace})

    def answers(self) -> tuple[corefile.Answers, str]:
        """(what managed names resolve to, why every rule must be withdrawn now or "").

        Without a Service there is no address to answer with, and without a ready endpoint
        for longer than the grace period the names are given back to their public answers
        until the proxy is back. A rolling update keeps endpoints ready; a brief gap is what
        the grace period is for.
        """
        s = self.settings
        if self.uninstalling:
            return corefile.Answers(ttl=s.dns_ttl), "hairpin-proxy is being uninstalled"
        svc = self.proxy_service()
        if svc is None:
            self._proxy_down_since = None
            return corefile.Answers(ttl=s.dns_ttl), (f"the proxy Service {self.namespace}/"
                                                     f"{s.proxy_service} does not exist")
        answers = corefile.Answers.of(service_addresses(svc), s.dns_ttl)
        if not answers:
            return answers, "the proxy Service has no ClusterIP"
        if has_ready_endpoint(self.slices.cache.values()):
            self._proxy_down_since = None
            return answers, ""
        now = time.monotonic()
        if self._proxy_down_since is None:
            self._proxy_down_since = now
        left = self._proxy_down_since + s.proxy_grace - now
        if left > 0:
            if self._grace_timer is not None:
                self._grace_timer.cancel()
            self._grace_timer = asyncio.get_running_loop().call_later(left + 0.05, self.wake)
            return answers, ""
        return answers, (f"the proxy Service has had no ready endpoint for {s.proxy_grace:g}s "
                         "or more")

    def set_reason(self, reason: str) -> None:
        """Tell (log, metric, Event) when the rules are withdrawn or restored."""
        if reason == self.reason:
            return
        before, self.reason = self.reason, reason
        self.metrics.withdrawn.set(1 if reason else 0)
        # While uninstalling, our namespace takes no new Events: they go on the ConfigMap.
        svc = None if self.uninstalling else self.proxy_service()
        involved = ({"apiVersion": "v1", "kind": "Service", **svc} if svc is not None else
                    {"apiVersion": "v1", "kind": "ConfigMap",
                     **(self.coredns.get(f"{self.settings.configmap_namespace}/"
                                         f"{self.settings.configmap_name}") or {})})
        if reason:
            log.warning("every rule withdrawn; managed names get their public answers again",
                        extra={"reason": reason})
            self.reports.event(involved, "RulesWithdrawn", f"hairpin-proxy withdrew its DNS "
                               f"rules: {reason}", "Warning")
        elif before:
            log.info("rules restored", extra={"was": before})
            self.reports.event(involved, "RulesRestored", "hairpin-proxy restored its DNS "
                               "rules: the proxy is back", "Normal")


class Uninstall:
    """The uninstall's end: the objects held for the withdrawal (controller/holds.py) are let
    go once the rules are withdrawn, or after --uninstall-timeout with a Warning Event.

    ``account``/``role`` watch the held ServiceAccount and Role (set by the reconciler, which
    runs them); ``coredns`` gives the ConfigMap the Events go on.
    """

    def __init__(self, settings: ControllerSettings, namespace: str, reports: Reports,
                 wake: Callable[[], None]) -> None:
        self.settings = settings
        self.place = holds.Place(namespace, settings.configmap_namespace)
        # Import mode: the ConfigMap our key is in, deleted at the end when we made it.
        self.import_edit = (ImportEdit(settings.configmap_namespace,
                                       settings.import_configmap_name, settings.import_key, "")
                            if settings.mode == "coredns-import" else None)
        self.reports = reports
        self.wake = wake
        self.account: Reflector | None = None
        self.role: Reflector | None = None
        self.holding = False
        # Whether the held objects were ever seen held here: their finalizer gone since then
        # means another replica let them go.
        self._seen_held = False
        # Whether a held object was ever seen being deleted (a deletion is never undone).
        self._deletion_seen = False
        self._hold_failed = False
        self._since: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        # Set once the held objects have been let go (by us or another replica).
        self.released = asyncio.Event()

    def _held_objects(self) -> list[JsonObj | None]:
        p = self.place
        return [self.account.get(f"{p.namespace}/{holds.SERVICE_ACCOUNT}")
                if self.account is not None else None,
                self.role.get(f"{p.dns_namespace}/{holds.COREDNS_ROLE}")
                if self.role is not None else None]

    def why(self, namespace: JsonObj | None) -> str:
        """Why this is an uninstall ("" when it is not): our namespace terminating, one of
        the held objects being deleted (``helm uninstall`` keeps the namespace), or both gone
        since we saw them held (another replica let them go before we saw them deleting)."""
        if self.others_released() and all(o is None for o in self._held_objects()):
            return "our ServiceAccount and CoreDNS Role are gone"
        if namespace is not None and (namespace.get("metadata") or {}).get("deletionTimestamp"):
            return "our namespace is being deleted"
        if self._deletion_seen or holds.deleting(self._held_objects()):
            return "our ServiceAccount or CoreDNS Role is being deleted"
        return ""

    def observe(self) -> None:
        """A held object's watch told a change: note whether they are held or being deleted
        now. The pass it wakes, after the debounce, may come too late to see either: another
        replica may have let them go by then."""
        self.others_released()
        self._deletion_seen = self._deletion_seen or holds.deleting(self._held_objects())

    def started(self) -> None:
        if self._since is None:
            self._since = time.monotonic()
            self._timer = asyncio.get_running_loop().call_later(
                self.settings.uninstall_timeout + 0.05, self.wake)

    def left(self) -> float:
        """Seconds until --uninstall-timeout runs out (0 when not uninstalling)."""
        if self._since is None:
            return 0.0
        return max(0.0, self._since + self.settings.uninstall_timeout - time.monotonic())

    def others_released(self) -> bool:
        """Whether the held objects, seen held before, are let go already (another replica
        did): neither is still held in our caches."""
        still = any(holds.held(o) for o in self._held_objects())
        self._seen_held = self._seen_held or still
        return self._seen_held and not still

    async def hold(self, client: KubeClient) -> None:
        """Before our first rule: hold what the withdrawal needs. A refusal (RBAC of an older
        release, say) is told once and does not stop the rules."""
        synced = all(r is not None and r.synced.is_set() for r in (self.account, self.role))
        # Held already, or absent (an install without them): the watches show either one
        # appearing unheld, and only then is it worth two requests in a pass.
        if self.holding and not (synced and not all(
                o is None or holds.held(o) for o in self._held_objects())):
            return
        try:
            found = await holds.hold(client, self.place)
        except ApiError as exc:
            if not self._hold_failed:
                self._hold_failed = True
                log.warning("cannot hold the objects the withdrawal needs on uninstall; an "
                            "uninstall may leave the rules behind (then run hairpin-proxy "
                            "cleanup)", extra={"error": str(exc)})
            return
        self.holding = True
        self._seen_held = self._seen_held or found

    async def finish(self, client: KubeClient, others_may_lead: bool, withdrawn: bool,
                     coredns: JsonObj | None) -> None:
        """After an uninstall pass: let go once the rules are withdrawn and no other replica
        may still be writing rules (it leads: it withdraws and lets go itself), or once the
        time is up, with an Event when the rules could not be withdrawn."""
        if self.released.is_set():
            return
        if self.others_released():
            # Let go by another replica, which had withdrawn the rules first.
            self.released.set()
            return
        overdue = self.left() <= 0
        if not (withdrawn or overdue) or (withdrawn and others_may_lead and not overdue):
            return
        if not withdrawn:
            log.error("could not withdraw the DNS rules in time; letting go of the objects "
                      "held for it", extra={"timeout": self.settings.uninstall_timeout})
            if coredns is not None:
                # Sent before letting go: the permission to send it goes with the Role.
                message = (f"hairpin-proxy is being uninstalled and could not withdraw its DNS "
                           f"rules within {self.settings.uninstall_timeout:g}s; managed names "
                           "may still answer the proxy's address: run `hairpin-proxy cleanup` "
                           "with an administrator's kubeconfig")
                if await self.reports.events.warn(
                        {"apiVersion": "v1", "kind": "ConfigMap", **coredns},
                        reason="RulesNotWithdrawn", message=message, key="RulesNotWithdrawn"):
                    self.reports.metrics.events.labels("RulesNotWithdrawn").inc()
        if withdrawn:
            # Before letting go: the permission to delete it goes with the Role.
            await self._delete_import(client)
        await holds.release(client, self.place)
        self.released.set()

    async def _delete_import(self, client: KubeClient) -> None:
        """Import mode: the withdrawal removed our key; the ConfigMap goes too when we made it
        and nothing else lives in it. A refusal is told and stops nothing."""
        if self.import_edit is None:
            return
        try:
            await delete_import_configmap(client, self.import_edit)
        except ApiError as exc:
            log.warning("could not delete the import ConfigMap we had created; `hairpin-proxy "
                        "cleanup` with an administrator's kubeconfig removes it",
                        extra={"configmap": f"{self.import_edit.namespace}/"
                                            f"{self.import_edit.name}",
                               "error": str(exc)})

    async def confirm(self, client: KubeClient, namespace: str, pod: str) -> bool | None:
        """On SIGTERM, before the watches may have told: read whether this is an uninstall.
        Besides the namespace and the held objects, our Deployment: deleted, its ReplicaSet
        goes before our pod (garbage collection), while a rollout or a scale-down keeps it;
        ``helm uninstall`` deletes Deployments before RBAC and ServiceAccounts. None when it
        cannot tell: something was refused (an uninstall deletes our RBAC too) and nothing
        read says deleting."""
        found: list[JsonObj | None] = []
        refused = False
        for path in (self.place.account, self.place.role):
            try:
                found.append(await client.get(path))
            except ApiError:
                refused = True
        try:
            listed, _ = await client.list(resource_path("v1", "namespaces"),
                                          {"fieldSelector": f"metadata.name={namespace}"})
            found += listed
        except ApiError:
            refused = True
        if holds.deleting(found):
            return True
        try:
            me = await client.get(resource_path("v1", "pods", namespace, pod))
            for ref in ((me or {}).get("metadata") or {}).get("ownerReferences") or ():
                if ref.get("kind") == "ReplicaSet":
                    rs = await client.get(resource_path("apps/v1", "replicasets", namespace,
                                                        str(ref.get("name"))))
                    return holds.owner_gone(ref, rs) or (None if refused else False)
        except ApiError:
            refused = True
        return None if refused else False
