"""The pass's change (plan/change.py) through the running controller: each pass writes what
the plan says, counted against what the rules held, whether they hold what the last pass
wrote or not: after a failed write, a foreign edit of the Corefile, a drop held back."""

from __future__ import annotations

from collections.abc import Callable

from hairpin_proxy import corefile
from tests.controller.conftest import COREFILE, Controller, corefile_text, wait_until
from tests.fakeapi.fixtures import ingress
from tests.fakeapi.server import FakeApiServer

Start = Callable[..., Controller]
COREDNS_PUT = r"/namespaces/kube-system/configmaps/coredns$"


def hosts(*numbers: int) -> tuple[str, ...]:
    return tuple(sorted(f"h{i}.example.com" for i in numbers))


def add(cluster: FakeApiServer, i: int) -> None:
    cluster.create(ingress("web", f"h{i}", tls_hosts=[f"h{i}.example.com"]))


def block(cluster: FakeApiServer) -> tuple[str, ...]:
    return corefile.managed_hosts(corefile_text(cluster))


def updates(ctl: Controller) -> list[tuple[object, object, object]]:
    """(hosts, added, removed) of each "rules updated" line so far."""
    return [(r.get("hosts"), r.get("added"), r.get("removed")) for r in ctl.records()
            if r.get("msg") == "rules updated"]


def written(cluster: FakeApiServer, ctl: Controller, want: tuple[str, ...],
            counts: tuple[int, int]) -> None:
    """The rules hold ``want``, and the pass that wrote them counted ``counts``."""
    wait_until(lambda: block(cluster) == want, what=f"{len(want)} hosts written")
    wait_until(lambda: bool(updates(ctl)) and updates(ctl)[-1][0] == len(want),
               what="the write logged")
    assert updates(ctl)[-1] == (len(want), *counts)


def test_every_pass_writes_the_plan_whatever_the_rules_held(cluster: FakeApiServer,
                                                            start: Start) -> None:
    for i in range(6):
        add(cluster, i)
    ctl = start("--mass-removal-grace", "2", "--repair-backoff", "0.2")
    ctl.wait_ready()
    written(cluster, ctl, hosts(*range(6)), (6, 0))
    # A lone creation: planned from the change.
    add(cluster, 6)
    written(cluster, ctl, hosts(*range(7)), (1, 0))
    # A failed write: the pass after it starts from rules that are not its plan's last.
    cluster.fail_requests(1, status=500, method="PUT", path_re=COREDNS_PUT)
    add(cluster, 7)
    written(cluster, ctl, hosts(*range(8)), (1, 0))
    # Someone's edit takes our block away: written whole again, counted from nothing.
    cm = cluster.get("ConfigMap", "kube-system", "coredns")
    assert cm is not None
    cluster.update({**cm, "data": {**cm["data"], "Corefile": COREFILE}}, manager="kubectl")
    written(cluster, ctl, hosts(*range(8)), (8, 0))
    add(cluster, 8)
    written(cluster, ctl, hosts(*range(9)), (1, 0))
    # A drop held back: a new host still joins the old ones, then the drop goes through.
    for i in range(6):
        cluster.delete("Ingress", "web", f"h{i}")
    wait_until(lambda: ctl.metric("hairpin_controller_mass_removal_held") == 1,
               what="drop held")
    add(cluster, 9)
    written(cluster, ctl, hosts(*range(10)), (1, 0))
    written(cluster, ctl, hosts(6, 7, 8, 9), (0, 6))
    add(cluster, 10)
    written(cluster, ctl, hosts(6, 7, 8, 9, 10), (1, 0))
