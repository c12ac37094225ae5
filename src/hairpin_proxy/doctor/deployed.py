"""The controller's real settings, from its Deployment: the flags in its container's args and
the plain ``value`` entries of its env, read exactly as the controller reads them
(``settings.settings_from_args``). Pure: the Deployment is given."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from typing import Any

from hairpin_proxy.settings import (
    ControllerSettings,
    DoctorSettings,
    SettingsError,
    settings_from_args,
    settings_parser,
)

# The controller's Deployment and container, as deploy/base names them.
CONTAINER = "controller"


def controller_container(deployment: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The Deployment's controller container: the one named so, else one running it."""
    spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = [c for c in spec.get("containers") or [] if isinstance(c, Mapping)]
    named = [c for c in containers if c.get("name") == CONTAINER]
    running = [c for c in containers if (c.get("args") or [None])[0] == "controller"]
    found = named or running
    return found[0] if found else None


def controller_settings(deployment: Mapping[str, Any]) -> ControllerSettings | str:
    """The settings the Deployment's controller runs with, or why they cannot be read."""
    container = controller_container(deployment)
    if container is None:
        return "it has no container named controller"
    args = [str(a) for a in container.get("args") or []]
    if args[:1] == ["controller"]:
        args = args[1:]
    env = {str(e.get("name")): str(e["value"]) for e in container.get("env") or []
           if isinstance(e, Mapping) and isinstance(e.get("value"), str)}
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    settings_parser(ControllerSettings, parser)
    try:
        given, _ = parser.parse_known_args(args)
        return settings_from_args(ControllerSettings, given, environ=env)
    except (argparse.ArgumentError, SettingsError, ValueError) as exc:
        return f"its flags cannot be read: {exc}"


def with_controller(s: DoctorSettings, controller: ControllerSettings) -> DoctorSettings:
    """``s`` with every setting the two commands share taken from the controller's."""
    shared = {f.name for f in dataclasses.fields(DoctorSettings)} & {
        f.name for f in dataclasses.fields(ControllerSettings)}
    # Where doctor itself runs and how it reports stay its own.
    shared -= {"kubeconfig", "namespace", "log_level", "log_format", "verify_resolver"}
    return dataclasses.replace(s, **{name: getattr(controller, name) for name in shared})
