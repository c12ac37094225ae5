"""Traefik IngressRoutes, pure: match rules (v2 and v3 syntax), claims, the data plane and
its PROXY setting (hairpin_proxy.sources.traefik)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hairpin_proxy.claims import ObjectRef
from hairpin_proxy.policy import HostPolicy
from hairpin_proxy.sources import traefik
from hairpin_proxy.sources.registry import DECLARED_KINDS
from hairpin_proxy.targets.discovery import DataPlane
from hairpin_proxy.targets.model import KeyParts, parse_key
from hairpin_proxy.targets.resolve import TargetFacts, resolve

LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)
NAME = st.builds(lambda parts, tld: ".".join([*parts, tld]),
                 st.lists(LABEL, min_size=1, max_size=3), st.sampled_from(["com", "org", "io"]))


def quote(value: str, style: str) -> str:
    return f"`{value}`" if style == "`" else '"' + value.replace("\\", "\\\\").replace(
        '"', '\\"') + '"'


# ------------------------------------------------------------------ rules as expression trees

@dataclass(frozen=True)
class M:
    name: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class Not:
    inner: Any


@dataclass(frozen=True)
class Op:
    op: str
    left: Any
    right: Any


def render(node: Any, style: str, space: str) -> str:
    if isinstance(node, M):
        return f"{node.name}({f',{space}'.join(quote(v, style) for v in node.values)})"
    if isinstance(node, Not):
        return f"!{space}({render(node.inner, style, space)})"
    return (f"({render(node.left, style, space)}{space}{node.op}{space}"
            f"{render(node.right, style, space)})")


def expected(node: Any, negated: bool = False) -> list[str]:
    if isinstance(node, M):
        return [v for v in node.values] if node.name == "Host" and not negated else []
    if isinstance(node, Not):
        return expected(node.inner, not negated)
    return expected(node.left, negated) + expected(node.right, negated)


LEAF = st.one_of(
    st.builds(M, st.just("Host"), st.lists(NAME, min_size=1, max_size=3).map(tuple)),
    st.builds(M, st.sampled_from(["PathPrefix", "Path", "Method"]),
              st.tuples(st.sampled_from(["/", "/api", "GET"]))),
    st.builds(M, st.just("Header"), st.tuples(st.just("X-Env"), st.just("a b"))))
TREE = st.recursive(LEAF, lambda inner: st.one_of(
    st.builds(Not, inner),
    st.builds(Op, st.sampled_from(["&&", "||"]), inner, inner)), max_leaves=8)


@given(TREE, st.sampled_from(["`", '"']), st.sampled_from(["", " ", "  \t"]))
def test_every_host_under_no_negation_is_claimed(tree: Any, style: str, space: str) -> None:
    found = traefik.rule_hosts(render(tree, style, space))
    assert found.hosts == tuple(dict.fromkeys(expected(tree)))
    negated = [r for r in found.refused if r[0].startswith("!Host(")]
    assert all("negated" in why for _, why in negated)
    # Only negated Host matchers are told: nothing else of these rules is refused.
    assert len(found.refused) == len(negated)


@given(st.lists(NAME, min_size=1, max_size=5), st.sampled_from(["`", '"']))
def test_v3_one_host_per_matcher_joined_by_or(hosts: list[str], style: str) -> None:
    rule = " || ".join(f"Host({quote(h, style)})" for h in hosts)
    assert traefik.rule_hosts(rule) == traefik.RuleHosts(tuple(dict.fromkeys(hosts)), ())


@given(st.text(max_size=60))
def test_any_text_gives_hosts_or_a_reason_never_an_exception(rule: str) -> None:
    found = traefik.rule_hosts(rule)
    assert all(h == h.lower() for h in found.hosts)
    assert all(why for _, why in found.refused)
    # A rule that cannot be read claims nothing at all.
    if any(why.startswith("the match rule cannot be read") for _, why in found.refused):
        assert found.hosts == () and len(found.refused) == 1


@given(NAME)
def test_hostregexp_of_a_plain_name_is_that_name(name: str) -> None:
    escaped = name.replace(".", "\\.")
    for pattern in (name, escaped, f"^{escaped}$", f"^{name}$"):
        assert traefik.plain_name(pattern) == name
        assert traefik.rule_hosts(f"HostRegexp(`{pattern}`)").hosts == (name,)


@pytest.mark.parametrize("pattern", [
    "{subdomain:[a-z]+}.example.com",      # v2 template
    "^[a-z]+\\.example\\.com$",            # v3 regular expression
    ".+", "^(a|b)\\.example\\.com$", "a+.example.com", "example\\.(com|org)",
])
def test_hostregexp_of_a_pattern_is_refused(pattern: str) -> None:
    found = traefik.rule_hosts(f"HostRegexp(`{pattern}`)")
    assert found.hosts == ()
    ((what, why),) = found.refused
    assert what == f"HostRegexp(`{pattern}`)" and "regular expression" in why


@pytest.mark.parametrize("rule,hosts,refused", [
    ("Host(`A.Example.com`)", ("a.example.com",), ()),
    ('Host("a.example.com") && PathPrefix(`/api`)', ("a.example.com",), ()),
    ("Host(`a.example.com`, `b.example.com`)", ("a.example.com", "b.example.com"), ()),
    ("Host(`*.example.com`)", ("*.example.com",), ()),
    ("Host(`**.example.com`)", (), ("Host(`**.example.com`)",)),
    ("HostSNI(`a.example.com`)", (), ("HostSNI(`a.example.com`)",)),
    ("HostSNIRegexp(`^a$`)", (), ("HostSNIRegexp(`^a$`)",)),
    ("PathPrefix(`/`)", (), ()),
    ("host(`a.example.com`)", ("a.example.com",), ()),
    ("Host(`a.example.com`) && !Host(`b.example.com`)", ("a.example.com",),
     ("!Host(`b.example.com`)",)),
    ("!!Host(`a.example.com`)", ("a.example.com",), ()),
])
def test_rule_table(rule: str, hosts: tuple[str, ...], refused: tuple[str, ...]) -> None:
    found = traefik.rule_hosts(rule)
    assert found.hosts == hosts
    assert tuple(what for what, _ in found.refused) == refused


@pytest.mark.parametrize("rule", [
    "", "Host(", "Host(`a.example.com`", "Host('a.example.com')", "Host(`a`) &&",
    "Host(`a`) Host(`b`)", "(Host(`a`)", "Host(`a`))", 'Host("a\\q")', "&& Host(`a`)",
    "Host(a.example.com)",
])
def test_unreadable_rules_are_refused_whole(rule: str) -> None:
    found = traefik.rule_hosts(rule)
    assert found.hosts == ()
    ((what, why),) = found.refused
    assert what == rule and why.startswith("the match rule cannot be read")


def test_quoted_values_are_go_strings() -> None:
    assert traefik.matchers('Header("X-A", "say \\"hi\\"")')[0].values == ("X-A", 'say "hi"')
    assert traefik.matchers("Header(`X-A`, `a\\nb`)")[0].values == ("X-A", "a\\nb")


# ------------------------------------------------------------------ objects and claims

def route(name: str = "web", match: str = "Host(`a.example.com`)", *, tls: Any = None,
          namespace: str = "shop", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"routes": [{"match": match, "kind": "Rule"}], **spec}
    if tls is not None:
        body["tls"] = tls
    return {"apiVersion": "traefik.io/v1alpha1", "kind": "IngressRoute",
            "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{name}",
                         "creationTimestamp": "2026-01-01T00:00:00Z",
                         "annotations": {"other": "x"}},
            "spec": body}


def test_claims_carry_the_full_object_reference() -> None:
    found = traefik.claims_of([("traefik.io", route(tls={}))], HostPolicy())
    (claim,) = found.claims
    assert claim.origin == ObjectRef("IngressRoute", "shop", "web", "uid-web", "traefik.io")
    assert (claim.host, claim.target, claim.created) == (
        "a.example.com", "traefik/default", "2026-01-01T00:00:00Z")


@pytest.mark.parametrize("hosts_from,tls,hosts", [
    ("tls", None, ()),
    ("tls", {}, ("a.example.com",)),
    ("tls", {"domains": [{"main": "m.example.com", "sans": ["s.example.com"]}]},
     ("a.example.com", "m.example.com", "s.example.com")),
    ("rules", None, ("a.example.com",)),
    ("rules", {"domains": [{"main": "m.example.com"}]}, ("a.example.com",)),
    ("all", {"domains": [{"main": "m.example.com"}]}, ("a.example.com", "m.example.com")),
])
def test_hosts_from_reads_ingressroutes_as_it_reads_ingresses(
        hosts_from: str, tls: Any, hosts: tuple[str, ...]) -> None:
    found = traefik.claims_of([("traefik.io", route(tls=tls))],
                              HostPolicy(hosts_from=hosts_from))
    assert tuple(c.host for c in found.claims) == hosts


def test_policy_and_rule_refusals_are_rejections_on_the_route() -> None:
    obj = route(match="Host(`a.example.com`) || Host(`localhost`) || HostRegexp(`.+`)", tls={})
    found = traefik.claims_of([("traefik.containo.us", obj)],
                              HostPolicy(exclude_namespaces=("other",)))
    assert [c.host for c in found.claims] == ["a.example.com"]
    refs = {r.ref for r in found.rejections}
    assert refs == {ObjectRef("IngressRoute", "shop", "web", "uid-web", "traefik.containo.us")}
    assert {r.host for r in found.rejections} == {"localhost", "HostRegexp(`.+`)"}
    assert traefik.claims_of([("traefik.io", obj)],
                             HostPolicy(exclude_namespaces=("shop",))).claims == ()


@pytest.mark.parametrize("spec,annotations,key", [
    ({}, {}, "traefik/default"),
    ({"ingressClassName": "traefik-internal"}, {}, "traefik/traefik-internal"),
    ({}, {"kubernetes.io/ingress.class": "edge"}, "traefik/edge"),
    ({"ingressClassName": "Not A Name"}, {}, "traefik/default"),
])
def test_target_key(spec: dict[str, Any], annotations: dict[str, str], key: str) -> None:
    obj = route(**spec)
    obj["metadata"]["annotations"] = annotations
    assert traefik.target_key(obj) == key
    assert parse_key(key) == KeyParts("traefik", "", key.split("/")[1])


def test_slim_keeps_what_claims_read() -> None:
    obj = route(tls={"secretName": "s", "domains": [{"main": "m.example.com"}]},
                entryPoints=["websecure"])
    obj["metadata"]["annotations"]["kubernetes.io/ingress.class"] = "edge"
    obj["spec"]["routes"][0]["services"] = [{"name": "web", "port": 80}]
    slim = traefik.slim_ingressroute(obj)
    assert slim["spec"] == {"entryPoints": ["websecure"],
                            "routes": [{"match": "Host(`a.example.com`)", "kind": "Rule"}],
                            "tls": {"domains": [{"main": "m.example.com"}]}}
    assert slim["metadata"]["annotations"] == {"kubernetes.io/ingress.class": "edge"}
    policy = HostPolicy()
    assert traefik.claims_of([("traefik.io", slim)], policy) == traefik.claims_of(
        [("traefik.io", obj)], policy)


def test_preferred_group() -> None:
    new, old = route("new"), route("old")
    assert traefik.preferred({"traefik.io": [new], "traefik.containo.us": [old]}) == [
        ("traefik.io", new)]
    assert traefik.preferred({"traefik.containo.us": [old]}) == [("traefik.containo.us", old)]
    # Served but empty: still the group Traefik reads.
    assert traefik.preferred({"traefik.io": [], "traefik.containo.us": [old]}) == []


# ------------------------------------------------------------------ data plane and PROXY

@pytest.mark.parametrize("args,out", [
    (["--entryPoints.web.proxyProtocol.trustedIPs=10.0.0.0/8"], {"web": True}),
    (["--entrypoints.WebSecure.proxyprotocol.trustedips=10.0.0.0/8,127.0.0.1"],
     {"websecure": True}),
    (["--entryPoints.web.proxyProtocol.trustedIPs="], {"web": False}),
    (["--entryPoints.web.proxyProtocol.insecure"], {"web": True}),
    (["--entryPoints.web.proxyProtocol.insecure=false"], {"web": False}),
    (["--entryPoints.web.address=:8000", "--providers.kubernetescrd", 7], {}),
])
def test_proxy_entry_points(args: list[object], out: dict[str, bool]) -> None:
    assert traefik.proxy_entry_points(args) == out


def svc(namespace: str = "traefik", name: str = "traefik", **labels: str) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name,
                         "labels": {"app.kubernetes.io/name": "traefik", **labels}},
            "spec": {"type": "LoadBalancer", "clusterIPs": ["10.43.0.10"],
                     "ports": [{"name": "web", "port": 80, "targetPort": "web"},
                               {"name": "websecure", "port": 443,
                                "targetPort": "websecure"}]}}


def dep(*args: str, namespace: str = "traefik") -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": "traefik"},
            "spec": {"template": {"spec": {"containers": [{"name": "traefik",
                                                           "args": list(args)}]}}}}


ON = "--entryPoints.{}.proxyProtocol.trustedIPs=10.42.0.0/16"


@pytest.mark.parametrize("deployments,readable,mode,words", [
    ([dep(ON.format("web"), ON.format("websecure"))], True, "v2", "entryPoints web, websecure"),
    ([dep()], True, "none", "no proxyProtocol"),
    ([dep(ON.format("web"))], True, "unknown", "on web only"),
    ([], True, "unknown", "no Deployment traefik/traefik"),
    ([dep(namespace="other")], True, "unknown", "no Deployment"),
    ([dep(ON.format("web"), ON.format("websecure"))], False, "unknown", "may not read"),
])
def test_detect(deployments: list[dict[str, Any]], readable: bool, mode: str,
                words: str) -> None:
    got = traefik.detect(svc(), deployments, readable)
    assert got.mode == mode and words in got.reason


def test_resolve_through_the_registry() -> None:
    facts = TargetFacts(services=[svc()], kinds=DECLARED_KINDS,
                        extra={"traefik-ingressroute/deployments": [
                            dep(ON.format("web"), ON.format("websecure"))]})
    target = resolve("traefik/default", facts, {})
    assert getattr(target, "service", None) == "traefik/traefik"
    assert getattr(target, "proxy", None) == "v2"
    unknown = resolve("traefik/default", TargetFacts(services=[svc()], kinds=DECLARED_KINDS),
                      {})
    assert getattr(unknown, "problem", None) == "target-proxy-unknown"
    assert "--target traefik:default=NAMESPACE/SERVICE" in getattr(unknown, "message", "")
    assert getattr(unknown, "service", None) == "traefik/traefik"


def test_find_service_by_class_or_label() -> None:
    internal = svc("edge", "traefik-internal", **{"app.kubernetes.io/instance": "int-edge"})
    public = svc()
    classes: dict[str, dict[str, Any]] = {"internal": {"metadata": {"name": "internal", "labels": {
        "app.kubernetes.io/instance": "int-edge"}},
        "spec": {"controller": "traefik.io/ingress-controller"}},
        "nginx": {"metadata": {"name": "nginx"}, "spec": {"controller": "k8s.io/ingress-nginx"}}}
    found = traefik.find_service(KeyParts("traefik", "", "internal"), [public, internal],
                                 classes)
    assert isinstance(found, DataPlane) and found.service == "edge/traefik-internal"
    assert traefik.find_service(KeyParts("traefik", "", "nginx"), [public], classes) is None
    default = traefik.find_service(KeyParts("traefik", "", "default"), [internal, public], {})
    assert default is not None and "first of 2" in default.found_by
    assert traefik.find_service(KeyParts("traefik", "", "default"), [], {}) is None


@pytest.mark.parametrize("deployments,unreadable,route", [
    ([dep(ON.format("web"), ON.format("websecure"))], frozenset(), "default"),
    ([dep(ON.format("web"))], frozenset(), "default"),     # unknown: the main listeners
    ([], frozenset({"deployments"}), "default"),           # unknown: the main listeners
    ([dep()], frozenset(), None),                           # none: left alone
])
def test_traefik_as_the_proxys_own_target_server(deployments: list[dict[str, Any]],
                                                 unreadable: frozenset[str],
                                                 route: str | None) -> None:
    from hairpin_proxy.targets.routing_plan import plan

    found = traefik.claims_of([("traefik.io", route_tls())], HostPolicy())
    facts = TargetFacts(services=[svc("kube-system")], default_service="kube-system/traefik",
                        unreadable=unreadable, kinds=DECLARED_KINDS,
                        extra={traefik.DEPLOYMENTS: [{**d, "metadata": {
                            "namespace": "kube-system", "name": "traefik"}}
                            for d in deployments]})
    p = plan(found.claims, facts, {}, {}, 10)
    assert p.routes.get("a.example.com") == route
    assert p.slots == {}


def test_elsewhere_an_unknown_traefik_is_not_the_default() -> None:
    from hairpin_proxy.targets.routing_plan import plan

    found = traefik.claims_of([("traefik.io", route_tls())], HostPolicy())
    facts = TargetFacts(services=[svc()], default_service="ingress-nginx/ingress-nginx",
                        unreadable=frozenset({"deployments"}), kinds=DECLARED_KINDS)
    p = plan(found.claims, facts, {}, {}, 10)
    assert "a.example.com" not in p.routes
    assert p.excluded["a.example.com"].problem == "target-proxy-unknown"


def route_tls() -> dict[str, Any]:
    return route(tls={})
