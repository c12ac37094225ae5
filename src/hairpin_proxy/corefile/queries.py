"""Questions about a Corefile: which plugins a root block uses, what it imports."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Sequence

from hairpin_proxy.corefile.parser import parse
from hairpin_proxy.corefile.syntax import DEFAULT_DNS_PORT, Corefile, Directive

# Where k3s, AKS, DOKS and Gardener mount the coredns-custom ConfigMap, and where the Corefile
# itself lives (relative import paths are resolved against it).
DEFAULT_CUSTOM_DIR = "/etc/coredns/custom"
DEFAULT_COREFILE_DIR = "/etc/coredns"

def _expanded(cf: Corefile, directives: Sequence[Directive], depth: int = 0
              ) -> Iterator[Directive]:
    """Directives of a block, with ``import <snippet>`` replaced by the snippet's."""
    for d in directives:
        yield d
        if d.name == "import" and depth < 10:
            snippet = cf.snippet(d.args[0])
            if snippet is not None:
                yield from _expanded(cf, snippet.body.directives, depth + 1)


def has_plugin(text: str, plugin: str, *, dns_port: int = DEFAULT_DNS_PORT) -> bool:
    """Whether a root server block uses ``plugin``, directly or through an imported snippet.

    Only the block's own directives count (``reload`` inside ``hosts { }`` is an option of
    hosts). Files pulled in by ``import <glob>`` cannot be seen from the text and are not
    counted. Raises CorefileError when the text cannot be parsed.
    """
    cf = parse(text)
    return any(d.name == plugin for b in cf.root_blocks(dns_port)
               for d in _expanded(cf, b.directives))


def _glob_regex(pattern: str) -> re.Pattern[str] | None:
    # Go's filepath.Match, as Caddy v1 allows it: at most one "*", one "?", no classes.
    if pattern.count("*") > 1 or pattern.count("?") > 1 or ("[" in pattern and "]" in pattern):
        return None
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c))
        i += 1
    return re.compile("".join(out))


def import_matches(pattern: str, key: str, *, custom_dir: str = DEFAULT_CUSTOM_DIR,
                   corefile_dir: str = DEFAULT_COREFILE_DIR) -> bool:
    """Whether ``import pattern`` would read the ConfigMap key ``key`` mounted in custom_dir."""
    path = pattern if pattern.startswith("/") else posixpath.join(corefile_dir, pattern)
    directory, base = posixpath.split(posixpath.normpath(path))
    if directory != posixpath.normpath(custom_dir):
        return False
    glob = _glob_regex(base)
    return glob is not None and glob.fullmatch(key) is not None


def imports_key(text: str, key: str, *, dns_port: int = DEFAULT_DNS_PORT,
                custom_dir: str = DEFAULT_CUSTOM_DIR,
                corefile_dir: str = DEFAULT_COREFILE_DIR) -> bool:
    """Whether every root server block imports the ConfigMap key ``key`` as directives.

    Checked: an ``import`` directive inside each root block for ``dns_port`` (directly or via an
    imported snippet) whose path, resolved against ``corefile_dir`` when relative, lies in
    ``custom_dir`` and whose file-name glob matches ``key`` (``*.override`` matches
    ``hairpin-proxy.override``). Top-level imports (``*.server``) splice in server blocks, not
    directives, and do not count. False when there is no root block; raises CorefileError
    when the text cannot be parsed.
    """
    cf = parse(text)
    roots = cf.root_blocks(dns_port)
    return bool(roots) and all(
        any(d.name == "import" and import_matches(d.args[0], key, custom_dir=custom_dir,
                                                  corefile_dir=corefile_dir)
            for d in _expanded(cf, b.directives))
        for b in roots)


# Plugins that answer for their zones from a source of their own, and where their zones are:
# "args" (every argument), "after-first" (arguments after the first, e.g. file DBFILE ZONES).
_ZONE_ARGS = {"kubernetes": "args", "k8s_external": "args", "etcd": "args", "auto": "args",
              "secondary": "args", "file": "after-first", "hosts": "after-first"}


_NAME = re.compile(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*")


def _zone(value: str) -> str:
    return value.strip().lower().rstrip(".")


def _plugin_zones(d: Directive) -> Iterator[str]:
    where = _ZONE_ARGS.get(d.name)
    if where == "args":
        yield from d.args
    elif where == "after-first":
        yield from d.args[1:]
    elif d.name in {"route53", "clouddns"}:
        yield from (a.split(":", 1)[0] for a in d.args if ":" in a)
    elif d.name == "azure":
        yield from (a.split(":", 1)[1] for a in d.args if ":" in a)
    if d.name == "hosts":
        # Inline entries: "ADDRESS NAME..." lines inside the block.
        for block in d.blocks:
            for entry in block.directives:
                if entry.args and re.fullmatch(r"[0-9a-fA-F:.]+(%\S+)?", entry.name) \
                        and any(c in entry.name for c in ".:"):
                    yield from entry.args


def served_zones(text: str | Corefile, *, dns_port: int = DEFAULT_DNS_PORT
                 ) -> tuple[str, ...]:
    """Zones this Corefile answers itself rather than by forwarding, sorted, without the
    trailing dot: the zones of ``kubernetes``, ``k8s_external``, ``file``, ``hosts`` (and the
    names of its inline entries), ``etcd``, ``auto``, ``secondary`` and the cloud DNS plugins in
    the root server blocks, and the zone of every other server block on ``dns_port`` (stub
    domains such as ``consul:53``). The root zone itself is never listed. Raises
    CorefileError when the text cannot be parsed (a parsed Corefile is taken as it is).
    """
    cf = text if isinstance(text, Corefile) else parse(text)
    zones: set[str] = set()
    for block in cf.server_blocks:
        if block.is_root(dns_port):
            for d in _expanded(cf, block.directives):
                zones.update(_zone(z) for z in _plugin_zones(d))
            continue
        zones.update(_zone(a.zone) for a in block.addresses
                     if a.transport == "dns" and a.effective_port == dns_port)
    # Environment placeholders ({$VAR}) and the like name no zone we could compare with.
    return tuple(sorted(z for z in zones if _NAME.fullmatch(z)))
