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
from hairpin_proxy.controller.events import Reports
from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.kube.client import JsonObj
from hairpin_proxy.kube.watch import Reflector
from hairpin_proxy.settings import ControllerSettings
from hairpin_proxy.targets.discovery import service_addresses

log = logging.getLogger("hairpin_proxy.controller")


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
        if ns is not None and (ns.get("metadata") or {}).get("deletionTimestamp"):
            self.uninstalling = True
            log.warning("our namespace is being deleted: withdrawing every rule",
                        extra={"namespace": self.namespace})

    def answers(self) -> tuple[corefile.Answers, str]:
        """(what managed names resolve to, why every rule must be withdrawn now or "").

        Without a Service there is no address to answer with, and without a ready endpoint
        for longer than the grace period the names are given back to their public answers
        until the proxy is back. A rolling update keeps endpoints ready; a brief gap is what
        the grace period is for.
        """
        s = self.settings
        if self.uninstalling:
            return corefile.Answers(ttl=s.dns_ttl), ("hairpin-proxy is being uninstalled (its "
                                                     "namespace is terminating)")
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
        svc = self.proxy_service()
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
