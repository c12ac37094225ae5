"""Whether a host's public DNS points at this cluster: one ``Verdict`` per host. Pure.

A host is redirected to the proxy only when its public DNS answer (A and AAAA) contains an
address of one of this cluster's load balancers. Otherwise a tenant's Ingress for
``api.github.com`` would send every pod's traffic for that name to our proxy.

=================  ========  =====================================================================
code               redirect  when
=================  ========  =====================================================================
verified           yes       an answer is a load balancer address whose ipMode is not Proxy (or
                             the name is a CNAME to a load balancer hostname)
ip-mode-proxy      no        the answers that are ours all report ipMode Proxy: traffic to them
                             goes through the load balancer, which adds the PROXY header itself
not-this-cluster   no        the answers are known and none is ours
unresolved         no        NXDOMAIN, or no A/AAAA records (NODATA)
pending            no        not checked yet
resolver-error     no        the resolver failed (timeout, SERVFAIL, refused) and there is no
                             earlier answer to keep
=================  ========  =====================================================================

Resolver outages: a failed lookup never changes a verdict that rests on an answer. The verdict
is kept (its ``checked_at`` says how old its answers are, ``kept_since`` when the failures
began), so an outage neither withdraws a verified host nor adds an unverified one. Load
balancer changes re-evaluate a verdict against its last answers without a new lookup.

Wildcard hosts (``*.example.com``) are checked by resolving ``PROBE_LABEL`` under them
(``hairpin-proxy-check-q7x2k9.example.com``): a wildcard DNS record answers any label, and a
fixed, unlikely label is one nobody has a specific record for, and one people can ``dig``.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
from collections.abc import Sequence

from hairpin_proxy.verify.lb import LbAddress, LbIndex, canonical_ip, canonical_name
from hairpin_proxy.wildcards import wildcard_base

__all__ = [
    "NO_PUBLIC_DNS",
    "PROBE_LABEL",
    "Answers",
    "Code",
    "ResolveError",
    "Verdict",
    "decide",
    "normalize_host",
    "nothing_resolves",
    "pending",
    "probe_name",
    "should_redirect",
]

PROBE_LABEL = "hairpin-proxy-check-q7x2k9"

# Said when verification can let no host through because none resolves at all: the
# controller's warning, its /readyz detail and the doctor's note.
NO_PUBLIC_DNS = ("no candidate host resolves in public DNS, so host verification redirects "
                 "none: where this cluster's names are not in public DNS (split-horizon, "
                 "air-gapped), point --verify-resolver at a DNS server that has them, or "
                 "install the verify-off component (--verify-hosts off)")

# At most this many addresses are listed in a reason; the rest are counted.
_SHOWN = 4


class Code(enum.StrEnum):
    VERIFIED = "verified"
    IP_MODE_PROXY = "ip-mode-proxy"
    NOT_THIS_CLUSTER = "not-this-cluster"
    UNRESOLVED = "unresolved"
    PENDING = "pending"
    RESOLVER_ERROR = "resolver-error"


@dataclasses.dataclass(frozen=True, slots=True)
class Answers:
    """A lookup that got answers from DNS (possibly none: NXDOMAIN or NODATA)."""

    name: str
    addresses: tuple[str, ...] = ()
    # "NXDOMAIN" or "NODATA" when there are no addresses, for the reason text.
    empty_reason: str = ""
    # The name the answers belong to after CNAMEs ("" when none were followed).
    canonical: str = ""
    # Set when one of the two queries (A, AAAA) failed: the other's answers can still prove a
    # host ours, but not that it is not (the failed family might have held our address).
    incomplete: str = ""

    def __post_init__(self) -> None:
        # Interned: thousands of hosts answer with the same few load balancer addresses.
        canon = {sys.intern(c) for c in (canonical_ip(a) for a in self.addresses)
                 if c is not None}
        object.__setattr__(self, "addresses", tuple(sorted(canon, key=_addr_key)))
        object.__setattr__(self, "canonical", canonical_name(self.canonical) or "")


@dataclasses.dataclass(frozen=True, slots=True)
class ResolveError:
    """A lookup that got no usable answer: ``kind`` is timeout, servfail, refused or error."""

    name: str
    kind: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}" if self.detail else self.kind


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    host: str
    code: Code
    reason: str
    # The name that was resolved (the probe name for a wildcard host).
    queried: str = ""
    # The answers the verdict rests on, kept through resolver outages.
    answers: Answers | None = None
    # Monotonic time of those answers (None: never answered).
    checked_at: float | None = None
    # Monotonic time the resolver began failing while this verdict was kept (None: it is not).
    kept_since: float | None = None
    # The last resolver error, while kept or for resolver-error.
    error: str = ""
    # Consecutive resolver errors (drives the checker's backoff).
    errors: int = 0
    # Our load balancer addresses found among the answers.
    matched: tuple[str, ...] = ()

    @property
    def redirect(self) -> bool:
        return should_redirect(self)

    @property
    def kept(self) -> bool:
        return self.kept_since is not None

    def age(self, now: float) -> float | None:
        """Seconds since the answers this verdict rests on (None when there are none)."""
        return None if self.checked_at is None else max(0.0, now - self.checked_at)

    def material(self) -> tuple[object, ...]:
        """What a change of is worth telling the controller about (not ages or counts)."""
        return self.code, self.reason, self.kept, self.matched


def should_redirect(verdict: Verdict | None) -> bool:
    return verdict is not None and verdict.code is Code.VERIFIED


def normalize_host(host: str) -> str:
    name = host.strip().lower().removesuffix(".")
    # lower() copies even a name that is already normal: a verdict per host keeps the name
    # twice (host and queried), so the caller's string is kept where it is the same.
    return host if name == host else name


def probe_name(host: str) -> str:
    """The name to resolve for ``host``: itself, or ``PROBE_LABEL`` under a wildcard."""
    host = normalize_host(host)
    base = wildcard_base(host)
    return host if base is None else f"{PROBE_LABEL}.{base}"


def pending(host: str) -> Verdict:
    host = normalize_host(host)
    return Verdict(host, Code.PENDING, f"{host} has not been checked yet", queried=probe_name(host))


def _addr_key(address: str) -> tuple[int, str]:
    return (1 if ":" in address else 0), address


def _show(items: Sequence[str]) -> str:
    if len(items) <= _SHOWN:
        return ", ".join(items)
    return ", ".join(items[:_SHOWN]) + f" and {len(items) - _SHOWN} more"


def _subject(host: str, queried: str) -> str:
    return f"{host} (checked as {queried})" if queried != host else host


def _lb_phrase(lb: LbIndex) -> str:
    if lb.addresses:
        word = "balancer" if len(lb.addresses) == 1 else "balancers"
        return f"this cluster's load {word} {_show(lb.addresses)}"
    if lb.hostnames:
        return f"this cluster's load balancer {_show(lb.hostnames)} (not resolved yet)"
    return ("this cluster's load balancer (none is known: no LoadBalancer Service or Ingress "
            "status reports an address)")


def _evaluate(host: str, answers: Answers, lb: LbIndex, now: float) -> Verdict:
    """The verdict a successful lookup gives (``incomplete`` answers included)."""
    queried = answers.name or probe_name(host)
    subject = _subject(host, queried)
    base = Verdict(host, Code.VERIFIED, "", queried=queried, answers=answers, checked_at=now)
    if not answers.addresses and not answers.incomplete:
        why = answers.empty_reason or "no A or AAAA records"
        return dataclasses.replace(base, code=Code.UNRESOLVED,
                                   reason=f"{subject} does not resolve ({why})")
    ours: list[LbAddress] = [e for e in map(lb.lookup, answers.addresses) if e is not None]
    shown = _show(answers.addresses)
    name = lb.lookup_name(answers.canonical) if answers.canonical else None
    vip = [e for e in ours if not e.proxy]
    if vip or name is not None:
        if vip:
            where = f"{_show([e.address for e in vip])}, a load balancer of this cluster " \
                    f"({vip[0].describe()})"
        else:
            assert name is not None
            where = f"{shown} as an alias of {name.name}, a load balancer of this cluster " \
                    f"({', '.join(map(str, name.sources))})"
        return dataclasses.replace(base, reason=f"{subject} resolves to {where}",
                                   matched=_same(tuple(e.address for e in vip), answers))
    if ours:
        mine = _show([e.address for e in ours])
        services = ", ".join(sorted({s for e in ours for s in e.services}))
        return dataclasses.replace(
            base, code=Code.IP_MODE_PROXY, matched=_same(tuple(e.address for e in ours), answers),
            reason=f"{subject} resolves to {mine}, whose load balancer (Service {services}) "
                   f"reports ipMode Proxy: in-cluster traffic to it already goes through the "
                   f"load balancer, so there is no hairpin to fix")
    if answers.incomplete:
        # Not provably ours and not provably not: treat like a failed lookup.
        raise _Incomplete(answers.incomplete)
    return dataclasses.replace(
        base, code=Code.NOT_THIS_CLUSTER,
        reason=f"{subject} resolves to {shown}, not to {_lb_phrase(lb)}")


def _same(matched: tuple[str, ...], answers: Answers) -> tuple[str, ...]:
    # Usually every answer is ours: one tuple then serves both, for each of thousands of hosts.
    return answers.addresses if matched == answers.addresses else matched


class _Incomplete(Exception):
    pass


def decide(host: str, result: Answers | ResolveError | None, lb: LbIndex,
           previous: Verdict | None, now: float) -> Verdict:
    """The new verdict for ``host``.

    ``result`` is the outcome of a fresh lookup, or None to re-evaluate ``previous`` against a
    changed ``lb`` with its last answers (no lookup). ``now`` is monotonic time.
    """
    host = normalize_host(host)
    if previous is not None and previous.host != host:
        previous = None
    if result is None:
        if previous is None:
            return pending(host)
        if previous.answers is None:
            return previous  # pending or resolver-error: nothing to re-evaluate
        return _reevaluate(host, previous, lb, now)
    if isinstance(result, Answers):
        try:
            return _evaluate(host, result, lb, now)
        except _Incomplete as exc:
            result = ResolveError(result.name, "incomplete", str(exc))
    return _failed(host, result, previous, now)


def _reevaluate(host: str, previous: Verdict, lb: LbIndex, now: float) -> Verdict:
    assert previous.answers is not None and previous.checked_at is not None
    try:
        fresh = _evaluate(host, previous.answers, lb, previous.checked_at)
    except _Incomplete as exc:
        # Partial answers that no longer prove the host ours prove nothing: no redirect, but
        # the answers stay for the next load balancer change.
        queried = previous.answers.name or probe_name(host)
        fresh = Verdict(host, Code.RESOLVER_ERROR,
                        f"{_subject(host, queried)} could not be checked: the resolver failed "
                        f"(incomplete: {exc})", queried=queried, answers=previous.answers,
                        checked_at=previous.checked_at, error=f"incomplete: {exc}")
    # The answers are as old as they were; an outage in progress stays on record.
    return dataclasses.replace(fresh, kept_since=previous.kept_since, error=previous.error,
                               errors=previous.errors)


def _failed(host: str, error: ResolveError, previous: Verdict | None, now: float) -> Verdict:
    errors = (previous.errors if previous is not None else 0) + 1
    if previous is not None and previous.answers is not None:
        # Keep the last verdict that rests on an answer, whatever it says: an outage must
        # neither withdraw a verified host nor add an unverified one.
        since = previous.kept_since if previous.kept_since is not None else now
        return dataclasses.replace(previous, kept_since=since, error=str(error), errors=errors)
    queried = error.name or probe_name(host)
    return Verdict(host, Code.RESOLVER_ERROR,
                   f"{_subject(host, queried)} could not be checked: the resolver failed "
                   f"({error})", queried=queried, error=str(error), errors=errors)


def nothing_resolves(codes: Sequence[str]) -> bool:
    """Whether every host has been checked and none resolved (NXDOMAIN, NODATA, or the
    resolver failing): what a resolver without public DNS looks like, as opposed to a
    tenant's stray names among real ones."""
    return bool(codes) and all(c in (Code.UNRESOLVED, Code.RESOLVER_ERROR) for c in codes)
