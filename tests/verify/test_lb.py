"""lb_addresses: load balancer addresses from Services and Ingresses (pure)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from hairpin_proxy.verify.lb import (
    LbIndex,
    LbSource,
    canonical_ip,
    canonical_name,
    lb_addresses,
)
from tests.verify.objects import ingress, lb_service


def test_service_ips_and_modes() -> None:
    lb = lb_addresses([
        lb_service("ingress-nginx", "ingress-nginx", {"ip": "203.0.113.10"},
                   {"ip": "2001:DB8::0:1", "ipMode": "VIP"}),
        lb_service("traefik", "traefik", {"ip": "198.51.100.5", "ipMode": "Proxy"}),
    ])
    assert lb.addresses == ("198.51.100.5", "203.0.113.10", "2001:db8::1")
    ten = lb.lookup("203.0.113.10")
    assert ten is not None and not ten.proxy
    assert ten.services == ("ingress-nginx/ingress-nginx",)
    assert ten.describe() == "Service ingress-nginx/ingress-nginx"
    v6 = lb.lookup("2001:db8:0::1")
    assert v6 is not None and v6.sources == (
        LbSource("Service", "ingress-nginx", "ingress-nginx", "VIP"),)
    proxied = lb.lookup("198.51.100.5")
    assert proxied is not None and proxied.proxy
    assert lb.lookup("192.0.2.1") is None
    assert lb.lookup("not an ip") is None


def test_only_load_balancer_services() -> None:
    lb = lb_addresses([lb_service("a", "cluster-ip", {"ip": "192.0.2.1"}, type_="ClusterIP"),
                       lb_service("a", "node-port", {"ip": "192.0.2.2"}, type_="NodePort")])
    assert not lb and lb == LbIndex()


def test_ingress_status_counts_and_does_not_vote_on_ip_mode() -> None:
    lb = lb_addresses(
        [lb_service("ing", "ctrl", {"ip": "203.0.113.10", "ipMode": "Proxy"})],
        [ingress("shop", "web", {"ip": "203.0.113.10"}, {"ip": "192.0.2.9"})])
    shared = lb.lookup("203.0.113.10")
    assert shared is not None and shared.proxy  # the Ingress's copy has no ipMode to vote with
    only_ingress = lb.lookup("192.0.2.9")
    assert only_ingress is not None and not only_ingress.proxy
    assert str(only_ingress.sources[0]) == "Ingress shop/web"


def test_mixed_ip_modes_count_as_vip() -> None:
    # Two Services sharing an address (MetalLB allow-shared-ip), one short-circuited.
    lb = lb_addresses([lb_service("a", "p", {"ip": "192.0.2.1", "ipMode": "Proxy"}),
                       lb_service("a", "v", {"ip": "192.0.2.1"})])
    entry = lb.lookup("192.0.2.1")
    assert entry is not None and not entry.proxy and len(entry.sources) == 2


def test_hostnames_are_returned_separately_and_resolved_later() -> None:
    lb = lb_addresses([lb_service("ing", "elb", {"hostname": "ABC.elb.Amazonaws.com."})],
                      [ingress("shop", "web", {"hostname": "abc.elb.amazonaws.com"})])
    assert lb.addresses == () and lb.hostnames == ("abc.elb.amazonaws.com",)
    assert lb and lb.lookup_name("abc.ELB.amazonaws.com.") is not None
    learned = lb.with_resolved({"abc.elb.amazonaws.com": ["192.0.2.7", "junk"],
                                "stale.example": ["192.0.2.8"]})
    entry = learned.lookup("192.0.2.7")
    assert entry is not None and entry.via == "abc.elb.amazonaws.com" and not entry.proxy
    assert learned.lookup("192.0.2.8") is None  # not one of our names any more
    assert learned.hostnames == lb.hostnames
    assert learned != lb


def test_direct_address_wins_over_learned_one() -> None:
    lb = lb_addresses([lb_service("a", "p", {"ip": "192.0.2.1", "ipMode": "Proxy"},
                                  {"hostname": "lb.example"})])
    entry = lb.with_resolved({"lb.example": ["192.0.2.1"]}).lookup("192.0.2.1")
    assert entry is not None and entry.proxy and entry.via == ""


def test_malformed_entries_are_skipped() -> None:
    lb = lb_addresses([
        "not a dict", None, {"spec": "x"}, {"spec": {"type": "LoadBalancer"}, "status": []},
        {"spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {"ingress": "x"}}},
        lb_service("a", "b", "x", {"ip": 7}, {"ip": "300.1.1.1"}, {"hostname": "bad name"},
                   {"hostname": "10.0.0.1"}, {"ip": "192.0.2.1", "ipMode": 3}),
        {"spec": {"type": "LoadBalancer"}, "metadata": {"name": 5},
         "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.2"}]}}},
    ], [None, {"status": {"loadBalancer": None}}])
    assert lb.addresses == ("192.0.2.1", "192.0.2.2")
    assert lb.hostnames == ()
    nameless = lb.lookup("192.0.2.2")
    assert nameless is not None and nameless.sources[0].name == ""


def test_canonical_ip() -> None:
    assert canonical_ip("::ffff:192.0.2.1") == "192.0.2.1"
    assert canonical_ip("[2001:db8::1]") == "2001:db8::1"
    assert canonical_ip("192.0.2.01") is None
    assert canonical_ip("") is None and canonical_ip(None) is None


def test_canonical_name() -> None:
    assert canonical_name("A.Example.COM.") == "a.example.com"
    for bad in ["", ".", "a..b", "-a.b", "a b", "é.example", "x" * 64 + ".com", 3, "1.2.3.4"]:
        assert canonical_name(bad) is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20)
    | st.sampled_from(["LoadBalancer", "Proxy", "VIP", "203.0.113.10", "2001:db8::1",
                       "lb.example.com", "ip", "hostname", "ipMode"]),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["metadata", "spec", "status", "loadBalancer", "ingress",
                                       "type", "ip", "hostname", "ipMode", "name",
                                       "namespace"]), inner, max_size=5),
    max_leaves=30)


@given(st.lists(json_values, max_size=4), st.lists(json_values, max_size=4))
def test_never_raises(services: list[Any], ingresses: list[Any]) -> None:
    lb = lb_addresses(services, ingresses)
    for address in lb.addresses:
        assert canonical_ip(address) == address
        assert lb.lookup(address) is not None
    for name in lb.hostnames:
        assert canonical_name(name) == name


@given(st.lists(st.ip_addresses().map(str), max_size=6), st.booleans())
def test_every_reported_address_is_found(addresses: list[str], proxy: bool) -> None:
    entries = [{"ip": a, "ipMode": "Proxy"} if proxy else {"ip": a} for a in addresses]
    lb = lb_addresses([lb_service("ns", "svc", *entries)])
    assert set(lb.addresses) == {canonical_ip(a) for a in addresses}
    for a in addresses:
        entry = lb.lookup(a)
        assert entry is not None and entry.proxy is proxy
    assert lb == lb_addresses([lb_service("ns", "svc", *reversed(entries))])
