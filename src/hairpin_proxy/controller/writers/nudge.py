"""The CoreDNS nudge (--nudge-coredns): annotate the CoreDNS pods after a write, so that the
kubelet syncs their ConfigMap volume within seconds instead of at its next periodic sync (a
minute or more). The containers are not restarted."""

from __future__ import annotations

import logging
from collections.abc import Callable

from hairpin_proxy.kube.client import ApiError, KubeClient, resource_path

log = logging.getLogger("hairpin_proxy.controller")

NUDGE_ANNOTATION = "hairpin-proxy.io/corefile-version"


class CorednsNudge:
    """``keep_going`` is asked before each pod: a replica that lost the Lease stops (unless
    it is withdrawing the rules for an uninstall)."""

    def __init__(self, client: KubeClient, namespace: str, selector: str,
                 keep_going: Callable[[], bool]) -> None:
        self.client = client
        self.namespace = namespace
        self.selector = selector
        self.keep_going = keep_going

    async def __call__(self, version: str, *, quiet: bool = False) -> None:
        base = resource_path("v1", "pods", self.namespace)
        try:
            pods, _ = await self.client.list(base, {"labelSelector": self.selector})
            for pod in pods:
                if not self.keep_going():
                    return
                name = (pod.get("metadata") or {}).get("name")
                await self.client.merge_patch(f"{base}/{name}", {"metadata": {"annotations": {
                    NUDGE_ANNOTATION: version}}})
        except ApiError as exc:
            (log.debug if quiet else log.warning)("could not nudge the CoreDNS pods",
                                                  extra={"error": str(exc)})
