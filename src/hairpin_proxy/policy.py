"""Host policy, shared by every source: which host names get redirected to the proxy, and how a
refusal is told. Pure. What is particular to one kind of object lives with its source
(``sources/``: ``ingress/``, ``gateway/``, ``traefik``).

Whoever may create an Ingress or a route in any namespace controls these strings, and a DNS rule
of ours answers for the name cluster-wide, so every host is validated as hostile input: anything
that is not a plain public-looking DNS name (or a one-label wildcard of one) is rejected with
a reason, and malformed objects become rejections rather than exceptions.

Names are also judged against the Public Suffix List (the copy that ships with the
``publicsuffixlist`` package, read once per process; ICANN *and* private sections): a name that
is itself a public suffix (``co.uk``, ``github.io``) is refused, and so is a wildcard whose
base is one (``*.co.uk``, ``*.github.io``), since it would capture names of many unrelated
owners. The private section counts because ``*.github.io`` covers other people's sites just as
``*.co.uk`` covers other people's companies. Names under top-level labels used inside clusters
and private networks (``svc``, ``local``, ``cluster``, ``internal``, ``localhost``,
``home.arpa``) are refused whatever the cluster domain.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import accumulate
from typing import TYPE_CHECKING, NamedTuple

from hairpin_proxy.apis import INGRESS_GROUP
from hairpin_proxy.claims import ObjectRef

if TYPE_CHECKING:
    from publicsuffixlist import PublicSuffixList

    from hairpin_proxy.settings import PolicySettings

HOSTS_FROM = ("tls", "rules", "all")
# Reverse-lookup zones and loopback names must never be rewritten, whatever the cluster domain.
RESERVED_ZONES = ("in-addr.arpa", "ip6.arpa", "localhost")
DEFAULT_CLUSTER_DOMAIN = "cluster.local"
MAX_NAME = 253
MAX_LABEL = 63
# Top-level labels that name things inside clusters and private networks, never public sites:
# a rewrite there would shadow names the cluster's own DNS (or a node's) answers.
CLUSTER_TLDS = frozenset({"svc", "local", "cluster", "internal", "localhost"})
# RFC 8375: the zone for home networks. Its top-level label (arpa) is public, so it goes apart.
HOME_ZONE = "home.arpa"
# Names ending so are looked at closer (home.arpa is the only refused name under arpa).
_SPECIAL_SUFFIXES = (*(f".{tld}" for tld in sorted(CLUSTER_TLDS)), f".{HOME_ZONE}")

# The common case (a valid, lower-case, multi-label name without its root dot) is decided by
# this one match plus a length test; only names that fail pay for the step-by-step diagnosis
# that finds the reason. Possessive quantifiers: a label is alphanumeric runs joined by hyphens,
# so the engine never backtracks. The lookahead refuses a numeric last label.
_LABEL = r"[a-z0-9]++(?:-++[a-z0-9]++)*+"
_FAST = re.compile(rf"(?:\*\.)?+(?:{_LABEL}\.)++(?!(?:[0-9]++|0x[0-9a-f]*+)\Z){_LABEL}",
                   re.ASCII)
_ALLOWED_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-.*")
# inet_aton() reads "127.1", "0x7f.1" or "10.0.0.1" as addresses, and no real top-level domain
# is a number, so a numeric last label is refused outright.
_NUMERIC_TLD = re.compile(r"[0-9]+|0x[0-9a-f]*", re.ASCII)
_SHOW_MAX = 120




def _norm_domain(value: str) -> str:
    return value.strip().lower().strip(".")


def proxy_service_fqdn(cluster_domain: str, service: str = "hairpin-proxy",
                   namespace: str = "hairpin-proxy") -> str:
    """The proxy Service's fully qualified name, with a trailing dot."""
    return f"{service}.{namespace}.svc.{_norm_domain(cluster_domain)}."


@dataclass(frozen=True)
class HostPolicy:
    hosts_from: str = "tls"
    ingress_classes: tuple[str, ...] = ()
    include_namespaces: tuple[str, ...] = ()
    exclude_namespaces: tuple[str, ...] = ()
    domains: tuple[str, ...] = ()
    cluster_domain: str = "cluster.local"
    proxy_fqdn: str = "hairpin-proxy.hairpin-proxy.svc.cluster.local."
    # Zones the cluster's DNS already answers itself (read from the Corefile): never ours.
    served_zones: tuple[str, ...] = ()
    # An Ingress asking for more distinct hosts than this is refused as a whole; 0: no limit.
    max_hosts_per_ingress: int = 100
    # Derived once per policy so evaluate() compiles and normalises nothing per call; the
    # sources' evaluators (``sources.ingress.policy``) read some through the properties below.
    _zones: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _dotted_zones: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _proxy_fqdn: str = field(init=False, repr=False, compare=False)
    _protected: frozenset[str] = field(init=False, repr=False, compare=False)
    _protected_order: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _domains: frozenset[str] = field(init=False, repr=False, compare=False)
    _dotted_domains: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _classes: frozenset[str] = field(init=False, repr=False, compare=False)
    _include: frozenset[str] = field(init=False, repr=False, compare=False)
    _exclude: frozenset[str] = field(init=False, repr=False, compare=False)
    # The Public Suffix List's rules (shared by every policy of the process), None when only
    # the package can answer.
    _psl: _Suffixes | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.hosts_from not in HOSTS_FROM:
            raise ValueError(f"hosts_from must be one of {', '.join(HOSTS_FROM)}, "
                             f"got {self.hosts_from!r}")
        if isinstance(self.max_hosts_per_ingress, bool) \
                or not isinstance(self.max_hosts_per_ingress, int) \
                or self.max_hosts_per_ingress < 0:
            raise ValueError("max_hosts_per_ingress must be a whole number, 0 or more, "
                             f"got {self.max_hosts_per_ingress!r}")
        cluster = _norm_domain(self.cluster_domain)
        if not cluster:
            raise ValueError("cluster_domain must not be empty")
        domains = tuple(d for d in (_norm_domain(x).removeprefix("*.") for x in self.domains) if d)
        # cluster.local stays protected under a custom domain: many clusters keep answering it
        # (kubelet --cluster-domain and CoreDNS zones drift apart), and a rewrite there would
        # hijack in-cluster service names.
        zones = tuple(dict.fromkeys(
            (cluster, *(z for z in (DEFAULT_CLUSTER_DOMAIN,) if z != cluster), *RESERVED_ZONES,
             *(z for z in map(_norm_domain, self.served_zones) if z))))
        proxy_fqdn = _norm_domain(self.proxy_fqdn)
        protected = tuple(z for z in (proxy_fqdn, *zones) if z)
        derived = {
            "_zones": zones,
            "_dotted_zones": tuple("." + z for z in zones),
            "_proxy_fqdn": proxy_fqdn,
            "_protected": frozenset(protected),
            "_protected_order": protected,
            "_domains": frozenset(domains),
            "_dotted_domains": tuple("." + d for d in domains),
            "_classes": frozenset(self.ingress_classes),
            "_include": frozenset(self.include_namespaces),
            "_exclude": frozenset(self.exclude_namespaces),
            "_psl": _rule_sets(),
        }
        for key, value in derived.items():
            object.__setattr__(self, key, value)

    @property
    def selected_classes(self) -> frozenset[str]:
        """The IngressClass names whose Ingresses count; empty: every class."""
        return self._classes

    @property
    def included_namespaces(self) -> frozenset[str]:
        """The only namespaces whose objects count; empty: every namespace."""
        return self._include

    @property
    def excluded_namespaces(self) -> frozenset[str]:
        """Namespaces whose objects never count."""
        return self._exclude

    @classmethod
    def from_settings(cls, s: PolicySettings, proxy_fqdn: str) -> HostPolicy:
        """The policy for a command's settings; an empty ``proxy_fqdn`` means the default one."""
        return cls(
            hosts_from=s.hosts_from,
            ingress_classes=tuple(s.ingress_class),
            include_namespaces=tuple(s.include_namespace),
            exclude_namespaces=tuple(s.exclude_namespace),
            domains=tuple(s.domain),
            cluster_domain=s.cluster_domain,
            proxy_fqdn=proxy_fqdn or proxy_service_fqdn(s.cluster_domain),
            max_hosts_per_ingress=s.max_hosts_per_ingress,
        )


@dataclass(frozen=True)
class Rejection:
    """A refused host ("" when the whole object is refused), told on the object that asked."""

    namespace: str
    name: str
    host: str
    reason: str
    # The refused object. Left out only by the Ingress policy (``sources.ingress.policy``), which
    # evaluates Ingresses and nothing else: ``ref`` then names an Ingress.
    origin: ObjectRef | None = None
    # The object's hosts, where the whole object is refused (by a size limit): what the
    # operator looks for in the log.
    hosts: tuple[str, ...] = ()

    @classmethod
    def of(cls, origin: ObjectRef, host: str, reason: str, hosts: tuple[str, ...] = ()
           ) -> Rejection:
        return cls(origin.namespace, origin.name, host, reason, origin, hosts)

    @property
    def named(self) -> str:
        """The refused host, or the refused object's hosts (comma-separated) for a log."""
        return self.host or ",".join(self.hosts)

    @property
    def ref(self) -> ObjectRef:
        """The object to tell: kind and group decide which source's object it is."""
        if self.origin is not None:
            return self.origin
        return ObjectRef("Ingress", self.namespace, self.name, group=INGRESS_GROUP)

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.origin is None else str(self.origin)
        if self.host:
            return f"{where}: host {self.host}: {self.reason}"
        return f"{where}: {self.reason}"


@dataclass(frozen=True)
class PolicyResult:
    hosts: tuple[str, ...]
    rejections: tuple[Rejection, ...]
    # host -> sorted "namespace/name" of every Ingress that asked for it.
    sources: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    # Valid hosts left out only because of the domain allow-list: configuration, not abuse,
    # so callers may log them at a lower level than rejections.
    ignored: tuple[Rejection, ...] = ()


def show(value: object) -> str:
    """A short, log-safe rendering of an untrusted value."""
    if isinstance(value, str) and value.isascii() and value.isprintable() \
            and len(value) <= _SHOW_MAX:
        return value
    text = repr(value)
    return text if len(text) <= _SHOW_MAX else text[:_SHOW_MAX] + "…"


def quoted(value: str) -> str:
    """``value`` in quotes, log-safe and short: 'nginx'."""
    text = repr(value)
    return text if len(text) <= _SHOW_MAX else text[:_SHOW_MAX] + "…"


def _is_ip(text: str) -> bool:
    candidate = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    candidate = candidate.removesuffix(".")
    try:
        ipaddress.ip_address(candidate)
    except ValueError:
        return False
    return True


# --------------------------------------------------------------------------- public suffixes

# 32 bits of hash() per packed string: few enough to halve the table, many enough that a name
# not in the list shares one with a rule about once in 400,000 lookups (then its bytes decide).
_HASH_BITS = 0xFFFFFFFF
# One bit per hash value modulo 2**17 (16 KiB): with the list's 10,000 rules, 8 names in 100 that
# are not rules find theirs set, and only they pay for the bisect, most of a lookup's time.
_SEEN_BITS = 1 << 17


class _Packed(NamedTuple):
    """A read-only set of strings in a few flat buffers. A frozenset of the list's 10,000 rules
    keeps a str object per rule and a hash table (about a megabyte); this keeps a quarter of
    that. Only in this process: it follows hash(), which differs from one process to another."""

    seen: bytes  # bit ``h % _SEEN_BITS`` set for the hash ``h`` of each string
    hashes: array[int]  # ``hash(s) & mask`` of each string, ascending
    starts: array[int]  # where each string's bytes start in ``text``, in the same order, and end
    text: bytes  # the strings as UTF-8, back to back
    mask: int  # which bits of hash() count (fewer in tests, to make strings share hashes)


def _pack(strings: Iterable[str], mask: int = _HASH_BITS) -> _Packed:
    # No tuple or bytes object per string on the way: thousands of small objects freed
    # together can leave the allocator's arenas pinned by whatever was allocated between them
    # (measured: two more arenas, 2 MiB, in RSS).
    ordered = sorted(set(strings), key=lambda s: hash(s) & mask)
    hashes = array("I", (hash(s) & mask for s in ordered))
    seen = bytearray(_SEEN_BITS // 8)
    for key in hashes:
        seen[key % _SEEN_BITS >> 3] |= 1 << (key & 7)
    sizes = (len(s) if s.isascii() else len(s.encode("utf-8", "surrogatepass")) for s in ordered)
    return _Packed(bytes(seen), hashes, array("I", accumulate(sizes, initial=0)),
                   "".join(ordered).encode("utf-8", "surrogatepass"), mask)


def _packed_has(packed: _Packed, name: str) -> bool:
    """Whether ``name`` is one of the strings packed."""
    key = hash(name) & packed.mask
    if not packed.seen[key % _SEEN_BITS >> 3] >> (key & 7) & 1:
        return False  # nearly every name that is not one of the strings ends here
    hashes = packed.hashes
    i = bisect_left(hashes, key)
    if i == len(hashes) or hashes[i] != key:
        return False
    # A shared hash says nothing: the bytes decide, of each string with this hash.
    # surrogatepass, as in _pack: a name with a lone surrogate encodes too, and only as itself.
    raw = name.encode("utf-8", "surrogatepass")
    starts, text = packed.starts, packed.text
    while i < len(hashes) and hashes[i] == key:
        if starts[i + 1] - starts[i] == len(raw) and text.startswith(raw, starts[i]):
            return True
        i += 1
    return False


class _Suffixes(NamedTuple):
    """The Public Suffix List's rules, for a few lookups per name."""

    exact: _Packed  # the names of rules that are neither wildcards nor exceptions
    # Roots of wildcard rules (every child is public: "ck") and names of exception rules
    # ("www.ck" for "!www.ck"): a few hundred, so plain sets, the fastest to ask.
    wildcard: frozenset[str]
    exceptions: frozenset[str]

    def __reduce__(self) -> tuple[Callable[[], _Suffixes | None], tuple[()]]:
        # Laid out by this process's string hashes: a copy elsewhere (a pickled HostPolicy)
        # would answer wrongly, so it unpickles as that process's own list.
        return _rule_sets, ()


_psl_instance: PublicSuffixList | None = None
_suffixes: _Suffixes | None = None
_suffixes_ready = False


def _new_psl() -> PublicSuffixList:
    # Imported here: the package is needed only once a policy is built.
    from publicsuffixlist import PublicSuffixList

    return PublicSuffixList()


def _psl() -> PublicSuffixList:
    """The process's one PublicSuffixList (the package's bundled copy, ICANN and private)."""
    global _psl_instance
    if _psl_instance is None:
        _psl_instance = _new_psl()
    return _psl_instance


def _rule_sets() -> _Suffixes | None:
    """The list's rules, packed, or None when this version of the package keeps them otherwise
    (then every question goes to the package, cached)."""
    global _suffixes, _suffixes_ready, _psl_instance
    if not _suffixes_ready:
        if _psl_instance is not None:
            _suffixes = _read_rules(_psl_instance)
        else:
            # The package's own tables are not kept once ours stand in for them (about
            # a megabyte); only when they cannot does the instance stay, to answer.
            psl = _new_psl()
            _suffixes = _read_rules(psl)
            if _suffixes is None:
                _psl_instance = psl
        _suffixes_ready = True
    return _suffixes


def _read_rules(psl: PublicSuffixList) -> _Suffixes | None:
    rules = getattr(psl, "_publicsuffix", None)
    if not isinstance(rules, (set, frozenset)) or not rules \
            or not all(isinstance(r, str) for r in rules):
        return None
    # From a set, whose size is known: a frozenset grown one item at a time keeps twice the
    # table.
    wildcard = frozenset({r[2:] for r in rules if r.startswith("*.")})
    exceptions = frozenset({r[1:] for r in rules if r.startswith("!")})
    exact = _pack(r for r in rules if not r.startswith(("*.", "!")))
    found = _Suffixes(exact, wildcard, exceptions)
    # Our tables stand in for the package's own matching: if they disagree on names whose
    # answers are known, its internals changed, and the package answers instead.
    for name in ("com", "co.uk", "github.io", "example.com", "www.example.co.uk", "foo.ck",
                 "www.ck", "kobe.jp", "city.kobe.jp", "x.city.kobe.jp", "a.kawasaki.jp",
                 "s3.amazonaws.com", "amazonaws.com"):
        if _public_by_sets(name, found) != psl.is_public(name):
            return None
    return found


def _public_by_sets(name: str, rules: _Suffixes) -> bool:
    """``PublicSuffixList.is_public`` for a lower-case name of at least two labels: the name is
    listed (or the root of a wildcard rule), or its parent's wildcard rule covers it, and no
    exception rule lifts it out."""
    if name in rules.wildcard or _packed_has(rules.exact, name):
        return name not in rules.exceptions
    parent = name.partition(".")[2]
    return parent in rules.wildcard and parent not in rules.exceptions \
        and name not in rules.exceptions


@lru_cache(maxsize=65536)
def _public_by_package(name: str) -> bool:
    return _psl().is_public(name)


def is_public_suffix(name: str) -> bool:
    """Whether ``name`` (lower case, no root dot) is a public suffix (ICANN or private section):
    ``com``, ``co.uk``, ``github.io``; a name unknown to the list is public when it is a single
    label."""
    if "." not in name:
        return True
    rules = _rule_sets()
    if rules is None:
        return _public_by_package(name)
    return _public_by_sets(name, rules)


def _cluster_tld_reason(name: str) -> str | None:
    """Why ``name`` (valid, lower case, two labels or more) is refused for its top-level label,
    or None. Only names ending in one of ``_SPECIAL_SUFFIXES`` get here."""
    tld = name[name.rfind(".") + 1:]
    if tld in CLUSTER_TLDS:
        return f"a name under a top-level label used inside clusters ({tld})"
    if tld == "arpa" and (name == HOME_ZONE or name.endswith("." + HOME_ZONE)):
        return f"a name at or under {HOME_ZONE}, used inside home and private networks"
    return None


def _syntax_reason(host: str) -> str:
    """Why ``host`` (a string failing the fast match) is not a valid name or wildcard."""
    if not host:
        return "empty name"
    if not host.isascii():
        return "non-ASCII characters (internationalized names must be punycode, xn--)"
    if _is_ip(host):
        return "IP address, not a DNS name"
    for ch in host:
        if ch.lower() not in _ALLOWED_CHARS:
            return f"invalid character {ch!r}"
    name = host.lower().removesuffix(".")
    if len(name) > MAX_NAME:
        return f"longer than {MAX_NAME} characters"
    labels = name.split(".")
    for i, label in enumerate(labels):
        if not label:
            return "empty label"
        if len(label) > MAX_LABEL:
            return f"label longer than {MAX_LABEL} characters"
        if "*" in label and (i != 0 or label != "*"):
            return "'*' is allowed only as the whole first label"
        if label.startswith("-") or label.endswith("-"):
            return f"label {label!r} starts or ends with '-'"
    if labels[0] == "*" and len(labels) <= 2:
        return "wildcard too broad (covers a whole top-level domain)"
    if _NUMERIC_TLD.fullmatch(labels[-1]):
        return "looks like an IP address (numeric top-level label)"
    if len(labels) == 1:
        return "single-label name"
    return "not a valid DNS name"


Verdict = tuple[str | None, str | None, bool]


def verdict(host: object, policy: HostPolicy) -> Verdict:
    """(name, None, False) when accepted, else (None, reason, out_of_scope)."""
    if not isinstance(host, str):
        return None, f"not a string ({type(host).__name__})", False
    return verdict_of_str(host, policy)


def verdict_of_str(host: str, policy: HostPolicy) -> Verdict:
    """``verdict`` of a string."""
    # Every operation here runs for each of tens of thousands of hosts on every reconcile:
    # the accept path is kept to one regex match and a few C-level string tests.
    lowered = host.lower()
    name = lowered[:-1] if lowered[-1:] == "." else lowered
    if name == host:
        # lower() copies even an all-lower-case string: keep the caller's, which the caches
        # already hold.
        name = host
    # isascii() on the original: lower() maps some non-ASCII letters (the Kelvin sign) to ASCII.
    if _FAST.fullmatch(name) is None or not host.isascii() or (
            len(name) > MAX_LABEL and (len(name) > MAX_NAME or any(
                len(label) > MAX_LABEL for label in name.split(".")))):
        return None, _syntax_reason(host), False
    # A wildcard's base is a suffix of the name, so this also covers "*.<zone>".
    if name.endswith(policy._dotted_zones) or name in policy._protected:
        return None, _protected_reason(name, policy), False
    if name.endswith(_SPECIAL_SUFFIXES) or name == HOME_ZONE:
        reason = _cluster_tld_reason(name)
        if reason is not None:
            return None, reason, False
    if name[0] == "*":
        base = name[2:]
        # "*.base" matches exactly one more label: refuse if that covers a protected name.
        for protected in policy._protected_order:
            if protected.partition(".")[2] == base:
                what = "the proxy's own target name" if protected == policy._proxy_fqdn \
                    else protected
                return None, f"wildcard covers {what}", False
        if is_public_suffix(base):
            return None, f"wildcard covers a whole public suffix ({base})", False
    else:
        base = name
        suffixes = policy._psl
        if _public_by_sets(name, suffixes) if suffixes is not None else is_public_suffix(name):
            return None, f"a public suffix ({name}), shared by many owners", False
    if policy._domains and base not in policy._domains \
            and not base.endswith(policy._dotted_domains):
        allowed = ", ".join(sorted(policy._domains))
        return None, f"not under an allowed domain ({allowed})", True
    return name, None, False


def _protected_reason(name: str, policy: HostPolicy) -> str:
    if name == policy._proxy_fqdn:
        return "the proxy's own target name"
    zone = next(z for z in policy._zones if name == z or name.endswith("." + z))
    if zone in (policy._zones[0], DEFAULT_CLUSTER_DOMAIN):
        return f"at or under the cluster domain {zone}"
    if zone in RESERVED_ZONES:
        return f"at or under {zone}"
    return f"at or under {zone}, a zone the cluster's DNS already answers (Corefile)"


def check_host(host: object, policy: HostPolicy) -> tuple[str | None, str | None]:
    """``(normalized host, None)`` when ``host`` may be redirected, else ``(None, reason)``."""
    name, reason, _ = verdict(host, policy)
    return name, reason
