r"""The Corefile tokenizer.

It follows the Caddyfile v1 lexer that CoreDNS uses: a token is a run of non-space characters,
or a double-quoted string (``\"`` escapes a quote, newlines allowed) when the quote opens the
token; ``#`` outside quotes starts a comment that runs to the end of the line, even in the
middle of a word; ``{`` and ``}`` are braces only as tokens of their own. One leniency: a word
glued to a trailing ``{`` (``.{``, as the CoreDNS Helm chart renders a server without a port)
is read as the word and a brace.
"""

from __future__ import annotations

import operator
import re
from itertools import accumulate, count

from hairpin_proxy.corefile.syntax import (
    SPACE_CHARS,
    BareLine,
    BareRun,
    Comment,
    CorefileError,
    Item,
    Token,
    TokenKind,
    flatten,
)

# A line of bare words (no quote, "#", brace or U+001C..U+001F) is one directive whose words
# str.split finds, since Python's whitespace is Go's apart from U+001C..U+001F. Such lines are
# nearly all of a large Corefile (every rule in the managed block): the lines before the next
# special character are taken as one run (str.find is far faster than any regex at finding
# it), and each line becomes a BareLine that splits itself only when asked. Per-run, not
# per-token, Python work is what keeps a 10,000-rule Corefile fast.
SPECIAL = '"#{}\x1c\x1d\x1e\x1f'
_BLANK = f"[{SPACE_CHARS.replace(chr(10), '')}]"
# Everything else, one piece per match: blanks then a line ending, a comment, a quoted string
# (or its unterminated start) or a word.
_PIECE = re.compile(
    f"{_BLANK}*+"
    f'(?:(?P<nl>\n)|(?P<comment>#[^\n]*+)|"(?P<quoted>(?:[^"\\\\]|\\\\.)*+)(?P<closed>")?'
    f"|(?P<word>[^{SPACE_CHARS}#]+))?",
    re.DOTALL)


class Specials:
    """The next special character of a text at or after an offset, for a forward walk.

    Each character's next offset is searched for again only once the walk has passed it, so
    the whole walk scans the text once per character (str.find), however many steps it takes.
    """

    __slots__ = ("_at", "_text")

    def __init__(self, text: str):
        self._text = text
        self._at = [text.find(c) for c in SPECIAL]  # -1: none left

    def next(self, offset: int) -> int:
        """The offset of the first special character at or after ``offset``; -1 for none."""
        at = self._at
        for k, pos in enumerate(at):
            if 0 <= pos < offset:
                at[k] = self._text.find(SPECIAL[k], offset)
        return min((pos for pos in at if pos >= 0), default=-1)


def scan(text: str) -> tuple[list[Item], list[Comment]]:
    """Tokens (bare-word lines kept whole) and comments, in order."""
    items: list[Item] = []
    comments: list[Comment] = []
    n = len(text)
    line, line_start, last_end_line = 1, 0, 0
    i = 1 if text.startswith("\ufeff") else 0

    def token(kind: TokenKind, value: str, start: int, end: int) -> None:
        nonlocal last_end_line
        items.append(Token(kind, value, start, end, line, start - line_start + 1, line,
                           last_end_line < line))
        last_end_line = line

    specials = Specials(text)
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
                bare = list(map(BareLine, starts, count(line), sources))
                if "" in sources or any(map(str.isspace, sources)):
                    bare = [b for b in bare if b.source and not b.source.isspace()]
                if bare:
                    items.append(BareRun(bare, chunk))
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



def tokenize(text: str) -> tuple[list[Token], list[Comment]]:
    """Split a Corefile into tokens and comments, with their positions."""
    items, comments = scan(text)
    return list(flatten(items)), comments

