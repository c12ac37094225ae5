"""The controller: watch the sources of names, keep the DNS rules and the published hosts in
step. The layout (docs/controller.md, "Code layout"):

    main.py            entry points: run (the ``controller`` command), run_cleanup (``cleanup``)
    reconciler.py      Controller: the reflectors, one pass, the loop that decides when it runs
    sources/           where names come from (the Source protocol; ingress.py)
    writers/           where they go (the Writer protocol; rules, nodelocal, published, ...)
    tracker.py         fenced writes, our own echoes recognised
    withdrawal.py      every rule withdrawn when the proxy is gone or we are uninstalled
    verification.py    public DNS of each host checked against this cluster's load balancers
    removal_guard.py   the mass-removal guard
    corefile_facts.py  zones the Corefile serves, stray rules of ours
    preflight.py       start-up warnings
    events.py          rate-limited Events and log lines about objects
    background.py      fire-and-forget tasks of a pass
    metrics.py         ControllerMetrics

The names below are imported from here by the CLI's older paths and by tests; they load their
module on first use, so that the ``etchosts`` agent and ``doctor``, which read a writer module or
two, do not load the whole controller with this package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hairpin_proxy.controller.main import run as run
    from hairpin_proxy.controller.main import run_cleanup as run_cleanup
    from hairpin_proxy.controller.metrics import ControllerMetrics as ControllerMetrics
    from hairpin_proxy.controller.reconciler import Controller as Controller
    from hairpin_proxy.controller.reconciler import identity as identity
    from hairpin_proxy.controller.removal_guard import RemovalGuard as RemovalGuard
    from hairpin_proxy.controller.writers.nudge import NUDGE_ANNOTATION as NUDGE_ANNOTATION

_HOMES = {
    "Controller": "reconciler",
    "identity": "reconciler",
    "ControllerMetrics": "metrics",
    "RemovalGuard": "removal_guard",
    "run": "main",
    "run_cleanup": "main",
    "NUDGE_ANNOTATION": "writers.nudge",
}

__all__ = ["NUDGE_ANNOTATION", "Controller", "ControllerMetrics", "RemovalGuard", "identity",
           "run", "run_cleanup"]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
