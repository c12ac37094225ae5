"""Parsing of ``HOST:PORT`` strings (``[v6]:port`` included). Pure."""

from __future__ import annotations


def parse_hostport(text: str, *, default_port: int | None = None) -> tuple[str, int]:
    """Split ``host:port``, ``[v6]:port`` or (with a default port) a bare host.

    Raises ValueError with the offending text when the port is missing or out of range.
    """
    raw = text.strip()
    if not raw:
        raise ValueError("empty address")
    if raw.startswith("["):
        end = raw.find("]")
        if end < 0:
            raise ValueError(f"unclosed '[' in {text!r}")
        host, rest = raw[1:end], raw[end + 1:]
        if rest and not rest.startswith(":"):
            raise ValueError(f"junk after ']' in {text!r}")
        port_text = rest[1:] if rest else ""
    elif raw.count(":") == 1:
        host, port_text = raw.split(":")
    elif raw.count(":") > 1:
        # A bare IPv6 address cannot carry a port unambiguously.
        host, port_text = raw, ""
    else:
        host, port_text = raw, ""
    if not host:
        raise ValueError(f"missing host in {text!r}")
    if not port_text:
        if default_port is None:
            raise ValueError(f"missing port in {text!r}")
        return host, default_port
    if not port_text.isdigit() or not 0 <= int(port_text) < 65536:
        raise ValueError(f"bad port {port_text!r} in {text!r}")
    return host, int(port_text)


def format_hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
