"""The API server's 1 MiB per ConfigMap, for every ConfigMap a pass writes (the CoreDNS
Corefile, the imported coredns-custom, node-local-dns's Corefile, the published hosts), each
shared with what others keep there: a tenant whose hosts would not fit is refused with an
Event and the budget metric; everybody else's hosts stay and newcomers that fit are still
written (before, the write was refused by the API or the editor, and every change of every
tenant waited behind it). The published hosts are written, and limit, only where the etchosts
agents read them (--publish-configmap)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from hairpin_proxy import corefile
from hairpin_proxy.corefile.nodelocal import nodelocal_hosts
from hairpin_proxy.plan.budget import PublishedMeasure
from hairpin_proxy.published import parse_entries
from tests.controller.conftest import (
    COREFILE,
    NAMESPACE,
    NODE_LOCAL,
    PUBLISH,
    PUBLISHED,
    Controller,
    wait_until,
)
from tests.controller.test_limits import BULK, OLD, created, events, removals
from tests.fakeapi.fixtures import configmap, ingress, service
from tests.fakeapi.server import FakeApiServer

Start = Callable[..., Controller]
MAX = 1024 * 1024
# What the others leave free in the ConfigMap: the shop's hosts and a small newcomer fit, the
# tenant's 95 long names do not, in any of the four.
FREE = 8000


def pad(size: int) -> str:
    """``size`` bytes (give or take a line) of comment lines, which every reader skips."""
    line = "#" + "p" * 98 + "\n"
    return line * (size // len(line))


def filled(data: dict[str, str], key: str) -> dict[str, str]:
    """``data`` with comments added to ``key`` until the ConfigMap leaves FREE bytes."""
    used = sum(len(k) + len(v.encode()) for k, v in data.items())
    return {**data, key: data[key] + pad(MAX - FREE - used)}


def data(api: FakeApiServer, namespace: str, name: str) -> dict[str, Any]:
    cm = api.get("ConfigMap", namespace, name)
    return dict((cm or {}).get("data") or {})


def coredns_hosts(api: FakeApiServer) -> set[str]:
    return set(corefile.managed_hosts(data(api, "kube-system", "coredns")["Corefile"]))


def import_hosts(api: FakeApiServer) -> set[str]:
    snippet = data(api, "kube-system", "coredns-custom").get("hairpin-proxy.override", "")
    return set(corefile.managed_hosts(f".:53 {{\n{snippet}}}\n")) if snippet else set()


def published_hosts(api: FakeApiServer) -> set[str]:
    return set(parse_entries(data(api, NAMESPACE, PUBLISHED).get("entries")))


def node_local_hosts(api: FakeApiServer) -> set[str]:
    return set(nodelocal_hosts(data(api, "kube-system", "nodelocaldns")["Corefile"]))


def fill_coredns(api: FakeApiServer) -> None:
    cm = api.get("ConfigMap", "kube-system", "coredns")
    assert cm is not None
    cm["data"] = filled({"Corefile": COREFILE}, "Corefile")
    api.update(cm)


def fill_import(api: FakeApiServer) -> None:
    api.create(configmap("kube-system", "coredns-custom", filled(
        {"other.server": "example.org:53 {\n    forward . 10.0.0.1\n}\n"}, "other.server")))


def fill_published(api: FakeApiServer) -> None:
    api.create(configmap(NAMESPACE, PUBLISHED, filled({"notes": "x"}, "notes")))


def fill_node_local(api: FakeApiServer) -> None:
    api.create(configmap("kube-system", "nodelocaldns", filled({"Corefile": NODE_LOCAL},
                                                               "Corefile")))


# (the ConfigMap as the refusal names it, how it is filled, what it holds, flags)
CASES: dict[str, tuple[str, Callable[[FakeApiServer], None], Callable[[FakeApiServer], set[str]],
                       tuple[str, ...]]] = {
    "coredns": ("kube-system/coredns[Corefile]", fill_coredns, coredns_hosts, ()),
    "import": ("kube-system/coredns-custom[hairpin-proxy.override]", fill_import,
               import_hosts, ("--mode", "coredns-import")),
    "published": (f"{NAMESPACE}/{PUBLISHED}", fill_published, published_hosts, PUBLISH),
    "node-local-dns": ("kube-system/nodelocaldns", fill_node_local, node_local_hosts, ()),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_tenant_that_would_overflow_a_configmap_is_refused_alone(
        cluster: FakeApiServer, start: Start, case: str) -> None:
    where, fill, held, flags = CASES[case]
    fill(cluster)
    cluster.create(ingress("shop", "www", tls_hosts=OLD))
    ctl = start(*flags)
    ctl.wait_ready()
    wait_until(lambda: held(cluster) == set(OLD), what=f"the shop's hosts in {case}")

    created(cluster, ingress("tenant", "bulk", tls_hosts=BULK))
    wait_until(lambda: events(cluster, "tenant"), what="Warning Event on the tenant")
    (event,) = events(cluster, "tenant")
    assert f"past the room ConfigMap {where} leaves under its 1 MiB" in event["message"]
    assert event["involvedObject"]["kind"] == "Ingress"
    wait_until(lambda: ctl.metric("hairpin_controller_ingresses_over_budget") == 1,
               what="the budget metric")
    # Newcomers that fit are still written, in every destination.
    created(cluster, ingress("team", "small", tls_hosts=["c.shop.example"]))
    wait_until(lambda: held(cluster) == {*OLD, "c.shop.example"}, what="a small newcomer")
    if case == "published":
        wait_until(lambda: published_hosts(cluster) == {*OLD, "c.shop.example"},
                   what="the newcomer published")
    assert not events(cluster, "shop") and not events(cluster, "team")
    assert not removals(ctl)
    assert ctl.metric('hairpin_controller_reconciles_total{result="error"}') == 0
    assert ctl.metric("hairpin_controller_corefile_errors_total") == 0


# Dual-stack: the published entries carry both addresses on every host's line, the rules once
# per answer set. 14,000 short names: their published lines pass 1 MiB, their rules take less
# than half of it.
DUAL = ["10.96.0.50", "fd00:1234:5678:9abc:def0:1234:5678:9abc"]
MANY = [f"n{i:05d}.example" for i in range(14_000)]


@pytest.mark.parametrize("publish", [False, True], ids=["default", "published"])
def test_the_published_room_limits_only_where_the_hosts_are_published(
        cluster: FakeApiServer, start: Start, publish: bool) -> None:
    """Without the etchosts agent (the default), the controller publishes nothing: hosts whose
    published lines would overflow that ConfigMap, but whose rules fit, are all served. Told
    to publish them, that ConfigMap's room is a limit: the newest tenants are refused."""
    cluster.delete("Service", NAMESPACE, "hairpin-proxy")
    cluster.create(service(NAMESPACE, "hairpin-proxy", cluster_ips=DUAL))
    measure = PublishedMeasure()
    lines = measure.hosts(MANY) + len(MANY) * measure.per_host(corefile.Answers.of(DUAL))
    assert lines > MAX
    for n in range(0, len(MANY), 100):
        cluster.create(ingress("tenants", f"t{n // 100:03d}", tls_hosts=MANY[n:n + 100]))
    ctl = start(*PUBLISH) if publish else start()
    ctl.wait_ready(timeout=120)
    if publish:
        wait_until(lambda: events(cluster, "tenants"), timeout=120, what="refused tenants")
        messages = {str(e["message"]) for e in events(cluster, "tenants")}
        assert all(f"past the room ConfigMap {NAMESPACE}/{PUBLISHED} leaves under its 1 MiB"
                   in m for m in messages), messages
        wait_until(lambda: coredns_hosts(cluster) and coredns_hosts(cluster)
                   == published_hosts(cluster), timeout=120, interval=1,
                   what="the tenants that fit written and published")
        assert len(coredns_hosts(cluster)) < len(MANY)
        assert ctl.metric("hairpin_controller_ingresses_over_budget") > 0
    else:
        wait_until(lambda: coredns_hosts(cluster) == set(MANY), timeout=120, interval=1,
                   what="every host in the Corefile")
        assert ctl.metric("hairpin_controller_rules_bytes") < MAX // 2
        assert ctl.metric("hairpin_controller_ingresses_over_budget") == 0
        assert not events(cluster, "tenants")
        assert cluster.get("ConfigMap", NAMESPACE, PUBLISHED) is None
        assert not cluster.requests(path_re=PUBLISHED)
    assert not removals(ctl)
