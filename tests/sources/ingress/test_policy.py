"""Ingress policy: Ingress selection, evaluate() and its merge, class existence, host limit."""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.policy import HostPolicy, PolicyResult, Rejection, check_host
from hairpin_proxy.sources.ingress.policy import (
    ClassIndex,
    class_index,
    default_ingress_classes,
    evaluate,
    evaluate_ingress,
    ingress_matches,
    merge,
)
from tests.test_policy import POLICY, host_like


def ingress(name: str = "web", namespace: str | None = "default", *,
            tls: Any = None, rules: Any = None, cls: str | None = None,
            annotation: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if annotation is not None:
        meta["annotations"] = {"kubernetes.io/ingress.class": annotation}
    spec: dict[str, Any] = {}
    if tls is not None:
        spec["tls"] = tls
    if rules is not None:
        spec["rules"] = rules
    if cls is not None:
        spec["ingressClassName"] = cls
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta,
            "spec": spec}


def tls_ingress(*hosts: object, **kw: Any) -> dict[str, Any]:
    return ingress(tls=[{"hosts": list(hosts), "secretName": "cert"}], **kw)


def ingress_class(name: str, default: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if default:
        meta["annotations"] = {"ingressclass.kubernetes.io/is-default-class": "true"}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": meta,
            "spec": {"controller": "k8s.io/ingress-nginx"}}


# --------------------------------------------------------------------------- selection

NGINX_DEFAULT = [ingress_class("nginx", default=True), ingress_class("traefik")]
NO_DEFAULT = [ingress_class("nginx"), ingress_class("traefik")]


@pytest.mark.parametrize(("selected", "classes", "spec_class", "annotation", "matches"), [
    ((), NO_DEFAULT, None, None, True),
    ((), NO_DEFAULT, "traefik", None, True),
    (("nginx",), NO_DEFAULT, "nginx", None, True),
    (("nginx",), NO_DEFAULT, "traefik", None, False),
    (("nginx",), NO_DEFAULT, None, "nginx", True),
    (("nginx",), NO_DEFAULT, None, "traefik", False),
    (("nginx",), NO_DEFAULT, None, None, False),
    (("nginx",), NGINX_DEFAULT, None, None, True),
    (("traefik",), NGINX_DEFAULT, None, None, False),
    (("nginx", "traefik"), NGINX_DEFAULT, "traefik", None, True),
    (("nginx",), NGINX_DEFAULT, "traefik", None, False),
    (("nginx",), NGINX_DEFAULT, "", None, True),  # empty class name = no class
    (("nginx",), [], None, None, False),
])
def test_class_matrix(selected: tuple[str, ...], classes: list[dict[str, Any]],
                      spec_class: str | None, annotation: str | None, matches: bool) -> None:
    policy = HostPolicy(ingress_classes=selected)
    ing = tls_ingress("a.example.com", cls=spec_class, annotation=annotation)
    result = evaluate([ing], classes, policy)
    assert result.hosts == (("a.example.com",) if matches else ())
    defaults = frozenset(c["metadata"]["name"] for c in classes
                         if c["metadata"].get("annotations"))
    assert ingress_matches(ing, policy, class_index(classes)) is matches
    assert class_index(classes).defaults == defaults == default_ingress_classes(classes)
    # The bare set of defaults (the older form) checks no class for existence.
    assert ingress_matches(ing, policy, defaults) is matches


def test_default_class_annotation_must_be_exactly_true() -> None:
    odd = ingress_class("nginx")
    odd["metadata"]["annotations"] = {"ingressclass.kubernetes.io/is-default-class": "yes"}
    policy = HostPolicy(ingress_classes=("nginx",))
    assert evaluate([tls_ingress("a.example.com")], [odd], policy).hosts == ()


@pytest.mark.parametrize(("include", "exclude", "namespace", "matches"), [
    ((), (), "team-a", True),
    (("team-a",), (), "team-a", True),
    (("team-a",), (), "team-b", False),
    ((), ("team-a",), "team-a", False),
    ((), ("team-a",), "team-b", True),
    (("team-a",), ("team-a",), "team-a", False),
    (("default",), (), None, True),  # no namespace in the manifest: "default"
    ((), ("default",), None, False),
])
def test_namespace_matrix(include: tuple[str, ...], exclude: tuple[str, ...],
                          namespace: str | None, matches: bool) -> None:
    policy = HostPolicy(include_namespaces=include, exclude_namespaces=exclude)
    result = evaluate([tls_ingress("a.example.com", namespace=namespace)], [], policy)
    assert result.hosts == (("a.example.com",) if matches else ())
    assert ingress_matches(tls_ingress("a.example.com", namespace=namespace), policy,
                           frozenset()) is matches


def test_filtered_out_ingresses_produce_no_rejections() -> None:
    policy = HostPolicy(exclude_namespaces=("evil",))
    result = evaluate([tls_ingress("10.0.0.1", namespace="evil")], [], policy)
    assert result == PolicyResult((), (), {})


@pytest.mark.parametrize(("hosts_from", "expected"), [
    ("tls", ("a.example.com", "b.example.com")),
    ("rules", ("b.example.com", "c.example.com")),
    ("all", ("a.example.com", "b.example.com", "c.example.com")),
])
def test_hosts_from(hosts_from: str, expected: tuple[str, ...]) -> None:
    ing = ingress(tls=[{"hosts": ["a.example.com", "b.example.com"]}],
                  rules=[{"host": "b.example.com"}, {"host": "c.example.com"},
                         {"http": {"paths": []}}, {"host": ""}, {"host": None}])
    result = evaluate([ing], [], HostPolicy(hosts_from=hosts_from))
    assert result.hosts == expected
    assert result.rejections == ()


# --------------------------------------------------------------------------- evaluate

def test_evaluate_normalizes_sorts_and_deduplicates() -> None:
    ings = [
        tls_ingress("B.example.com", "a.example.com.", "*.Example.com", name="one"),
        tls_ingress("a.example.com", "b.example.com", name="two", namespace="other"),
        ingress(name="three", tls=[{"hosts": ["a.example.com"]}, {"hosts": ["A.EXAMPLE.COM"]}]),
    ]
    result = evaluate(ings, [], POLICY)
    assert result.hosts == ("*.example.com", "a.example.com", "b.example.com")
    assert result.rejections == ()
    assert dict(result.sources) == {
        "*.example.com": ("default/one",),
        "a.example.com": ("default/one", "default/three", "other/two"),
        "b.example.com": ("default/one", "other/two"),
    }


def test_bad_hosts_are_rejected_with_their_ingress_and_good_ones_kept() -> None:
    ings = [
        tls_ingress("good.example.com", "kubernetes.default.svc.cluster.local", "10.0.0.1",
                    name="mixed", namespace="team"),
        tls_ingress("also-good.example.com", 7, name="odd", namespace="team"),
    ]
    result = evaluate(ings, [], POLICY)
    assert result.hosts == ("also-good.example.com", "good.example.com")
    assert result.rejections == (
        Rejection("team", "mixed", "kubernetes.default.svc.cluster.local",
                  "at or under the cluster domain cluster.local"),
        Rejection("team", "mixed", "10.0.0.1", "IP address, not a DNS name"),
        Rejection("team", "odd", "7", "not a string (int)"),
    )
    assert str(result.rejections[1]) == "team/mixed: host 10.0.0.1: IP address, not a DNS name"


def test_rejected_hosts_are_shown_log_safe() -> None:
    result = evaluate([tls_ingress("a.com\nrewrite name exact x y", "x" * 1000 + ".com")], [],
                      POLICY)
    shown = [r.host for r in result.rejections]
    assert shown[0] == repr("a.com\nrewrite name exact x y")
    assert "\n" not in shown[0]
    assert len(shown[1]) <= 125 and shown[1].endswith("…")


def test_domain_mismatches_are_ignored_not_rejected() -> None:
    policy = HostPolicy(domains=("example.com",))
    result = evaluate([tls_ingress("a.example.com", "a.example.org", "10.0.0.1")], [], policy)
    assert result.hosts == ("a.example.com",)
    assert [r.host for r in result.ignored] == ["a.example.org"]
    assert [r.host for r in result.rejections] == ["10.0.0.1"]


MALFORMED: list[tuple[Any, str]] = [
    (None, "malformed Ingress: not an object"),
    ("Ingress", "malformed Ingress: not an object"),
    ([], "malformed Ingress: not an object"),
    ({"metadata": None}, "malformed Ingress: metadata is not an object"),
    ({}, "malformed Ingress: metadata is not an object"),
    ({"metadata": ["x"]}, "malformed Ingress: metadata is not an object"),
    ({"metadata": {"name": "x", "namespace": 5}, "spec": {}},
     "malformed Ingress: metadata.namespace is not a string"),
    ({"metadata": {"name": "x"}}, "malformed Ingress: spec is not an object"),
    ({"metadata": {"name": "x"}, "spec": None}, "malformed Ingress: spec is not an object"),
    ({"metadata": {"name": "x"}, "spec": "tls"}, "malformed Ingress: spec is not an object"),
    ({"metadata": {"name": "x"}, "spec": {"tls": "a.com"}},
     "malformed Ingress: spec.tls is not a list"),
    ({"metadata": {"name": "x"}, "spec": {"tls": {"hosts": ["a.com"]}}},
     "malformed Ingress: spec.tls is not a list"),
    ({"metadata": {"name": "x"}, "spec": {"tls": ["a.com"]}},
     "malformed Ingress: spec.tls[0] is not an object"),
    ({"metadata": {"name": "x"}, "spec": {"tls": [{"hosts": "a.example.com"}]}},
     "malformed Ingress: spec.tls[0].hosts is not a list"),
    ({"metadata": {"name": "x"}, "spec": {"tls": [None]}},
     "malformed Ingress: spec.tls[0] is not an object"),
]


@pytest.mark.parametrize(("obj", "reason"), MALFORMED)
def test_malformed_objects_become_rejections(obj: Any, reason: str) -> None:
    good = tls_ingress("good.example.com", name="good")
    bad_classes: list[Any] = [None, "x", {"metadata": None}]
    result = evaluate([obj, good], bad_classes, POLICY)
    assert result.hosts == ("good.example.com",)
    assert [r.reason for r in result.rejections] == [reason]


def test_malformed_rules_with_hosts_from_rules() -> None:
    objs: list[Any] = [
        {"metadata": {"name": "a"}, "spec": {"rules": "x"}},
        {"metadata": {"name": "b"}, "spec": {"rules": [7, {"host": ["a.com"]}]}},
    ]
    result = evaluate(objs, [], HostPolicy(hosts_from="rules"))
    assert [r.reason for r in result.rejections] == [
        "malformed Ingress: spec.rules is not a list",
        "malformed Ingress: spec.rules[0] is not an object",
        "not a string (list)",
    ]


def test_malformed_entries_are_named_by_their_index() -> None:
    obj: Any = {"metadata": {"name": "a"},
                "spec": {"tls": [None, {"hosts": "b.example.com"}, {"hosts": ["c.example.com"]}],
                         "rules": [{"host": "d.example.com"}, "x"]}}
    result = evaluate([obj], [], HostPolicy(hosts_from="all"))
    assert result.hosts == ("c.example.com", "d.example.com")
    assert [r.reason for r in result.rejections] == [
        "malformed Ingress: spec.tls[0] is not an object",
        "malformed Ingress: spec.tls[1].hosts is not a list",
        "malformed Ingress: spec.rules[1] is not an object",
    ]


def test_absent_tls_is_not_a_defect() -> None:
    result = evaluate([ingress(rules=[{"host": "a.example.com"}]),
                       ingress(tls=[{"secretName": "x"}])], [], POLICY)
    assert result == PolicyResult((), (), {})


def test_evaluate_accepts_generators_and_iterates_once() -> None:
    ings = (tls_ingress(f"h{i}.example.com", name=f"i{i}") for i in range(3))
    classes = iter([ingress_class("nginx", default=True)])
    result = evaluate(ings, classes, HostPolicy(ingress_classes=("nginx",)))
    assert result.hosts == ("h0.example.com", "h1.example.com", "h2.example.com")



json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True)
    | st.text(max_size=12) | st.sampled_from(["a.example.com", "10.0.0.1", "*.x.org", ""]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["metadata", "spec", "tls", "hosts", "rules", "host", "name",
                         "namespace", "annotations", "ingressClassName",
                         "kubernetes.io/ingress.class",
                         "ingressclass.kubernetes.io/is-default-class", "x"]),
        children, max_size=5),
    max_leaves=30)


@given(st.lists(json_like, max_size=6), st.lists(json_like, max_size=3),
       st.sampled_from(["tls", "rules", "all"]), st.booleans())
@settings(max_examples=400)
def test_evaluate_never_raises_on_arbitrary_objects(
        ingresses: list[Any], classes: list[Any], hosts_from: str, with_class: bool) -> None:
    policy = HostPolicy(hosts_from=hosts_from,
                        ingress_classes=("nginx",) if with_class else ())
    result = evaluate(ingresses, classes, policy)
    assert list(result.hosts) == sorted(set(result.hosts))
    for host in result.hosts:
        assert check_host(host, policy) == (host, None)
        assert result.sources[host]
    for rej in result.rejections:
        assert rej.reason


@given(st.lists(json_like | st.builds(tls_ingress, host_like, host_like), max_size=6),
       st.lists(json_like, max_size=3), st.sampled_from(["tls", "rules", "all"]),
       st.booleans(), st.lists(st.sampled_from(["example.com", "b.org"]), max_size=2))
@settings(max_examples=400)
def test_evaluate_is_the_merge_of_per_ingress_results(
        ingresses: list[Any], classes: list[Any], hosts_from: str, with_class: bool,
        domains: list[str]) -> None:
    policy = HostPolicy(hosts_from=hosts_from, domains=tuple(domains),
                        ingress_classes=("nginx",) if with_class else ())
    index = class_index(classes)
    parts = [evaluate_ingress(x, policy, index) for x in ingresses]
    whole = evaluate(ingresses, classes, policy)
    assert merge(parts) == whole
    assert dict(merge(parts).sources) == dict(whole.sources)
    # Each part is the whole for its Ingress alone.
    for x, part in zip(ingresses, parts, strict=True):
        alone = evaluate([x], classes, policy)
        assert alone.hosts == tuple(sorted(part.hosts))
        assert alone.rejections == part.rejections and alone.ignored == part.ignored
        assert len(set(part.hosts)) == len(part.hosts)


def test_merge_counts_each_ingress_once_per_host_and_keeps_their_order() -> None:
    a = evaluate_ingress(tls_ingress("x.example.com", "X.example.com.", "10.0.0.1", name="a"),
                         POLICY, ClassIndex())
    b = evaluate_ingress(tls_ingress("x.example.com", name="b"), POLICY, ClassIndex())
    assert a.hosts == ("x.example.com",) and a.origin == "default/a"
    merged = merge([b, a, a])
    assert merged.hosts == ("x.example.com",)
    assert merged.sources["x.example.com"] == ("default/a", "default/b")
    assert [r.name for r in merged.rejections] == ["a", "a"]
    assert merge([]) == PolicyResult(hosts=(), rejections=())


@given(st.lists(host_like, max_size=8), st.lists(host_like, max_size=8))
@settings(max_examples=300)
def test_a_bad_host_never_removes_a_good_one(good_side: list[str], extra: list[str]) -> None:
    alone = evaluate([tls_ingress(*good_side, name="a")], [], POLICY)
    mixed = evaluate([tls_ingress(*good_side, *extra, name="a"),
                      {"metadata": None}, tls_ingress(*extra, name="b", namespace=None)],
                     [], POLICY)
    assert set(alone.hosts) <= set(mixed.hosts)
    assert list(mixed.hosts) == sorted(set(mixed.hosts))
    assert all(h == h.lower() and not h.endswith(".") for h in mixed.hosts)
    expected_rejections = sum(1 for h in [*good_side, *extra, *extra]
                              if check_host(h, POLICY)[0] is None)
    assert len(mixed.rejections) == expected_rejections + 1


def test_filters_compare_raw_namespaces_and_reports_show_them_escaped() -> None:
    odd = "team\x1b[31m"
    policy = HostPolicy(include_namespaces=(odd,))
    result = evaluate([tls_ingress("a.example.com", "10.0.0.1", namespace=odd)], [], policy)
    assert result.hosts == ("a.example.com",)
    assert result.rejections[0].namespace == repr(odd)
    assert result.sources["a.example.com"] == (f"{odd!r}/web",)



# --------------------------------------------------------------------------- class existence

def test_class_index_lists_every_class_and_the_defaults() -> None:
    objs: list[Any] = [ingress_class("nginx", default=True), ingress_class("traefik"), None,
                       {"metadata": {"name": 3}}, {"metadata": {"name": ""}}, {"metadata": []}]
    assert class_index(objs) == ClassIndex(frozenset({"nginx"}), frozenset({"nginx", "traefik"}))
    assert class_index([]) == ClassIndex() == ClassIndex(frozenset(), frozenset())


@pytest.mark.parametrize("selected", [(), ("nginx",), ("nginx-typo",)])
def test_an_ingress_naming_a_missing_class_is_refused_with_a_reason(
        selected: tuple[str, ...]) -> None:
    policy = HostPolicy(ingress_classes=selected)
    ings = [tls_ingress("typo.example.com", name="typo", cls="nginx-typo"),
            tls_ingress("ok.example.com", name="ok", cls="nginx")]
    result = evaluate(ings, NGINX_DEFAULT, policy)
    assert result.rejections == (
        Rejection("default", "typo", "", "IngressClass 'nginx-typo' does not exist"),)
    assert result.hosts == (() if selected == ("nginx-typo",) else ("ok.example.com",))
    assert not ingress_matches(ings[0], policy, class_index(NGINX_DEFAULT))
    assert str(result.rejections[0]) == \
        "default/typo: IngressClass 'nginx-typo' does not exist"


def test_a_class_that_exists_but_is_not_served_is_ignored_silently() -> None:
    result = evaluate([tls_ingress("t.example.com", cls="traefik", name="t")], NGINX_DEFAULT,
                      HostPolicy(ingress_classes=("nginx",)))
    assert result == PolicyResult((), (), {})


def test_the_legacy_annotation_needs_no_ingressclass_object() -> None:
    policy = HostPolicy(ingress_classes=("nginx",))
    result = evaluate([tls_ingress("a.example.com", annotation="nginx")], [], policy)
    assert (result.hosts, result.rejections) == (("a.example.com",), ())
    # Without a class filter, an unknown annotation value is not checked either.
    result = evaluate([tls_ingress("a.example.com", annotation="whatever")], [], POLICY)
    assert (result.hosts, result.rejections) == (("a.example.com",), ())


def test_a_missing_class_in_an_excluded_namespace_stays_silent() -> None:
    policy = HostPolicy(exclude_namespaces=("other",))
    result = evaluate([tls_ingress("a.example.com", cls="ghost", namespace="other")], [], policy)
    assert result == PolicyResult((), (), {})


def test_class_existence_is_checked_whatever_the_defaults() -> None:
    # A default class serves class-less Ingresses; it does not make a missing name exist.
    for classes in (NGINX_DEFAULT, NO_DEFAULT, []):
        result = evaluate([tls_ingress("a.example.com", cls="ghost"), tls_ingress(
            "b.example.com", name="free")], classes, POLICY)
        assert [r.reason for r in result.rejections] == ["IngressClass 'ghost' does not exist"]
        assert result.hosts == ("b.example.com",)


def test_odd_class_names_are_shown_log_safe() -> None:
    result = evaluate([tls_ingress("a.example.com", cls="x\ny" + "z" * 300)], [], POLICY)
    (rej,) = result.rejections
    assert "\n" not in rej.reason and len(rej.reason) < 160
    assert rej.reason.startswith("IngressClass 'x\\ny") and rej.reason.endswith("does not exist")


def test_a_bare_set_of_defaults_checks_no_existence() -> None:
    ing = tls_ingress("a.example.com", cls="ghost")
    assert evaluate_ingress(ing, POLICY, frozenset()).hosts == ("a.example.com",)
    assert evaluate_ingress(ing, POLICY, ClassIndex(frozenset(), None)).hosts == ("a.example.com",)
    assert evaluate_ingress(ing, POLICY, ClassIndex()).rejections[0].reason == \
        "IngressClass 'ghost' does not exist"


# --------------------------------------------------------------------------- host limit

def _many(count: int, **kw: Any) -> dict[str, Any]:
    return tls_ingress(*(f"h{i}.example.com" for i in range(count)), **kw)


def test_the_host_limit_is_inclusive() -> None:
    assert HostPolicy().max_hosts_per_ingress == 100
    ok = evaluate([_many(100)], [], POLICY)
    assert len(ok.hosts) == 100 and ok.rejections == ()
    over = evaluate([_many(101, name="big"), tls_ingress("small.example.com", name="small")], [],
                    POLICY)
    assert over.hosts == ("small.example.com",)
    assert over.rejections == (Rejection(
        "default", "big", "",
        "asks for 101 hosts, more than the limit of 100 per Ingress (--max-hosts-per-ingress)"),)


def test_the_host_limit_counts_distinct_names() -> None:
    policy = HostPolicy(max_hosts_per_ingress=2, hosts_from="all")
    # One name in three spellings, in tls and rules: one host.
    ing = ingress(tls=[{"hosts": ["a.example.com", "A.example.com."]}],
                  rules=[{"host": "a.example.com"}, {"host": "b.example.com"}])
    assert evaluate([ing], [], policy).hosts == ("a.example.com", "b.example.com")
    ing["spec"]["rules"].append({"host": "c.example.com"})
    (rej,) = evaluate([ing], [], policy).rejections
    assert rej.host == "" and "3 hosts" in rej.reason and "limit of 2 " in rej.reason
    # Invalid values count too: the limit bounds what an Ingress may ask, not what passes.
    bad = tls_ingress("a.example.com", 7, "10.0.0.1")
    assert "3 hosts" in evaluate([bad], [], policy).rejections[0].reason


def test_a_zero_limit_means_none() -> None:
    policy = HostPolicy(max_hosts_per_ingress=0)
    assert len(evaluate([_many(1000)], [], policy).hosts) == 1000
    with pytest.raises(ValueError, match="max_hosts_per_ingress"):
        HostPolicy(max_hosts_per_ingress=-1)


@given(st.integers(min_value=1, max_value=12), st.integers(min_value=0, max_value=15))
@settings(max_examples=100)
def test_the_limit_refuses_exactly_the_ingresses_above_it(limit: int, count: int) -> None:
    result = evaluate([_many(count)], [], HostPolicy(max_hosts_per_ingress=limit))
    assert len(result.hosts) == (count if count <= limit else 0)
    assert len(result.rejections) == (count > limit)
