"""Which hosts an Ingress asks for under the host policy. Pure.

An Ingress whose ``spec.ingressClassName`` names an IngressClass that does not exist is
refused as a whole (the legacy ``kubernetes.io/ingress.class`` annotation needs no object), and
so is one asking for more than ``max_hosts_per_ingress`` distinct hosts. Every host is judged
by the shared policy (``hairpin_proxy.policy``); malformed objects become rejections rather
than exceptions.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, cast

from hairpin_proxy.apis import CLASS_ANNOTATION, DEFAULT_CLASS_ANNOTATION
from hairpin_proxy.policy import (
    HostPolicy,
    PolicyResult,
    Rejection,
    Verdict,
    quoted,
    show,
    verdict,
    verdict_of_str,
)
from hairpin_proxy.sources.ingress.record import ABSENT, RECORDS, IngressRecord, MetaView
from hairpin_proxy.targets.model import class_target

# CompactSpec's TLS entries when there is one naming exactly its one rule's host.
_SAME: Final = object()


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

    __slots__ = ("_rules", "_tls", "class_name")

    def __init__(self, class_name: str | None, tls: tuple[tuple[str, ...] | None, ...] | None,
                 rules: tuple[str | None, ...] | None) -> None:
        self.class_name = class_name
        # Nearly every Ingress has one rule naming one host and one TLS entry naming the same:
        # that host alone stands for both tuples (a hundred bytes less per Ingress).
        one = rules[0] if rules is not None and len(rules) == 1 else None
        self._rules: tuple[str | None, ...] | str | None = rules if one is None else one
        self._tls: tuple[tuple[str, ...] | None, ...] | object | None = \
            _SAME if one is not None and tls == ((one,),) else tls

    @property
    def rules(self) -> tuple[str | None, ...] | None:
        rules = self._rules
        return (rules,) if type(rules) is str else rules  # type: ignore[return-value]

    @property
    def tls(self) -> tuple[tuple[str, ...] | None, ...] | None:
        tls = self._tls
        return ((self._rules,),) if tls is _SAME else tls  # type: ignore[return-value]

    def hosts(self, hosts_from: str) -> list[str]:
        """The hosts named in ``spec.tls`` (unless ``hosts_from`` is "rules"), then those in
        ``spec.rules`` (unless it is "tls"), as the policy reads them."""
        rules, tls = self._rules, self._tls
        if type(rules) is str and tls is _SAME:
            # A rule without a host (or an empty one) names nothing; a TLS entry names it.
            from_rules = [rules] if rules and hosts_from != "tls" else []
            return [rules, *from_rules] if hosts_from != "rules" else from_rules
        found: list[str] = []
        if hosts_from != "rules" and self.tls:
            for tls_hosts in self.tls:
                if tls_hosts:
                    found.extend(tls_hosts)
        if hosts_from != "tls" and self.rules:
            found.extend(h for h in self.rules if h)
        return found

    def __getitem__(self, key: str) -> Any:
        if key == "ingressClassName" and self.class_name is not None:
            return self.class_name
        rules, tls = self.rules, self.tls
        if key == "rules" and rules is not None:
            return [{} if h is None else {"host": h} for h in rules]
        if key == "tls" and tls is not None:
            return [{} if h is None else {"hosts": list(h)} for h in tls]
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        # Mapping.get would raise and catch a KeyError for every Ingress that names no class
        # (most of them), twice a first pass: a fifth of planning 10,000 Ingresses.
        if key == "ingressClassName":
            return default if self.class_name is None else self.class_name
        try:
            return self[key]
        except KeyError:
            return default

    def __iter__(self) -> Iterator[str]:
        if self.class_name is not None:
            yield "ingressClassName"
        if self._rules is not None:
            yield "rules"
        if self._tls is not None:
            yield "tls"

    def __len__(self) -> int:
        return sum(x is not None for x in (self.class_name, self._rules, self._tls))

    def __eq__(self, other: object) -> bool:
        # A relist compares every cached Ingress with its fresh copy: field by field, not
        # through the lists and dicts Mapping's comparison would build for both.
        if type(other) is CompactSpec:
            return (self.class_name, self._rules, self._tls) == \
                (other.class_name, other._rules, other._tls)
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"CompactSpec({dict(self)!r})"


# dict first: it is what parsed YAML/JSON gives, and the Mapping ABC check is slow (the
# cached forms next: an exact type is found without it).
_MAPS: Final = cast("tuple[type[Mapping[Any, Any]], ...]",
                    (dict, IngressRecord, MetaView, CompactSpec, Mapping))


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


def _fields(ingress: object) -> tuple[Any, Any, Any, Any] | IngressResult:
    """(metadata, its name, its namespace, spec) of an Ingress, as ``get`` reads them; the
    result of one whose object or metadata is no object."""
    if not isinstance(ingress, _MAPS):
        return IngressResult(rejections=(Rejection("", "", "", "malformed Ingress: not an "
                                                               "object"),))
    meta = ingress.get("metadata")
    if not isinstance(meta, _MAPS):
        return IngressResult(rejections=(
            Rejection("", "", "", "malformed Ingress: metadata is not an object"),))
    return meta, meta.get("name"), meta.get("namespace"), ingress.get("spec")


def _record_fields(ingress: Any) -> tuple[Any, Any, Any, Any]:
    """``_fields`` of a cached record, read from its slots (the record stands for its
    metadata): this runs for every Ingress of a list."""
    name, ns, spec = ingress.name, ingress.namespace, ingress.spec
    return (ingress, None if name is ABSENT else name, None if ns is ABSENT else ns,
            None if spec is ABSENT else spec)


def _namespace(ns: object) -> str | None:
    """The Ingress's namespace (the field's value), or None when the field is malformed."""
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


def _mapping(value: object) -> Mapping[Any, Any]:
    return value if isinstance(value, _MAPS) else {}


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def named_class(ingress: Mapping[str, Any]) -> str:
    """The IngressClass an Ingress names (``spec.ingressClassName``, else the legacy
    annotation), or ""."""
    if type(ingress) in RECORDS:
        # A cached record, read from its slots: this runs for every Ingress of a list.
        rec: Any = ingress
        spec, annotations = rec.spec, rec.annotations
        if type(spec) is CompactSpec:
            return spec.class_name or (_text(annotations.get(CLASS_ANNOTATION))
                                       if type(annotations) is dict else "")
    meta, spec = _mapping(ingress.get("metadata")), _mapping(ingress.get("spec"))
    return _text(spec.get("ingressClassName")) or _text(
        _mapping(meta.get("annotations")).get(CLASS_ANNOTATION))


def ingress_target(ingress: Mapping[str, Any], defaults: frozenset[str]) -> str:
    """The target key an Ingress's hosts claim: its class (``named_class``), else the
    cluster's one default IngressClass, else ``default``."""
    return class_target(named_class(ingress), defaults)


def _missing_class(spec: object, classes: ClassIndex) -> str | None:
    """The class named by ``spec.ingressClassName`` when no such IngressClass exists."""
    if classes.names is None:
        return None
    cls = _spec_class(spec)
    return cls if cls is not None and cls not in classes.names else None


def _namespace_selected(ns: str, policy: HostPolicy) -> bool:
    include = policy.included_namespaces
    return not ((include and ns not in include) or ns in policy.excluded_namespaces)


def _class_selected(meta: Mapping[Any, Any], spec: object, policy: HostPolicy,
                    defaults: frozenset[str]) -> bool:
    selected = policy.selected_classes
    if not selected:
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
        return not selected.isdisjoint(defaults)
    return not selected.isdisjoint(classes)


def ingress_matches(ingress: Mapping[Any, Any], policy: HostPolicy,
                    classes: ClassIndex | frozenset[str]) -> bool:
    """Whether ``ingress`` is selected by the policy's namespace and class filters (an Ingress
    naming an IngressClass that does not exist is not)."""
    if not isinstance(ingress, _MAPS):
        return False
    meta = ingress.get("metadata")
    if not isinstance(meta, _MAPS):
        return False
    ns = _namespace(meta.get("namespace"))
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
        return spec.hosts(hosts_from)  # type: ignore[return-value]
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
_Checked = dict[str, Verdict]


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
    read = _record_fields(ingress) if type(ingress) in RECORDS else _fields(ingress)
    if type(read) is IngressResult:
        return read
    meta, raw_name, raw_ns_field, spec = cast("tuple[Any, Any, Any, Any]", read)
    name = show(raw_name) if isinstance(raw_name, str) else ""
    raw_ns = _namespace(raw_ns_field)
    if raw_ns is None:
        return IngressResult(rejections=(Rejection(
            show(raw_ns_field), name, "",
            "malformed Ingress: metadata.namespace is not a string"),))
    if (policy.included_namespaces or policy.excluded_namespaces) \
            and not _namespace_selected(raw_ns, policy):
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
                Rejection(ns, name, "", f"IngressClass {quoted(cls)} does not exist"),))
    if policy.selected_classes and not _class_selected(
            cast("Mapping[Any, Any]", MetaView(meta)) if type(meta) in RECORDS else meta, spec,
            policy, classes.defaults):
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
                result = checked[host] = verdict_of_str(host, policy)
        else:
            result = verdict(host, policy)
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
