"""The commands in the docs' shell blocks work on what the project installs.

Every ``kubectl`` command that names one of our namespaces, objects or labels is checked against
the rendered manifests (every overlay, component and cleanup Job) and the objects the
controller creates itself; every ``hairpin-proxy <command> --flag`` against that command's
parser. A failure names the doc, its line and the command.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hairpin_proxy.cli import COMMANDS
from hairpin_proxy.controller import holds
from hairpin_proxy.edits.configmap import MANAGED_BY
from hairpin_proxy.edits.slot_table import slot_service
from hairpin_proxy.settings import (
    ControllerSettings,
    EtchostsSettings,
    SettingsError,
    settings_from_args,
)
from tests.deploy.doc_commands import Command, commands, placeholder
from tests.deploy.rendering import REPO, Doc, find, subparsers

DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md"),
               *(REPO / "docs" / "platforms").glob("*.md")])
OURS = "hairpin-proxy"
KINDS = {
    "svc": "Service", "service": "Service", "services": "Service",
    "cm": "ConfigMap", "configmap": "ConfigMap", "configmaps": "ConfigMap",
    "deploy": "Deployment", "deployment": "Deployment", "deployments": "Deployment",
    "ds": "DaemonSet", "daemonset": "DaemonSet", "daemonsets": "DaemonSet",
    "sa": "ServiceAccount", "serviceaccount": "ServiceAccount",
    "serviceaccounts": "ServiceAccount",
    "job": "Job", "jobs": "Job", "lease": "Lease", "leases": "Lease",
    "role": "Role", "roles": "Role", "rolebinding": "RoleBinding",
    "rolebindings": "RoleBinding", "clusterrole": "ClusterRole", "clusterroles": "ClusterRole",
    "clusterrolebinding": "ClusterRoleBinding", "clusterrolebindings": "ClusterRoleBinding",
    "ns": "Namespace", "namespace": "Namespace", "namespaces": "Namespace",
    "po": "Pod", "pod": "Pod", "pods": "Pod",
    "netpol": "NetworkPolicy", "networkpolicy": "NetworkPolicy",
    "networkpolicies": "NetworkPolicy",
}
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "Namespace"}
# Objects the docs tell the reader to delete because an earlier install left them: the original
# hairpin-proxy's (install.md, "Migrating from the original hairpin-proxy") and the node agent's
# before it moved to its own namespace (etchosts.md, "Upgrading from the directory-mount
# layout"). No manifest of ours holds them, by design.
FORMER = {
    ("Deployment", OURS, "hairpin-proxy-haproxy"),
    ("DaemonSet", OURS, "hairpin-proxy-etchosts-controller"),
    ("ServiceAccount", OURS, "hairpin-proxy-controller-sa"),
    ("ClusterRoleBinding", "", "hairpin-proxy-controller-crb"),
    ("ClusterRole", "", "hairpin-proxy-controller-cr"),
    ("RoleBinding", "kube-system", "hairpin-proxy-controller-rb"),
    ("Role", "kube-system", "hairpin-proxy-controller-r"),
    ("DaemonSet", OURS, "hairpin-proxy-etchosts"),
    ("ServiceAccount", OURS, "hairpin-proxy-etchosts"),
}
# kubectl options that take a value (the next word unless written --opt=value).
VALUED = {"-n", "--namespace", "-l", "--selector", "-o", "--output", "-f", "--filename", "-k",
          "--kustomize", "--field-selector", "-p", "--patch", "--type", "-c", "--container",
          "--sort-by", "--for", "--timeout", "--image", "-L", "--label-columns", "--replicas",
          "--restart", "--context", "--kubeconfig", "--tail", "--since"}
# Verbs whose positional words name existing objects (`rollout` and `set` take a sub-verb).
OBJECT_VERBS = {"get", "describe", "delete", "edit", "patch", "scale", "annotate", "label",
                "wait", "logs", "exec", "rollout", "set"}


@dataclass
class Kubectl:
    verb: str = ""
    namespace: str = "default"
    all_namespaces: bool = False
    selector: str = ""
    objects: list[tuple[str, str]] = field(default_factory=list)  # (kind word, name)
    after_dashes: tuple[str, ...] = ()


def parse_kubectl(words: tuple[str, ...]) -> Kubectl:
    out, positional, i = Kubectl(), [], 1
    while i < len(words):
        word = words[i]
        if word == "--":
            out.after_dashes = words[i + 1:]
            break
        name, eq, value = word.partition("=")
        if word.startswith("-") and name in VALUED:
            if not eq:
                i += 1
                value = words[i] if i < len(words) else ""
            if name in ("-n", "--namespace"):
                out.namespace = value
            elif name in ("-l", "--selector"):
                out.selector = value
        elif word in ("-A", "--all-namespaces"):
            out.all_namespaces = True
        elif not word.startswith("-") and word != ">":
            positional.append(word)
        elif word == ">":
            i += 1
        i += 1
    if positional:
        out.verb = positional.pop(0)
        if out.verb in ("rollout", "set") and positional:
            positional.pop(0)
    if out.verb in OBJECT_VERBS:
        out.objects = _objects(out.verb, [w for w in positional if "=" not in w])
    return out


def _objects(verb: str, positional: list[str]) -> list[tuple[str, str]]:
    if not positional:
        return []
    if all("/" in w for w in positional) or verb in ("logs", "exec"):
        pairs = [w.partition("/") for w in positional[:1 if verb in ("logs", "exec") else None]]
        return [(k, n) if sep else ("pod", k) for k, sep, n in pairs]
    kinds, names = positional[0], positional[1:]
    return [(kind, name) for kind in kinds.split(",") for name in names] or [
        (kind, "") for kind in kinds.split(",")]


# ------------------------------------------------------------------- what exists in a cluster

@dataclass(frozen=True)
class Known:
    kind: str
    namespace: str
    name: str
    labels: dict[str, str]
    replicas: int = 1


def runtime_objects(base: list[Doc]) -> Iterator[Known]:
    """What the controller creates itself, named by its code and its settings' defaults."""
    s = ControllerSettings()
    main = find(base, "Service", s.proxy_service, OURS)
    table = {"metadata": {"name": s.targets_configmap, "uid": "u"}}
    for slot in (1, 2, 3):
        svc = slot_service(OURS, slot, "gateway/web/public", main, table)
        yield Known("Service", OURS, svc["metadata"]["name"], svc["metadata"]["labels"])
    # The published hosts: only with the node agent, whose flag names them as its own default.
    for name in (s.targets_configmap, EtchostsSettings().publish_configmap):
        yield Known("ConfigMap", OURS, name, dict(MANAGED_BY))
    yield Known("Lease", OURS, s.lease_name, {})
    yield Known("RoleBinding", s.configmap_namespace, holds.WITHDRAWAL, holds.LABELS)
    yield Known("Role", OURS, holds.RELEASE, holds.LABELS)
    yield Known("RoleBinding", OURS, holds.RELEASE, holds.LABELS)


def manifest_objects(renders: dict[str, list[Doc]]) -> Iterator[Known]:
    for docs in renders.values():
        for d in docs:
            meta = d["metadata"]
            ns = "" if d["kind"] in CLUSTER_SCOPED else meta.get("namespace", "default")
            yield Known(d["kind"], ns, meta["name"], meta.get("labels") or {},
                        (d.get("spec") or {}).get("replicas", 1))
            template = (d.get("spec") or {}).get("template") or {}
            if d["kind"] in ("Deployment", "DaemonSet", "Job") and template:
                labels = (template.get("metadata") or {}).get("labels") or {}
                yield Known("Pod", ns, "", labels)


@pytest.fixture(scope="module")
def known(renders: dict[str, list[Doc]]) -> list[Known]:
    return [*manifest_objects(renders), *runtime_objects(renders["base"])]


def matches(selector: str, labels: dict[str, str]) -> bool:
    """Equality-based label selectors, as kubectl's -l reads them."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, _, v = term.partition("!=")
            ok = labels.get(k) != v
        elif "=" in term:
            k, _, v = term.replace("==", "=").partition("=")
            ok = labels.get(k) == v
        else:
            ok = (term[1:] not in labels) if term.startswith("!") else term in labels
        if not ok:
            return False
    return True


def kubectl_problems(cmd: Command, known: list[Known]) -> Iterator[str]:
    call = parse_kubectl(cmd.words)
    ns = call.namespace
    ours = ns.startswith(OURS) and not placeholder(ns)
    if ours and not any(k.kind == "Namespace" and k.name == ns for k in known):
        yield f"no namespace {ns} in the manifests"
    for word, name in call.objects:
        kind = KINDS.get(word.lower())
        # Pods are named by their controllers at run time, never in a manifest.
        if kind in (None, "Pod") or not name or placeholder(name):
            continue
        where = "" if kind in CLUSTER_SCOPED else ns
        if not (ours or name.startswith(OURS)) or (kind, where, name) in FORMER:
            continue
        found = [k for k in known if (k.kind, k.namespace, k.name) == (kind, where, name)]
        if not found:
            yield (f"no {kind} {where + '/' if where else ''}{name} in the manifests or made "
                   "by the controller (an object of an earlier install belongs in FORMER)")
        elif call.verb == "logs" and kind == "Deployment" and found[0].replicas > 1:
            yield (f"logs of Deployment {name} read one of its {found[0].replicas} replicas: "
                   "name the pod (the Lease holder, for the controller) or use -l")
    if call.selector and ours and not placeholder(call.selector):
        kinds = {KINDS.get(w.lower()) for w, _ in call.objects} - {None}
        if not any(matches(call.selector, k.labels) for k in known
                   if k.namespace == ns and (not kinds or k.kind in kinds)):
            yield f"-l {call.selector}: nothing in {ns} of that kind carries these labels"


# ------------------------------------------------------------------- hairpin-proxy invocations

def invocations(cmd: Command) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(command, its arguments) for each hairpin-proxy run in ``cmd``: directly, through
    `kubectl exec ... --`, or as the image's arguments in `kubectl run --image=... --`."""
    words = cmd.words
    names = {c.name for c in COMMANDS}
    if words[0] == "kubectl" and words[1:2] == ("run",):
        image = next((w for w in words if w.startswith("--image=")), "")
        rest = parse_kubectl(words).after_dashes
        if f"{OURS}/{OURS}:" in image and rest and rest[0] in names:
            yield rest[0], rest[1:]
            return
    for i, word in enumerate(words[:-1]):
        if word.rsplit("/", 1)[-1] == OURS and words[i + 1] in names:
            yield words[i + 1], words[i + 2:]


def flag_problems(command: str, args: tuple[str, ...]) -> Iterator[str]:
    """Each flag of ``args`` (with its value, unless a placeholder) through the command's own
    parser and settings layer, one at a time: what `hairpin-proxy` itself would refuse."""
    parser = subparsers()[command]
    settings = next(c.settings for c in COMMANDS if c.name == command)
    for i, word in enumerate(args):
        if not word.startswith("--") or word == "--":
            continue
        name, eq, value = word.partition("=")
        action = parser._option_string_actions.get(name)
        if action is None:
            yield f"hairpin-proxy {command} has no flag {name}"
            continue
        if action.nargs == 0:
            continue
        if not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
        if not value or placeholder(value):
            continue
        try:
            settings_from_args(settings, parser.parse_args([f"{name}={value}"]))
        except (SettingsError, SystemExit) as exc:
            yield f"hairpin-proxy {command} {name} {value}: refused ({exc})"


def doc_commands(doc: Path) -> list[Command]:
    return list(commands(doc))


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_kubectl_commands_name_what_is_installed(doc: Path, known: list[Known]) -> None:
    wrong = [f"{cmd.where(REPO)}\n    {problem}" for cmd in doc_commands(doc)
             if cmd.words[0] == "kubectl" for problem in kubectl_problems(cmd, known)]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_hairpin_proxy_commands_use_real_flags(doc: Path) -> None:
    wrong = [f"{cmd.where(REPO)}\n    {problem}" for cmd in doc_commands(doc)
             for command, args in invocations(cmd) for problem in flag_problems(command, args)]
    assert not wrong, "\n".join(wrong)


# ------------------------------------------------------------------- the checks are not vacuous

def _doc(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "page.md"
    path.write_text(text)
    return path


def test_commands_are_read_from_shell_blocks_and_command_spans_only(tmp_path: Path) -> None:
    doc = _doc(tmp_path, "Run `kubectl -n hairpin-proxy get svc` or the block:\n\n"
                         "```shell\nkubectl -n hairpin-proxy logs \\\n  deploy/x | grep y  # z\n"
                         "kubectl run a -- sh -c '\n  echo 1'\n```\n\n"
                         "```yaml\nkubectl: not a command\n```\nprose kubectl get no\n")
    got = [(c.line, c.words) for c in commands(doc)]
    assert got == [(4, ("kubectl", "-n", "hairpin-proxy", "logs", "deploy/x")),
                   (4, ("grep", "y")),
                   (6, ("kubectl", "run", "a", "--", "sh", "-c", "\n  echo 1")),
                   (1, ("kubectl", "-n", "hairpin-proxy", "get", "svc"))]


@pytest.mark.parametrize(("line", "problem"), [
    ("kubectl -n hairpin-proxy get svc -l app.kubernetes.io/managed-by=hairpin-proxy-controller",
     "-l app.kubernetes.io/managed-by=hairpin-proxy-controller: nothing"),
    ("kubectl -n hairpin-proxy logs deployment/hairpin-proxy-controller", "read one of its 2"),
    ("kubectl -n hairpin-proxy get configmap hairpin-proxy-target", "no ConfigMap"),
    ("kubectl -n hairpin-proxy-nodes get pods", "no namespace hairpin-proxy-nodes"),
    ("kubectl -n kube-system get role hairpin-proxy-coredns", "no Role kube-system/"),
])
def test_kubectl_check_finds_each_kind_of_mistake(tmp_path: Path, known: list[Known],
                                                  line: str, problem: str) -> None:
    [cmd] = commands(_doc(tmp_path, f"```sh\n{line}\n```\n"))
    assert any(problem in p for p in kubectl_problems(cmd, known)), line


@pytest.mark.parametrize("line", [
    "kubectl -n hairpin-proxy get svc -l app.kubernetes.io/managed-by=hairpin-proxy",
    "kubectl -n hairpin-proxy get svc hairpin-proxy-t1 -l hairpin-proxy.io/slot=1",
    "kubectl -n hairpin-proxy get pods -l app.kubernetes.io/component=controller",
    "kubectl -n hairpin-proxy-node logs daemonset/hairpin-proxy-etchosts",
    "kubectl -n hairpin-proxy get lease hairpin-proxy-controller",
    "kubectl -n hairpin-proxy logs job/hairpin-proxy-cleanup",
    "kubectl -n web get svc -l gateway.networking.k8s.io/gateway-name=public",
])
def test_kubectl_check_accepts_what_exists(tmp_path: Path, known: list[Known],
                                           line: str) -> None:
    [cmd] = commands(_doc(tmp_path, f"```sh\n{line}\n```\n"))
    assert list(kubectl_problems(cmd, known)) == []


@pytest.mark.parametrize(("line", "problem"), [
    ("hairpin-proxy cleanup --namespace x --mode import", "--mode import: refused"),
    ("kubectl -n hairpin-proxy exec deployment/hairpin-proxy-controller -- "
     "hairpin-proxy doctor --no-such-flag", "doctor has no flag --no-such-flag"),
    ("kubectl run d --rm --image=ghcr.io/hairpin-proxy/hairpin-proxy:1 -- doctor --hostz",
     "doctor has no flag --hostz"),
    ("hairpin-proxy render --legacy-targets x", "render has no flag --legacy-targets"),
])
def test_flag_check_finds_each_kind_of_mistake(tmp_path: Path, line: str,
                                               problem: str) -> None:
    [cmd] = commands(_doc(tmp_path, f"```sh\n{line}\n```\n"))
    found = [p for command, args in invocations(cmd) for p in flag_problems(command, args)]
    assert any(problem in p for p in found), (line, found)


def test_parsers_are_the_cli_s() -> None:
    assert set(subparsers()) == {c.name for c in COMMANDS}
    assert all(isinstance(p, argparse.ArgumentParser) for p in subparsers().values())
