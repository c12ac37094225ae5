"""Command line: flags and environment → settings → one command's ``run(settings) -> int``."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hairpin_proxy import __version__
from hairpin_proxy.settings import (
    CleanupSettings,
    ControllerSettings,
    DoctorSettings,
    EtchostsSettings,
    ProxySettings,
    RenderSettings,
    SettingsError,
    settings_from_args,
    settings_parser,
)


@dataclass(frozen=True)
class Command:
    name: str
    summary: str
    settings: type[Any]
    # "module:function"; imported only when the command runs, so `proxy` never loads the
    # Kubernetes client and `render` never loads the relay.
    runner: str


COMMANDS: tuple[Command, ...] = (
    Command("proxy", "Relay connections to the ingress controller, prepending a PROXY header.",
            ProxySettings, "hairpin_proxy.relay.server:run"),
    Command("render", "Offline: print the Corefile or hosts file the controller would write.",
            RenderSettings, "hairpin_proxy.render:run"),
    Command("controller", "Watch Ingresses and keep the CoreDNS rewrite rules in step.",
            ControllerSettings, "hairpin_proxy.controller:run"),
    Command("cleanup", "Remove our rules from CoreDNS (the uninstall step) and exit.",
            CleanupSettings, "hairpin_proxy.controller:run_cleanup"),
    Command("etchosts", "Node agent: keep the published hosts in the node's /etc/hosts.",
            EtchostsSettings, "hairpin_proxy.etchosts:run"),
    Command("doctor", "Tell, per host, whether the hairpin problem bites and why.",
            DoctorSettings, "hairpin_proxy.doctor:run"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hairpin-proxy",
        description="Fix in-cluster access to your own PROXY-protocol load balancer.",
        epilog="Every flag can also be set through the environment variable shown beside it; "
               "a flag wins over the environment.",
    )
    parser.add_argument("--version", action="version", version=f"hairpin-proxy {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for cmd in COMMANDS:
        p = sub.add_parser(cmd.name, help=cmd.summary, description=cmd.summary)
        settings_parser(cmd.settings, p)
    return parser


def _load(runner: str) -> Callable[[Any], int]:
    module, _, func = runner.partition(":")
    fn: Callable[[Any], int] = getattr(importlib.import_module(module), func)
    return fn


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    cmd = next(c for c in COMMANDS if c.name == args.command)
    del args.command
    try:
        settings = settings_from_args(cmd.settings, args)
    except (SettingsError, TypeError) as exc:
        parser.exit(2, f"hairpin-proxy {cmd.name}: error: {exc}\n")
    return _load(cmd.runner)(settings)


if __name__ == "__main__":
    sys.exit(main())
