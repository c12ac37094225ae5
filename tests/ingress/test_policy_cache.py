"""PolicyCache: incremental policy results equal a full evaluate(), for a fraction of the work."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.ingress.policy import evaluate
from hairpin_proxy.ingress.policy_cache import PolicyCache
from hairpin_proxy.policy import HostPolicy
from tests.fakeapi.fixtures import ingress, ingress_class

Obj = dict[str, Any]
NGINX = HostPolicy(ingress_classes=("nginx",))


class Cluster:
    """Ingresses keyed as the reflector keys them, each write a new object with a new RV."""

    def __init__(self) -> None:
        self.cache: dict[str, Obj] = {}
        self.classes: dict[str, Obj] = {}
        self.rv = 0

    def put(self, obj: Obj) -> Obj:
        self.rv += 1
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.rv)
        meta.setdefault("uid", f"uid-{meta.get('namespace')}-{meta.get('name')}")
        self.cache[f"{meta.get('namespace')}/{meta.get('name')}"] = obj
        return obj

    def delete(self, key: str) -> None:
        del self.cache[key]

    def relist(self) -> None:
        # A relist brings equal content in new objects.
        self.cache = {k: copy.deepcopy(v) for k, v in self.cache.items()}

    def check(self, pc: PolicyCache, policy: HostPolicy = HostPolicy()) -> int:
        got, evaluated = pc.update(dict(self.cache), list(self.classes.values()), policy)
        # The cache answers for the Ingresses taken in key order.
        want = evaluate([self.cache[k] for k in sorted(self.cache)],
                        list(self.classes.values()), policy)
        assert got == want
        assert dict(got.sources) == dict(want.sources)
        return evaluated


def test_only_new_and_changed_ingresses_are_evaluated() -> None:
    cluster = Cluster()
    for i in range(500):
        cluster.put(ingress(f"ns{i % 7}", f"ing{i}", tls_hosts=[f"app{i}.example.com"]))
    pc = PolicyCache(HostPolicy())
    assert cluster.check(pc) == 500
    assert cluster.check(pc) == 0
    cluster.put(ingress("ns1", "ing1", tls_hosts=["moved.example.com", "10.0.0.1"]))
    cluster.put(ingress("new", "one", tls_hosts=["app2.example.com"]))
    assert cluster.check(pc) == 2
    cluster.delete("ns2/ing2")
    assert cluster.check(pc) == 0
    result, _ = pc.update(dict(cluster.cache), [])
    assert "app1.example.com" not in result.hosts
    assert result.sources["app2.example.com"] == ("new/one",)
    assert [r.host for r in result.rejections] == ["10.0.0.1"]
    cluster.relist()
    assert cluster.check(pc) == 0


def test_changes_and_deletions_in_one_pass_are_all_seen() -> None:
    cluster = Cluster()
    for i in range(20):
        cluster.put(ingress("ns", f"ing{i}", tls_hosts=[f"app{i}.example.com"]))
    pc = PolicyCache(HostPolicy())
    cluster.check(pc)
    cluster.delete("ns/ing3")
    cluster.put(ingress("ns", "ing7", tls_hosts=["seven.example.com"]))
    cluster.put(ingress("ns", "late", tls_hosts=["app3.example.com"]))
    assert cluster.check(pc) == 2
    result, _ = pc.update(dict(cluster.cache), [])
    assert "app7.example.com" not in result.hosts
    assert result.sources["app3.example.com"] == ("ns/late",)


def test_objects_without_a_resource_version_are_reused_only_when_identical() -> None:
    pc = PolicyCache(HostPolicy())
    bare = ingress("a", "b", tls_hosts=["x.example.com"])
    assert pc.update({"a/b": bare}, [])[1] == 1
    assert pc.update({"a/b": bare}, [])[1] == 0
    twin = ingress("a", "b", tls_hosts=["y.example.com"])
    result, evaluated = pc.update({"a/b": twin}, [])
    assert evaluated == 1
    assert result.hosts == ("y.example.com",)


def test_a_new_default_class_reevaluates_everything() -> None:
    cluster = Cluster()
    cluster.put(ingress("a", "classless", tls_hosts=["free.example.com"]))
    cluster.put(ingress("a", "nginx", tls_hosts=["n.example.com"], class_name="nginx"))
    pc = PolicyCache(NGINX)
    assert cluster.check(pc, NGINX) == 2
    cluster.classes["nginx"] = ingress_class("nginx", default=True)
    assert cluster.check(pc, NGINX) == 2
    result, _ = pc.update(dict(cluster.cache), list(cluster.classes.values()))
    assert result.hosts == ("free.example.com", "n.example.com")
    # Another class, even no default, changes which class names exist: everything again.
    cluster.classes["other"] = ingress_class("other")
    assert cluster.check(pc, NGINX) == 2
    assert cluster.check(pc, NGINX) == 0
    del cluster.classes["nginx"]
    assert cluster.check(pc, NGINX) == 2
    assert cluster.check(pc, HostPolicy()) == 2


def test_class_existence_follows_the_classes_added_and_removed() -> None:
    cluster = Cluster()
    cluster.put(ingress("a", "typo", tls_hosts=["t.example.com"], class_name="nginx-typo"))
    cluster.put(ingress("a", "free", tls_hosts=["f.example.com"]))
    cluster.classes["nginx"] = ingress_class("nginx")
    pc = PolicyCache(HostPolicy())
    assert cluster.check(pc) == 2
    result, _ = pc.update(dict(cluster.cache), list(cluster.classes.values()))
    assert result.hosts == ("f.example.com",)
    assert [r.reason for r in result.rejections] == ["IngressClass 'nginx-typo' does not exist"]
    # Unchanged classes: nothing is evaluated again.
    assert cluster.check(pc) == 0
    # The class appears (a non-default one): the Ingress is looked at again, and accepted.
    cluster.classes["typo"] = ingress_class("nginx-typo")
    assert cluster.check(pc) == 2
    result, _ = pc.update(dict(cluster.cache), list(cluster.classes.values()))
    assert (result.hosts, result.rejections) == (("f.example.com", "t.example.com"), ())
    # And goes away again.
    del cluster.classes["typo"]
    assert cluster.check(pc) == 2
    result, _ = pc.update(dict(cluster.cache), list(cluster.classes.values()))
    assert result.hosts == ("f.example.com",) and len(result.rejections) == 1


def test_a_failed_update_leaves_no_half_applied_state() -> None:
    class Boom(Exception):
        pass

    class Exploding(dict[str, Obj]):
        """An Ingress cache whose second read fails, after bookkeeping has begun."""

        reads = 0

        def __getitem__(self, key: str) -> Obj:
            self.reads += 1
            if self.reads > 1:
                raise Boom
            return super().__getitem__(key)

    pc = PolicyCache(HostPolicy())
    pc.update({"a/b": ingress("a", "b", tls_hosts=["x.example.com"])}, [])
    broken = Exploding({"c/d": ingress("c", "d", tls_hosts=["y.example.com"]),
                        "e/f": ingress("e", "f", tls_hosts=["z.example.com"])})
    try:
        pc.update(broken, [])
    except Boom:
        pass
    else:
        raise AssertionError("the failure was swallowed")
    result, evaluated = pc.update({"c/d": ingress("c", "d", tls_hosts=["y.example.com"])}, [])
    assert (result.hosts, evaluated) == (("y.example.com",), 1)


NAMES = [f"i{i}" for i in range(6)]
HOSTS = ["a.example.com", "b.example.com", "*.c.example.com", "A.EXAMPLE.COM.", "10.0.0.1",
         "x.cluster.local", "bad host", ""]
step = st.one_of(
    st.tuples(st.just("put"), st.sampled_from(NAMES), st.sampled_from(["n1", "n2", "x" * 130]),
              st.lists(st.sampled_from(HOSTS), max_size=4),
              st.sampled_from([None, "nginx", "other"])),
    st.tuples(st.just("delete"), st.sampled_from(NAMES)),
    st.tuples(st.just("default"), st.sampled_from([None, "nginx", "other"])),
    st.tuples(st.just("class"), st.sampled_from(["nginx", "other"]), st.booleans()),
    st.tuples(st.just("relist")),
    st.tuples(st.just("junk"), st.sampled_from(NAMES)),
    st.tuples(st.just("check")),
)


@given(st.lists(step, max_size=30), st.sampled_from([HostPolicy(), NGINX,
                                                      HostPolicy(hosts_from="all")]))
@settings(max_examples=300, deadline=None)
def test_any_sequence_of_changes_matches_a_full_evaluation(steps: list[Any],
                                                           policy: HostPolicy) -> None:
    cluster = Cluster()
    pc = PolicyCache(policy)
    keys: dict[str, str] = {}  # name → the cache key of its Ingress
    for op in steps:
        if op[0] == "put":
            _, name, ns, hosts, cls = op
            # Long names share their shortened display form: origins must be counted.
            full = "y" * 130 + name if len(ns) > 100 else name
            old = keys.get(name)
            if old is not None and old != f"{ns}/{full}":
                cluster.delete(old)
            cluster.put(ingress(ns, full, tls_hosts=hosts, rule_hosts=hosts[:1],
                                class_name=cls))
            keys[name] = f"{ns}/{full}"
        elif op[0] == "delete" and op[1] in keys:
            cluster.delete(keys.pop(op[1]))
        elif op[0] == "default":
            cluster.classes = {} if op[1] is None else {"c": ingress_class(op[1], default=True)}
        elif op[0] == "class":
            # A class that is no default exists, or is gone.
            if op[2]:
                cluster.classes[op[1]] = ingress_class(op[1])
            else:
                cluster.classes.pop(op[1], None)
        elif op[0] == "relist":
            cluster.relist()
        elif op[0] == "junk":
            cluster.cache[f"junk/{op[1]}"] = {"metadata": {"name": 3}, "spec": []}
        elif op[0] == "check":
            # Between checks the changes pile up, as they do between reconciles.
            cluster.check(pc, policy)
    cluster.check(pc, policy)


def test_ingresses_whose_shortened_names_coincide_are_counted_apart() -> None:
    cluster = Cluster()
    long_ns = "n" * 130
    for name in ("y" * 130 + "1", "y" * 130 + "2"):
        cluster.put(ingress(long_ns, name, tls_hosts=["shared.example.com"]))
    pc = PolicyCache(HostPolicy())
    cluster.check(pc)
    cluster.delete(f"{long_ns}/{'y' * 130}1")
    cluster.check(pc)
    result, _ = pc.update(dict(cluster.cache), [])
    assert result.hosts == ("shared.example.com",)
    assert len(result.sources["shared.example.com"]) == 1
