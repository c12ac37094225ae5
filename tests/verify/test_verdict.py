"""decide: one verdict per host from a lookup's answers (pure)."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from hairpin_proxy.verify.lb import LbIndex, lb_addresses
from hairpin_proxy.verify.verdict import (
    PROBE_LABEL,
    Answers,
    Code,
    ResolveError,
    Verdict,
    decide,
    pending,
    probe_name,
    should_redirect,
)
from tests.verify.objects import lb_service

LB = lb_addresses([lb_service("ingress-nginx", "ingress-nginx", {"ip": "203.0.113.10"})])
PROXY_LB = lb_addresses([lb_service("traefik", "traefik",
                                    {"ip": "203.0.113.10", "ipMode": "Proxy"})])
TIMEOUT = ResolveError("app.example.com", "timeout", "no answer")


def ans(name: str, *addresses: str, **kw: str) -> Answers:
    return Answers(name, addresses, **kw)


def test_verified() -> None:
    v = decide("App.Example.com.", ans("app.example.com", "203.0.113.10", "192.0.2.1"), LB,
               None, 100.0)
    assert v.code is Code.VERIFIED and should_redirect(v) and v.redirect
    assert v.host == "app.example.com" and v.matched == ("203.0.113.10",)
    assert v.reason == ("app.example.com resolves to 203.0.113.10, a load balancer of this "
                        "cluster (Service ingress-nginx/ingress-nginx)")
    assert v.checked_at == 100.0 and v.age(130.0) == 30.0 and not v.kept


def test_not_this_cluster_reason() -> None:
    v = decide("api.github.com", ans("api.github.com", "140.82.112.3"), LB, None, 0.0)
    assert v.code is Code.NOT_THIS_CLUSTER and not should_redirect(v)
    assert v.reason == ("api.github.com resolves to 140.82.112.3, not to this cluster's load "
                        "balancer 203.0.113.10")


def test_not_this_cluster_without_any_load_balancer_says_so() -> None:
    v = decide("a.example.com", ans("a.example.com", "192.0.2.1"), LbIndex(), None, 0.0)
    assert v.code is Code.NOT_THIS_CLUSTER and "none is known" in v.reason


def test_long_lists_are_cut() -> None:
    addresses = [f"192.0.2.{i}" for i in range(1, 8)]
    v = decide("a.example.com", ans("a.example.com", *addresses), LB, None, 0.0)
    assert "192.0.2.4 and 3 more" in v.reason


def test_ip_mode_proxy() -> None:
    v = decide("app.example.com", ans("app.example.com", "203.0.113.10"), PROXY_LB, None, 0.0)
    assert v.code is Code.IP_MODE_PROXY and not should_redirect(v)
    assert "ipMode Proxy" in v.reason and "traefik/traefik" in v.reason


def test_one_vip_answer_is_enough() -> None:
    lb = lb_addresses([lb_service("a", "p", {"ip": "203.0.113.10", "ipMode": "Proxy"}),
                       lb_service("a", "v", {"ip": "203.0.113.11"})])
    v = decide("a.example.com", ans("a.example.com", "203.0.113.10", "203.0.113.11"), lb, None,
               0.0)
    assert v.code is Code.VERIFIED and v.matched == ("203.0.113.11",)


def test_cname_to_a_load_balancer_hostname_is_ours() -> None:
    lb = lb_addresses([lb_service("ing", "elb", {"hostname": "abc.elb.amazonaws.com"})])
    v = decide("shop.example.com", ans("shop.example.com", "192.0.2.7",
                                       canonical="ABC.elb.amazonaws.com."), lb, None, 0.0)
    assert v.code is Code.VERIFIED and "alias of abc.elb.amazonaws.com" in v.reason


def test_unresolved() -> None:
    v = decide("gone.example.com", ans("gone.example.com", empty_reason="NXDOMAIN"), LB, None,
               0.0)
    assert v.code is Code.UNRESOLVED and v.reason == "gone.example.com does not resolve (NXDOMAIN)"
    nodata = decide("x.example.com", ans("x.example.com"), LB, None, 0.0)
    assert nodata.code is Code.UNRESOLVED and "no A or AAAA records" in nodata.reason


def test_pending() -> None:
    v = pending("New.example.com")
    assert v.code is Code.PENDING and not should_redirect(v) and v.age(5.0) is None
    assert decide("new.example.com", None, LB, None, 0.0) == v
    assert not should_redirect(None)


def test_resolver_error_without_history() -> None:
    v = decide("app.example.com", TIMEOUT, LB, pending("app.example.com"), 5.0)
    assert v.code is Code.RESOLVER_ERROR and not should_redirect(v)
    assert v.errors == 1 and "timeout" in v.reason and v.answers is None
    again = decide("app.example.com", TIMEOUT, LB, v, 6.0)
    assert again.code is Code.RESOLVER_ERROR and again.errors == 2


def test_outage_keeps_a_verified_host_and_records_its_age() -> None:
    good = decide("app.example.com", ans("app.example.com", "203.0.113.10"), LB, None, 100.0)
    kept = decide("app.example.com", TIMEOUT, LB, good, 400.0)
    assert kept.code is Code.VERIFIED and should_redirect(kept)
    assert kept.kept and kept.kept_since == 400.0 and kept.age(460.0) == 360.0
    assert kept.errors == 1 and "timeout" in kept.error
    later = decide("app.example.com", TIMEOUT, LB, kept, 500.0)
    assert later.kept_since == 400.0 and later.errors == 2
    back = decide("app.example.com", ans("app.example.com", "203.0.113.10"), LB, later, 600.0)
    assert back.code is Code.VERIFIED and not back.kept and back.errors == 0
    assert back.checked_at == 600.0


def test_incomplete_answers_prove_ours_but_not_foreign() -> None:
    partial_ours = ans("app.example.com", "203.0.113.10", incomplete="timeout")
    assert decide("app.example.com", partial_ours, LB, None, 0.0).code is Code.VERIFIED
    partial_other = ans("app.example.com", "192.0.2.1", incomplete="timeout")
    v = decide("app.example.com", partial_other, LB, None, 0.0)
    assert v.code is Code.RESOLVER_ERROR
    good = decide("app.example.com", ans("app.example.com", "203.0.113.10"), LB, None, 0.0)
    kept = decide("app.example.com", partial_other, LB, good, 1.0)
    assert kept.code is Code.VERIFIED and kept.kept


def test_lb_change_withdraws_a_host_verified_on_partial_answers() -> None:
    partial = ans("app.example.com", "203.0.113.10", incomplete="timeout")
    good = decide("app.example.com", partial, LB, None, 0.0)
    moved = lb_addresses([lb_service("ingress-nginx", "ingress-nginx", {"ip": "203.0.113.99"})])
    v = decide("app.example.com", None, moved, good, 1.0)
    assert v.code is Code.RESOLVER_ERROR and v.answers == partial
    assert decide("app.example.com", None, LB, v, 2.0).code is Code.VERIFIED


def test_lb_change_re_evaluates_last_answers() -> None:
    good = decide("app.example.com", ans("app.example.com", "203.0.113.10"), LB, None, 100.0)
    moved = lb_addresses([lb_service("ingress-nginx", "ingress-nginx", {"ip": "203.0.113.99"})])
    gone = decide("app.example.com", None, moved, good, 200.0)
    assert gone.code is Code.NOT_THIS_CLUSTER and gone.checked_at == 100.0
    assert "203.0.113.99" in gone.reason
    assert decide("app.example.com", None, LB, gone, 300.0) == good
    # During an outage the outage stays on record through a re-evaluation.
    kept = decide("app.example.com", TIMEOUT, LB, good, 150.0)
    assert decide("app.example.com", None, moved, kept, 200.0).kept_since == 150.0
    # Nothing to re-evaluate without answers.
    err = decide("app.example.com", TIMEOUT, LB, None, 1.0)
    assert decide("app.example.com", None, moved, err, 2.0) == err


def test_wildcard_probe() -> None:
    assert probe_name("*.Example.com.") == f"{PROBE_LABEL}.example.com"
    assert probe_name("**.gw.example.com") == f"{PROBE_LABEL}.gw.example.com"
    assert probe_name("app.example.com") == "app.example.com"
    queried = probe_name("*.example.com")
    v = decide("*.example.com", ans(queried, "203.0.113.10"), LB, None, 0.0)
    assert v.code is Code.VERIFIED and v.queried == queried
    assert v.reason.startswith(f"*.example.com (checked as {queried}) resolves to")
    assert pending("*.example.com").queried == queried


def test_previous_of_another_host_is_ignored() -> None:
    other = decide("b.example.com", ans("b.example.com", "203.0.113.10"), LB, None, 0.0)
    v = decide("a.example.com", TIMEOUT, LB, other, 1.0)
    assert v.code is Code.RESOLVER_ERROR


# ---------------------------------------------------------------------- properties

addresses = st.sampled_from(["203.0.113.10", "203.0.113.11", "192.0.2.1", "2001:db8::1",
                             "2001:db8::2"])
lbs = st.lists(st.tuples(addresses, st.sampled_from(["", "VIP", "Proxy"])), max_size=4).map(
    lambda entries: lb_addresses([lb_service("ns", f"s{i}", {"ip": a, "ipMode": m} if m
                                             else {"ip": a}) for i, (a, m) in
                                  enumerate(entries)]))
answer_sets = st.builds(lambda a, inc: ans("h.example.com", *a, incomplete=inc),
                        st.lists(addresses, max_size=4), st.sampled_from(["", "", "timeout"]))
errors = st.builds(ResolveError, st.just("h.example.com"),
                   st.sampled_from(["timeout", "servfail", "refused"]))
results = st.one_of(answer_sets, errors)


@st.composite
def histories(draw: st.DrawFn) -> Verdict | None:
    """A verdict reached by some sequence of lookups and LB changes (or None)."""
    previous: Verdict | None = draw(st.sampled_from([None, pending("h.example.com")]))
    for step in range(draw(st.integers(0, 5))):
        result = draw(st.one_of(results, st.none()))
        previous = decide("h.example.com", result, draw(lbs), previous, float(step))
    return previous


@given(answer_sets, lbs)
def test_redirect_iff_an_answer_is_a_vip_load_balancer(answers: Answers, lb: LbIndex) -> None:
    v = decide("h.example.com", answers, lb, None, 0.0)
    ours = [lb.lookup(a) for a in answers.addresses]
    assert should_redirect(v) == any(e is not None and not e.proxy for e in ours)
    if answers.incomplete and not v.redirect and v.code is not Code.IP_MODE_PROXY:
        assert v.code is Code.RESOLVER_ERROR


@given(histories(), errors, lbs)
def test_an_outage_never_changes_whether_a_host_is_redirected(
        previous: Verdict | None, error: ResolveError, lb: LbIndex) -> None:
    v = decide("h.example.com", error, lb, previous, 10.0)
    assert should_redirect(v) == should_redirect(previous)
    if previous is not None and previous.answers is not None:
        assert dataclasses.replace(v, kept_since=None, error="", errors=0) == \
            dataclasses.replace(previous, kept_since=None, error="", errors=0)
        assert v.kept


@given(histories(), lbs)
def test_re_evaluation_equals_a_fresh_decision_on_the_same_answers(
        previous: Verdict | None, lb: LbIndex) -> None:
    v = decide("h.example.com", None, lb, previous, 10.0)
    if previous is None or previous.answers is None:
        assert v == (previous or pending("h.example.com"))
        return
    assert previous.checked_at is not None
    fresh = decide("h.example.com", previous.answers, lb, None, previous.checked_at)
    assert v.code == fresh.code
    assert v.reason == fresh.reason or fresh.code is Code.RESOLVER_ERROR
