"""Command line: flags and environment → settings → one command's ``run(settings) -> int``."""

from __future__ import annotations

import argparse
import importlib
import re
import sys
import typing
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
    usage_error,
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
            ProxySettings, "hairpin_proxy.relay.main:run"),
    Command("render", "Offline: print what the controller would write (Corefile, import "
                      "snippet, node-local-dns Corefile, hosts file) for manifest files.",
            RenderSettings, "hairpin_proxy.render:run"),
    Command("controller", "Watch Ingresses and Gateway API routes and keep the DNS rules "
                          "for their hosts in step.",
            ControllerSettings, "hairpin_proxy.controller.main:run"),
    Command("cleanup", "Remove our rules from CoreDNS (the uninstall step) and exit.",
            CleanupSettings, "hairpin_proxy.controller.main:run_cleanup"),
    Command("etchosts", "Node agent: keep the published hosts in the node's /etc/hosts.",
            EtchostsSettings, "hairpin_proxy.etchosts:run"),
    Command("doctor", "Tell, per host, whether the hairpin problem bites and why.",
            DoctorSettings, "hairpin_proxy.doctor:run"),
)


class _Parser(argparse.ArgumentParser):
    """argparse with its complaints said in one line, in our words, and exit status 2.

    Values are converted and checked by the settings layer (``SettingsError``); what is left
    for argparse to refuse is the shape of the command line, reworded here.
    """

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {_reword(message)}; see {self.prog} --help\n")


_UNRECOGNIZED = re.compile(r"unrecognized arguments: (?P<args>.*)")
_ONE_VALUE = re.compile(r"argument (?P<flag>\S+?)(?:/\S+)?: expected one argument")
_REQUIRED = re.compile(r"the following arguments are required: (?P<args>.*)")
_CHOICE = re.compile(r"argument (?P<flag>\S+?): invalid choice: (?P<got>'[^']*') \(choose from "
                     r"(?P<choices>.*)\)")
_IGNORED = re.compile(r"argument (?P<flag>\S+?): ignored explicit argument (?P<got>'[^']*')")


def _reword(message: str) -> str:
    if m := _UNRECOGNIZED.fullmatch(message):
        args = m["args"].split()
        flags = [a for a in args if a.startswith("-")]
        if flags:
            return f"unknown flag{'s' if len(flags) > 1 else ''} {' '.join(flags)}"
        return f"unexpected argument{'s' if len(args) > 1 else ''} {' '.join(args)}"
    if m := _ONE_VALUE.fullmatch(message):
        return f"{m['flag']} needs a value"
    if m := _CHOICE.fullmatch(message):
        choices = m["choices"].replace("'", "")
        if m["flag"] == "COMMAND":
            return f"unknown command {m['got']} (expected one of {choices})"
        return f"{m['flag']}: invalid choice {m['got']} (expected one of {choices})"
    if m := _REQUIRED.fullmatch(message):
        if m["args"] == "COMMAND":
            names = ", ".join(c.name for c in COMMANDS)
            return f"no command given (expected one of {names})"
        return f"missing {m['args']}"
    if m := _IGNORED.fullmatch(message):
        return f"{m['flag']} takes no value, got {m['got']}"
    return message


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
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
    args, extra = parser.parse_known_args(argv)
    cmd = next(c for c in COMMANDS if c.name == args.command)
    if extra:
        # Said in the command's own name, as its other errors are.
        return usage_error(cmd.name, f"{_reword('unrecognized arguments: ' + ' '.join(extra))}"
                                     f"; see hairpin-proxy {cmd.name} --help")
    del args.command
    try:
        settings = settings_from_args(cmd.settings, args)
    except (SettingsError, TypeError) as exc:
        return usage_error(cmd.name, str(exc))
    return _load(cmd.runner)(settings)


if __name__ == "__main__":
    sys.exit(main())
