"""deploy/components/monitoring and deploy/components/networkpolicy: render, validate, make sense.

The Prometheus Operator kinds are not in kubernetes-validate's schemas: they are checked against
the operator's own monitoring.coreos.com/v1 CRD schemas (tests/deploy/crds/, vendored by
scripts/vendor_crd_schemas.py), applied strictly as the API server's strict field validation
does (an unknown or misspelt field fails), and against the rule its admission webhook adds.
The alert expressions and the dashboard's queries go through the real PromQL parser
(`promtool check rules`) and the alerts through
`promtool test rules` on synthetic series; promtool is required (Debian package `prometheus`,
installed by scripts/system-deps.sh).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.etchosts import EtchostsMetrics
from hairpin_proxy.metrics import BUILD_INFO, Registry
from hairpin_proxy.relay.server import Relay
from hairpin_proxy.settings import ProxySettings
from tests.deploy.rendering import DEPLOY, REPO, Doc, find

# A dependency of kubernetes-validate; imported untyped (no stubs in the test environment).
jsonschema: Any = importlib.import_module("jsonschema")

MONITORING = DEPLOY / "components" / "monitoring"
RUNBOOKS = REPO / "docs" / "runbooks.md"
# The runbooks of the release the manifests name (test_release keeps that one version).
RUNBOOK_BASE = ("https://github.com/hairpin-proxy/hairpin-proxy/blob/v"
                f"{importlib.metadata.version('hairpin-proxy')}/docs/runbooks.md#")
CRD_GROUP = "monitoring.coreos.com/v1"

# ----------------------------------------------------------------- schemas (from the CRDs)

# The Prometheus Operator's own CRD schemas (scripts/vendor_crd_schemas.py writes the file).
CRD_FILE = Path(__file__).resolve().parent / "crds" / "monitoring.coreos.com_v1.json"
CRDS: dict[str, Any] = json.loads(CRD_FILE.read_text())
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
METADATA = {
    "type": "object", "required": ["name", "namespace"],
    "properties": {"name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"},
                   "namespace": {"type": "string"}, "labels": STRING_MAP,
                   "annotations": STRING_MAP},
}


def strict(node: Any) -> Any:
    """A CRD schema as the API server applies it with strict field validation (``kubectl apply
    --validate=strict``, the default since 1.27 warns): an object schema that lists its
    properties accepts no others, unless it preserves unknown fields."""
    if isinstance(node, list):
        return [strict(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: strict(v) for k, v in node.items()}
    if node.get("type") == "object" and isinstance(node.get("properties"), dict) and \
            "additionalProperties" not in node and \
            not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def crd_schema(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = strict(CRDS["schemas"][kind])
    schema["properties"].update({"apiVersion": {"const": CRD_GROUP}, "kind": {"const": kind},
                                 "metadata": METADATA})
    schema["required"] = sorted({*schema.get("required", ()), "apiVersion", "kind",
                                 "metadata", "spec"})
    return schema


SCHEMAS: dict[str, dict[str, Any]] = {kind: crd_schema(kind) for kind in CRDS["schemas"]}


def webhook_problems(doc: Doc) -> list[str]:
    """What the operator's admission webhook refuses beyond the schema: a rule is an alert or
    a recording rule, never both or neither."""
    if doc["kind"] != "PrometheusRule":
        return []
    return [f"PrometheusRule/{doc['metadata'].get('name')}: group {g.get('name')}: a rule "
            "needs exactly one of alert and record"
            for g in doc["spec"].get("groups", []) for r in g.get("rules", [])
            if ("alert" in r) == ("record" in r)]


def crd_problems(doc: Doc) -> list[str]:
    validator = jsonschema.Draft202012Validator(SCHEMAS[doc["kind"]])
    return [f"{doc['kind']}/{doc['metadata'].get('name')}: {'/'.join(map(str, e.path))}: "
            f"{e.message}" for e in validator.iter_errors(doc)] + webhook_problems(doc)


def test_the_vendored_crd_schemas_are_the_operators() -> None:
    assert set(CRDS["schemas"]) == {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    assert "prometheus-operator" in CRDS["source"]
    assert tuple(map(int, CRDS["operator_version"].split("."))) >= (0, 60, 0)
    endpoint = CRDS["schemas"]["ServiceMonitor"]["properties"]["spec"]["properties"][
        "endpoints"]["items"]
    assert {"port", "path", "interval", "scheme"} <= set(endpoint["properties"])


# ----------------------------------------------------------------- helpers

def promtool() -> str:
    found = shutil.which("promtool")
    assert found, ("promtool is required (Debian: apt-get install prometheus; "
                   "scripts/system-deps.sh installs it)")
    return found


def run_promtool(tmp_path: Path, args: list[str], files: dict[str, Any]) -> str:
    for name, content in files.items():
        (tmp_path / name).write_text(yaml.safe_dump(content, sort_keys=False))
    out = subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path, check=False)
    assert out.returncode == 0, f"promtool {' '.join(args)}:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def monitoring(renders: dict[str, list[Doc]]) -> list[Doc]:
    return renders["components/monitoring"]


def rule_groups(renders: dict[str, list[Doc]]) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = find(monitoring(renders), "PrometheusRule", "hairpin-proxy",
                                        "hairpin-proxy")["spec"]["groups"]
    return groups


def alerts(renders: dict[str, list[Doc]]) -> list[dict[str, Any]]:
    return [r for g in rule_groups(renders) for r in g["rules"] if "alert" in r]


def dashboard(renders: dict[str, list[Doc]]) -> dict[str, Any]:
    cm = find(monitoring(renders), "ConfigMap", "hairpin-proxy-dashboard", "hairpin-proxy")
    data: dict[str, Any] = json.loads(cm["data"]["hairpin-proxy.json"])
    return data


def exposed_names() -> set[str]:
    """Every series name a scrape of the three commands can show (the relay's with what its
    server registers besides RelayMetrics: the targets table's and DNS failures)."""
    names = {BUILD_INFO}

    def relay(registry: Registry) -> None:
        Relay((), ProxySettings(), registry=registry)

    for make in (relay, ControllerMetrics, EtchostsMetrics):
        registry = Registry()
        make(registry)
        for m in registry.metrics():
            names.add(m.name)
            if m.kind == "histogram":
                names |= {m.name + s for s in ("_bucket", "_sum", "_count")}
        names |= {s.name for fam in registry.collectors.collect() for s in fam.samples}
    return names


METRIC_REF = re.compile(r"\b((?:hairpin|process|python)_[a-z0-9_]+)\b")


def pod_labels(docs: list[Doc], name: str) -> dict[str, str]:
    labels: dict[str, str] = find(docs, "Deployment", name)["spec"]["template"]["metadata"][
        "labels"]
    return labels


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        value = labels.get(e["key"])
        op = e["operator"]
        if (op == "In" and value not in e["values"]) or (
                op == "NotIn" and value in e["values"]) or (
                op == "Exists" and value is None) or (op == "DoesNotExist" and value is not None):
            return False
    return True


# ----------------------------------------------------------------- validation

def test_components_render_with_the_base(renders: dict[str, list[Doc]]) -> None:
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in monitoring(renders)
                   if d["metadata"].get("namespace") == "hairpin-proxy"
                   and d["kind"] not in ("Deployment", "ServiceAccount", "PodDisruptionBudget",
                                         "Role", "RoleBinding"))
    assert ("ServiceMonitor", "hairpin-proxy") in kinds
    assert ("PodMonitor", "hairpin-proxy-controller") in kinds
    assert ("PrometheusRule", "hairpin-proxy") in kinds
    assert ("Service", "hairpin-proxy-metrics") in kinds
    assert ("ConfigMap", "hairpin-proxy-dashboard") in kinds
    policies = {d["metadata"]["name"] for d in renders["components/networkpolicy"]
                if d["kind"] == "NetworkPolicy"}
    assert policies == {"hairpin-proxy", "hairpin-proxy-controller"}


def test_operator_kinds_match_the_crd_schemas(renders: dict[str, list[Doc]]) -> None:
    docs = [d for d in monitoring(renders) if d["apiVersion"] == CRD_GROUP]
    assert {d["kind"] for d in docs} == set(SCHEMAS)
    problems = [p for d in docs for p in crd_problems(d)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("kind", "path", "value"), [
    ("ServiceMonitor", ["spec", "endpoints", 0, "intervall"], "30s"),
    ("ServiceMonitor", ["spec", "endpoints", 0, "interval"], "30 seconds"),
    ("PodMonitor", ["spec", "podMetricsEndpoints", 0, "port"], 9090),
    ("PodMonitor", ["spec", "selector", "matchLabel"], {}),
    ("PrometheusRule", ["spec", "groups", 0, "rules", 0, "for"], "5 min"),
    ("PrometheusRule", ["spec", "groups", 0, "rules", 0, "record"], "both_alert_and_record"),
])
def test_crd_schemas_are_strict(renders: dict[str, list[Doc]], kind: str,
                                path: list[str | int], value: object) -> None:
    doc = json.loads(json.dumps(next(d for d in monitoring(renders) if d["kind"] == kind)))
    assert not crd_problems(doc)
    target: Any = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert crd_problems(doc)


def test_core_kinds_validate_strictly(renders: dict[str, list[Doc]]) -> None:
    """Everything but the operator's kinds, against Kubernetes' own schemas (oldest, newest)."""
    unique = {yaml.safe_dump(d, sort_keys=True): d
              for name in ("components/monitoring", "components/networkpolicy")
              for d in renders[name] if d["apiVersion"] != CRD_GROUP}
    kinds = {d["kind"] for d in unique.values()}
    assert {"Service", "ConfigMap", "NetworkPolicy", "Deployment"} <= kinds
    newest = ".".join(kubernetes_validate.latest_version().split(".")[:2])
    for d in unique.values():
        for version in ("1.29", newest):
            kubernetes_validate.validate(d, version, strict=True)


def test_rules_parse_with_promtool(renders: dict[str, list[Doc]], tmp_path: Path) -> None:
    out = run_promtool(tmp_path, ["check", "rules", "rules.yaml"],
                       {"rules.yaml": {"groups": rule_groups(renders)}})
    assert f"SUCCESS: {len(alerts(renders))} rules found" in out


def test_rule_checker_rejects_bad_promql(tmp_path: Path) -> None:
    bad = {"groups": [{"name": "x", "rules": [{"alert": "X", "expr": "sum by (a (up)"}]}]}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    out = subprocess.run([promtool(), "check", "rules", "bad.yaml"], capture_output=True,
                         text=True, cwd=tmp_path, timeout=60, check=False)
    assert out.returncode != 0


def test_rules_and_dashboard_use_only_real_metrics(renders: dict[str, list[Doc]]) -> None:
    names = exposed_names()
    exprs = [str(a["expr"]) for a in alerts(renders)] + [
        t["expr"] for p in dashboard(renders)["panels"] for t in p.get("targets", [])]
    unknown = {n for e in exprs for n in METRIC_REF.findall(e)} - names
    assert not unknown, f"queries name metrics no command exposes: {sorted(unknown)}"


def test_dashboard_queries_parse(renders: dict[str, list[Doc]], tmp_path: Path) -> None:
    dash = dashboard(renders)
    assert dash["uid"] == "hairpin-proxy"
    cm = find(monitoring(renders), "ConfigMap", "hairpin-proxy-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    text = " ".join(exprs)
    for metric in ("hairpin_proxy_connections_total", "hairpin_proxy_errors_total",
                   "hairpin_proxy_bytes_total", "hairpin_controller_leader",
                   "hairpin_controller_reconciles_total",
                   "hairpin_controller_last_successful_sync_timestamp_seconds"):
        assert metric in text, metric
    # Grafana's variables replaced by what they expand to, then parsed as recording rules.
    rules = [{"record": f"dashboard:query_{i}",
              "expr": e.replace("$__rate_interval", "1m").replace("$namespace", "x")}
             for i, e in enumerate(exprs)]
    run_promtool(tmp_path, ["check", "rules", "dash.yaml"],
                 {"dash.yaml": {"groups": [{"name": "dashboard", "rules": rules}]}})


def test_every_alert_has_a_runbook_section(renders: dict[str, list[Doc]]) -> None:
    headings = {m.lower() for m in re.findall(r"^## (\S+)$", RUNBOOKS.read_text(), re.M)}
    names = set()
    for a in alerts(renders):
        names.add(a["alert"].lower())
        assert a["labels"]["severity"] in ("critical", "warning", "info")
        assert a["annotations"]["summary"] and a["annotations"]["description"]
        url = a["annotations"]["runbook_url"]
        assert url == RUNBOOK_BASE + a["alert"].lower(), a["alert"]
        assert url.rsplit("#", 1)[1] in headings, f"no section for {a['alert']}"
    assert headings == names, "runbooks.md sections without an alert, or alerts without one"


# ----------------------------------------------------------------- the alerts fire

def alert_tests(renders: dict[str, list[Doc]]) -> list[dict[str, Any]]:
    """promtool unit tests: each alert fires on its symptom, and stays quiet otherwise."""
    ns = 'namespace="hairpin-proxy"'
    ctl = f'{ns},pod="ctl-0"'
    relay = f'{ns},pod="proxy-0",listener="0.0.0.0:8080"'

    def firing(name: str, at: str, labels: dict[str, str]) -> dict[str, Any]:
        return {"eval_time": at, "alertname": name, "exp_alerts": [{"exp_labels": labels}]}

    def quiet(name: str, at: str) -> dict[str, Any]:
        return {"eval_time": at, "alertname": name, "exp_alerts": []}

    sev = {a["alert"]: a["labels"]["severity"] for a in alerts(renders)}

    def lab(name: str, **extra: str) -> dict[str, str]:
        return {"severity": sev[name], "namespace": "hairpin-proxy", **extra}

    return [
        {   # the relay: 10 connections a minute, then every one refused
            "interval": "1m",
            "input_series": [
                {"series": f"hairpin_proxy_connections_total{{{relay}}}", "values": "0+10x40"},
                {"series": f'hairpin_proxy_errors_total{{{relay},cause="connect_refused"}}',
                 "values": "0x15 0+10x25"},
                {"series": f'hairpin_proxy_errors_total{{{relay},cause="reset"}}',
                 "values": "0+9x40"},
            ],
            "alert_rule_test": [
                quiet("HairpinProxyTargetUnreachable", "14m"),
                firing("HairpinProxyTargetUnreachable", "30m",
                       lab("HairpinProxyTargetUnreachable", pod="proxy-0",
                           listener="0.0.0.0:8080")),
            ],
        },
        {   # leadership lost at 10m; the controller's state gauges
            "interval": "1m",
            "input_series": [
                {"series": f"hairpin_controller_leader{{{ctl}}}", "values": "1x10 0x30"},
                {"series": f'hairpin_controller_leader{{{ns},pod="ctl-1"}}', "values": "0x40"},
                {"series": f"hairpin_controller_rules_withdrawn{{{ctl}}}", "values": "0x5 1x35"},
                {"series": f"hairpin_controller_node_local_dns_reconciled{{{ctl}}}",
                 "values": "1x40"},
                {"series": f'hairpin_controller_repairs_suspended{{{ctl},'
                           'configmap="kube-system/node-local-dns"}', "values": "0x10 1x30"},
                {"series": f"hairpin_controller_hosts_rejected{{{ctl}}}", "values": "2x100"},
                {"series": f"hairpin_controller_verify_oldest_kept_verdict_seconds{{{ctl}}}",
                 "values": "3000+60x40"},
            ],
            "alert_rule_test": [
                quiet("HairpinControllerNoLeader", "12m"),
                firing("HairpinControllerNoLeader", "20m", lab("HairpinControllerNoLeader")),
                quiet("HairpinControllerRulesWithdrawn", "10m"),
                firing("HairpinControllerRulesWithdrawn", "20m",
                       lab("HairpinControllerRulesWithdrawn")),
                firing("HairpinControllerNodeLocalDNSReconciled", "20m",
                       lab("HairpinControllerNodeLocalDNSReconciled")),
                quiet("HairpinControllerRepairsSuspended", "13m"),
                firing("HairpinControllerRepairsSuspended", "20m",
                       lab("HairpinControllerRepairsSuspended",
                           configmap="kube-system/node-local-dns")),
                quiet("HairpinControllerHostsRejected", "30m"),
                firing("HairpinControllerHostsRejected", "70m",
                       lab("HairpinControllerHostsRejected")),
                quiet("HairpinControllerVerdictsKeptThroughResolverOutage", "5m"),
                firing("HairpinControllerVerdictsKeptThroughResolverOutage", "20m",
                       lab("HairpinControllerVerdictsKeptThroughResolverOutage")),
            ],
        },
        {   # failing reconciles after a last success at t=0; a Corefile error at 30m
            "interval": "1m",
            "input_series": [
                {"series": f'hairpin_controller_reconciles_total{{{ctl},result="error"}}',
                 "values": "0x5 1+1x40"},
                {"series": f"hairpin_controller_last_successful_sync_timestamp_seconds{{{ctl}}}",
                 "values": "0x46"},
                {"series": f"hairpin_controller_corefile_errors_total{{{ctl}}}",
                 "values": "0x30 1x16"},
            ],
            "alert_rule_test": [
                quiet("HairpinControllerRulesNotApplied", "10m"),
                firing("HairpinControllerRulesNotApplied", "25m",
                       lab("HairpinControllerRulesNotApplied")),
                quiet("HairpinControllerCorefileUneditable", "29m"),
                firing("HairpinControllerCorefileUneditable", "35m",
                       lab("HairpinControllerCorefileUneditable")),
            ],
        },
        {   # a writer reverts the Corefile every 10 minutes; no Ingress changes, same hosts
            "interval": "1m",
            "input_series": [
                {"series": f'hairpin_controller_writes_total{{{ctl},target="corefile"}}',
                 "values": "0+0.1x120"},
                {"series": f"hairpin_controller_ingress_evaluations_total{{{ctl}}}",
                 "values": "5x120"},
                {"series": f"hairpin_controller_hosts_managed{{{ctl}}}", "values": "3x120"},
                {"series": f"hairpin_controller_conflicts_total{{{ctl}}}", "values": "0+0.2x120"},
            ],
            "alert_rule_test": [
                firing("HairpinControllerRepairLoop", "100m",
                       lab("HairpinControllerRepairLoop")),
                firing("HairpinControllerWriteConflicts", "100m",
                       lab("HairpinControllerWriteConflicts")),
            ],
        },
        {   # targets: hosts left alone on the leader, a conflict; a table refused at 10m
            "interval": "1m",
            "input_series": [
                {"series": f"hairpin_controller_leader{{{ctl}}}", "values": "1x90"},
                {"series": f'hairpin_controller_leader{{{ns},pod="ctl-1"}}', "values": "0x90"},
                {"series": f'hairpin_controller_hosts_not_redirected{{{ctl},'
                           f'reason="proxy-unknown"}}', "values": "0x10 2x80"},
                {"series": f'hairpin_controller_hosts_not_redirected{{{ctl},reason="no-proxy"}}',
                 "values": "3x90"},
                {"series": f'hairpin_controller_hosts_not_redirected{{{ctl},reason="settling"}}',
                 "values": "1x90"},
                # A standby's stale value from its time as leader does not count.
                {"series": f'hairpin_controller_hosts_not_redirected{{{ns},pod="ctl-1",'
                           f'reason="not-found"}}', "values": "5x90"},
                {"series": f"hairpin_controller_host_conflicts{{{ctl}}}", "values": "1x90"},
                {"series": f'hairpin_proxy_targets_table_errors_total{{{ns},pod="proxy-0",'
                           f'reason="malformed"}}', "values": "0x10 1x80"},
            ],
            "alert_rule_test": [
                quiet("HairpinControllerHostsNotRedirected", "30m"),
                firing("HairpinControllerHostsNotRedirected", "45m",
                       lab("HairpinControllerHostsNotRedirected", reason="proxy-unknown")),
                quiet("HairpinControllerHostConflicts", "30m"),
                firing("HairpinControllerHostConflicts", "70m",
                       lab("HairpinControllerHostConflicts")),
                quiet("HairpinProxyTargetsTableRefused", "5m"),
                firing("HairpinProxyTargetsTableRefused", "20m",
                       lab("HairpinProxyTargetsTableRefused", pod="proxy-0",
                           reason="malformed")),
                quiet("HairpinProxyTargetsTableRefused", "85m"),
            ],
        },
        {   # the same writes, but Ingresses changing all along: no repair loop
            "interval": "1m",
            "input_series": [
                {"series": f'hairpin_controller_writes_total{{{ctl},target="corefile"}}',
                 "values": "0+0.1x120"},
                {"series": f"hairpin_controller_ingress_evaluations_total{{{ctl}}}",
                 "values": "0+0.1x120"},
                {"series": f"hairpin_controller_hosts_managed{{{ctl}}}", "values": "3x120"},
            ],
            "alert_rule_test": [quiet("HairpinControllerRepairLoop", "100m")],
        },
    ]


def test_alerts_fire_on_their_symptoms(renders: dict[str, list[Doc]], tmp_path: Path) -> None:
    tests = alert_tests(renders)
    covered = {t["alertname"] for case in tests for t in case["alert_rule_test"]
               if t["exp_alerts"]}
    assert covered == {a["alert"] for a in alerts(renders)}
    # The firing logic only: annotations (templates checked by `check rules`) left out.
    groups = [{**g, "rules": [{k: v for k, v in r.items() if k != "annotations"}
                              for r in g["rules"]]} for g in rule_groups(renders)]
    run_promtool(tmp_path, ["test", "rules", "tests.yaml"], {
        "rules.yaml": {"groups": groups},
        "tests.yaml": {"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
                       "tests": tests}})


# ----------------------------------------------------------------- wiring

def test_monitors_select_the_admin_ports(renders: dict[str, list[Doc]]) -> None:
    docs = monitoring(renders)
    svc = find(docs, "Service", "hairpin-proxy-metrics", "hairpin-proxy")
    sm = find(docs, "ServiceMonitor", "hairpin-proxy", "hairpin-proxy")
    assert selects(sm["spec"]["selector"], svc["metadata"]["labels"])
    # Only the metrics Service: the rewrite target must not be scraped twice (or at all).
    assert not selects(sm["spec"]["selector"],
                       find(docs, "Service", "hairpin-proxy", "hairpin-proxy")["metadata"][
                           "labels"])
    assert selects({"matchLabels": svc["spec"]["selector"]}, pod_labels(docs, "hairpin-proxy"))
    assert {p["name"] for p in svc["spec"]["ports"]} >= {e["port"]
                                                         for e in sm["spec"]["endpoints"]}
    pm = find(docs, "PodMonitor", "hairpin-proxy-controller", "hairpin-proxy")
    assert selects(pm["spec"]["selector"], pod_labels(docs, "hairpin-proxy-controller"))
    assert not selects(pm["spec"]["selector"], pod_labels(docs, "hairpin-proxy"))
    for name, endpoints in (("hairpin-proxy", sm["spec"]["endpoints"]),
                            ("hairpin-proxy-controller", pm["spec"]["podMetricsEndpoints"])):
        container = find(docs, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        for e in endpoints:
            assert ports[svc["spec"]["ports"][0]["targetPort"] if name == "hairpin-proxy"
                         else e["port"]] == 9090
            assert e["path"] == "/metrics"


def _ports(rule: dict[str, Any]) -> set[tuple[str, int]]:
    return {(p["protocol"], p["port"]) for p in rule.get("ports", [])}


MONITORING_NS = {"namespaceSelector": {"matchLabels": {
    "kubernetes.io/metadata.name": "monitoring"}}}


def test_network_policies_allow_exactly_what_is_needed(renders: dict[str, list[Doc]]) -> None:
    docs = renders["components/networkpolicy"]
    proxy = find(docs, "NetworkPolicy", "hairpin-proxy", "hairpin-proxy")["spec"]
    ctl = find(docs, "NetworkPolicy", "hairpin-proxy-controller", "hairpin-proxy")["spec"]
    assert selects(proxy["podSelector"], pod_labels(docs, "hairpin-proxy"))
    assert not selects(proxy["podSelector"], pod_labels(docs, "hairpin-proxy-controller"))
    assert selects(ctl["podSelector"], pod_labels(docs, "hairpin-proxy-controller"))
    assert not selects(ctl["podSelector"], pod_labels(docs, "hairpin-proxy"))
    for spec in (proxy, ctl):
        assert spec["policyTypes"] == ["Ingress", "Egress"]

    # Proxy ingress: the relay ports from anywhere (the targets table's slots from 20002 up to
    # what 1,000 targets take); the admin port from monitoring only.
    relay_ports = {("TCP", p) for p in (80, 443, 20002)}
    container = find(docs, "Deployment", "hairpin-proxy")["spec"]["template"]["spec"][
        "containers"][0]
    listening = {("TCP", p["containerPort"]) for p in container["ports"] if p["name"] != "admin"}
    assert listening | {("TCP", 20002)} == relay_ports  # no port opened that nothing serves
    by_ports = {frozenset(_ports(r)): r for r in proxy["ingress"]}
    assert "from" not in by_ports[frozenset(relay_ports)]
    assert [p.get("endPort") for p in by_ports[frozenset(relay_ports)]["ports"]
            if p["port"] == 20002] == [22001]
    assert by_ports[frozenset({("TCP", 9090)})]["from"] == [MONITORING_NS]
    assert len(proxy["ingress"]) == 2
    # Proxy egress: the data planes' pods in any namespace (the pod ports of ingress-nginx,
    # Traefik, Istio and Envoy Gateway), and the cluster DNS.
    egress = {frozenset(_ports(r)): r for r in proxy["egress"]}
    web = egress[frozenset({("TCP", p) for p in (80, 443, 8000, 8080, 8443, 10080, 10443)})]
    assert web["to"] == [{"namespaceSelector": {}}]
    dns = egress[frozenset({("UDP", 53), ("TCP", 53)})]
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert len(proxy["egress"]) == 2

    # Controller: admin port in; API server and DNS out, nothing else.
    assert [(_ports(r), r["from"]) for r in ctl["ingress"]] == [({("TCP", 9090)},
                                                                 [MONITORING_NS])]
    assert sorted(map(sorted, map(_ports, ctl["egress"]))) == [
        [("TCP", 53), ("UDP", 53)], [("TCP", 443), ("TCP", 6443)]]
    assert all("to" not in r for r in ctl["egress"])  # see the ipBlock caveat in the policy


def test_the_node_agents_policy_selects_it_and_allows_only_the_api_and_metrics(
        renders: dict[str, list[Doc]]) -> None:
    agent = renders["overlays/etchosts"]
    policy = find(renders["components/networkpolicy-etchosts"], "NetworkPolicy",
                  "hairpin-proxy-etchosts", "hairpin-proxy-node")
    spec = policy["spec"]
    daemonset = find(agent, "DaemonSet", "hairpin-proxy-etchosts")
    assert daemonset["metadata"]["namespace"] == policy["metadata"]["namespace"]
    assert selects(spec["podSelector"], daemonset["spec"]["template"]["metadata"]["labels"])
    assert not selects(spec["podSelector"], pod_labels(agent, "hairpin-proxy"))
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    assert [p["containerPort"] for p in container["ports"]] == [9090]
    assert [(_ports(r), r["from"]) for r in spec["ingress"]] == [({("TCP", 9090)},
                                                                  [MONITORING_NS])]
    assert [_ports(r) for r in spec["egress"]] == [{("TCP", 443), ("TCP", 6443)}]
