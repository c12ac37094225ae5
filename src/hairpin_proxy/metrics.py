"""Prometheus metrics: a small facade over ``prometheus_client``.

The relay updates its metrics on its per-connection path, so the values stay in plain children
(an update is an attribute add on a pre-resolved child, no locks: one event loop per process).
At scrape time a custom collector turns them into ``prometheus_client`` metric families, in a
per-process :class:`~prometheus_client.CollectorRegistry` that also carries the standard
``process_*`` and ``python_*`` collectors and ``hairpin_proxy_build_info``; the exposition is
``prometheus_client``'s own (text format 0.0.4, or OpenMetrics when the scraper asks for it).
"""

from __future__ import annotations

import math
import platform
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.openmetrics import exposition as _om_exposition
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from hairpin_proxy.version import version

LabelValues = tuple[str, ...]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE: str = _om_exposition.CONTENT_TYPE_LATEST
_openmetrics_latest: Callable[[CollectorRegistry], bytes] = _om_exposition.generate_latest

BUILD_INFO = "hairpin_proxy_build_info"
# The component label of hairpin_proxy_build_info, told apart by the metrics a process registers
# when the caller does not name it.
COMPONENT_PREFIXES = (("hairpin_controller_", "controller"), ("hairpin_etchosts_", "etchosts"),
                      ("hairpin_proxy_", "proxy"))
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
# A sample line whose value is a whole number printed as "N.0" (prometheus_client's float repr).
_WHOLE = re.compile(rb"^([^#\n][^\n]* -?[0-9]+)\.0$", re.M)


def _prefers_openmetrics(accept: str) -> bool:
    """Whether an ``Accept`` header ranks OpenMetrics above (or level with) the text format."""
    best = {"om": -1.0, "text": -1.0}
    for part in accept.split(","):
        media, *params = (p.strip() for p in part.split(";"))
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        kind = {"application/openmetrics-text": "om", "text/plain": "text", "*/*": "text",
                "text/*": "text"}.get(media.lower())
        if kind is not None:
            best[kind] = max(best[kind], q)
    return best["om"] > 0 and best["om"] >= best["text"]


class _Metric:
    kind = ""

    def __init__(self, name: str, help: str, labelnames: Sequence[str] = ()) -> None:
        if not _NAME.match(name):
            raise ValueError(f"invalid metric name {name!r}")
        for label in labelnames:
            if not _LABEL.match(label) or label.startswith("__") or label == "le":
                raise ValueError(f"{name}: invalid label name {label!r}")
        self.name = name
        self.help = help
        self.labelnames = tuple(labelnames)

    def _check(self, values: Sequence[str]) -> LabelValues:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {values}")
        return tuple(str(v) for v in values)

    def family(self) -> Metric:
        """The metric family a scrape shows, built from the current values."""
        raise NotImplementedError


class CounterChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("counters only go up")
        self.value += amount


class Counter(_Metric):
    kind = "counter"

    def __init__(self, name: str, help: str, labelnames: Sequence[str] = ()) -> None:
        if not name.endswith("_total"):
            # prometheus_client would expose it as <name>_total anyway: say so at definition.
            raise ValueError(f"counter {name!r} must end in _total")
        super().__init__(name, help, labelnames)
        self._children: dict[LabelValues, CounterChild] = {}
        if not self.labelnames:
            self._children[()] = CounterChild()

    def labels(self, *values: str) -> CounterChild:
        key = self._check(values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = CounterChild()
        return child

    def inc(self, amount: float = 1.0) -> None:
        self.labels().inc(amount)

    def value(self, *values: str) -> float:
        child = self._children.get(tuple(values))
        return child.value if child else 0.0

    def family(self) -> Metric:
        fam = CounterMetricFamily(self.name, self.help, labels=self.labelnames)
        for key, child in sorted(self._children.items()):
            fam.add_metric(key, child.value)
        return fam


class GaugeChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def set(self, value: float) -> None:
        self.value = value

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount


class Gauge(_Metric):
    kind = "gauge"

    def __init__(self, name: str, help: str, labelnames: Sequence[str] = (),
                 callback: Callable[[], float] | None = None) -> None:
        super().__init__(name, help, labelnames)
        if callback is not None and self.labelnames:
            raise ValueError(f"{name}: a callback gauge has no labels")
        self._children: dict[LabelValues, GaugeChild] = {}
        self._callback = callback
        if not self.labelnames:
            self._children[()] = GaugeChild()

    def labels(self, *values: str) -> GaugeChild:
        key = self._check(values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = GaugeChild()
        return child

    def set(self, value: float) -> None:
        self.labels().set(value)

    def inc(self, amount: float = 1.0) -> None:
        self.labels().inc(amount)

    def dec(self, amount: float = 1.0) -> None:
        self.labels().dec(amount)

    def value(self, *values: str) -> float:
        if self._callback is not None and not values:
            return float(self._callback())
        child = self._children.get(tuple(values))
        return child.value if child else 0.0

    def family(self) -> Metric:
        fam = GaugeMetricFamily(self.name, self.help, labels=self.labelnames)
        if self._callback is not None:
            fam.add_metric((), float(self._callback()))
            return fam
        for key, child in sorted(self._children.items()):
            fam.add_metric(key, child.value)
        return fam


DEFAULT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                   5.0, 10.0)


class HistogramChild:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.sum += value
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
                return
        self.counts[-1] += 1

    @property
    def count(self) -> int:
        return sum(self.counts)


class Histogram(_Metric):
    kind = "histogram"

    def __init__(self, name: str, help: str, labelnames: Sequence[str] = (),
                 buckets: Sequence[float] = DEFAULT_BUCKETS) -> None:
        super().__init__(name, help, labelnames)
        self.bounds = tuple(sorted(b for b in buckets if not math.isinf(b)))
        self._children: dict[LabelValues, HistogramChild] = {}
        if not self.labelnames:
            self._children[()] = HistogramChild(self.bounds)

    def labels(self, *values: str) -> HistogramChild:
        key = self._check(values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = HistogramChild(self.bounds)
        return child

    def observe(self, value: float) -> None:
        self.labels().observe(value)

    def family(self) -> Metric:
        fam = HistogramMetricFamily(self.name, self.help, labels=self.labelnames)
        for key, child in sorted(self._children.items()):
            running = 0
            buckets: list[tuple[str, float]] = []
            for bound, count in zip((*self.bounds, math.inf), child.counts, strict=True):
                running += count
                buckets.append(("+Inf" if math.isinf(bound) else repr(float(bound)), running))
            fam.add_metric(key, buckets, child.sum)
        return fam


class Registry:
    """The metrics of one process, and the ``prometheus_client`` registry that exposes them.

    ``component`` (proxy, controller or etchosts) labels ``hairpin_proxy_build_info``; left out,
    it is told from the names of the metrics registered. ``standard`` adds the ``process_*`` and
    ``python_*`` collectors.
    """

    def __init__(self, component: str | None = None, *, standard: bool = True) -> None:
        self.component = component
        self._metrics: dict[str, _Metric] = {}
        self.collectors = CollectorRegistry(auto_describe=False)
        self._build = {"version": version(), "python_version": platform.python_version()}
        self.collectors.register(self)
        if standard:
            ProcessCollector(registry=self.collectors)
            PlatformCollector(registry=self.collectors)
            GCCollector(registry=self.collectors)
        # Names the other collectors own (with the suffixes their samples add).
        self._reserved = {BUILD_INFO}
        for fam in self.collectors.collect():
            if fam.name != BUILD_INFO:
                self._reserved |= {fam.name, *(s.name for s in fam.samples)}

    def _add(self, metric: _Metric) -> None:
        if metric.name in self._metrics or metric.name in self._reserved:
            raise ValueError(f"metric {metric.name} registered twice")
        self._metrics[metric.name] = metric

    def counter(self, name: str, help: str, labelnames: Sequence[str] = ()) -> Counter:
        m = Counter(name, help, labelnames)
        self._add(m)
        return m

    def gauge(self, name: str, help: str, labelnames: Sequence[str] = (),
              callback: Callable[[], float] | None = None) -> Gauge:
        m = Gauge(name, help, labelnames, callback)
        self._add(m)
        return m

    def histogram(self, name: str, help: str, labelnames: Sequence[str] = (),
                  buckets: Sequence[float] = DEFAULT_BUCKETS) -> Histogram:
        m = Histogram(name, help, labelnames, buckets)
        self._add(m)
        return m

    def metrics(self) -> Iterator[Counter | Gauge | Histogram]:
        """The metrics registered here, in registration order."""
        for m in self._metrics.values():
            assert isinstance(m, Counter | Gauge | Histogram)
            yield m

    def which_component(self) -> str:
        if self.component:
            return self.component
        for prefix, component in COMPONENT_PREFIXES:
            if any(name.startswith(prefix) for name in self._metrics):
                return component
        return "unknown"

    def collect(self) -> Iterable[Metric]:
        """The ``prometheus_client`` collector protocol: build info, then our metrics."""
        info = GaugeMetricFamily(BUILD_INFO, "Build of this hairpin-proxy process (always 1).",
                                 labels=("version", "python_version", "component"))
        info.add_metric((self._build["version"], self._build["python_version"],
                         self.which_component()), 1)
        yield info
        for m in self._metrics.values():
            yield m.family()

    def expose(self, accept: str = "") -> tuple[bytes, str]:
        """The exposition body and its content type, as the ``Accept`` header prefers."""
        if _prefers_openmetrics(accept):
            body = _openmetrics_latest(self.collectors)
            return body, OPENMETRICS_CONTENT_TYPE
        # Whole numbers without the trailing ".0", as the Go client prints them.
        return _WHOLE.sub(rb"\1", generate_latest(self.collectors)), CONTENT_TYPE

    def render(self) -> str:
        """The text exposition format 0.0.4."""
        return self.expose()[0].decode()


def merge_workers(texts: Mapping[str, str], label: str = "worker") -> list[Metric]:
    """The families of several processes' text expositions as one set, each sample labelled
    with the process it came from (``label``): one admin endpoint speaks for every worker of
    a pod. Build info is left out: the process that merges states its own."""
    merged: dict[str, Metric] = {}
    for worker, text in texts.items():
        for fam in text_string_to_metric_families(text):
            if fam.name == BUILD_INFO:
                continue
            into = merged.get(fam.name)
            if into is None:
                into = merged[fam.name] = Metric(fam.name, fam.documentation, fam.type, fam.unit)
            into.samples.extend(Sample(s.name, {**s.labels, label: worker}, s.value,
                                       s.timestamp, s.exemplar) for s in fam.samples)
    return list(merged.values())


class WorkerFamilies:
    """A collector that yields what ``merge_workers`` last made (set by ``update``)."""

    def __init__(self) -> None:
        self.families: list[Metric] = []

    def update(self, texts: Mapping[str, str]) -> None:
        self.families = merge_workers(texts)

    def collect(self) -> Iterable[Metric]:
        return iter(self.families)
