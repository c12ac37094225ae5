"""The commands the docs tell an operator to run, parsed out of their shell blocks and inline code.

A command is found in a fenced block marked ``sh``, ``shell``, ``bash`` or ``console``, or in an
inline code span that starts with ``kubectl`` or ``hairpin-proxy``; prose is never parsed. Each
command keeps the file and line it came from, so that a failing check names the line to fix.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SHELL_FENCES = {"sh", "shell", "bash", "console"}
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
# An inline span: not part of a fence, so it never starts at a line's first three backticks.
INLINE = re.compile(r"(?<!`)`((?:kubectl|hairpin-proxy) [^`]+)`(?!`)")
# A command substitution, `x=$(kubectl ...)`, is a command of its own.
SEPARATORS = {"|", "||", "&&", ";", "&", "(", ")", "$(", "$"}


@dataclass(frozen=True)
class Command:
    """One simple command (no pipes or lists) as the shell would split it."""

    doc: Path
    line: int
    text: str
    words: tuple[str, ...]

    def where(self, root: Path) -> str:
        return f"{self.doc.relative_to(root).as_posix()}:{self.line}: {self.text}"


def _words(text: str) -> list[list[str]]:
    """``text`` split as the shell splits it into simple commands (comments dropped);
    an unbalanced quote (a placeholder such as ``<your kustomization>``) splits on spaces."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars="|&;()")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        tokens = list(lexer)
    except ValueError:
        tokens = text.split()
    out: list[list[str]] = [[]]
    for token in tokens:
        if token in SEPARATORS:
            out.append([])
        else:
            out[-1].append(token)
    return [words for words in out if words]


def _logical_lines(block: str, first: int) -> Iterator[tuple[int, str]]:
    """A fenced block's lines with backslash continuations joined, each with its line number."""
    start, pending = first, ""
    for number, line in enumerate(block.splitlines(), first):
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield start, pending + line
        pending = ""
    if pending:
        yield start, pending


def _quoted_continuation(text: str) -> bool:
    """Whether a quote opened on this line stays open (a multi-line ``sh -c '...'``)."""
    try:
        shlex.split(text, comments=True)
    except ValueError:
        return True
    return False


def _block_commands(doc: Path, block: str, first: int) -> Iterator[Command]:
    lines = list(_logical_lines(block, first))
    i = 0
    while i < len(lines):
        number, text = lines[i]
        # A quote spanning lines (a script handed to `sh -c`) is one word of one command.
        while _quoted_continuation(text) and i + 1 < len(lines):
            i += 1
            text += "\n" + lines[i][1]
        i += 1
        for words in _words(text):
            yield Command(doc, number, text.split("\n")[0].strip(), tuple(words))


def commands(doc: Path) -> Iterator[Command]:
    """Every simple command of ``doc``'s shell blocks and command-shaped inline code."""
    text = doc.read_text()
    fenced: list[tuple[int, int]] = []
    for m in FENCE.finditer(text):
        fenced.append((m.start(), m.end()))
        if m[1] in SHELL_FENCES:
            first = text.count("\n", 0, m.start(2)) + 1
            yield from _block_commands(doc, m[2], first)
    for m in INLINE.finditer(text):
        if any(a <= m.start() < b for a, b in fenced):
            continue
        span = " ".join(m[1].split())
        for words in _words(span):
            yield Command(doc, text.count("\n", 0, m.start()) + 1, span, tuple(words))


def placeholder(word: str) -> bool:
    """``<name>``, ``NS/NAME``-style or ``$VAR`` words stand for what the reader fills in
    (Kubernetes names and label values are lower case, so a capital marks one too)."""
    return any(c in word for c in "<$…") or "..." in word or any(c.isupper() for c in word)
