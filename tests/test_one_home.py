"""Each of the names several modules share has one home: the literal is written there and
imported everywhere else, so that a new version or kind is one edit. Read as text (string
constants other than docstrings, and the alias definitions), nothing is run."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

from tests.test_layers import ROOT, modules

GATEWAY_MODEL = "hairpin_proxy.sources.gateway.model"
# The Kubernetes API names several floors share (a leaf of the cogs).
APIS = "hairpin_proxy.apis"
# Literal → the modules it may be written in.
HOMES: Mapping[str, frozenset[str]] = {
    "gateway.networking.k8s.io": frozenset({APIS}),
    "proxy.istio.io/config": frozenset({APIS}),
    # The route kinds (their plurals are the resources' names, looked up by any table).
    **{kind: frozenset({GATEWAY_MODEL}) for kind in ("HTTPRoute", "GRPCRoute", "TLSRoute")},
    "networking.k8s.io": frozenset({
        APIS,
        # The manifest reader sits below the domain (a cog) and also reads the legacy group.
        "hairpin_proxy.manifests"}),
    "networking.k8s.io/v1": frozenset({
        # A NetworkPolicy's version, which only happens to equal the Ingress API's.
        "hairpin_proxy.targets.netguard",
        # An Event's default involvedObject, below the domain (a cog).
        "hairpin_proxy.kube.events"}),
}
# Type aliases every floor names: defined in the leaf that imports nothing.
ALIASES: Mapping[str, str] = {
    name: "hairpin_proxy.jsonobj" for name in ("JsonObj", "Obj", "Mutate")}


def _constants(tree: ast.AST) -> Iterator[str]:
    """String constants, leaving out docstrings and other bare strings."""
    skip = {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in skip:
            yield node.value


def _aliases(tree: ast.Module) -> Iterator[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign):
            yield from (t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            yield node.target.id


def strays(root: Path = ROOT) -> list[str]:
    """Every literal written outside its home, and every alias defined outside its own."""
    out: list[str] = []
    for name, path in modules(root).items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for literal in sorted(set(_constants(tree)) & set(HOMES)):
            if name not in HOMES[literal]:
                out.append(f"{name}: {literal!r} (its home: {', '.join(sorted(HOMES[literal]))})")
        for alias in sorted(set(_aliases(tree)) & set(ALIASES)):
            if name != ALIASES[alias]:
                out.append(f"{name}: defines {alias} (its home: {ALIASES[alias]})")
    return out


def test_each_shared_name_has_one_home() -> None:
    assert not strays()


def test_the_homes_hold_them() -> None:
    # A home that lost its literal would let the check above pass on nothing.
    found = {name: set(_constants(ast.parse(path.read_text(encoding="utf-8"))))
             for name, path in modules(ROOT).items()}
    for literal, homes in HOMES.items():
        assert any(literal in found[home] for home in homes), literal


def test_a_literal_or_alias_written_elsewhere_is_named(tmp_path: Path) -> None:
    package = tmp_path / "hairpin_proxy"
    (package / "plan").mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "plan" / "__init__.py").write_text("", encoding="utf-8")
    (package / "plan" / "x.py").write_text(
        '"""About gateway.networking.k8s.io routes."""\n'
        'KINDS = ("HTTPRoute",)\nJsonObj = dict\n', encoding="utf-8")
    assert strays(tmp_path) == [
        f"hairpin_proxy.plan.x: 'HTTPRoute' (its home: {GATEWAY_MODEL})",
        "hairpin_proxy.plan.x: defines JsonObj (its home: hairpin_proxy.jsonobj)"]
