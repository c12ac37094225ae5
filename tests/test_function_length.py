"""Functions stay short where decisions and wiring live: the controller, doctor, plan and edits.

A function's size is its logical lines: the lines of its body that hold code, leaving out its
docstring, comment lines and blank lines (a nested function's lines count in the function that
holds it). ``Controller.__init__`` is the controller's wiring and must read like a table.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "hairpin_proxy"
PACKAGES = ("controller", "doctor", "plan", "edits")
MAX_LINES = 60
MAX_WIRING = 40

Function = ast.FunctionDef | ast.AsyncFunctionDef


def logical_lines(source: str, node: Function) -> int:
    """Lines of ``node``'s body with code on them (not its docstring, comments or blanks)."""
    lines = source.splitlines()
    body = node.body
    first = body[0]
    skip: set[int] = set()
    if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        skip = set(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    end = node.end_lineno or node.lineno
    return sum(1 for n in range(first.lineno, end + 1)
               if n not in skip and lines[n - 1].strip()
               and not lines[n - 1].strip().startswith("#"))


def functions(path: Path) -> list[tuple[str, int]]:
    """Every function of ``path`` as (qualified name, logical lines)."""
    source = path.read_text(encoding="utf-8")
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                found.append((name, logical_lines(source, child)))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (SRC / pkg).rglob("*.py"))


def test_the_packages_are_there() -> None:
    # An empty scan would pass every length check below.
    for pkg in PACKAGES:
        assert list((SRC / pkg).glob("*.py")), pkg
    assert len(sources()) > 20


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(SRC)))
def test_no_function_over_the_limit(path: Path) -> None:
    long = [(name, n) for name, n in functions(path) if n > MAX_LINES]
    assert not long, (f"{path.relative_to(SRC)}: over {MAX_LINES} logical lines (split into "
                      f"named steps): {long}")


def test_controller_wiring_reads_like_a_table() -> None:
    sizes = dict(functions(SRC / "controller" / "reconciler.py"))
    assert "Controller.__init__" in sizes
    assert sizes["Controller.__init__"] <= MAX_WIRING, sizes["Controller.__init__"]


def test_the_measure_leaves_out_docstrings_comments_and_blanks(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n    # why\n\n" for i in range(MAX_LINES + 1))
    doc = '    """Doc.\n\n    More doc.\n    """\n'
    code = f"def long():\n{doc}{body}\n\ndef short():\n    return 1\n"
    path = tmp_path / "m.py"
    path.write_text(code, encoding="utf-8")
    assert dict(functions(path)) == {"long": MAX_LINES + 1, "short": 1}


def test_the_measure_counts_nested_functions_and_methods(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("class A:\n    async def f(self):\n        def g():\n            return 1\n"
                    "        return g()\n", encoding="utf-8")
    assert dict(functions(path)) == {"A.f": 3, "A.f.g": 1}
