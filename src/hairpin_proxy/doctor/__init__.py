"""``hairpin-proxy doctor``: tell, per host, whether the hairpin problem bites and why.

``command`` runs it; ``facts``, ``verdict`` and ``report`` are pure, so this package imports
nothing at load time: importing one of them must not pull in sockets, threads or the API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hairpin_proxy.settings import DoctorSettings

__all__ = ["run"]


def run(settings: DoctorSettings) -> int:
    from hairpin_proxy.doctor.command import run as run_command

    return run_command(settings)
