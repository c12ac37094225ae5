"""A small Prometheus registry: counters, gauges and histograms, text exposition format 0.0.4.

Kept in-process and dependency-free because the relay updates it on its per-connection path:
an update is an attribute add on a pre-resolved child, no locks (one event loop per process).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

LabelValues = tuple[str, ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def _labels(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


class _Metric:
    kind = ""

    def __init__(self, name: str, help: str, labelnames: Sequence[str] = ()) -> None:
        self.name = name
        self.help = help
        self.labelnames = tuple(labelnames)

    def _check(self, values: Sequence[str]) -> LabelValues:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {values}")
        return tuple(str(v) for v in values)

    def samples(self) -> Iterable[str]:
        raise NotImplementedError

    def render(self) -> str:
        head = f"# HELP {self.name} {_escape(self.help)}\n# TYPE {self.name} {self.kind}\n"
        return head + "".join(line + "\n" for line in self.samples())


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

    def samples(self) -> Iterable[str]:
        for key, child in sorted(self._children.items()):
            yield f"{self.name}{_labels(self.labelnames, key)} {_fmt(child.value)}"


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

    def samples(self) -> Iterable[str]:
        if self._callback is not None:
            yield f"{self.name} {_fmt(float(self._callback()))}"
            return
        for key, child in sorted(self._children.items()):
            yield f"{self.name}{_labels(self.labelnames, key)} {_fmt(child.value)}"


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

    def samples(self) -> Iterable[str]:
        for key, child in sorted(self._children.items()):
            running = 0
            for bound, count in zip((*self.bounds, math.inf), child.counts, strict=True):
                running += count
                le = f'le="{_fmt(bound)}"'
                yield f"{self.name}_bucket{_labels(self.labelnames, key, le)} {running}"
            yield f"{self.name}_sum{_labels(self.labelnames, key)} {_fmt(child.sum)}"
            yield f"{self.name}_count{_labels(self.labelnames, key)} {running}"


class Registry:
    def __init__(self) -> None:
        self._metrics: dict[str, _Metric] = {}

    def _add(self, metric: _Metric) -> None:
        if metric.name in self._metrics:
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

    def render(self) -> str:
        return "".join(m.render() for m in self._metrics.values())


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
