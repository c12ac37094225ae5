"""The controller's sources, built from the registrations (hairpin_proxy.sources.registry): the
Ingress and Gateway API sources wrap their own modules; every other registration runs in the
generic shell (registered.py). A registration whose setting is not ``auto`` is not built."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.controller.sources import MakeReflector, Source
from hairpin_proxy.controller.sources.gateway import GatewaySource
from hairpin_proxy.controller.sources.ingress import IngressSource
from hairpin_proxy.controller.sources.registered import RegisteredSource
from hairpin_proxy.kube.client import KubeClient
from hairpin_proxy.policy import HostPolicy
from hairpin_proxy.settings import ControllerSettings
from hairpin_proxy.sources.registry import REGISTRATIONS, Registration, turned_on


@dataclass(frozen=True)
class SourceContext:
    settings: ControllerSettings
    client: KubeClient
    reflector: MakeReflector
    policy: HostPolicy
    metrics: ControllerMetrics
    on_change: Callable[[], None]


def _ingress(reg: Registration, c: SourceContext) -> Source:
    return IngressSource(c.reflector, c.settings.include_namespace, c.policy, c.metrics)


def _gateway(reg: Registration, c: SourceContext) -> Source:
    return GatewaySource(c.client, c.reflector, interval=c.settings.api_discovery_interval,
                         gateway_classes=c.settings.gateway_class, on_change=c.on_change)


def _generic(reg: Registration, c: SourceContext) -> Source:
    return RegisteredSource(reg, c.client, c.reflector,
                            interval=c.settings.api_discovery_interval, on_change=c.on_change)


# Registrations with a shell of their own; the rest use the generic one.
SHELLS: Mapping[str, Callable[[Registration, SourceContext], Source]] = {
    "ingress": _ingress, "gateway": _gateway}


def enabled(reg: Registration, settings: ControllerSettings) -> bool:
    return reg.name in turned_on(settings)


def build_sources(context: SourceContext) -> dict[str, Source]:
    """Registration name → its running source, in the registry's order."""
    return {reg.name: SHELLS.get(reg.name, _generic)(reg, context)
            for reg in REGISTRATIONS if enabled(reg, context.settings)}
