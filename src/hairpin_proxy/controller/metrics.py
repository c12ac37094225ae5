"""The controller's metrics (names and help texts are part of the interface: dashboards and
alerts use them)."""

from __future__ import annotations

from collections.abc import Callable

from hairpin_proxy.metrics import Registry


class ControllerMetrics:
    def __init__(self, registry: Registry) -> None:
        p = "hairpin_controller_"
        self._passes(registry, p)
        self._outcome(registry, p)
        self._edits(registry, p)
        self._limits(registry, p)
        self._routing(registry, p)

    def _passes(self, registry: Registry, p: str) -> None:
        """Passes, writes, conflicts and watches."""
        self.reconciles = registry.counter(p + "reconciles_total", "Reconcile passes by result.",
                                           ("result",))
        self.writes = registry.counter(
            p + "writes_total", "Writes by destination: corefile, import, node-local-dns, "
            "published, targets (the table), target-service (a per-target proxy Service), "
            "guard-policy (a data-plane guard NetworkPolicy).",
            ("target",))
        self.conflicts = registry.counter(p + "conflicts_total",
                                          "Writes refused with 409 Conflict and retried.")
        self.watch_restarts = registry.counter(p + "watch_restarts_total",
                                               "Watches re-established, by kind and reason.",
                                               ("kind", "reason"))

    def _outcome(self, registry: Registry, p: str) -> None:
        """The passes' outcome, the Lease, warnings, Events and API requests."""
        self.hosts_managed = registry.gauge(p + "hosts_managed", "Hosts in the managed rules.")
        self.hosts_rejected = registry.gauge(p + "hosts_rejected",
                                             "Ingress hosts refused by the policy.")
        self.last_sync = registry.gauge(p + "last_successful_sync_timestamp_seconds",
                                        "Unix time of the last reconcile that left every "
                                        "target in step.")
        self.leader = registry.gauge(p + "leader", "1 while this replica holds the Lease.")
        self.warnings = registry.gauge(p + "warnings", "Configuration warnings found at start "
                                                       "(1 = present).", ("kind",))
        self.parse_errors = registry.counter(p + "corefile_errors_total",
                                             "Reconciles that did not write because the "
                                             "Corefile could not be edited.")
        self.held = registry.gauge(p + "mass_removal_held",
                                   "1 while a large drop in hosts is being held back.")
        self.events = registry.counter(p + "events_total", "Kubernetes Events recorded.",
                                       ("reason",))
        self.requests = registry.counter(p + "api_requests_total",
                                         "Kubernetes API requests by verb and status code "
                                         "(0: no answer).", ("verb", "code"))
        self.duration = registry.histogram(p + "reconcile_duration_seconds",
                                           "Time from a reconcile's start to its last write.")
        self.withdrawn = registry.gauge(p + "rules_withdrawn",
                                        "1 while every rule is withdrawn (proxy Service missing "
                                        "or without ready endpoints, or uninstalling).")

    def _edits(self, registry: Registry, p: str) -> None:
        """The ConfigMaps we edit: what others do to them."""
        self.strays = registry.gauge(p + "stray_rules",
                                     "Rules of ours found outside the root server blocks "
                                     "(reported, never edited).")
        self.node_local_blocked = registry.gauge(
            p + "node_local_dns_reconciled",
            "1 while NodeLocal DNSCache's ConfigMap is labelled Reconcile and an addon manager "
            "runs (a pod in kube-system, or GKE's): not edited.")
        self.reverts = registry.counter(p + "reverts_total",
                                        "Changes of ours removed by someone else, by ConfigMap "
                                        "and the field manager that removed them.",
                                        ("configmap", "manager"))
        self.repairs_suspended = registry.gauge(p + "repairs_suspended",
                                                "1 while repairs of a ConfigMap are suspended "
                                                "(reverted too often; one try per "
                                                "--repair-backoff-max).", ("configmap",))
        self.throttled = registry.counter(p + "writes_throttled_total",
                                          "Passes held back by --write-interval.")

    def _limits(self, registry: Registry, p: str) -> None:
        """The rules budget, verification and the host policy's work."""
        self.rules_bytes = registry.gauge(p + "rules_bytes",
                                          "Bytes the managed hosts take in our rules (the "
                                          "limit is the room their ConfigMap leaves, or "
                                          "--rules-budget where set lower).")
        self.over_budget = registry.gauge(p + "ingresses_over_budget",
                                          "Objects (Ingresses, routes) refused because "
                                          "their hosts would overflow --rules-budget or "
                                          "a ConfigMap's room.")
        self.verdicts = registry.gauge(p + "host_verdicts",
                                       "Managed-host candidates by verification verdict.",
                                       ("verdict",))
        self.verify_checks = registry.counter(p + "verify_lookups_total",
                                              "Public DNS lookups made to verify hosts.")
        self.verify_errors = registry.counter(p + "verify_lookup_errors_total",
                                              "Verification lookups the resolver failed.")
        # Read at scrape time: a kept verdict ages while nothing else happens.
        self.kept_age_source: Callable[[], float] = lambda: 0.0
        self.verify_kept_age = registry.gauge(p + "verify_oldest_kept_verdict_seconds",
                                              "Age of the oldest verdict kept through resolver "
                                              "failures (0: none).",
                                              callback=lambda: self.kept_age_source())  # noqa: PLW0108 - set later
        self.evaluations = registry.counter(p + "ingress_evaluations_total",
                                            "Ingresses run through the host policy (new or "
                                            "changed ones; all of them after an IngressClass "
                                            "default change).")
        self.route_evaluations = registry.counter(
            p + "route_evaluations_total",
            "Gateway API routes read for their hosts (new or changed ones; all of them after "
            "a change to what they are read against: Gateways, classes, namespaces).")

    def _routing(self, registry: Registry, p: str) -> None:
        """Targets and the hosts they leave out."""
        self.targets = registry.gauge(p + "targets",
                                      "Data planes named by the hosts' claims, by state "
                                      "(relayed, no-proxy, proxy-unknown, not-found).",
                                      ("state",))
        self.hosts_unrouted = registry.gauge(p + "hosts_not_redirected",
                                             "Claimed hosts left alone because of their target "
                                             "(no-proxy, proxy-unknown, not-found) or still "
                                             "waiting for a new target to settle (settling).",
                                             ("reason",))
        self.host_conflicts = registry.gauge(p + "host_conflicts",
                                             "Claims that lost their host to an older object "
                                             "of another target.")
