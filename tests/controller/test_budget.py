"""The rules budget: its running size is exactly corefile.rules_bytes, however the hosts come
and go, and over budget the oldest origins keep their hosts."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy import corefile
from hairpin_proxy.claims import Claim, ObjectRef
from hairpin_proxy.controller.budget import RulesBudget
from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.metrics import Registry
from hairpin_proxy.policy import PolicyResult

# Plain names, names with characters the regexes escape, wildcards, non-ASCII names, and
# (never from the policy, but rules_bytes takes any string) the character that joins names
# inside rules_bytes.
LABEL = st.text(alphabet=st.sampled_from("ab-_z09.é+()\u00e9\u4e2d\x80"), min_size=0,
                max_size=12)
HOST = st.one_of(LABEL, LABEL.map(lambda s: f"{s}.example.com"),
                 LABEL.map(lambda s: f"*.{s}.example.com"))
# A pass: hosts added and hosts taken away (by index into the current ones).
STEP = st.tuples(st.lists(HOST, max_size=8), st.lists(st.integers(0, 1000), max_size=8))


def budget(size: int = 10**9) -> RulesBudget:
    return RulesBudget(size, ControllerMetrics(Registry(standard=False)))


@settings(max_examples=200, deadline=None)
@given(start=st.lists(HOST, max_size=40), steps=st.lists(STEP, max_size=12))
def test_running_size_is_rules_bytes(start: list[str], steps: list[tuple[list[str], list[int]]]
                                     ) -> None:
    b = budget()
    hosts = sorted(set(start))
    assert b.size(tuple(hosts)) == corefile.rules_bytes(hosts)
    for added, removed in steps:
        gone = {hosts[i % len(hosts)] for i in removed} if hosts else set()
        hosts = sorted((set(hosts) - gone) | set(added))
        assert b.size(tuple(hosts)) == corefile.rules_bytes(hosts)
        # Duplicates and any order count as rules_bytes counts them.
        shuffled = [*reversed(hosts), *hosts[:3]]
        assert b.size(shuffled) == corefile.rules_bytes(shuffled)


@given(hosts=st.lists(HOST, max_size=30))
def test_host_shares_add_up_to_rules_bytes(hosts: list[str]) -> None:
    shares = corefile.host_rules_bytes(hosts)
    assert len(shares) == len(hosts)
    assert sum(shares) == corefile.rules_bytes(hosts)
    assert shares == [corefile.rules_bytes([h]) for h in hosts]


def test_forgotten_hosts_are_measured_again() -> None:
    b = budget()
    many = tuple(f"h{i}.example.com" for i in range(3000))
    assert b.size(many) == corefile.rules_bytes(many)
    few = many[:10]
    assert b.size(few) == corefile.rules_bytes(few)
    assert b.size(many) == corefile.rules_bytes(many)


def claim(host: str, name: str, created: str) -> Claim:
    return Claim(host=host, target="", origin=ObjectRef("Ingress", "ns", name), created=created)


def test_over_budget_the_oldest_keep_their_hosts() -> None:
    hosts = ("a.example.com", "b.example.com", "c.example.com")
    room = corefile.rules_bytes(hosts[:2])
    b = budget(room)
    claims = [claim("c.example.com", "new", "2024-03-01T00:00:00Z"),
              claim("a.example.com", "old", "2024-01-01T00:00:00Z"),
              claim("b.example.com", "mid", "2024-02-01T00:00:00Z")]
    result = b.apply(PolicyResult(hosts, (), {}, ()), claims)
    assert result.hosts == hosts[:2]
    assert [(r.namespace, r.name) for r in result.rejections] == [("ns", "new")]
    under = b.apply(PolicyResult(hosts[:2], (), {}, ()), claims[1:])
    assert under.hosts == hosts[:2] and not under.rejections
