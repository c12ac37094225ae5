"""The Corefile parser: server blocks, snippets, top-level imports and their directives."""

from __future__ import annotations

import re

from hairpin_proxy.corefile.lexer import scan
from hairpin_proxy.corefile.syntax import (
    Address,
    BareRun,
    Block,
    Comment,
    Corefile,
    CorefileError,
    Directive,
    Import,
    Item,
    ServerBlock,
    Snippet,
    Token,
)


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
    items, comments = scan(text)
    return _Parser(text, items, comments).parse()


_IMPORT_ARGS = "import takes exactly one argument (a file, glob or snippet name)"


def _err(reason: str, token: Token) -> CorefileError:
    return CorefileError(reason, line=token.line, column=token.column)


class _Parser:
    def __init__(self, text: str, items: list[Item], comments: list[Comment]):
        self.text = text
        self.items = items
        self.comments = comments
        self.i = 0

    def peek(self) -> Item | None:
        return self.items[self.i] if self.i < len(self.items) else None

    def token(self) -> Token | None:
        """The next item as a token: a bare-word line read as something other than a
        directive (a server address, a top-level import) is split into its tokens here."""
        item = self.peek()
        if isinstance(item, BareRun):
            tokens = item.lines[0].tokens
            rest = [BareRun(item.lines[1:], item.text)] if len(item.lines) > 1 else []
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
            if isinstance(tok, BareRun):
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
        toks: list[Item] = [first]
        args: list[str] = []
        blocks: list[Block] = []
        # A bare-word line always starts a line, so it ends the directive.
        while isinstance(tok := self.peek(), Token) and not tok.first_on_line:
            if tok.kind == "open":
                at = self.i
                blocks.append(self._block(top=False))
                # Bare-word lines stay whole: the directive splits them if asked.
                toks.extend(self.items[at:self.i])
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

