"""The targets table: ``targets.json`` in the ConfigMap ``hairpin-proxy-targets``. Pure.

The controller writes it and the proxies poll it, so the two must agree byte for byte on
what a table is. ``encode`` is canonical (entries by slot, object keys sorted, fixed
layout): an unchanged table encodes to the same text, and the controller only writes when
the text differs. ``decode`` is strict, because a proxy that half-understood a table would
open listeners nobody asked for: anything malformed raises TableError naming the field, and
the proxy keeps its last good table.

Only targets that get a slot appear, i.e. those whose data plane expects PROXY v1 or v2.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from hairpin_proxy.targets.model import (
    DEFAULT_KEY,
    Target,
    is_canonical_ip,
    is_dns_label,
    is_port_or_zero,
    parse_key,
)
from hairpin_proxy.targets.slots import MAX_SLOT, listen_ports

VERSION: Final = 1
TABLE_KEY: Final = "targets.json"
# When each target first appeared in the table (unix seconds): the settle delay counts from it.
PUBLISHED_KEY: Final = "published.json"
# A full table of MAX_SLOT entries is far below this; larger input is refused unread.
MAX_TEXT: Final = 4 * 1024 * 1024
_MAX_NAME: Final = 253

TableProxy = Literal["v1", "v2"]
_ENTRY_FIELDS: Final = frozenset({"key", "slot", "listen", "upstream", "ports",
                                  "advertise_ports", "advertise_address", "proxy"})
_TOP_FIELDS: Final = frozenset({"version", "targets"})


class TableError(ValueError):
    """A targets table that must not be used; the message says which field and why."""


def _is_dns_name(name: str) -> bool:
    return (0 < len(name) <= _MAX_NAME
            and all(is_dns_label(label) for label in name.split(".")))


def _pair(where: str, value: object, allow_zero: bool) -> tuple[int, int]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise TableError(f"{where} must be a list of two port numbers")
    for item in value:
        if not is_port_or_zero(item) or (item == 0 and not allow_zero):
            lowest = 0 if allow_zero else 1
            raise TableError(f"{where} holds {item!r}, not a port number {lowest}..65535")
    return value[0], value[1]


@dataclass(frozen=True)
class TableEntry:
    key: str
    slot: int
    listen: tuple[int, int]
    upstream: str
    ports: tuple[int, int]
    advertise_ports: tuple[int, int]
    advertise_address: str
    proxy: TableProxy

    def __post_init__(self) -> None:
        where = f"target {self.key!r}"
        if not isinstance(self.key, str):
            raise TableError(f"target key {self.key!r} is not a string")
        try:
            parse_key(self.key)
        except ValueError as err:
            raise TableError(str(err)) from None
        if self.key == DEFAULT_KEY:
            raise TableError("the default target has no place in the table (it is slot 0)")
        if type(self.slot) is not int or not 1 <= self.slot <= MAX_SLOT:
            raise TableError(f"{where}: slot {self.slot!r} is not in 1..{MAX_SLOT}")
        listen = _pair(f"{where}: listen", self.listen, allow_zero=False)
        if listen != listen_ports(self.slot):
            # Redundant with the slot on purpose: a mismatch means writer and reader
            # disagree about the port plan, and guessing which is right is unsafe.
            raise TableError(f"{where}: listen {list(listen)} does not match slot "
                             f"{self.slot} ({list(listen_ports(self.slot))})")
        if not isinstance(self.upstream, str) or not _is_dns_name(self.upstream):
            raise TableError(f"{where}: upstream {self.upstream!r} is not a DNS name")
        ports = _pair(f"{where}: ports", self.ports, allow_zero=True)
        if ports == (0, 0):
            raise TableError(f"{where}: ports has neither an HTTP nor a TLS port")
        adv = _pair(f"{where}: advertise_ports", self.advertise_ports, allow_zero=False)
        if not isinstance(self.advertise_address, str) or (
                self.advertise_address and not is_canonical_ip(self.advertise_address)):
            raise TableError(f"{where}: advertise_address {self.advertise_address!r} is "
                             "neither empty nor an IP address in canonical form")
        if self.proxy not in ("v1", "v2"):
            raise TableError(f"{where}: proxy {self.proxy!r} is not v1 or v2")
        # Lists from JSON become tuples so that entries compare and hash as values.
        object.__setattr__(self, "listen", listen)
        object.__setattr__(self, "ports", ports)
        object.__setattr__(self, "advertise_ports", adv)


def entry_for(target: Target, slot: int) -> TableEntry:
    """The table row of a target with PROXY v1/v2 in ``slot``; advertised ports are the
    ones the real load balancer would have named, 80 and 443."""
    if target.proxy not in ("v1", "v2"):
        raise TableError(f"target {target.key!r}: proxy {target.proxy} gets no slot")
    proxy: TableProxy = "v1" if target.proxy == "v1" else "v2"
    return TableEntry(key=target.key, slot=slot, listen=listen_ports(slot),
                      upstream=target.upstream, ports=(target.http_port, target.https_port),
                      advertise_ports=(80, 443), advertise_address=target.advertise_address,
                      proxy=proxy)


def _check_unique(entries: Iterable[TableEntry]) -> list[TableEntry]:
    out = sorted(entries, key=lambda e: e.slot)
    seen_keys: set[str] = set()
    seen_slots: set[int] = set()
    for e in out:
        if e.key in seen_keys:
            raise TableError(f"target {e.key!r} appears twice")
        if e.slot in seen_slots:
            raise TableError(f"slot {e.slot} is given to two targets")
        seen_keys.add(e.key)
        seen_slots.add(e.slot)
    return out


def encode(entries: Iterable[TableEntry]) -> str:
    """The canonical text of a table."""
    rows = [{"key": e.key, "slot": e.slot, "listen": list(e.listen), "upstream": e.upstream,
             "ports": list(e.ports), "advertise_ports": list(e.advertise_ports),
             "advertise_address": e.advertise_address, "proxy": e.proxy}
            for e in _check_unique(entries)]
    return json.dumps({"version": VERSION, "targets": rows}, sort_keys=True, indent=1,
                      ensure_ascii=True) + "\n"


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise TableError(f"field {k!r} appears twice in one object")
        out[k] = v
    return out


def _no_constants(name: str) -> Any:
    raise TableError(f"{name} is not a JSON number")


def _fields(where: str, obj: object, fields: frozenset[str]) -> Mapping[str, Any]:
    if not isinstance(obj, dict):
        raise TableError(f"{where} is not a JSON object")
    missing = sorted(fields - obj.keys())
    if missing:
        raise TableError(f"{where} lacks {', '.join(missing)}")
    extra = sorted(obj.keys() - fields)
    if extra:
        raise TableError(f"{where} has unknown field(s) {', '.join(extra)}")
    return obj


def decode(text: str | bytes) -> tuple[TableEntry, ...]:
    """The entries of a table, by slot. TableError for anything malformed."""
    if len(text) > MAX_TEXT:
        raise TableError(f"the table is larger than {MAX_TEXT} bytes")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise TableError("the table is not UTF-8") from None
    try:
        top = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except json.JSONDecodeError as err:
        raise TableError(f"the table is not JSON: {err.msg} at line {err.lineno} "
                         f"column {err.colno}") from None
    except RecursionError:
        raise TableError("the table is nested too deeply") from None
    fields = _fields("the table", top, _TOP_FIELDS)
    version = fields["version"]
    if type(version) is not int or version != VERSION:
        raise TableError(f"table version {version!r} is not {VERSION}")
    rows = fields["targets"]
    if not isinstance(rows, list):
        raise TableError("targets is not a list")
    entries = []
    for i, row in enumerate(rows):
        r = _fields(f"targets[{i}]", row, _ENTRY_FIELDS)
        entries.append(TableEntry(key=r["key"], slot=r["slot"], listen=r["listen"],
                                  upstream=r["upstream"], ports=r["ports"],
                                  advertise_ports=r["advertise_ports"],
                                  advertise_address=r["advertise_address"], proxy=r["proxy"]))
    return tuple(_check_unique(entries))


def decode_published(raw: object) -> dict[str, float]:
    """``published.json``: target key → when it first appeared in the table (unix seconds).
    Lenient, unlike the table: a bad entry only means its target settles afresh."""
    try:
        value = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {k: float(v) for k, v in value.items()
            if isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool)}


def settles_at(published: Mapping[str, float], key: str, settle: float,
               now: float) -> float:
    """When the hosts of ``key`` get their DNS rules: ``settle`` seconds after the target
    first appeared in the published table (from ``now`` when it is not there yet)."""
    since = published.get(key)
    return (since if since is not None else now) + settle


def clock(when: float) -> str:
    """``HH:MM:SS`` (UTC) of a unix time: how log lines, /readyz and doctor show when a
    slot's hosts get their rules."""
    return time.strftime("%H:%M:%S", time.gmtime(when))
