"""Our rule format (template stanzas, their regexes, Answers), import mode and plugin queries.

The regexes are compiled with Python's ``re``, which agrees with RE2 (CoreDNS's Go regexp) on
every construct they use; ``test_regexes_use_only_what_re2_accepts`` checks that they use no
construct on which the two differ.
"""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.corefile import (
    BEGIN_MARKER,
    END_MARKER,
    Answers,
    CorefileError,
    compact,
    has_plugin,
    import_matches,
    import_snippet,
    imports_key,
    match_regexes,
    parse,
    rules,
    served_zones,
)
from hairpin_proxy.corefile.names import regex_escape
from tests.corefiles import BY_NAME, SAMPLES, Sample

KEY = "hairpin-proxy.override"
PREFIX = "(?i)^(?P<hairpin_proxy>"
WILD_PREFIX = PREFIX + r"[^._][^.]*\.(?:"
DEEP_PREFIX = PREFIX + r"(?:[^._][^.]*\.)+(?:"


def regexes(hosts: list[str]) -> list[re.Pattern[str]]:
    return [re.compile(rx) for rx in match_regexes(sorted(set(hosts)))]


def matches(hosts: list[str], name: str) -> bool:
    # CoreDNS's template plugin uses MatchString (a search): the anchors must do the work.
    return any(p.search(name) for p in regexes(hosts))


# --- regex semantics -------------------------------------------------------------------------


def test_regex_text_for_a_small_host_set() -> None:
    assert match_regexes(["*.apps.example.com", "a.example.com", "b-1.example.com"]) == [
        # The compact spelling: the shared domain written once.
        r"(?i)^(?P<hairpin_proxy>(?:a|b-1)\.example\.com)\.$",
        r"(?i)^(?P<hairpin_proxy>[^._][^.]*\.(?:apps\.example\.com))\.$",
    ]
    assert match_regexes(["**.gw.example.com", "*.apps.example.com", "a.example.com"]) == [
        r"(?i)^(?P<hairpin_proxy>a\.example\.com)\.$",
        r"(?i)^(?P<hairpin_proxy>[^._][^.]*\.(?:apps\.example\.com))\.$",
        r"(?i)^(?P<hairpin_proxy>(?:[^._][^.]*\.)+(?:gw\.example\.com))\.$",
    ]
    assert match_regexes(["a.b"]) == [r"(?i)^(?P<hairpin_proxy>a\.b)\.$"]
    assert match_regexes(["*.b"]) == [r"(?i)^(?P<hairpin_proxy>[^._][^.]*\.(?:b))\.$"]
    assert match_regexes([]) == []


@pytest.mark.parametrize(("name", "expected"), [
    ("a.example.com.", True),
    ("A.Example.COM.", True),  # case-insensitive
    ("a.example.com", False),  # CoreDNS always asks with the trailing dot
    ("xa.example.com.", False),  # anchored at the start
    ("a.example.com.evil.", False),  # and at the end
    ("a.example.com..", False),
    ("aXexample.com.", False),  # the dots are literal
    ("a.exampleXcom.", False),
    ("b.a.example.com.", False),
    ("x.apps.example.com.", True),
    ("X-1.APPS.example.com.", True),
    ("apps.example.com.", False),  # a wildcard needs exactly one label in front
    (".apps.example.com.", False),
    ("a.b.apps.example.com.", False),
    ("_acme-challenge.apps.example.com.", False),  # not a host name: left to the real zone
    ("x.appsXexample.com.", False),
    ("x.apps.example.co.", False),
    ("x.apps.example.com.x.", False),
    ("example.com.", False),
    ("", False),
])
def test_regexes_match_exactly_the_hosts(name: str, expected: bool) -> None:
    assert matches(["a.example.com", "*.apps.example.com"], name) is expected


@pytest.mark.parametrize(("name", "expected"), [
    ("x.gw.example.com.", True),
    ("a.b.gw.example.com.", True),  # a Gateway API wildcard: one or more labels
    ("A.b.C.d.GW.example.com.", True),
    ("gw.example.com.", False),  # never the domain itself
    ("_acme-challenge.gw.example.com.", False),  # "_" labels at any depth stay upstream
    ("_acme-challenge.x.gw.example.com.", False),
    ("x._tcp.gw.example.com.", False),
    ("x.y._z.gw.example.com.", False),
    (".x.gw.example.com.", False),
    ("x..gw.example.com.", False),
    ("x.gwXexample.com.", False),
    ("x.gw.example.com.x.", False),
    ("x.gw.example.com", False),
])
def test_any_depth_regexes_match_every_depth_but_no_service_label(name: str,
                                                                  expected: bool) -> None:
    assert matches(["**.gw.example.com"], name) is expected


def test_every_regex_is_anchored_case_insensitive_and_named() -> None:
    for rx in match_regexes(["*.a.example", "b.example", "*.c.example", "d.example"]):
        assert rx.startswith(PREFIX)
        assert rx.endswith(r")\.$")
        pattern = re.compile(rx)
        assert pattern.flags & re.IGNORECASE
        assert "hairpin_proxy" in pattern.groupindex


# Label characters check_host accepts, including regex metacharacters and non-ASCII.
_LABEL_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789-_ABC|()[]+?$^!%&,/:<=>@~ü\u00e9\u4e2d"
LABEL = st.text(_LABEL_CHARS, min_size=1, max_size=12).filter(lambda s: "*" not in s)
NAME = st.lists(LABEL, min_size=1, max_size=4).map(".".join)
HOST = st.one_of(NAME, NAME.map(lambda n: "*." + n), NAME.map(lambda n: "**." + n))


def _body(rx: str) -> tuple[str, str]:
    """(the host form's prefix, the alternatives) of one regex."""
    for prefix, opening in (("**.", DEEP_PREFIX), ("*.", WILD_PREFIX)):
        if rx.startswith(opening):
            return prefix, rx[len(opening):-len(r"))\.$")]
    assert rx.startswith(PREFIX)
    return "", rx[len(PREFIX):-len(r")\.$")]


def _alternatives(body: str) -> list[str]:
    names = compact.decode(body)
    assert names is not None, body
    return names


def _plain_len(names: list[str], form: str) -> int:
    """The bytes of the regex of ``names`` in the plain spelling (each name in full)."""
    opening = {"": PREFIX, "*.": WILD_PREFIX, "**.": DEEP_PREFIX}[form]
    body = "|".join(map(regex_escape, names))
    closing = r")\.$" if not form else r"))\.$"
    return len((opening + body + closing).encode())


def expected_match(hosts: list[str], name: str) -> bool:
    """Whether a query for ``name`` (no trailing dot) is one of ours: a host, or one label not
    starting with "_" under a wildcard's domain. Case-insensitive."""
    name = name.lower()
    exact = {h.lower() for h in hosts if not h.startswith("*")}
    domains = {h[2:].lower() for h in hosts if h.startswith("*.")}
    deep = {h[3:].lower() for h in hosts if h.startswith("**.")}
    first, _, rest = name.partition(".")
    if name in exact or (bool(first) and not first.startswith("_") and rest in domains):
        return True
    labels = name.split(".")
    for i in range(1, len(labels)):
        if not labels[i - 1] or labels[i - 1].startswith("_"):
            return False
        if ".".join(labels[i:]) in deep:
            return True
    return False


@settings(max_examples=200, deadline=None)
@given(hosts=st.lists(HOST, min_size=1, max_size=12), probe=NAME, label=LABEL)
def test_regex_semantics_property(hosts: list[str], probe: str, label: str) -> None:
    for rx in match_regexes(sorted(set(hosts))):
        _, body = _body(rx)
        # Every "." of a host is escaped: an unescaped one would match any character.
        assert not re.search(r"(?<!\\)\.", body)
    names = [probe, f"{label}.{probe}"]
    for h in hosts:
        domain = h.removeprefix("*").removeprefix("*.")
        names += [h, domain, f"{label}.{domain}", f"x.{label}.{domain}",
                  f"_acme-challenge.{domain}", f"{label}{domain}",
                  f"{label}._x.{domain}", f"{label}.{label}.{label}.{domain}"]
    for name in names:
        for variant in (name, name.upper(), name.lower()):
            # CoreDNS asks with the trailing dot; without it nothing matches.
            assert matches(hosts, variant + ".") is expected_match(hosts, variant), variant
            assert not matches(hosts, variant)
    for h in hosts:
        if h.startswith("**."):
            assert matches(hosts, "x.y." + h[3:] + ".")
        elif h.startswith("*."):
            assert matches(hosts, "x." + h[2:] + ".")
        else:
            assert matches(hosts, h + ".")


@settings(max_examples=50, deadline=None)
@given(hosts=st.lists(HOST, min_size=1, max_size=40))
def test_regexes_use_only_what_re2_accepts(hosts: list[str]) -> None:
    for rx in match_regexes(sorted(set(hosts))):
        # No lookarounds, atomic groups, backreferences or \d-style classes...
        for construct in ("(?=", "(?!", "(?<=", "(?<!", "(?>", "(?#"):
            assert construct not in rx
        # ...and a backslash only ever escapes ASCII punctuation (RE2 refuses "\" + letter,
        # digit, "_" or anything non-ASCII).
        for m in re.finditer(r"\\(.)", rx, re.DOTALL):
            c = m[1]
            assert c.isascii() and not c.isalnum() and c != "_", rx
        # The only groups are ours: the named one and, for wildcards, one non-capturing one.
        assert rx.count("(?P<") == 1
        assert len(re.findall(r"(?<!\\)\((?!\?)", rx)) == 0


# Long hosts (each up to 253 characters) in quantity, so that the regexes are split.
LONG_LABEL = st.text("abcdefghijklmnopqrstuvwxyz0123456789-ü", min_size=40, max_size=60)
LONG_HOST = st.builds(lambda labels, form: form + ".".join(labels),
                      st.lists(LONG_LABEL, min_size=1, max_size=3),
                      st.sampled_from(["", "*.", "**."]))


@settings(max_examples=30, deadline=None)
@given(hosts=st.lists(LONG_HOST, min_size=1, max_size=400, unique=True))
def test_chunks_stay_under_the_limit_and_cover_exactly_the_hosts(hosts: list[str]) -> None:
    rxs = match_regexes(sorted(hosts))
    # CoreDNS measures with Go's len: bytes of UTF-8, not characters.
    assert all(len(rx.encode("utf-8")) <= rules.MAX_REGEX for rx in rxs)
    found: list[str] = []
    for rx in rxs:
        form, body = _body(rx)
        found += [form + alt for alt in _alternatives(body)]
    assert sorted(found) == sorted(hosts)  # every host once, nothing else
    assert rules.MAX_REGEX <= 10_000  # CoreDNS 1.14 refuses longer ones


def test_chunks_stop_when_full_or_before_a_name_that_starts_one() -> None:
    hosts = sorted(f"h{i:04d}." + "x" * 200 + ".example.com" for i in range(400))
    rxs = match_regexes(hosts)
    assert len(rxs) > 2
    assert all(len(rx) <= rules.MAX_REGEX for rx in rxs)
    cut = [rules.starts_regex(h) for h in hosts]
    assert any(cut[1:]), "the names chosen hold a cut: the test would not see one"
    # Each chunk but the last ends where its plain spelling is full (the compact one is never
    # longer), or just before a name that starts a regex of its own, and at no other place.
    at = 0
    for rx, following in itertools.pairwise(rxs):
        names = _alternatives(_body(rx)[1])
        first = _alternatives(_body(following)[1])[0]
        assert not any(cut[at + 1:at + len(names)])
        at += len(names)
        assert rules.starts_regex(first) or \
            _plain_len(names, "") <= rules.MAX_REGEX < _plain_len([*names, first], "")


def test_a_name_added_changes_only_the_regexes_between_the_cuts_around_it() -> None:
    hosts = sorted(f"customer-{i}.shop.example.com" for i in range(3000))
    before = match_regexes(hosts)
    for extra in ("customer-1500x.shop.example.com", "a.shop.example.com", "zz.example.com"):
        now = sorted([*hosts, extra])
        after = match_regexes(now)
        # The names from the last one before it that starts a regex (or the first) up to the
        # next that does (or the end): only regexes of these change.
        at = now.index(extra)
        lo = max([k for k in rules.cuts(now) if k <= at], default=0)
        hi = min([k for k in rules.cuts(now) if k > at], default=len(now))
        changed = [n for rx in set(after) - set(before) for n in _alternatives(_body(rx)[1])]
        assert extra in changed
        assert set(changed) <= set(now[lo:hi]), extra
        assert len(set(after) - set(before)) < len(after) // 2


def test_non_ascii_hosts_are_chunked_by_bytes() -> None:
    # Fails if the limit were counted in characters: each "ü" is two bytes.
    hosts = sorted(f"{i}.{'ü' * 60}.de" for i in range(300))
    rxs = match_regexes(hosts)
    assert all(len(rx.encode()) <= rules.MAX_REGEX for rx in rxs)
    plain = [_plain_len(_alternatives(_body(rx)[1]), "") for rx in rxs]
    assert all(n <= rules.MAX_REGEX for n in plain)
    assert max(plain) > rules.MAX_REGEX // 2


def test_hosts_of_regex_reads_back_only_what_we_write() -> None:
    hosts = ["**.gw.example.com", "*.apps.example.com", "a.example.com", "b|c.example.com"]
    for rx in match_regexes(hosts):
        got = rules.hosts_of_regex(rx)
        assert got is not None and set(got) <= set(hosts)
    for foreign in [r"(?i)^(?P<hairpin_proxy>a\.example\.com|)\.$",  # empty alternative
                    r"(?i)^(?P<hairpin_proxy>b\.example\.com|a\.example\.com)\.$",  # unsorted
                    r"^(?P<hairpin_proxy>a\.example\.com)\.$",  # not case-insensitive
                    r"(?i)^(?P<hairpin_proxy>a.example.com)\.$",  # unescaped dots
                    r"(?i)^(?P<hairpin_proxy>[^.]+\.(?:example\.com))\.$",
                    r"(?i)^(?P<hairpin_proxy>(?:[^.]+\.)+(?:example\.com))\.$",
                    r"(?i)^(?P<hairpin_proxy>(?:[^._][^.]*\.)+(?:\*\.example\.com))\.$",
                    ".*"]:
        assert rules.hosts_of_regex(foreign) is None, foreign


# --- Answers ---------------------------------------------------------------------------------


def test_answers_of_splits_sorts_and_canonicalises() -> None:
    a = Answers.of(["10.96.0.3", "FD00:0::20", "10.96.0.20", "10.96.0.3", " 10.96.0.4"])
    assert a == Answers(("10.96.0.20", "10.96.0.3", "10.96.0.4"), ("fd00::20",))
    assert a.ttl == 10 and bool(a)
    assert not Answers()
    assert Answers.of([], ttl=60) == Answers(ttl=60)


@pytest.mark.parametrize("bad", ["", "10.0.0", "10.0.0.256", "fe80::1%eth0", "example.com",
                                 "10.0.0.1/32"])
def test_answers_of_refuses_what_is_not_an_address(bad: str) -> None:
    with pytest.raises(CorefileError, match="not an IP address"):
        Answers.of([bad])


@pytest.mark.parametrize("ttl", [0, -1, 3601, True])
def test_answers_ttl_is_bounded(ttl: int) -> None:
    with pytest.raises(CorefileError, match="TTL"):
        Answers.of(["10.0.0.1"], ttl=ttl)


@pytest.mark.parametrize(("v4", "v6"), [(("fd00::1",), ()), ((), ("10.0.0.1",)),
                                        (("010.0.0.1",), ()), ((), ("FD00::1",))])
def test_answers_fields_must_be_canonical_and_of_their_family(v4: tuple[str, ...],
                                                              v6: tuple[str, ...]) -> None:
    with pytest.raises(CorefileError):
        Answers(v4, v6)


# --- import mode -----------------------------------------------------------------------------


def test_import_snippet_is_our_rules_unindented() -> None:
    snippet = import_snippet(["b.example.com", "*.example.com", "b.example.com"],
                             answers=Answers.of(["10.96.0.20", "fd00::20"], ttl=30))
    assert snippet == (
        f"{BEGIN_MARKER}\n"
        "template IN A {\n"
        r"    match (?i)^(?P<hairpin_proxy>b\.example\.com)\.$" "\n"
        r"    match (?i)^(?P<hairpin_proxy>[^._][^.]*\.(?:example\.com))\.$" "\n"
        '    answer "{{ .Name }} 30 IN A 10.96.0.20"\n'
        "    fallthrough\n"
        "}\n"
        "template IN AAAA {\n"
        r"    match (?i)^(?P<hairpin_proxy>b\.example\.com)\.$" "\n"
        r"    match (?i)^(?P<hairpin_proxy>[^._][^.]*\.(?:example\.com))\.$" "\n"
        '    answer "{{ .Name }} 30 IN AAAA fd00::20"\n'
        "    fallthrough\n"
        "}\n"
        f"{END_MARKER}\n")
    # Spliced into a server block, it reads as two template directives.
    block = parse(".:53 {\n" + snippet + "}\n").server_blocks[0]
    assert [(d.name, d.args) for d in block.directives] == [
        ("template", ("IN", "A")), ("template", ("IN", "AAAA"))]
    assert import_snippet([], answers=Answers()) == f"{BEGIN_MARKER}\n{END_MARKER}\n"


def test_import_snippet_answers_nodata_for_a_family_without_address() -> None:
    snippet = import_snippet(["a.b"], answers=Answers.of(["fd00::20"]))
    a_stanza = snippet.split("template IN AAAA")[0]
    assert "    rcode NOERROR\n    fallthrough\n" in a_stanza
    assert "answer" not in a_stanza
    assert '"{{ .Name }} 10 IN AAAA fd00::20"' in snippet


def test_import_snippet_refuses_bad_input() -> None:
    with pytest.raises(CorefileError):
        import_snippet(["a b"], answers=Answers.of(["10.0.0.1"]))
    with pytest.raises(CorefileError, match="no proxy address"):
        import_snippet(["a.b"], answers=Answers())
    with pytest.raises(TypeError):
        import_snippet("a.b", answers=Answers.of(["10.0.0.1"]))


@pytest.mark.parametrize(("pattern", "key", "expected"), [
    ("/etc/coredns/custom/*.override", KEY, True),
    ("custom/*.override", KEY, True),  # AKS and Gardener: relative to /etc/coredns
    ("./custom/../custom/*.override", KEY, True),
    ("/etc/coredns/custom/hairpin-proxy.override", KEY, True),
    ("/etc/coredns/custom/hairpin-?roxy.override", KEY, True),
    ("/etc/coredns/custom/*.server", KEY, False),
    ("/etc/coredns/custom/*.override", "hairpin-proxy.server", False),
    ("/etc/coredns/other/*.override", KEY, False),
    ("/etc/coredns/custom/*", KEY, True),
    ("/etc/coredns/custom/*.*", KEY, False),  # Caddy refuses more than one "*"
    ("/etc/coredns/custom/[h]airpin-proxy.override", KEY, False),  # and character classes
    ("/etc/coredns/custom/*.override", "x/hairpin-proxy.override", False),
])
def test_import_matches(pattern: str, key: str, expected: bool) -> None:
    assert import_matches(pattern, key) is expected


def test_import_matches_with_other_directories() -> None:
    assert import_matches("extra/*.override", KEY, custom_dir="/srv/dns/extra",
                          corefile_dir="/srv/dns")
    assert not import_matches("custom/*.override", KEY, corefile_dir="/srv/dns")


def test_imports_key_looks_inside_the_root_block_only() -> None:
    top_level = ".:53 {\n  errors\n}\nimport /etc/coredns/custom/*.override\n"
    assert not imports_key(top_level, KEY)
    other_block = "x.org {\n  import /etc/coredns/custom/*.override\n}\n.:53 {\n}\n"
    assert not imports_key(other_block, KEY)
    via_snippet = "(c) {\n  import custom/*.override\n}\n.:53 {\n  import c\n}\n"
    assert imports_key(via_snippet, KEY)
    assert not imports_key("x.org {\n}\n", KEY)  # no root block at all
    both = ".:53 {\n  bind a\n  import custom/*.override\n}\n.:53 {\n  bind b\n}\n"
    assert not imports_key(both, KEY)  # every root block must import it
    with pytest.raises(CorefileError):
        imports_key(".:53 {\n", KEY)


def test_has_plugin() -> None:
    text = ("(c) {\n  reload 10s\n}\nx.org {\n  log\n}\n"
            ".:53 {\n  import c\n  cache 30 {\n    prefetch 5\n  }\n}\n")
    assert has_plugin(text, "reload")
    assert has_plugin(text, "cache")
    assert not has_plugin(text, "log")  # in another server block
    assert not has_plugin(text, "prefetch")  # an option of cache, not a plugin
    assert not has_plugin(text, "reload", dns_port=5353)
    assert not has_plugin(".:53 {\n  hosts /etc/hosts {\n    reload 15s\n  }\n}\n", "reload")
    cyclic = "(a) {\n  import b\n}\n(b) {\n  import a\n}\n.:53 {\n  import a\n}\n"
    assert not has_plugin(cyclic, "reload")
    with pytest.raises(CorefileError):
        has_plugin("}", "reload")


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
def test_corpus_plugins_and_imports(sample: Sample) -> None:
    assert has_plugin(sample.text, "reload", dns_port=sample.dns_port) is sample.has_reload
    assert imports_key(sample.text, KEY, dns_port=sample.dns_port) is sample.imports_override


# --- served zones ----------------------------------------------------------------------------

KUBE = ("cluster.local", "in-addr.arpa", "ip6.arpa")


@pytest.mark.parametrize(("name", "expected"), [
    ("kubeadm", KUBE),
    ("k3s", KUBE),  # hosts /etc/coredns/NodeHosts names no zone: it serves the block's
    ("stub-zone", ("cluster.local", "consul.local", "example.internal", "in-addr.arpa",
                   "ip6.arpa")),
    ("multi-block", ("cluster.local", "example.internal", "in-addr.arpa", "ip6.arpa")),
    ("openshift", ("cluster.local", "hostname.bind", "in-addr.arpa", "ip6.arpa")),
    ("snippets-quotes", ("in-addr.arpa", "ip6.arpa")),  # {$CLUSTER_DOMAIN} names nothing
    ("brace-next-line", ()),
])
def test_served_zones_of_the_corpus(name: str, expected: tuple[str, ...]) -> None:
    sample = BY_NAME[name]
    assert served_zones(sample.text, dns_port=sample.dns_port) == expected
    migrated = BY_NAME.get(f"{name}-migrated")
    if migrated is not None:  # the migration changes nothing about what is served
        assert served_zones(migrated.text, dns_port=migrated.dns_port) == expected


def test_served_zones_of_every_plugin_that_answers_itself() -> None:
    text = (".:53 {\n"
            "    hosts /etc/hosts Example.NET. {\n"
            "        10.0.0.1 db.example.org DB.Example.org.\n"
            "        fd00::1 v6.example.org\n"
            "        not-an-address x.example.org\n"
            "        fallthrough\n"
            "    }\n"
            "    file /etc/coredns/db.example example.com other.example.\n"
            "    etcd skydns.local\n"
            "    secondary sec.example\n"
            "    route53 example.org.:Z1234 corp.example:Z2\n"
            "    azure rg:az.example.com\n"
            "    clouddns gcp.example:proj:zone\n"
            "    k8s_external ext.example\n"
            "    auto auto.example {\n        directory /zones\n    }\n"
            "    template IN A templ.example {\n        answer \"x\"\n    }\n"
            "    forward fwd.example 10.0.0.1\n"
            "}\n"
            "stub.example {\n    forward . 10.0.0.53\n}\n"
            "tls://tls.example {\n    forward . 10.0.0.53\n}\n"
            "other-port.example:5353 {\n    forward . 10.0.0.53\n}\n"
            "dns://.:5353 {\n    kubernetes not-this-port.local\n}\n")
    assert served_zones(text) == (
        "auto.example", "az.example.com", "corp.example", "db.example.org", "example.com",
        "example.net", "example.org", "ext.example", "gcp.example", "other.example",
        "sec.example", "skydns.local", "stub.example", "v6.example.org")
    assert served_zones(text, dns_port=5353) == ("not-this-port.local", "other-port.example")
    with pytest.raises(CorefileError):
        served_zones(".:53 {\n")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x80"),
                        min_size=1, max_size=12), max_size=20))
def test_escaping_many_names_at_once_equals_escaping_each(names: list[str]) -> None:
    from hairpin_proxy.corefile.names import regex_escape
    from hairpin_proxy.corefile.rules import _escaped
    assert _escaped(names) == [regex_escape(n) for n in names]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.from_regex(r"[a-z0-9-]{1,8}(\.[a-z0-9-]{1,8}){1,3}", fullmatch=True),
                          st.from_regex(r"\*\.[a-zé0-9]{1,8}\.[a-z]{2,4}", fullmatch=True)),
                max_size=30))
def test_rules_bytes_counts_each_escaped_host_twice_with_its_separator(hosts: list[str]) -> None:
    from hairpin_proxy.corefile import rules_bytes
    from hairpin_proxy.corefile.names import regex_escape
    expected = sum(2 * (len(regex_escape(h.removeprefix("*.")).encode()) + 1) for h in hosts)
    assert rules_bytes(hosts) == expected


def test_long_name_lists_are_counted_once_and_never_for_another_list() -> None:
    # The counts of long lists are kept (a first pass measures, then writes, the same names):
    # the same names give the same counts, and a list that differs by one name or in its
    # regex's frame is counted afresh.
    names = sorted(f"app{i}.example.com" for i in range(3000))
    other = sorted([*names[:1500], "zzz.example.com", *names[1501:]])
    opening, closing = "(?i)^(?P<hairpin_proxy>", r")\.$"
    fresh = rules._counts(opening, names, closing)
    assert len(fresh) > 1 and sum(fresh) == len(names)
    for _ in range(2):
        assert rules.chunk_counts(opening, names, closing) == fresh
        assert rules.chunk_counts(opening, other, closing) == \
            rules._counts(opening, other, closing)
        assert rules.chunk_counts(opening + "x", names, closing) == \
            rules._counts(opening + "x", names, closing)
    # A count of two long regexes' worth that the room splits where the frame is longer.
    long_names = [f"{'a' * 60}{i}.example.com" for i in range(3000)]
    assert rules.chunk_counts(opening, long_names, closing) != \
        rules.chunk_counts(opening + "x" * 20_000, long_names, closing)
