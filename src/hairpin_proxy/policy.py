"""Host policy: which host names of Ingresses and Gateway API routes get redirected to the
proxy. Pure.

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

An Ingress whose ``spec.ingressClassName`` names an IngressClass that does not exist is
refused as a whole (the legacy ``kubernetes.io/ingress.class`` annotation needs no object), and
so is one asking for more than ``max_hosts_per_ingress`` distinct hosts.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from hairpin_proxy.claims import ObjectRef

if TYPE_CHECKING:
    from publicsuffixlist import PublicSuffixList

    from hairpin_proxy.settings import PolicySettings

HOSTS_FROM = ("tls", "rules", "all")
CLASS_ANNOTATION = "kubernetes.io/ingress.class"
DEFAULT_CLASS_ANNOTATION = "ingressclass.kubernetes.io/is-default-class"
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


class CompactSpec(Mapping[str, Any]):
    """An Ingress's ``spec`` reduced to what the policy reads, in a few tuples.

    The controller caches tens of thousands of Ingresses; as nested dicts and lists, the class
    and the hosts of one take about a kilobyte, here about a tenth of that. Only well-formed
    specs take this form (``slim.slim_ingress`` keeps anything else as it came, so that the
    policy still reports it). Read as a mapping it gives what it stands for, in fresh lists and
    dicts (equal to the trimmed original); the policy reads the fields directly.

    ``class_name``: ``spec.ingressClassName`` (None: absent); ``tls``: per ``spec.tls`` entry, its
    ``hosts`` (None: the entry has none), or None when ``spec.tls`` is absent; ``rules``: per
    ``spec.rules`` entry, its ``host`` or None, or None when ``spec.rules`` is absent.
    """

    __slots__ = ("class_name", "rules", "tls")

    def __init__(self, class_name: str | None, tls: tuple[tuple[str, ...] | None, ...] | None,
                 rules: tuple[str | None, ...] | None) -> None:
        self.class_name = class_name
        self.tls = tls
        self.rules = rules

    def __getitem__(self, key: str) -> Any:
        if key == "ingressClassName" and self.class_name is not None:
            return self.class_name
        if key == "rules" and self.rules is not None:
            return [{} if h is None else {"host": h} for h in self.rules]
        if key == "tls" and self.tls is not None:
            return [{} if h is None else {"hosts": list(h)} for h in self.tls]
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        if self.class_name is not None:
            yield "ingressClassName"
        if self.rules is not None:
            yield "rules"
        if self.tls is not None:
            yield "tls"

    def __len__(self) -> int:
        return sum(x is not None for x in (self.class_name, self.rules, self.tls))

    def __repr__(self) -> str:
        return f"CompactSpec({dict(self)!r})"


# dict first: it is what parsed YAML/JSON gives, and the Mapping ABC check is slow.
_MAPS: Final = (dict, CompactSpec, Mapping)


def _norm_domain(value: str) -> str:
    return value.strip().lower().strip(".")


def default_target(cluster_domain: str, service: str = "hairpin-proxy",
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
    target: str = "hairpin-proxy.hairpin-proxy.svc.cluster.local."
    # Zones the cluster's DNS already answers itself (read from the Corefile): never ours.
    served_zones: tuple[str, ...] = ()
    # An Ingress asking for more distinct hosts than this is refused as a whole; 0: no limit.
    max_hosts_per_ingress: int = 100
    # Derived once per policy so evaluate() compiles and normalises nothing per call.
    _zones: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _dotted_zones: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _target: str = field(init=False, repr=False, compare=False)
    _protected: frozenset[str] = field(init=False, repr=False, compare=False)
    _protected_order: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _domains: frozenset[str] = field(init=False, repr=False, compare=False)
    _dotted_domains: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _classes: frozenset[str] = field(init=False, repr=False, compare=False)
    _include: frozenset[str] = field(init=False, repr=False, compare=False)
    _exclude: frozenset[str] = field(init=False, repr=False, compare=False)
    # The Public Suffix List's rules (shared by every policy of the process), None when only
    # the package can answer.
    _psl_public: frozenset[str] | None = field(init=False, repr=False, compare=False)
    _psl_wildcard: frozenset[str] = field(init=False, repr=False, compare=False)

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
        target = _norm_domain(self.target)
        protected = tuple(z for z in (target, *zones) if z)
        suffixes = _rule_sets()
        derived = {
            "_zones": zones,
            "_dotted_zones": tuple("." + z for z in zones),
            "_target": target,
            "_protected": frozenset(protected),
            "_protected_order": protected,
            "_domains": frozenset(domains),
            "_dotted_domains": tuple("." + d for d in domains),
            "_classes": frozenset(self.ingress_classes),
            "_include": frozenset(self.include_namespaces),
            "_exclude": frozenset(self.exclude_namespaces),
            "_psl_public": None if suffixes is None else suffixes.public,
            "_psl_wildcard": frozenset() if suffixes is None else suffixes.wildcard,
        }
        for key, value in derived.items():
            object.__setattr__(self, key, value)

    @classmethod
    def from_settings(cls, s: PolicySettings, target: str) -> HostPolicy:
        """The policy for a command's settings; an empty ``target`` means the default one."""
        return cls(
            hosts_from=s.hosts_from,
            ingress_classes=tuple(s.ingress_class),
            include_namespaces=tuple(s.include_namespace),
            exclude_namespaces=tuple(s.exclude_namespace),
            domains=tuple(s.domain),
            cluster_domain=s.cluster_domain,
            target=target or default_target(s.cluster_domain),
            max_hosts_per_ingress=s.max_hosts_per_ingress,
        )


INGRESS_GROUP: Final = "networking.k8s.io"


@dataclass(frozen=True)
class Rejection:
    """A refused host ("" when the whole object is refused), told on the object that asked."""

    namespace: str
    name: str
    host: str
    reason: str
    # The refused object. Left out only by the Ingress policy below, which evaluates
    # Ingresses and nothing else: ``ref`` then names an Ingress.
    origin: ObjectRef | None = None

    @classmethod
    def of(cls, origin: ObjectRef, host: str, reason: str) -> Rejection:
        return cls(origin.namespace, origin.name, host, reason, origin)

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


def _quoted(value: str) -> str:
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

class _Suffixes(NamedTuple):
    """The Public Suffix List's rules as three sets, for a few set lookups per name."""

    public: frozenset[str]  # exact rules and the roots of wildcard rules ("ck" for "*.ck")
    wildcard: frozenset[str]  # roots of wildcard rules: every child is public ("ck")
    exceptions: frozenset[str]  # names of exception rules ("www.ck" for "!www.ck")


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
    """The list's rules as sets, or None when this version of the package keeps them otherwise
    (then every question goes to the package, cached)."""
    global _suffixes, _suffixes_ready, _psl_instance
    if not _suffixes_ready:
        if _psl_instance is not None:
            _suffixes = _read_rules(_psl_instance)
        else:
            # The package's own tables are not kept once the sets stand in for them (about
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
    wildcard = frozenset(r[2:] for r in rules if r.startswith("*."))
    exceptions = frozenset(r[1:] for r in rules if r.startswith("!"))
    exact = frozenset(r for r in rules if not r.startswith(("*.", "!")))
    found = _Suffixes(exact | wildcard, wildcard, exceptions)
    # The sets stand in for the package's own matching: if they disagree on names whose
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
    if name in rules.public:
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


def _check(host: object, policy: HostPolicy) -> tuple[str | None, str | None, bool]:
    """(name, None, False) when accepted, else (None, reason, out_of_scope)."""
    if not isinstance(host, str):
        return None, f"not a string ({type(host).__name__})", False
    return _check_str(host, policy)


def _check_str(host: str, policy: HostPolicy) -> tuple[str | None, str | None, bool]:
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
                what = "the proxy's own target name" if protected == policy._target else protected
                return None, f"wildcard covers {what}", False
        if is_public_suffix(base):
            return None, f"wildcard covers a whole public suffix ({base})", False
    else:
        base = name
        # Two set lookups rule out nearly every name before the exact test.
        public = policy._psl_public
        if (public is None or name in public
                or name[name.find(".") + 1:] in policy._psl_wildcard) and is_public_suffix(name):
            return None, f"a public suffix ({name}), shared by many owners", False
    if policy._domains and base not in policy._domains \
            and not base.endswith(policy._dotted_domains):
        allowed = ", ".join(sorted(policy._domains))
        return None, f"not under an allowed domain ({allowed})", True
    return name, None, False


def _protected_reason(name: str, policy: HostPolicy) -> str:
    if name == policy._target:
        return "the proxy's own target name"
    zone = next(z for z in policy._zones if name == z or name.endswith("." + z))
    if zone in (policy._zones[0], DEFAULT_CLUSTER_DOMAIN):
        return f"at or under the cluster domain {zone}"
    if zone in RESERVED_ZONES:
        return f"at or under {zone}"
    return f"at or under {zone}, a zone the cluster's DNS already answers (Corefile)"


def check_host(host: object, policy: HostPolicy) -> tuple[str | None, str | None]:
    """``(normalized host, None)`` when ``host`` may be redirected, else ``(None, reason)``."""
    name, reason, _ = _check(host, policy)
    return name, reason


@dataclass(frozen=True)
class ClassIndex:
    """What the policy needs to know of the cluster's IngressClasses.

    ``defaults``: the classes marked as the cluster default (they serve class-less Ingresses);
    ``names``: every class that exists. ``names=None`` means "not known": Ingresses naming a
    class are then not checked for its existence (the form a bare ``frozenset`` of defaults
    stands for, where callers still pass one).
    """

    defaults: frozenset[str] = frozenset()
    names: frozenset[str] | None = frozenset()


def class_index(ingress_classes: Iterable[Any]) -> ClassIndex:
    """The ClassIndex of these IngressClass objects; malformed ones are skipped."""
    names: set[str] = set()
    defaults: set[str] = set()
    for obj in ingress_classes:
        if not isinstance(obj, _MAPS):
            continue
        meta = obj.get("metadata")
        if not isinstance(meta, _MAPS):
            continue
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            continue
        names.add(name)
        annotations = meta.get("annotations")
        if isinstance(annotations, _MAPS) and annotations.get(DEFAULT_CLASS_ANNOTATION) == "true":
            defaults.add(name)
    return ClassIndex(frozenset(defaults), frozenset(names))


def default_ingress_classes(ingress_classes: Iterable[Any]) -> frozenset[str]:
    """Names of the IngressClasses marked as the cluster default; malformed ones are skipped."""
    return class_index(ingress_classes).defaults


def _as_index(classes: ClassIndex | frozenset[str]) -> ClassIndex:
    return classes if isinstance(classes, ClassIndex) else ClassIndex(frozenset(classes), None)


def _namespace(meta: Mapping[Any, Any]) -> str | None:
    """The Ingress's namespace, or None when the field is malformed."""
    ns = meta.get("namespace")
    if ns is None or ns == "":
        # Manifests without a namespace land in "default" when applied without -n.
        return "default"
    return ns if isinstance(ns, str) else None


def _spec_class(spec: object) -> str | None:
    if isinstance(spec, _MAPS):
        cls = spec.get("ingressClassName")
        if isinstance(cls, str) and cls:
            return cls
    return None


def _missing_class(spec: object, classes: ClassIndex) -> str | None:
    """The class named by ``spec.ingressClassName`` when no such IngressClass exists."""
    if classes.names is None:
        return None
    cls = _spec_class(spec)
    return cls if cls is not None and cls not in classes.names else None


def _namespace_selected(ns: str, policy: HostPolicy) -> bool:
    return not ((policy._include and ns not in policy._include) or ns in policy._exclude)


def _class_selected(meta: Mapping[Any, Any], spec: object, policy: HostPolicy,
                    defaults: frozenset[str]) -> bool:
    if not policy._classes:
        return True
    classes: set[str] = set()
    cls = _spec_class(spec)
    if cls is not None:
        classes.add(cls)
    annotations = meta.get("annotations")
    if isinstance(annotations, _MAPS):
        cls = annotations.get(CLASS_ANNOTATION)
        if isinstance(cls, str) and cls:
            classes.add(cls)
    if not classes:
        # An Ingress without a class is served by the default class, if any.
        return not policy._classes.isdisjoint(defaults)
    return not policy._classes.isdisjoint(classes)


def ingress_matches(ingress: Mapping[Any, Any], policy: HostPolicy,
                    classes: ClassIndex | frozenset[str]) -> bool:
    """Whether ``ingress`` is selected by the policy's namespace and class filters (an Ingress
    naming an IngressClass that does not exist is not)."""
    if not isinstance(ingress, _MAPS):
        return False
    meta = ingress.get("metadata")
    if not isinstance(meta, _MAPS):
        return False
    ns = _namespace(meta)
    if ns is None or not _namespace_selected(ns, policy):
        return False
    index = _as_index(classes)
    spec = ingress.get("spec")
    return _missing_class(spec, index) is None \
        and _class_selected(meta, spec, policy, index.defaults)


def _entries(spec: Mapping[Any, Any], key: str,
             problems: list[str]) -> Iterator[tuple[int, Mapping[Any, Any]]]:
    """(index, object) for the objects in the list ``spec[key]``; defects go to ``problems``."""
    value = spec.get(key)
    if value is None:
        return
    if not isinstance(value, list):
        problems.append(f"spec.{key} is not a list")
        return
    for i, entry in enumerate(value):
        if isinstance(entry, _MAPS):
            yield i, entry
        else:
            problems.append(f"spec.{key}[{i}] is not an object")


def _candidate_hosts(spec: Mapping[Any, Any], hosts_from: str,
                     problems: list[str]) -> list[object]:
    """Host values named by ``spec``; structural defects are appended to ``problems``."""
    found: list[object] = []
    if type(spec) is CompactSpec:
        # Well-formed by construction: nothing to report.
        if hosts_from != "rules" and spec.tls:
            for tls_hosts in spec.tls:
                if tls_hosts:
                    found.extend(tls_hosts)
        if hosts_from != "tls" and spec.rules:
            found.extend(h for h in spec.rules if h)
        return found
    if hosts_from != "rules":
        for i, entry in _entries(spec, "tls", problems):
            hosts = entry.get("hosts")
            if isinstance(hosts, list):
                found.extend(hosts)
            elif hosts is not None:
                problems.append(f"spec.tls[{i}].hosts is not a list")
    if hosts_from != "tls":
        for _, rule in _entries(spec, "rules", problems):
            host = rule.get("host")
            # A rule without a host is a catch-all: nothing to redirect.
            if host is not None and host != "":
                found.append(host)
    return found


class IngressResult(NamedTuple):
    """What one Ingress contributes: the unit that callers may cache and merge.

    ``origin`` is the log-safe "namespace/name" (empty when the Ingress contributes no
    hosts); ``hosts`` are accepted names, normalised, unique, in the order first named.
    """

    # A named tuple, not a dataclass: one is built per Ingress, and tuple construction is
    # several times cheaper than a frozen dataclass's __init__.
    origin: str = ""
    hosts: tuple[str, ...] = ()
    rejections: tuple[Rejection, ...] = ()
    ignored: tuple[Rejection, ...] = ()


_NOTHING: Final = IngressResult()
_Checked = dict[str, tuple[str | None, str | None, bool]]


def evaluate_ingress(ingress: object, policy: HostPolicy,
                     classes: ClassIndex | frozenset[str]) -> IngressResult:
    """The hosts one Ingress asks for under ``policy``, and each host refused with its reason.

    ``classes`` is ``class_index(...)`` of the cluster's IngressClasses (a bare frozenset of
    the default classes still works, without the check that a named class exists).
    Never raises on a malformed object: each defect becomes a Rejection.
    """
    return _evaluate_one(ingress, policy, _as_index(classes), {}, {})


def _distinct_hosts(candidates: list[object]) -> int:
    """How many different hosts ``candidates`` names, counting spellings of one name once."""
    names: set[str] = set()
    others = 0
    for host in candidates:
        if isinstance(host, str):
            lowered = host.lower()
            names.add(lowered[:-1] if lowered[-1:] == "." else lowered)
        else:
            others += 1
    return len(names) + others


def _evaluate_one(ingress: object, policy: HostPolicy, classes: ClassIndex,
                  checked: _Checked, shown: dict[str, str]) -> IngressResult:
    # ``checked`` and ``shown`` memoise host checks and namespace renderings across the
    # Ingresses of one evaluate(): hosts repeat, namespaces are few.
    if not isinstance(ingress, _MAPS):
        return IngressResult(rejections=(Rejection("", "", "", "malformed Ingress: not an "
                                                               "object"),))
    meta = ingress.get("metadata")
    if not isinstance(meta, _MAPS):
        return IngressResult(rejections=(
            Rejection("", "", "", "malformed Ingress: metadata is not an object"),))
    raw_name = meta.get("name")
    name = show(raw_name) if isinstance(raw_name, str) else ""
    raw_ns = _namespace(meta)
    if raw_ns is None:
        return IngressResult(rejections=(Rejection(
            show(meta.get("namespace")), name, "",
            "malformed Ingress: metadata.namespace is not a string"),))
    spec = ingress.get("spec")
    if (policy._include or policy._exclude) and not _namespace_selected(raw_ns, policy):
        return _NOTHING
    ns = shown.get(raw_ns)
    if ns is None:
        ns = shown[raw_ns] = show(raw_ns)
    # A class that does not exist: a typo, or a class someone means to create later. Whoever
    # serves it is unknown, so the Ingress is refused, visibly, rather than guessed at.
    names = classes.names
    if names is not None:
        cls = spec.get("ingressClassName") if isinstance(spec, _MAPS) else None
        if isinstance(cls, str) and cls and cls not in names:
            return IngressResult(rejections=(
                Rejection(ns, name, "", f"IngressClass {_quoted(cls)} does not exist"),))
    if policy._classes and not _class_selected(meta, spec, policy, classes.defaults):
        return _NOTHING
    if not isinstance(spec, _MAPS):
        return IngressResult(rejections=(
            Rejection(ns, name, "", "malformed Ingress: spec is not an object"),))
    problems: list[str] = []
    candidates = _candidate_hosts(spec, policy.hosts_from, problems)
    limit = policy.max_hosts_per_ingress
    # Only an Ingress with more host entries than the limit pays for counting distinct ones.
    if limit and len(candidates) > limit:
        count = _distinct_hosts(candidates)
        if count > limit:
            return IngressResult(rejections=(Rejection(
                ns, name, "", f"asks for {count} hosts, more than the limit of {limit} "
                              "per Ingress (--max-hosts-per-ingress)"),))
    rejections = [Rejection(ns, name, "", f"malformed Ingress: {p}") for p in problems] \
        if problems else []
    ignored: list[Rejection] = []
    accepted: list[str] = []
    for host in candidates:
        if isinstance(host, str):
            result = checked.get(host)
            if result is None:
                result = checked[host] = _check_str(host, policy)
        else:
            result = _check(host, policy)
        if result[0] is not None:
            accepted.append(result[0])
        elif result[2]:
            ignored.append(Rejection(ns, name, show(host), result[1] or ""))
        else:
            rejections.append(Rejection(ns, name, show(host), result[1] or ""))
    if not accepted and not rejections and not ignored:
        return _NOTHING
    # dict.fromkeys keeps the first-named order and drops repeats within this Ingress.
    hosts = tuple(accepted) if len(accepted) == 1 else tuple(dict.fromkeys(accepted))
    return IngressResult(f"{ns}/{name}", hosts, tuple(rejections), tuple(ignored))


def merge(results: Iterable[IngressResult]) -> PolicyResult:
    """The PolicyResult of several Ingresses from their IngressResults, in their order."""
    # Tuples, not lists: tuples of strings drop out of the cyclic GC's sight, which matters
    # with tens of thousands of hosts.
    sources: dict[str, tuple[str, ...]] = {}
    shared: set[str] = set()
    rejections: list[Rejection] = []
    ignored: list[Rejection] = []
    for res in results:
        if res.rejections:
            rejections.extend(res.rejections)
        if res.ignored:
            ignored.extend(res.ignored)
        origin = res.origin
        for host in res.hosts:
            known = sources.get(host)
            if known is None:
                sources[host] = (origin,)
            elif origin not in known:
                sources[host] = (*known, origin)
                shared.add(host)
    for host in shared:
        sources[host] = tuple(sorted(sources[host]))
    return PolicyResult(hosts=tuple(sorted(sources)), rejections=tuple(rejections),
                        sources=sources, ignored=tuple(ignored))


def evaluate(ingresses: Iterable[Mapping[str, Any]], ingress_classes: Iterable[Mapping[str, Any]],
             policy: HostPolicy) -> PolicyResult:
    """The hosts to redirect for these Ingresses, and every host refused with its reason.

    ``merge`` of ``evaluate_ingress`` over the Ingresses. Never raises on malformed objects:
    each defect becomes a Rejection, and one bad host or Ingress never keeps the others out.
    """
    index = class_index(ingress_classes)
    checked: _Checked = {}
    shown: dict[str, str] = {}
    return merge(_evaluate_one(ingress, policy, index, checked, shown)
                 for ingress in ingresses)
