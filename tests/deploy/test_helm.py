"""The Helm chart, with the real `helm` (and `kubectl`), no cluster: lint, every preset, the
schema's refusals, strict schema checks of what it renders, the same objects as its Kustomize
twin, RBAC against the calls the controller and the uninstall hook really make, upgrades.

The chart is generated from deploy/ by scripts/gen_helm_chart.py; the first test says when it
is stale, the equivalence tests say which object and field differ from Kustomize.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import kubernetes_validate
import pytest
import yaml

from hairpin_proxy.cli import build_parser
from hairpin_proxy.settings import ControllerSettings, settings_from_args
from tests.controller.conftest import COREFILE, NAMESPACE, Controller
from tests.corefiles import BY_NAME
from tests.deploy.helm import (
    BY_PRESET,
    CHART,
    COMPANIONS,
    COMPONENT_VALUES,
    HOOK,
    PRESETS,
    differences,
    helm_or_skip,
    hooks,
    installed,
    kustomize_twin,
    merge,
    refusal,
    run_helm,
    template,
)
from tests.deploy.rendering import DEPLOY, REPO, Doc, find, kustomization_dirs, render
from tests.deploy.test_manifests import (
    PUBLISHED,
    allowed,
    controller_flags,
    flags_of,
    pod_spec,
    rbac_problems,
    schema_versions,
)
from tests.deploy.test_monitoring import crd_problems
from tests.deploy.test_rbac_calls import (
    EXCEPTIONS,
    Access,
    Run,
    _args,
    _cluster,
    _coverage,
    _default_run,
    _extras,
    _gateway_api,
    _guard_run,
    _host_in,
    _import_run,
    access_of,
    denied,
    grants,
)
from tests.fakeapi.fixtures import configmap, deployment
from tests.fakeapi.server import FakeApiServer
from tests.waiting import PATIENCE, wait_until

SCRIPT = REPO / "scripts" / "gen_helm_chart.py"
HOOK_SA = "hairpin-proxy-uninstall"
KUBECTL_135 = REPO / ".tools" / "bin" / "kubectl-v1.35.2"


@pytest.fixture(scope="module")
def helm() -> str:
    return helm_or_skip()


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_helm_chart", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_helm_chart"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _component_sets() -> dict[str, tuple[dict[str, Any], str, list[str]]]:
    """Case → (values, Kustomize overlay, components): every preset alone, every component
    alone on the default, every platform with every component it can take."""
    cases: dict[str, tuple[dict[str, Any], str, list[str]]] = {
        f"preset {name}": (values, overlay, []) for name, (values, overlay) in PRESETS.items()}
    for name, values in COMPONENT_VALUES.items():
        cases[f"component {name}"] = (values, "base", [name])
    for platform in ("kubeadm", "k3s", "aks", "rke2"):
        values, overlay = PRESETS[platform]
        # Traefik's component is for a Traefik in its own namespace; k3s and RKE2 bring theirs.
        chosen = [c for c in COMPONENT_VALUES if c != "traefik" or platform in ("kubeadm", "aks")]
        # k3s's overlay includes the IngressRoute component already.
        chosen = [c for c in chosen if c != "traefik-ingressroute" or platform != "k3s"]
        components = chosen + [extra for pair, extra in COMPANIONS.items()
                               if set(pair) <= set(chosen)]
        cases[f"{platform} with everything"] = (
            merge(values, *(COMPONENT_VALUES[c] for c in chosen)), overlay, components)
    return cases


CASES = _component_sets()


@pytest.fixture(scope="module")
def rendered(helm: str) -> dict[str, list[Doc]]:
    return {case: template(helm, values) for case, (values, _, _) in CASES.items()}


# --------------------------------------------------------------------------- the chart


def test_the_chart_is_generated_from_the_kustomize_tree(kubectl: str) -> None:
    """After a change under deploy/: python scripts/gen_helm_chart.py."""
    out = subprocess.run([sys.executable, str(SCRIPT), "--check", "--kubectl", kubectl],
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr


def test_the_generator_refuses_an_unmapped_component(generator: ModuleType) -> None:
    mapped = dict(generator.COMPONENTS)
    try:
        del generator.COMPONENTS["proxy-v2"]
        with pytest.raises(generator.GenerateError, match="proxy-v2 is not in the chart"):
            generator.render_tree("kubectl")
    finally:
        generator.COMPONENTS.clear()
        generator.COMPONENTS.update(mapped)


def test_the_generator_names_a_change_it_cannot_express(generator: ModuleType) -> None:
    base: list[Doc] = [{"kind": "Service", "metadata": {"name": "s", "namespace": "n"},
                        "spec": {"type": "ClusterIP"}}]
    changed = [{**base[0], "spec": {"type": "NodePort"}}]
    with pytest.raises(generator.GenerateError, match="Service n/s is changed"):
        generator.diff_into(generator.Effects(), "true", "components/x", base, changed)
    with pytest.raises(generator.GenerateError, match="removes"):
        generator.diff_into(generator.Effects(), "true", "components/x", base, [])


def test_regenerating_follows_changes_under_deploy(generator: ModuleType, helm: str,
                                                   kubectl: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """What other branches do to deploy/ (a field added to a base object, a new component
    mapped ahead in COMPONENTS) reaches the chart by re-running the generator, and the
    chart then equals Kustomize again."""
    root = tmp_path / "repo"
    shutil.copytree(DEPLOY, root / "deploy")
    (root / "docs").mkdir()
    shutil.copy(REPO / "docs" / "install.md", root / "docs" / "install.md")
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    rbac = root / "deploy" / "base" / "rbac.yaml"
    docs = [d for d in yaml.safe_load_all(rbac.read_text()) if d]
    find(docs, "ClusterRole", "hairpin-proxy-controller")["metadata"]["finalizers"] = [
        "hairpin-proxy.io/withdraw-first"]
    rbac.write_text(yaml.safe_dump_all(docs))
    component = root / "deploy" / "components" / "verify-off"
    # Written only where that branch has not landed yet (it is mapped ahead in COMPONENTS).
    if not component.exists():
        component.mkdir()
        (component / "kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1alpha1", "kind": "Component",
            "patches": [{"target": {"group": "apps", "version": "v1", "kind": "Deployment",
                                    "name": "hairpin-proxy-controller"},
                         "patch": "- op: add\n  path: /spec/template/spec/containers/0/args/-\n"
                                  "  value: --verify-hosts=off\n"}]}))
    chart = root / "deploy" / "helm" / "hairpin-proxy"
    for name in ("REPO", "DEPLOY", "CHART", "INSTALL_DOC"):
        monkeypatch.setattr(generator, name, Path(str(getattr(generator, name)).replace(
            str(REPO), str(root))))
    assert generator.main(["--kubectl", kubectl]) == 0
    assert generator.main(["--check", "--kubectl", kubectl]) == 0
    values = {"controller": {"verifyHosts": False}}
    rendered = installed(template(helm, values, chart=chart))
    twin = kustomize_twin(kubectl, tmp_path / "twin", "base", ["verify-off"],
                          deploy=root / "deploy")
    assert differences(rendered, twin) == []
    assert find(rendered, "ClusterRole", "hairpin-proxy-controller")["metadata"][
        "finalizers"] == ["hairpin-proxy.io/withdraw-first"]
    args = pod_spec(find(rendered, "Deployment", "hairpin-proxy-controller"))["containers"][0][
        "args"]
    assert args.count("--verify-hosts=off") == 1  # the component's flag, not also the value's


def test_every_component_is_in_the_chart_or_a_preset() -> None:
    components = {d.name for d in kustomization_dirs(DEPLOY / "components")}
    offered = set(COMPONENT_VALUES) | set(COMPANIONS.values()) | set(BY_PRESET)
    assert components == offered


def test_chart_metadata() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = subprocess.run([sys.executable, "-c", "import tomllib; print(tomllib.load(open("
                              "'pyproject.toml', 'rb'))['project']['version'])"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.strip()
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == project == chart["version"]


def test_lint_strict(helm: str) -> None:
    for values in [{}, *(v for v, _, _ in CASES.values())]:
        out = run_helm(helm, ["lint", "--strict", str(CHART)], values)
        assert out.returncode == 0, f"{values}:\n{out.stdout}\n{out.stderr}"
        assert "0 chart(s) failed" in out.stdout


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_objects_as_kustomize(helm: str, kubectl: str, tmp_path: Path, case: str,
                                   rendered: dict[str, list[Doc]]) -> None:
    """`helm template` with the case's values and `kubectl kustomize` of the matching overlay
    and components give the same objects, Helm's standard labels aside."""
    _, overlay, components = CASES[case]
    twin = kustomize_twin(kubectl, tmp_path / "twin", overlay, components)
    assert differences(installed(rendered[case]), twin) == []


def test_equivalence_points_at_the_difference(rendered: dict[str, list[Doc]]) -> None:
    chart = installed(rendered["preset kubeadm"])
    twin = [dict(d) for d in chart]
    proxy = find(twin, "Deployment", "hairpin-proxy")
    twin[twin.index(proxy)] = {**proxy, "spec": {**proxy["spec"], "replicas": 3}}
    assert differences(chart, twin) == [
        "('Deployment', 'hairpin-proxy', 'hairpin-proxy') .spec.replicas: chart 2 != kustomize 3"]
    assert differences(chart, twin[1:]) == [
        "only in the chart: ('Namespace', '', 'hairpin-proxy')",
        "('Deployment', 'hairpin-proxy', 'hairpin-proxy') .spec.replicas: chart 2 != kustomize 3"]


# --------------------------------------------------------------------------- values


SIZED: dict[str, Any] = {
    "image": {"repository": "registry.example.com/hairpin-proxy", "tag": "9.9.9",
              "pullPolicy": "Always"},
    "targets": {"nginx-internal": "ingress-internal/ingress-nginx-controller:v2",
                "gateway:web/public": "envoy-gateway-system/envoy-web-public:none"},
    "etchosts": {"enabled": True, "removeOnDelete": True, "priorityClassName": "node-critical",
                 "tolerations": [{"key": "dedicated", "operator": "Exists"}]},
    "proxy": {"replicas": 3, "targetServer": "haproxy.haproxy.svc.cluster.local",
              "extraArgs": ["--idle-timeout=600"],
              "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                            "limits": {"cpu": "2", "memory": "512Mi"}},
              "podDisruptionBudget": {"minAvailable": "50%"},
              "priorityClassName": "system-cluster-critical",
              "nodeSelector": {"kubernetes.io/os": "linux"},
              "tolerations": [{"key": "ingress", "operator": "Equal", "value": "true",
                               "effect": "NoSchedule"}]},
    "controller": {"replicas": 1, "nodeLocalDns": False, "verifyHosts": False,
                   "extraArgs": ["--dns-ttl=30"], "podDisruptionBudget": {"enabled": False}},
}


def test_values_reach_the_objects(helm: str) -> None:
    docs = template(helm, SIZED)
    proxy = find(docs, "Deployment", "hairpin-proxy")
    spec = pod_spec(proxy)
    assert proxy["spec"]["replicas"] == 3
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert spec["tolerations"] == SIZED["proxy"]["tolerations"]
    container = spec["containers"][0]
    assert container["resources"] == SIZED["proxy"]["resources"]
    assert {e["name"]: e.get("value") for e in container["env"]}["TARGET_SERVER"] == (
        "haproxy.haproxy.svc.cluster.local")
    assert find(docs, "PodDisruptionBudget", "hairpin-proxy")["spec"]["minAvailable"] == "50%"
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"
                and d["metadata"]["name"] == "hairpin-proxy-controller"]
    for d in docs:
        if d["kind"] in ("Deployment", "DaemonSet", "Job"):
            for c in pod_spec(d)["containers"]:
                assert c["image"] == "registry.example.com/hairpin-proxy:9.9.9", d["metadata"]
                assert c["imagePullPolicy"] == "Always"
    flags = controller_flags(docs)
    assert flags["node_local_dns"] == "off" and flags["verify_hosts"] == "off"
    assert flags["dns_ttl"] == "30"
    assert flags["target"] == str(("gateway:web/public=envoy-gateway-system/envoy-web-public:none",
                                   "nginx-internal=ingress-internal/ingress-nginx-controller:v2"))
    assert flags_of(docs, "Deployment", "hairpin-proxy")["idle_timeout"] == "600.0"
    agent = find(docs, "DaemonSet", "hairpin-proxy-etchosts")
    assert pod_spec(agent)["tolerations"] == SIZED["etchosts"]["tolerations"]
    assert flags_of(docs, "DaemonSet", "hairpin-proxy-etchosts")["remove_on_delete"] == "True"


@pytest.mark.parametrize("enabled", [False, True])
def test_the_controller_publishes_the_hosts_only_with_the_node_agent(helm: str,
                                                                     enabled: bool) -> None:
    docs = template(helm, {"etchosts": {"enabled": enabled}})
    args = pod_spec(find(docs, "Deployment", "hairpin-proxy-controller"))["containers"][0][
        "args"]
    assert [a for a in args if a.startswith("--publish-configmap")] == (
        [f"--publish-configmap={PUBLISHED}"] if enabled else [])
    published = controller_flags(docs)["publish_configmap"]
    assert published == (PUBLISHED if enabled else "")
    if enabled:
        assert flags_of(docs, "DaemonSet", "hairpin-proxy-etchosts")["publish_configmap"] == \
            published


def test_every_value_driven_flag_is_a_real_flag(helm: str) -> None:
    """The command lines values produce parse, and convert into settings."""
    for d in template(helm, SIZED):
        if d["kind"] not in ("Deployment", "DaemonSet", "Job"):
            continue
        args = pod_spec(d)["containers"][0]["args"]
        namespace = build_parser().parse_args(args)
        del namespace.command
        if args[0] == "controller":
            settings_from_args(ControllerSettings, namespace, environ={})


# Each invalid value set and the line of helm's answer that names the problem.
REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"platform": "eks"}, "at '/platform': value must be one of 'aks', 'k3s', 'kubeadm', 'rke2'"),
    ({"plaform": "k3s"}, "at '': additional properties 'plaform' not allowed"),
    ({"proxy": {"replica": 3}}, "at '/proxy': additional properties 'replica' not allowed"),
    ({"proxy": {"replicas": "3"}}, "at '/proxy/replicas': got string, want integer"),
    ({"proxy": {"replicas": 0}}, "at '/proxy/replicas': minimum: got 0, want 1"),
    ({"monitoring": {"enabled": "yes"}}, "at '/monitoring/enabled': got string, want boolean"),
    ({"monitoring": True}, "at '/monitoring': got boolean, want object"),
    ({"controller": {"verifyHosts": "off"}},
     "at '/controller/verifyHosts': got string, want boolean"),
    ({"controller": {"resources": {"requests": {"gpu": 1}}}},
     "at '/controller/resources/requests': additional properties 'gpu' not allowed"),
    ({"targets": {"nginx": "ingress-nginx"}}, "at '/targets/nginx': 'ingress-nginx' does not "
                                              "match pattern"),
    ({"targets": {"nginx": "ingress-nginx/controller:v3"}}, "at '/targets/nginx'"),
    ({"controller": {"extraArgs": ["-v"]}},
     "at '/controller/extraArgs/0': '-v' does not match pattern '^--'"),
    ({"proxy": {"proxyProtocol": 2}}, "at '/proxy/proxyProtocol': value must be one of 'v1', "
                                      "'v2'"),
    ({"etchosts": {"tolerations": [{"operator": "Sometimes"}]}},
     "at '/etchosts/tolerations/0/operator': value must be one of 'Exists', 'Equal'"),
    ({"image": {"pullPolicy": "Sometimes"}}, "at '/image/pullPolicy': value must be one of"),
    ({"proxy": {"nodeSelector": {"zone": 1}}},
     "at '/proxy/nodeSelector/zone': got number, want string"),
    ({"platform": "k3s", "traefik": {"enabled": True}},
     "traefik.enabled relays to traefik.traefik; platform k3s has its own ingress controller"),
]


@pytest.mark.parametrize(("values", "message"), REFUSED, ids=[m for _, m in REFUSED])
def test_invalid_values_are_refused_with_a_clear_message(helm: str, values: dict[str, Any],
                                                         message: str) -> None:
    assert message in refusal(helm, values)


def test_the_release_namespace_cannot_be_the_one_the_chart_creates(helm: str) -> None:
    for namespace in ("hairpin-proxy", "hairpin-proxy-node"):
        assert ("install the release into another namespace than " + namespace) in refusal(
            helm, {}, namespace)


def _schema_leaves(node: dict[str, Any], at: str = "") -> list[str]:
    """Every value: a node with a description (sections have none)."""
    if "description" not in node:
        return [p for key, sub in node["properties"].items()
                for p in _schema_leaves(sub, f"{at}.{key}" if at else key)]
    return [at]


def test_every_value_is_documented_and_described() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["additionalProperties"] is False
    leaves = _schema_leaves(schema)
    table = (REPO / "docs" / "install.md").read_text()
    values_yaml = (CHART / "values.yaml").read_text()
    for leaf in leaves:
        assert f"| `{leaf}` |" in table, leaf
        node: Any = schema
        for key in leaf.split("."):
            node = node["properties"][key]
        assert node["description"], leaf
        assert node["description"].split()[0] in values_yaml, leaf


# --------------------------------------------------------------------------- schemas


def test_every_rendered_object_validates_strictly(rendered: dict[str, list[Doc]],
                                                  helm: str) -> None:
    unique: dict[str, Doc] = {}
    for docs in [*rendered.values(), template(helm, SIZED)]:
        for d in docs:
            unique[yaml.safe_dump(d, sort_keys=True)] = d
    failures = []
    for d in unique.values():
        if d["apiVersion"] == "monitoring.coreos.com/v1":
            failures += crd_problems(d)
            continue
        for version in schema_versions():
            try:
                kubernetes_validate.validate(d, version, strict=True)
            except (kubernetes_validate.ValidationError,
                    kubernetes_validate.SchemaNotFoundError) as exc:
                failures.append(f"{version} {d['kind']}/{d['metadata']['name']}: {exc}")
    assert any(d["apiVersion"] == "monitoring.coreos.com/v1" for d in unique.values())
    assert not failures, "\n".join(failures)


def test_rbac_is_least_privilege(rendered: dict[str, list[Doc]]) -> None:
    """As the Kustomize tree: the opt-in grants test_manifests allows, and nothing else."""
    from tests.deploy.test_manifests import OPT_IN_RBAC

    for case, docs in rendered.items():
        components = CASES[case][2]
        allowed = [p for name, problems in OPT_IN_RBAC.items()
                   if name.removeprefix("components/") in components for p in problems]
        if "guard-data-planes" in components:
            # The uninstall hook's cleanup deletes the guard's policies (its few seconds).
            allowed.append(f"ClusterRole/{HOOK_SA}: cluster-wide write on ['networkpolicies']")
        assert sorted(rbac_problems(docs)) == sorted(allowed), case


# --------------------------------------------------------------------------- uninstall hook


def test_the_uninstall_hook_is_a_pre_delete_job_with_its_rbac_first(
        rendered: dict[str, list[Doc]]) -> None:
    for case, docs in rendered.items():
        hook = hooks(docs)
        kinds = sorted(d["kind"] for d in hook)
        guard = "guard-data-planes" in CASES[case][2]
        assert kinds == sorted(["Job", "Role", "Role", "RoleBinding", "RoleBinding",
                                "ServiceAccount",
                                *(["ClusterRole", "ClusterRoleBinding"] if guard else [])]), case
        weight = {d["kind"]: int(d["metadata"]["annotations"]["helm.sh/hook-weight"])
                  for d in hook}
        for d in hook:
            notes = d["metadata"]["annotations"]
            # Only on uninstall: an upgrade or rollback never runs the cleanup.
            assert notes[HOOK] == "pre-delete", case
            # Nothing is left behind; a failed run's leftovers go before the next try.
            assert set(notes["helm.sh/hook-delete-policy"].split(",")) == {
                "before-hook-creation", "hook-succeeded"}, case
            if d["kind"] != "Job":
                assert weight[d["kind"]] < weight["Job"], case
        job = find(hook, "Job", "hairpin-proxy-cleanup")
        spec = pod_spec(job)
        assert spec["serviceAccountName"] == HOOK_SA
        assert spec["restartPolicy"] == "Never"
        assert [c["name"] for c in spec["initContainers"]] == ["stop-controller",
                                                              "wait-controller"]
        # Nothing outside the hook binds its account; its one cluster-wide grant, with the
        # guard only: the guard's NetworkPolicies, listed and deleted (cleanup --guard-policies).
        for d in docs:
            if d["kind"].endswith("Binding") and any(s["name"] == HOOK_SA
                                                     for s in d["subjects"]):
                assert d in hook, case
                assert d["kind"] == "RoleBinding" or guard, case
        if guard:
            assert find(hook, "ClusterRole", HOOK_SA)["rules"] == [{
                "apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
                "verbs": ["list", "delete"]}], case
        args = pod_spec(job)["containers"][0]["args"]
        # The Job's own --no-guard-policies, overridden (the last one wins) with the guard.
        assert args.index("--no-guard-policies") < (
            args.index("--guard-policies") if guard else len(args)), case
        assert ("--guard-policies" in args) == guard, case


def test_the_hook_stops_the_controller_before_cleaning_up(rendered: dict[str, list[Doc]]) -> None:
    docs = rendered["preset kubeadm"]
    spec = pod_spec(find(hooks(docs), "Job", "hairpin-proxy-cleanup"))
    stop, wait = (c["args"] for c in spec["initContainers"])
    controller = find(docs, "Deployment", "hairpin-proxy-controller")
    assert stop == ["--namespace=hairpin-proxy", "scale", "deployment/hairpin-proxy-controller",
                    "--replicas=0"]
    selector = ",".join(f"{k}={v}" for k, v in controller["spec"]["selector"][
        "matchLabels"].items())
    assert wait[:4] == ["--namespace=hairpin-proxy", "wait", "--for=delete", "pod"]
    assert f"--selector={selector}" in wait
    # The cleanup pod itself is not one of the pods waited for.
    job = find(hooks(docs), "Job", "hairpin-proxy-cleanup")
    assert job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] != (
        controller["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"])


@pytest.mark.parametrize("platform", ["kubeadm", "k3s", "aks", "rke2"])
def test_the_hook_cleans_what_the_controller_writes(helm: str, platform: str) -> None:
    docs = template(helm, PRESETS[platform][0])
    ctl = controller_flags(docs)
    cleanup = flags_of(hooks(docs), "Job", "hairpin-proxy-cleanup")
    for key in ("mode", "configmap_namespace", "configmap_name", "configmap_key",
                "import_configmap_name", "import_key"):
        assert cleanup[key] == ctl[key], (platform, key)
    # The published hosts, deleted whoever wrote them (an earlier version, or this one with
    # the node agent); without the agent this one writes none.
    assert (cleanup["publish_configmap"], ctl["publish_configmap"]) == (PUBLISHED, ""), platform
    written = (cleanup["import_configmap_name"] if cleanup["mode"] == "coredns-import"
               else cleanup["configmap_name"])
    for verb in ("get", "update"):
        assert allowed(hooks(docs), HOOK_SA, cleanup["configmap_namespace"], "", "configmaps",
                       verb, written), (platform, verb)
    assert not allowed(hooks(docs), HOOK_SA, "kube-system", "", "configmaps", "update",
                       "kube-root-ca.crt")


@pytest.mark.parametrize(("platform", "variant"), [("kubeadm", "default"),
                                                  ("k3s", "coredns-import"),
                                                  ("aks", "coredns-import"), ("rke2", "rke2")])
def test_the_hook_job_is_the_kustomize_cleanup_job(helm: str, kubectl: str, platform: str,
                                                  variant: str) -> None:
    """Its pod is deploy/cleanup/<variant>'s, but for its own service account and the two
    steps that stop the controller first."""
    ours = pod_spec(find(hooks(template(helm, PRESETS[platform][0])), "Job",
                         "hairpin-proxy-cleanup"))
    theirs = pod_spec(find(render(kubectl, DEPLOY / "cleanup" / variant), "Job",
                           "hairpin-proxy-cleanup"))
    assert [c["name"] for c in ours.pop("initContainers")] == ["stop-controller",
                                                               "wait-controller"]
    assert ours.pop("serviceAccountName") == HOOK_SA
    assert theirs.pop("serviceAccountName") == "hairpin-proxy-controller"
    assert ours == theirs


def test_the_hook_can_be_turned_off(helm: str) -> None:
    assert hooks(template(helm, {"uninstallHook": {"enabled": False}})) == []


def _chart_renders(helm: str) -> dict[str, list[Doc]]:
    """The chart's renders, under the names test_rbac_calls' runs read; the cleanup Jobs are
    the hook's."""
    kubeadm = template(helm, {})
    nudge = template(helm, {"nudgeCoredns": {"enabled": True}})
    k3s = template(helm, {"platform": "k3s"})
    guard = template(helm, {"guardDataPlanes": {"enabled": True}})
    # The node agent's: the controller publishes the hosts (the runs use its flag).
    etchosts = template(helm, {"etchosts": {"enabled": True}})
    return {"base": installed(kubeadm), "components/nudge-coredns": installed(nudge),
            "overlays/k3s": installed(k3s), "components/guard-data-planes": installed(guard),
            "components/etchosts": installed(etchosts),
            "cleanup/default": hooks(kubeadm), "cleanup/coredns-import": hooks(k3s)}


@pytest.fixture(scope="module")
def chart_runs(helm: str, tmp_path_factory: pytest.TempPathFactory,
               ) -> tuple[dict[str, list[Doc]], list[Run]]:
    """The controller (the chart's args) and then the hook's cleanup against the fake API."""
    renders = _chart_renders(helm)
    work = tmp_path_factory.mktemp("helm-rbac-calls")
    return renders, (_default_run(renders, work) + _import_run(renders, work)
                     + _guard_run(renders, work))


def test_the_chart_allows_every_call_of_the_controller(
        chart_runs: tuple[dict[str, list[Doc]], list[Run]]) -> None:
    renders, runs = chart_runs
    for run in runs:
        if not run.label.startswith("cleanup"):
            assert run.calls, run.label
            assert denied(renders[run.render], run.calls) == [], run.label
    # Every grant of the controller is used, but the ones the Kustomize install also leaves
    # to the doctor.
    assert set(_coverage(renders, runs)) == set(EXCEPTIONS)


def _hook_problems(hook_docs: list[Doc], calls: list[Access]) -> tuple[list[str], set[str]]:
    refused = sorted({str(a) for a in calls if not allowed(
        hook_docs, HOOK_SA, a.namespace, a.group, a.resource, a.verb, a.name or None)})
    unused = {str(g) for g in grants(hook_docs, HOOK_SA) if not any(g.covers(a) for a in calls)}
    return refused, unused


def _kubectl_calls(hook_docs: list[Doc], work: Path) -> list[Access]:
    """The hook's kubectl steps, run by the real kubectl of the hook image's version against
    the fake API: scale the controller's Deployment, wait until its last pod is gone."""
    if not KUBECTL_135.exists():
        pytest.skip(f"no {KUBECTL_135.relative_to(REPO)} (scripts/system-deps.sh installs it)")
    stop, wait = (c["args"] for c in pod_spec(find(hook_docs, "Job", "hairpin-proxy-cleanup"))[
        "initContainers"])
    with FakeApiServer(bookmark_interval=0.5) as api:
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "hairpin-proxy"}})
        api.create(deployment("hairpin-proxy", "hairpin-proxy-controller"))
        api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "hairpin-proxy-controller-7d4b9c-x2x5q", "namespace": "hairpin-proxy",
            "labels": {"app.kubernetes.io/name": "hairpin-proxy",
                       "app.kubernetes.io/component": "controller"}},
            "spec": {"containers": [{"name": "controller", "image": "hairpin-proxy"}]}})
        work.mkdir(parents=True, exist_ok=True)
        kubeconfig = api.write_kubeconfig(work / "kubeconfig-hook")
        base = [str(KUBECTL_135), f"--kubeconfig={kubeconfig}"]
        scaled = subprocess.run([*base, *stop], capture_output=True, text=True, timeout=60,
                                check=False)
        assert scaled.returncode == 0, scaled.stderr
        controller = api.get("Deployment", "hairpin-proxy", "hairpin-proxy-controller")
        assert controller is not None and controller["spec"]["replicas"] == 0
        waiting = subprocess.Popen([*base, *wait], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        try:
            wait_until(lambda: api.requests("GET", r"/pods\?", watch=True), 60,
                       "kubectl wait watches the controller's pods")
            api.delete("Pod", "hairpin-proxy", "hairpin-proxy-controller-7d4b9c-x2x5q")
            _, err = waiting.communicate(timeout=60)
        finally:
            waiting.kill()
        assert waiting.returncode == 0, err
        return [a for a in (access_of(r) for r in api.requests()) if a is not None]


def _hook_cleanup_calls(controller: list[Doc], hook_docs: list[Doc], corefile_text: str,
                        written: tuple[str, str], work: Path, *,
                        guard: bool = False) -> list[Access]:
    """The chart's controller writes its rules, publishes the hosts (when told: else an earlier
    version's are left) and a target's proxy Service (``guard``: and a data plane's guard
    NetworkPolicy, made without an owner so that only the hook can remove it); once it is
    stopped, the hook's cleanup (its args) removes it all: its calls."""
    from tests.controller.test_netguard import POLICY, foreign, ingress_nginx, node

    work.mkdir(parents=True, exist_ok=True)
    with FakeApiServer(bookmark_interval=0.5) as api:
        _cluster(api, corefile_text)
        _extras(api)
        _gateway_api(api)
        if guard:
            api.create(node("n1", "10.244.0.0/24"))
            ingress_nginx(api)
            # Someone else's, with our managed-by label but not the guard's: never touched.
            api.create(foreign("theirs", {"app.kubernetes.io/managed-by": "hairpin-proxy"}))
        kubeconfig = api.write_kubeconfig(work / "kubeconfig")
        args = _args(controller, "Deployment", "hairpin-proxy-controller")
        if f"--publish-configmap={PUBLISHED}" not in args:
            api.create(configmap(NAMESPACE, PUBLISHED, {"hosts": "shop.example.com\n"}))
        ctl = Controller(api, kubeconfig, work / "controller.log", *args)
        try:
            ctl.wait_ready()
            wait_until(lambda: _host_in(api, "kube-system", *written, "shop.example.com")
                       and _host_in(api, NAMESPACE, PUBLISHED, "hosts", "shop.example.com")
                       and api.get("Service", NAMESPACE, "hairpin-proxy-t1") is not None
                       and (not guard or api.get(*POLICY) is not None),
                       60, "rules, published hosts and a target's Service")
        finally:
            assert ctl.stop() == 0, ctl.log()
        api.clear_requests()
        cleanup = Controller(api, kubeconfig, work / "cleanup.log",
                             *_args(hook_docs, "Job", "hairpin-proxy-cleanup"),
                             command="cleanup")
        assert cleanup.proc.wait(PATIENCE) == 0, cleanup.log()
        cleanup.stop()
        for kind, name in (("ConfigMap", PUBLISHED),
                           ("ConfigMap", "hairpin-proxy-targets"),
                           ("Service", "hairpin-proxy-t1")):
            assert api.get(kind, NAMESPACE, name) is None, name
        assert not _host_in(api, "kube-system", *written, "shop.example.com")
        if guard:
            assert api.get(*POLICY) is None
            assert api.get("NetworkPolicy", POLICY[1], "theirs") is not None
        return [a for a in (access_of(r) for r in api.requests()) if a is not None]


def test_the_hook_may_run_cleanup_and_nothing_else(helm: str, tmp_path: Path) -> None:
    """Every call of the hook's kubectl steps and of its cleanup is allowed by the hook's RBAC,
    and every grant of it is used by one of them."""
    for platform, corefile_text, written, guard in (
            ("kubeadm", COREFILE, ("coredns", "Corefile"), False),
            ("k3s", BY_NAME["k3s"].text, ("coredns-custom", "hairpin-proxy.override"), False),
            ("kubeadm", COREFILE, ("coredns", "Corefile"), True)):
        values = merge(PRESETS[platform][0], {"guardDataPlanes": {"enabled": guard}})
        docs = template(helm, values)
        work = tmp_path / f"{platform}-{guard}"
        calls = (_kubectl_calls(hooks(docs), work / "kubectl")
                 + _hook_cleanup_calls(installed(docs), hooks(docs), corefile_text, written,
                                       work / "cleanup", guard=guard))
        refused, unused = _hook_problems(hooks(docs), calls)
        assert refused == [], (platform, guard)
        assert unused == set(), (platform, guard)


def test_the_hook_check_catches_a_missing_and_an_unused_grant(
        chart_runs: tuple[dict[str, list[Doc]], list[Run]]) -> None:
    renders, runs = chart_runs
    calls = next(r for r in runs if r.label == "cleanup").calls
    docs = [dict(d) for d in renders["cleanup/default"]]
    role = find(docs, "Role", HOOK_SA, "hairpin-proxy")
    docs[docs.index(role)] = {**role, "rules": [r for r in role["rules"]
                                                if r["resources"] != ["services"]]}
    refused, unused = _hook_problems(docs, calls)
    assert any("services" in r for r in refused)
    assert "list hairpin-proxy/pods" in unused  # the kubectl steps are not in `calls`


# --------------------------------------------------------------------------- upgrades


# What an upgrade must never delete: the namespace (its deletion is the uninstall: every rule
# withdrawn), the controller and its service account and RBAC (the rules' keeper), the proxy
# Service the rules point at and its Deployment.
KEPT = [("Namespace", "", "hairpin-proxy"),
        ("ServiceAccount", "hairpin-proxy", "hairpin-proxy-controller"),
        ("ClusterRole", "", "hairpin-proxy-controller"),
        ("ClusterRoleBinding", "", "hairpin-proxy-controller"),
        ("Role", "kube-system", "hairpin-proxy-controller-coredns"),
        ("RoleBinding", "kube-system", "hairpin-proxy-controller-coredns"),
        ("Role", "hairpin-proxy", "hairpin-proxy-controller"),
        ("Deployment", "hairpin-proxy", "hairpin-proxy-controller"),
        ("Deployment", "hairpin-proxy", "hairpin-proxy"),
        ("Service", "hairpin-proxy", "hairpin-proxy")]


def test_upgrades_across_values_keep_the_rules(rendered: dict[str, list[Doc]],
                                               helm: str) -> None:
    """`helm upgrade` deletes what the new values no longer render and runs no hook but its
    own: between any two value sets here, the objects the rules depend on stay (updated in
    place), selectors (immutable) do not change, and only uninstall runs the cleanup."""
    all_renders = {**rendered, "sized": template(helm, SIZED)}
    for case, docs in all_renders.items():
        keys = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])
                for d in installed(docs)}
        assert set(KEPT) <= keys, (case, sorted(set(KEPT) - keys))
        assert {d["metadata"]["annotations"][HOOK] for d in hooks(docs)} == {"pre-delete"}
    for a, b in itertools.combinations(all_renders, 2):
        for kind, name in (("Deployment", "hairpin-proxy"),
                           ("Deployment", "hairpin-proxy-controller")):
            assert find(all_renders[a], kind, name)["spec"]["selector"] == find(
                all_renders[b], kind, name)["spec"]["selector"], (a, b, name)
        assert find(all_renders[a], "Service", "hairpin-proxy")["spec"] == find(
            all_renders[b], "Service", "hairpin-proxy")["spec"], (a, b)
    # A rollout of the proxy never drops below the ready count (the rules stay answered).
    for docs in all_renders.values():
        strategy = find(docs, "Deployment", "hairpin-proxy")["spec"]["strategy"]
        assert strategy["rollingUpdate"]["maxUnavailable"] == 0


# --------------------------------------------------------------------------- docs, CI


def _shell_block_after(text: str, heading: str) -> list[str]:
    start = text.index(heading)
    block = re.search(r"```shell\n(.*?)```", text[start:], re.S)
    assert block is not None
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def test_notes_give_the_readme_check_and_the_doctor(helm: str) -> None:
    out = run_helm(helm, ["install", "hairpin-proxy", str(CHART), "--dry-run=client"], {})
    assert out.returncode == 0, out.stderr
    notes = out.stdout.split("NOTES:", 1)[1]
    lines = {line.strip() for line in notes.splitlines()}
    readme = (REPO / "README.md").read_text()
    for line in _shell_block_after(readme, "**Check it works:**"):
        assert line in lines, line
    doctor = ("kubectl -n hairpin-proxy exec deployment/hairpin-proxy-controller -- "
              "hairpin-proxy doctor")
    assert doctor in readme and doctor in lines
    assert "hairpin-proxy doctor --in-cluster" in lines
    assert "`hairpin-proxy doctor --in-cluster`" in readme
    assert "docs/doctor.md" in notes


def test_platform_pages_show_their_preset() -> None:
    for platform in ("kubeadm", "k3s", "aks", "rke2"):
        page = (REPO / "docs" / "platforms" / f"{platform}.md").read_text()
        preset = "" if platform == "kubeadm" else f" --set platform={platform}"
        assert (f"helm install hairpin-proxy deploy/helm/hairpin-proxy --namespace "
                f"kube-system{preset}") in page, platform


def test_ci_checks_helm_like_every_peer() -> None:
    """.ci/run reads its peer list from the `command -v` lines of scripts/system-deps.sh and
    looks in .tools/bin, where system-deps puts helm and the tests look for it."""
    deps = (REPO / "scripts" / "system-deps.sh").read_text()
    peers = re.findall(r"^command -v ([A-Za-z0-9_.-]*) ", deps, re.M)
    assert "helm" in peers
    ci = (REPO / ".ci" / "run").read_text()
    assert 'PATH="$PWD/.tools/bin:$PATH' in ci
    assert ".tools/" in (REPO / ".gitignore").read_text().split()
