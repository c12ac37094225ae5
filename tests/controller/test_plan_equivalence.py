"""The controller and ``render`` compute one desired state (issue 22): every snapshot of the
corpus (tests/plan_corpus/*.yaml) is created in the fake API, the controller reconciles it,
and ``render`` fed what ``kubectl get -o yaml`` would show (the corpus's objects as the cluster
holds them, the proxy's namespace's Services, the targets ConfigMap) must print byte for byte
what the controller wrote: the Corefile (or import snippet), node-local-dns's Corefile, the
hosts file the etchosts agents write from the published hosts, and the targets table.

Slots settle at once (``--target-settle 0``): render prints the steady state.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from hairpin_proxy import hostsfile
from hairpin_proxy.cli import main
from hairpin_proxy.published import ENTRIES_KEY, parse_entries
from hairpin_proxy.targets.table import TABLE_KEY
from tests.controller.conftest import COREFILE, NAMESPACE, NODE_LOCAL, Controller
from tests.fakeapi.crds import ENVOY_CLIENT_TRAFFIC_POLICY
from tests.fakeapi.server import FakeApiServer
from tests.waiting import wait_until

CORPUS = Path(__file__).parent.parent / "plan_corpus"
CASES = sorted(CORPUS.glob("*.yaml"))
Start = Callable[..., Controller]
Outputs = dict[str, str]


def load(path: Path) -> dict[str, Any]:
    case: dict[str, Any] = yaml.safe_load(path.read_text())
    return case


def setup(api: FakeApiServer, case: dict[str, Any]) -> None:
    if case.get("gateway_api"):
        api.install_gateway_api("1.4", "standard")
        api.install(ENVOY_CLIENT_TRAFFIC_POLICY)
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
    for obj in case["objects"]:
        if obj["kind"] == "Namespace" and api.get("Namespace", None, obj["metadata"]["name"]):
            continue  # made by the fake API for an object created in it earlier
        api.create(obj)


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
    files = {"Corefile": COREFILE, "node-local": NODE_LOCAL, "hosts": ""}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    common = ["--ingress", str(manifests), "--namespace", NAMESPACE, *case.get("args", ())]
    out: Outputs = {}
    with_table = _render("--corefile", str(tmp_path / "Corefile"), "--print-targets", *common)
    table_doc = with_table.split("\n---\n", 1)[1]
    out["targets"] = next(yaml.safe_load_all(table_doc))["data"][TABLE_KEY]
    if mode == "coredns-import":
        out["rules"] = _render("--import-snippet", *common)
    else:
        out["rules"] = _render("--corefile", str(tmp_path / "Corefile"), *common)
    if mode == "node-local-dns":
        out["node-local"] = _render("--node-local-corefile", str(tmp_path / "node-local"),
                                    *common)
    out["hosts"] = _render("--hosts-file", str(tmp_path / "hosts"), *common)
    return out


def controller_flags(case: dict[str, Any], mode: str) -> list[str]:
    flags = ["--target-settle", "0", *case.get("args", ())]
    if mode == "coredns-import":
        flags += ["--mode", "coredns-import"]
    if not case.get("gateway_api"):
        flags += ["--gateway-api", "off"]
    return flags


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_render_prints_what_the_controller_writes(cluster: FakeApiServer, start: Start,
                                                  tmp_path: Path, path: Path) -> None:
    case = load(path)
    mode = str(case.get("mode", "coredns"))
    setup(cluster, case)
    ctl = start(*controller_flags(case, mode))
    ctl.wait_ready()
    last: list[tuple[Outputs, Outputs]] = []

    def same() -> bool:
        # The controller's writes settle (a slot's Service, then its hosts' rules): wait
        # for both sides to agree, and say what differs when they never do.
        wrote = written(cluster, mode)
        got = rendered(tmp_path, case, inputs(cluster, case), mode)
        last[:] = [(wrote, got)]
        return wrote == got

    try:
        wait_until(same, 60, f"render == controller for {path.stem}", interval=0.2)
    except Exception:
        wrote, got = last[0]
        assert wrote == got
        raise


def test_the_corpus_covers_what_the_issue_names() -> None:
    names = " ".join(p.stem for p in CASES)
    assert len(CASES) >= 20
    for needed in ("nginx-alone", "two-classes", "gateway-ingress-conflict", "no-proxy",
                   "unknown-", "over-max-targets", "node-local-dns", "import-mode",
                   "dual-stack"):
        assert needed in names, needed
