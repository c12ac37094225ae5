"""The relay's Prometheus metrics, with per-listener children resolved once for the hot path."""

from __future__ import annotations

from dataclasses import dataclass

from hairpin_proxy.metrics import Counter, CounterChild, Gauge, GaugeChild, HistogramChild, Registry

# Every cause an error can be counted under; children exist from the start so that a scrape
# shows zeros rather than missing series.
CAUSES = ("dns", "connect_refused", "connect_timeout", "connect_error", "idle_timeout",
          "over_limit", "reset", "io_error", "shutdown")

CONNECT_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                   5.0, 10.0)


@dataclass(frozen=True, slots=True)
class ListenerStats:
    """The children one listener updates; attribute access only on the per-chunk path."""

    active: GaugeChild
    total: CounterChild
    bytes_up: CounterChild
    bytes_down: CounterChild
    connect_seconds: HistogramChild
    errors: dict[str, CounterChild]


class RelayMetrics:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.active = registry.gauge(
            "hairpin_proxy_connections_active", "Connections being relayed now.", ["listener"])
        self.total = registry.counter(
            "hairpin_proxy_connections_total", "Connections accepted (over-limit ones included).",
            ["listener"])
        self.bytes = registry.counter(
            "hairpin_proxy_bytes_total", "Bytes relayed; direction upstream is client to target.",
            ["listener", "direction"])
        self.connect_seconds = registry.histogram(
            "hairpin_proxy_upstream_connect_seconds",
            "Time from accept to an established upstream connection (resolution included).",
            ["listener"], buckets=CONNECT_BUCKETS)
        self.errors = registry.counter(
            "hairpin_proxy_errors_total", "Connections that ended in an error, by cause.",
            ["listener", "cause"])
        self.draining = registry.gauge(
            "hairpin_proxy_draining", "1 after SIGTERM while in-flight connections drain.")

    def for_listener(self, name: str) -> ListenerStats:
        return ListenerStats(
            active=self.active.labels(name),
            total=self.total.labels(name),
            bytes_up=self.bytes.labels(name, "upstream"),
            bytes_down=self.bytes.labels(name, "downstream"),
            connect_seconds=self.connect_seconds.labels(name),
            errors={cause: self.errors.labels(name, cause) for cause in CAUSES},
        )


# --------------------------------------------------------------------------- relay hardening
# Added at the end so that concurrent work on the metrics above merges without conflicts.

# Endings of the timeouts and the per-source cap; ``for_listener`` reads CAUSES when called.
CAUSES = (*CAUSES, "first_byte_timeout", "half_close_timeout",  # type: ignore[assignment]
          "over_source_limit")


def dns_failures(registry: Registry) -> Counter:
    """Failed lookups of an upstream's name (the ``target`` label, kept for dashboards);
    ``result``: ``stale`` (its last good answer was used instead) or ``error`` (none to use:
    the connections waiting for it fail with ``dns``)."""
    return registry.counter(
        "hairpin_proxy_dns_failures_total",
        "Failed lookups of a target name; result=stale when its last good answer was used.",
        ["target", "result"])


def table_metrics(registry: Registry) -> tuple[Gauge, Counter]:
    """The targets table's: slots being served, and tables refused by reason."""
    slots = registry.gauge("hairpin_proxy_targets_table_slots",
                           "Slots of the targets table being served.")
    errors = registry.counter(
        "hairpin_proxy_targets_table_errors_total",
        "Targets tables refused (the last good one kept serving), by reason.", ["reason"])
    return slots, errors


def worker_metrics(registry: Registry) -> tuple[Gauge, Counter]:
    """The supervisor's own, beside its workers' (``--workers`` above 1): workers running,
    and restarts."""
    live = registry.gauge("hairpin_proxy_workers", "Worker processes running.")
    restarts = registry.counter("hairpin_proxy_worker_restarts_total",
                                "Workers restarted after they exited.")
    return live, restarts


def proxy_metrics(registry: Registry) -> RelayMetrics:
    """Every metric of the proxy, registered (the reference page is generated from this)."""
    metrics = RelayMetrics(registry)
    dns_failures(registry)
    table_metrics(registry)
    return metrics
