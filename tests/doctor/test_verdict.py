"""The decision list: exactly one verdict for every combination of facts, each one reachable."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.doctor import verdict as v
from hairpin_proxy.doctor.facts import (
    AddressKind,
    Attempt,
    ClusterFacts,
    HostFacts,
    LbEntry,
    LbService,
    PortProbe,
    Resolution,
    Verification,
)

TRI = (None, False, True)
TRI_FIELDS = ("rule", "proxy_installed", "proxy_ready", "ip_mode_proxy", "hostname_only",
              "node_local_dns", "node_local_reconciled", "node_local_covered", "coredns_ok",
              "reload", "verified")
# Every field a rule's condition may read, with all its values.
FIELD_VALUES: dict[str, tuple[Any, ...]] = {
    "dns": v.DNS_STATES, "http": v.PORT_STATES, "tls": v.PORT_STATES,
    **{name: TRI for name in TRI_FIELDS},
    "target": (None, *v.TARGET_STATES),
    "refused": ("", "Ingress a/b: would take the rules past the room"),
}


def test_pure_modules_load_no_io() -> None:
    """facts, verdict and report load without sockets, threads, logging or the settings."""
    code = ("import sys; import hairpin_proxy.doctor.facts, hairpin_proxy.doctor.verdict, "
            "hairpin_proxy.doctor.report; print(' '.join(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, timeout=60).stdout.split()
    loaded = {m for m in out if m.startswith("hairpin_proxy")}
    # wildcards: the host forms; addresses: HOST:PORT text; both pure and importing nothing.
    assert loaded == {"hairpin_proxy", "hairpin_proxy.doctor", "hairpin_proxy.doctor.facts",
                      "hairpin_proxy.doctor.verdict", "hairpin_proxy.doctor.report",
                      "hairpin_proxy.wildcards", "hairpin_proxy.addresses"}
    assert not {"socket", "ssl", "asyncio", "concurrent.futures", "logging"} & set(out)


def matching(s: v.Situation) -> list[str]:
    return [r.code for r in v.RULES if r.when(s)]


_UNSET: Any = object()


class _Need(Exception):
    def __init__(self, field: str) -> None:
        super().__init__(field)
        self.field = field


class _Lazy(v.Situation):
    """A Situation whose unset fields raise ``_Need`` when a condition reads them."""

    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        if value is _UNSET:
            raise _Need(name)
        return value


def explore(assigned: dict[str, Any]) -> Iterator[tuple[dict[str, Any], list[str]]]:
    """(assignment, matching rules) over every combination of facts: a field is assigned
    only when a condition reads it, so each leaf stands for every value of the fields it
    leaves unset (the conditions read nothing else)."""
    fields: dict[str, Any] = {name: assigned.get(name, _UNSET) for name in FIELD_VALUES}
    s = _Lazy(**fields)
    try:
        hits = [r.code for r in v.RULES if r.when(s)]
    except _Need as need:
        for value in FIELD_VALUES[need.field]:
            yield from explore({**assigned, need.field: value})
        return
    yield assigned, hits


def test_every_combination_matches_exactly_one_rule() -> None:
    """All 5 x 4 x 4 x 3^11 x 5 x 2 situations: the conditions are exclusive and
    exhaustive."""
    seen: set[str] = set()
    count = 0
    assert len(TRI_FIELDS) == 11
    for assigned, hits in explore({}):
        assert len(hits) == 1, (assigned, hits)
        seen.add(hits[0])
        count += math.prod(len(values) for name, values in FIELD_VALUES.items()
                           if name not in assigned)
    assert count == 5 * 4 * 4 * 3 ** 11 * 5 * 2
    assert seen == set(v.CODES), set(v.CODES) - seen


def test_exploring_agrees_with_plain_evaluation() -> None:
    """The lazy Situation decides as the real one does (spot checks of the leaves)."""
    for n, (assigned, hits) in enumerate(explore({})):
        if n % 7:
            continue
        full = {name: assigned.get(name, values[-1]) for name, values in FIELD_VALUES.items()}
        assert matching(v.Situation(**full)) == hits


situations = st.builds(
    v.Situation,
    dns=st.sampled_from(v.DNS_STATES), http=st.sampled_from(v.PORT_STATES),
    tls=st.sampled_from(v.PORT_STATES),
    **{name: st.sampled_from(TRI) for name in TRI_FIELDS},
    dns_error=st.text(max_size=20), seen=st.text(max_size=40),
    coredns_version=st.sampled_from(["", "1.5.0", "1.11.1"]),
    verify_code=st.sampled_from(["", "not-this-cluster", "unresolved", "ip-mode-proxy"]),
    verify_reason=st.text(max_size=40),
    target=st.sampled_from((None, *v.TARGET_STATES)),
    target_key=st.sampled_from(["", "gateway/web/public", "ingressclass/nginx"]),
    target_message=st.text(max_size=40),
)


@settings(max_examples=500, deadline=None)
@given(situations)
def test_decide_gives_the_one_matching_rule(s: v.Situation) -> None:
    (code,) = matching(s)
    out = v.decide(s)
    assert out.code == code
    assert out.advice and "\n" not in out.advice
    # Only a working path is ok; and every ok verdict is a working one.
    assert out.ok == (out.code in {"fixed", "target-no-proxy", "not-needed-ipmode",
                                   "not-needed-hostname", "works"})
    if out.ok:
        assert s.all_work


@settings(max_examples=300, deadline=None)
@given(situations)
def test_unknown_cluster_facts_never_pick_a_cluster_verdict(s: v.Situation) -> None:
    blind = v.Situation(s.dns, s.http, s.tls)
    assert v.decide(blind).code in {"dns-failed", "not-probed", "fixed", "proxy-failing",
                                    "hairpin-confirmed", "works", "unreachable"}


H: v.Port = "hairpin"
W: v.Port = "works"
F: v.Port = "fails"
S: v.Port = "skipped"
EXAMPLES: dict[str, v.Situation] = {
    "dns-failed": v.Situation("error", S, S, dns_error="Name or service not known"),
    "not-probed": v.Situation("lb", S, S),
    "fixed": v.Situation("proxy", W, W),
    "proxy-no-endpoints": v.Situation("proxy", F, F, proxy_ready=False),
    "proxy-failing": v.Situation("proxy", W, F, proxy_ready=True),
    "node-local-dns-reconciled": v.Situation("lb", H, H, rule=True, node_local_dns=True,
                                             node_local_reconciled=True, coredns_ok=False,
                                             node_local_configmap="kube-system/node-local-dns"),
    "node-local-dns-missing": v.Situation("lb", H, H, rule=True, node_local_dns=True,
                                          node_local_reconciled=False,
                                          node_local_covered=False, coredns_ok=False,
                                          reload=False,
                                          node_local_configmap="kube-system/nodelocaldns"),
    "coredns-too-old": v.Situation("lb", H, S, rule=True, node_local_dns=False,
                                   coredns_ok=False, coredns_version="1.8.0"),
    "coredns-no-reload": v.Situation("other", S, H, rule=True, reload=False),
    "dns-not-updated": v.Situation("mixed", H, W, rule=True),
    "ipmode-ignored": v.Situation("lb", H, H, rule=False, ip_mode_proxy=True),
    "not-this-cluster": v.Situation(
        "lb", H, H, rule=False, proxy_installed=True, verified=False,
        verify_code="not-this-cluster",
        verify_reason="shop.example.com resolves to 198.51.100.7, not to this cluster's load "
                      "balancer 203.0.113.7"),
    "rule-missing": v.Situation("lb", H, H, rule=False, proxy_installed=True),
    "over-limit": v.Situation("lb", H, H, rule=False, proxy_installed=True,
                              refused="Ingress shop/web: would take the rules past the room"),
    "hairpin-confirmed": v.Situation("lb", H, F),
    "target-proxy-mismatch": v.Situation("lb", H, H, target="no-proxy",
                                         target_key="gateway/web/public"),
    "target-proxy-unknown": v.Situation("lb", H, W, proxy_installed=True,
                                        target="proxy-unknown",
                                        target_key="gateway/web/public"),
    "target-not-found": v.Situation("other", H, S, verified=True, target="not-found",
                                    target_key="gateway/web/public"),
    "target-no-proxy": v.Situation("lb", W, W, ip_mode_proxy=True, target="no-proxy",
                                   target_key="gateway/web/public"),
    "not-needed-ipmode": v.Situation("lb", W, W, ip_mode_proxy=True),
    "not-needed-hostname": v.Situation("other", W, S, hostname_only=True),
    "works": v.Situation("other", W, W),
    "unreachable": v.Situation("lb", W, F, seen="tls 443: bare timed out"),
}


def test_examples_cover_the_whole_table() -> None:
    assert set(EXAMPLES) == set(v.CODES)


@pytest.mark.parametrize("code", sorted(EXAMPLES))
def test_each_verdict_by_example(code: str) -> None:
    assert v.decide(EXAMPLES[code]).code == code


@pytest.mark.parametrize(("reconciled", "covered", "code"), [
    # The addon manager's ConfigMap: the controller cannot put our block there...
    (True, False, "node-local-dns-reconciled"),
    (True, None, "node-local-dns-reconciled"),
    # ...unless it is there anyway (someone else wrote it): then node-local-dns passes.
    (True, True, "dns-not-updated"),
    (False, False, "node-local-dns-missing"),
    (None, False, "node-local-dns-missing"),
    (False, True, "dns-not-updated"),
    (None, True, "dns-not-updated"),
    # Coverage unknown and not known to be reconciled: nothing known to blame.
    (False, None, "dns-not-updated"),
    (None, None, "dns-not-updated"),
])
def test_node_local_dns_branches(reconciled: bool | None, covered: bool | None,
                                 code: str) -> None:
    s = v.Situation("lb", H, H, rule=True, node_local_dns=True,
                    node_local_reconciled=reconciled, node_local_covered=covered)
    assert v.decide(s).code == code
    # Without node-local-dns (or not known to be there) its ConfigMap does not matter.
    for deployed in (False, None):
        other = v.Situation("lb", H, H, rule=True, node_local_dns=deployed,
                            node_local_reconciled=reconciled, node_local_covered=covered)
        assert v.decide(other).code == "dns-not-updated"
    # The later rule-exists verdicts still apply once node-local-dns passes.
    old = v.Situation("lb", H, H, rule=True, node_local_dns=True,
                      node_local_reconciled=reconciled, node_local_covered=covered,
                      coredns_ok=False)
    assert v.decide(old).code == (code if code != "dns-not-updated" else "coredns-too-old")


def test_node_local_dns_advice() -> None:
    reconciled = v.decide(EXAMPLES["node-local-dns-reconciled"]).advice
    assert "kube-system/node-local-dns" in reconciled and "addon manager" in reconciled
    assert "docs/platforms/node-local-dns.md" in reconciled
    missing = v.decide(EXAMPLES["node-local-dns-missing"]).advice
    assert "kube-system/nodelocaldns" in missing and "--node-local-dns off" in missing
    nowhere = v.decide(v.Situation("lb", H, H, rule=True, node_local_dns=True,
                                   node_local_reconciled=False, node_local_covered=False))
    assert nowhere.code == "node-local-dns-missing"
    assert "neither kube-system/node-local-dns nor kube-system/nodelocaldns" in nowhere.advice
    unknown = v.decide(v.Situation("lb", H, H, rule=True, node_local_dns=True))
    assert unknown.code == "dns-not-updated" and "is unknown" in unknown.advice
    assert "unknown" not in v.decide(EXAMPLES["dns-not-updated"]).advice


def test_rule_missing_names_a_proxy_without_endpoints() -> None:
    """The controller withdraws every rule while the proxy has no ready endpoint."""
    plain = v.decide(EXAMPLES["rule-missing"]).advice
    assert "template stanza" in plain and "rewrite" not in plain
    down = v.decide(v.Situation("lb", H, H, rule=False, proxy_installed=True,
                                proxy_ready=False))
    assert down.code == "rule-missing"
    assert "no ready endpoints" in down.advice and "--proxy-grace" in down.advice


def test_advice_carries_the_details() -> None:
    assert "Name or service not known" in v.decide(EXAMPLES["dns-failed"]).advice
    assert "1.8.0" in v.decide(EXAMPLES["coredns-too-old"]).advice
    assert "bare timed out" in v.decide(EXAMPLES["unreachable"]).advice
    assert "some answers already point at hairpin-proxy" in \
        v.decide(EXAMPLES["dns-not-updated"]).advice
    assert v.decide(EXAMPLES["hairpin-confirmed"]).advice == \
        "hairpin confirmed and not fixed: install hairpin-proxy"


def test_target_advice_names_the_flag_once() -> None:
    unknown = v.decide(v.Situation("lb", H, H, target="proxy-unknown",
                                   target_key="gateway/web/public",
                                   target_message="hairpin-proxy cannot read it"))
    assert unknown.code == "target-proxy-unknown"
    assert "gateway/web/public (hairpin-proxy cannot read it)" in unknown.advice
    assert unknown.advice.endswith(
        "set --target gateway:web/public=NAMESPACE/SERVICE:v1|v2|none")
    # The plan's message already names the flag: it is not repeated.
    told = v.decide(v.Situation("lb", H, H, target="not-found", target_key="ingressclass/x",
                                target_message="no Service found; set --target "
                                               "x=NAMESPACE/SERVICE:v1|v2|none"))
    assert told.code == "target-not-found" and told.advice.count("--target") == 1
    # A working host of a no-PROXY target is fine; the same with the hairpin is not.
    assert v.decide(v.Situation("other", W, W, target="no-proxy")).ok
    assert v.decide(v.Situation("lb", H, W, target="no-proxy")).code == "target-proxy-mismatch"
    # A redirected target changes nothing of the verdicts before targets existed.
    assert v.decide(v.Situation("lb", H, F, target="redirected")).code == "hairpin-confirmed"
    assert v.decide(v.Situation("other", W, W, target="redirected")).code == "works"


# --------------------------------------------------------------------------- from facts

OK = Attempt("http", 200)
BAD = Attempt("http", 400)
EMPTY = Attempt("empty")
REFUSED = Attempt("refused")


def probe(bare: Attempt, v1: Attempt, v2: Attempt, scheme: str = "http") -> PortProbe:
    return PortProbe("tls" if scheme == "tls" else "http", "192.0.2.1", 80, bare, v1, v2)


@pytest.mark.parametrize(("bare", "v1", "v2", "state"), [
    (OK, BAD, BAD, "works"),
    (OK, OK, OK, "works"),
    (EMPTY, OK, EMPTY, "hairpin"),
    (Attempt("reset"), EMPTY, Attempt("http", 404), "hairpin"),
    (Attempt("timeout"), OK, OK, "hairpin"),
    (EMPTY, EMPTY, EMPTY, "fails"),
    (REFUSED, REFUSED, REFUSED, "fails"),
    (Attempt("garbage", detail="SSH-2.0"), EMPTY, EMPTY, "fails"),
])
def test_port_state(bare: Attempt, v1: Attempt, v2: Attempt, state: str) -> None:
    assert v.port_state(probe(bare, v1, v2)) == state
    assert v.port_state(None) == "skipped"


@pytest.mark.parametrize(("addresses", "kinds", "state"), [
    ((), (), "error"),
    (("10.0.0.9",), ("proxy",), "proxy"),
    (("10.0.0.9", "fd00::9"), ("proxy", "proxy"), "proxy"),
    (("10.0.0.9", "203.0.113.7"), ("proxy", "lb"), "mixed"),
    (("203.0.113.7", "198.51.100.1"), ("other", "lb"), "lb"),
    (("198.51.100.1",), ("other",), "other"),
])
def test_dns_state(addresses: tuple[str, ...], kinds: tuple[AddressKind, ...],
                   state: str) -> None:
    facts = HostFacts("a.example.com", Resolution(addresses), kinds)
    assert v.dns_state(facts) == state


def lb(ip_mode: str = "VIP", ip: str = "203.0.113.7", hostname: str = "") -> LbService:
    return LbService("ingress-nginx/ingress-nginx-controller",
                     (LbEntry("ingress-nginx/ingress-nginx-controller", ip, hostname, ip_mode),),
                     ())


def test_summarize_reads_the_cluster_facts() -> None:
    cluster = ClusterFacts(lb_services=(lb(),), proxy_service_found=True,
                           proxy_ready_endpoints=0, rule_hosts=("*.example.com",),
                           reload_plugin=True, node_local_dns=False,
                           coredns_version=(1, 5, 0))
    facts = HostFacts("shop.example.com", Resolution(("203.0.113.7",)), ("lb",),
                      probe(EMPTY, OK, OK), None, lb(), cluster)
    s = v.summarize(facts)
    assert (s.dns, s.http, s.tls) == ("lb", "hairpin", "skipped")
    assert s.rule is True and s.proxy_installed is True and s.proxy_ready is False
    assert s.ip_mode_proxy is False and s.hostname_only is False
    assert s.coredns_ok is False and s.coredns_version == "1.5.0"
    assert v.verdict(facts).code == "coredns-too-old"
    # The wildcard covers one label only.
    deeper = HostFacts("a.shop.example.com", facts.resolution, facts.kinds, facts.http,
                       None, lb(), cluster)
    assert v.summarize(deeper).rule is False
    assert v.verdict(deeper).code == "rule-missing"


def node_local_facts(host: str, **cluster: object) -> HostFacts:
    c = ClusterFacts(rule_hosts=(host,), reload_plugin=True, **cluster)  # type: ignore[arg-type]
    return HostFacts(host, Resolution(("203.0.113.7",)), ("lb",), probe(EMPTY, OK, OK), None,
                     lb(), c)


@pytest.mark.parametrize(("host", "zones", "covered"), [
    ("shop.example.com", {"shop.example.com"}, True),
    ("shop.example.com", {"example.com"}, True),  # a *.example.com host's zone
    ("a.shop.example.com", {"example.com"}, True),  # a zone covers every depth
    ("shop.example.com", {"other.example.com"}, False),
    ("example.com", {"shop.example.com"}, False),
    ("shop.example.com", set(), False),
])
def test_summarize_reads_node_local_coverage(host: str, zones: set[str],
                                             covered: bool) -> None:
    s = v.summarize(node_local_facts(host, node_local_dns=True,
                                     node_local_configmap="kube-system/node-local-dns",
                                     node_local_reconciled=False,
                                     node_local_zones=frozenset(zones)))
    assert s.node_local_dns is True and s.node_local_reconciled is False
    assert s.node_local_covered is covered
    assert s.node_local_configmap == "kube-system/node-local-dns"


def test_summarize_node_local_deployed_from_its_configmap() -> None:
    """The DaemonSet unknown (the controller's Role reads none): the ConfigMap says it runs."""
    s = v.summarize(node_local_facts("shop.example.com", node_local_dns=None,
                                     node_local_configmap="kube-system/node-local-dns",
                                     node_local_reconciled=True,
                                     node_local_zones=frozenset()))
    assert s.node_local_dns is True and s.node_local_reconciled is True
    assert s.node_local_covered is False
    assert v.decide(s).code == "node-local-dns-reconciled"
    # Found absent stays absent, even with a leftover ConfigMap.
    gone = v.summarize(node_local_facts("shop.example.com", node_local_dns=False,
                                        node_local_configmap="kube-system/node-local-dns",
                                        node_local_zones=frozenset()))
    assert gone.node_local_dns is False and v.decide(gone).code == "dns-not-updated"
    # DaemonSet and ConfigMap both unknown: unknown.
    blind = v.summarize(node_local_facts("shop.example.com"))
    assert blind.node_local_dns is None and blind.node_local_covered is None
    assert v.decide(blind).code == "dns-not-updated"


def test_summarize_without_cluster_knows_nothing() -> None:
    facts = HostFacts("a.example.com", Resolution(("198.51.100.1",)), ("other",),
                      probe(EMPTY, OK, OK), probe(EMPTY, EMPTY, OK, "tls"))
    s = v.summarize(facts)
    assert all(getattr(s, name) is None for name in TRI_FIELDS)
    assert v.verdict(facts).code == "hairpin-confirmed"


def test_no_load_balancer_at_all_means_no_ipmode_and_no_hostname() -> None:
    facts = HostFacts("a.example.com", Resolution(("198.51.100.1",)), ("other",),
                      probe(OK, BAD, BAD), None, None, ClusterFacts(lb_services=()))
    s = v.summarize(facts)
    assert s.ip_mode_proxy is False and s.hostname_only is False


attempts = st.builds(Attempt, st.sampled_from(["http", "empty", "reset", "refused", "timeout",
                                               "unreachable", "tls-error", "garbage", "error"]),
                     st.one_of(st.none(), st.integers(100, 599)), st.text(max_size=10))
probes = st.one_of(st.none(), st.builds(PortProbe, st.sampled_from(["http", "tls"]),
                                        st.just("192.0.2.1"), st.integers(1, 65535),
                                        attempts, attempts, attempts))
lbs = st.one_of(st.none(), st.builds(lb,
                                     st.sampled_from(["", "VIP", "Proxy"]),
                                     st.sampled_from(["", "203.0.113.7"]),
                                     st.sampled_from(["", "lb.example.net"])))
clusters = st.one_of(st.none(), st.builds(
    ClusterFacts,
    lb_services=st.one_of(st.none(), st.lists(lbs.filter(lambda x: x is not None),
                                              max_size=2).map(tuple)),
    proxy_service_found=st.sampled_from(TRI),
    proxy_ready_endpoints=st.one_of(st.none(), st.integers(0, 3)),
    rule_hosts=st.one_of(st.none(), st.lists(st.sampled_from(
        ["a.example.com", "*.example.com", "b.example.org"]), max_size=3).map(tuple)),
    reload_plugin=st.sampled_from(TRI), node_local_dns=st.sampled_from(TRI),
    node_local_configmap=st.sampled_from([None, "kube-system/node-local-dns"]),
    node_local_reconciled=st.sampled_from(TRI),
    node_local_zones=st.one_of(st.none(), st.sets(st.sampled_from(
        ["a.example.com", "example.com", "example.org"]), max_size=2).map(frozenset)),
    coredns_version=st.one_of(st.none(), st.tuples(st.integers(0, 2), st.integers(0, 12),
                                                   st.integers(0, 9))),
))


ADDRESSES = ["203.0.113.7", "10.96.0.9", "fd00::9"]
KINDS: list[AddressKind] = ["lb", "proxy", "other"]
host_facts = st.builds(
    HostFacts,
    host=st.sampled_from(["a.example.com", "x.a.example.com", "b.example.org"]),
    resolution=st.one_of(
        st.lists(st.sampled_from(ADDRESSES), min_size=1, max_size=3, unique=True).map(
            lambda a: Resolution(tuple(a))),
        st.just(Resolution(error="Name or service not known"))),
    kinds=st.lists(st.sampled_from(KINDS), max_size=3).map(tuple),
    http=probes, tls=probes, lb=lbs, cluster=clusters)


@settings(max_examples=500, deadline=None)
@given(host_facts)
def test_any_gathered_facts_give_one_verdict(facts: HostFacts) -> None:
    out = v.verdict(facts)
    assert out.code in v.CODES
    assert len(matching(v.summarize(facts))) == 1


# --------------------------------------------------------------------------- verification

NOT_OURS = Verification("not-this-cluster", "a.example.com resolves to 198.51.100.1, not to "
                        "this cluster's load balancer 203.0.113.7", "a.example.com",
                        ("198.51.100.1",), (), "system")


@pytest.mark.parametrize(("code", "redirect"), [
    ("verified", True), ("off", True),
    ("not-this-cluster", False), ("unresolved", False), ("ip-mode-proxy", False),
    ("resolver-error", None), ("pending", None), ("unknown", None),
])
def test_verification_redirect(code: str, redirect: bool | None) -> None:
    assert Verification(code, "why").redirect is redirect


def hairpin_facts(check: Verification | None, *, installed: bool | None = True,
                  lb_service: LbService | None = None) -> HostFacts:
    cluster = ClusterFacts(lb_services=() if lb_service is None else (lb_service,),
                           proxy_service_found=installed, rule_hosts=())
    return HostFacts("a.example.com", Resolution(("203.0.113.7",)), ("lb",),
                     probe(EMPTY, OK, OK), None, lb_service, cluster, check)


@pytest.mark.parametrize("installed", [True, False, None])
def test_not_verified_host_without_rule_is_not_this_cluster(installed: bool | None) -> None:
    facts = hairpin_facts(NOT_OURS, installed=installed)
    s = v.summarize(facts)
    assert s.verified is False and s.verify_code == "not-this-cluster"
    out = v.verdict(facts)
    assert out.code == "not-this-cluster" and not out.ok
    assert "does not point at this cluster's load balancer" in out.advice
    assert "by design" in out.advice and "--verify-hosts off" in out.advice
    assert "198.51.100.1" in out.advice  # the controller's reason


@pytest.mark.parametrize(("check", "code"), [
    (None, "rule-missing"),
    (Verification("verified", "ours"), "rule-missing"),
    (Verification("off", "off"), "rule-missing"),
    # Unknown: the resolver failed, or the load balancer addresses are unknown.
    (Verification("resolver-error", "timeout"), "rule-missing"),
    (Verification("unknown", "Ingresses could not be listed"), "rule-missing"),
    (Verification("unresolved", "a.example.com does not resolve (NXDOMAIN)"),
     "not-this-cluster"),
])
def test_only_a_known_refusal_selects_not_this_cluster(check: Verification | None,
                                                       code: str) -> None:
    assert v.verdict(hairpin_facts(check)).code == code


def test_not_this_cluster_needs_the_hairpin_and_no_rule() -> None:
    base = hairpin_facts(NOT_OURS)
    works = HostFacts(base.host, base.resolution, base.kinds, probe(OK, BAD, BAD), None,
                      None, base.cluster, NOT_OURS)
    assert v.verdict(works).code == "works"
    assert base.cluster is not None
    ruled = ClusterFacts(lb_services=(), proxy_service_found=True, rule_hosts=("a.example.com",),
                         reload_plugin=True, coredns_version=(1, 11, 1), node_local_dns=False)
    with_rule = HostFacts(base.host, base.resolution, base.kinds, base.http, None, None, ruled,
                          NOT_OURS)
    assert v.verdict(with_rule).code == "dns-not-updated"


def test_ip_mode_proxy_verification() -> None:
    """The public answer's load balancer reports ipMode Proxy: with the doctor's own load
    balancer reading unknown, that is the ipMode fact; against a known VIP one, the
    controller still leaves the host alone."""
    check = Verification("ip-mode-proxy", "a.example.com resolves to 203.0.113.7, whose load "
                         "balancer (Service x/y) reports ipMode Proxy")
    unknown_lb = HostFacts("a.example.com", Resolution(("203.0.113.7",)), ("other",),
                           probe(EMPTY, OK, OK), None, None,
                           ClusterFacts(lb_services=None, proxy_service_found=True,
                                        rule_hosts=()), check)
    s = v.summarize(unknown_lb)
    assert s.ip_mode_proxy is True and s.verified is False
    assert v.verdict(unknown_lb).code == "ipmode-ignored"
    vip = hairpin_facts(check, lb_service=lb("VIP"))
    out = v.verdict(vip)
    assert out.code == "not-this-cluster" and "ipMode Proxy" in out.advice
    assert "service proxy ignores ipMode" in out.advice
