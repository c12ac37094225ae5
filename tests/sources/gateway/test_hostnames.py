"""Gateway API hostname rules: the specification's examples, then properties over small names."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.sources.gateway.hostnames import (
    ANY,
    covers,
    intersect,
    intersect_all,
    is_valid,
    matches,
    normalize,
    problem,
    specificity,
)

# The specification's hostname-intersection table: listener, route, intersected.
SPEC_TABLE = [
    ("www.example.com", "www.example.com", "www.example.com"),
    ("*.example.com", "www.example.com", "www.example.com"),
    ("*.example.com", "sub.domain.example.com", "sub.domain.example.com"),
    ("www.example.com", "*.example.com", "www.example.com"),
    ("sub.domain.example.com", "*.example.com", "sub.domain.example.com"),
    ("*.example.com", "*.example.com", "*.example.com"),
    ("*.com", "*.example.com", "*.example.com"),
    ("*", "www.example.com", "www.example.com"),
    ("*", "*", "*"),
    # From the "expected match examples" table: a route wildcard less specific than the
    # listener's gives the listener's.
    ("*.example.com", "*.com", "*.example.com"),
]

# Pairs the specification says do not intersect.
DISJOINT = [
    ("*.example.com", "example.com"),          # the wildcard never matches its own base
    ("*.example.com", "test.example.net"),
    ("test.example.com", "test.example.net"),
    ("very.specific.com", "non.matching.com"),
    ("very.specific.com", "*.nonmatchingwildcard.io"),
    ("*.wildcard.io", "wildcard.io"),
    ("*.a.example.com", "*.b.example.com"),
    ("abc.example.com", "*.abc.example.com"),  # one or more labels, never zero
    ("*.example.com", "*.xample.com"),         # suffix match on a label boundary only
    ("*.example.com", "wwwexample.com"),
]


@pytest.mark.parametrize(("listener", "route", "expected"), SPEC_TABLE)
def test_specification_table(listener: str, route: str, expected: str) -> None:
    assert intersect(listener, route) == expected
    assert intersect(route, listener) == expected


@pytest.mark.parametrize(("a", "b"), DISJOINT)
def test_disjoint_pairs(a: str, b: str) -> None:
    assert intersect(a, b) is None
    assert intersect(b, a) is None


def test_route_hostname_conformance_case() -> None:
    # Listeners very.specific.com, *.wildcard.io, *.anotherwildcard.io and the routes of the
    # HTTPRoute hostname-intersection conformance case.
    route1 = ["non.matching.com", "*.nonmatchingwildcard.io", "very.specific.com"]
    route2 = ["non.matching.com", "wildcard.io", "foo.wildcard.io", "bar.wildcard.io",
              "foo.bar.wildcard.io"]
    route3 = ["non.matching.com", "*.specific.com"]
    route4 = ["*.anotherwildcard.io"]
    route5 = ["specific.but.wrong.com", "wildcard.io"]
    assert intersect_all("very.specific.com", route1) == ("very.specific.com",)
    assert intersect_all("*.wildcard.io", route1) == ()
    assert intersect_all("*.wildcard.io", route2) == (
        "foo.wildcard.io", "bar.wildcard.io", "foo.bar.wildcard.io")
    # The wildcard route on a precise listener yields the listener's name only: a request for
    # foo.specific.com is not served.
    assert intersect_all("very.specific.com", route3) == ("very.specific.com",)
    assert intersect_all("*.anotherwildcard.io", route4) == ("*.anotherwildcard.io",)
    for listener in ("very.specific.com", "*.wildcard.io", "*.anotherwildcard.io"):
        assert intersect_all(listener, route5) == ()
    # A listener without hostname takes every route hostname as it is.
    assert intersect_all(None, ["first.com", "sub.first.com", "second.com"]) == (
        "first.com", "sub.first.com", "second.com")


@pytest.mark.parametrize(("listener", "route", "expected"), [
    # TLSRoute hostname-intersection conformance case, x-1 to x-4.
    ("abc.example.com", ["*.example.com"], ("abc.example.com",)),
    ("*.example.com", ["abc.example.com"], ("abc.example.com",)),
    ("*.example.com", ["*.com"], ("*.example.com",)),
    ("*.com", ["abc.example.com"], ("abc.example.com",)),
    ("*.com", ["*.example.com"], ("*.example.com",)),
    (None, ["abc.example.com"], ("abc.example.com",)),
    (None, ["*.com"], ("*.com",)),
])
def test_tls_conformance_case(listener: str | None, route: list[str],
                              expected: tuple[str, ...]) -> None:
    assert intersect_all(listener, route) == expected


def test_absent_sides() -> None:
    assert intersect_all("*.example.com", []) == ("*.example.com",)
    assert intersect_all("www.example.com", ()) == ("www.example.com",)
    assert intersect_all(None, []) == (ANY,)
    # Route hostnames that match nothing are ignored, the others kept in the route's order.
    assert intersect_all("*.example.com", ["b.example.com", "x.example.net", "a.example.com",
                                           "B.example.com"]) == ("b.example.com",
                                                                  "a.example.com")


def test_case_insensitive() -> None:
    assert intersect("WWW.Example.COM", "*.example.com") == "www.example.com"
    assert intersect("*.EXAMPLE.com", "*.Example.Com") == "*.example.com"
    assert matches("*.Example.com", "A.B.EXAMPLE.COM")
    assert intersect_all("*.EXAMPLE.com", ["X.example.com"]) == ("x.example.com",)
    # Only ASCII folds: the Kelvin sign must not become a valid "k".
    assert normalize("\u212a.example.com") == "\u212a.example.com"
    assert not is_valid("\u212a.example.com")
    # Beside a non-ASCII character, the ASCII letters still fold, and nothing else.
    assert normalize("\u212aB.\u0130X.Example.COM") == "\u212ab.\u0130x.example.com"
    assert normalize("Www.Example.COM") == "www.example.com"


@pytest.mark.parametrize(("pattern", "host", "expected"), [
    ("*.example.com", "www.example.com", True),
    ("*.example.com", "sub.domain.example.com", True),
    ("*.example.com", "example.com", False),
    ("*.com", "example.com", True),
    ("*.com", "www.example.com", True),
    ("www.example.com", "www.example.com", True),
    ("www.example.com", "foo.example.com", False),
    ("*", "anything.at.all", True),
    ("*.example.com", "xexample.com", False),
])
def test_matches(pattern: str, host: str, expected: bool) -> None:
    assert matches(pattern, host) is expected


@pytest.mark.parametrize("name", [
    "example.com", "*.example.com", "a", "*.com", "xn--bcher-kva.example", "a-b.c-d",
    "1.example.com", "EXAMPLE.com", "a" * 63 + ".com", "127.0.0.1.example.com",
])
def test_valid(name: str) -> None:
    assert problem(name) is None


@pytest.mark.parametrize(("name", "why"), [
    ("", "empty"), ("*", "not a hostname"), ("f*.example.com", "not a hostname"),
    ("*oo.example.com", "not a hostname"), ("a.*.example.com", "not a hostname"),
    ("*.*.example.com", "not a hostname"), ("example.com.", "not a hostname"),
    ("-a.example.com", "not a hostname"), ("a-.example.com", "not a hostname"),
    ("a..b", "not a hostname"), ("a_b.example.com", "not a hostname"),
    (" example.com", "not a hostname"), ("10.0.0.1", "IP address"),
    ("a" * 64 + ".com", "label longer"), (("a." * 127) + "com", "longer than 253"),
    ("[::1]", "not a hostname"), (7, "not a string"), (None, "not a string"),
])
def test_invalid(name: object, why: str) -> None:
    reason = problem(name)
    assert reason is not None and why in reason
    assert not is_valid(name)


def test_specificity_order() -> None:
    ordered = ["*", "*.com", "*.example.com", "*.www.example.com", "example.com",
               "www.example.com", "sub.www.example.com"]
    assert sorted(reversed(ordered), key=specificity) == ordered


# --- properties over a small universe, so that names collide often -----------------------

LABELS = ("a", "b", "c")
PRECISE = st.lists(st.sampled_from(LABELS), min_size=1, max_size=3).map(".".join)
NAME = st.one_of(PRECISE, PRECISE.map(lambda n: "*." + n), st.just(ANY))
# Every precise name of up to four labels: each name above accepts a subset of these, and two
# hostnames' sets of accepted names intersect within this universe iff they intersect at all.
UNIVERSE = tuple(".".join(p) for n in range(1, 5) for p in itertools.product(LABELS, repeat=n))


def _accepted(name: str | None) -> frozenset[str]:
    return frozenset() if name is None else frozenset(h for h in UNIVERSE if matches(name, h))


@settings(max_examples=400, deadline=None)
@given(NAME, NAME)
def test_intersection_is_exactly_the_common_names(a: str, b: str) -> None:
    assert _accepted(intersect(a, b)) == _accepted(a) & _accepted(b)


@settings(max_examples=300, deadline=None)
@given(NAME, NAME)
def test_intersection_symmetric_and_one_of_both(a: str, b: str) -> None:
    both = intersect(a, b)
    assert both == intersect(b, a)
    if both is not None:
        assert both in (a, b)
        assert covers(a, both) and covers(b, both)


@settings(max_examples=300, deadline=None)
@given(NAME, NAME, NAME)
def test_intersection_associative(a: str, b: str, c: str) -> None:
    ab = intersect(a, b)
    bc = intersect(b, c)
    left = None if ab is None else intersect(ab, c)
    right = None if bc is None else intersect(a, bc)
    assert left == right


@settings(max_examples=200, deadline=None)
@given(NAME)
def test_identity_and_idempotence(a: str) -> None:
    assert intersect(a, a) == a
    assert intersect(ANY, a) == a == intersect(a, ANY)


@settings(max_examples=200, deadline=None)
@given(NAME, NAME)
def test_covers_is_subset(a: str, b: str) -> None:
    assert covers(a, b) == (_accepted(b) <= _accepted(a))


@settings(max_examples=200, deadline=None)
@given(NAME, NAME, st.data())
def test_case_never_matters(a: str, b: str, data: st.DataObject) -> None:
    upper = "".join(ch.upper() if data.draw(st.booleans()) else ch for ch in a)
    assert intersect(upper, b) == intersect(a, b)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.none(), NAME.filter(lambda n: n != ANY)),
       st.lists(NAME.filter(lambda n: n != ANY), max_size=5), st.randoms())
def test_intersect_all(listener: str | None, route: list[str], rnd: random.Random) -> None:
    got = intersect_all(listener, route)
    side = ANY if listener is None else listener
    assert len(got) == len(set(got))
    if not route:
        assert got == (side,)
    else:
        # Exactly the pairwise intersections, each one within both sides.
        assert set(got) == {x for x in (intersect(side, r) for r in route) if x is not None}
        for name in got:
            assert covers(side, name)
            assert any(covers(r, name) for r in route)
    shuffled = list(route)
    rnd.shuffle(shuffled)
    assert set(intersect_all(listener, shuffled)) == set(got)
    assert (ANY in got) == (listener is None and not route)
