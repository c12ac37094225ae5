"""The size limits, pure: the measure is exactly corefile.rules_bytes of the answer sets the
pass writes, however the hosts come and go; over a limit the oldest objects keep their hosts,
whatever their targets (fallbacks to the default, slots, Gateways, conflicts), and the kept
hosts never exceed a limit. Through the controller: test_limits.py."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy import corefile
from hairpin_proxy.claims import Claim, ObjectRef, origin_key
from hairpin_proxy.plan.budget import (
    MAX_CONFIGMAP_BYTES,
    SLACK,
    SLACK_SHARE,
    AnswerSets,
    Limit,
    NodeLocalMeasure,
    PublishedMeasure,
    RulesMeasure,
    configmap_room,
    corefile_room,
    data_bytes,
    fit,
    limits_of,
    measure,
    within,
)
from hairpin_proxy.published import entries_text
from hairpin_proxy.sources.registry import KEY_KIND_SPECS
from hairpin_proxy.targets.mapping import parse_target_flags
from hairpin_proxy.targets.resolve import TargetFacts
from hairpin_proxy.targets.routing_plan import plan
from tests.targets.test_resolve import svc
from tests.targets.test_routing_plan import FACTS as GATEWAY_FACTS

# Plain names, names with characters the regexes escape, wildcards, non-ASCII names, and
# (never from the policy, but rules_bytes takes any string) the character that joins names
# inside rules_bytes.
LABEL = st.text(alphabet=st.sampled_from("ab-_z09.é+()\u00e9\u4e2d\x80"), min_size=0,
                max_size=12)
HOST = st.one_of(LABEL, LABEL.map(lambda s: f"{s}.example.com"),
                 LABEL.map(lambda s: f"*.{s}.example.com"),
                 LABEL.map(lambda s: f"**.{s}.example.com"))
# Names as the policy lets them through (rules_bytes of answer sets checks them).
GOOD_LABEL = st.from_regex(r"[a-z0-9_]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
GOOD_HOST = st.one_of(GOOD_LABEL.map(lambda s: f"{s}.example.com"),
                      GOOD_LABEL.map(lambda s: f"*.{s}.example.com"),
                      GOOD_LABEL.map(lambda s: f"**.{s}.example.com"),
                      st.tuples(GOOD_LABEL, GOOD_LABEL).map(lambda t: f"{t[0]}.{t[1]}.org"))
# A pass: hosts added and hosts taken away (by index into the current ones).
STEP = st.tuples(st.lists(GOOD_HOST, max_size=8), st.lists(st.integers(0, 1000), max_size=8))
DEFAULT = corefile.Answers.of(["10.96.0.50"])


def one_set(limit: int = 10**9) -> list[Limit]:
    return [Limit(RulesMeasure(), limit, "rules")]


def size(hosts: Sequence[str], limits: list[Limit]) -> int:
    return measure(hosts, AnswerSets(DEFAULT), limits)[0]


@settings(max_examples=100, deadline=None)
@given(start=st.lists(GOOD_HOST, max_size=40), steps=st.lists(STEP, max_size=12))
def test_the_measure_is_rules_bytes_of_the_answer_set(start: list[str],
                                                      steps: list[tuple[list[str], list[int]]]
                                                      ) -> None:
    limits = one_set()
    hosts = sorted(set(start))

    def expected(hs: Sequence[str]) -> int:
        return corefile.rules_bytes([(hs, DEFAULT)]) if hs else 0
    assert size(hosts, limits) == expected(hosts)
    for added, removed in steps:
        gone = {hosts[i % len(hosts)] for i in removed} if hosts else set()
        hosts = sorted((set(hosts) - gone) | set(added))
        limits[0].measure.keep_only(set(hosts))
        assert size(hosts, limits) == expected(hosts)
        # Duplicates and any order count once.
        assert size([*reversed(hosts), *hosts[:3]], limits) == expected(hosts)


@given(hosts=st.lists(HOST, max_size=30))
def test_host_shares_add_up_to_rules_bytes(hosts: list[str]) -> None:
    shares = corefile.host_rules_bytes(hosts)
    assert len(shares) == len(hosts)
    assert sum(shares) == corefile.rules_bytes(hosts)
    assert shares == [corefile.rules_bytes([h]) for h in hosts]


def test_forgotten_hosts_are_measured_again() -> None:
    limits = one_set()
    many = tuple(f"h{i}.example.com" for i in range(3000))
    assert size(many, limits) == corefile.rules_bytes([(many, DEFAULT)])
    few = many[:10]
    limits[0].measure.keep_only(set(few))
    assert size(few, limits) == corefile.rules_bytes([(few, DEFAULT)])
    assert size(many, limits) == corefile.rules_bytes([(many, DEFAULT)])


def test_every_answer_set_counts_its_stanza_pair() -> None:
    """Ten hosts on ten targets take ten stanza pairs, not one."""
    hosts = [f"h{i}.example.com" for i in range(10)]
    sets = {h: corefile.Answers.of([f"10.96.1.{i}"]) for i, h in enumerate(hosts)}
    got = measure(hosts, AnswerSets(DEFAULT, sets), one_set())[0]
    assert got == corefile.rules_bytes([([h], sets[h]) for h in hosts])
    assert got > 9 * corefile.rules_bytes([(hosts, DEFAULT)]) // 2


def test_published_measure_is_at_least_what_is_published() -> None:
    hosts = [f"h{i}.example.com" for i in range(50)]
    answers = corefile.Answers.of(["10.96.0.50", "fd00::50"])
    got = measure(hosts, AnswerSets(answers), [Limit(PublishedMeasure(), 10**9, "")])[0]
    written = len(entries_text({h: ("10.96.0.50", "fd00::50") for h in hosts})) + \
        sum(len(h) + 1 for h in hosts)
    assert written <= got <= written + 16


def ref(name: str, kind: str = "Ingress") -> ObjectRef:
    return ObjectRef(kind, "ns", name, f"uid-{name}")


def test_over_budget_the_oldest_keep_their_hosts() -> None:
    hosts = ("a.example.com", "b.example.com", "c.example.com")
    limits = one_set(size(hosts[:2], one_set()))
    origins = {"a.example.com": [ref("old")], "b.example.com": [ref("mid")],
               "c.example.com": [ref("new")]}
    created = {ref("new"): "2024-03-01T00:00:00Z", ref("old"): "2024-01-01T00:00:00Z",
               ref("mid"): "2024-02-01T00:00:00Z"}
    got = fit(hosts, origins, created, AnswerSets(DEFAULT), limits)
    assert got.hosts == hosts[:2]
    assert [r for r, _, _ in got.refused] == [ref("new")]
    # A smaller, newer object still fits where an older, larger one did not.
    origins["c.example.com"] = [ref("big")]
    origins["d.example.com"] = [ref("big")]
    origins["f.example.com"] = [ref("big")]
    origins["e.example.com"] = [ref("tiny")]
    created[ref("big")] = "2024-01-15T00:00:00Z"
    created[ref("tiny")] = "2024-04-01T00:00:00Z"
    room = size(["a.example.com", "b.example.com", "e.example.com"], one_set())
    got = fit((*hosts, "d.example.com", "e.example.com", "f.example.com"), origins, created,
              AnswerSets(DEFAULT), one_set(room))
    assert got.hosts == ("a.example.com", "b.example.com", "e.example.com")
    assert [r for r, _, _ in got.refused] == [ref("big")]


# --- random claim sets through the real plan ---------------------------------------------

# ingressclass/own is mapped to a Service (a slot of its own); ingressclass/lost finds no data
# plane (falls back to the default); gateway/web/public has a slot; gateway/web/plain expects
# no PROXY header (its hosts are excluded); default is the proxy's own Service.
TARGETS = ("default", "ingressclass/own", "ingressclass/lost", "gateway/web/public",
           "gateway/web/plain")
FACTS = TargetFacts(
    services=[*GATEWAY_FACTS.services, svc("web", "own", {})],
    gateways=GATEWAY_FACTS.gateways, gateway_classes=GATEWAY_FACTS.gateway_classes,
    client_traffic_policies=GATEWAY_FACTS.client_traffic_policies)
TARGET_MAP = parse_target_flags(["own=web/own:v1"], KEY_KIND_SPECS)
STAMPS = ("2026-01-01T00:00:00Z", "2026-01-01T00:00:00+00:00", "2026-01-02T00:00:00Z",
          "2026-03-01T00:00:00Z", "", "garbage")
CLAIM_HOST = st.one_of(st.sampled_from(["a.example.com", "b.example.com", "*.example.com"]),
                       GOOD_HOST)
ORIGIN = st.builds(ObjectRef, st.sampled_from(["Ingress", "HTTPRoute"]),
                   st.sampled_from(["ns", "shop"]), st.sampled_from(["a", "b", "c", "d"]),
                   st.sampled_from(["", "u1", "u2"]))


@st.composite
def claim_sets(draw: st.DrawFn) -> list[Claim]:
    origins = draw(st.lists(ORIGIN, min_size=1, max_size=6, unique=True))
    created = {o: draw(st.sampled_from(STAMPS)) for o in origins}
    return [Claim(host, draw(st.sampled_from(TARGETS)), origin, created[origin])
            for origin in origins
            for host in draw(st.lists(CLAIM_HOST, min_size=1, max_size=6))]


def answers_by_slot(slots: dict[str, int]) -> dict[str, corefile.Answers]:
    return {key: corefile.Answers.of([f"10.96.1.{slot}", f"fd00::{slot}"])
            for key, slot in slots.items()}


@settings(max_examples=300, deadline=None)
@given(claims=claim_sets(), fraction=st.floats(0, 1.2), published=st.floats(0.3, 1.2),
       flags=st.lists(st.booleans(), min_size=1, max_size=8))
def test_the_kept_hosts_fit_and_the_oldest_object_that_fits_keeps_its_hosts(
        claims: list[Claim], fraction: float, published: float, flags: list[bool]) -> None:
    p = plan(claims, FACTS, TARGET_MAP, {}, 4)
    by_slot = answers_by_slot(dict(p.slots))
    # A host settling on a new slot keeps what it answers now, the default's answers too.
    sets = AnswerSets(DEFAULT, {h: DEFAULT if flags[i % len(flags)] else by_slot[key]
                                for i, (h, key) in enumerate(p.routes.items())
                                if key != "default"})
    answers_of = sets.of
    hosts = sorted(p.routes)
    measures = [Limit(RulesMeasure(), 0, ""), Limit(PublishedMeasure(), 0, "")]
    whole = measure(hosts, sets, measures)
    limits = [Limit(RulesMeasure(), int(whole[0] * fraction), "rules"),
              Limit(PublishedMeasure(), int(whole[1] * published), "published")]
    created = {c.origin: c.created for c in claims}
    got = fit(hosts, p.origins, created, sets, limits)

    kept = set(got.hosts)
    assert kept <= set(hosts) and list(got.hosts) == sorted(kept)
    # Never over a limit, and measured as corefile measures what is written.
    assert list(got.sizes) == list(measure(got.hosts, sets, limits))
    assert all(s <= lim.limit for s, lim in zip(got.sizes, limits, strict=True))
    groups: dict[corefile.Answers, list[str]] = {}
    for h in got.hosts:
        groups.setdefault(answers_of(h), []).append(h)
    assert got.sizes[0] == (corefile.rules_bytes([(hs, a) for a, hs in groups.items()])
                            if groups else 0)
    if all(w <= lim.limit for w, lim in zip(whole, limits, strict=True)):
        assert kept == set(hosts) and not got.refused
    # Every object is kept whole or refused whole, and refused only when it does not fit.
    asking: dict[ObjectRef, list[str]] = {}
    for h in hosts:
        for o in p.origins[h]:
            asking.setdefault(o, []).append(h)
    refused = [r for r, _, _ in got.refused]
    assert refused == sorted(refused, key=lambda o: origin_key(o, created[o]))
    # Each refusal names the first limit (in order) its hosts would overflow, with the hosts
    # of the older objects kept.
    told = {r: lim for r, _, lim in got.refused}
    before: set[str] = set()
    for origin in sorted(asking, key=lambda o: origin_key(o, created[o])):
        if origin in told:
            over = measure(sorted(before | set(asking[origin])), sets, limits)
            assert told[origin] is next(lim for s, lim in zip(over, limits, strict=True)
                                        if s > lim.limit)
        else:
            before |= set(asking[origin])
    for origin, mine in asking.items():
        if origin in refused:
            over = measure(sorted(kept | set(mine)), sets, limits)
            assert any(s > lim.limit for s, lim in zip(over, limits, strict=True))
        else:
            assert set(mine) <= kept
    # The oldest object keeps its hosts whenever they fit alone: never an empty result.
    if asking:
        oldest = min(asking, key=lambda o: origin_key(o, created[o]))
        alone = measure(asking[oldest], sets, limits)
        if all(s <= lim.limit for s, lim in zip(alone, limits, strict=True)):
            assert set(asking[oldest]) <= kept and kept


# --- the room a ConfigMap leaves ---------------------------------------------------------

def room(free: int) -> int:
    return (free - SLACK) * (SLACK_SHARE - 1) // SLACK_SHARE


def test_room_is_the_limit_less_everything_that_is_not_ours() -> None:
    cm = {"data": {"other": "x" * 1000, "hosts": "a\n" * 100}}
    assert data_bytes(cm) == len("other") + 1000 + len("hosts") + 200
    assert configmap_room(cm, ("hosts",)) == room(MAX_CONFIGMAP_BYTES - 1005 - len("hosts"))
    assert configmap_room(None, ()) == room(MAX_CONFIGMAP_BYTES)
    # What is kept free is a small part: a Corefile holding our rules now still holds them.
    assert room(MAX_CONFIGMAP_BYTES) > MAX_CONFIGMAP_BYTES * 0.97


def test_corefile_room_counts_our_blocks_once_per_root_block() -> None:
    one = ".:53 {\n    forward . /etc/resolv.conf\n}\n"
    two = (".:53 {\n    bind 127.0.0.1\n    forward . /etc/resolv.conf\n}\n"
           ".:53 {\n    bind 127.0.0.2\n    forward . /etc/resolv.conf\n}\n")
    for base, blocks in ((one, 1), (two, 2)):
        text = corefile.apply(base, [f"h{i}.example.com" for i in range(100)], answers=DEFAULT)
        assert text.count(corefile.BEGIN_MARKER) == blocks
        got = corefile_room({"data": {"Corefile": text}}, "Corefile")
        empty = configmap_room({"data": {"Corefile": base}}, ())
        # Each block's indentation and line end stay outside the span counted as ours.
        assert (empty - 8 * blocks) // blocks <= got <= empty // blocks + 1
    assert corefile_room(None, "Corefile") == room(MAX_CONFIGMAP_BYTES)


@given(hosts=st.lists(HOST, max_size=20))
def test_every_measure_of_many_hosts_is_the_sum_of_each(hosts: list[str]) -> None:
    for m in (RulesMeasure(), PublishedMeasure(), NodeLocalMeasure()):
        assert m.hosts(hosts) == sum(type(m)().host(h) for h in hosts)


# Enough plain hosts beside the drawn ones for a pass's measure to take the running sums.
FILLER = [f"f{i}.example.org" for i in range(60)]
# Answer sets of routed hosts: equal sets in distinct objects among them.
ROUTED_SETS = [corefile.Answers.of(["10.96.0.50"]), corefile.Answers.of(["10.96.0.51"]),
               corefile.Answers.of(["10.96.0.51"]), corefile.Answers.of(["fd00::52"]),
               corefile.Answers()]
# A pass: hosts added, hosts taken away (by index), how many filler hosts, routed hosts (by
# index) and their answer sets, the default set, the limit, and whether the measures then
# forget hosts (as another caller's pass with fewer hosts would make them).
PASS = st.tuples(st.lists(HOST, max_size=8), st.lists(st.integers(0, 1000), max_size=8),
                 st.integers(0, 60),
                 st.dictionaries(st.integers(0, 200), st.sampled_from(ROUTED_SETS), max_size=6),
                 st.sampled_from([DEFAULT, corefile.Answers()]),
                 st.sampled_from([10**9, 3000]), st.booleans())


@settings(max_examples=150, deadline=None)
@given(start=st.lists(HOST, max_size=40), passes=st.lists(PASS, min_size=1, max_size=10))
def test_the_running_sums_measure_what_fresh_measures_measure(
        start: list[str],
        passes: list[tuple[list[str], list[int], int, dict[int, corefile.Answers],
                           corefile.Answers, int, bool]]) -> None:
    """Hosts added and removed, routed hosts and their answer sets changed, the measures'
    memo pruned: the measures kept from pass to pass (running sums) give the sizes and the
    fit of measures that never saw a pass."""
    measures = (RulesMeasure(), PublishedMeasure(), NodeLocalMeasure())
    drawn = set(start)
    for added, removed, filler, routed_at, default, limit, forget in passes:
        listed = sorted(drawn)
        drawn = (drawn - {listed[i % len(listed)] for i in removed if listed}) | set(added)
        hosts = sorted(drawn | set(FILLER[:filler]))
        routed = {hosts[i % len(hosts)]: a for i, a in routed_at.items()} if hosts else {}
        sets = AnswerSets(default, routed)
        kept = [Limit(m, limit, "kept") for m in measures]
        fresh = [Limit(type(m)(), limit, "fresh") for m in measures]
        assert measure(hosts, sets, kept, distinct=True) == measure(hosts, sets, fresh)
        origins = {h: (ref(h),) for h in hosts}
        got, plain = (within(hosts, origins, (), sets, limits) for limits in (kept, fresh))
        assert (got.hosts, got.refused, got.sizes) == (plain.hosts, plain.refused, plain.sizes)
        if forget:
            for m in measures:
                m.keep_only(hosts[: len(hosts) // 3])


@given(hosts=st.lists(HOST, unique=True, max_size=40),
       routed=st.dictionaries(HOST, st.sampled_from(ROUTED_SETS), max_size=8))
def test_counting_a_set_of_hosts_is_counting_them(
        hosts: list[str], routed: dict[str, corefile.Answers]) -> None:
    sets = AnswerSets(DEFAULT, routed)
    wild = sum(h.startswith("*.") for h in hosts)
    deep = sum(h.startswith("**.") for h in hosts)
    assert sets.count_present(set(hosts), wild, deep) == sets.count(hosts)


@settings(max_examples=150, deadline=None)
@given(start=st.lists(HOST, max_size=40),
       passes=st.lists(st.tuples(PASS, st.booleans(), st.lists(HOST, max_size=3)),
                       min_size=1, max_size=10))
def test_the_change_since_the_last_pass_measures_what_fresh_measures_measure(
        start: list[str],
        passes: list[tuple[tuple[list[str], list[int], int, dict[int, corefile.Answers],
                                 corefile.Answers, int, bool], bool, list[str]]]) -> None:
    """Passes told which hosts may have changed (all that did, and others) or not, as the
    plan tells them: the sizes are those of measures that never saw a pass, and no set of
    the hosts is kept after a pass told so (nor after a first measure)."""
    measures = (RulesMeasure(), PublishedMeasure(), NodeLocalMeasure())
    drawn = set(start)
    last: tuple[str, ...] | None = None
    last_sets = AnswerSets(DEFAULT)
    for (added, removed, filler, routed_at, default, _, _), told, extra in passes:
        listed = sorted(drawn)
        drawn = (drawn - {listed[i % len(listed)] for i in removed if listed}) | set(added)
        hosts = tuple(sorted(drawn | set(FILLER[:filler])))
        routed = {hosts[i % len(hosts)]: a for i, a in routed_at.items()} if hosts else {}
        sets = AnswerSets(default, routed)
        since = None
        if told and last is not None:
            changed = {h for h in {*hosts, *last, *routed, *last_sets.routed}
                       if (h in hosts, sets.of(h)) != (h in last, last_sets.of(h))}
            since = (last, tuple(sorted(changed | set(extra))), last_sets)
        kept = [Limit(m, 10**9, "kept") for m in measures]
        fresh = [Limit(type(m)(), 10**9, "fresh") for m in measures]
        first = last is None
        assert measure(hosts, sets, kept, distinct=True, since=since) == \
            measure(hosts, sets, fresh)
        if first or since is not None:
            assert all(m.present is None and m.hosts_of is hosts for m in measures)
        assert all(m.last_set() == set(hosts) for m in measures)
        last, last_sets = hosts, sets


# --- a fit that goes on from the last ------------------------------------------------------

OBJECT_HOSTS = st.lists(GOOD_HOST, min_size=1, max_size=5, unique=True)


def _fitted(objects: Sequence[tuple[ObjectRef, list[str]]], created: dict[ObjectRef, str],
            rules: RulesMeasure, limit: int) -> tuple[object, ...]:
    origins: dict[str, list[ObjectRef]] = {}
    for ref_, hosts in objects:
        for h in hosts:
            origins.setdefault(h, []).append(ref_)
    limits = limits_of(limit, rules, 10**9, "kube-system/coredns[Corefile]", ())
    got = fit(sorted(origins), origins, created, AnswerSets(DEFAULT), limits)
    return got.hosts, [(r, asked, over.words) for r, asked, over in got.refused], got.sizes


@settings(max_examples=200, deadline=None)
@given(old=st.lists(OBJECT_HOSTS, min_size=1, max_size=8),
       new=st.lists(OBJECT_HOSTS, min_size=1, max_size=4), fraction=st.floats(0.1, 1.0),
       changed=st.integers(0, 20), same_second=st.booleans())
def test_a_fit_that_goes_on_from_the_last_fits_as_a_fit_from_nothing(
        old: list[list[str]], new: list[list[str]], fraction: float, changed: int,
        same_second: bool) -> None:
    """Passes as the controller makes them: newer objects come, one of the older changes its
    hosts. The measure that fitted the last pass (its ``fitted``) gives what a fresh one
    gives, and goes on from the last fit where the older objects are as they were."""
    objects = [(ref(f"o{i}"), hosts) for i, hosts in enumerate(old + new)]
    created = {r: f"2026-01-01T00:{0 if same_second else i // 60:02d}:{i % 60:02d}Z"
               for i, (r, _) in enumerate(objects)}
    whole = size(sorted({h for _, hs in objects for h in hs}), one_set())
    limit = max(1, int(whole * fraction))
    kept = RulesMeasure()
    first = _fitted(objects[:len(old)], created, kept, limit)
    assert first == _fitted(objects[:len(old)], created, RulesMeasure(), limit)
    point = kept.fitted
    assert point is not None and len(point.entries) == len(old)
    # Newer objects come: the same as from nothing.
    assert _fitted(objects, created, kept, limit) == _fitted(objects, created,
                                                             RulesMeasure(), limit)
    assert kept.fitted is not None and len(kept.fitted.entries) == len(objects)
    # An older object's hosts change, then the limit: each the same as from nothing.
    k = changed % len(objects)
    objects[k] = (objects[k][0], [*objects[k][1], f"changed{k}.example.com"])
    assert _fitted(objects, created, kept, limit) == _fitted(objects, created,
                                                             RulesMeasure(), limit)
    assert _fitted(objects, created, kept, limit + 40) == _fitted(objects, created,
                                                                  RulesMeasure(), limit + 40)
