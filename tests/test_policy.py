"""Host policy: validation of hostile host names (every source's hosts go through it)."""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from publicsuffixlist import PublicSuffixList

from hairpin_proxy.policy import HostPolicy, check_host, proxy_service_fqdn
from hairpin_proxy.settings import PolicySettings

POLICY = HostPolicy()
LONGEST = ".".join(["a" * 63] * 3 + ["a" * 58]) + ".io"  # 253 characters
TOO_LONG = ".".join(["a" * 63] * 3 + ["a" * 59]) + ".io"


# --------------------------------------------------------------------------- check_host

ACCEPTED = [
    ("example.com", "example.com"),
    ("www.example.com", "www.example.com"),
    ("WWW.Example.COM", "www.example.com"),
    ("www.example.com.", "www.example.com"),
    ("*.example.com", "*.example.com"),
    ("*.Example.com.", "*.example.com"),
    ("a-b.c-d.example", "a-b.c-d.example"),
    ("xn--bcher-kva.example", "xn--bcher-kva.example"),
    ("3com.com", "3com.com"),
    ("123.example.com", "123.example.com"),
    ("10.0.0.1.nip.io", "10.0.0.1.nip.io"),
    ("1e100.net", "1e100.net"),
    ("a" * 63 + ".com", "a" * 63 + ".com"),
    (LONGEST, LONGEST),
    ("my.cluster.local.example.com", "my.cluster.local.example.com"),
    ("localhost.example.com", "localhost.example.com"),
    ("svc.example.com", "svc.example.com"),
    ("home.arpa.example.com", "home.arpa.example.com"),
    ("*.example.co.uk", "*.example.co.uk"),
    ("example.co.uk", "example.co.uk"),
    ("x.github.io", "x.github.io"),
    ("*.x.github.io", "*.x.github.io"),
]


@pytest.mark.parametrize(("host", "expected"), ACCEPTED)
def test_accepted_hosts_are_normalized(host: str, expected: str) -> None:
    assert check_host(host, POLICY) == (expected, None)


def test_longest_accepted_name_is_253_characters() -> None:
    assert len(LONGEST) == 253 and len(TOO_LONG) == 254
    assert check_host(LONGEST, POLICY) == (LONGEST, None)
    assert check_host(LONGEST + ".", POLICY) == (LONGEST, None)
    assert check_host("*." + LONGEST[2:], POLICY) == ("*." + LONGEST[2:], None)
    assert check_host(TOO_LONG, POLICY) == (None, "longer than 253 characters")


REJECTED = [
    # type and emptiness
    (None, "not a string (NoneType)"),
    (42, "not a string (int)"),
    (["a.com"], "not a string (list)"),
    ({"host": "a.com"}, "not a string (dict)"),
    (b"example.com", "not a string (bytes)"),
    ("", "empty name"),
    (".", "empty label"),
    # IP addresses in every disguise
    ("10.0.0.1", "IP address, not a DNS name"),
    ("1.2.3.4.", "IP address, not a DNS name"),
    ("::1", "IP address, not a DNS name"),
    ("[::1]", "IP address, not a DNS name"),
    ("2001:db8::1", "IP address, not a DNS name"),
    ("::ffff:10.0.0.1", "IP address, not a DNS name"),
    ("fe80::1%eth0", "IP address, not a DNS name"),
    ("127.1", "looks like an IP address (numeric top-level label)"),
    ("0x7f.0.0.1", "looks like an IP address (numeric top-level label)"),
    ("127.0.0.0x1", "looks like an IP address (numeric top-level label)"),
    ("010.000.000.001", "looks like an IP address (numeric top-level label)"),
    ("2130706433", "looks like an IP address (numeric top-level label)"),
    ("example.123", "looks like an IP address (numeric top-level label)"),
    ("*.10.0.0", "looks like an IP address (numeric top-level label)"),
    # protected zones and names
    ("cluster.local", "at or under the cluster domain cluster.local"),
    ("kubernetes.default.svc.cluster.local", "at or under the cluster domain cluster.local"),
    ("KUBERNETES.default.svc.cluster.local.", "at or under the cluster domain cluster.local"),
    ("*.svc.cluster.local", "at or under the cluster domain cluster.local"),
    ("*.cluster.local", "at or under the cluster domain cluster.local"),
    ("1.0.0.10.in-addr.arpa", "at or under in-addr.arpa"),
    ("in-addr.arpa", "at or under in-addr.arpa"),
    ("b.a.ip6.arpa", "at or under ip6.arpa"),
    ("foo.localhost", "at or under localhost"),
    ("*.foo.localhost", "at or under localhost"),
    ("example.home.arpa", "a name at or under home.arpa, used inside home and private networks"),
    ("home.arpa", "a name at or under home.arpa, used inside home and private networks"),
    ("my-db.internal", "a name under a top-level label used inside clusters (internal)"),
    ("web.prod.svc", "a name under a top-level label used inside clusters (svc)"),
    ("*.apps.local", "a name under a top-level label used inside clusters (local)"),
    ("db.cluster", "a name under a top-level label used inside clusters (cluster)"),
    # public suffixes (ICANN and private sections of the list)
    ("co.uk", "a public suffix (co.uk), shared by many owners"),
    ("github.io", "a public suffix (github.io), shared by many owners"),
    ("*.co.uk", "wildcard covers a whole public suffix (co.uk)"),
    ("*.github.io", "wildcard covers a whole public suffix (github.io)"),
    ("hairpin-proxy.hairpin-proxy.svc.cluster.local", "the proxy's own target name"),
    ("hairpin-proxy.hairpin-proxy.svc.cluster.local.", "the proxy's own target name"),
    ("localhost", "single-label name"),
    ("intranet", "single-label name"),
    ("com", "single-label name"),
    # lengths
    ("a" * 64 + ".com", "label longer than 63 characters"),
    (TOO_LONG, "longer than 253 characters"),
    ("a." * 200 + "com", "longer than 253 characters"),
    # characters
    ("exa mple.com", "invalid character ' '"),
    (" example.com", "invalid character ' '"),
    ("example.com ", "invalid character ' '"),
    ("example.com\n", "invalid character '\\n'"),
    ("example.com\r", "invalid character '\\r'"),
    ("exa\tmple.com", "invalid character '\\t'"),
    ("a.com\nrewrite name exact evil.com x", "invalid character '\\n'"),
    ("a.com}", "invalid character '}'"),
    ("{a.com", "invalid character '{'"),
    ('"a.com"', "invalid character '\"'"),
    ("'a.com'", 'invalid character "\'"'),
    ("a.com#x", "invalid character '#'"),
    ("a.com;x", "invalid character ';'"),
    ("a\x00.com", "invalid character '\\x00'"),
    ("a\x7f.com", "invalid character '\\x7f'"),
    ("a_b.example.com", "invalid character '_'"),
    ("a/b.example.com", "invalid character '/'"),
    ("user@example.com", "invalid character '@'"),
    ("example.com:443", "invalid character ':'"),
    ("a\\.example.com", "invalid character '\\\\'"),
    ("bücher.example", "non-ASCII characters (internationalized names must be punycode, xn--)"),
    ("example.\u212aom", "non-ASCII characters (internationalized names must be punycode, xn--)"),
    ("ex\u200bample.com", "non-ASCII characters (internationalized names must be punycode, xn--)"),
    ("example.com\u2028", "non-ASCII characters (internationalized names must be punycode, xn--)"),
    # label shape
    ("-a.example.com", "label '-a' starts or ends with '-'"),
    ("a-.example.com", "label 'a-' starts or ends with '-'"),
    ("a.-b.com", "label '-b' starts or ends with '-'"),
    ("a.com-", "label 'com-' starts or ends with '-'"),
    ("a..example.com", "empty label"),
    (".example.com", "empty label"),
    ("example.com..", "empty label"),
    # wildcards
    ("*", "wildcard too broad (covers a whole top-level domain)"),
    ("*.com", "wildcard too broad (covers a whole top-level domain)"),
    ("*.com.", "wildcard too broad (covers a whole top-level domain)"),
    ("*.*.example.com", "'*' is allowed only as the whole first label"),
    ("a.*.example.com", "'*' is allowed only as the whole first label"),
    ("*a.example.com", "'*' is allowed only as the whole first label"),
    ("a*.example.com", "'*' is allowed only as the whole first label"),
    ("example.*", "'*' is allowed only as the whole first label"),
    ("**.example.com", "'*' is allowed only as the whole first label"),
]


@pytest.mark.parametrize(("host", "reason"), REJECTED)
def test_rejected_hosts_carry_the_reason(host: object, reason: str) -> None:
    assert check_host(host, POLICY) == (None, reason)


def test_custom_cluster_domain_and_target() -> None:
    policy = HostPolicy(cluster_domain="K8s.Example.com.", proxy_fqdn="proxy.example.org.")
    assert check_host("a.k8s.example.com", policy) == (
        None, "at or under the cluster domain k8s.example.com")
    assert check_host("proxy.example.org", policy) == (None, "the proxy's own target name")
    # The default domain stays protected beside the configured one, as do reverse zones.
    assert check_host("a.cluster.local", policy) == (
        None, "at or under the cluster domain cluster.local")
    assert check_host("x.in-addr.arpa", policy) == (None, "at or under in-addr.arpa")
    # A one-label wildcard over the parent would match the cluster domain or the target.
    assert check_host("*.example.com", policy) == (None, "wildcard covers k8s.example.com")
    assert check_host("*.example.org", policy) == (
        None, "wildcard covers the proxy's own target name")
    assert check_host("*.www.example.com", policy) == ("*.www.example.com", None)


@pytest.mark.parametrize(("domains", "host", "allowed"), [
    (("example.com",), "example.com", True),
    (("example.com",), "www.example.com", True),
    (("example.com",), "a.b.example.com", True),
    (("example.com",), "*.example.com", True),
    (("example.com",), "badexample.com", False),
    (("example.com",), "example.com.evil.org", False),
    (("example.com",), "example.org", False),
    (("www.example.com",), "*.example.com", False),
    (("www.example.com",), "example.com", False),
    (("Example.COM.",), "www.example.com", True),
    ((".example.com",), "www.example.com", True),
    (("*.example.com",), "www.example.com", True),
    (("example.com", "example.org"), "a.example.org", True),
])
def test_domain_allow_list(domains: tuple[str, ...], host: str, allowed: bool) -> None:
    policy = HostPolicy(domains=domains)
    name, reason = check_host(host, policy)
    if allowed:
        assert (name, reason) == (host, None)
    else:
        assert name is None
        assert reason is not None and reason.startswith("not under an allowed domain (")


def test_hosts_from_must_be_known() -> None:
    with pytest.raises(ValueError, match="hosts_from"):
        HostPolicy(hosts_from="annotations")
    with pytest.raises(ValueError, match="cluster_domain"):
        HostPolicy(cluster_domain=".")


def test_proxy_service_fqdn() -> None:
    assert proxy_service_fqdn("cluster.local") == "hairpin-proxy.hairpin-proxy.svc.cluster.local."
    assert proxy_service_fqdn("Corp.Internal.", "proxy", "infra") \
        == "proxy.infra.svc.corp.internal."
    assert HostPolicy().proxy_fqdn == proxy_service_fqdn("cluster.local")


def test_from_settings_maps_every_field() -> None:
    s = PolicySettings(hosts_from="all", ingress_class=("nginx",), include_namespace=("a",),
                       exclude_namespace=("b",), domain=("example.com",),
                       cluster_domain="corp.internal", max_hosts_per_ingress=7)
    policy = HostPolicy.from_settings(s, "")
    assert policy == HostPolicy(hosts_from="all", ingress_classes=("nginx",),
                                include_namespaces=("a",), exclude_namespaces=("b",),
                                domains=("example.com",), cluster_domain="corp.internal",
                                proxy_fqdn="hairpin-proxy.hairpin-proxy.svc.corp.internal.",
                                max_hosts_per_ingress=7)
    assert policy.max_hosts_per_ingress == 7
    assert HostPolicy.from_settings(PolicySettings(), "").max_hosts_per_ingress == 100
    assert HostPolicy.from_settings(s, "x.example.org.").proxy_fqdn == "x.example.org."


def test_the_class_and_namespace_selection_reads_as_sets() -> None:
    policy = HostPolicy(ingress_classes=("nginx", "nginx", "internal"),
                        include_namespaces=("a", "b"), exclude_namespaces=("c",))
    assert policy.selected_classes == frozenset({"nginx", "internal"})
    assert policy.included_namespaces == frozenset({"a", "b"})
    assert policy.excluded_namespaces == frozenset({"c"})
    every = HostPolicy()
    assert every.selected_classes == every.included_namespaces == frozenset()
    assert every.excluded_namespaces == frozenset()


# --------------------------------------------------------------------------- properties

LABEL_ALPHABET = "abcAZ019-*."
long_names = st.lists(st.text(alphabet="ab1-", min_size=50, max_size=70), min_size=1,
                      max_size=5).map(lambda labels: ".".join([*labels, "com"]))
host_like = (st.text(alphabet=LABEL_ALPHABET, max_size=40) | st.text(max_size=20) | long_names
             | st.from_regex(r"\A(\*\.)?([a-z0-9]([a-z0-9-]{0,5}[a-z0-9])?\.){1,4}[a-z]{2,6}\.?\Z"))

PSL = PublicSuffixList()  # the package itself, as the reference for public suffixes
_REF_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")


def reference_valid(host: str) -> bool:
    """An independent, slow statement of the syntax rules (no zone rules)."""
    if not host.isascii():
        return False
    name = host.lower()
    name = name[:-1] if name.endswith(".") else name
    if len(name) > 253:
        return False
    labels = name.split(".")
    if labels[0] == "*":
        labels = labels[1:]
        if len(labels) < 2:
            return False
    if len(labels) < 2:
        return False
    if re.fullmatch(r"[0-9]+|0x[0-9a-f]*", labels[-1]):
        return False
    return all(len(lb) <= 63 and _REF_LABEL.fullmatch(lb) for lb in labels)


@given(host_like)
@settings(max_examples=600)
def test_check_host_agrees_with_a_reference_and_always_gives_a_reason(host: str) -> None:
    policy = HostPolicy(cluster_domain="never.test", proxy_fqdn="proxy.never.test.")
    name, reason = check_host(host, policy)
    assert (name is None) != (reason is None)
    bare = host.lower().removesuffix(".").removeprefix("*.")
    protected = any(bare == z or bare.endswith("." + z)
                    for z in ("never.test", "in-addr.arpa", "ip6.arpa", "localhost", "home.arpa"))
    internal = bare.rpartition(".")[2] in ("svc", "local", "cluster", "internal")
    valid = reference_valid(host) and not protected and not internal \
        and not PSL.is_public(bare)
    assert (name is not None) == valid, (host, reason)
    # The generic fallback means a failure nobody diagnosed: it must stay unreachable.
    assert reason != "not a valid DNS name"


@given(host_like)
@settings(max_examples=300)
def test_accepted_names_are_fixed_points(host: str) -> None:
    name, _ = check_host(host, POLICY)
    if name is not None:
        assert name == name.lower()
        assert not name.endswith(".")
        assert check_host(name, POLICY) == (name, None)



def test_a_wildcard_covering_several_protected_names_names_the_target_first() -> None:
    policy = HostPolicy(cluster_domain="k8s.example.com", proxy_fqdn="proxy.example.com.")
    assert check_host("*.example.com", policy) == (
        None, "wildcard covers the proxy's own target name")
