"""Traefik's IngressRoute as a source of hosts. Pure: match rules, claims, and what the data
plane is and whether it expects the PROXY protocol.

Rules (Traefik's routing documentation, "Rules & Priority", v2 and v3): matchers such as
``Host(`a.example.com`)`` combined with ``&&``, ``||``, ``!`` and parentheses; values are
Go string literals, in backticks (raw) or double quotes (escapes allowed), never single
quotes. The v2 syntax lets ``Host`` take several values (``Host(`a`, `b`)``); v3 takes one
per matcher and adds wildcards (``*.example.com`` one label, ``**.example.com`` any depth).
``HostRegexp`` is a Go regular expression in v3 and a ``{name:regexp}`` template in v2: only
a plain name in it can be redirected. ``HostSNI`` belongs to TCP routers (IngressRouteTCP):
an IngressRoute that uses it serves no host by that name.

A host is claimed when some way of satisfying the rule needs it (a ``Host`` under no ``!``);
everything else a rule names is told back as a refusal, on the IngressRoute.

The data plane: the Traefik Service of the route's IngressClass (``spec.ingressClassName``,
else the ``kubernetes.io/ingress.class`` annotation), else the Service the Traefik Helm chart
labels ``app.kubernetes.io/name: traefik`` (k3s: ``kube-system/traefik``); its ports 80/443
are the entry points ``web``/``websecure``. Whether they expect the PROXY protocol is Traefik's
static configuration, which the Helm chart (and k3s's HelmChartConfig through it) renders
into the Deployment's arguments ``--entryPoints.<name>.proxyProtocol.trustedIPs=…`` (or
``.insecure=true``): read from the Deployment named like the Service, when the controller may
read it; otherwise the target needs ``--target traefik:NAME=NAMESPACE/SERVICE:v1|v2|none``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from hairpin_proxy.apis import CLASS_ANNOTATION
from hairpin_proxy.claims import Claim, ObjectRef
from hairpin_proxy.policy import HostPolicy, Rejection, check_host
from hairpin_proxy.targets import proxydetect
from hairpin_proxy.targets.discovery import (
    NAME_LABEL,
    TRAEFIK_INGRESS,
    DataPlane,
    controller_of,
    dataplane_of,
    find_ingressclass_service,
    usable,
)
from hairpin_proxy.targets.model import (
    KeyKindSpec,
    KeyParts,
    check_kind_spec,
    is_dns_subdomain,
    registered_key,
)
from hairpin_proxy.targets.resolve import DeclaredKind, KindResolver, TargetFacts

GROUP: Final = "traefik.io"
# Traefik before v2.10 (and its CRDs left installed after an upgrade).
LEGACY_GROUP: Final = "traefik.containo.us"
KIND: Final = "IngressRoute"
PLURAL: Final = "ingressroutes"
VERSIONS: Final = ("v1alpha1",)
TRAEFIK_CONTROLLER: Final = TRAEFIK_INGRESS
# The data plane of IngressRoutes that name no IngressClass.
DEFAULT_NAME: Final = "default"
# The Helm chart's entry points behind Service ports 80 and 443.
WEB_ENTRY_POINTS: Final = ("web", "websecure")
# Traefik accepts both versions (it reads the header's signature); v2 is what cloud load
# balancers send, and what the proxy sends Envoy too.
MODE: Final = proxydetect.ENVOY_MODE

KEY_KIND: Final = check_kind_spec(KeyKindSpec(
    "traefik", "Traefik IngressClass", namespaced=False,
    default_when_shared=True))


# --------------------------------------------------------------------------- match rules

class RuleError(ValueError):
    """A match rule that cannot be read; the message says where."""


_TOKEN = re.compile(r"""\s*(?:(?P<op>&&|\|\||[!(),])|(?P<ident>[A-Za-z][A-Za-z0-9]*)
                        |`(?P<raw>[^`]*)`|"(?P<quoted>(?:[^"\\]|\\.)*)")""", re.X | re.S)
_ESCAPES: Final = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'", "r": "\r"}


def _unquote(text: str) -> str:
    """A double-quoted Go string's value (the escapes a host could need)."""
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            nxt = text[i + 1]
            if nxt not in _ESCAPES:
                raise RuleError(f"unsupported escape \\{nxt} in a quoted value")
            out.append(_ESCAPES[nxt])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _tokens(rule: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(rule):
        if rule[pos:].strip() == "":
            break
        m = _TOKEN.match(rule, pos)
        if m is None or m.end() == pos:
            raise RuleError(f"unexpected {rule[pos:].strip()[:20]!r} at character {pos + 1}")
        if m.group("op"):
            out.append(("op", m.group("op")))
        elif m.group("ident"):
            out.append(("ident", m.group("ident")))
        elif m.group("raw") is not None:
            out.append(("value", m.group("raw")))
        else:
            out.append(("value", _unquote(m.group("quoted"))))
        pos = m.end()
    return out


@dataclass(frozen=True)
class Matcher:
    name: str
    values: tuple[str, ...]
    negated: bool


class _Parser:
    """Recursive descent over ``or := and ('||' and)*; and := unary ('&&' unary)*;
    unary := '!' unary | '(' or ')' | NAME '(' [VALUE (',' VALUE)*] ')'``."""

    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.i = 0
        self.found: list[Matcher] = []

    def _peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _take(self, kind: str, text: str | None = None) -> str:
        tok = self._peek()
        if tok is None or tok[0] != kind or (text is not None and tok[1] != text):
            got = "the end" if tok is None else repr(tok[1])
            raise RuleError(f"expected {text or kind} but found {got}")
        self.i += 1
        return tok[1]

    def parse(self) -> list[Matcher]:
        if not self.tokens:
            raise RuleError("the rule is empty")
        self._or(False)
        rest = self._peek()
        if rest is not None:
            raise RuleError(f"unexpected {rest[1]!r} after a complete rule")
        return self.found

    def _or(self, negated: bool) -> None:
        self._and(negated)
        while self._peek() == ("op", "||"):
            self.i += 1
            self._and(negated)

    def _and(self, negated: bool) -> None:
        self._unary(negated)
        while self._peek() == ("op", "&&"):
            self.i += 1
            self._unary(negated)

    def _unary(self, negated: bool) -> None:
        tok = self._peek()
        if tok == ("op", "!"):
            self.i += 1
            self._unary(not negated)
        elif tok == ("op", "("):
            self.i += 1
            self._or(negated)
            self._take("op", ")")
        else:
            name = self._take("ident")
            self._take("op", "(")
            values: list[str] = []
            if self._peek() != ("op", ")"):
                values.append(self._take("value"))
                while self._peek() == ("op", ","):
                    self.i += 1
                    values.append(self._take("value"))
            self._take("op", ")")
            self.found.append(Matcher(name, tuple(values), negated))


def matchers(rule: str) -> list[Matcher]:
    """Every matcher of ``rule`` in order, each marked when it sits under an odd number of
    ``!``. RuleError when the rule is not Traefik's syntax."""
    return _Parser(_tokens(rule)).parse()


_PLAIN = re.compile(r"\^?((?:[A-Za-z0-9-]+(?:\\?\.))*[A-Za-z0-9-]+)\$?")


def plain_name(pattern: str) -> str | None:
    """The one name a HostRegexp pattern stands for, when it is a plain name (dots escaped or
    not, optionally anchored), else None."""
    m = _PLAIN.fullmatch(pattern)
    return m.group(1).replace("\\.", ".").lower() if m else None


@dataclass(frozen=True)
class RuleHosts:
    hosts: tuple[str, ...] = ()
    # (what the rule says, why it is not redirected)
    refused: tuple[tuple[str, str], ...] = ()


def _shown(m: Matcher) -> str:
    return f"{'!' if m.negated else ''}{m.name}({', '.join(f'`{v}`' for v in m.values)})"


def rule_hosts(rule: str) -> RuleHosts:
    """The hosts a match rule serves, and what of it cannot be redirected (with why)."""
    try:
        found = matchers(rule)
    except RuleError as exc:
        return RuleHosts((), ((rule, f"the match rule cannot be read: {exc}"),))
    hosts: list[str] = []
    refused: list[tuple[str, str]] = []
    for m in found:
        lower = m.name.lower()
        if lower not in ("host", "hostregexp", "hostsni", "hostsniregexp"):
            continue
        if m.negated:
            refused.append((_shown(m), "a negated host matcher names hosts the route does "
                                       "not serve"))
        elif lower == "host":
            if not m.values:
                refused.append((_shown(m), "Host() names no host"))
            for value in m.values:
                if value.startswith("**."):
                    refused.append((f"Host(`{value}`)", "a ** wildcard matches any depth; "
                                    "DNS rules for it would catch names Traefik does not "
                                    "route (use *. for one label)"))
                else:
                    hosts.append(value.lower())
        elif lower == "hostregexp":
            for value in m.values:
                name = plain_name(value)
                if name is None:
                    refused.append((f"HostRegexp(`{value}`)", "a regular expression, not a "
                                    "name: hairpin-proxy redirects only names it can list "
                                    "(use Host)"))
                else:
                    hosts.append(name)
        else:
            refused.append((_shown(m), f"{m.name} is a TCP router matcher (IngressRouteTCP): "
                                       "an IngressRoute never serves a host by it"))
    return RuleHosts(tuple(dict.fromkeys(hosts)), tuple(refused))


# --------------------------------------------------------------------------- objects

def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def slim_ingressroute(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What the controller reads of an IngressRoute: identity, age, class, entry points,
    the routes' match rules and the TLS section's domains."""
    meta = _dict(obj.get("metadata"))
    spec = _dict(obj.get("spec"))
    out: dict[str, Any] = {k: obj[k] for k in ("apiVersion", "kind") if k in obj}
    out["metadata"] = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                            "creationTimestamp") if k in meta}
    annotations = _dict(meta.get("annotations"))
    if CLASS_ANNOTATION in annotations:
        out["metadata"]["annotations"] = {CLASS_ANNOTATION: annotations[CLASS_ANNOTATION]}
    slim: dict[str, Any] = {k: spec[k] for k in ("entryPoints", "ingressClassName")
                            if k in spec}
    slim["routes"] = [{k: r[k] for k in ("match", "kind", "syntax") if k in r}
                      for r in _list(spec.get("routes")) if isinstance(r, Mapping)]
    if "tls" in spec:
        tls = _dict(spec.get("tls"))
        slim["tls"] = {"domains": tls["domains"]} if "domains" in tls else {}
    out["spec"] = slim
    return out


def target_key(obj: Mapping[str, Any]) -> str:
    """``traefik/<IngressClass>`` (``traefik/default`` when it names none or an impossible
    one): which Traefik serves the route."""
    spec, meta = _dict(obj.get("spec")), _dict(obj.get("metadata"))
    name = _str(spec.get("ingressClassName")) or _str(
        _dict(meta.get("annotations")).get(CLASS_ANNOTATION))
    return registered_key(KEY_KIND, name if is_dns_subdomain(name) else DEFAULT_NAME)


def route_hosts(obj: Mapping[str, Any], hosts_from: str) -> RuleHosts:
    """The hosts of one IngressRoute as ``--hosts-from`` reads Ingresses: ``tls`` only the
    hosts it serves over TLS (its rules' hosts when ``spec.tls`` is set, and
    ``spec.tls.domains``), ``rules`` its rules' hosts, ``all`` both."""
    spec = _dict(obj.get("spec"))
    hosts: list[str] = []
    refused: list[tuple[str, str]] = []
    for route in _list(spec.get("routes")):
        if _dict(route).get("kind", "Rule") != "Rule":
            continue
        found = rule_hosts(_str(_dict(route).get("match")))
        hosts += found.hosts
        refused += found.refused
    has_tls = isinstance(spec.get("tls"), Mapping)
    if hosts_from == "tls" and not has_tls:
        hosts = []
    if hosts_from != "rules":
        for domain in _list(_dict(spec.get("tls")).get("domains")):
            d = _dict(domain)
            hosts += [h.lower() for h in (_str(d.get("main")), *map(_str, _list(d.get("sans"))))
                      if h]
    return RuleHosts(tuple(dict.fromkeys(hosts)), tuple(refused))


@dataclass(frozen=True)
class IngressRouteClaims:
    claims: tuple[Claim, ...] = ()
    rejections: tuple[Rejection, ...] = field(default_factory=tuple)


def _ref(obj: Mapping[str, Any], group: str) -> ObjectRef:
    meta = _dict(obj.get("metadata"))
    return ObjectRef(KIND, _str(meta.get("namespace")), _str(meta.get("name")),
                     _str(meta.get("uid")), group)


def _namespace_allowed(namespace: str, policy: HostPolicy) -> bool:
    if policy.include_namespaces and namespace not in policy.include_namespaces:
        return False
    return namespace not in policy.exclude_namespaces


def claims_of(objects: Iterable[tuple[str, Mapping[str, Any]]], policy: HostPolicy
              ) -> IngressRouteClaims:
    """Claims of IngressRoutes (``(API group, object)``), through the host policy; every
    host refused (by the policy or because the rule cannot be redirected) is a rejection on
    its IngressRoute."""
    claims: list[Claim] = []
    rejections: list[Rejection] = []
    for group, obj in objects:
        ref = _ref(obj, group)
        if not ref.namespace or not ref.name or not _namespace_allowed(ref.namespace, policy):
            continue
        created = _str(_dict(obj.get("metadata")).get("creationTimestamp"))
        found = route_hosts(obj, policy.hosts_from)
        for what, why in found.refused:
            rejections.append(Rejection.of(ref, what, why))
        key = target_key(obj)
        for host in found.hosts:
            name, reason = check_host(host, policy)
            if name is None:
                rejections.append(Rejection.of(ref, host, reason or "refused"))
            else:
                claims.append(Claim(name, key, ref, created))
    return IngressRouteClaims(tuple(claims), tuple(rejections))


def preferred(objects: Mapping[str, Sequence[Mapping[str, Any]]]
              ) -> list[tuple[str, Mapping[str, Any]]]:
    """The IngressRoutes to read, by group: ``traefik.io``'s when the cluster serves it
    (Traefik 2.10 and later read only those), else ``traefik.containo.us``'s."""
    group = GROUP if GROUP in objects else LEGACY_GROUP
    return [(group, obj) for obj in objects.get(group, ())]


# --------------------------------------------------------------------------- data plane

def _meta(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = _dict(obj.get("metadata"))
    return _str(meta.get("namespace")), _str(meta.get("name"))


def find_service(parts: KeyParts, services: Sequence[Mapping[str, Any]],
                 ingress_classes: Mapping[str, Mapping[str, Any]]) -> DataPlane | None:
    """The Traefik Service of ``traefik/<class>``: the IngressClass's data plane when it is
    a Traefik class, else (``default``, or a class that is not there) the one usable Service
    labelled ``app.kubernetes.io/name: traefik`` (a LoadBalancer first, then by name)."""
    ingress_class = ingress_classes.get(parts.name)
    if ingress_class is not None:
        controller = controller_of(_str(_dict(ingress_class.get("spec")).get("controller")))
        if controller == TRAEFIK_CONTROLLER:
            return find_ingressclass_service(services, ingress_class)
        return None
    found = [s for s in services if _dict(_dict(s.get("metadata")).get("labels")).get(
        NAME_LABEL) == "traefik" and usable(s)]
    found.sort(key=lambda s: (_dict(s.get("spec")).get("type") != "LoadBalancer", _meta(s)))
    if not found:
        return None
    how = f"label {NAME_LABEL}=traefik"
    if len(found) > 1:
        how += f" (first of {len(found)} matching Services)"
    return dataplane_of(found[0], how)


def _entry_points(service: Mapping[str, Any]) -> tuple[str, ...]:
    """The entry points behind the Service's ports 80 and 443: the Helm chart names each
    Service port (and its targetPort) after its entry point."""
    names = []
    for port in _list(_dict(service.get("spec")).get("ports")):
        p = _dict(port)
        if p.get("port") in (80, 443):
            target = p.get("targetPort")
            names.append(target if isinstance(target, str) else _str(p.get("name")))
    return tuple(n for n in names if n) or WEB_ENTRY_POINTS


_FLAG = re.compile(r"--entry[pP]oints\.([^.=\s]+)\.proxy[pP]rotocol\.(trustedips|insecure)"
                   r"(?:=(.*))?", re.I)


def proxy_entry_points(args: Iterable[object]) -> dict[str, bool]:
    """Entry point → whether Traefik's arguments make it accept the PROXY header
    (``trustedIPs`` non-empty, or ``insecure`` true; names compared case-insensitively, as
    Traefik's flag parser does)."""
    out: dict[str, bool] = {}
    for arg in args:
        m = _FLAG.fullmatch(arg.strip()) if isinstance(arg, str) else None
        if m is None:
            continue
        name, which, value = m.group(1).lower(), m.group(2).lower(), (m.group(3) or "")
        on = bool(value.strip()) if which == "trustedips" else value.strip().lower() in (
            "", "true", "1", "t")
        out[name] = out.get(name, False) or on
    return out


def _deployment_of(service: Mapping[str, Any], deployments: Sequence[Mapping[str, Any]]
                   ) -> Mapping[str, Any] | None:
    namespace, name = _meta(service)
    for d in deployments:
        if _meta(d) == (namespace, name):
            return d
    return None


def detect(service: Mapping[str, Any] | None, deployments: Sequence[Mapping[str, Any]],
           readable: bool) -> proxydetect.Detected:
    """Whether the Traefik behind ``service`` expects the PROXY protocol on the entry points
    the proxy dials, read from its Deployment's arguments."""
    if service is None:
        return proxydetect.Detected("unknown", "its Traefik Service is not known")
    namespace, name = _meta(service)
    if not readable:
        return proxydetect.Detected(
            "unknown", f"hairpin-proxy may not read Traefik's Deployment {namespace}/{name} "
            "(deploy/components/traefik-ingressroute grants it)")
    deployment = _deployment_of(service, deployments)
    if deployment is None:
        return proxydetect.Detected("unknown", f"no Deployment {namespace}/{name} holds "
                                    "Traefik's static configuration")
    args = [a for c in _list(_dict(_dict(_dict(deployment.get("spec")).get("template"))
                                   .get("spec")).get("containers"))
            for a in _list(_dict(c).get("args"))]
    enabled = proxy_entry_points(args)
    wanted = [ep.lower() for ep in _entry_points(service)]
    on = [ep for ep in wanted if enabled.get(ep)]
    where = f"Deployment {namespace}/{name}"
    if len(on) == len(wanted):
        return proxydetect.Detected(MODE, f"{where}: entryPoints {', '.join(wanted)} "
                                    "proxyProtocol")
    if not on:
        return proxydetect.Detected("none", f"{where}: no proxyProtocol on entryPoints "
                                    f"{', '.join(wanted)}")
    return proxydetect.Detected("unknown", f"{where}: proxyProtocol on {', '.join(on)} only, "
                                f"not on {', '.join(ep for ep in wanted if ep not in on)}")


def slim_deployment(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What is read of Traefik's Deployment: its name and its containers' arguments."""
    meta = _dict(obj.get("metadata"))
    containers = _list(_dict(_dict(_dict(obj.get("spec")).get("template")).get("spec"))
                       .get("containers"))
    return {"metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion")
                         if k in meta},
            "spec": {"template": {"spec": {"containers": [
                {"name": _dict(c).get("name"), "args": _list(_dict(c).get("args"))}
                for c in containers]}}}}


# The facts the source adds (registry: ``<registration>/<plural>``).
DEPLOYMENTS: Final = "traefik-ingressroute/deployments"


def _find(parts: KeyParts, facts: TargetFacts) -> DataPlane | None:
    return find_service(parts, facts.services, facts.ingress_classes)


def _detect(parts: KeyParts, facts: TargetFacts, plane: DataPlane) -> proxydetect.Detected:
    service = next((s for s in facts.services if "/".join(_meta(s)) == plane.service), None)
    return detect(service, facts.extra.get(DEPLOYMENTS, ()),
                  readable="deployments" not in facts.unreadable)


# The source's key kind as its registration declares it (registry).
DECLARED_KIND: Final = DeclaredKind(KEY_KIND, KindResolver(_find, _detect))
