"""The metrics facade, its prometheus_client exposition, and docs/metrics.md generated from it.

Regenerate the reference page with ``.venv/bin/python -m tests.test_metrics``.
"""

from __future__ import annotations

import ast
import asyncio
import http.client
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from hairpin_proxy import __version__
from hairpin_proxy.admin import AdminServer
from hairpin_proxy.controller.metrics import ControllerMetrics
from hairpin_proxy.etchosts import EtchostsMetrics
from hairpin_proxy.metrics import (
    BUILD_INFO,
    CONTENT_TYPE,
    Counter,
    Gauge,
    Histogram,
    Registry,
    _prefers_openmetrics,
    merge_workers,
)
from hairpin_proxy.relay.stats import RelayMetrics, proxy_metrics, worker_metrics

DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"


def families(text: str) -> dict[str, tuple[str, list[Sample]]]:
    """Exposed name (counters with their _total) → (type, samples), per the reference parser."""
    out = {}
    for fam in text_string_to_metric_families(text):
        name = fam.name + "_total" if fam.type == "counter" else fam.name
        out[name] = (fam.type, list(fam.samples))
    return out


def test_exposition_format() -> None:
    r = Registry(standard=False)
    c = r.counter("conn_total", "Connections.", ["listener"])
    c.labels("a").inc()
    c.labels("a").inc(2)
    c.labels('b"x').inc()
    g = r.gauge("active", "Active.")
    g.inc(5)
    g.dec(2)
    h = r.histogram("lat_seconds", "Latency.", buckets=(0.1, 1.0))
    for v in (0.05, 0.5, 5.0):
        h.observe(v)
    r.gauge("ratio", "Not whole.").set(0.25)
    text = r.render()
    assert ('# TYPE conn_total counter\nconn_total{listener="a"} 3\n'
            'conn_total{listener="b\\"x"} 1\n') in text
    assert "active 3\n" in text
    assert "ratio 0.25\n" in text
    assert 'lat_seconds_bucket{le="0.1"} 1\n' in text
    assert 'lat_seconds_bucket{le="1.0"} 2\n' in text
    assert 'lat_seconds_bucket{le="+Inf"} 3\n' in text
    assert "lat_seconds_count 3\nlat_seconds_sum 5.55\n" in text
    # No _created series: our counters are not prometheus_client's own.
    assert "_created" not in text
    got = families(text)
    assert got["conn_total"][0] == "counter" and got["lat_seconds"][0] == "histogram"
    assert got["active"] == ("gauge", [Sample("active", {}, 3.0)])


def test_callback_gauge_and_misuse() -> None:
    r = Registry()
    r.gauge("answer", "Computed at scrape.", callback=lambda: 42)
    assert "\nanswer 42\n" in r.render()
    with pytest.raises(ValueError, match="twice"):
        r.gauge("answer", "dup")
    c = r.counter("x_total", "X.", ["a"])
    with pytest.raises(ValueError):
        c.labels("1", "2")
    with pytest.raises(ValueError):
        c.labels("1").inc(-1)
    with pytest.raises(ValueError, match="_total"):
        r.counter("requests", "A counter must say so.")
    with pytest.raises(ValueError, match="invalid metric name"):
        r.gauge("bad-name", "Dash.")
    with pytest.raises(ValueError, match="label"):
        r.gauge("fine", "Reserved label.", ["le"])
    with pytest.raises(ValueError, match="no labels"):
        r.gauge("cb", "Callback with labels.", ["a"], callback=lambda: 1)
    # The standard collectors and the build info own their names.
    with pytest.raises(ValueError, match="twice"):
        r.counter("process_cpu_seconds_total", "Taken.")
    for taken in ("python_info", "process_open_fds", BUILD_INFO):
        with pytest.raises(ValueError, match="twice"):
            r.gauge(taken, "Taken.")


def test_hot_path_children_are_plain_values() -> None:
    """The relay adds to a child's attribute; a scrape reads it, nothing else is involved."""
    r = Registry()
    stats = RelayMetrics(r).for_listener("0.0.0.0:8080")
    stats.bytes_up.value += 1500
    stats.active.value += 1
    stats.errors["connect_refused"].value += 1
    got = families(r.render())
    assert Sample("hairpin_proxy_bytes_total",
                  {"listener": "0.0.0.0:8080", "direction": "upstream"}, 1500.0) in got[
        "hairpin_proxy_bytes_total"][1]
    assert Sample("hairpin_proxy_errors_total",
                  {"listener": "0.0.0.0:8080", "cause": "connect_refused"}, 1.0) in got[
        "hairpin_proxy_errors_total"][1]


@pytest.mark.parametrize(("metrics", "component"), [
    (RelayMetrics, "proxy"), (ControllerMetrics, "controller"), (EtchostsMetrics, "etchosts")])
def test_standard_metrics_and_build_info(metrics: type, component: str) -> None:
    r = Registry()
    metrics(r)
    got = families(r.render())
    kind, samples = got[BUILD_INFO]
    assert kind == "gauge" and len(samples) == 1
    assert samples[0].value == 1
    assert samples[0].labels == {"version": __version__, "component": component,
                                 "python_version": samples[0].labels["python_version"]}
    assert samples[0].labels["python_version"] == ".".join(map(str, sys.version_info[:3]))
    for name, kind in [("process_cpu_seconds_total", "counter"),
                       ("process_resident_memory_bytes", "gauge"),
                       ("process_open_fds", "gauge"), ("python_info", "gauge"),
                       ("python_gc_collections_total", "counter")]:
        assert got[name][0] == kind, name
    # An explicit component wins over the guess.
    assert 'component="etchosts"' in Registry("etchosts").render()
    assert 'component="unknown"' in Registry().render()


@pytest.mark.parametrize(("accept", "openmetrics"), [
    ("", False),
    ("text/plain", False),
    ("application/openmetrics-text", True),
    # What Prometheus sends.
    ("application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;"
     "version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2", True),
    ("text/plain;version=0.0.4;q=1,application/openmetrics-text;q=0.1", False),
    ("application/openmetrics-text;q=0", False),
])
def test_content_negotiation(accept: str, openmetrics: bool) -> None:
    assert _prefers_openmetrics(accept) is openmetrics
    body, ctype = Registry().expose(accept)
    assert ctype.startswith("application/openmetrics-text") is openmetrics
    assert body.endswith(b"# EOF\n") is openmetrics
    if not openmetrics:
        assert ctype == CONTENT_TYPE


# --------------------------------------------------------------------------- docs/metrics.md

# (component, what registers its metrics, heading, what the section adds).
COMPONENTS: list[tuple[str, Callable[[Registry], object], str, str]] = [
    ("proxy", proxy_metrics, "`hairpin-proxy proxy` (the relay)", ""),
    ("proxy", worker_metrics, "`hairpin-proxy proxy` with several workers (the supervisor)",
     "With more than one worker (`--workers`; the default is one per CPU of the container's "
     "quota), the pod's `/metrics` is the supervisor's: every metric of the relay above, each "
     "sample labelled `worker` with the worker's index, and these of its own."),
    ("controller", ControllerMetrics, "`hairpin-proxy controller`", ""),
    ("etchosts", EtchostsMetrics, "`hairpin-proxy etchosts` (the node agent)", "")]


def scrape(registry: Registry) -> str:
    """/metrics of a real admin server serving this registry."""
    def get(port: int) -> str:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("GET", "/metrics")
            return conn.getresponse().read().decode()
        finally:
            conn.close()

    async def run() -> str:
        server = AdminServer(registry)
        await server.start("127.0.0.1:0")
        try:
            return await asyncio.to_thread(get, server.port)
        finally:
            await server.close()

    return asyncio.run(run())


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def metrics_doc() -> str:
    """docs/metrics.md, from a live scrape of each command's metrics (and their label names)."""
    out = [
        "# Metrics",
        "",
        "<!-- Generated by `.venv/bin/python -m tests.test_metrics > docs/metrics.md` from a live",
        "     scrape of each command; tests/test_metrics.py fails when this page is stale. -->",
        "",
        "Every long-running command serves `/metrics` on its admin port (9090 in the manifests):",
        "the Prometheus text format 0.0.4, or OpenMetrics when the scraper asks for it in",
        "`Accept` (Prometheus does). Counters end in `_total`; durations are in seconds, sizes in",
        "bytes, times are Unix timestamps in seconds. Alerts built on these are in",
        "[runbooks.md](runbooks.md); the scrape configuration, alert rules and dashboard are in",
        "deploy/components/monitoring.",
        "",
    ]
    standard: dict[str, tuple[str, str, list[str]]] = {}
    for component, register, title, note in COMPONENTS:
        registry = Registry(component)
        register(registry)
        declared = {m.name: m for m in registry.metrics()}
        exposed = list(text_string_to_metric_families(scrape(registry)))
        out += [f"## {title}", "", *([note, ""] if note else []),
                "| Metric | Type | Labels | Meaning |", "|---|---|---|---|"]
        for fam in exposed:
            name = fam.name + "_total" if fam.type == "counter" else fam.name
            labels = sorted({k for s in fam.samples for k in s.labels if k != "le"})
            if name == BUILD_INFO:
                continue
            if name in declared:
                m = declared.pop(name)
                assert fam.type == m.kind, name
                row_labels = list(m.labelnames)
            else:
                assert name.startswith(("process_", "python_")), f"undeclared metric {name}"
                standard.setdefault(name, (fam.type, fam.documentation, labels))
                continue
            shown = ", ".join(f"`{x}`" for x in row_labels) or "—"
            out.append(f"| `{name}` | {fam.type} | {shown} | {_cell(fam.documentation)} |")
        assert not declared, f"declared but not exposed: {sorted(declared)}"
        out.append("")
    out += ["## Every command", "",
            "Each command also exposes the build and the standard `prometheus_client` collectors "
            "(`process_*` on Linux, `python_*`).", "",
            "| Metric | Type | Labels | Meaning |", "|---|---|---|---|",
            f"| `{BUILD_INFO}` | gauge | `version`, `python_version`, `component` | "
            "Always 1; `component` is `proxy`, `controller` or `etchosts`. |"]
    for name, (kind, doc, labels) in sorted(standard.items()):
        shown = ", ".join(f"`{x}`" for x in labels) or "—"
        out.append(f"| `{name}` | {kind} | {shown} | {_cell(doc)} |")
    return "\n".join(out) + "\n"


def test_metrics_doc_is_in_step_with_the_code() -> None:
    assert DOC.read_text() == metrics_doc(), (
        "docs/metrics.md is stale: run `.venv/bin/python -m tests.test_metrics > docs/metrics.md`")


def test_metrics_doc_lists_every_declared_metric() -> None:
    """Not vacuous: each command's metrics (and their types) appear on the page."""
    text = metrics_doc()
    for _, register, _, _ in COMPONENTS:
        registry = Registry()
        register(registry)
        for m in registry.metrics():
            assert isinstance(m, Counter | Gauge | Histogram)
            assert f"| `{m.name}` | {m.kind} |" in text


if __name__ == "__main__":
    sys.stdout.write(metrics_doc())


def test_merge_workers_labels_every_sample_and_keeps_families_whole() -> None:
    """The supervisor's /metrics: each worker's samples under one family, labelled with the
    worker; build info once (the supervisor's own); the result parses back."""
    def worker(n: int) -> str:
        reg = Registry("proxy", standard=False)
        reg.counter("hairpin_proxy_connections_total", "Connections.", ["listener"]) \
            .labels("a").inc(n)
        reg.gauge("hairpin_proxy_connections_active", "Open.").set(n)
        reg.histogram("hairpin_proxy_upstream_connect_seconds", "Connect.",
                      buckets=(0.1, 1.0)).observe(0.05 * n)
        return reg.render()

    merged = Registry("proxy", standard=False)
    families = merge_workers({"0": worker(1), "1": worker(2)})
    merged.collectors.register(type("C", (), {"collect": lambda self: iter(families)})())
    text = merged.render()
    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    assert sum(line.startswith("# TYPE hairpin_proxy_build_info ") for line in
               text.splitlines()) == 1
    conns = parsed["hairpin_proxy_connections"]
    assert conns.type == "counter"
    assert {(s.labels["worker"], s.value) for s in conns.samples if s.name.endswith("_total")} \
        == {("0", 1.0), ("1", 2.0)}
    hist = parsed["hairpin_proxy_upstream_connect_seconds"]
    assert {s.labels["worker"] for s in hist.samples} == {"0", "1"}
    assert [s.value for s in hist.samples if s.name.endswith("_count")] == [1.0, 1.0]
    # Each family's samples stand together: one TYPE line per family.
    types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(types) == len(set(types))


# --------------------------------------------------------------------------- every registration

SRC = Path(__file__).resolve().parents[1] / "src" / "hairpin_proxy"
KINDS = ("counter", "gauge", "histogram")


def _constant_strings(func: ast.AST) -> dict[str, str]:
    """Names bound to a string constant in ``func`` (a metric prefix such as ``p = "x_"``)."""
    out = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            out.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
    return out


def _name_of(arg: ast.expr, prefixes: dict[str, str]) -> str | None:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Add):
        left, right = _name_of(arg.left, prefixes), _name_of(arg.right, prefixes)
        return left + right if left is not None and right is not None else None
    if isinstance(arg, ast.Name):
        return prefixes.get(arg.id)
    return None


def registered_metrics() -> dict[str, str]:
    """Every metric name the package registers (``<registry>.counter/gauge/histogram(name,
    ...)`` anywhere under src/) → where; a name it cannot read fails, so none slips past."""
    found: dict[str, str] = {}
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text())
        prefixes: dict[str, str] = {}
        for func in ast.walk(tree):
            if isinstance(func, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                prefixes.update(_constant_strings(func))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in KINDS and node.args):
                continue
            where = f"{path.relative_to(SRC.parent)}:{node.lineno}"
            name = _name_of(node.args[0], prefixes)
            assert name is not None, f"{where}: cannot read the metric name; use a constant " \
                                     "or a prefix bound to one"
            if not name.startswith("hairpin_"):
                continue
            found[name] = where
    return found


def test_every_registered_metric_is_on_the_reference_page() -> None:
    text = DOC.read_text()
    missing = [f"{name} (registered at {where})"
               for name, where in sorted(registered_metrics().items())
               if f"| `{name}` |" not in text]
    assert not missing, "docs/metrics.md does not list:\n" + "\n".join(missing)


def test_the_registration_scan_finds_each_component() -> None:
    found = registered_metrics()
    assert {"hairpin_proxy_connections_total", "hairpin_controller_reconciles_total",
            "hairpin_etchosts_applies_total", "hairpin_proxy_targets_table_slots",
            "hairpin_proxy_workers", "hairpin_proxy_worker_restarts_total"} <= set(found)
