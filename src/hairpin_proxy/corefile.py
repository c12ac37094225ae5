r"""CoreDNS Corefile: tokenizer, parser and the editor of hairpin-proxy's managed block.

Pure: text in, text out. The tokenizer follows the Caddyfile v1 lexer that CoreDNS uses: a token
is a run of non-space characters, or a double-quoted string (``\"`` escapes a quote, newlines
allowed) when the quote opens the token; ``#`` outside quotes starts a comment that runs to the
end of the line, even in the middle of a word; ``{`` and ``}`` are braces only as tokens of
their own. One leniency: a word glued to a trailing ``{`` (``.{``, as the CoreDNS Helm chart
renders a server without a port) is read as the word and a brace.

The editor keeps one block of ``rewrite`` rules between ``BEGIN_MARKER`` and ``END_MARKER`` in
each server block for the root zone on the DNS port, and never touches a byte outside it
except to drop the lines the original hairpin-proxy wrote (``... # Added by hairpin-proxy``).
A new block goes right after the line that opens the server block: that place exists in every
layout, does not depend on which plugins are present, and keeps the block in sight at the top.
Its position is cosmetic: CoreDNS orders plugins by its build's plugin.cfg, not by line.
Lines between the markers belong to hairpin-proxy and are rewritten wholesale.

A host becomes ``rewrite name exact HOST TARGET`` (CoreDNS maps the answer of an exact rule
back to the asked name); a wildcard ``*.example.com`` becomes ``rewrite name regex
^[^.]+\.example\.com\.?$ TARGET answer auto``: exactly one label in front of the domain, as an
Ingress wildcard means, with the answer mapped back by ``answer auto``.
"""

from __future__ import annotations

import operator
import posixpath
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import accumulate, count
from typing import Literal

BEGIN_MARKER = "# BEGIN hairpin-proxy (managed; do not edit)"
END_MARKER = "# END hairpin-proxy"
LEGACY_MARKER = "# Added by hairpin-proxy"
MAX_CONFIGMAP_BYTES = 1024 * 1024

# Where k3s, AKS, DOKS and Gardener mount the coredns-custom ConfigMap, and where the Corefile
# itself lives (relative import paths are resolved against it).
DEFAULT_CUSTOM_DIR = "/etc/coredns/custom"
DEFAULT_COREFILE_DIR = "/etc/coredns"

DEFAULT_DNS_PORT = 53
_DEFAULT_PORTS = {"dns": 53, "tls": 853, "quic": 853, "grpc": 443, "https": 443, "https3": 443}

# Go's unicode.IsSpace, which the Caddyfile lexer uses to split tokens (Python's str.isspace
# also counts U+001C..U+001F, which Go does not).
_SPACE_CHARS = "\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_FORBIDDEN_IN_NAME = re.compile(r"[\s{}\"'`#;\\\x00-\x1f\x7f-\x9f]")
# Exactly the hosts _check_host accepts, checked in one step; a miss goes to _check_host for
# the reason.
_LABEL = r"[^\s{}\"'`#;\\\x00-\x1f\x7f-\x9f.*]+"
_VALID_HOST = rf"(?:\*\.)?{_LABEL}(?:\.{_LABEL})*"
# Hosts joined by "\n": thousands checked in one call (the joined text must hold no other
# "\n", so that no host can smuggle one in).
_VALID_HOSTS = re.compile(rf"{_VALID_HOST}(?:\n{_VALID_HOST})*")


class CorefileError(ValueError):
    """The Corefile cannot be read or edited safely; nothing should be written."""

    def __init__(self, reason: str, *, line: int | None = None, column: int | None = None):
        self.reason = reason
        self.line = line
        self.column = column
        where = f"line {line}, column {column}: " if line is not None else ""
        super().__init__(f"Corefile: {where}{reason}")


# --- tokens ----------------------------------------------------------------------------------

TokenKind = Literal["word", "quoted", "open", "close"]


@dataclass(frozen=True, slots=True)
class Token:
    kind: TokenKind
    text: str  # the value: quotes removed and \" unescaped for quoted tokens
    start: int  # offsets into the source text, end exclusive
    end: int
    line: int  # 1-based; column counts characters from 1
    column: int
    end_line: int
    first_on_line: bool  # no other token ends on this token's first line before it

    def is_word(self, text: str) -> bool:
        return self.kind == "word" and self.text == text


@dataclass(frozen=True, slots=True)
class Comment:
    text: str  # from "#" to the end of the line, without the line ending
    start: int
    end: int
    line: int
    column: int
    alone: bool  # nothing but blanks before it on its line


# A line of bare words (no quote, "#", brace or U+001C..U+001F) is one directive whose words
# str.split finds, since Python's whitespace is Go's apart from U+001C..U+001F. Such lines are
# nearly all of a large Corefile (every rule in the managed block): the lines before the next
# special character are taken as one run (str.find is far faster than any regex at finding
# it), and each line becomes a _BareLine that splits itself only when asked. Per-run, not
# per-token, Python work is what keeps a 10,000-rule Corefile fast.
_SPECIAL = '"#{}\x1c\x1d\x1e\x1f'
_BLANK = f"[{_SPACE_CHARS.replace(chr(10), '')}]"
# Everything else, one piece per match: blanks then a line ending, a comment, a quoted string
# (or its unterminated start) or a word.
_PIECE = re.compile(
    f"{_BLANK}*+"
    f'(?:(?P<nl>\n)|(?P<comment>#[^\n]*+)|"(?P<quoted>(?:[^"\\\\]|\\\\.)*+)(?P<closed>")?'
    f"|(?P<word>[^{_SPACE_CHARS}#]+))?",
    re.DOTALL)
_BARE_WORD = re.compile(f"[^{_SPACE_CHARS}]+")


class _Specials:
    """The next special character of a text at or after an offset, for a forward walk.

    Each character's next offset is searched for again only once the walk has passed it, so
    the whole walk scans the text once per character (str.find), however many steps it takes.
    """

    __slots__ = ("_at", "_text")

    def __init__(self, text: str):
        self._text = text
        self._at = [text.find(c) for c in _SPECIAL]  # -1: none left

    def next(self, offset: int) -> int:
        """The offset of the first special character at or after ``offset``; -1 for none."""
        at = self._at
        for k, pos in enumerate(at):
            if 0 <= pos < offset:
                at[k] = self._text.find(_SPECIAL[k], offset)
        return min((pos for pos in at if pos >= 0), default=-1)


def _scan(text: str) -> tuple[list[_Item], list[Comment]]:
    """Tokens (bare-word lines kept whole) and comments, in order."""
    items: list[_Item] = []
    comments: list[Comment] = []
    n = len(text)
    line, line_start, last_end_line = 1, 0, 0
    i = 1 if text.startswith("\ufeff") else 0

    def token(kind: TokenKind, value: str, start: int, end: int) -> None:
        nonlocal last_end_line
        items.append(Token(kind, value, start, end, line, start - line_start + 1, line,
                           last_end_line < line))
        last_end_line = line

    specials = _Specials(text)
    while i < n:
        if i == line_start:
            stop = specials.next(i)
            stop = n if stop < 0 else stop
            # Whole lines before the line holding the next special character.
            cut = n if stop == n else text.rfind("\n", i, stop) + 1
            if cut > i:
                chunk = text[i:cut]
                sources = chunk.split("\n")
                if not sources[-1]:
                    sources.pop()  # the run ended with a line ending
                # Line k starts after the k lines before it and their k line endings.
                starts = map(operator.add, accumulate(map(len, sources), initial=i), count())
                bare = list(map(_BareLine, starts, count(line), sources))
                if "" in sources or any(map(str.isspace, sources)):
                    bare = [b for b in bare if b.source and not b.source.isspace()]
                if bare:
                    items.append(_BareRun(bare, chunk))
                    last_end_line = bare[-1].line
                line += len(sources)
                i = line_start = cut
                continue
        m = _PIECE.match(text, i)
        assert m is not None  # every part of the pattern after the blanks is optional
        kind = m.lastgroup
        if kind == "closed":
            kind = "quoted"
        start = m.start(kind) - (kind == "quoted") if kind is not None else m.end()
        if kind == "nl":
            line += 1
            i = line_start = m.end()
        elif kind == "comment":
            end = m.end()
            end -= 1 if text.endswith("\r", start, end) else 0
            comments.append(Comment(text[start:end], start, end, line, start - line_start + 1,
                                    last_end_line < line))
            i = m.end()
        elif kind == "quoted":
            if m["closed"] is None:
                raise CorefileError("unterminated quoted string", line=line,
                                    column=start - line_start + 1)
            body = m["quoted"]
            end = m.end()
            # Inside the quotes every '"' is escaped, so this undoes exactly the escapes.
            value = body.replace('\\"', '"')
            first_line, column = line, start - line_start + 1
            breaks = body.count("\n")
            if breaks:
                line += breaks
                line_start = text.rfind("\n", start, end) + 1
            items.append(Token("quoted", value, start, end, first_line, column, line,
                               last_end_line < first_line))
            last_end_line = line
            i = end
        elif kind == "word":
            value, end = m["word"], m.end()
            if value == "{":
                token("open", value, start, end)
            elif value == "}":
                token("close", value, start, end)
            elif value.endswith("{"):
                token("word", value[:-1], start, end - 1)
                token("open", "{", end - 1, end)
            else:
                token("word", value, start, end)
            i = end
        else:  # blanks up to the end of the text
            i = m.end()
    return items, comments


def _flatten(items: Iterable[_Item]) -> Iterator[Token]:
    for item in items:
        if isinstance(item, _BareRun):
            for bare in item.lines:
                yield from bare.tokens
        else:
            yield item


def tokenize(text: str) -> tuple[list[Token], list[Comment]]:
    """Split a Corefile into tokens and comments, with their positions."""
    items, comments = _scan(text)
    return list(_flatten(items)), comments


# --- syntax tree -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Address:
    """One server block key, e.g. ``dns://.:53`` → transport dns, zone ".", port 53."""

    raw: str
    transport: str
    zone: str  # lower-case, fully qualified ("." for the root zone)
    port: int | None  # None: the transport's default

    @property
    def effective_port(self) -> int | None:
        return self.port if self.port is not None else _DEFAULT_PORTS.get(self.transport)

    def is_root(self, dns_port: int = DEFAULT_DNS_PORT) -> bool:
        return self.transport == "dns" and self.zone == "." and self.effective_port == dns_port


@dataclass(frozen=True, slots=True)
class Block:
    """A brace-delimited block and the directives in it."""

    open: Token
    close: Token
    directives: tuple[Directive, ...]

    @property
    def inner(self) -> tuple[int, int]:
        return self.open.end, self.close.start


class Directive:
    """One directive: its name, arguments outside nested blocks, and nested blocks."""

    # Not a dataclass: a large Corefile has thousands of these, and a frozen dataclass's
    # __init__ costs several times a plain one.
    __slots__ = ("_args", "_blocks", "_name", "_tokens")

    def __init__(self, name: str, args: tuple[str, ...], blocks: tuple[Block, ...],
                 tokens: tuple[Token, ...]):
        self._name = name
        self._args = args
        self._blocks = blocks
        self._tokens = tokens

    def __repr__(self) -> str:
        return f"Directive({self.name!r}, {self.args!r}, {self.blocks!r})"

    @property
    def name(self) -> str:
        return self._name

    @property
    def args(self) -> tuple[str, ...]:
        """The arguments outside any nested block."""
        return self._args

    @property
    def blocks(self) -> tuple[Block, ...]:
        """Nested blocks, e.g. ``kubernetes cluster.local { ... }``."""
        return self._blocks

    @property
    def tokens(self) -> tuple[Token, ...]:
        """Every token, nested blocks included."""
        return self._tokens

    @property
    def start(self) -> int:
        return self.tokens[0].start

    @property
    def end(self) -> int:
        return self.tokens[-1].end

    @property
    def line(self) -> int:
        return self.tokens[0].line

    @property
    def column(self) -> int:
        return self.tokens[0].column

    @property
    def first_on_line(self) -> bool:
        return self.tokens[0].first_on_line

    def words(self) -> tuple[str, ...]:
        """The name and the arguments outside nested blocks, in one tuple."""
        return (self._name, *self._args)


class _BareLine(Directive):
    """A directive alone on a line of bare words, split into words and tokens on demand."""

    __slots__ = ("_line", "_line_start", "source")

    def __init__(self, line_start: int, line: int, source: str):
        # Deliberately not Directive.__init__: this runs once per line of a large Corefile.
        self._line_start = line_start
        self._line = line
        self.source = source  # the line without its "\n"

    @property
    def name(self) -> str:
        return self.source.split(None, 1)[0]

    @property
    def args(self) -> tuple[str, ...]:
        return tuple(self.source.split()[1:])

    def words(self) -> tuple[str, ...]:
        return tuple(self.source.split())

    @property
    def blocks(self) -> tuple[Block, ...]:
        return ()

    @property
    def tokens(self) -> tuple[Token, ...]:
        line, start = self._line, self._line_start
        return tuple(Token("word", m.group(), start + m.start(), start + m.end(), line,
                           m.start() + 1, line, k == 0)
                     for k, m in enumerate(_BARE_WORD.finditer(self.source)))

    @property
    def start(self) -> int:
        return self._line_start + len(self.source) - len(self.source.lstrip())

    @property
    def line(self) -> int:
        return self._line

    @property
    def column(self) -> int:
        return self.start - self._line_start + 1

    @property
    def first_on_line(self) -> bool:
        return True  # the line holds nothing else


class _BareRun:
    """Consecutive bare-word lines (blank lines between them dropped)."""

    __slots__ = ("lines", "text")

    def __init__(self, lines: list[_BareLine], text: str):
        self.lines = lines
        self.text = text  # the text they came from, for quick "is this word in it" checks

    @property
    def first_on_line(self) -> bool:
        return True


_Item = Token | _BareRun


@dataclass(frozen=True, slots=True)
class ServerBlock:
    keys: tuple[str, ...]
    addresses: tuple[Address, ...]
    header: tuple[Token, ...]
    body: Block | None  # None: a brace-less server block running to the end of the file
    directives: tuple[Directive, ...]

    @property
    def line(self) -> int:
        return self.header[0].line

    @property
    def column(self) -> int:
        return self.header[0].column

    def is_root(self, dns_port: int = DEFAULT_DNS_PORT) -> bool:
        return any(a.is_root(dns_port) for a in self.addresses)

    def inner(self, text_length: int) -> tuple[int, int]:
        """The offsets of the block's contents (between the braces)."""
        if self.body is not None:
            return self.body.inner
        return self.header[-1].end, text_length


@dataclass(frozen=True, slots=True)
class Snippet:
    name: str
    body: Block


@dataclass(frozen=True, slots=True)
class Import:
    """A top-level ``import`` line (it splices in whole server blocks)."""

    pattern: str
    tokens: tuple[Token, ...]


@dataclass(frozen=True)
class Corefile:
    text: str
    items: tuple[_Item, ...] = field(repr=False)  # tokens, with bare-word lines kept whole
    comments: tuple[Comment, ...]
    server_blocks: tuple[ServerBlock, ...]
    snippets: tuple[Snippet, ...]
    imports: tuple[Import, ...]

    @cached_property
    def tokens(self) -> tuple[Token, ...]:
        """Every token, in order (built on first use: the edits need only a few of them)."""
        return tuple(_flatten(self.items))

    def root_blocks(self, dns_port: int = DEFAULT_DNS_PORT) -> tuple[ServerBlock, ...]:
        """The server blocks that answer for the root zone on ``dns_port``."""
        return tuple(b for b in self.server_blocks if b.is_root(dns_port))

    def snippet(self, name: str) -> Snippet | None:
        for s in self.snippets:
            if s.name == name:
                return s
        return None


def parse_address(key: str) -> Address:
    """Read a server block key the way CoreDNS does (transport, zone, optional port)."""
    transport, sep, rest = key.partition("://")
    if not sep:
        transport, rest = "dns", key
    transport = transport.lower()
    host, port = rest, None
    colon = rest.rfind(":")
    if colon >= 0 and re.fullmatch(r"[+-]?[0-9]+", rest[colon + 1:]):
        host, port = rest[:colon], int(rest[colon + 1:])
    zone = host.lower()
    if zone and not zone.endswith("."):
        zone += "."
    return Address(key, transport, zone, port)


def parse(text: str) -> Corefile:
    """Parse a Corefile, or raise CorefileError naming the line and column of the problem."""
    items, comments = _scan(text)
    return _Parser(text, items, comments).parse()


_IMPORT_ARGS = "import takes exactly one argument (a file, glob or snippet name)"


def _err(reason: str, token: Token) -> CorefileError:
    return CorefileError(reason, line=token.line, column=token.column)


class _Parser:
    def __init__(self, text: str, items: list[_Item], comments: list[Comment]):
        self.text = text
        self.items = items
        self.comments = comments
        self.i = 0

    def peek(self) -> _Item | None:
        return self.items[self.i] if self.i < len(self.items) else None

    def token(self) -> Token | None:
        """The next item as a token: a bare-word line read as something other than a
        directive (a server address, a top-level import) is split into its tokens here."""
        item = self.peek()
        if isinstance(item, _BareRun):
            tokens = item.lines[0].tokens
            rest = [_BareRun(item.lines[1:], item.text)] if len(item.lines) > 1 else []
            self.items[self.i:self.i + 1] = [*tokens, *rest]
            return tokens[0]
        return item

    def parse(self) -> Corefile:
        blocks: list[ServerBlock] = []
        snippets: list[Snippet] = []
        imports: list[Import] = []
        while (tok := self.token()) is not None:
            if tok.is_word("import") and tok.first_on_line:
                imports.append(Import(*self._import_line()))
                continue
            header = self._header()
            keys = tuple(t.text.removesuffix(",") for t in header)
            keys = tuple(k for k in keys if k)
            if not keys:
                raise _err("empty server address", header[0])
            nxt = self.peek()
            if isinstance(nxt, Token) and nxt.kind == "open":
                body = self._block(top=True)
                if len(keys) == 1 and keys[0].startswith("(") and keys[0].endswith(")"):
                    name = keys[0][1:-1]
                    if any(s.name == name for s in snippets):
                        raise _err(f"snippet {name!r} is declared twice", header[0])
                    snippets.append(Snippet(name, body))
                    continue
                blocks.append(ServerBlock(keys, tuple(map(parse_address, keys)), header, body,
                                          body.directives))
                continue
            if keys[0].startswith("("):
                raise _err(f"snippet {keys[0]} needs a block in braces", header[0])
            # Caddy lets a lone server block go without braces; it then runs to the end.
            directives = self._directives(top=True)
            blocks.append(ServerBlock(keys, tuple(map(parse_address, keys)), header, None,
                                      directives))
        return Corefile(self.text, tuple(self.items), tuple(self.comments), tuple(blocks),
                        tuple(snippets), tuple(imports))

    def _import_line(self) -> tuple[str, tuple[Token, ...]]:
        first = self.token()
        assert first is not None
        line_tokens = [first]
        self.i += 1
        while (tok := self.token()) is not None and not tok.first_on_line:
            line_tokens.append(tok)
            self.i += 1
        if len(line_tokens) != 2 or line_tokens[1].kind not in ("word", "quoted"):
            raise _err(_IMPORT_ARGS, first)
        return line_tokens[1].text, tuple(line_tokens)

    def _header(self) -> tuple[Token, ...]:
        header: list[Token] = []
        expecting = False  # a key ending in "," continues the list, maybe on the next line
        while (tok := self.token()) is not None:
            if tok.kind == "open":
                if not header:
                    raise _err("'{' without a server address before it", tok)
                if expecting:
                    raise _err("expected another address after ','", tok)
                return tuple(header)
            if tok.kind == "close":
                raise _err("unexpected '}' (no block is open here)", tok)
            if header and tok.first_on_line and not expecting:
                return tuple(header)
            header.append(tok)
            expecting = tok.text.endswith(",")
            self.i += 1
        if expecting:
            raise _err("expected another address after ',' at the end of the file", header[-1])
        return tuple(header)

    def _block(self, *, top: bool) -> Block:
        open_tok = self.items[self.i]
        assert isinstance(open_tok, Token)
        self.i += 1
        directives = self._directives(top=top)
        close = self.peek()
        if not isinstance(close, Token) or close.kind != "close":
            raise _err("'{' is never closed (unbalanced braces)", open_tok)
        self.i += 1
        return Block(open_tok, close, directives)

    def _directives(self, *, top: bool) -> tuple[Directive, ...]:
        """Directives up to the closing brace of the enclosing block (not consumed) or EOF."""
        out: list[Directive] = []
        while (tok := self.peek()) is not None:
            if isinstance(tok, _BareRun):
                self.i += 1
                out.extend(tok.lines)
                # "import" absent from the run's text is cheap to rule out; splitting is not.
                if "import" in tok.text:
                    for bare in tok.lines:
                        if bare.name == "import" and len(bare.args) != 1:
                            raise _err(_IMPORT_ARGS, bare.tokens[0])
                continue
            if tok.kind == "close":
                return tuple(out)
            if tok.kind == "open":
                raise _err("'{' without a directive before it", tok)
            out.append(self._directive(top=top))
        return tuple(out)

    def _directive(self, *, top: bool) -> Directive:
        first = self.items[self.i]
        assert isinstance(first, Token)
        self.i += 1
        toks = [first]
        args: list[str] = []
        blocks: list[Block] = []
        # A bare-word line always starts a line, so it ends the directive.
        while isinstance(tok := self.peek(), Token) and not tok.first_on_line:
            if tok.kind == "open":
                at = self.i
                blocks.append(self._block(top=False))
                toks.extend(_flatten(self.items[at:self.i]))
                continue
            if tok.kind == "close":
                if top:
                    # CoreDNS wants a server block's "}" to start its own line.
                    raise _err("unexpected '}' after a directive on the same line", tok)
                break
            toks.append(tok)
            args.append(tok.text)
            self.i += 1
        if first.is_word("import") and (len(args) != 1 or blocks):
            raise _err(_IMPORT_ARGS, first)
        return Directive(first.text, tuple(args), tuple(blocks), tuple(toks))


# --- host names and rules --------------------------------------------------------------------


def _check_name(value: str, what: str) -> None:
    if not isinstance(value, str) or not value:
        raise CorefileError(f"{what} must be a non-empty string, got {value!r}")
    bad = _FORBIDDEN_IN_NAME.search(value)
    if bad:
        raise CorefileError(f"{what} {value!r} contains {bad.group()!r}, which a Corefile "
                            "rewrite rule cannot carry")


def _check_host(host: str) -> None:
    _check_name(host, "host")
    labels = host.split(".")
    if any(label == "" for label in labels):
        raise CorefileError(f"host {host!r} has an empty label (leading, trailing or double dot)")
    if any("*" in label for label in labels[1:]) or (labels[0] != "*" and "*" in labels[0]):
        raise CorefileError(f"host {host!r}: '*' may only be the whole first label")
    if labels[0] == "*" and len(labels) < 2:
        raise CorefileError(f"host {host!r}: a wildcard needs a domain after '*.'")


def _hosts(hosts: Iterable[str]) -> list[str]:
    if isinstance(hosts, str):
        raise TypeError("hosts must be an iterable of host names, not a single string")
    # Callers mostly pass sorted, distinct hosts: sorting a sorted list is one pass.
    unique = sorted(hosts)
    if len(set(unique)) != len(unique):
        unique = sorted(set(unique))
    try:
        joined = "\n".join(unique)
    except TypeError:
        joined = ""
    if not _all_valid(joined, len(unique)):
        for host in unique:
            _check_host(host)
    return unique


# The ASCII characters a host may hold.
_HOST_ASCII = bytes(c for c in range(128) if not _FORBIDDEN_IN_NAME.match(chr(c)))


def _all_valid(joined: str, count: int) -> bool:
    """Whether the ``count`` hosts joined by "\n" all pass _check_host, in a few passes of C
    string code (a regex walks 10,000 hosts ten times slower)."""
    if not joined:
        return False
    if joined.isascii():
        # Deleting the allowed characters leaves only the joining "\n"s if all is well.
        if joined.encode("ascii").translate(None, _HOST_ASCII) != b"\n" * (count - 1):
            return False
    elif not _VALID_HOSTS.fullmatch(joined):
        return False
    return (joined.count("\n") == count - 1
            and not joined.startswith((".", "\n")) and not joined.endswith((".", "\n"))
            and ".." not in joined and "\n." not in joined and ".\n" not in joined
            and "\n\n" not in joined
            # A "*" only as the whole first label: each one opens a line and a dot follows.
            and joined.count("*") == joined.count("\n*.") + joined.startswith("*."))


# Escape ASCII punctuation only: RE2 (CoreDNS) rejects a backslash before anything else.
_REGEX_ESCAPES = {c: "\\" + chr(c) for c in range(128)
                  if not chr(c).isalnum() and chr(c) not in "-_"}


def _regex_escape(s: str) -> str:
    return s.translate(_REGEX_ESCAPES)


def wildcard_regex(host: str) -> str:
    """``*.example.com`` → a regex matching exactly one label in front of ``example.com``."""
    return r"^[^.]+\." + _regex_escape(host[2:]) + r"\.?$"


_WILDCARD_RULE = re.compile(r"\^\[\^\.\]\+\\\.(?P<suffix>.+)\\\.\?\$")


def rewrite_rules(hosts: Iterable[str], *, target: str) -> list[str]:
    """The rule lines (no indentation), sorted by host, one per distinct host."""
    return _Rules(_hosts(hosts), target).body("", "\n").split("\n")[:-1]


class _Rules:
    """The rule lines for sorted, checked hosts, rendered once per indentation and ending."""

    def __init__(self, hosts: Sequence[str], target: str):
        _check_name(target, "target")
        if "*" in target:
            raise CorefileError(f"target {target!r} must not contain '*'")
        self.hosts = hosts
        self.target = target
        self._bodies: dict[tuple[str, str], str] = {}

    def __bool__(self) -> bool:
        return bool(self.hosts)

    def body(self, indent: str, nl: str) -> str:
        """The rule lines, each indented and ended."""
        key = (indent, nl)
        if key not in self._bodies:
            self._bodies[key] = self._render(indent, nl)
        return self._bodies[key]

    def _render(self, indent: str, nl: str) -> str:
        hosts, target = self.hosts, self.target
        # Sorted, the wildcards ("*." and a domain) sit together: each side of them is a run
        # of plain hosts, rendered by one join instead of a Python step per host.
        lo, hi = bisect_left(hosts, "*."), bisect_left(hosts, "*/")
        exact = f"{indent}rewrite name exact "
        end = f" {target}{nl}"

        def plain(run: Sequence[str]) -> str:
            return exact + (end + exact).join(run) + end if run else ""

        wild = "".join(f"{indent}rewrite name regex {wildcard_regex(h)} {target} answer auto{nl}"
                       for h in hosts[lo:hi])
        return plain(hosts[:lo]) + wild + plain(hosts[hi:])


def _render(rules: _Rules, indent: str, nl: str) -> str:
    return f"{indent}{BEGIN_MARKER}{nl}{rules.body(indent, nl)}{indent}{END_MARKER}{nl}"


def import_snippet(hosts: Iterable[str], *, target: str) -> str:
    """The content of a ``coredns-custom``-style key: the managed block, unindented."""
    out = _render(_Rules(_hosts(hosts), target), "", "\n")
    _check_size(out)
    # The snippet is spliced into the root server block; it must read as directives there.
    _managed_in(parse(".:53 {\n" + out + "}\n"), DEFAULT_DNS_PORT)
    return out


# --- locating markers and legacy lines -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Managed:
    block: ServerBlock
    begin: Comment
    end: Comment
    span: tuple[int, int]  # from the start of the BEGIN line to after the END line's ending
    directives: tuple[Directive, ...]


def _line_start(text: str, offset: int) -> int:
    return text.rfind("\n", 0, offset) + 1


def _line_end(text: str, offset: int) -> int:
    """The offset just after the line ending of the line holding ``offset`` (or EOF)."""
    nl = text.find("\n", offset)
    return len(text) if nl < 0 else nl + 1


def _line_ending(text: str, offset: int) -> str:
    nl = text.find("\n", offset)
    if nl < 0:
        return ""
    return "\r\n" if nl > 0 and text[nl - 1] == "\r" else "\n"


def _container(cf: Corefile, offset: int) -> ServerBlock | None:
    """The server block whose body holds ``offset`` directly (not in a nested block)."""
    for block in cf.server_blocks:
        lo, hi = block.inner(len(cf.text))
        if not lo <= offset < hi:
            continue
        # Only the last directive starting before offset can hold it in a nested block.
        k = bisect_right(block.directives, offset, key=_start) - 1
        for nested in block.directives[k].blocks if k >= 0 else ():
            if nested.open.start <= offset < nested.close.end:
                return None
        return block
    return None


def _start(d: Directive) -> int:
    return d.start


def _is_marker(comment: Comment, marker: str) -> bool:
    return comment.text.rstrip() == marker


def _managed_blocks(cf: Corefile) -> list[_Managed]:
    text = cf.text
    found: list[_Managed] = []
    begin: Comment | None = None
    for c in cf.comments:
        is_begin, is_end = _is_marker(c, BEGIN_MARKER), _is_marker(c, END_MARKER)
        if not (is_begin or is_end):
            if "BEGIN hairpin-proxy" in c.text or "END hairpin-proxy" in c.text:
                raise CorefileError("damaged hairpin-proxy marker; expected exactly "
                                    f"{BEGIN_MARKER!r} or {END_MARKER!r}",
                                    line=c.line, column=c.column)
            continue
        if not c.alone:
            raise CorefileError("a hairpin-proxy marker must be on a line of its own",
                                line=c.line, column=c.column)
        if is_begin:
            if begin is not None:
                raise CorefileError(f"second BEGIN marker before the END of the one at line "
                                    f"{begin.line}", line=c.line, column=c.column)
            begin = c
            continue
        if begin is None:
            raise CorefileError("END marker without a BEGIN marker before it",
                                line=c.line, column=c.column)
        block = _container(cf, begin.start)
        if block is None or _container(cf, c.start) is not block:
            raise CorefileError("the managed block must sit directly inside one server block",
                                line=begin.line, column=begin.column)
        if any(m.block is block for m in found):
            raise CorefileError(f"second managed block in the server block at line {block.line}",
                                line=begin.line, column=begin.column)
        # Directives are in text order: bisect instead of asking each of thousands its start.
        dirs = block.directives
        inside = dirs[bisect_right(dirs, begin.start, key=_start):
                      bisect_left(dirs, c.start, key=_start)]
        found.append(_Managed(block, begin, c, (_line_start(text, begin.start),
                                                _line_end(text, c.start)), inside))
        begin = None
    if begin is not None:
        raise CorefileError("BEGIN marker without an END marker", line=begin.line,
                            column=begin.column)
    return found


def _legacy_lines(cf: Corefile, managed: Sequence[_Managed]) -> list[tuple[int, int]]:
    """Spans of the whole lines the original hairpin-proxy added, outside our own blocks."""
    text = cf.text
    spans: list[tuple[int, int]] = []
    for c in cf.comments:
        # The original tool dropped every line that, stripped, ended with its marker.
        if not c.text.rstrip().endswith(LEGACY_MARKER):
            continue
        if any(m.span[0] <= c.start < m.span[1] for m in managed):
            continue
        start, end = _line_start(text, c.start), _line_end(text, c.start)
        # The line holds a comment, so none of its tokens is in a bare-word line.
        on_line = [t for t in cf.items
                   if isinstance(t, Token) and t.end > start and t.start < end]
        if (any(t.kind in ("open", "close") for t in on_line)
                or any(t.start < start or t.end > end for t in on_line)
                or _container(cf, c.start) is None):
            raise CorefileError("cannot remove this line marked 'Added by hairpin-proxy': it is "
                                "not a plain directive line inside a server block",
                                line=c.line, column=c.column)
        spans.append((start, end))
    return spans


# --- the editor ------------------------------------------------------------------------------


def _check_size(text: str) -> None:
    size = len(text.encode("utf-8"))
    if size > MAX_CONFIGMAP_BYTES:
        raise CorefileError(f"the result would be {size} bytes, over the ConfigMap limit of "
                            f"{MAX_CONFIGMAP_BYTES} bytes")


def _roots(cf: Corefile, dns_port: int) -> tuple[ServerBlock, ...]:
    if not 0 < dns_port < 65536:
        raise CorefileError(f"DNS port {dns_port} is not a TCP/UDP port")
    roots = cf.root_blocks(dns_port)
    if not roots:
        seen = ", ".join(" ".join(b.keys) for b in cf.server_blocks) or "none"
        raise CorefileError(f"no server block for the root zone '.' on port {dns_port} "
                            f"(server blocks found: {seen})")
    return roots


def _indent_unit(text: str) -> str:
    tabs = len(re.findall(r"(?m)^\t+\S", text))
    spaces = len(re.findall(r"(?m)^ +\S", text))
    return "\t" if tabs > spaces else "    "


def _insertion(cf: Corefile, block: ServerBlock, skip: Sequence[tuple[int, int]], whole: str
               ) -> tuple[int, str, str]:
    """Where a new managed block goes in ``block``: (offset, indentation, line ending)."""
    text = cf.text
    opener = block.body.open if block.body is not None else block.header[-1]
    at = cf.items.index(opener) + 1
    following = cf.items[at] if at < len(cf.items) else None
    if block.body is not None and following is not None and not following.first_on_line:
        # Something shares the opening line; go in front of the closing brace instead.
        close = block.body.close
        if not close.first_on_line:
            raise CorefileError("cannot place the managed block: this root server block opens "
                                "and closes on one line", line=block.line, column=block.column)
        offset = _line_start(text, close.start)
        nl = _line_ending(text, close.start) or _line_ending(text, opener.start)
    else:
        nl = _line_ending(text, opener.end)
        if not nl:
            raise CorefileError("cannot place the managed block: the server block's opening "
                                "line is the last line and has no line ending",
                                line=block.line, column=block.column)
        offset = _line_end(text, opener.end)
    indent = None
    for d in block.directives:
        if d.first_on_line and not any(lo <= d.start < hi for lo, hi in skip):
            indent = text[_line_start(text, d.start):d.start]
            break
    if indent is None:
        header_start = _line_start(text, block.header[0].start)
        # A byte-order mark in front of the first header is not indentation.
        header_indent = text[header_start:block.header[0].start].lstrip("\ufeff")
        indent = header_indent + _indent_unit(whole)
    return offset, indent, nl


def _set_aside(text: str) -> tuple[str, dict[int, str]]:
    """``text`` without the lines inside each managed block, and those lines by the offset
    (in the shorter text) they were taken from.

    Only candidates: a cut counts once the shorter text parses with a managed block exactly
    around it (see _read). The lines cut hold no quote, "#", brace or U+001C..U+001F, so each
    is a directive of bare words and taking them out changes nothing else in the parse; lines
    starting with ``import`` (whose arguments the parser checks) are never cut.
    """
    cuts: dict[int, str] = {}
    pieces: list[str] = []
    done = removed = 0
    # One scan of the text in all, however many markers it holds.
    specials = _Specials(text)
    at = text.find(BEGIN_MARKER)
    while at >= 0:
        lo = text.find("\n", at) + 1
        if lo == 0:
            break
        nxt = specials.next(lo)
        if nxt < 0:
            break
        hi = _line_start(text, nxt)
        if hi > lo and text.startswith(END_MARKER, nxt) and not _has_import(text[lo:hi]):
            pieces.append(text[done:lo])
            cuts[lo - removed] = text[lo:hi]
            removed += hi - lo
            done = hi
        at = text.find(BEGIN_MARKER, nxt)
    if not cuts:
        return text, cuts
    pieces.append(text[done:])
    return "".join(pieces), cuts


def _has_import(lines: str) -> bool:
    return "import" in lines and any(line.split(None, 1)[:1] == ["import"]
                                     for line in lines.split("\n"))


def _read(text: str) -> tuple[Corefile, list[_Managed], dict[int, str]]:
    """Parse ``text`` for editing, with the managed blocks' rule lines set aside when possible.

    The rule lines are nearly all of a large Corefile and are replaced wholesale by any edit,
    so they need not be parsed: the rest parses in microseconds. Returns the parse, its
    managed blocks and the lines set aside (by offset in the parsed text, the start of each
    block's END line); falls back to the whole text (no lines set aside) when the shorter text
    does not parse with a managed block exactly around each cut.
    """
    lean, cuts = _set_aside(text)
    if cuts:
        try:
            cf = parse(lean)
            managed = _managed_blocks(cf)
        except CorefileError:
            pass
        else:
            fits = {p for m in managed
                    if (p := _line_end(lean, m.begin.start)) == _line_start(lean, m.end.start)}
            if fits.issuperset(cuts):
                return cf, managed, cuts
    cf = parse(text)
    return cf, _managed_blocks(cf), {}


def _edit(cf: Corefile, managed: Sequence[_Managed], rules: _Rules, dns_port: int,
          whole: str) -> str:
    """The edited text of ``cf`` (``whole``: the full text, when cf has lines set aside)."""
    text = cf.text
    legacy = _legacy_lines(cf, managed)
    roots = _roots(cf, dns_port)
    edits: list[tuple[int, int, str]] = [(lo, hi, "") for lo, hi in legacy]
    for m in managed:
        if rules and any(m.block is r for r in roots):
            indent = text[m.span[0]:m.begin.start]
            nl = _line_ending(text, m.end.start) or _line_ending(text, m.begin.start) or "\n"
            edits.append((m.span[0], m.span[1], _render(rules, indent, nl)))
        else:
            edits.append((m.span[0], m.span[1], ""))
    if rules:
        have = {id(m.block) for m in managed}
        for block in roots:
            if id(block) not in have:
                offset, indent, nl = _insertion(cf, block, legacy, whole)
                edits.append((offset, offset, _render(rules, indent, nl)))

    # The edits never overlap, so the result is built front to back in one join (not one
    # copy of the whole text per edit). An insertion sorts before a deletion starting at the
    # same offset, so the inserted block lands in front of what follows. Lines set aside lie
    # inside managed blocks, which are all replaced: the result is the same as from the whole.
    pieces: list[str] = []
    done = 0
    for lo, hi, new in sorted(edits, key=lambda e: (e[0], e[1])):
        if lo < done:
            raise CorefileError("internal check failed: overlapping edits")
        pieces += (text[done:lo], new)
        done = hi
    pieces.append(text[done:])
    return "".join(pieces)


def _holds(cf: Corefile, mine: Sequence[_Managed], cuts: dict[int, str],
           rules: _Rules) -> bool:
    """Whether the managed blocks of one root server block hold exactly the rules."""
    if not rules:
        return not mine
    if len(mine) != 1:
        return False
    m = mine[0]
    text = cf.text
    body = cuts.get(_line_end(text, m.begin.start))
    if body is None:
        try:
            return _hosts_in(mine) == set(rules.hosts)
        except CorefileError:  # a line we did not write
            return False
    # Set-aside lines are compared with the rendering of the rules, whose reading back into
    # hosts (_host_of) is tested on its own: one string comparison instead of a parse.
    indent = text[_line_start(text, m.begin.start):m.begin.start]
    nl = _line_ending(text, m.begin.start)
    return body == rules.body(indent, nl)


def apply(text: str, hosts: Iterable[str], *, target: str, dns_port: int = DEFAULT_DNS_PORT
          ) -> str:
    """Return ``text`` with exactly one managed block holding ``hosts`` in each root block.

    An empty host set removes the block. Lines left by the original hairpin-proxy are dropped.
    Managed blocks in server blocks that are not for the root zone on ``dns_port`` (left behind
    by a change of port) are removed. Raises CorefileError, and changes nothing, when the text
    cannot be parsed or edited safely.
    """
    rules = _Rules(_hosts(hosts), target)
    cf, managed, cuts = _read(text)
    try:
        out = _edit(cf, managed, rules, dns_port, text)
    except CorefileError:
        if not cuts:
            raise
        # Reported from the whole text, so that line numbers are right.
        cf = parse(text)
        out = _edit(cf, _managed_blocks(cf), rules, dns_port, text)

    _check_size(out)
    result, managed, cuts = _read(out)
    for block in _roots(result, dns_port):
        if not _holds(result, [m for m in managed if m.block is block], cuts, rules):
            raise CorefileError("internal check failed: the edited Corefile does not hold "
                                "the requested hosts")
    return out


def remove(text: str, *, dns_port: int = DEFAULT_DNS_PORT) -> str:
    """Return ``text`` without any managed block (or original hairpin-proxy line)."""
    return apply(text, [], target="unused.invalid.", dns_port=dns_port)


def _host_of(d: Directive) -> str | None:
    """The host of a rule line as hairpin-proxy writes it; None for any other line."""
    if d.blocks:
        return None
    words = d.words()  # one split of a bare line, not one per attribute
    if len(words) == 5 and words[:3] == ("rewrite", "name", "exact"):
        return words[3]
    if len(words) == 7 and words[:3] == ("rewrite", "name", "regex") \
            and words[5:] == ("answer", "auto"):
        m = _WILDCARD_RULE.fullmatch(words[3])
        if m:
            host = "*." + re.sub(r"\\(.)", r"\1", m["suffix"])
            if wildcard_regex(host) == words[3]:
                return host
    return None


def _hosts_in(managed: Iterable[_Managed], *, strict: bool = True) -> set[str]:
    hosts: set[str] = set()
    for m in managed:
        for d in m.directives:
            host = _host_of(d)
            if host is not None:
                hosts.add(host)
            elif strict:
                raise CorefileError("the managed block holds a line hairpin-proxy did not "
                                    "write", line=d.line, column=d.column)
    return hosts


def _managed_in(cf: Corefile, dns_port: int, *, strict: bool = True) -> tuple[str, ...]:
    managed = (m for m in _managed_blocks(cf) if m.block.is_root(dns_port))
    return tuple(sorted(_hosts_in(managed, strict=strict)))


def managed_hosts(text: str, *, dns_port: int = DEFAULT_DNS_PORT, strict: bool = False
                  ) -> tuple[str, ...]:
    """The hosts in the managed block(s) of the root server block(s), sorted.

    Lines in the block that hairpin-proxy did not write are skipped (the next apply replaces
    them), or raise CorefileError with ``strict``. Raises CorefileError when the text cannot
    be parsed, its markers are broken, or there is no root server block.
    """
    cf = parse(text)
    _roots(cf, dns_port)
    return _managed_in(cf, dns_port, strict=strict)


# --- questions about a Corefile --------------------------------------------------------------


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
