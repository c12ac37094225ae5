"""NodeLocal DNSCache: one server block of ours in node-local-dns's Corefile. Pure.

With NodeLocal DNSCache, pods ask a per-node cache (169.254.20.10) whose Corefile sends only
the cluster zones to CoreDNS and everything else upstream, so the rules we keep in CoreDNS's
Corefile are never consulted for an Ingress's public names. We add one server block whose
zones are those names and which forwards them to the cluster DNS exactly as the cluster-domain
block does: its ``bind``, ``forward`` (nested block and all), ``errors``, ``cache``, ``reload``,
``loop`` and ``prometheus`` directives, copied verbatim::

    # BEGIN hairpin-proxy (managed; do not edit)
    hairpin-proxy.invalid:53 app.example.com:53 apps.example.com:53 {
        errors
        cache 30
        reload
        loop
        bind 169.254.20.10 10.96.0.10
        forward . __PILLAR__CLUSTER__DNS__ {
                force_tcp
        }
        prometheus :9253
    }
    # END hairpin-proxy

Not copied: ``health`` and ``ready``, whose second listener on the same address would collide.
``prometheus`` is safe to repeat: CoreDNS's metrics plugin keeps one listener per address
(``uniqAddr.Set``), which is why the upstream Corefile repeats ``prometheus :9253`` in every
block. ``loop`` probes ``<random>.<random>.<first key>``, a name under ``.invalid`` for us.

The block is ours because its first key is the zone ``hairpin-proxy.invalid`` (RFC 6761
reserves the TLD; the zone answers nothing): any server block with that zone is ours, with or
without the marker comments, which are there for humans only. Every other byte stays.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hairpin_proxy.corefile.editor import (
    _check_size,
    _indent_unit,
    _line_end,
    _line_ending,
    _line_start,
    _Span,
    _splice,
    _whole_lines,
)
from hairpin_proxy.corefile.names import checked_hosts
from hairpin_proxy.corefile.parser import parse
from hairpin_proxy.corefile.queries import _NAME, _expanded
from hairpin_proxy.corefile.rules import BEGIN_MARKER, END_MARKER, MARKER_PREFIXES
from hairpin_proxy.corefile.syntax import (
    DEFAULT_DNS_PORT,
    Address,
    Corefile,
    CorefileError,
    Directive,
    ServerBlock,
)
from hairpin_proxy.wildcards import wildcard_base

OUR_ZONE = "hairpin-proxy.invalid"
OUR_KEY = f"{OUR_ZONE}:{DEFAULT_DNS_PORT}"
DEFAULT_CLUSTER_DOMAIN = "cluster.local"
# What our block copies from the cluster-domain block (in that block's order).
COPIED = frozenset({"errors", "cache", "reload", "loop", "bind", "forward", "prometheus"})
# NodeLocal DNSCache's ConfigMaps: upstream's, and kubespray's.
NODELOCAL_CONFIGMAPS = (("kube-system", "node-local-dns"), ("kube-system", "nodelocaldns"))


def _zone_of(address: Address) -> str | None:
    """The zone of a plain DNS key on port 53 (no trailing dot), else None."""
    if address.transport != "dns" or address.effective_port != DEFAULT_DNS_PORT:
        return None
    return address.zone.rstrip(".") or "."


def _is_ours(block: ServerBlock) -> bool:
    return any(a.zone == OUR_ZONE + "." for a in block.addresses)


def _domain(cluster_domain: str) -> str:
    domain = cluster_domain.lower().rstrip(".") if isinstance(cluster_domain, str) else ""
    if not _NAME.fullmatch(domain):
        raise CorefileError(f"cluster domain {cluster_domain!r} is not a DNS name")
    return domain


def _under(zone: str, domain: str) -> bool:
    return zone == domain or zone.endswith("." + domain)


def _cluster_block(cf: Corefile, domain: str) -> ServerBlock:
    found = [b for b in cf.server_blocks if not _is_ours(b)
             and any(_zone_of(a) == domain for a in b.addresses)]
    if not found:
        seen = ", ".join(" ".join(b.keys) for b in cf.server_blocks) or "none"
        raise CorefileError(f"no server block for the cluster domain {domain!r} on port "
                            f"{DEFAULT_DNS_PORT} (server blocks found: {seen})")
    if len(found) > 1:
        raise CorefileError(f"{len(found)} server blocks serve the cluster domain {domain!r}; "
                            "which one forwards to the cluster DNS is ambiguous",
                            line=found[1].line, column=found[1].column)
    return found[0]


def _copied(cf: Corefile, cluster: ServerBlock) -> list[Directive]:
    """The cluster block's directives we copy; CorefileError when it forwards nothing."""
    copied = [d for d in _expanded(cf, cluster.directives) if d.name in COPIED]
    if not any(d.name == "forward" and d.args[:1] == (".",) for d in copied):
        raise CorefileError("the cluster-domain server block has no 'forward . <cluster DNS>' "
                            "to send our names to", line=cluster.line, column=cluster.column)
    # A forward of another zone would never match our names: only "forward ." is copied.
    return [d for d in copied if d.name != "forward" or d.args[:1] == (".",)]


def _zones(cf: Corefile, hosts: Sequence[str], domain: str) -> list[str]:
    taken = {z for b in cf.server_blocks if not _is_ours(b)
             for z in map(_zone_of, b.addresses) if z is not None}
    zones: set[str] = set()
    for host in hosts:
        zone = host.lower()
        zone = wildcard_base(zone) or zone
        # Only a plain DNS name is a safe key; a zone defined twice makes CoreDNS refuse the
        # whole Corefile; the cluster zones go to the cluster DNS already.
        if (_NAME.fullmatch(zone) and zone not in taken and zone != OUR_ZONE
                and not _under(zone, domain)):
            zones.add(zone)
    return sorted(zones)


def _block_end(block: ServerBlock) -> int:
    if block.body is not None:
        return block.body.close.end
    return max([block.header[-1].end, *(d.end for d in block.directives)])


def _top_level(cf: Corefile, offset: int) -> bool:
    """Whether ``offset`` lies outside every server block and snippet."""
    for block in cf.server_blocks:
        if block.header[0].start <= offset < (
                _block_end(block) if block.body is not None else len(cf.text) + 1):
            return False
    return not any(s.body.open.start <= offset < s.body.close.end for s in cf.snippets)


def _our_spans(cf: Corefile) -> tuple[list[_Span], list[_Span]]:
    """(our server blocks, top-level marker comment lines) as whole lines to delete."""
    text = cf.text
    blocks = [_whole_lines(text, b.header[0].start, _block_end(b), b.line,
                           "hairpin-proxy server block")
              for b in cf.server_blocks if _is_ours(b)]
    markers = [_Span(_line_start(text, c.start), _line_end(text, c.start), "")
               for c in cf.comments
               if c.alone and c.text.startswith(MARKER_PREFIXES) and _top_level(cf, c.start)]
    return blocks, markers


def _merged(spans: Iterable[_Span]) -> list[tuple[int, int]]:
    """Sorted spans, touching or overlapping ones joined."""
    out: list[tuple[int, int]] = []
    for s in sorted(spans, key=lambda s: s.lo):
        if out and s.lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], s.hi))
        else:
            out.append((s.lo, s.hi))
    return out


def _render(zones: Sequence[str], directives: Sequence[Directive], text: str, unit: str,
            nl: str) -> str:
    keys = " ".join(f"{z}:{DEFAULT_DNS_PORT}" for z in (OUR_ZONE, *zones))
    body = "".join(f"{unit}{text[d.start:d.end]}{nl}" for d in directives)
    return f"{BEGIN_MARKER}{nl}{keys} {{{nl}{body}}}{nl}{END_MARKER}{nl}"


def _edit(cf: Corefile, hosts: Sequence[str], domain: str
          ) -> tuple[str, list[str], list[Directive]]:
    """(the edited text, the zones of our block, the directives it copies)."""
    text = cf.text
    cluster = _cluster_block(cf, domain)
    directives = _copied(cf, cluster)
    zones = _zones(cf, hosts, domain)
    blocks, markers = _our_spans(cf)
    runs = _merged([*blocks, *markers])
    if runs and runs[-1][1] == len(text) and not text.endswith("\n") and runs[-1][0] > 0:
        # Our text ends a file that has no final line ending: the line ending in front of it
        # is ours too (we put it there when we appended, see below).
        lo, hi = runs[-1]
        runs[-1] = (lo - len(_line_ending(text, _line_start(text, lo - 1))), hi)
    base = _splice(text, [(lo, hi, "") for lo, hi in runs])
    if not zones:
        return base, zones, directives
    if blocks:
        # Where our first block stood (with the markers right in front of it).
        first = min(b.lo for b in blocks)
        run = next(k for k, (lo, hi) in enumerate(runs) if lo <= first < hi)
        at = runs[run][0] - sum(hi - lo for lo, hi in runs[:run])
    else:
        at = len(base)
        if any(b.body is None for b in cf.server_blocks):
            raise CorefileError("cannot append our server block: the last server block has "
                                "no braces and would take it in")
    nl = _line_ending(text, cluster.header[0].start) or "\n"
    new = _render(zones, directives, text, _indent_unit(text), nl)
    if at == len(base) and base and not base.endswith("\n"):
        new = nl + new.removesuffix(nl)
    return base[:at] + new + base[at:], zones, directives


def _verify(out: str, zones: Sequence[str], directives: Sequence[Directive], domain: str
            ) -> None:
    """Read the result back: exactly one block of ours, first key ours, exactly the wanted
    zones (none served elsewhere), and the cluster block's directives."""
    cf = parse(out)
    ours = [b for b in cf.server_blocks if _is_ours(b)]
    if not zones:
        if ours:
            raise CorefileError("internal check failed: a server block of ours is left over")
        return
    if len(ours) != 1 or ours[0].keys[0] != OUR_KEY \
            or [_zone_of(a) for a in ours[0].addresses[1:]] != list(zones):
        raise CorefileError("internal check failed: the edited Corefile does not hold "
                            "exactly one server block of ours with the requested zones")
    if [d.words() for d in ours[0].directives] != [d.words() for d in directives]:
        raise CorefileError("internal check failed: our server block does not forward as "
                            "the cluster-domain block does")
    if set(_zones(cf, zones, domain)) != set(zones):
        raise CorefileError("internal check failed: a zone of ours is served elsewhere too")
    _cluster_block(cf, domain)


def apply_nodelocal(text: str, hosts: Iterable[str], *,
                    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> str:
    """Return ``text`` with exactly one server block of ours forwarding ``hosts`` to the
    cluster DNS, as the cluster-domain block does.

    Each exact host is a zone, each ``*.domain`` the zone ``domain``; zones another server
    block already serves on port 53, and zones at or under the cluster domain, are left out.
    No zone left (or no hosts): our block is removed. Raises CorefileError, and changes
    nothing, when the text cannot be parsed or edited safely, a host is not a valid name, or
    there is no (single) cluster-domain block with a ``forward .``.
    """
    wanted = checked_hosts(hosts)
    domain = _domain(cluster_domain)
    out, zones, directives = _edit(parse(text), wanted, domain)
    _check_size(out)
    _verify(out, zones, directives, domain)
    return out


def remove_nodelocal(text: str, *, cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> str:
    """Return ``text`` without our server block (nor its marker comments)."""
    return apply_nodelocal(text, [], cluster_domain=cluster_domain)


def nodelocal_zones(text: str, hosts: Iterable[str], *,
                    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> tuple[str, ...]:
    """The zones ``apply_nodelocal(text, hosts)`` would give our block, sorted."""
    wanted = checked_hosts(hosts)
    return tuple(_zones(parse(text), wanted, _domain(cluster_domain)))


def nodelocal_hosts(text: str) -> tuple[str, ...]:
    """The zones our server block(s) forward to the cluster DNS now, sorted (a wildcard host
    ``*.domain`` shows as ``domain``). Raises CorefileError when the text cannot be parsed."""
    cf = parse(text)
    return tuple(sorted({z for b in cf.server_blocks if _is_ours(b)
                         for z in map(_zone_of, b.addresses)
                         if z is not None and z != OUR_ZONE}))
