r"""What kubeadm's Corefile migration prints, and the corpus files made with it.

kubeadm upgrades CoreDNS with github.com/coredns/corefile-migration, which reads the Corefile
with the Caddy v1 dispenser into servers, plugins (depth 1) and options (depth 2), and prints
them back (``migration/corefile/corefile.go``, ``New`` and ``ToString``):

- comments are gone, and everything nested deeper than an option is dropped;
- plugins are indented 4 spaces, options 8; a plugin's ``}`` at 4, a server's at 0;
- a server or plugin with nothing inside is printed without braces;
- server blocks are joined by one blank line (a server printed without braces gets no line
  ending of its own);
- an argument holding white space is re-quoted (``"`` escaped as ``\"``), any other loses its
  quotes.

``migrate`` emulates exactly that, independently of ``hairpin_proxy.corefile``, including the
tool's quirk that a ``}`` on the line of an option is read as one more argument (so inline
blocks such as ``log . { class error }`` come out broken, as they do from kubeadm; the corpus
has no migrated form of such layouts).

``python -m tests.corefiles.migrate`` (re)writes the ``*-migrated.Corefile`` files of the corpus
from their sources; they are committed, and the tests only read them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from hairpin_proxy import corefile
from tests.corefiles import BY_NAME, HERE

INDENT = 4
# Go's unicode.IsSpace (the Caddy lexer's test), not Python's str.isspace.
_SPACE = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
                   + "".join(map(chr, range(0x2000, 0x200B))))


@dataclass(frozen=True)
class Tok:
    text: str
    line: int
    breaks: int  # line breaks inside the token (a quoted multi-line string)


def lex(text: str) -> list[Tok]:
    """The Caddy v1 lexer: white space separates tokens, ``#`` starts a comment anywhere
    outside quotes, a token opening with ``"`` runs to the next unescaped ``"`` (only ``\"``
    is an escape), ``\r`` is ignored."""
    toks: list[Tok] = []
    val: list[str] = []
    line = 1
    start = 1
    quoted = escaped = comment = False
    for ch in text.removeprefix("\ufeff"):
        if quoted:
            if not escaped:
                if ch == "\\":
                    escaped = True
                    continue
                if ch == '"':
                    quoted = False
                    toks.append(Tok("".join(val), start, line - start))
                    val = []
                    continue
            if ch == "\n":
                line += 1
            if escaped and ch != '"':
                val.append("\\")
            val.append(ch)
            escaped = False
            continue
        if ch in _SPACE:
            if ch == "\r":
                continue
            if ch == "\n":
                line += 1
                comment = False
            if val:
                toks.append(Tok("".join(val), start, 0))
                val = []
            continue
        if ch == "#":
            comment = True
        if comment:
            continue
        if not val:
            start = line
            if ch == '"':
                quoted = True
                continue
        val.append(ch)
    if val:
        toks.append(Tok("".join(val), start, 0))
    return toks


@dataclass
class Option:
    name: str
    args: list[str]

    def render(self) -> str:
        return " ".join([self.name, *_escape(self.args)])


@dataclass
class Plugin:
    name: str
    args: list[str]
    options: list[Option] = field(default_factory=list)

    def render(self) -> str:
        out = " ".join([self.name, *_escape(self.args)])
        if self.options:
            inner = "\n".join(" " * INDENT * 2 + o.render() for o in self.options)
            out += " {\n" + inner + "\n" + " " * INDENT + "}"
        return out


@dataclass
class Server:
    keys: list[str]
    plugins: list[Plugin] = field(default_factory=list)

    def render(self) -> str:
        out = " ".join(_escape(self.keys))
        if self.plugins:
            out += " {\n" + "\n".join(" " * INDENT + p.render() for p in self.plugins) + "\n}\n"
        return out


def _escape(args: list[str]) -> list[str]:
    return ['"' + a.replace('"', '\\"') + '"' if len(a.split()) > 1 else a for a in args]


def read(text: str) -> list[Server]:
    """corefile.New: Next() and RemainingArgs() over the dispenser, by brace depth."""
    toks = lex(text)
    servers: list[Server] = []
    depth = 0
    i = 0
    while i < len(toks):
        val = toks[i].text
        if val == "{":
            depth += 1
            i += 1
            continue
        if val == "}":
            depth -= 1
            i += 1
            continue
        args: list[str] = []
        # RemainingArgs: the following tokens on the same line, up to (not including) "{".
        while (i + 1 < len(toks)
               and toks[i].line + toks[i].breaks == toks[i + 1].line
               and toks[i + 1].text != "{"):
            i += 1
            args.append(toks[i].text)
        i += 1
        if depth == 0:
            servers.append(Server([val, *args]))
        elif depth == 1:
            servers[-1].plugins.append(Plugin(val, args))
        elif depth == 2:
            servers[-1].plugins[-1].options.append(Option(val, args))
    return servers


def migrate(text: str) -> str:
    """The Corefile as kubeadm's migration prints it."""
    return "\n".join(s.render() for s in read(text))


# --- the corpus files made with it -----------------------------------------------------------

# Hosts and proxy addresses the migrated files were written for (see tests/corefiles/README.md).
HOSTS = ("a.example.com", "b.example.com", "*.apps.example.com")
V4 = ("10.96.0.20",)
V6 = ("fd00:10:96::20",)
DUAL = V4 + V6

# name of the migrated file's source → the addresses our rules answered with before the
# migration; None: the source already holds rules of ours (it is migrated as it is).
SOURCES: dict[str, tuple[str, ...] | None] = {
    "kubeadm": V4,
    "k3s": DUAL,
    "rke2": V4,
    "microk8s": V6,
    "talos": DUAL,
    "openshift": V4,
    "gardener": DUAL,
    "aks": V4,
    "eks": DUAL,
    "stub-zone": V4,
    "tabs": V6,
    "snippets-quotes": DUAL,
    "brace-next-line": V4,
    "legacy": None,
    "old-rewrite": None,
    "groups": None,
}


def migrated_text(source: str) -> str:
    """The migrated file for ``source``, as ``main`` writes it."""
    sample = BY_NAME[source]
    addresses = SOURCES[source]
    text = sample.text
    if addresses is not None:
        text = corefile.apply(text, HOSTS, answers=corefile.Answers.of(addresses),
                              dns_port=sample.dns_port)
    return migrate(text)


def main() -> None:
    for source in SOURCES:
        path = HERE / f"{source}-migrated.Corefile"
        path.write_bytes(migrated_text(source).encode("utf-8"))
        print(f"wrote {path.relative_to(HERE.parent.parent)}", file=sys.stderr)


if __name__ == "__main__":
    main()
