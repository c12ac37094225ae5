"""Settings: one dataclass per command, each field a flag and an environment variable.

A field's metadata carries its one-line doc (``help``); the flag is ``--field-name`` and the
environment variable ``HAIRPIN_FIELD_NAME`` unless the metadata names others. Precedence is
flag, then environment, then default. ``settings_parser`` and ``settings_from_args`` turn a
dataclass into argparse arguments and back, so ``--help`` can never drift from the fields.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

ENV_PREFIX = "HAIRPIN_"

T = TypeVar("T")


def opt(default: Any, help: str, *, env: str | None = None, flag: str | None = None,
        positional: bool = False, metavar: str | None = None) -> Any:
    """Declare a settings field with its one-line doc and, optionally, its own env/flag name."""
    meta: dict[str, Any] = {"help": help, "env": env, "flag": flag, "positional": positional,
                            "metavar": metavar}
    if isinstance(default, list | dict | set):
        raise TypeError("use a tuple for list defaults")
    return dataclasses.field(default=default, metadata=meta)


class SettingsError(ValueError):
    """A flag or environment value could not be understood."""


def usage_error(command: str, message: str) -> int:
    """Say why a command line cannot be run, as every command does: one line on stderr,
    ``hairpin-proxy <command>: error: <message>``, no timestamp; the exit status (2)."""
    print(f"hairpin-proxy {command}: error: {message}", file=sys.stderr)
    return 2


def env_name(f: dataclasses.Field[Any]) -> str:
    return f.metadata.get("env") or ENV_PREFIX + f.name.upper()


def flag_name(f: dataclasses.Field[Any]) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _convert(raw: str, tp: Any, what: str, name: str = "") -> Any:
    """``raw`` as a value of ``tp``; SettingsError, worded for a person, when it is not one.

    Numbers must be finite and not negative (no setting takes a negative count or duration);
    ``name`` picks the tighter ranges of ``_BOUNDS`` (ports, TTLs, fractions).
    """
    tp, _ = _unwrap_optional(tp)
    origin = typing.get_origin(tp)
    try:
        if tp is bool:
            low = raw.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off", ""):
                return False
            raise ValueError(f"expected true or false, got {raw!r}")
        if tp is int:
            try:
                number: float = int(raw.strip())
            except ValueError:
                raise ValueError(f"expected a whole number, got {raw!r}") from None
            return _in_bounds(number, name, raw)
        if tp is float:
            try:
                number = float(raw.strip())
            except ValueError:
                raise ValueError(f"expected a number, got {raw!r}") from None
            if not math.isfinite(number):
                raise ValueError(f"expected a finite number, got {raw!r}")
            return _in_bounds(number, name, raw)
        if tp is Path:
            return Path(raw)
        if origin is Literal:
            choices = typing.get_args(tp)
            if raw not in choices:
                raise ValueError(f"invalid choice {raw!r} (expected one of "
                                 f"{', '.join(map(str, choices))})")
            return raw
        if tp is str:
            if name in _HOSTPORTS and raw.strip():
                _check_hostport(raw)
            return raw
    except ValueError as exc:
        raise SettingsError(f"{what}: {exc}") from None
    raise TypeError(f"unsupported settings type {tp!r}")


# Tighter ranges than "not negative", by field name: (least, most, what the value is).
_BOUNDS: dict[str, tuple[float, float, str]] = {
    "port": (0, 65535, "a port (0 to 65535)"),
    "tls_port": (0, 65535, "a port (0 to 65535)"),
    "dns_port": (1, 65535, "a port (1 to 65535)"),
    "dns_ttl": (1, 3600, "a TTL of 1 to 3600 seconds"),
    "mass_removal_fraction": (0, 1, "a fraction between 0 and 1"),
    "timeout": (0.001, math.inf, "a positive number of seconds"),
}
# ADDR:PORT settings (empty disables them).
_HOSTPORTS = frozenset({"admin_listen"})


def _in_bounds(number: Any, name: str, raw: str) -> Any:
    least, most, what = _BOUNDS.get(name, (0, math.inf, "not negative"))
    if not least <= number <= most:
        if name in _BOUNDS:
            raise ValueError(f"expected {what}, got {raw!r}")
        raise ValueError(f"must not be negative, got {raw!r}")
    return number


def _check_hostport(raw: str) -> None:
    from hairpin_proxy.addresses import parse_hostport

    try:
        parse_hostport(raw)
    except ValueError as exc:
        raise ValueError(f"expected ADDR:PORT, {exc}") from None


def _is_tuple(tp: Any) -> bool:
    return typing.get_origin(tp) is tuple


def _split_list(raw: str) -> list[str]:
    # Environment lists: whitespace or commas separate items.
    return [item for item in raw.replace(",", " ").split() if item]


def settings_parser(cls: type[Any], parser: argparse.ArgumentParser) -> None:
    """Add one argument per field of the settings dataclass ``cls`` to ``parser``."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        base, _ = _unwrap_optional(tp)
        env = env_name(f)
        default = f.default
        shown = "" if default in (None, (), "") else f" (default: {_show(default)})"
        help_text = f"{f.metadata.get('help', '')}{shown} [env: {env}]"
        kwargs: dict[str, Any] = {"help": help_text, "default": argparse.SUPPRESS}
        if f.metadata.get("metavar"):
            kwargs["metavar"] = f.metadata["metavar"]
        if _is_tuple(tp):
            item_tp = typing.get_args(tp)[0]
            if typing.get_origin(item_tp) is Literal:
                kwargs.setdefault("metavar", _choices_metavar(item_tp))
            if f.metadata.get("positional"):
                parser.add_argument(f.name, nargs="*", **kwargs)
            else:
                parser.add_argument(flag_name(f), dest=f.name, action="append", **kwargs)
            continue
        if base is bool:
            parser.add_argument(flag_name(f), dest=f.name, action=argparse.BooleanOptionalAction,
                                **kwargs)
            continue
        if typing.get_origin(base) is Literal:
            # Checked by _convert, in our words; argparse's own "invalid choice" is not.
            kwargs.setdefault("metavar", _choices_metavar(base))
        if f.metadata.get("positional"):
            parser.add_argument(f.name, nargs="?", **kwargs)
        else:
            parser.add_argument(flag_name(f), dest=f.name, **kwargs)


def _choices_metavar(tp: Any) -> str:
    return "{" + ",".join(map(str, typing.get_args(tp))) + "}"


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return " ".join(str(v) for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def settings_from_args(cls: type[T], args: argparse.Namespace | Mapping[str, Any],
                       environ: Mapping[str, str] | None = None) -> T:
    """Build ``cls`` from parsed flags, then the environment, then the defaults."""
    given = vars(args) if isinstance(args, argparse.Namespace) else dict(args)
    env = os.environ if environ is None else environ
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        tp = hints[f.name]
        what = f"{flag_name(f)} / {env_name(f)}"
        if f.name in given and given[f.name] not in (None, []):
            raw = given[f.name]
        elif env.get(env_name(f), "") != "":
            raw = env[env_name(f)]
            if _is_tuple(tp):
                raw = _split_list(raw)
        else:
            continue
        if _is_tuple(tp):
            item_tp = typing.get_args(tp)[0]
            items = raw if isinstance(raw, list | tuple) else [raw]
            values[f.name] = tuple(_convert(str(i), item_tp, what, f.name)
                                   if isinstance(i, str) else i for i in items)
        elif isinstance(raw, str):
            values[f.name] = _convert(raw, tp, what, f.name)
        else:
            values[f.name] = raw
    return cls(**values)


# --------------------------------------------------------------------------- shared groups

HostsFrom = Literal["tls", "rules", "all"]
LogFormat = Literal["text", "json"]
ProxyProtocol = Literal["v1", "v2"]

DEFAULT_TARGET_SERVER = "ingress-nginx-controller.ingress-nginx.svc.cluster.local"


@dataclasses.dataclass(frozen=True)
class LogSettings:
    log_level: Literal["debug", "info", "warning", "error"] = opt("info", "Log level.")
    log_format: LogFormat = opt("text", "Log line format: text or json (one object per line).")


@dataclasses.dataclass(frozen=True)
class PolicySettings:
    hosts_from: HostsFrom = opt("tls", "Which Ingress hosts to redirect: tls (spec.tls[].hosts), "
                                       "rules (spec.rules[].host) or all.")
    ingress_class: tuple[str, ...] = opt((), "Only Ingresses of this class (repeatable); "
                                             "empty means every class.")
    include_namespace: tuple[str, ...] = opt((), "Only Ingresses in this namespace (repeatable); "
                                                 "empty means all namespaces.")
    exclude_namespace: tuple[str, ...] = opt((), "Ignore Ingresses in this namespace (repeatable).")
    domain: tuple[str, ...] = opt((), "Only hosts equal to or under this domain (repeatable); "
                                      "empty allows every domain.")
    cluster_domain: str = opt("cluster.local", "The cluster's DNS domain; hosts under it are "
                                               "never redirected.")
    max_hosts_per_ingress: int = opt(100, "An Ingress asking for more hosts than this is "
                                          "refused as a whole; 0 means no limit.")


@dataclasses.dataclass(frozen=True)
class TargetSettings:
    target: tuple[str, ...] = opt(
        (), "Data plane of an IngressClass or a Gateway, KEY=NAMESPACE/SERVICE[:v1|v2|none] "
            "(KEY: a class name, gateway:NAMESPACE/NAME or traefik:NAME; repeatable); wins "
            "over discovery.")
    gateway_api: Literal["auto", "off"] = opt(
        "auto", "Read Gateway API routes when the cluster serves them (CRDs installed later "
                "are picked up); off ignores them.")
    gateway_class: tuple[str, ...] = opt((), "Only Gateways of this GatewayClass (repeatable); "
                                             "empty means every class.")
    traefik_ingressroute: Literal["auto", "off"] = opt(
        "off", "Read Traefik IngressRoutes when the cluster serves them (needs the RBAC of "
               "deploy/components/traefik-ingressroute); off ignores them.")
    target_server: str = opt(DEFAULT_TARGET_SERVER, "The default target: the data plane the "
                                                    "main proxy Service relays to (the proxy's "
                                                    "--target-server, same variable); a class "
                                                    "whose data plane is that Service shares "
                                                    "it, no slot.", env="TARGET_SERVER")


@dataclasses.dataclass(frozen=True)
class KubeSettings:
    kubeconfig: Path | None = opt(None, "Kubeconfig file (current context); in-cluster service "
                                        "account when unset.", env="KUBECONFIG")
    namespace: str = opt("", "Our own namespace (Lease, proxy Service, published hosts); "
                             "else POD_NAMESPACE, the service account's or the context's.")


# --------------------------------------------------------------------------- commands

@dataclasses.dataclass(frozen=True)
class ProxySettings(LogSettings):
    listen: tuple[str, ...] = opt((), "Listener ADDR:PORT[=TARGET_HOST:TARGET_PORT][/v1|/v2]"
                                      "[@ADV_PORT] (repeatable; @ADV_PORT: the destination "
                                      "port the PROXY header names; [::] is IPv4 and IPv6, "
                                      "or IPv4 only where there is no IPv6); defaults to "
                                      "[::]:80=$TARGET_SERVER:80 and "
                                      "[::]:443=$TARGET_SERVER:443.")
    advertise_address: str = opt("", "Destination IP address every PROXY header names (e.g. "
                                     "the load balancer's); default: the address the client "
                                     "connected to.")
    target_server: str = opt(DEFAULT_TARGET_SERVER, "The default target: the data plane (the "
                                                    "ingress controller's Service) a listener "
                                                    "without its own TARGET_HOST relays to.",
                             env="TARGET_SERVER")
    proxy_protocol: ProxyProtocol = opt("v1", "PROXY protocol version for listeners that do not "
                                              "set their own.")
    admin_listen: str = opt("[::]:9090", "Address of /healthz, /readyz and /metrics ([::]: "
                                         "IPv4 and IPv6); empty disables.")
    connect_timeout: float = opt(5.0, "Seconds to resolve the target and get a connection "
                                      "accepted (all its addresses together).")
    dns_server: tuple[str, ...] = opt((), "DNS server ADDR[:PORT] for target names "
                                          "(repeatable); default: those of /etc/resolv.conf.")
    idle_timeout: float = opt(3600.0, "Seconds a connection may pass no bytes either way; "
                                      "0 disables.")
    max_connections: int = opt(0, "Concurrent connections, all workers together; excess is "
                                  "accepted and closed at once. 0: what the container's "
                                  "memory limit holds with every connection stalled and the "
                                  "open-file limit allows (raised to its hard limit at start), "
                                  "at most 20000.")
    max_connections_per_source: int = opt(0, "Concurrent connections from one client address, "
                                             "all listeners and workers together; 0: no cap.")
    first_byte_timeout: float = opt(30.0, "Seconds a client may stay connected without "
                                          "sending a byte; 0 disables.")
    half_close_timeout: float = opt(60.0, "Seconds a connection may stay silent once one "
                                          "side has finished sending; 0 disables.")
    socket_buffer: int = opt(65536, "SO_SNDBUF/SO_RCVBUF of every relayed socket, in bytes "
                                    "(the kernel doubles it); bounds what a stalled "
                                    "connection holds. 0: the kernel's autotuning.")
    splice: Literal["auto", "off"] = opt(
        "auto", "Move a stream's bytes socket to pipe to socket with splice(2), never through "
                "the proxy's memory; auto: where the kernel allows it (probed at start), off: "
                "copy every byte.")
    splice_threshold: int = opt(262144, "Bytes a direction of a connection moves by copying, "
                                        "in a run of reads of 16 KiB or more (a stream), "
                                        "before it splices the rest (0: all but the PROXY "
                                        "header and what came with it).")
    grace_period: float = opt(25.0, "Seconds to drain connections after SIGTERM.")
    workers: int = opt(0, "Worker processes sharing the listeners (SO_REUSEPORT), each with "
                          "its share of the connection limits, under one supervisor that "
                          "serves the admin endpoint; 0: one per CPU the container may use "
                          "(its CPU quota rounded up), as nginx's worker_processes auto.")
    loop: Literal["auto", "asyncio", "uvloop"] = opt("auto", "Event loop; auto is uvloop "
                                                             "when installed, else asyncio.")
    engine: Literal["auto", "epoll"] = opt(
        "auto", "Data path; epoll (Linux) is the only one, auto and epoll both select it.")
    targets_file: Path | None = opt(None, "The targets table (JSON, written by the controller "
                                          "into the hairpin-proxy-targets ConfigMap); its "
                                          "slots get listeners, applied without a restart. "
                                          "Unset: only --listen.")
    targets_poll: float = opt(2.0, "Seconds between checks of --targets-file for a new table.")
    targets_address: str = opt("::", "Address the table's listeners bind (:: is IPv4 and IPv6, "
                                     "or IPv4 only where there is no IPv6).")


@dataclasses.dataclass(frozen=True)
class RenderSettings(TargetSettings, PolicySettings, LogSettings):
    corefile: Path | None = opt(None, "Corefile to render (only read; the result is printed); "
                                      "beside another mode, the cluster's Corefile, read for "
                                      "the zones it serves (never redirected).")
    hosts_file: Path | None = opt(None, "Hosts file to render instead of a Corefile (only read).")
    ingress: tuple[str, ...] = opt((), "Ingress YAML/JSON file, directory, or - for standard "
                                       "input (repeatable).", metavar="PATH")
    proxy_ip: tuple[str, ...] = opt((), "Proxy Service ClusterIP the rules answer with "
                                        "(repeatable, IPv4 or IPv6; needed for every output "
                                        "but --diff/--check of a removal).")
    legacy_target: str = opt("", "The proxy Service's fully qualified name (not a target), by "
                                 "which rules of earlier versions are recognised and which is "
                                 "never redirected; default <proxy-service>.<namespace>.svc."
                                 "<cluster-domain>.")
    dns_ttl: int = opt(10, "TTL in seconds of the A/AAAA answers for managed hosts (1-3600).")
    dns_port: int = opt(53, "Port of the server blocks to manage.")
    diff: bool = opt(False, "Print a unified diff instead of the new file.")
    check: bool = opt(False, "Print nothing; exit 1 when the file would change.")
    import_snippet: bool = opt(False, "Print the snippet for a coredns-custom import key; with "
                                      "--corefile, first check that Corefile imports it.")
    import_key: str = opt("hairpin-proxy.override", "Key name the snippet is stored under "
                                                    "(checked against the Corefile's imports).")
    namespace: str = opt("hairpin-proxy", "As the controller's namespace: where the proxy "
                                          "Service, its slot Services and the targets "
                                          "ConfigMap are looked for among the inputs.")
    proxy_service: str = opt("hairpin-proxy", "The proxy Service in that namespace.")
    max_targets: int = opt(32, "As the controller's --max-targets.")
    targets_configmap: str = opt("hairpin-proxy-targets", "As the controller's "
                                                          "--targets-configmap: its slot table "
                                                          "is read from the inputs.")
    rules_budget: int = opt(0, "As the controller's --rules-budget: a cap in bytes on our "
                               "rules below the room the file leaves (0: none).")
    namespace_share_hosts: int = opt(0, "As the controller's --namespace-share-hosts.")
    namespace_share_bytes: int = opt(0, "As the controller's --namespace-share-bytes.")
    node_local_corefile: Path | None = opt(None, "NodeLocal DNSCache Corefile to render "
                                                 "instead (only read).")
    print_targets: bool = opt(False, "Also print the targets table and the slot Services the "
                                     "controller would write (YAML, after the file).")


@dataclasses.dataclass(frozen=True)
class CorednsSettings:
    mode: Literal["coredns", "coredns-import"] = opt("coredns", "Edit the Corefile itself or "
                                                                "write an import ConfigMap key.")
    configmap_namespace: str = opt("kube-system", "Namespace of the CoreDNS ConfigMap.")
    configmap_name: str = opt("coredns", "CoreDNS ConfigMap (RKE2: rke2-coredns-rke2-coredns, "
                                         "LKE: coredns-base).")
    configmap_key: str = opt("Corefile", "Key of the Corefile in that ConfigMap.")
    import_configmap_name: str = opt("coredns-custom", "ConfigMap imported by the Corefile "
                                                       "(coredns-import mode).")
    import_key: str = opt("hairpin-proxy.override", "Our key in the import ConfigMap.")
    dns_port: int = opt(53, "Port of the server blocks to manage.")


@dataclasses.dataclass(frozen=True)
class ControllerSettings(CorednsSettings, TargetSettings, PolicySettings, KubeSettings,
                         LogSettings):
    legacy_target: str = opt("", "The proxy Service's fully qualified name (not a target), by "
                                 "which rules of earlier versions are recognised and which is "
                                 "never redirected; default <proxy-service>.<namespace>.svc."
                                 "<cluster-domain>.")
    max_targets: int = opt(32, "Data planes besides the default that get their own proxy "
                               "ports and Service (1-1000).")
    target_settle: float = opt(90.0, "Seconds a new target's ports are published before its "
                                     "hosts get DNS rules (the kubelet's ConfigMap volume "
                                     "sync).")
    targets_configmap: str = opt("hairpin-proxy-targets", "ConfigMap in our namespace holding "
                                                          "the targets table the proxies "
                                                          "mount.")
    api_discovery_interval: float = opt(60.0, "Seconds between checks for Gateway API "
                                              "resources being installed or removed.")
    dns_ttl: int = opt(10, "TTL in seconds of the A/AAAA answers for managed hosts (1-3600).")
    verify_hosts: Literal["on", "off"] = opt(
        "on", "Redirect a host only when its public DNS answer is one of this cluster's load "
              "balancer addresses; off for split-horizon or air-gapped clusters.")
    verify_resolver: tuple[str, ...] = opt(
        (), "DNS server ADDR[:PORT] to verify hosts against (repeatable); default: the system "
            "resolver (the controller runs with dnsPolicy: Default, the node's).")
    verify_interval: float = opt(300.0, "Seconds between re-checks of a host's public DNS.")
    rules_budget: int = opt(0, "A cap in bytes on our rules, below the room their ConfigMap "
                               "leaves under its 1 MiB (0, the default: that room alone); the "
                               "newest objects (Ingresses, routes) over it are refused.")
    namespace_share_hosts: int = opt(0, "Hosts one namespace's objects may have redirected "
                                        "(0: no limit); over it, that namespace's newest "
                                        "objects are refused, its oldest keep theirs.")
    namespace_share_bytes: int = opt(0, "Bytes of rules one namespace's hosts may take, each "
                                        "host counted in full in both stanzas (the plain "
                                        "spelling: what is written takes less) (0: no "
                                        "limit); over it, as --namespace-share-hosts.")
    write_interval: float = opt(2.0, "Least seconds between two writes of a DNS ConfigMap (a "
                                     "flapping Ingress cannot make CoreDNS reload without end).")
    proxy_grace: float = opt(60.0, "Seconds the proxy Service may have no ready endpoint "
                                   "before every rule is withdrawn (restored when it is back).")
    uninstall_timeout: float = opt(20.0, "Seconds an uninstall may take to withdraw the rules "
                                         "before what is held for it is let go anyway, with a "
                                         "Warning Event.")
    node_local_dns: Literal["auto", "off"] = opt(
        "auto", "Keep our hosts in NodeLocal DNSCache's Corefile too when it runs "
                "(ConfigMap kube-system/node-local-dns or nodelocaldns); off leaves it alone.")
    nudge_coredns: bool = opt(False, "After each Corefile write, annotate the CoreDNS pods so "
                                     "that the kubelet refreshes their ConfigMap volume at once "
                                     "(needs the nudge-coredns RBAC component).")
    coredns_selector: str = opt("k8s-app=kube-dns", "Label selector of the CoreDNS pods "
                                                    "(for --nudge-coredns).")
    proxy_service: str = opt("hairpin-proxy", "The proxy Service in our namespace.")
    publish_configmap: str = opt("", "ConfigMap in our namespace where the host list is "
                                     "published for the etchosts node agent; empty (the "
                                     "default): not published. The etchosts component and "
                                     "the chart's etchosts.enabled set it.")
    leader_elect: bool = opt(True, "Elect one writer among replicas with a Lease.")
    lease_name: str = opt("hairpin-proxy-controller", "Name of the leader-election Lease.")
    lease_duration: float = opt(15.0, "Seconds a leader's Lease stays valid without renewal.")
    renew_deadline: float = opt(10.0, "Seconds a leader keeps trying to renew before it "
                                      "stops writing.")
    retry_period: float = opt(2.0, "Seconds between Lease attempts.")
    debounce: float = opt(0.2, "Seconds of quiet that end a burst of changes (one write per "
                               "burst); a change after a quiet spell is written at once.")
    allow_mass_removal: bool = opt(False, "Apply large drops in the host set at once.")
    mass_removal_fraction: float = opt(0.5, "A drop of more than this fraction of hosts is "
                                            "held back.")
    mass_removal_grace: float = opt(300.0, "Seconds a held-back drop must persist before it "
                                           "is applied.")
    admin_listen: str = opt("[::]:9090", "Address of /healthz, /readyz and /metrics ([::]: "
                                         "IPv4 and IPv6); empty disables.")
    watch_timeout: float = opt(70.0, "Seconds of silence after which a watch is "
                                     "re-established.")
    event_interval: float = opt(600.0, "Seconds between repeated Events for the same "
                                       "rejected Ingress host.")
    guard_data_planes: bool = opt(False, "Keep a NetworkPolicy per data plane that expects "
                                         "PROXY, admitting on its PROXY ports only addresses "
                                         "outside the pod CIDRs and our proxies (needs the "
                                         "guard-data-planes RBAC component).")
    pod_cidr: tuple[str, ...] = opt((), "The cluster's pod CIDR (repeatable, IPv4 and IPv6) for "
                                        "--guard-data-planes; default: every Node's "
                                        "spec.podCIDRs.")
    repair_backoff: float = opt(5.0, "Seconds before the first repair of a change of ours "
                                     "someone removed; doubled for each further one.")
    repair_backoff_max: float = opt(1800.0, "Longest wait before a repair; also the interval "
                                            "of tries while repairs are suspended.")
    revert_limit: int = opt(5, "Removals of our change within --revert-window that suspend "
                               "the repairs of that ConfigMap.")
    revert_window: float = opt(3600.0, "Seconds a removal of our change counts towards "
                                       "--revert-limit.")


@dataclasses.dataclass(frozen=True)
class CleanupSettings(CorednsSettings, KubeSettings, LogSettings):
    publish_configmap: str = opt("hairpin-proxy-hosts", "Published hosts ConfigMap to delete.")
    targets_configmap: str = opt("hairpin-proxy-targets", "Targets table ConfigMap to delete, "
                                                          "with the per-target proxy Services.")
    guard_policies: bool = opt(True, "Also delete the data-plane guard's NetworkPolicies (ours "
                                     "by label, every namespace; needs list and delete of "
                                     "NetworkPolicies).")


@dataclasses.dataclass(frozen=True)
class EtchostsSettings(KubeSettings, LogSettings):
    hosts_file: Path = opt(Path("/etc/hosts"), "Hosts file to keep in step.")
    publish_configmap: str = opt("hairpin-proxy-hosts", "ConfigMap the controller publishes "
                                                        "hosts in.")
    admin_listen: str = opt("", "Address of /healthz and /metrics; empty disables.")
    remove: bool = opt(False, "Remove our block and exit (the uninstall step).")
    write_method: Literal["auto", "rename", "in-place"] = opt(
        "auto", "How to replace the file: rename (atomic; needs the directory), in-place "
                "(when only the file is mounted), or auto: rename, else in place.")
    state_dir: Path | None = opt(None, "Directory for the in-place backup and journal; "
                                       "default: beside the hosts file.")
    resync_interval: float = opt(60.0, "Seconds between full re-applies (repairs edits by "
                                       "others).")
    poll_interval: float = opt(2.0, "Seconds between checks of the file's mtime and size for "
                                    "outside edits; 0 disables.")
    remove_on_delete: bool = opt(False, "Remove our block when the published ConfigMap is "
                                        "deleted; by default the last hosts are kept.")
    watch_timeout: float = opt(70.0, "Seconds of silence after which the watch is "
                                     "re-established.")


@dataclasses.dataclass(frozen=True)
class DoctorSettings(CorednsSettings, TargetSettings, PolicySettings, KubeSettings,
                     LogSettings):
    host: tuple[str, ...] = opt((), "Hosts to check; without any, every host the controller "
                                    "would manage.", positional=True, env="HAIRPIN_DOCTOR_HOSTS")
    port: int = opt(80, "HTTP port to probe; 0 skips it.")
    tls_port: int = opt(443, "TLS port to probe; 0 skips it.")
    output: Literal["text", "json"] = opt("text", "Report format.")
    timeout: float = opt(3.0, "Seconds for each probe connection; a DNS lookup gets three "
                              "times as long (at least 5). Also bounds the whole run: it "
                              "ends within max(2T,5) + max(3T,5) + T seconds.")
    namespace: str = opt("", "Where hairpin-proxy is installed (the proxy Service, the "
                             "controller's Deployment, the targets table); else "
                             "POD_NAMESPACE, else hairpin-proxy.")
    proxy_service: str = opt("hairpin-proxy", "The proxy Service in our namespace.")
    proxy_address: tuple[str, ...] = opt((), "An address that counts as the proxy Service's, "
                                             "besides its ClusterIPs (repeatable).")
    resolve: tuple[str, ...] = opt((), "HOST:ADDR, like curl's --resolve: use ADDR for HOST "
                                       "instead of the resolver; HOST '*' is every name, "
                                       "'*.example.com' every name under example.com "
                                       "(repeatable; a diagnostic aid).")
    resolver: str = opt("cluster", "Who resolves the hosts: cluster (the cluster DNS Service "
                                   "an ordinary pod asks, found through the API; the system "
                                   "resolver when none is found), system (this pod's "
                                   "resolv.conf), or a DNS server ADDR[:PORT].")
    api: bool = opt(True, "Ask the Kubernetes API for cluster facts; --no-api probes DNS and "
                          "the ports only.")
    verify_hosts: Literal["on", "off"] = opt(
        "on", "As the controller's --verify-hosts: on checks whether each host's public DNS "
              "points at this cluster's load balancer (the controller redirects only those).")
    verify_resolver: tuple[str, ...] = opt(
        (), "As the controller's --verify-resolver: DNS server ADDR[:PORT] for that check "
            "(repeatable); default: the system resolver.")
    target_settle: float = opt(90.0, "As the controller's --target-settle: seconds a new "
                                     "slot waits before its hosts get DNS rules (shown as "
                                     "pending until then).")
    max_targets: int = opt(32, "As the controller's --max-targets (read from its Deployment "
                               "when that can be read).")
    targets_configmap: str = opt("hairpin-proxy-targets", "As the controller's "
                                                          "--targets-configmap (read from its "
                                                          "Deployment when that can be read).")
    rules_budget: int = opt(0, "As the controller's --rules-budget (read from its Deployment "
                               "when that can be read): a host it refuses over that cap, or "
                               "over the room its ConfigMap leaves, is said so.")
    namespace_share_hosts: int = opt(0, "As the controller's --namespace-share-hosts (read "
                                        "from its Deployment when that can be read).")
    namespace_share_bytes: int = opt(0, "As the controller's --namespace-share-bytes (read "
                                        "from its Deployment when that can be read).")
    controller_deployment: str = opt("hairpin-proxy-controller", "The controller's Deployment "
                                                                 "in our namespace, whose args "
                                                                 "and env are its settings; "
                                                                 "empty: use these flags.")
    in_cluster: bool = opt(False, "Run this check in a short-lived pod in our namespace with "
                                  "the controller's image, service account and DNS policy "
                                  "(from its Deployment), print its report, delete the pod.")
    pod_start_timeout: float = opt(120.0, "With --in-cluster: seconds the pod may take to be "
                                          "scheduled and pull its image before the doctor "
                                          "gives up (its run then gets the usual deadline).")
    forged_header_probe: bool = opt(True, "Send each data plane that expects PROXY one "
                                          "request whose header names 192.0.2.1, straight to "
                                          "its Service: does it believe a forged address?")
