"""The RBAC manifests grant each registered source exactly what its registration declares
(hairpin_proxy.sources.registry), and the CRDs the fake API serves for a source are the ones its
registration reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from hairpin_proxy.sources.registry import CORE_RULES, REGISTRATIONS, Registration, by_name
from tests.fakeapi.crds import TRAEFIK_INGRESSROUTE, TRAEFIK_INGRESSROUTE_LEGACY

ROOT = Path(__file__).resolve().parents[2]
Rule = tuple[str, str, str, str]


def cluster_role(path: Path, name: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    (role,) = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == name]
    assert isinstance(role, dict)
    return role


def granted(role: dict[str, Any]) -> set[Rule]:
    return {(group, resource, verb, name)
            for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]
            for name in rule.get("resourceNames") or ("",)}


def declared(regs: list[Registration]) -> set[Rule]:
    return set().union(*(r.rbac_rules() for r in regs))


def test_the_base_cluster_role_grants_exactly_the_sources_on_by_default() -> None:
    role = cluster_role(ROOT / "deploy/base/rbac.yaml", "hairpin-proxy-controller")
    base = [r for r in REGISTRATIONS if r.rbac_in == "deploy/base"]
    assert {r.name for r in base} == {"ingress", "gateway"}
    assert granted(role) == declared(base) | CORE_RULES


@pytest.mark.parametrize("reg", [r for r in REGISTRATIONS if r.rbac_in != "deploy/base"],
                         ids=lambda r: r.name)
def test_an_opt_in_source_has_its_own_cluster_role(reg: Registration) -> None:
    (role,) = [d for d in yaml.safe_load_all((ROOT / reg.rbac_in / "rbac.yaml").read_text())
               if d and d["kind"] == "ClusterRole"]
    assert granted(role) == declared([reg])
    # Its grants are not in the base: the opt-in is the only way to them.
    base = cluster_role(ROOT / "deploy/base/rbac.yaml", "hairpin-proxy-controller")
    assert not granted(role) & granted(base)
    # The component turns the source on (its setting) where it grants its RBAC.
    flag = "--" + reg.setting.replace("_", "-") + "=auto"
    assert flag in (ROOT / reg.rbac_in / "kustomization.yaml").read_text()


def test_names_in_rbac_are_read_by_name() -> None:
    """A resourceNames grant matches list/watch only with a metadata.name field selector: every
    named resource a registration reads is read that way (one watch per name)."""
    for reg in REGISTRATIONS:
        for r in reg.resources:
            assert not r.names or set(r.verbs) <= {"get", "list", "watch"}, r


def test_the_stored_traefik_crds_serve_what_the_registration_reads() -> None:
    reg = by_name("traefik-ingressroute")
    crds = {(r.group, r.plural): r for r in reg.resources if r.crd}
    for spec in (TRAEFIK_INGRESSROUTE, TRAEFIK_INGRESSROUTE_LEGACY):
        resource = crds.pop((spec.group, spec.plural))
        assert (resource.kind, resource.namespaced) == (spec.kind, spec.namespaced)
        served = [v.name for v in spec.versions if v.served]
        assert served and all(v in resource.versions for v in served)
    assert not crds


def test_every_key_kind_a_registration_names_parses() -> None:
    from hairpin_proxy.sources.registry import DECLARED_KINDS
    from hairpin_proxy.targets.model import BUILT_IN_KINDS

    for reg in REGISTRATIONS:
        for kind in reg.key_kinds:
            assert kind in BUILT_IN_KINDS or kind in DECLARED_KINDS
        for declared in reg.declared_kinds:
            assert declared.spec.kind in reg.key_kinds


@pytest.mark.parametrize("release", ["1.2", "1.4", "1.6"])
@pytest.mark.parametrize("channel", ["standard", "experimental"])
def test_the_gateway_registration_reads_what_the_fake_serves(release: str,
                                                             channel: str) -> None:
    from tests.fakeapi.crds import ENVOY_CLIENT_TRAFFIC_POLICY, NGINX_PROXY, gateway_api

    reg = by_name("gateway")
    resources = {(r.group, r.plural): r for r in reg.resources if r.crd}
    for spec in [*gateway_api(release, channel), ENVOY_CLIENT_TRAFFIC_POLICY, NGINX_PROXY]:
        resource = resources.get((spec.group, spec.plural))
        if resource is None:
            continue  # served but not read (ReferenceGrant)
        assert (resource.kind, resource.namespaced) == (spec.kind, spec.namespaced)
        assert {v.name for v in spec.versions if v.served} <= set(resource.versions)
