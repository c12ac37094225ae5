"""The controller and ``render`` compute one desired state (issue 22): every snapshot of the
corpus (tests/plan_corpus/*.yaml) is created in the fake API, the controller reconciles it,
and ``render`` fed what ``kubectl get -o yaml`` would show (the corpus's objects as the cluster
holds them, the proxy's namespace's Services, the targets ConfigMap) must print byte for byte
what the controller wrote: the Corefile (or import snippet), node-local-dns's Corefile, the
hosts file the etchosts agents write from the published hosts, and the targets table. doctor,
asking the same cluster, must read every host (its target and verdict) as the plan does.

Slots settle at once (``--target-settle 0``): render prints the steady state.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from hairpin_proxy import corefile, hostsfile
from hairpin_proxy.cli import build_parser, main
from hairpin_proxy.doctor.cluster import gather, policy_for
from hairpin_proxy.doctor.facts import HostTarget
from hairpin_proxy.kube.client import KubeClient
from hairpin_proxy.kube.config import load as load_kubeconfig
from hairpin_proxy.plan import plan
from hairpin_proxy.policy import proxy_service_fqdn
from hairpin_proxy.published import ENTRIES_KEY, parse_entries
from hairpin_proxy.render import snapshot as render_snapshot
from hairpin_proxy.settings import (
    DoctorSettings,
    RenderSettings,
    flag_name,
    settings_from_args,
)
from hairpin_proxy.sources.registry import KEY_KIND_SPECS
from hairpin_proxy.targets.mapping import parse_target_flags
from hairpin_proxy.targets.model import DEFAULT_KEY
from hairpin_proxy.targets.table import TABLE_KEY
from tests.controller.conftest import COREFILE, NAMESPACE, NODE_LOCAL, PUBLISH, Controller
from tests.fakeapi.crds import ENVOY_CLIENT_TRAFFIC_POLICY, TRAEFIK_INGRESSROUTE
from tests.fakeapi.fixtures import deployment
from tests.fakeapi.server import FakeApiServer
from tests.waiting import wait_until

CORPUS = Path(__file__).parent.parent / "plan_corpus"
CASES = sorted(CORPUS.glob("*.yaml"))
Start = Callable[..., Controller]
Outputs = dict[str, str]
T = TypeVar("T")


def load(path: Path) -> dict[str, Any]:
    case: dict[str, Any] = yaml.safe_load(path.read_text())
    return case


def setup(api: FakeApiServer, case: dict[str, Any]) -> None:
    if "corefile" in case:
        api.patch("ConfigMap", "kube-system", "coredns",
                  {"data": {"Corefile": case["corefile"]}})
    if case.get("gateway_api"):
        api.install_gateway_api(str(case.get("gateway_api_release", "1.4")), "standard")
        api.install(ENVOY_CLIENT_TRAFFIC_POLICY)
    if case.get("traefik"):
        api.install(TRAEFIK_INGRESSROUTE)
    if case.get("proxy_ips"):
        svc = api.get("Service", NAMESPACE, "hairpin-proxy")
        assert svc is not None
        api.delete("Service", NAMESPACE, "hairpin-proxy")
        ips = case["proxy_ips"]
        spec = {**svc["spec"], "clusterIP": ips[0], "clusterIPs": ips,
                "ipFamilies": ["IPv6" if ":" in ip else "IPv4" for ip in ips],
                "ipFamilyPolicy": "RequireDualStack" if len(ips) > 1 else "SingleStack"}
        api.create({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"namespace": NAMESPACE, "name": "hairpin-proxy"},
                    "spec": spec})
    later = set(case.get("created_later", ()))  # "KIND/NAMESPACE/NAME"
    for obj in case["objects"]:
        if obj["kind"] == "Namespace" and api.get("Namespace", None, obj["metadata"]["name"]):
            continue  # made by the fake API for an object created in it earlier
        meta = obj["metadata"]
        where = f"{obj['kind']}/{meta.get('namespace', '')}/{meta['name']}"
        if where in later:
            api.next_second()
            later.discard(where)
        api.create(obj)
    assert not later, f"created_later names no object of the case: {sorted(later)}"


def _data(api: FakeApiServer, namespace: str, name: str) -> dict[str, str]:
    cm = api.get("ConfigMap", namespace, name)
    return dict((cm or {}).get("data") or {})


def written(api: FakeApiServer, mode: str) -> Outputs:
    """What the controller wrote, as the files render prints."""
    out = {"targets": _data(api, NAMESPACE, "hairpin-proxy-targets").get(TABLE_KEY, "")}
    if mode == "coredns-import":
        out["rules"] = _data(api, "kube-system", "coredns-custom").get(
            "hairpin-proxy.override", "")
    else:
        out["rules"] = _data(api, "kube-system", "coredns")["Corefile"]
    if mode == "node-local-dns":
        out["node-local"] = _data(api, "kube-system", "node-local-dns")["Corefile"]
    entries = parse_entries(_data(api, NAMESPACE, "hairpin-proxy-hosts").get(ENTRIES_KEY, ""))
    out["hosts"] = hostsfile.apply_entries("", entries).text
    return out


def inputs(api: FakeApiServer, case: dict[str, Any]) -> list[dict[str, Any]]:
    """The corpus's objects as the cluster holds them, and the proxy namespace's Services and
    targets ConfigMap."""
    objs = []
    for obj in case["objects"]:
        meta = obj["metadata"]
        got = api.get(obj["kind"], meta.get("namespace"), meta["name"])
        assert got is not None
        objs.append(got)
    objs += api.list("Service", NAMESPACE)
    table = api.get("ConfigMap", NAMESPACE, "hairpin-proxy-targets")
    return objs + ([table] if table is not None else [])


def _render(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["render", *argv])
    assert code == 0, f"render {' '.join(argv)} exited {code}"
    return out.getvalue()


def rendered(tmp_path: Path, case: dict[str, Any], objects: list[dict[str, Any]],
             mode: str) -> Outputs:
    manifests = tmp_path / "inputs.json"
    manifests.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    files = {"Corefile": case.get("corefile", COREFILE), "node-local": NODE_LOCAL, "hosts": ""}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    common = ["--ingress", str(manifests), "--namespace", NAMESPACE, *case.get("args", ())]
    cf = ["--corefile", str(tmp_path / "Corefile")]
    # Beside another mode, the Corefile whose served zones the controller reads too.
    zones = cf if "corefile" in case else []
    out: Outputs = {}
    with_table = _render(*cf, "--print-targets", *common)
    table_doc = with_table.split("\n---\n", 1)[1]
    out["targets"] = next(yaml.safe_load_all(table_doc))["data"][TABLE_KEY]
    if mode == "coredns-import":
        out["rules"] = _render("--import-snippet", *zones, *common)
    else:
        out["rules"] = _render(*cf, *common)
    if mode == "node-local-dns":
        out["node-local"] = _render("--node-local-corefile", str(tmp_path / "node-local"),
                                    *zones, *common)
    out["hosts"] = _render("--hosts-file", str(tmp_path / "hosts"), *zones, *common)
    return out


def _settings(cls: type[T], command: str, args: list[str], *, known: bool = False) -> T:
    """``args`` as ``command`` reads them; ``known``: the flags it does not have are left
    out (doctor has no --rules-budget: its verdicts are the plan's targets, before sizes)."""
    parser = build_parser()
    if known:
        names = {flag_name(f) for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        kept, skip = [], False
        for arg in args:
            if arg.startswith("--"):
                skip = arg not in names
            if not skip:
                kept.append(arg)
        args = kept
    parsed, extra = parser.parse_known_args([command, *args])
    assert not extra
    del parsed.command
    return settings_from_args(cls, parsed, environ={})


def plan_verdicts(case: dict[str, Any], objects: list[dict[str, Any]]
                  ) -> dict[str, tuple[str, str]]:
    """Host → (target key, verdict) as the plan decides from render's snapshot."""
    s = _settings(RenderSettings, "render", ["--namespace", NAMESPACE, *case.get("args", ())])
    zones = corefile.served_zones(case.get("corefile", COREFILE), dns_port=s.dns_port)
    p = plan(render_snapshot(s, objects, (), proxy_service_fqdn(s.cluster_domain),
                             zones=zones)).plan
    return {**{h: (key, "redirected") for h, key in p.routes.items()},
            **{h: (why.key, why.problem) for h, why in p.excluded.items()}}


def doctor_targets(kubeconfig: Path, case: dict[str, Any]) -> dict[str, HostTarget]:
    """Host → its target as doctor's cluster facts read them, with the controller's
    --target-settle (no Deployment says it here): a slot's hosts the size limits refuse are
    refused, not settling."""
    s = _settings(DoctorSettings, "doctor", ["--namespace", NAMESPACE, "--target-settle", "0",
                                             *case.get("args", ())], known=True)
    cfg = load_kubeconfig(kubeconfig)

    async def ask() -> dict[str, HostTarget]:
        client = KubeClient.from_cluster(cfg, timeout=10)
        try:
            view = await gather(client, s, NAMESPACE, policy_for(s, NAMESPACE),
                                parse_target_flags(s.target, KEY_KIND_SPECS))
        finally:
            await client.close()
        assert view.facts.host_targets is not None, view.facts.problems
        return dict(view.facts.host_targets)
    return asyncio.run(ask())


def doctor_verdicts(kubeconfig: Path, case: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Host → (target key, verdict) as doctor's cluster facts read them."""
    return {h: (t.key, t.verdict) for h, t in doctor_targets(kubeconfig, case).items()}


def ruled(wrote: Outputs, mode: str) -> set[str]:
    """The hosts the controller's written rules redirect."""
    text = wrote["rules"]
    if mode == "coredns-import":
        text = ".:53 {\n" + text + "\n}\n"
    return set(corefile.managed_groups(text, proxy_fqdn=proxy_service_fqdn("cluster.local")))


def controller_flags(case: dict[str, Any], mode: str) -> list[str]:
    # Published too: the hosts file the etchosts agents write from them is compared. The
    # removal guard is on, as installed: hosts a size limit takes away from the first write
    # (a slot's hosts, older, come with its Service after it and take the room) are no drop
    # it holds back.
    flags = ["--target-settle", "0", *PUBLISH, *case.get("args", ())]
    if mode == "coredns-import":
        flags += ["--mode", "coredns-import"]
    if not case.get("gateway_api"):
        flags += ["--gateway-api", "off"]
    return flags


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_render_prints_what_the_controller_writes(cluster: FakeApiServer, start: Start,
                                                  kubeconfig: Path, tmp_path: Path,
                                                  path: Path) -> None:
    case = load(path)
    mode = str(case.get("mode", "coredns"))
    setup(cluster, case)
    ctl = start(*controller_flags(case, mode))
    ctl.wait_ready()
    last: list[tuple[Outputs, Outputs]] = []

    def same() -> bool:
        # The controller's writes settle (a slot's Service, then its hosts' rules): wait
        # for both sides to agree, and say what differs when they never do. A case that
        # names the rules it ends with waits for them (both sides agree before them too).
        wrote = written(cluster, mode)
        got = rendered(tmp_path, case, inputs(cluster, case), mode)
        last[:] = [(wrote, got)]
        return wrote == got and all(m in wrote["rules"] for m in case.get("rules_hold", ()))

    try:
        wait_until(same, 60, f"render == controller for {path.stem}", interval=0.2)
    except Exception:
        wrote, got = last[0]
        assert wrote == got
        raise
    # doctor, asking the same cluster, reads each host as the plan decides it, and says
    # which hosts a size limit keeps without a rule: those the controller wrote none for.
    verdicts = plan_verdicts(case, inputs(cluster, case))
    targets = doctor_targets(kubeconfig, case)
    assert {h: (t.key, t.verdict) for h, t in targets.items()} == verdicts
    refused = {h for h, t in targets.items() if t.refused}
    redirected = {h for h, (_, v) in verdicts.items() if v == "redirected"}
    assert refused == redirected - ruled(last[0][0], mode)
    # The over-budget cases refuse hosts; no other does.
    assert bool(refused) == path.stem.startswith(("25-over-budget", "26-over-budget")), refused
    # Until the controller writes a slot's rule, render, reading the same cluster, prints
    # none either (the slot's Service or its table entry is not there yet): a case with a
    # host on a slot must wait for its rule, or it compares the state before it.
    slotted = sorted(h for h, (key, v) in verdicts.items()
                     if v == "redirected" and key != DEFAULT_KEY)
    assert case.get("rules_hold") or not slotted, f"{slotted} on a slot: name a rule"
    assert case.get("rules_hold") or case.get("no_rules_hold"), "say why it waits for no rule"
    if "verdicts" in case:
        assert verdicts == {h: tuple(v) for h, v in case["verdicts"].items()}


def test_the_corpus_covers_what_the_issue_names() -> None:
    names = " ".join(p.stem for p in CASES)
    assert len(CASES) >= 20
    for needed in ("nginx-alone", "two-classes", "gateway-ingress-conflict", "no-proxy",
                   "unknown-", "over-max-targets", "over-budget", "node-local-dns",
                   "import-mode", "dual-stack", "listenerset", "wildcard-every-depth",
                   "corefile-served-zones",
                   "traefik-ingressroute"):
        assert needed in names, needed


def controller_deployment(args: list[str], env: list[dict[str, Any]]) -> dict[str, Any]:
    obj = deployment(NAMESPACE, "hairpin-proxy-controller")
    obj["spec"]["template"]["spec"]["containers"] = [
        {"name": "controller", "image": "hairpin-proxy", "args": ["controller", *args],
         "env": env}]
    return obj


def test_doctor_reads_the_controllers_settings_from_its_deployment(
        cluster: FakeApiServer, start: Start, kubeconfig: Path) -> None:
    """A controller started with other --max-targets and --targets-configmap (a flag and an
    env variable) is judged by those, not doctor's defaults."""
    case = load(CORPUS / "16-over-max-targets.yaml")
    args = ["--max-targets", "1"]
    env: list[dict[str, Any]] = [
        {"name": "HAIRPIN_TARGETS_CONFIGMAP", "value": "other-targets"},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]
    setup(cluster, {**case, "args": []})
    cluster.create(controller_deployment(args, env))
    ctl = start("--target-settle", "0", *args, "--targets-configmap", "other-targets")
    ctl.wait_ready()
    wait_until(lambda: _data(cluster, NAMESPACE, "other-targets").get(TABLE_KEY), 30,
               "the table in other-targets")
    bare = {**case, "args": []}
    got = doctor_verdicts(kubeconfig, bare)
    # One slot: one of the two data planes is left out, as the controller leaves it.
    assert sorted(v for _, v in got.values()) == ["redirected", "target-not-found"]
    assert got == plan_verdicts(case, inputs(cluster, case) + [
        c for c in [cluster.get("ConfigMap", NAMESPACE, "other-targets")] if c])
    assert cluster.get("ConfigMap", NAMESPACE, "hairpin-proxy-targets") is None


def test_doctor_says_when_the_deployment_cannot_be_read(cluster: FakeApiServer,
                                                        kubeconfig: Path) -> None:
    cluster.create(controller_deployment(["--max-targets", "many"], []))
    s = _settings(DoctorSettings, "doctor", ["--namespace", NAMESPACE])
    cfg = load_kubeconfig(kubeconfig)

    async def ask() -> tuple[str, ...]:
        client = KubeClient.from_cluster(cfg, timeout=10)
        try:
            view = await gather(client, s, NAMESPACE, policy_for(s, NAMESPACE), {})
        finally:
            await client.close()
        return view.facts.problems
    problems = asyncio.run(ask())
    assert any("Deployment hairpin-proxy/hairpin-proxy-controller: its flags cannot be read"
               in p and "taken from doctor's flags" in p for p in problems), problems


MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "hairpin-proxy.yaml"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def test_doctor_says_when_a_registered_source_cannot_be_listed(
        cluster: FakeApiServer, tmp_path: Path) -> None:
    """With the controller's service account of the default install (the IngressRoutes'
    RBAC is an opt-in component), doctor asked for IngressRoutes says it may not list them
    and claims none of their hosts, rather than reading the silence as none."""
    for doc in yaml.safe_load_all(MANIFEST.read_text()):
        if doc and doc["kind"] in RBAC_KINDS:
            cluster.create(doc)
    case = load(CORPUS / "27-traefik-ingressroute.yaml")
    setup(cluster, case)
    token = cluster.service_account_token(NAMESPACE, "hairpin-proxy-controller")
    config = cluster.write_kubeconfig(tmp_path / "sa.kubeconfig", token=token)
    s = _settings(DoctorSettings, "doctor", ["--namespace", NAMESPACE, *case["args"]])

    async def ask() -> tuple[tuple[str, ...], tuple[str, ...] | None]:
        client = KubeClient.from_cluster(load_kubeconfig(config), timeout=10)
        try:
            view = await gather(client, s, NAMESPACE, policy_for(s, NAMESPACE), {})
        finally:
            await client.close()
        return view.facts.problems, view.managed
    problems, managed = asyncio.run(ask())
    assert any(p.startswith("could not list ingressroutes.traefik.io, deployments.apps (403")
               and "are unknown" in p for p in problems), problems
    assert managed is not None and "shop.example.com" not in managed
