"""The package's layers, held: every module sits on one floor, imports only from its own floor or
the floors below it, and no chain of imports comes back to where it started.

From the top (docs/architecture.md, "Layers"):

    shells   the commands and their I/O: cli, render, doctor, controller, relay, etchosts
    plan     the one decision from a snapshot to the desired state
    sources  the source registry as data and the sources it names (sources/: ingress, gateway, ...)
    domain   pure rules of one subject each: targets, policy, corefile, ...
    cogs     what every floor may use: the API client, crash-safe files, settings, leaves

An import is read wherever it is written (a function's lazy import counts as much as one at the
top): a lazy import is still a way up or round. The tree is read as text, nothing is run.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "hairpin_proxy"

# Top-level modules and packages of each floor, from the top. "" is the package itself.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("shells", frozenset({"__main__", "cli", "render", "doctor", "controller", "relay",
                          "etchosts"})),
    ("plan", frozenset({"plan"})),
    ("sources", frozenset({"sources"})),
    ("domain", frozenset({"targets", "policy", "corefile", "edits", "verify", "claims",
                          "published", "hostsfile", "proxyproto"})),
    ("cogs", frozenset({"", "kube", "safefile", "settings", "admin", "metrics", "logs",
                        "manifests", "addresses", "ordered", "version", "wildcards",
                        "jsonobj", "apis"})),
)

Graph = Mapping[str, list[tuple[str, int]]]


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path, package: str = PACKAGE) -> dict[str, Path]:
    return {module_name(root, p): p for p in sorted((root / package).rglob("*.py"))}


def _imported(node: ast.AST, here: str, is_package: bool, known: Mapping[str, Path]
              ) -> Iterator[str]:
    """The modules one import statement names (``from a import b`` is ``a.b`` when b is a
    module, else ``a``)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = here.split(".") if is_package else here.split(".")[:-1]
            parts = parts[:len(parts) - node.level + 1]
            base = ".".join([*parts, base] if base else parts)
        for alias in node.names:
            full = f"{base}.{alias.name}"
            yield full if full in known else base


def import_graph(root: Path = ROOT, package: str = PACKAGE) -> dict[str, list[tuple[str, int]]]:
    """Module → the package's modules it imports, each with the line of the import."""
    known = modules(root, package)
    graph: dict[str, list[tuple[str, int]]] = {}
    for name, path in known.items():
        found: list[tuple[str, int]] = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for target in _imported(node, name, path.name == "__init__.py", known):
                if target in known and target != name:
                    found.append((target, getattr(node, "lineno", 0)))
        graph[name] = sorted(set(found), key=lambda t: (t[1], t[0]))
    return graph


def floor(module: str, package: str = PACKAGE) -> int:
    """The index of ``module``'s floor (0 is the top); -1 when it has none."""
    top = module.removeprefix(package).lstrip(".").split(".")[0]
    return next((i for i, (_, tops) in enumerate(LAYERS) if top in tops), -1)


def unplaced(graph: Graph, package: str = PACKAGE) -> list[str]:
    return sorted(m for m in graph if floor(m, package) < 0)


def upward(graph: Graph, package: str = PACKAGE) -> list[str]:
    """Every import of a module on a higher floor than the importer's, in module order."""
    out: list[str] = []
    for name in sorted(graph):
        for target, line in graph[name]:
            if floor(target, package) < floor(name, package):
                out.append(f"{name}:{line} imports {target} ({LAYERS[floor(target, package)][0]}"
                           f" above {LAYERS[floor(name, package)][0]})")
    return out


def between_shells(graph: Graph, package: str = PACKAGE) -> list[str]:
    """Every import of one shell by another: each command stands on the floors below it alone
    (``python -m hairpin_proxy`` is the command line, which is the one exception)."""
    def shell(module: str) -> str:
        top = module.removeprefix(package).lstrip(".").split(".")[0]
        return top if top in LAYERS[0][1] else ""

    return [f"{name}:{line} imports {target}" for name in sorted(graph)
            for target, line in graph[name]
            if shell(name) and shell(target) and shell(name) != shell(target)
            and (shell(name), shell(target)) != ("__main__", "cli")]


def circles(graph: Graph) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w, _ in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group: list[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


# --------------------------------------------------------------------------- the package


def test_the_graph_is_read() -> None:
    # An empty graph would pass every check below.
    graph = import_graph()
    assert len(graph) > 100
    assert "hairpin_proxy.plan.snapshot" in {t for t, _ in graph["hairpin_proxy.plan.core"]}
    # A lazy import inside a function is read too.
    assert "hairpin_proxy.relay.server" in {t for t, _ in graph["hairpin_proxy.relay.workers"]}


def test_every_module_is_on_a_floor() -> None:
    assert not unplaced(import_graph()), "add it to LAYERS (and to docs/architecture.md)"


def test_no_import_runs_up_a_floor() -> None:
    found = upward(import_graph())
    assert not found, f"first: {found[0]}; all {len(found)}: {found}"


def test_no_shell_imports_another() -> None:
    # render, doctor and etchosts use the edits and the plan, never the controller's modules.
    assert not between_shells(import_graph())


def test_no_circle() -> None:
    assert not circles(import_graph())


# --------------------------------------------------------------------------- the checks fail


def _tree(tmp_path: Path, files: Mapping[str, str]) -> Path:
    for rel, text in {"__init__.py": "", **files}.items():
        path = tmp_path / PACKAGE / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path


def test_an_import_from_a_lower_floor_to_a_higher_one_is_named(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "plan/__init__.py": "", "controller/__init__.py": "", "kube/__init__.py": "",
        "plan/core.py": "def f():\n    from hairpin_proxy.controller import budget\n",
        "controller/budget.py": "from hairpin_proxy.plan import core\n",
        "kube/client.py": "import hairpin_proxy.plan.core\n"})
    found = upward(import_graph(root))
    assert found == [
        "hairpin_proxy.kube.client:1 imports hairpin_proxy.plan.core (plan above cogs)",
        "hairpin_proxy.plan.core:2 imports hairpin_proxy.controller.budget (shells above plan)"]


def test_a_shell_reaching_into_another_is_named(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "__main__.py": "from hairpin_proxy import cli\n", "cli.py": "",
        "render.py": "from hairpin_proxy.controller.writers import coredns\n",
        "controller/__init__.py": "", "controller/writers/__init__.py": "",
        "controller/writers/coredns.py": ""})
    graph = import_graph(root)
    assert not upward(graph)
    assert between_shells(graph) == [
        "hairpin_proxy.render:1 imports hairpin_proxy.controller.writers.coredns"]


def test_a_circle_within_one_floor_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "relay/__init__.py": "",
        "relay/server.py": "from hairpin_proxy.relay.workers import Supervisor\n",
        "relay/workers.py": "def main():\n    from hairpin_proxy.relay.server import serve\n",
        "relay/spec.py": "from . import server\n"})
    graph = import_graph(root)
    assert not upward(graph)
    assert circles(graph) == [["hairpin_proxy.relay.server", "hairpin_proxy.relay.workers"]]


def test_a_module_on_no_floor_is_named(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"newthing.py": "", "claims.py": ""})
    assert unplaced(import_graph(root)) == ["hairpin_proxy.newthing"]


# --------------------------------------------------------------------------- what loads


# What a pure module must not bring with it: sockets, an event loop, the HTTP client, the
# API client, the controller or the relay.
IO_MODULES = ("socket", "ssl", "asyncio", "select", "selectors", "subprocess",
              "concurrent.futures", "httpx2", "httpcore2", "lightkube",
              "hairpin_proxy.kube", "hairpin_proxy.controller", "hairpin_proxy.relay")
# The shells' pure modules, and the two halves of verify/ that do the lookups.
PURE_IN_SHELLS = ("hairpin_proxy.doctor.facts", "hairpin_proxy.doctor.verdict",
                  "hairpin_proxy.doctor.report")
IMPURE_IN_DOMAIN = ("hairpin_proxy.verify.checker", "hairpin_proxy.verify.resolver")


def loaded_after(imports: str, prefixes: tuple[str, ...] = IO_MODULES, prelude: str = ""
                 ) -> list[str]:
    code = (f"import sys; {prelude}{imports}; "
            f"print(' '.join(m for m in sorted(sys.modules) if m.startswith({prefixes!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    return [m for m in out.stdout.split()
            if any(m == p or m.startswith(p + ".") for p in prefixes)]


def pure_modules() -> dict[str, list[str]]:
    """Every module below the shells, by its top-level name, and the shells' pure ones."""
    groups: dict[str, list[str]] = {"doctor": list(PURE_IN_SHELLS)}
    for name in modules(ROOT):
        if floor(name) > 0 and name not in IMPURE_IN_DOMAIN and floor(name) < len(LAYERS) - 1:
            groups.setdefault(name.split(".")[1], []).append(name)
    return groups


def test_the_pure_modules_are_found() -> None:
    groups = pure_modules()
    assert {"plan", "sources", "targets", "edits", "corefile"} <= set(groups)
    assert "hairpin_proxy.plan.core" in groups["plan"]


@pytest.mark.parametrize("group", sorted(pure_modules()))
def test_pure_modules_load_no_io(group: str) -> None:
    names = pure_modules()[group]
    assert not loaded_after("import " + ", ".join(names))


@pytest.mark.parametrize("module", ["hairpin_proxy.relay.main", "hairpin_proxy.relay.server",
                                    "hairpin_proxy.relay.workers", "hairpin_proxy.relay.upstreams",
                                    "hairpin_proxy.plan"])
def test_the_relay_and_the_plan_load_no_controller_and_no_http_client(module: str) -> None:
    # A key of a kind a source declares, as the relay's table decoder reads one: once the
    # lookup of such a kind loaded the registry, and with it the controller, on first use.
    code = (f"import {module}; from hairpin_proxy.targets.model import parse_key; "
            "parse_key('traefik/default')")
    assert not loaded_after(code, ("hairpin_proxy.controller", "hairpin_proxy.kube",
                                   "httpx2", "httpcore2", "lightkube"))


def test_the_watch_sees_an_http_client_when_one_is_loaded() -> None:
    # The check above is only as good as this: it does see what it looks for.
    loaded = loaded_after("import hairpin_proxy.kube.client")
    assert {"hairpin_proxy.kube.client", "httpx2", "socket"} <= set(loaded)
