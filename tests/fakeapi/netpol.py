"""networking.k8s.io/v1 NetworkPolicy as the real API server defaults and validates it
(kubernetes pkg/apis/networking/v1/defaults.go and pkg/apis/networking/validation), for the
parts code under test can trip over: ports (protocol, port, endPort), peers, ipBlock (a CIDR
whose every ``except`` is a strict subset of it), policyTypes, selectors' labels."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

Obj = dict[str, Any]
Cause = tuple[str, str, str]

PROTOCOLS = ("TCP", "UDP", "SCTP")
PORT_RANGE = "must be between 1 and 65535, inclusive"
_PORT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def default(obj: Obj) -> None:
    """SetDefaults_NetworkPolicy and _NetworkPolicyPort: a port's protocol is TCP; without
    policyTypes, Ingress, plus Egress when there are egress rules."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    for direction in ("ingress", "egress"):
        for rule in spec.get(direction) or ():
            for port in (rule or {}).get("ports") or () if isinstance(rule, dict) else ():
                if isinstance(port, dict) and not port.get("protocol"):
                    port["protocol"] = "TCP"
    if not spec.get("policyTypes"):
        spec["policyTypes"] = ["Ingress", *(["Egress"] if spec.get("egress") else [])]


def _port_causes(port: Any, path: str) -> list[Cause]:
    if not isinstance(port, dict):
        return [(path, "FieldValueInvalid", "Invalid value: must be an object")]
    out: list[Cause] = []
    proto = port.get("protocol")
    if proto not in PROTOCOLS:
        out.append((f"{path}.protocol", "FieldValueNotSupported",
                    f'Unsupported value: "{proto}": supported values: "TCP", "UDP", "SCTP"'))
    number, end = port.get("port"), port.get("endPort")
    if isinstance(number, int):
        if not 1 <= number <= 65535:
            out.append((f"{path}.port", "FieldValueInvalid",
                        f"Invalid value: {number}: {PORT_RANGE}"))
        if end is not None:
            if not isinstance(end, int) or end < number:
                out.append((f"{path}.endPort", "FieldValueInvalid",
                            f"Invalid value: {number}: must be greater than or equal to `port`"))
            elif not 1 <= end <= 65535:
                out.append((f"{path}.endPort", "FieldValueInvalid",
                            f"Invalid value: {end}: {PORT_RANGE}"))
    elif isinstance(number, str):
        if end is not None:
            out.append((f"{path}.endPort", "FieldValueInvalid", f"Invalid value: {end}: may "
                        "not be specified when `port` is non-numeric"))
        if not (len(number) <= 15 and _PORT_NAME.match(number) and "--" not in number
                and re.search("[a-z]", number)):
            out.append((f"{path}.port", "FieldValueInvalid",
                        f'Invalid value: "{number}": must be an IANA_SVC_NAME'))
    elif end is not None:
        out.append((f"{path}.endPort", "FieldValueInvalid", f"Invalid value: {end}: may not be "
                    "specified when `port` is not specified"))
    return out


def _cidr(text: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(str(text), strict=False) if isinstance(text, str) else None
    except ValueError:
        return None


def _block_causes(block: Any, path: str) -> list[Cause]:
    cidr = _cidr((block or {}).get("cidr")) if isinstance(block, dict) else None
    if not isinstance(block, dict) or not block.get("cidr"):
        return [(f"{path}.cidr", "FieldValueRequired", "Required value")]
    if cidr is None:
        return [(f"{path}.cidr", "FieldValueInvalid", f'Invalid value: "{block["cidr"]}": '
                 "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)")]
    out: list[Cause] = []
    for i, text in enumerate(block.get("except") or ()):
        where = f"{path}.except[{i}]"
        ex = _cidr(text)
        if ex is None:
            out.append((where, "FieldValueInvalid", f'Invalid value: "{text}": must be a valid '
                        "CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"))
        elif (ex.version != cidr.version or ex.network_address not in cidr
              or ex.prefixlen <= cidr.prefixlen):
            out.append((where, "FieldValueInvalid",
                        f'Invalid value: "{text}": must be a strict subset of `cidr`'))
    return out


def _peer_causes(peer: Any, path: str) -> list[Cause]:
    if not isinstance(peer, dict):
        return [(path, "FieldValueRequired", "Required value: must specify a peer")]
    present = [k for k in ("podSelector", "namespaceSelector", "ipBlock") if peer.get(k)
               is not None]
    if not present:
        return [(path, "FieldValueRequired", "Required value: must specify a peer")]
    if len(present) > 1 and "ipBlock" in present:
        return [(path, "FieldValueForbidden",
                 "Forbidden: may not specify both ipBlock and another peer")]
    if "ipBlock" in present:
        return _block_causes(peer["ipBlock"], f"{path}.ipBlock")
    return []


def causes(obj: Obj) -> list[Cause]:
    """Every cause the real server would answer with for this NetworkPolicy (after
    ``default``)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [("spec", "FieldValueRequired", "Required value")]
    out: list[Cause] = []
    for direction, peers in (("ingress", "from"), ("egress", "to")):
        for i, given in enumerate(spec.get(direction) or ()):
            rule = given if isinstance(given, dict) else {}
            for j, port in enumerate(rule.get("ports") or ()):
                out += _port_causes(port, f"spec.{direction}[{i}].ports[{j}]")
            for j, peer in enumerate(rule.get(peers) or ()):
                out += _peer_causes(peer, f"spec.{direction}[{i}].{peers}[{j}]")
    types = spec.get("policyTypes") or []
    for i, t in enumerate(types):
        if t not in ("Ingress", "Egress"):
            out.append((f"spec.policyTypes[{i}]", "FieldValueNotSupported",
                        f'Unsupported value: "{t}": supported values: "Ingress", "Egress"'))
    if len(types) > 2:
        out.append(("spec.policyTypes", "FieldValueInvalid",
                    f"Invalid value: {types}: may not have more than 2 policyTypes"))
    return out
