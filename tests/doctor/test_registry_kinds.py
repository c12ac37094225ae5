"""doctor reads the kinds and groups it lists from the source registry
(hairpin_proxy.sources.registry), never from lists of its own: a group, or a settings object's
plural or kind, written out in the doctor's source is a second home that a new source or
implementation would miss."""

from __future__ import annotations

import ast
from pathlib import Path

from hairpin_proxy.doctor import cluster
from hairpin_proxy.sources.registry import GATEWAY, REGISTRATIONS, settings_objects

DOCTOR = Path(cluster.__file__).parent


def literals(path: Path) -> set[str]:
    return {node.value for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def test_the_doctor_spells_no_group_or_settings_kind_of_the_registry() -> None:
    groups = {r.group for reg in REGISTRATIONS for r in reg.resources if r.crd}
    # The group/version of every kind a source claims from or lists as its own.
    versions = {f"{r.group}/{v}" for reg in REGISTRATIONS for r in reg.resources
                if r.group and not r.fact for v in r.versions}
    settings = {name for r in settings_objects(GATEWAY) for name in (r.plural, r.kind)}
    assert groups and settings and "networking.k8s.io/v1" in versions
    for path in sorted(DOCTOR.glob("*.py")):
        found = literals(path) & (groups | versions | settings)
        assert not found, f"{path.name} names {sorted(found)}: read them from the registry"


def test_the_doctor_lists_the_registrations_settings_objects() -> None:
    assert {(r.group, r.plural) for r in cluster.SETTINGS_OBJECTS} == {
        ("gateway.envoyproxy.io", "clienttrafficpolicies"),
        ("gateway.nginx.org", "nginxproxies")}
    assert cluster.GATEWAY_GROUP == "gateway.networking.k8s.io"
    assert set(cluster.ROUTE_KINDS.values()) == {"HTTPRoute", "GRPCRoute", "TLSRoute"}
    assert "listenersets" in cluster.GATEWAY_PLURALS
