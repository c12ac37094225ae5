"""The verdict for one host: gathered facts → one of a fixed list of verdicts. Pure.

First the facts are boiled down to a ``Situation`` of small enumerations (``summarize``); then
``decide`` walks ``RULES``, the decision list, and returns the verdict whose condition holds.
The conditions are written to be mutually exclusive and, together, to cover every situation
(the property tests check both over all combinations), so the order only matters for reading.

How a port probe reads (``port_state``):

=========  ====================================================================================
works      the bare request got an HTTP answer (any status): nothing needs a PROXY header here
hairpin    the bare request failed (empty reply, reset, timeout, TLS failure) and one preceded
           by a PROXY header got an HTTP answer: the receiver wants the header the load
           balancer would have added, and this path skipped the load balancer
fails      neither got an HTTP answer
skipped    the port was not probed (``--port 0`` / ``--tls-port 0``, or no address)
=========  ====================================================================================

How DNS reads: ``error`` (no address), ``proxy`` (every answer is the proxy Service),
``mixed`` (some are), ``lb`` (a LoadBalancer address of the cluster, none the proxy's),
``other`` (neither: an outside address, or nothing known about the cluster).

The decision list (``dns-*`` first, then by DNS class, then by what the probes saw):

=========================  ====  ==============================================================
code                       ok    when
=========================  ====  ==============================================================
dns-failed                 no    the name does not resolve
not-probed                 no    it resolves, but both ports were skipped
fixed                      yes   every answer is the proxy Service and every probed port works
proxy-no-endpoints         no    every answer is the proxy Service, a port does not work, and
                                 the proxy Service has no ready endpoints
proxy-failing              no    every answer is the proxy Service, a port does not work, and
                                 the proxy has (or may have) ready endpoints
node-local-dns-reconciled  no    hairpin, the rule exists, node-local-dns is deployed, its
                                 ConfigMap is reconciled by the addon manager, and our block
                                 there does not (known to) cover the host
node-local-dns-missing     no    hairpin, the rule exists, node-local-dns is deployed, its
                                 ConfigMap is not (known to be) reconciled, and our block there
                                 does not cover the host (or there is no such ConfigMap)
coredns-too-old            no    hairpin, the rule exists, node-local-dns passed, CoreDNS
                                 < 1.5.1
coredns-no-reload          no    hairpin, the rule exists, none of the above, no ``reload``
dns-not-updated            no    hairpin, the rule exists, none of the above
ipmode-ignored             no    hairpin, no rule in effect, the load balancer says ``ipMode:
                                 Proxy``
not-this-cluster           no    hairpin, no rule in effect, and the host is not verified:
                                 its public DNS does not point at this cluster's load balancer
                                 (or does not resolve), so the controller will not redirect it
target-proxy-mismatch      no    hairpin, no rule in effect, the host is (or may be) verified,
                                 and its target reads as expecting no PROXY header: the
                                 controller leaves it alone, yet the data plane wants one
target-proxy-unknown       no    hairpin, no rule in effect, (may be) verified, and whether its
                                 target expects the PROXY protocol cannot be told
target-not-found           no    hairpin, no rule in effect, (may be) verified, and no Service
                                 was found for its target
rule-missing               no    hairpin, no rule in effect, the host is (or may be) verified,
                                 its target is redirected (or unknown), hairpin-proxy is
                                 installed
hairpin-confirmed          no    hairpin, no rule in effect, the host is (or may be) verified,
                                 its target is redirected (or unknown), hairpin-proxy is not
                                 (known to be) installed
target-no-proxy            yes   every probed port works and the host's target expects no
                                 PROXY header: it does not hairpin-break, it is not redirected
not-needed-ipmode          yes   every probed port works and the load balancer says ``ipMode:
                                 Proxy``
not-needed-hostname        yes   every probed port works and the load balancer publishes only
                                 a hostname
works                      yes   every probed port works (nothing to fix)
unreachable                no    no port shows the hairpin, and not every port works:
                                 something else is wrong (the advice says what was seen)
=========================  ====  ==============================================================

"hairpin" means: DNS is not ``proxy`` and at least one probed port reads ``hairpin``. "The
rule exists" means the Corefile (or the imported key) has a rule of ours covering the host (a
``template`` stanza, or an earlier version's ``rewrite`` rule); unknown counts as "no rule in
effect". "node-local-dns passed" means: node-local-dns is not (known to be) deployed, or our
server block in its Corefile covers the host, or that coverage is unknown and the ConfigMap is
not known to be reconciled. node-local-dns counts as deployed when its DaemonSet is found, or
when the DaemonSet could not be looked for (the controller's Role reads no DaemonSets) and its
ConfigMap exists. "Verified" is the controller's host verification (``hairpin_proxy.verify``),
computed with its code: the host's public DNS answer holds one of this cluster's load balancer
addresses (or ``--verify-hosts off``); "not verified" means that answer is known and is not
ours (``not-this-cluster``, ``unresolved``, ``ip-mode-proxy``); a resolver failure or unknown
load balancer addresses leave it unknown. Unknown cluster facts never select a verdict that
depends on them being true or false.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from hairpin_proxy.doctor.facts import HostFacts, PortProbe, rule_covers, zone_covers

Dns = Literal["error", "proxy", "mixed", "lb", "other"]
Port = Literal["works", "hairpin", "fails", "skipped"]
# What the target plan does with the host (``HostTarget.verdict`` without its prefix).
TargetState = Literal["redirected", "no-proxy", "proxy-unknown", "not-found"]
TARGET_STATES: tuple[TargetState, ...] = ("redirected", "no-proxy", "proxy-unknown",
                                          "not-found")
DNS_STATES: tuple[Dns, ...] = ("error", "proxy", "mixed", "lb", "other")
PORT_STATES: tuple[Port, ...] = ("works", "hairpin", "fails", "skipped")


@dataclass(frozen=True)
class Situation:
    """The facts that decide a verdict; None means unknown (no API, no permission)."""
    dns: Dns
    http: Port
    tls: Port
    rule: bool | None = None
    proxy_installed: bool | None = None
    proxy_ready: bool | None = None
    ip_mode_proxy: bool | None = None
    hostname_only: bool | None = None
    node_local_dns: bool | None = None  # deployed
    node_local_reconciled: bool | None = None  # its ConfigMap is the addon manager's
    node_local_covered: bool | None = None  # our block in its Corefile covers the host
    coredns_ok: bool | None = None
    reload: bool | None = None
    # The controller redirects the host as far as its verification goes (``--verify-hosts
    # off`` counts as yes); False: its public DNS is known not to lead to this cluster.
    verified: bool | None = None
    # Only for the advice text.
    dns_error: str = ""
    seen: str = ""
    coredns_version: str = ""
    node_local_configmap: str = ""  # namespace/name; "" when none was found
    verify_code: str = ""  # the verification's code (``Verification.code``)
    verify_reason: str = ""  # and its reason
    # Where the controller sends the host (None: not claimed, or unknown).
    target: TargetState | None = None
    target_key: str = ""  # only for the advice text
    target_message: str = ""
    # Why a size limit keeps the controller from writing a rule for the host ("": none).
    refused: str = ""

    @cached_property
    def probed(self) -> tuple[Port, ...]:
        return tuple(p for p in (self.http, self.tls) if p != "skipped")

    @cached_property
    def hairpin(self) -> bool:
        return self.dns not in ("error", "proxy") and "hairpin" in self.probed

    @cached_property
    def all_work(self) -> bool:
        return bool(self.probed) and all(p == "works" for p in self.probed)

    @cached_property
    def resolved_and_probed(self) -> bool:
        return self.dns != "error" and bool(self.probed)

    @cached_property
    def via_proxy(self) -> bool:
        return self.resolved_and_probed and self.dns == "proxy"

    @cached_property
    def not_via_proxy(self) -> bool:
        return self.resolved_and_probed and self.dns != "proxy"


@dataclass(frozen=True)
class Verdict:
    code: str
    ok: bool
    advice: str


@dataclass(frozen=True)
class Rule:
    code: str
    ok: bool
    when: Callable[[Situation], bool]
    advice: Callable[[Situation], str]


def _rule_exists(s: Situation) -> bool:
    return s.hairpin and s.rule is True


def _no_rule(s: Situation) -> bool:
    return s.hairpin and s.rule is not True


def _node_local_reconciled(s: Situation) -> bool:
    return (s.node_local_dns is True and s.node_local_reconciled is True
            and s.node_local_covered is not True)


def _node_local_missing(s: Situation) -> bool:
    return (s.node_local_dns is True and s.node_local_reconciled is not True
            and s.node_local_covered is False)


def _node_local_passed(s: Situation) -> bool:
    """node-local-dns is not what keeps the names from CoreDNS (as far as is known)."""
    return (s.node_local_dns is not True or s.node_local_covered is True
            or (s.node_local_covered is None and s.node_local_reconciled is not True))


def _node_local_missing_advice(s: Situation) -> str:
    head = ("the rule exists but DNS still returns the load balancer address"
            f"{_mixed_note(s)}: node-local-dns is deployed and answers before CoreDNS, ")
    if not s.node_local_configmap:
        return head + ("but neither kube-system/node-local-dns nor kube-system/nodelocaldns, "
                       "the ConfigMaps the controller keeps our names in, exists: forward the "
                       "names to CoreDNS in its Corefile yourself (see "
                       "docs/platforms/node-local-dns.md)")
    return head + (f"and its Corefile ({s.node_local_configmap}) has no hairpin-proxy server "
                   "block covering this host, so it never asks CoreDNS for it: the controller "
                   "writes that block unless it runs with --node-local-dns off; check its "
                   "flags, its log and /readyz, or wait a moment if it has just started")


def _not_updated_advice(s: Situation) -> str:
    unknown = ""
    if s.node_local_dns is True and s.node_local_covered is None:
        unknown = (" (node-local-dns is deployed; whether it sends this name to CoreDNS is "
                   "unknown)")
    return ("the rule exists but DNS still returns the load balancer address"
            f"{_mixed_note(s)}: wait for CoreDNS to reload (up to two minutes) and for "
            f"cached answers to expire, then check again{unknown}")


def _target_leaves_it(s: Situation) -> bool:
    """The hairpin is there, no rule, nothing above explains it, and the target plan is why
    the controller leaves the host alone."""
    return (_no_rule(s) and s.ip_mode_proxy is not True and s.verified is not False
            and s.target in ("no-proxy", "proxy-unknown", "not-found"))


def _redirect_expected(s: Situation) -> bool:
    return (_no_rule(s) and s.ip_mode_proxy is not True and s.verified is not False
            and s.target not in ("no-proxy", "proxy-unknown", "not-found"))


def _flag_hint(key: str) -> str:
    """The --target flag that settles a target key."""
    if key.startswith("gateway/"):
        return f"--target gateway:{key.removeprefix('gateway/')}=NAMESPACE/SERVICE:v1|v2|none"
    if key.startswith("ingressclass/"):
        return f"--target {key.removeprefix('ingressclass/')}=NAMESPACE/SERVICE:v1|v2|none"
    return "--target KEY=NAMESPACE/SERVICE:v1|v2|none"


def _target_advice(head: str) -> Callable[[Situation], str]:
    def advice(s: Situation) -> str:
        why = f" ({s.target_message})" if s.target_message else ""
        hint = _flag_hint(s.target_key)
        if hint.split("=", 1)[0] in s.target_message:
            return f"hairpin confirmed: {head} {s.target_key or 'its target'}{why}"
        return f"hairpin confirmed: {head} {s.target_key or 'its target'}{why}; set {hint}"
    return advice


def _rule_missing_advice(s: Situation) -> str:
    if s.proxy_ready is False:
        return ("hairpin confirmed: hairpin-proxy is installed but no DNS rule for this host "
                "is in effect, and the proxy Service has no ready endpoints: the controller "
                "withdraws every rule while it has none (after --proxy-grace); check the "
                "hairpin-proxy pods")
    return ("hairpin confirmed: hairpin-proxy is installed but no DNS rule (template stanza) "
            "for this host is in effect; check the controller's log and its --hosts-from, "
            "--ingress-class, --domain settings")


def _not_verified_advice(s: Situation) -> str:
    if s.verify_code == "ip-mode-proxy":
        why = ("its public DNS answer is a load balancer that reports ipMode Proxy, so the "
               "controller leaves it alone, yet the hairpin is there: the service proxy "
               "ignores ipMode")
    else:
        why = ("its public DNS does not point at this cluster's load balancer, so the "
               "controller will not redirect it (by design: a tenant's Ingress must not take "
               "over a name that is not this cluster's)")
    detail = f" ({s.verify_reason})" if s.verify_reason else ""
    return (f"hairpin confirmed and no DNS rule is in effect: {why}{detail}; if the cluster "
            "uses split-horizon DNS (inside, the name leads to this cluster; in public DNS, "
            "elsewhere), run the controller with --verify-hosts off")


def _mixed_note(s: Situation) -> str:
    return " (some answers already point at hairpin-proxy)" if s.dns == "mixed" else ""


RULES: tuple[Rule, ...] = (
    Rule("dns-failed", False,
         lambda s: s.dns == "error",
         lambda s: f"the name does not resolve here ({s.dns_error or 'no address'}): check the "
                   "name and this pod's DNS"),
    Rule("not-probed", False,
         lambda s: s.dns != "error" and not s.probed,
         lambda s: "both ports were skipped (--port 0 --tls-port 0): nothing was tested"),
    Rule("fixed", True,
         lambda s: s.via_proxy and s.all_work,
         lambda s: "fixed: resolves to hairpin-proxy, which reaches the ingress controller"),
    Rule("proxy-no-endpoints", False,
         lambda s: s.via_proxy and not s.all_work and s.proxy_ready is False,
         lambda s: "resolves to hairpin-proxy, but its Service has no ready endpoints: check "
                   "the hairpin-proxy pods"),
    Rule("proxy-failing", False,
         lambda s: s.via_proxy and not s.all_work and s.proxy_ready is not False,
         lambda s: "resolves to hairpin-proxy, but requests through it fail "
                   f"({s.seen or 'no answer'}): check the proxy's target and --proxy-protocol "
                   "version against the ingress controller"),
    Rule("node-local-dns-reconciled", False,
         lambda s: _rule_exists(s) and _node_local_reconciled(s),
         lambda s: "the rule exists but DNS still returns the load balancer address"
                   f"{_mixed_note(s)}: node-local-dns answers before CoreDNS, and its "
                   f"ConfigMap {s.node_local_configmap or '(unknown)'} is reconciled by the "
                   "addon manager (addonmanager.kubernetes.io/mode: Reconcile), which reverts "
                   "edits, so the controller cannot keep the names there; see "
                   "docs/platforms/node-local-dns.md for the options"),
    Rule("node-local-dns-missing", False,
         lambda s: _rule_exists(s) and _node_local_missing(s),
         _node_local_missing_advice),
    Rule("coredns-too-old", False,
         lambda s: _rule_exists(s) and _node_local_passed(s) and s.coredns_ok is False,
         lambda s: f"the rule exists but CoreDNS {s.coredns_version or '(unknown)'} predates "
                   "1.5.1, which refuses the rules' empty AAAA answer and so the whole "
                   "Corefile (it keeps running the previous one): upgrade CoreDNS"),
    Rule("coredns-no-reload", False,
         lambda s: (_rule_exists(s) and _node_local_passed(s)
                    and s.coredns_ok is not False and s.reload is False),
         lambda s: "the rule exists but the Corefile has no reload plugin, so CoreDNS never "
                   "read it: add reload or restart CoreDNS (kubectl -n kube-system rollout "
                   "restart deployment coredns)"),
    Rule("dns-not-updated", False,
         lambda s: (_rule_exists(s) and _node_local_passed(s)
                    and s.coredns_ok is not False and s.reload is not False),
         _not_updated_advice),
    Rule("ipmode-ignored", False,
         lambda s: _no_rule(s) and s.ip_mode_proxy is True,
         lambda s: "hairpin confirmed although the load balancer reports ipMode Proxy: the "
                   "service proxy (a kube-proxy replacement?) ignores ipMode; install "
                   "hairpin-proxy or fix the service proxy"),
    Rule("not-this-cluster", False,
         lambda s: _no_rule(s) and s.ip_mode_proxy is not True and s.verified is False,
         _not_verified_advice),
    Rule("target-proxy-mismatch", False,
         lambda s: _target_leaves_it(s) and s.target == "no-proxy",
         _target_advice("the controller leaves the host alone because its data plane reads as "
                        "expecting no PROXY header, yet it answers only with one: check the "
                        "PROXY setting of")),
    Rule("target-proxy-unknown", False,
         lambda s: _target_leaves_it(s) and s.target == "proxy-unknown",
         _target_advice("the controller leaves the host alone because it cannot tell whether "
                        "the data plane expects the PROXY protocol, for")),
    Rule("target-not-found", False,
         lambda s: _target_leaves_it(s) and s.target == "not-found",
         _target_advice("the controller leaves the host alone because it found no data-plane "
                        "Service for")),
    Rule("over-limit", False,
         lambda s: _redirect_expected(s) and s.proxy_installed is True and bool(s.refused),
         lambda s: f"hairpin confirmed: the controller writes no DNS rule for this host, a "
                   f"size limit refused what asks for it ({s.refused}); raise that limit, or "
                   "make room (see docs/runbooks.md, HairpinControllerHostsRejected)"),
    Rule("rule-missing", False,
         lambda s: _redirect_expected(s) and s.proxy_installed is True and not s.refused,
         _rule_missing_advice),
    Rule("hairpin-confirmed", False,
         lambda s: _redirect_expected(s) and s.proxy_installed is not True,
         lambda s: "hairpin confirmed and not fixed: install hairpin-proxy"),
    Rule("target-no-proxy", True,
         lambda s: s.not_via_proxy and s.all_work and s.target == "no-proxy",
         lambda s: f"works, and needs no fix: the data plane of {s.target_key or 'its target'} "
                   "expects no PROXY header, so the host does not hairpin-break and the "
                   "controller does not redirect it"),
    Rule("not-needed-ipmode", True,
         lambda s: (s.not_via_proxy and s.all_work and s.target != "no-proxy"
                    and s.ip_mode_proxy is True),
         lambda s: "not needed: the load balancer reports ipMode Proxy, so traffic goes "
                   "through it"),
    Rule("not-needed-hostname", True,
         lambda s: (s.not_via_proxy and s.all_work and s.target != "no-proxy"
                    and s.ip_mode_proxy is not True and s.hostname_only is True),
         lambda s: "not needed: the load balancer publishes a hostname, so traffic goes "
                   "through it"),
    Rule("works", True,
         lambda s: (s.not_via_proxy and s.all_work and s.target != "no-proxy"
                    and s.ip_mode_proxy is not True and s.hostname_only is not True),
         lambda s: "works: requests get an answer without a PROXY header on this path"),
    Rule("unreachable", False,
         lambda s: s.not_via_proxy and not s.hairpin and not s.all_work,
         lambda s: f"neither a bare request nor one with a PROXY header was answered "
                   f"({s.seen or 'nothing seen'}): check that something serves this host "
                   "on these ports"),
)

CODES: tuple[str, ...] = tuple(r.code for r in RULES)


def decide(s: Situation) -> Verdict:
    """The verdict of the first (and, by construction, only) rule whose condition holds."""
    for rule in RULES:
        if rule.when(s):
            # One line whatever the facts' text holds (resolver messages, probe details).
            return Verdict(rule.code, rule.ok, " ".join(rule.advice(s).split()))
    # Unreachable by construction (tested); kept so a gap shows as a verdict, not a crash.
    return Verdict("unclassified", False, "the doctor could not classify these facts")


def port_state(probe: PortProbe | None) -> Port:
    if probe is None:
        return "skipped"
    if probe.bare.answered:
        return "works"
    if probe.v1.answered or probe.v2.answered:
        return "hairpin"
    return "fails"


def dns_state(facts: HostFacts) -> Dns:
    kinds = facts.kinds
    if not facts.resolution.addresses:
        return "error"
    if kinds and all(k == "proxy" for k in kinds):
        return "proxy"
    if "proxy" in kinds:
        return "mixed"
    if "lb" in kinds:
        return "lb"
    return "other"


def seen(facts: HostFacts) -> str:
    """What the failing probes saw, one clause per port."""
    parts = []
    for probe in (facts.http, facts.tls):
        if probe is None or probe.bare.answered:
            continue
        parts.append(f"{probe.scheme} {probe.port}: bare {probe.bare.describe()}, "
                     f"PROXY v1 {probe.v1.describe()}, v2 {probe.v2.describe()}")
    return "; ".join(parts)


def summarize(facts: HostFacts) -> Situation:
    c = facts.cluster
    lb = facts.lb
    rule = None
    if c is not None and c.rule_hosts is not None:
        rule = rule_covers(facts.host, c.rule_hosts)
    ip_mode_proxy = None
    hostname_only = None
    if lb is not None:
        modes = {e.ip_mode for e in lb.entries}
        ip_mode_proxy = "Proxy" in modes
        hostname_only = lb.hostname_only
    elif c is not None and c.lb_services is not None and not c.lb_services:
        # No LoadBalancer Service at all: none can report ipMode Proxy or a hostname.
        ip_mode_proxy = hostname_only = False
    version = ""
    if c is not None and c.coredns_version is not None:
        version = ".".join(map(str, c.coredns_version))
    ready = None
    if c is not None and c.proxy_ready_endpoints is not None:
        ready = c.proxy_ready_endpoints > 0
    check = facts.verification
    if ip_mode_proxy is None and check is not None and check.code == "ip-mode-proxy":
        # The load balancer the public answer leads to reports ipMode Proxy.
        ip_mode_proxy = True
    node_local = covered = None
    if c is not None:
        node_local = c.node_local_dns
        if node_local is None and c.node_local_configmap is not None:
            # The DaemonSet could not be looked for (the controller's Role reads none); its
            # ConfigMap, under the names the controller edits, says it is there.
            node_local = True
        if c.node_local_zones is not None:
            covered = zone_covers(facts.host, c.node_local_zones)
    return Situation(
        dns=dns_state(facts), http=port_state(facts.http), tls=port_state(facts.tls),
        rule=rule,
        proxy_installed=None if c is None else c.proxy_service_found,
        proxy_ready=ready,
        ip_mode_proxy=ip_mode_proxy, hostname_only=hostname_only,
        node_local_dns=node_local,
        node_local_reconciled=None if c is None else c.node_local_reconciled,
        node_local_covered=covered,
        coredns_ok=None if c is None else c.coredns_ok,
        reload=None if c is None else c.reload_plugin,
        verified=None if check is None else check.redirect,
        dns_error=facts.resolution.error, seen=seen(facts), coredns_version=version,
        node_local_configmap="" if c is None else c.node_local_configmap or "",
        verify_code="" if check is None else check.code,
        verify_reason="" if check is None else check.reason,
        target=None if facts.target is None else _TARGET_STATE[facts.target.verdict],
        target_key="" if facts.target is None else facts.target.key,
        target_message="" if facts.target is None else facts.target.message,
        refused="" if facts.target is None else facts.target.refused,
    )


_TARGET_STATE: dict[str, TargetState] = {
    "redirected": "redirected", "target-no-proxy": "no-proxy",
    "target-proxy-unknown": "proxy-unknown", "target-not-found": "not-found"}


def verdict(facts: HostFacts) -> Verdict:
    return decide(summarize(facts))
