"""The Corefile follows the Ingresses: creates, updates, deletes, bursts, edits by others."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest

from hairpin_proxy import corefile
from hairpin_proxy.controller import holds
from tests.controller.conftest import (
    COREFILE,
    NAMESPACE,
    PROXY_IP,
    PUBLISH,
    Controller,
    corefile_puts,
    corefile_text,
    wait_until,
)
from tests.fakeapi.fixtures import corefile_configmap, ingress, ingress_class, service
from tests.fakeapi.server import GZIP_THRESHOLD, FakeApiServer
from tests.waiting import PATIENCE

Start = Callable[..., Controller]


def managed(api: FakeApiServer) -> tuple[str, ...]:
    return corefile.managed_hosts(corefile_text(api))


def published(api: FakeApiServer) -> dict[str, str]:
    cm = api.get("ConfigMap", NAMESPACE, "hairpin-proxy-hosts")
    return dict(cm["data"]) if cm else {}


def test_follows_create_update_delete(cluster: FakeApiServer, start: Start) -> None:
    ctl = start("--allow-mass-removal", *PUBLISH)
    ctl.wait_ready()
    assert managed(cluster) == ()

    cluster.create(ingress("shop", "web", tls_hosts=["shop.example.com"]))
    wait_until(lambda: managed(cluster) == ("shop.example.com",), what="host added")
    text = corefile_text(cluster)
    assert "shop\\.example\\.com" in text
    assert f'"{{{{ .Name }}}} 10 IN A {PROXY_IP}"' in text
    # Everything outside our block is as it was.
    assert corefile.remove(text) == COREFILE

    obj = cluster.get("Ingress", "shop", "web")
    assert obj is not None
    obj["spec"]["tls"][0]["hosts"] = ["store.example.com", "shop.example.com"]
    cluster.update(obj)
    wait_until(lambda: managed(cluster) == ("shop.example.com", "store.example.com"),
               what="host list updated")

    cluster.create(ingress("blog", "blog", tls_hosts=["blog.example.org"]))
    wait_until(lambda: "blog.example.org" in managed(cluster), what="second Ingress")
    cluster.delete("Ingress", "shop", "web")
    wait_until(lambda: managed(cluster) == ("blog.example.org",), what="host removed")
    wait_until(lambda: published(cluster).get("hosts") == "blog.example.org\n",
               what="published hosts follow")
    cluster.delete("Ingress", "blog", "blog")
    wait_until(lambda: managed(cluster) == (), what="last host removed")
    assert corefile.remove(corefile_text(cluster)) == COREFILE
    assert ctl.proc.poll() is None


def test_ten_thousand_ingresses_at_start_give_one_write(cluster: FakeApiServer,
                                                        start: Start) -> None:
    hosts = [f"app{i:05d}.example.com" for i in range(10_000)]
    for i, host in enumerate(hosts):
        cluster.create(ingress(f"ns{i % 50}", f"ing{i}", tls_hosts=[host]))
    ctl = start(*PUBLISH)
    ctl.wait_ready(timeout=120)
    assert managed(cluster) == tuple(sorted(hosts))
    assert corefile_puts(cluster) == 1
    # Paged list: the API never had to send 10,000 objects in one response.
    lists = cluster.requests("GET", r"/apis/networking.k8s.io/v1/ingresses", watch=False)
    assert len(lists) >= 20
    # The published hosts are a write of their own, after the rules' (readiness waits on
    # the rules).
    want = "".join(h + "\n" for h in sorted(hosts))
    wait_until(lambda: published(cluster).get("hosts") == want, what="the published hosts")


def test_burst_of_changes_is_coalesced(cluster: FakeApiServer, start: Start) -> None:
    ctl = start("--debounce", "2")
    ctl.wait_ready()
    before = corefile_puts(cluster)
    # The burst reaches the controller as one: its watches hold the events until all 200 are
    # made, so however slowly this test runs, the controller sees them a debounce apart at most.
    cluster.stall_watches()
    for i in range(200):
        cluster.create(ingress("burst", f"b{i}", tls_hosts=[f"b{i:03d}.example.com"]))
    cluster.unstall_watches()
    wait_until(lambda: len(managed(cluster)) == 200, what="200 hosts")
    # The first event may start a pass at once (after a quiet spell); the rest wait for it.
    # Nothing is left to change once all 200 are in, so no later write can follow.
    assert corefile_puts(cluster) - before <= 2


def test_a_change_after_a_quiet_spell_is_written_without_the_debounce(
        cluster: FakeApiServer, start: Start) -> None:
    # A debounce whose burst cap (ten debounces) is beyond any wait's patience: a controller
    # that held the first change while changes keep coming would not write it in time.
    debounce = PATIENCE / 10 + 1
    ctl = start("--debounce", str(debounce), *PUBLISH)
    ctl.wait_ready()
    wait_until(lambda: published(cluster), what="the start-up writes")
    quiet_for(ctl, debounce)
    # Changes keep coming, less than a debounce apart; the first is written all the same.
    trickle: list[str] = []

    def lone_written() -> bool:
        if "lone.example.com" in managed(cluster):
            return True
        trickle.append(f"t{len(trickle)}.example.com")
        cluster.create(ingress("lone", f"t{len(trickle)}", tls_hosts=[trickle[-1]]))
        return False

    cluster.create(ingress("lone", "lone", tls_hosts=["lone.example.com"]))
    wait_until(lone_written, interval=debounce / 10, what="the first change written")
    # A change right behind that pass is coalesced: held a whole debounce (a lower bound).
    made = time.monotonic()
    cluster.create(ingress("lone", "next", tls_hosts=["next.example.com"]))
    wait_until(lambda: "next.example.com" in managed(cluster), what="second host added")
    assert time.monotonic() - made >= debounce
    assert set(managed(cluster)) == {"lone.example.com", "next.example.com", *trickle}


def quiet_for(ctl: Controller, seconds: float) -> None:
    """Return once ``seconds`` went by without a reconcile pass (proving an absence needs the
    time to pass; the sleep is a lower bound, so a busy machine only makes it longer)."""
    passes = "hairpin_controller_reconciles_total"

    def quiet() -> bool:
        before = ctl.metric(passes)
        time.sleep(seconds + 0.5)
        return ctl.metric(passes) == before

    wait_until(quiet, interval=0, what=f"{seconds:g} s without a pass")


def test_our_own_writes_coming_back_start_no_reconcile(cluster: FakeApiServer,
                                                      start: Start) -> None:
    ctl = start(*PUBLISH)
    ctl.wait_ready()
    passes = 'hairpin_controller_reconciles_total{result="ok"}'
    before = ctl.metric(passes)
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    wait_until(lambda: published(cluster).get("hosts") == "a.example.com\n",
               what="published")
    wait_until(lambda: ctl.metric(passes) == before + 1, what="the pass counted")
    quiet_for(ctl, 1.0)  # the two echoes arrive, and any pass they started (debounce 0.1 s) ends
    assert ctl.metric(passes) == before + 1
    # A change by someone else to the same ConfigMap's data still starts one.
    cm = cluster.get("ConfigMap", "kube-system", "coredns")
    assert cm is not None
    cm["data"]["Corefile"] = cm["data"]["Corefile"].replace("    loop\n", "")
    cluster.update(cm)
    wait_until(lambda: ctl.metric(passes) == before + 2, what="a pass after a foreign edit")


@pytest.mark.parametrize("outage", ["broken", "deleted"])
def test_a_copy_of_our_old_write_put_back_is_brought_up_to_date(
        cluster: FakeApiServer, start: Start, outage: str) -> None:
    ctl = start()
    ctl.wait_ready()
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    wait_until(lambda: managed(cluster) == ("a.example.com",), what="a written")
    backup = cluster.get("ConfigMap", "kube-system", "coredns")
    assert backup is not None
    # While the Corefile cannot be edited (someone broke it, or deleted its ConfigMap) an
    # Ingress arrives; then the saved copy, exactly our earlier write, is put back.
    if outage == "broken":
        failed = "hairpin_controller_corefile_errors_total"
        cm = cluster.get("ConfigMap", "kube-system", "coredns")
        assert cm is not None
        cm["data"]["Corefile"] += "broken {\n"
        cluster.update(cm)
    else:
        failed = 'hairpin_controller_reconciles_total{result="target_missing"}'
        cluster.delete("ConfigMap", "kube-system", "coredns")
    wait_until(lambda: ctl.metric(failed) >= 1, what="the outage seen")
    cluster.create(ingress("b", "b", tls_hosts=["b.example.com"]))
    wait_until(lambda: ctl.metric(failed) >= 2, what="the new Ingress's pass")
    if outage == "broken":
        cm = cluster.get("ConfigMap", "kube-system", "coredns")
        assert cm is not None
        cm["data"] = backup["data"]
        cluster.update(cm)
    else:
        cluster.create(corefile_configmap(backup["data"]["Corefile"]))
    wait_until(lambda: managed(cluster) == ("a.example.com", "b.example.com"),
               what="the Corefile put back brought up to date")


def test_published_addresses_follow_the_proxy_service(cluster: FakeApiServer,
                                                      start: Start) -> None:
    ctl = start(*PUBLISH)
    ctl.wait_ready()
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    wait_until(lambda: managed(cluster) == ("a.example.com",), what="host added")
    # The Service recreated dual-stack: the rules answer both families with its new addresses.
    cluster.delete("Service", NAMESPACE, "hairpin-proxy")
    cluster.create(service(NAMESPACE, "hairpin-proxy", cluster_ips=["10.96.7.7", "fd00::7"]))
    wait_until(lambda: published(cluster).get("addresses") == "10.96.7.7\nfd00::7\n",
               what="addresses published")
    wait_until(lambda: "IN AAAA fd00::7" in corefile_text(cluster), what="AAAA answered")
    assert '"{{ .Name }} 10 IN A 10.96.7.7"' in corefile_text(cluster)
    assert published(cluster)["hosts"] == "a.example.com\n"
    writes = cluster.count("PUT", r"/configmaps/hairpin-proxy-hosts$") + \
        cluster.count("POST", r"/namespaces/hairpin-proxy/configmaps$")
    # Unrelated changes do not rewrite the published ConfigMap.
    passes = ctl.metric("hairpin_controller_reconciles_total")
    cluster.create(ingress("b", "b", rule_hosts=["ignored.example.com"]))
    wait_until(lambda: ctl.metric("hairpin_controller_reconciles_total") > passes,
               what="a pass for the unrelated change")
    assert cluster.count("PUT", r"/configmaps/hairpin-proxy-hosts$") + \
        cluster.count("POST", r"/namespaces/hairpin-proxy/configmaps$") == writes


def test_concurrent_editor_and_controller_both_keep_their_edits(cluster: FakeApiServer,
                                                               start: Start) -> None:
    ctl = start()
    ctl.wait_ready()

    def someone_edits() -> None:
        # Runs on the server just before our PUT: another manager adds a plugin.
        cm = cluster.store.find(cluster._type_of(corefile_configmap("")), "kube-system",
                                "coredns")
        assert cm is not None
        cm["data"]["Corefile"] = cm["data"]["Corefile"].replace("    cache 30\n",
                                                                "    cache 30\n    log\n")
        cluster.store.update(cluster._type_of(cm), "kube-system", "coredns", cm,
                             from_api=False, check_rv=False)

    cluster.before_next_request(someone_edits, "PUT", r"/configmaps/coredns$")
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    wait_until(lambda: managed(cluster) == ("a.example.com",), what="our edit")
    text = corefile_text(cluster)
    assert "    log\n" in text
    conflicts = [r for r in cluster.requests("PUT", r"/configmaps/coredns$") if r.status == 409]
    assert len(conflicts) == 1
    wait_until(lambda: ctl.metric("hairpin_controller_conflicts_total") >= 1, what="metric")


def written_first(cluster: FakeApiServer, start: Start, hosts: list[str]) -> Controller:
    """A controller started over one Ingress per host (three namespaces), once its first
    write holds them all."""
    for i, host in enumerate(hosts):
        cluster.create(ingress(f"ns{i % 3}", f"app{i}", tls_hosts=[host]))
    ctl = start()
    ctl.wait_ready()
    wait_until(lambda: managed(cluster) == tuple(sorted(hosts)), what="the first write")
    return ctl


def test_the_ingresses_of_the_first_list_are_each_read_once(cluster: FakeApiServer,
                                                            start: Start) -> None:
    """The Ingresses present at start are read through the host policy as their list comes
    in or by the first pass (whichever finds the IngressClasses and the Corefile known): each
    once, all of them in the first write, and one changed later is read again."""
    cluster.create(ingress_class("nginx", default=True))
    hosts = [f"app{i}.example.com" for i in range(40)]
    ctl = written_first(cluster, start, hosts)
    evaluations = "hairpin_controller_ingress_evaluations_total"
    assert ctl.metric(evaluations) == 40
    obj = cluster.get("Ingress", "ns0", "app0")
    assert obj is not None
    obj["spec"]["tls"][0]["hosts"] = ["moved.example.com"]
    cluster.update(obj)
    wait_until(lambda: "moved.example.com" in managed(cluster), what="the change written")
    assert ctl.metric(evaluations) == 41


def test_ingresses_listed_before_the_classes_are_known_are_read_once(cluster: FakeApiServer,
                                                                     start: Start) -> None:
    """The Ingresses' first page comes before the IngressClasses are known: they are read
    ahead with the next page, each at its place in the list, and the first pass reads none
    of them again."""
    cluster.create(ingress_class("nginx", default=True))
    hosts = [f"app{i}.example.com" for i in range(600)]  # two pages of the list
    for i, host in enumerate(hosts):
        cluster.create(ingress(f"ns{i % 3}", f"app{i}", tls_hosts=[host]))
    next_page = r"/ingresses\?.*continue="
    classes = cluster.hold_requests("GET", r"/ingressclasses\?(?!.*watch=)")
    second_page = cluster.hold_requests("GET", next_page)
    ctl = start()
    wait_until(lambda: cluster.count("GET", next_page) == 1, what="the second page asked for")
    classes()
    # The IngressClasses' watch starts once their list is in.
    wait_until(lambda: cluster.count("GET", r"/ingressclasses", watch=True) >= 1,
               what="the IngressClasses known")
    second_page()
    ctl.wait_ready()
    wait_until(lambda: managed(cluster) == tuple(sorted(hosts)), what="the first write")
    assert ctl.metric("hairpin_controller_ingress_evaluations_total") == 600


def test_large_lists_come_gzipped_and_read_whole(cluster: FakeApiServer, start: Start) -> None:
    """A pod of the cluster, often far from a managed control plane: the controller offers
    gzip, and a list page past the real server's 128 KiB threshold comes compressed (a relist
    of 50,000 Ingresses, 100 MB of JSON, comes as about 15), read as the plain one."""
    written_first(cluster, start, [f"service-{i}.customers.example.com" for i in range(600)])
    large = [r for r in cluster.requests(None, None, watch=False)
             if (r.size or 0) > GZIP_THRESHOLD]
    assert large and {r.encoding for r in large} == {"gzip"}


def test_reverted_configmap_is_repaired(cluster: FakeApiServer, start: Start) -> None:
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    # Repairs back off (tests/controller/test_node_local_dns.py); short here, and no
    # suspension within these four reverts.
    ctl = start("--repair-backoff", "0.1", "--repair-backoff-max", "1")
    ctl.wait_ready()
    wait_until(lambda: managed(cluster) == ("a.example.com",), what="first write")
    writes = 'hairpin_controller_writes_total{target="corefile"}'
    evaluations = "hairpin_controller_ingress_evaluations_total"
    hosts = "hairpin_controller_hosts_managed"
    wait_until(lambda: ctl.metric(writes) == 1, what="the first write counted")
    before = (ctl.metric(evaluations), ctl.metric(hosts))
    # A Helm upgrade or a k3s restart puts the stock Corefile back; something that keeps doing
    # so is what the HairpinControllerRepairLoop alert is for: it fires on rule writes while
    # no Ingress was evaluated and the managed host count stayed the same, so each repair
    # must count a write and nothing else.
    for repair in range(1, 5):
        cm = cluster.get("ConfigMap", "kube-system", "coredns")
        assert cm is not None
        cm["data"]["Corefile"] = COREFILE
        cluster.update(cm)
        wait_until(lambda: managed(cluster) == ("a.example.com",), timeout=15, what="repair")
        wait_until(lambda: ctl.metric(writes) == 1 + repair,  # noqa: B023 - called at once
                   what=f"repair {repair} counted")
    assert (ctl.metric(evaluations), ctl.metric(hosts)) == before == (1, 1)


def test_hostile_hosts_give_events_and_never_reach_the_corefile(cluster: FakeApiServer,
                                                               start: Start) -> None:
    ctl = start()
    ctl.wait_ready()
    # Valid to the API server, refused by the policy: hijacking cluster names, IPs, PTR zones.
    bad = ["kubernetes.default.svc.cluster.local", "10.6.6.6", "6.6.6.10.in-addr.arpa"]
    cluster.create(ingress("team", "mixed", tls_hosts=["good.example.com", *bad]))
    wait_until(lambda: managed(cluster) == ("good.example.com",), what="good host")
    obj = cluster.get("Ingress", "team", "mixed")
    assert obj is not None

    def events() -> list[dict[str, object]]:
        return [e for e in cluster.list("Event", "team") if e.get("reason") == "HostRejected"]

    wait_until(lambda: len(events()) == 3, what="three Events")
    for event in events():
        assert event["type"] == "Warning"
        involved = event["involvedObject"]
        assert isinstance(involved, dict)
        assert involved["kind"] == "Ingress" and involved["name"] == "mixed"
        assert involved["uid"] == obj["metadata"]["uid"]
        assert involved["resourceVersion"] == obj["metadata"]["resourceVersion"]
    text = corefile_text(cluster)
    assert "6.6.6" not in text and "kubernetes.default" not in text
    assert corefile.remove(text) == COREFILE
    # A later, unrelated reconcile does not repeat the Events (rate limit per ingress+host).
    cluster.create(ingress("b", "b", tls_hosts=["b.example.com"]))
    wait_until(lambda: "b.example.com" in managed(cluster), what="another write")
    time.sleep(0.5)
    assert len(events()) == 3
    assert ctl.metric("hairpin_controller_hosts_rejected") == 3
    assert any(r.get("msg") == "host rejected" for r in ctl.records())


def test_unparsable_corefile_is_never_written(cluster: FakeApiServer, start: Start) -> None:
    cm = cluster.get("ConfigMap", "kube-system", "coredns")
    assert cm is not None
    broken = COREFILE.replace("    reload\n", "    reload {\n")
    cm["data"]["Corefile"] = broken
    cluster.update(cm)
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    ctl = start()
    wait_until(lambda: ctl.metric("hairpin_controller_corefile_errors_total") >= 1,
               what="parse error reported")
    assert corefile_text(cluster) == broken
    assert corefile_puts(cluster) == 0
    # Fixed by a person: the controller carries on and writes.
    cm = cluster.get("ConfigMap", "kube-system", "coredns")
    assert cm is not None
    cm["data"]["Corefile"] = COREFILE
    cluster.update(cm)
    wait_until(lambda: managed(cluster) == ("a.example.com",), what="write after the fix")
    assert ctl.proc.poll() is None


def test_import_mode_writes_only_its_key(cluster: FakeApiServer, start: Start) -> None:
    cluster.create({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "coredns-custom", "namespace": "kube-system"},
                    "data": {"other.server": "example.org:53 {\n    forward . 10.0.0.1\n}\n"}})
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    ctl = start("--mode", "coredns-import")
    ctl.wait_ready()

    def custom() -> dict[str, str]:
        cm = cluster.get("ConfigMap", "kube-system", "coredns-custom")
        return dict(cm["data"]) if cm else {}

    wait_until(lambda: r"a\.example\.com" in custom().get("hairpin-proxy.override", ""),
               what="import key written")
    assert custom()["other.server"] == "example.org:53 {\n    forward . 10.0.0.1\n}\n"
    assert set(custom()) == {"other.server", "hairpin-proxy.override"}
    assert custom()["hairpin-proxy.override"] == corefile.import_snippet(
        ["a.example.com"], answers=corefile.Answers.of([PROXY_IP]))
    assert corefile_text(cluster) == COREFILE
    assert corefile_puts(cluster) == 0
    # The stock Corefile imports nothing: said once, in the log and the metrics.
    assert ctl.metric('hairpin_controller_warnings{kind="import-not-imported"}') == 1


def test_import_mode_creates_the_configmap(cluster: FakeApiServer, start: Start) -> None:
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com"]))
    ctl = start("--mode", "coredns-import", "--import-configmap-name", "coredns-extra")
    ctl.wait_ready()
    cm = cluster.get("ConfigMap", "kube-system", "coredns-extra")
    assert cm is not None and set(cm["data"]) == {"hairpin-proxy.override"}


def test_admin_endpoint_reports_sync_and_leadership(cluster: FakeApiServer,
                                                    start: Start) -> None:
    cluster.create(ingress("a", "a", tls_hosts=["a.example.com", "b.example.com"]))
    ctl = start()
    ctl.wait_ready()
    assert ctl.get("/healthz")[0] == 200
    _, body = ctl.get("/metrics")
    assert re.search(r"^hairpin_controller_hosts_managed 2$", body, re.M)
    assert re.search(r"^hairpin_controller_leader 1$", body, re.M)
    assert re.search(r'^hairpin_controller_writes_total\{target="corefile"\} 1$', body, re.M)
    assert ctl.metric("hairpin_controller_last_successful_sync_timestamp_seconds") > 0
    assert ctl.metric('hairpin_controller_reconciles_total{result="ok"}') >= 1
    # The stock Corefile has reload; no such warning.
    assert "no-reload" not in body


def test_only_new_ingresses_are_evaluated_until_the_default_class_changes(
        cluster: FakeApiServer, start: Start) -> None:
    cluster.create(ingress_class("nginx"))
    for i in range(20):
        cluster.create(ingress("apps", f"app{i}", tls_hosts=[f"app{i}.example.com"],
                               class_name="nginx"))
    cluster.create(ingress("apps", "classless", tls_hosts=["free.example.com"]))
    ctl = start("--ingress-class", "nginx")
    ctl.wait_ready()
    assert len(managed(cluster)) == 20 and "free.example.com" not in managed(cluster)
    evaluations = "hairpin_controller_ingress_evaluations_total"
    assert ctl.metric(evaluations) == 21

    cluster.create(ingress("apps", "late", tls_hosts=["late.example.com"], class_name="nginx"))
    wait_until(lambda: "late.example.com" in managed(cluster), what="new Ingress")
    assert ctl.metric(evaluations) == 22

    def updates() -> list[tuple[object, object, object]]:
        return [(r["hosts"], r["added"], r["removed"]) for r in ctl.records()
                if r.get("msg") == "rules updated"]

    wait_until(lambda: (21, 1, 0) in updates(), what="log line of the change")
    assert updates()[0] == (20, 20, 0)

    # Ingresses without a class now belong to nginx: every Ingress is looked at again.
    nginx = cluster.get("IngressClass", None, "nginx")
    assert nginx is not None
    nginx["metadata"]["annotations"] = ingress_class("nginx", default=True)["metadata"][
        "annotations"]
    cluster.update(nginx)
    wait_until(lambda: "free.example.com" in managed(cluster), what="class-less Ingress")
    assert len(managed(cluster)) == 22
    assert ctl.metric(evaluations) == 44


SERVICE_ACCOUNT_GET = r"/api/v1/namespaces/hairpin-proxy/serviceaccounts/hairpin-proxy-controller$"


def test_objects_to_hold_that_do_not_exist_are_not_asked_for_in_every_pass(
        cluster: FakeApiServer, start: Start) -> None:
    # An install whose ServiceAccount and Role carry other names (RBAC made by hand): the
    # withdrawal's holds are looked for before the first rule, then only once a watch shows
    # one appear, not with two requests in every pass.
    ctl = start()
    ctl.wait_ready()
    cluster.create(ingress("shop", "a", tls_hosts=["a.example.com"]))
    wait_until(lambda: managed(cluster) == ("a.example.com",), what="first rule")
    asked = cluster.count("GET", SERVICE_ACCOUNT_GET, watch=False)
    assert asked >= 1
    hosts = ["a.example.com"]
    for host in ("b.example.com", "c.example.com", "d.example.com"):
        cluster.create(ingress("shop", host.split(".")[0], tls_hosts=[host]))
        hosts.append(host)
        wait_until(lambda: managed(cluster) == tuple(hosts), what=f"rule for {host}")
    assert cluster.count("GET", SERVICE_ACCOUNT_GET, watch=False) == asked
    cluster.create({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"namespace": NAMESPACE, "name": holds.SERVICE_ACCOUNT}})
    cluster.create(ingress("shop", "e", tls_hosts=["e.example.com"]))

    def held() -> bool:
        account = cluster.get("ServiceAccount", NAMESPACE, holds.SERVICE_ACCOUNT)
        return account is not None and holds.FINALIZER in (
            account["metadata"].get("finalizers") or ())
    wait_until(held, what="the account held once it exists")
