"""The doctor's output: a text report with a block per host, or the same facts as JSON. Pure."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hairpin_proxy.doctor.facts import (
    MIN_COREDNS,
    Attempt,
    ClusterFacts,
    ForgedCheck,
    HostFacts,
    HostTarget,
    LbService,
    LostClaim,
    PortProbe,
    Verification,
    rule_covers,
    version_text,
    zone_covers,
)
from hairpin_proxy.doctor.verdict import Verdict, port_state


@dataclass(frozen=True)
class HostReport:
    facts: HostFacts
    verdict: Verdict


@dataclass(frozen=True)
class Report:
    hosts: tuple[HostReport, ...]
    cluster: ClusterFacts | None = None
    # Why there are no cluster facts ("" when there are).
    api_note: str = ""
    notes: tuple[str, ...] = ()
    # The forged-PROXY-header check of each data plane, or why there is none.
    forged: tuple[ForgedCheck, ...] = ()
    forged_note: str = ""

    @property
    def ok(self) -> bool:
        return all(h.verdict.ok for h in self.hosts)


def _yes(value: bool | None) -> str:
    return "unknown" if value is None else "yes" if value else "no"


def _attempt_json(a: Attempt) -> dict[str, Any]:
    out: dict[str, Any] = {"outcome": a.outcome}
    if a.status is not None:
        out["status"] = a.status
    if a.detail:
        out["detail"] = a.detail
    return out


def _probe_json(p: PortProbe | None) -> dict[str, Any] | None:
    if p is None:
        return None
    return {"address": p.address, "port": p.port, "state": port_state(p),
            "bare": _attempt_json(p.bare), "proxy_v1": _attempt_json(p.v1),
            "proxy_v2": _attempt_json(p.v2)}


def _lb_json(svc: LbService) -> dict[str, Any]:
    return {
        "service": svc.name,
        "ingress": [{"ip": e.ip, "hostname": e.hostname, "ipMode": e.ip_mode}
                    for e in svc.entries],
        "proxy_protocol": [{"provider": p.provider, "annotation": p.annotation,
                            "value": p.value, "enabled": p.enabled}
                           for p in svc.proxy_protocol],
    }


def _cluster_json(c: ClusterFacts) -> dict[str, Any]:
    return {
        "load_balancers": None if c.lb_services is None else [_lb_json(s)
                                                              for s in c.lb_services],
        "proxy_service_found": c.proxy_service_found,
        "proxy_addresses": list(c.proxy_addresses),
        "proxy_ready_endpoints": c.proxy_ready_endpoints,
        "rule_hosts": None if c.rule_hosts is None else list(c.rule_hosts),
        "reload_plugin": c.reload_plugin,
        "node_local_dns": c.node_local_dns,
        "node_local_configmap": c.node_local_configmap,
        "node_local_reconciled": c.node_local_reconciled,
        "node_local_reverted_by": c.node_local_reverted_by,
        "node_local_zones": None if c.node_local_zones is None
        else sorted(c.node_local_zones),
        "coredns_image": c.coredns_image,
        "coredns_version": None if c.coredns_version is None
        else ".".join(map(str, c.coredns_version)),
        "coredns_version_ok": c.coredns_ok,
        "problems": list(c.problems),
        "gateway_api": c.gateway_api,
        "target_slots": None if c.target_slots is None else dict(sorted(c.target_slots.items())),
        "gateway_notes": list(c.gateway_notes),
        "cluster_dns": None if c.cluster_dns is None else c.cluster_dns.described,
    }


def _target_json(t: HostTarget | None) -> dict[str, Any] | None:
    if t is None:
        return None
    return {
        "key": t.key, "verdict": t.verdict, "redirected": t.verdict == "redirected",
        "message": t.message or None, "asked": t.asked or None,
        "service": t.service or None, "found_by": t.found_by or None,
        "proxy": t.proxy or None, "proxy_source": t.proxy_source or None,
        "slot": t.slot, "proxy_service": t.proxy_service or None,
        "proxy_service_found": t.proxy_service_found,
        "proxy_addresses": list(t.proxy_addresses), "published": t.published,
        "rules_at": t.rules_at or None, "refused": t.refused or None,
        "origins": list(t.origins),
        "claims_lost": [{"origin": x.origin, "target": x.target, "asked": x.asked or None,
                         "verdict": "host-claimed-elsewhere", "winner": x.winner,
                         "winner_target": x.winner_target} for x in t.losers],
    }


def _verification_json(v: Verification | None) -> dict[str, Any] | None:
    if v is None:
        return None
    return {"code": v.code, "redirect": v.redirect, "reason": v.reason,
            "queried": v.queried or None, "addresses": list(v.addresses),
            "matched": list(v.matched), "resolver": v.resolver or None}


def host_json(h: HostReport) -> dict[str, Any]:
    f = h.facts
    return {
        "host": f.host,
        "ok": h.verdict.ok,
        "verdict": h.verdict.code,
        "advice": h.verdict.advice,
        "dns": {
            "addresses": [{"address": a, "kind": k}
                          for a, k in zip(f.resolution.addresses, f.kinds, strict=False)],
            "error": f.resolution.error or None,
            "overridden": f.resolution.overridden,
            "resolver": f.resolution.resolver or None,
        },
        "http": _probe_json(f.http),
        "tls": _probe_json(f.tls),
        "load_balancer": None if f.lb is None else _lb_json(f.lb),
        "verification": _verification_json(f.verification),
        "target": _target_json(f.target),
        "node_local": _node_local_json(f),
    }


def _forged_json(x: ForgedCheck) -> dict[str, Any]:
    p = x.plane
    return {"target": p.key, "service": p.service, "address": x.address or None,
            "port": x.port or None, "tls": x.tls, "header": p.proxy,
            "controller": p.controller or None, "verdict": x.verdict, "detail": x.detail,
            "fix": x.fix or None}


def _node_local_json(f: HostFacts) -> dict[str, Any] | None:
    answers, message = node_local_answer(f.host, f.cluster)
    if not message:
        return None
    c = f.cluster
    return {"answers": answers, "message": message,
            "configmap": None if c is None else c.node_local_configmap,
            "reverted_by": None if c is None else c.node_local_reverted_by}


def to_json(r: Report) -> str:
    doc = {
        "ok": r.ok,
        "hosts": [host_json(h) for h in r.hosts],
        "cluster": None if r.cluster is None else _cluster_json(r.cluster),
        "api": r.api_note or "ok",
        "notes": list(r.notes),
        "forged_proxy_header": {"note": r.forged_note or None,
                                "data_planes": [_forged_json(x) for x in r.forged]},
    }
    return json.dumps(doc, indent=2) + "\n"


_KIND = {"lb": "load balancer", "proxy": "hairpin-proxy", "other": "not the cluster's"}


def _dns_line(f: HostFacts) -> str:
    by = f" from {f.resolution.resolver}" if f.resolution.resolver else ""
    if not f.resolution.addresses:
        return f"no address ({f.resolution.error or 'no answer'}){by}"
    parts = []
    for a, k in zip(f.resolution.addresses, f.kinds, strict=False):
        parts.append(f"{a} ({_KIND[k]})")
    suffix = " [--resolve]" if f.resolution.overridden else by
    return ", ".join(parts) + suffix


def _verification_line(v: Verification) -> str:
    redirect = {True: "redirected", False: "not redirected", None: "unknown"}[v.redirect]
    via = f" [resolver {v.resolver}]" if v.resolver else ""
    return f"{v.code} ({redirect}): {v.reason}{via}"


# The proxy's own target (slot 0): whatever its --target-server names.
_DEFAULT = "the proxy's default target (its --target-server)"


def _target_line(t: HostTarget) -> str:
    if t.verdict != "redirected":
        where = f" (Service {t.service}, found by {t.found_by})" if t.service else ""
        return f"not redirected: {t.verdict} → {t.key}{where}: {t.message}"
    if t.refused:
        return f"routed → {t.key}, refused by a size limit: {t.refused}"
    if t.key == "default":
        text = f"redirected → default, {_DEFAULT}, through Service {t.proxy_service}"
        return text + (f" ({t.message})" if t.message else "")
    if t.rules_at:
        return (f"pending (slot settling, rules at {t.rules_at}) → {t.key} via "
                f"Service {t.service} (found by {t.found_by}), PROXY {t.proxy}; proxy "
                f"Service {t.proxy_service} (slot {t.slot})")
    text = (f"redirected → {t.key} via Service {t.service} (found by {t.found_by}), PROXY "
            f"{t.proxy} (from {t.proxy_source}); proxy Service {t.proxy_service} (slot {t.slot}")
    if t.proxy_service_found is False:
        text += ", not created yet"
    if t.published is False:
        text += (", not in the published targets table yet: its hosts get DNS rules once "
                 "the proxies have had time to load it")
    return text + ")"


def _lost_line(x: LostClaim) -> str:
    fallback = f" ({x.asked} falls back to it)" if x.asked else ""
    return (f"{x.origin} asks for {x.target}{fallback}: host-claimed-elsewhere, {x.winner} "
            f"(older) wins it for {x.winner_target}")


def _probe_line(p: PortProbe) -> str:
    return (f"{p.address} port {p.port}: bare {p.bare.describe()}; PROXY v1 "
            f"{p.v1.describe()}; PROXY v2 {p.v2.describe()} -> {port_state(p)}")


def _lb_line(svc: LbService) -> str:
    entries = ", ".join(
        f"{e.ip or e.hostname} (ipMode {e.ip_mode or 'unset'})" for e in svc.entries) \
        or "no address yet"
    pp = "; ".join(f"{p.annotation}={p.value!r} ({p.provider}: "
                   f"{ {True: 'on', False: 'off', None: 'unreadable'}[p.enabled]})"
                   for p in svc.proxy_protocol) or "no PROXY-protocol annotation known"
    return f"{svc.name}: {entries}; {pp}"


def node_local_answer(host: str, c: ClusterFacts | None) -> tuple[bool | None, str]:
    """Whether node-local-dns answers ``host`` as CoreDNS would (its ConfigMap holds our block
    for the host's zone), and what to say about it; (None, "") where it is not deployed."""
    if c is None or (c.node_local_configmap is None and c.node_local_dns is not True):
        return None, ""
    where = c.node_local_configmap
    if where is None:
        return None, "deployed, but its ConfigMap is not known"
    if c.node_local_zones is None:
        return None, f"{where} could not be read"
    if zone_covers(host, c.node_local_zones):
        return True, f"yes: {where} forwards it to CoreDNS"
    why = "no block of ours for it"
    if c.node_local_reconciled:
        why += " (a running addon manager reconciles it: not edited)"
    elif c.node_local_reverted_by:
        why += f" (our block was removed by {c.node_local_reverted_by})"
    return False, f"no: {where} has {why}"


def _node_local_line(c: ClusterFacts) -> str:
    text = f"DaemonSet: {_yes(c.node_local_dns)}"
    if c.node_local_configmap is None:
        if c.node_local_zones is not None:
            text += "; ConfigMap: none"
        elif c.node_local_reconciled is None:
            text += "; ConfigMap: unknown"
        return text
    text += f"; ConfigMap {c.node_local_configmap}"
    if c.node_local_reconciled:
        text += " (labelled Reconcile and an addon manager runs: not edited)"
    if c.node_local_reverted_by:
        text += f" (our block removed by {c.node_local_reverted_by})"
    zones = "unknown" if c.node_local_zones is None else str(len(c.node_local_zones))
    return text + f"; our zones there: {zones}"


# Route notes shown in the text report; a cluster with many routes of classes we do not
# serve would otherwise bury the report under them.
MAX_ROUTE_NOTES = 10


def _cluster_lines(c: ClusterFacts) -> list[str]:
    lines = ["cluster:"]
    if c.lb_services is None:
        lines.append("  load balancers     unknown")
    elif not c.lb_services:
        lines.append("  load balancers     none (no Service of type LoadBalancer)")
    for svc in c.lb_services or ():
        lines.append(f"  load balancer      {_lb_line(svc)}")
    found = _yes(c.proxy_service_found)
    addrs = ", ".join(c.proxy_addresses)
    ready = "unknown" if c.proxy_ready_endpoints is None else str(c.proxy_ready_endpoints)
    lines.append(f"  proxy Service      {found}{f' ({addrs})' if addrs else ''}; ready "
                 f"endpoints: {ready}")
    rules = "unknown" if c.rule_hosts is None else str(len(c.rule_hosts))
    lines.append(f"  DNS rules          {rules}; reload plugin: {_yes(c.reload_plugin)}")
    version = "unknown" if c.coredns_version is None else version_text(c.coredns_version)
    ok = {True: "", False: f" (older than {version_text(MIN_COREDNS)})", None: ""}[c.coredns_ok]
    lines.append(f"  CoreDNS            {version}{ok}"
                 f"{f' [{c.coredns_image}]' if c.coredns_image else ''}")
    lines.append(f"  node-local-dns     {_node_local_line(c)}")
    lines.append(f"  Gateway API        {c.gateway_api or 'unknown'}")
    if c.target_slots is None:
        lines.append("  targets table      unknown")
    else:
        slots = ", ".join(f"{k} slot {n}" for k, n in sorted(c.target_slots.items(),
                                                              key=lambda kv: kv[1]))
        lines.append(f"  targets table      {slots or 'no target besides the default'}")
    lines.extend(f"  note               {p}" for p in c.problems)
    lines.extend(f"  route note         {n}" for n in c.gateway_notes[:MAX_ROUTE_NOTES])
    if len(c.gateway_notes) > MAX_ROUTE_NOTES:
        lines.append(f"  route note         ... and {len(c.gateway_notes) - MAX_ROUTE_NOTES} "
                     "more (--output json lists them all)")
    return lines


def _forged_lines(r: Report) -> list[str]:
    """Whether a pod can forge its client address to each data plane
    (docs/forged-proxy-header.md)."""
    if not r.forged:
        return [f"forged PROXY header: {r.forged_note}"] if r.forged_note else []
    out = ["forged PROXY header (docs/forged-proxy-header.md):"]
    for x in r.forged:
        where = f"{x.address}:{x.port}{' tls' if x.tls else ''}" if x.address else "-"
        out.append(f"  {x.plane.service} ({x.plane.key}, {where})  {x.verdict}: {x.detail}")
        if x.fix:
            out.append(f"    fix  {x.fix}")
    return out


def to_text(r: Report) -> str:
    out: list[str] = []
    for h in r.hosts:
        f, v = h.facts, h.verdict
        out.append(f"{f.host}  {'OK' if v.ok else 'FAIL'}  {v.code}")
        out.append(f"  advice   {v.advice}")
        out.append(f"  dns      {_dns_line(f)}")
        for name, p in (("http", f.http), ("tls", f.tls)):
            if p is not None:
                out.append(f"  {name:<8} {_probe_line(p)}")
        if f.lb is not None:
            out.append(f"  lb       {_lb_line(f.lb)}")
        if f.verification is not None:
            out.append(f"  verify   {_verification_line(f.verification)}")
        c = f.cluster
        if c is not None and c.rule_hosts is not None:
            out.append(f"  rule     {'yes' if rule_covers(f.host, c.rule_hosts) else 'no'}")
        _, nodelocal = node_local_answer(f.host, c)
        if nodelocal:
            out.append(f"  nodelocal {nodelocal}")
        if f.target is not None:
            out.append(f"  target   {_target_line(f.target)}")
            out.extend(f"  claim    {_lost_line(x)}" for x in f.target.losers)
        elif c is not None and c.host_targets is not None:
            out.append("  target   none: no Ingress or route that the controller's policy "
                       "accepts names this host")
        out.append("")
    if r.cluster is not None:
        out.extend(_cluster_lines(r.cluster))
    else:
        out.append(f"cluster: not checked ({r.api_note})")
    out.extend(_forged_lines(r))
    out.extend(f"note: {n}" for n in r.notes)
    bad = sum(not h.verdict.ok for h in r.hosts)
    out.append(f"{len(r.hosts)} host(s) checked, {bad} need attention"
               if r.hosts else "no hosts to check")
    return "\n".join(out) + "\n"
