"""The Kustomize manifests: schema-valid, hardened, least-privilege, and in step with the CLI.

Every check runs over every render: the base, each overlay, and the base with each component.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate import utils as kv_utils

from hairpin_proxy.cli import COMMANDS, build_parser
from hairpin_proxy.settings import KubeSettings, env_name, settings_from_args
from tests.deploy.rendering import BASE, DEPLOY, Doc, find, render, subparsers, workloads

MIN_SCHEMA = (1, 29)
NONROOT_UID = 65532
# The one workload that must run as root (it writes the node's /etc/hosts).
ROOT_ALLOWED = {("DaemonSet", "hairpin-proxy-etchosts")}
# ... in its own namespace, with exactly these host paths: the file itself (not /etc) and the
# directory of its in-place backup and journal.
NODE_NAMESPACE = "hairpin-proxy-node"
ETCHOSTS_HOST_PATHS = {"/etc/hosts": "File", "/var/lib/hairpin-proxy/etchosts": "DirectoryOrCreate"}
READ_VERBS = {"get", "list", "watch"}
FORBIDDEN_VERBS = {"*", "escalate", "bind", "impersonate", "deletecollection"}
ALL_RENDERS = ["base", "overlays/k3s", "overlays/aks", "overlays/rke2", "overlays/etchosts",
               "cleanup/default", "cleanup/coredns-import", "cleanup/rke2",
               "components/traefik", "components/coredns-import", "components/rke2",
               "components/proxy-v2", "components/etchosts", "components/image",
               "components/nudge-coredns", "components/monitoring",
               "components/networkpolicy", "components/networkpolicy-etchosts",
               "components/guard-data-planes"]
# Each cleanup Job runs with the controller's service account as installed by this render.
# The published hosts' ConfigMap: the etchosts component has the controller write it (earlier
# versions always did), the uninstall deletes it.
PUBLISHED = "hairpin-proxy-hosts"
CLEANUP_FOR = {"cleanup/default": "base", "cleanup/coredns-import": "overlays/k3s",
               "cleanup/rke2": "overlays/rke2"}


def schema_versions() -> list[str]:
    """Every Kubernetes minor from 1.29 to the newest the installed package ships."""
    found = {tuple(int(p) for p in v.split(".")[:2]) for v in kv_utils.all_versions()}
    return [f"{major}.{minor}" for major, minor in sorted(found) if (major, minor) >= MIN_SCHEMA]


def pod_spec(workload: Doc) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


# --------------------------------------------------------------------------- rendering

def test_every_kustomization_is_rendered(renders: dict[str, list[Doc]]) -> None:
    assert set(ALL_RENDERS) <= set(renders)
    for name, docs in renders.items():
        assert docs, name


def test_rendered_single_file_matches_the_base(kubectl: str) -> None:
    """deploy/hairpin-proxy.yaml is `kubectl kustomize deploy/base > deploy/hairpin-proxy.yaml`."""
    committed = [d for d in yaml.safe_load_all((DEPLOY / "hairpin-proxy.yaml").read_text()) if d]
    assert committed == render(kubectl, BASE), (
        "deploy/hairpin-proxy.yaml is stale: run `kubectl kustomize deploy/base > "
        "deploy/hairpin-proxy.yaml`")


def test_base_objects(renders: dict[str, list[Doc]]) -> None:
    docs = renders["base"]
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in docs)
    assert ("Namespace", "hairpin-proxy") in kinds
    for kind, name in [("Deployment", "hairpin-proxy"), ("Deployment", "hairpin-proxy-controller"),
                       ("Service", "hairpin-proxy"), ("ServiceAccount", "hairpin-proxy"),
                       ("ServiceAccount", "hairpin-proxy-controller"),
                       ("PodDisruptionBudget", "hairpin-proxy")]:
        find(docs, kind, name, "hairpin-proxy")
    # Only one namespace of ours; the only foreign one is kube-system (the CoreDNS Role).
    namespaces = {d["metadata"].get("namespace") for d in docs} - {None}
    assert namespaces == {"hairpin-proxy", "kube-system"}


# --------------------------------------------------------------------------- schemas

def test_schema_versions_cover_129_to_newest() -> None:
    versions = schema_versions()
    assert versions[0] == "1.29"
    assert versions[-1] == ".".join(kubernetes_validate.latest_version().split(".")[:2])


def test_every_object_validates_strictly_against_every_schema(
        renders: dict[str, list[Doc]]) -> None:
    unique: dict[str, Doc] = {}
    for docs in renders.values():
        for d in docs:
            # Prometheus Operator kinds have no built-in schema: test_monitoring.py checks them.
            if d["apiVersion"] != "monitoring.coreos.com/v1":
                unique[yaml.safe_dump(d, sort_keys=True)] = d
    failures = []
    for version in schema_versions():
        for d in unique.values():
            try:
                kubernetes_validate.validate(d, version, strict=True)
            except (kubernetes_validate.ValidationError,
                    kubernetes_validate.SchemaNotFoundError) as exc:
                failures.append(f"{version} {d['kind']}/{d['metadata']['name']}: {exc}")
    assert not failures, "\n".join(failures)


def test_strict_validation_rejects_unknown_fields(renders: dict[str, list[Doc]]) -> None:
    """The validator really is strict: a misspelt field fails on every version."""
    bad = copy.deepcopy(find(renders["base"], "Deployment", "hairpin-proxy"))
    bad["spec"]["template"]["spec"]["containers"][0]["readOnlyRootFileSystem"] = True
    for version in schema_versions():
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(bad, version, strict=True)


# --------------------------------------------------------------------------- hardening

@pytest.mark.parametrize("name", ALL_RENDERS)
def test_workloads_are_hardened(renders: dict[str, list[Doc]], name: str) -> None:
    for w in workloads(renders[name]):
        what = f"{name}: {w['kind']}/{w['metadata']['name']}"
        spec = pod_spec(w)
        root_ok = (w["kind"], w["metadata"]["name"]) in ROOT_ALLOWED
        pod_sc = spec.get("securityContext", {})
        assert pod_sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", what
        assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get(
            "hostIPC"), what
        for volume in spec.get("volumes", []):
            if "hostPath" in volume:
                assert root_ok, what
                path = volume["hostPath"]["path"]
                assert ETCHOSTS_HOST_PATHS.get(path) == volume["hostPath"]["type"], what
        for c in spec["containers"]:
            sc = c["securityContext"]
            cwhat = f"{what} container {c['name']}"
            assert sc["readOnlyRootFilesystem"] is True, cwhat
            assert sc["allowPrivilegeEscalation"] is False, cwhat
            assert sc.get("privileged", False) is False, cwhat
            assert sc["capabilities"]["drop"] == ["ALL"], cwhat
            assert not sc["capabilities"].get("add"), cwhat
            assert sc.get("seccompProfile", pod_sc.get("seccompProfile", {})).get(
                "type") == "RuntimeDefault", cwhat
            if root_ok:
                assert sc["runAsUser"] == 0, cwhat
            else:
                for ctx in (pod_sc, sc):
                    assert ctx["runAsNonRoot"] is True, cwhat
                    assert ctx["runAsUser"] == NONROOT_UID, cwhat
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][kind]), f"{cwhat} {kind}"
            if w["kind"] == "Job":
                continue
            ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
            assert ports.get("admin") == 9090, cwhat
            live = c["livenessProbe"]["httpGet"]
            assert (live["path"], live["port"]) == ("/healthz", "admin"), cwhat
            if w["kind"] == "Deployment":
                ready = c["readinessProbe"]["httpGet"]
                assert (ready["path"], ready["port"]) == ("/readyz", "admin"), cwhat


def test_etchosts_agent_runs_on_every_node_and_only_it_is_root(
        renders: dict[str, list[Doc]]) -> None:
    for name in ("components/etchosts", "overlays/etchosts"):
        docs = renders[name]
        ds = find(docs, "DaemonSet", "hairpin-proxy-etchosts", NODE_NAMESPACE)
        spec = pod_spec(ds)
        assert {"operator": "Exists"} in spec["tolerations"], name
        container = spec["containers"][0]
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        host = {v["name"]: v["hostPath"] for v in spec["volumes"] if "hostPath" in v}
        # Only the file is mounted, not the node's /etc: rename() onto it is impossible, so the
        # agent writes in place, with its backup and journal in a host directory of its own
        # (they must outlive the pod to undo an interrupted rewrite).
        assert host == {"host-hosts": {"path": "/etc/hosts", "type": "File"},
                        "state": {"path": "/var/lib/hairpin-proxy/etchosts",
                                  "type": "DirectoryOrCreate"}}, name
        flags = flags_of(docs, "DaemonSet", "hairpin-proxy-etchosts")
        assert flags["hosts_file"] == mounts["host-hosts"], name
        assert flags["write_method"] == "in-place", name
        assert flags["state_dir"] == mounts["state"], name
        # A host-side rename orphans the mounted inode: the pod then turns NotReady.
        probe = " ".join(container["readinessProbe"]["exec"]["command"])
        assert "st_nlink" in probe and mounts["host-hosts"] in probe, name
        # It reads the host list where the controller publishes it, not in its own namespace.
        assert flags["namespace"] == "hairpin-proxy", name
        assert flags["publish_configmap"] == controller_flags(docs)["publish_configmap"], name
        roots = [w["metadata"]["name"] for w in workloads(docs)
                 if pod_spec(w).get("securityContext", {}).get("runAsUser") == 0]
        assert roots == ["hairpin-proxy-etchosts"], name
        # Nothing else runs in the node agent's namespace.
        assert [w["metadata"]["name"] for w in workloads(docs)
                if w["metadata"]["namespace"] == NODE_NAMESPACE] == ["hairpin-proxy-etchosts"]
        # Root + hostPath is outside every Pod Security level but "privileged" (baseline
        # forbids any hostPath), so only that namespace is privileged; ours stays restricted.
        node_ns = find(docs, "Namespace", NODE_NAMESPACE)
        assert node_ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == (
            "privileged"), name
        assert find(docs, "Namespace", "hairpin-proxy")["metadata"]["labels"][
            "pod-security.kubernetes.io/enforce"] == "restricted", name
    assert find(renders["base"], "Namespace", "hairpin-proxy")["metadata"]["labels"][
        "pod-security.kubernetes.io/enforce"] == "restricted"
    # The overlay deletes in file order like the base: our namespace first (the controller's
    # cue to withdraw its rules), the node agent's namespace before its objects are re-created.
    order = [(d["kind"], d["metadata"]["name"]) for d in renders["overlays/etchosts"]]
    assert order[0] == ("Namespace", "hairpin-proxy")
    assert order.index(("Namespace", NODE_NAMESPACE)) < order.index(
        ("DaemonSet", "hairpin-proxy-etchosts"))


def test_proxy_deployment_service_and_budget(renders: dict[str, list[Doc]]) -> None:
    docs = renders["base"]
    deploy = find(docs, "Deployment", "hairpin-proxy", "hairpin-proxy")
    assert deploy["spec"]["replicas"] == 2
    spec = pod_spec(deploy)
    assert spec["automountServiceAccountToken"] is False
    assert any(t["topologyKey"] == "kubernetes.io/hostname"
               for t in spec["topologySpreadConstraints"])
    assert spec["affinity"]["podAntiAffinity"]
    container = spec["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    # The client's own ports, so that the PROXY header's destination port is the one it
    # dialed; the unprivileged-port sysctl lets the non-root proxy bind them.
    assert ports == {"http": 80, "https": 443, "admin": 9090}
    assert {"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"} in \
        spec["securityContext"]["sysctls"]
    assert spec["securityContext"]["runAsNonRoot"] is True

    service = find(docs, "Service", "hairpin-proxy", "hairpin-proxy")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
    resolved = {p["port"]: ports[p["targetPort"]] if isinstance(p["targetPort"], str)
                else p["targetPort"] for p in service["spec"]["ports"]}
    assert resolved == {80: 80, 443: 443}

    for name in ("hairpin-proxy", "hairpin-proxy-controller"):
        budget = find(docs, "PodDisruptionBudget", name, "hairpin-proxy")
        target = find(docs, "Deployment", name, "hairpin-proxy")
        assert budget["spec"]["minAvailable"] == 1
        assert budget["spec"]["selector"]["matchLabels"] == target["spec"]["selector"][
            "matchLabels"]
        assert target["spec"]["replicas"] >= 2


def test_proxy_shutdown_fits_the_grace_period(renders: dict[str, list[Doc]]) -> None:
    """preStop delay + the proxy's own drain (--grace-period) end before the kubelet's SIGKILL."""
    for name in ("base", "components/proxy-v2", "components/traefik"):
        deploy = find(renders[name], "Deployment", "hairpin-proxy")
        spec = pod_spec(deploy)
        container = spec["containers"][0]
        sleep = container["lifecycle"]["preStop"]["exec"]["command"]
        assert sleep[0] == "sleep"
        flags = flags_of(renders[name], "Deployment", "hairpin-proxy")
        drain = float(flags["grace_period"])
        assert int(sleep[1]) + drain + 5 <= spec["terminationGracePeriodSeconds"], name


def test_the_proxy_runs_two_workers_by_default(renders: dict[str, list[Doc]]) -> None:
    """--workers 0 takes the CPU limit (the cgroup quota) rounded up: the manifests give two,
    and memory for both workers' idle processes beside their connections."""
    from hairpin_proxy.relay import limits

    deploy = find(renders["base"], "Deployment", "hairpin-proxy", "hairpin-proxy")
    container = pod_spec(deploy)["containers"][0]
    flags = flags_of(renders["base"], "Deployment", "hairpin-proxy")
    assert int(flags.get("workers", 0)) == 0
    cpu = container["resources"]["limits"]["cpu"]
    quota = float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)
    assert limits.auto_workers(quota, cpus=64) == 2
    memory = container["resources"]["limits"]["memory"]
    assert memory.endswith("Mi")
    per_worker = limits.connection_limit(str(int(memory[:-2]) << 20), None, 65536, processes=2)
    assert per_worker >= 271  # no fewer connections than one worker had in 256 MiB


def test_controller_elects_a_leader_and_knows_its_namespace(
        renders: dict[str, list[Doc]]) -> None:
    ctl = pod_spec(find(renders["base"], "Deployment", "hairpin-proxy-controller"))["containers"][0]
    assert ctl["args"][:2] == ["controller", "--leader-elect"]
    env = {e["name"]: e for e in ctl["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_one_image_everywhere(renders: dict[str, list[Doc]]) -> None:
    images = yaml.safe_load((DEPLOY / "components" / "image" / "kustomization.yaml")
                            .read_text())["images"]
    assert len(images) == 1
    expected = f"{images[0]['newName']}:{images[0]['newTag']}"
    for name, docs in renders.items():
        for w in workloads(docs):
            for c in pod_spec(w)["containers"]:
                assert c["image"] == expected, f"{name}: {w['metadata']['name']}"


def test_component_effects(renders: dict[str, list[Doc]]) -> None:
    def container(render_name: str, deploy: str) -> dict[str, Any]:
        c: dict[str, Any] = pod_spec(find(renders[render_name], "Deployment", deploy))[
            "containers"][0]
        return c

    def target(render_name: str) -> str:
        env = {e["name"]: e.get("value") for e in container(render_name, "hairpin-proxy")["env"]}
        return str(env["TARGET_SERVER"])

    assert target("base") == "ingress-nginx-controller.ingress-nginx.svc.cluster.local"
    assert target("components/traefik") == "traefik.traefik.svc.cluster.local"
    assert target("overlays/k3s") == "traefik.kube-system.svc.cluster.local"
    assert "--proxy-protocol=v2" in container("components/proxy-v2", "hairpin-proxy")["args"]
    assert "--mode=coredns-import" in container("components/coredns-import",
                                                "hairpin-proxy-controller")["args"]
    assert "--configmap-name=rke2-coredns-rke2-coredns" in container(
        "components/rke2", "hairpin-proxy-controller")["args"]


# --------------------------------------------------------------------------- CLI consistency

def test_every_container_arg_is_a_real_flag(renders: dict[str, list[Doc]]) -> None:
    commands = subparsers()
    by_name = {c.name: c for c in COMMANDS}
    for name, docs in renders.items():
        for w in workloads(docs):
            for c in pod_spec(w)["containers"]:
                what = f"{name}: {w['metadata']['name']}/{c['name']}"
                args = list(c.get("args", []))
                assert not c.get("command"), f"{what}: use args; the entrypoint is the CLI"
                assert args and args[0] in commands, f"{what}: unknown command {args[:1]}"
                sub = commands[args[0]]
                for arg in args[1:]:
                    if arg.startswith("--"):
                        flag = arg.split("=", 1)[0]
                        assert flag in sub._option_string_actions, f"{what}: unknown {flag}"
                # The whole command line parses, and its values convert into settings.
                namespace = build_parser().parse_args(args)
                del namespace.command
                settings_cls = by_name[args[0]].settings
                literal_env = {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}
                settings_from_args(settings_cls, namespace, environ=literal_env)
                known_env = {env_name(f) for f in dataclasses.fields(settings_cls)}
                if issubclass(settings_cls, KubeSettings):
                    known_env.add("POD_NAMESPACE")
                for e in c.get("env", []):
                    assert e["name"] in known_env, f"{what}: env {e['name']} is not read"


def test_every_listen_address_serves_ipv6_only_and_dual_stack_clusters(
        renders: dict[str, list[Doc]]) -> None:
    """An IPv4 wildcard in a manifest would refuse the kubelet's probes and Prometheus on an
    IPv6-only cluster: every address a workload listens on is ``[::]`` (dual-stack where the
    node has IPv4 too) or left to the command's default, which is."""
    seen = 0
    for name, docs in renders.items():
        for w in workloads(docs):
            for c in pod_spec(w)["containers"]:
                for arg in c.get("args", []):
                    flag, _, value = arg.partition("=")
                    if flag.endswith("-listen") or flag == "--targets-address":
                        seen += 1
                        assert value in ("", "::") or value.startswith("[::]:"), \
                            f"{name}: {w['metadata']['name']}: {arg}"
    assert seen  # the etchosts agent sets its admin address


def test_flag_check_catches_a_misspelt_flag() -> None:
    sub = subparsers()["controller"]
    assert "--leader-elect" in sub._option_string_actions
    assert "--leader-election" not in sub._option_string_actions


# --------------------------------------------------------------------------- RBAC

def rbac_problems(docs: list[Doc]) -> list[str]:
    """Everything about the RBAC in one render that breaks least privilege."""
    problems = []
    for d in docs:
        if d["kind"] not in ("Role", "ClusterRole"):
            continue
        where = f"{d['kind']}/{d['metadata']['name']}"
        for rule in d.get("rules", []):
            for key in ("verbs", "resources", "apiGroups", "resourceNames"):
                if "*" in rule.get(key, []) or any("*" in v for v in rule.get(key, [])):
                    problems.append(f"{where}: wildcard in {key}")
            verbs = set(rule["verbs"])
            resources = set(rule.get("resources", []))
            if verbs & FORBIDDEN_VERBS:
                problems.append(f"{where}: forbidden verbs {sorted(verbs & FORBIDDEN_VERBS)}")
            if resources & {"secrets", "pods/exec", "serviceaccounts/token", "nodes"}:
                problems.append(f"{where}: sensitive resources {sorted(resources)}")
            if rule.get("nonResourceURLs"):
                problems.append(f"{where}: nonResourceURLs")
            if "configmaps" in resources and not rule.get("resourceNames") and verbs != {
                    "create"}:
                problems.append(f"{where}: configmaps without resourceNames ({sorted(verbs)})")
            if d["kind"] == "ClusterRole" and not verbs <= READ_VERBS and resources != {
                    "events"}:
                problems.append(f"{where}: cluster-wide write on {sorted(resources)}")
    return problems


# Opt-in grants beyond least privilege, each the price of a feature its component documents.
OPT_IN_RBAC = {
    # RBAC cannot limit writes to labelled objects: the guard must be able to create, update
    # and delete NetworkPolicies in any data plane's namespace (it lists with its own label
    # selector and writes only its own; docs/forged-proxy-header.md). Nodes are only read, for
    # their spec.podCIDRs.
    "components/guard-data-planes": [
        "ClusterRole/hairpin-proxy-controller-guard: cluster-wide write on ['networkpolicies']",
        "ClusterRole/hairpin-proxy-controller-guard: sensitive resources ['nodes']"],
}


def test_rbac_is_least_privilege(renders: dict[str, list[Doc]]) -> None:
    for name, docs in renders.items():
        assert rbac_problems(docs) == OPT_IN_RBAC.get(name, []), name


def test_rbac_checker_flags_broad_rules() -> None:
    role: Doc = {"kind": "ClusterRole", "metadata": {"name": "x"}, "rules": [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "update"]},
        {"apiGroups": ["*"], "resources": ["ingresses"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
    ]}
    problems = rbac_problems([role])
    assert any("configmaps without resourceNames" in p for p in problems)
    assert any("wildcard in apiGroups" in p for p in problems)
    assert any("sensitive" in p for p in problems)
    assert any("cluster-wide write" in p for p in problems)


def allowed(docs: list[Doc], sa: str, namespace: str, group: str,  # noqa: PLR0917 - one
            resource: str, verb: str, name: str | None = None,  # RBAC request's fields
            *, sa_namespace: str = "hairpin-proxy") -> bool:
    """Whether ServiceAccount <sa_namespace>/<sa> may do this, per the rendered bindings."""
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in docs
             if d["kind"] in ("Role", "ClusterRole")}
    for b in docs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s["kind"] == "ServiceAccount" and s["name"] == sa
                   and s["namespace"] == sa_namespace for s in b["subjects"]):
            continue
        scope = b["metadata"].get("namespace")
        if scope is not None and scope != namespace:
            continue
        ref = b["roleRef"]
        role = roles.get((ref["kind"], scope if ref["kind"] == "Role" else None, ref["name"]))
        assert role is not None, f"binding {b['metadata']['name']} points at a missing role"
        for rule in role["rules"]:
            if (group in rule["apiGroups"] and resource in rule["resources"]
                    and verb in rule["verbs"]
                    and (not rule.get("resourceNames") or name in rule["resourceNames"])):
                return True
    return False


def flags_of(docs: list[Doc], kind: str, name: str) -> dict[str, str]:
    """The settings a workload's command line produces, as strings."""
    args = pod_spec(find(docs, kind, name))["containers"][0]["args"]
    namespace = build_parser().parse_args(args)
    del namespace.command
    settings = settings_from_args(next(c.settings for c in COMMANDS if c.name == args[0]),
                                  namespace, environ={})
    return {k: str(v) for k, v in dataclasses.asdict(settings).items()}


def controller_flags(docs: list[Doc]) -> dict[str, str]:
    return flags_of(docs, "Deployment", "hairpin-proxy-controller")


@pytest.mark.parametrize("job", sorted(CLEANUP_FOR))
def test_cleanup_job_matches_its_install(renders: dict[str, list[Doc]], job: str) -> None:
    """The cleanup Job targets the ConfigMap its install writes, and may change it."""
    installed = renders[CLEANUP_FOR[job]]
    ctl = controller_flags(installed)
    cleanup = flags_of(renders[job], "Job", "hairpin-proxy-cleanup")
    for key in ("mode", "configmap_namespace", "configmap_name", "configmap_key",
                "import_configmap_name", "import_key"):
        assert cleanup[key] == ctl[key], (job, key)
    # The published hosts are deleted wherever they may be: an earlier version, or this one
    # with the node agent, wrote them.
    assert cleanup["publish_configmap"] == PUBLISHED
    assert ctl["publish_configmap"] in ("", PUBLISHED)
    spec = pod_spec(find(renders[job], "Job", "hairpin-proxy-cleanup"))
    assert spec["serviceAccountName"] == "hairpin-proxy-controller"
    assert spec["restartPolicy"] == "Never"
    written = (cleanup["import_configmap_name"] if cleanup["mode"] == "coredns-import"
               else cleanup["configmap_name"])
    assert allowed(installed, "hairpin-proxy-controller", cleanup["configmap_namespace"], "",
                   "configmaps", "update", written)
    assert allowed(installed, "hairpin-proxy-controller", "hairpin-proxy", "", "configmaps",
                   "delete", cleanup["publish_configmap"])


@pytest.mark.parametrize("name", ["base", "overlays/k3s", "overlays/aks", "overlays/rke2",
                                  "overlays/etchosts", "components/coredns-import",
                                  "components/rke2", "components/nudge-coredns"])
def test_controller_may_do_exactly_what_its_flags_say(
        renders: dict[str, list[Doc]], name: str) -> None:
    docs = renders[name]
    flags = controller_flags(docs)
    sa, own = "hairpin-proxy-controller", "hairpin-proxy"
    dns_ns = flags["configmap_namespace"]
    written = (flags["import_configmap_name"] if flags["mode"] == "coredns-import"
               else flags["configmap_name"])
    for verb in ("get", "list", "watch", "update"):
        assert allowed(docs, sa, dns_ns, "", "configmaps", verb, written), (name, verb)
    # ... and no other ConfigMap there may be changed.
    assert not allowed(docs, sa, dns_ns, "", "configmaps", "update", "kube-root-ca.crt")
    if flags["mode"] == "coredns-import":
        # cleanup deletes the import ConfigMap when it created it and it is left empty.
        assert allowed(docs, sa, dns_ns, "", "configmaps", "create")
        assert allowed(docs, sa, dns_ns, "", "configmaps", "delete", written)
        assert not allowed(docs, sa, dns_ns, "", "configmaps", "update", flags["configmap_name"])
        assert allowed(docs, sa, dns_ns, "", "configmaps", "get", flags["configmap_name"])
    else:
        assert not allowed(docs, sa, dns_ns, "", "configmaps", "delete", written)
        assert not allowed(docs, sa, dns_ns, "", "configmaps", "create")
    # NodeLocal DNSCache's ConfigMap (upstream or kubespray name), kept in step, by name.
    for cache in ("node-local-dns", "nodelocaldns"):
        for verb in ("get", "list", "watch", "update"):
            assert allowed(docs, sa, "kube-system", "", "configmaps", verb, cache), (cache, verb)
    # The proxy's endpoints (withdrawal when none is ready) in our namespace only; Namespaces
    # read-only (our own's deletion is the uninstall, the others' labels decide which routes a
    # Gateway listener admits).
    for verb in ("list", "watch"):
        assert allowed(docs, sa, own, "discovery.k8s.io", "endpointslices", verb)
        assert not allowed(docs, sa, "default", "discovery.k8s.io", "endpointslices", verb)
        assert allowed(docs, sa, "", "", "namespaces", verb, own)
        assert allowed(docs, sa, "", "", "namespaces", verb, "kube-system")
    for verb in ("update", "patch", "delete", "create"):
        assert not allowed(docs, sa, "", "", "namespaces", verb, "kube-system")
    # The per-target proxy Services: written in our namespace only.
    for verb in ("create", "update", "delete"):
        assert allowed(docs, sa, own, "", "services", verb)
        assert not allowed(docs, sa, "default", "", "services", verb)
    # Only the opt-in nudge may patch pods, and only in the CoreDNS namespace.
    assert allowed(docs, sa, dns_ns, "", "pods", "patch") == (flags["nudge_coredns"] == "True")
    assert not allowed(docs, sa, own, "", "pods", "patch")
    for verb in sorted(READ_VERBS):
        assert allowed(docs, sa, "any-namespace", "", "services", verb)
    for kind in ("ingresses", "ingressclasses"):
        for verb in ("list", "watch"):
            assert allowed(docs, sa, "any-namespace", "networking.k8s.io", kind, verb)
        assert not allowed(docs, sa, "any-namespace", "networking.k8s.io", kind, "update")
    assert allowed(docs, sa, "any-namespace", "", "events", "create")
    assert allowed(docs, sa, own, "coordination.k8s.io", "leases", "create")
    for verb in ("get", "update"):
        assert allowed(docs, sa, own, "coordination.k8s.io", "leases", verb, flags["lease_name"])
        assert not allowed(docs, sa, own, "coordination.k8s.io", "leases", verb, "other")
    # The published hosts, granted whether or not they are published (the etchosts component
    # turns publishing on with a flag alone).
    for verb in ("get", "watch", "update", "delete"):
        assert allowed(docs, sa, own, "", "configmaps", verb, PUBLISHED)
    # Nothing is ever patched but the nudged pods: writes are PUTs with a resourceVersion.
    assert not allowed(docs, sa, dns_ns, "", "configmaps", "patch", written)
    assert not allowed(docs, sa, "default", "", "configmaps", "get", PUBLISHED)
    # The proxy has no API access at all.
    assert not any(s["name"] == "hairpin-proxy" for b in docs
                   if b["kind"].endswith("Binding") for s in b["subjects"])


def test_the_controller_publishes_the_hosts_only_where_the_node_agent_runs(
        renders: dict[str, list[Doc]]) -> None:
    """Nothing else reads them, and their ConfigMap's room would limit the hosts: the etchosts
    component gives the controller --publish-configmap; without it the flag is absent."""
    checked: set[str] = set()
    for name, docs in sorted(renders.items()):
        if not any(d["kind"] == "Deployment" and d["metadata"]["name"] ==
                   "hairpin-proxy-controller" for d in docs):
            continue
        checked.add(name)
        agent = any(d["kind"] == "DaemonSet" and d["metadata"]["name"] ==
                    "hairpin-proxy-etchosts" for d in docs)
        args = pod_spec(find(docs, "Deployment", "hairpin-proxy-controller"))[
            "containers"][0]["args"]
        flags = [a for a in args if a.startswith("--publish-configmap")]
        assert flags == ([f"--publish-configmap={PUBLISHED}"] if agent else []), name
        assert controller_flags(docs)["publish_configmap"] == (PUBLISHED if agent else ""), name
    assert {"base", "components/etchosts", "overlays/etchosts"} <= checked


def test_etchosts_agent_may_only_read_the_published_hosts(
        renders: dict[str, list[Doc]]) -> None:
    sa = "hairpin-proxy-etchosts"
    for name in ("components/etchosts", "overlays/etchosts"):
        docs = renders[name]
        published = controller_flags(docs)["publish_configmap"]
        may = functools.partial(allowed, docs, sa, sa_namespace=NODE_NAMESPACE)
        # The service account lives in the agent's namespace; the grant is in the main one.
        find(docs, "ServiceAccount", sa, NODE_NAMESPACE)
        for verb in sorted(READ_VERBS):
            assert may("hairpin-proxy", "", "configmaps", verb, published), (name, verb)
        assert not may("hairpin-proxy", "", "configmaps", "update", published), name
        assert not may("hairpin-proxy", "", "configmaps", "get", "other"), name
        assert not may("hairpin-proxy", "", "configmaps", "list"), name
        # Nothing in its own namespace, nothing cluster-wide.
        assert not may(NODE_NAMESPACE, "", "configmaps", "get", published), name
        assert not may("any", "networking.k8s.io", "ingresses", "list"), name
        assert not any(b["kind"] == "ClusterRoleBinding" and any(
            s["name"] == sa for s in b["subjects"]) for b in docs), name
        # Bound to exactly one Role, whose only rule is that one.
        bindings = [b for b in docs if b["kind"].endswith("Binding")
                    and any(s["name"] == sa for s in b["subjects"])]
        assert [(b["metadata"]["namespace"], b["roleRef"]["name"]) for b in bindings] == [
            ("hairpin-proxy", sa)], name
        role = find(docs, "Role", sa, "hairpin-proxy")
        assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"],
                                  "resourceNames": [published],
                                  "verbs": ["get", "list", "watch"]}], name
        # No leftover service account of that name in the main namespace.
        assert not any(d["kind"] == "ServiceAccount" and d["metadata"]["name"] == sa
                       and d["metadata"]["namespace"] == "hairpin-proxy" for d in docs), name


def test_no_container_refers_to_a_variable(renders: dict[str, list[Doc]]) -> None:
    """No arg, command or env value uses $(VAR): the order of a container's variables then
    means nothing, which the chart's equivalence test relies on (Kustomize moves a patched
    variable first)."""
    for name, docs in renders.items():
        for w in workloads(docs):
            for c in pod_spec(w)["containers"]:
                texts = [*c.get("args", []), *c.get("command", []),
                         *(e.get("value", "") for e in c.get("env", []))]
                assert not [t for t in texts if "$(" in str(t)], (name, c["name"])
