"""The Corefile's syntax tree: tokens, comments, directives, blocks and server blocks.

Pure values, with the offsets into the source text that the editor splices at.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

DEFAULT_DNS_PORT = 53
_DEFAULT_PORTS = {"dns": 53, "tls": 853, "quic": 853, "grpc": 443, "https": 443, "https3": 443}


# Go's unicode.IsSpace, which the Caddyfile lexer uses to split tokens (Python's str.isspace
# also counts U+001C..U+001F, which Go does not).
SPACE_CHARS = "\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
BARE_WORD = re.compile(f"[^{SPACE_CHARS}]+")


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


def flatten(items: Iterable[Item]) -> Iterator[Token]:
    for item in items:
        if isinstance(item, BareRun):
            for bare in item.lines:
                yield from bare.tokens
        else:
            yield item


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
    __slots__ = ("_args", "_blocks", "_items", "_name", "_tokens")

    def __init__(self, name: str, args: tuple[str, ...], blocks: tuple[Block, ...],
                 tokens: tuple[Item, ...]):
        """``tokens`` may keep bare-word lines whole (``BareRun``): they are split into
        tokens only when ``tokens`` is asked for. Our template stanzas hold a few very long
        ``match`` lines, and splitting them costs most of a large Corefile's parse, while
        reading the directives needs only the first and last token."""
        self._name = name
        self._args = args
        self._blocks = blocks
        self._items = tokens
        self._tokens: tuple[Token, ...] | None = None

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
        if self._tokens is None:
            self._tokens = tuple(flatten(self._items))
        return self._tokens

    def _first(self) -> Token:
        first = self._items[0]
        return first if isinstance(first, Token) else self.tokens[0]

    @property
    def start(self) -> int:
        return self._first().start

    @property
    def end(self) -> int:
        last = self._items[-1]
        return last.end if isinstance(last, Token) else self.tokens[-1].end

    @property
    def line(self) -> int:
        return self._first().line

    @property
    def column(self) -> int:
        return self._first().column

    @property
    def first_on_line(self) -> bool:
        return self._first().first_on_line

    def words(self) -> tuple[str, ...]:
        """The name and the arguments outside nested blocks, in one tuple."""
        return (self._name, *self._args)


class BareLine(Directive):
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
                     for k, m in enumerate(BARE_WORD.finditer(self.source)))

    @property
    def start(self) -> int:
        return self._line_start + len(self.source) - len(self.source.lstrip())

    @property
    def end(self) -> int:
        return self._line_start + len(self.source.rstrip())

    @property
    def line(self) -> int:
        return self._line

    @property
    def column(self) -> int:
        return self.start - self._line_start + 1

    @property
    def first_on_line(self) -> bool:
        return True  # the line holds nothing else


class BareRun:
    """Consecutive bare-word lines (blank lines between them dropped)."""

    __slots__ = ("lines", "text")

    def __init__(self, lines: list[BareLine], text: str):
        self.lines = lines
        self.text = text  # the text they came from, for quick "is this word in it" checks

    @property
    def first_on_line(self) -> bool:
        return True


Item = Token | BareRun


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
    items: tuple[Item, ...] = field(repr=False)  # tokens, with bare-word lines kept whole
    comments: tuple[Comment, ...]
    server_blocks: tuple[ServerBlock, ...]
    snippets: tuple[Snippet, ...]
    imports: tuple[Import, ...]

    @cached_property
    def tokens(self) -> tuple[Token, ...]:
        """Every token, in order (built on first use: the edits need only a few of them)."""
        return tuple(flatten(self.items))

    def root_blocks(self, dns_port: int = DEFAULT_DNS_PORT) -> tuple[ServerBlock, ...]:
        """The server blocks that answer for the root zone on ``dns_port``."""
        return tuple(b for b in self.server_blocks if b.is_root(dns_port))

    def snippet(self, name: str) -> Snippet | None:
        for s in self.snippets:
            if s.name == name:
                return s
        return None

