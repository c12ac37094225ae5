"""``hairpin-proxy render``: print what the controller would write.

Offline and read-only: the objects come from manifest files and become the plan's snapshot
(plan/objects.py); the plan's desired state is written as the controller's writers write it
(the same edit functions) and goes to stdout
(the whole file, a unified diff, or only an exit status with ``--check``). Rejected hosts are
logged to stderr and are not an error; an unreadable or unparsable input is (exit 2), and
then nothing at all is printed on stdout.
"""

from __future__ import annotations

import dataclasses
import difflib
import gc
import ipaddress
import logging
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from hairpin_proxy import corefile, hostsfile
from hairpin_proxy.corefile.nodelocal import apply_nodelocal
from hairpin_proxy.edits.coredns import CorednsEdit
from hairpin_proxy.edits.coredns_import import ImportEdit
from hairpin_proxy.edits.slot_table import slot_service, table_data
from hairpin_proxy.jsonobj import JsonObj
from hairpin_proxy.logs import setup_logging
from hairpin_proxy.manifests import ManifestError, Manifests, load
from hairpin_proxy.plan import DesiredState, Snapshot
from hairpin_proxy.plan.budget import rooms_of
from hairpin_proxy.plan.core import plan_with_policy
from hairpin_proxy.plan.objects import snapshot_of
from hairpin_proxy.plan.snapshot import Rooms, plan_settings_of
from hairpin_proxy.policy import HostPolicy, PolicyResult, proxy_service_fqdn
from hairpin_proxy.settings import RenderSettings, usage_error
from hairpin_proxy.sources.registry import KEY_KIND_SPECS, turned_on
from hairpin_proxy.targets.mapping import parse_target_flags
from hairpin_proxy.targets.table import PUBLISHED_KEY, TABLE_KEY

log = logging.getLogger("hairpin_proxy.render")

EXIT_OK, EXIT_CHANGED, EXIT_ERROR = 0, 1, 2


class RenderError(Exception):
    """A usage or input problem; the message says what and where."""


def _mode(s: RenderSettings) -> str:
    # Beside another mode, --corefile names the cluster's Corefile, read only: for the zones
    # it serves (as the controller reads them) and, with --import-snippet, for its imports.
    chosen = [name for name, on in (("--hosts-file", s.hosts_file is not None),
                                    ("--node-local-corefile", s.node_local_corefile is not None),
                                    ("--import-snippet", s.import_snippet)) if on]
    if not chosen and s.corefile is not None:
        chosen = ["--corefile"]
    if len(chosen) != 1:
        raise RenderError("give exactly one of --corefile FILE, --hosts-file FILE, "
                          "--node-local-corefile FILE or --import-snippet"
                          + (f" (got {', '.join(chosen)})" if chosen else ""))
    if s.import_snippet and (s.diff or s.check):
        raise RenderError("--diff and --check compare with a file: use them with --corefile, "
                          "--hosts-file or --node-local-corefile")
    if not s.ingress:
        raise RenderError("give at least one --ingress PATH (a file, a directory or - for "
                          "standard input)")
    if not 0 < s.dns_port < 65536:
        raise RenderError(f"--dns-port {s.dns_port} is not a port number")
    return chosen[0]


def _needs(mode: str, s: RenderSettings, missing: Sequence[str]) -> None:
    """Refuse when a Service whose ClusterIPs the output answers with is not in the inputs:
    an address is never guessed."""
    main = f"{s.namespace}/{s.proxy_service}"
    if main in missing:
        raise RenderError(f"{mode} needs at least one --proxy-ip ADDRESS (the proxy Service's "
                          f"ClusterIP: kubectl -n {s.namespace} get service {s.proxy_service} "
                          "-o jsonpath='{.spec.clusterIPs}'), or that Service with its "
                          "spec.clusterIPs among the inputs")
    if missing:
        raise RenderError(
            f"{mode} needs the ClusterIPs of the slot Service{'s' if len(missing) > 1 else ''} "
            f"{', '.join(missing)}: give {'them' if len(missing) > 1 else 'it'} among the "
            "inputs (kubectl -n " + s.namespace + " get service -l "
            "app.kubernetes.io/managed-by=hairpin-proxy -o yaml)")


def _proxy_ips(values: tuple[str, ...]) -> list[str]:
    out = []
    for value in values:
        try:
            if "%" in value:
                raise ValueError
            out.append(str(ipaddress.ip_address(value.strip())))
        except ValueError:
            raise RenderError(f"--proxy-ip {value!r} is not an IPv4 or IPv6 address") from None
    return out


def _read(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise RenderError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise RenderError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def _lines(text: str) -> list[str]:
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def unified_diff(old: str, new: str, name: str) -> Iterator[str]:
    """``diff -u`` output, including the "No newline at end of file" marker."""
    for line in difflib.unified_diff(_lines(old), _lines(new), fromfile=name, tofile=name):
        if line.endswith("\n"):
            yield line
        else:
            yield line + "\n\\ No newline at end of file\n"


def _report(desired: DesiredState, result: PolicyResult) -> None:
    for rej in desired.refusals:
        ref = rej.ref
        who = ({"ingress": f"{ref.namespace}/{ref.name}"} if ref.kind == "Ingress"
               else {"object": str(ref)})
        log.warning("rejected host", extra={**who, "host": rej.named, "reason": rej.reason})
    for rej in result.ignored:
        log.info("host outside the allowed domains", extra={
            "ingress": f"{rej.namespace}/{rej.name}", "host": rej.host, "reason": rej.reason})
    p = desired.plan
    for host, why in sorted(p.excluded.items()):
        log.warning("host not redirected", extra={"host": host, "target": why.key,
                                                  "reason": why.message})
    for loser, winner in p.losers:
        log.warning("host claimed by an older object", extra={
            "host": loser.host, "object": str(loser.origin), "winner": str(winner.origin)})


def _emit(out: TextIO, text: str) -> None:
    try:
        out.write(text)
        out.flush()
    except BrokenPipeError:
        # The reader went away (`render ... | head`): not worth a traceback.
        pass


def rooms(mode: str, s: RenderSettings, old: str) -> Rooms:
    """The size limits as the controller measures them, from the file being rendered (the
    other keys of the ConfigMaps it lives in are not known offline: taken as empty). The
    published hosts are none of them: the controller publishes them only for the etchosts
    node agent (--publish-configmap), off by default."""
    if mode == "--import-snippet":
        rules_cm, key = None, s.import_key
    else:
        rules_cm, key = {"data": {"Corefile": old if mode == "--corefile" else ""}}, "Corefile"
    node_local: list[tuple[JsonObj | None, str]] = []
    if mode == "--node-local-corefile":
        node_local.append(({"data": {"Corefile": old}}, "kube-system/node-local-dns"))
    return rooms_of("import" if mode == "--import-snippet" else "coredns", rules_cm,
                    rules_key=key, rules_where="the rules' ConfigMap", node_local=node_local)


def served_zones(s: RenderSettings, mode: str, old: str) -> tuple[str, ...]:
    """The zones the --corefile serves, which the controller never redirects (it reads them
    from the same Corefile); none without one."""
    if s.corefile is None:
        return ()
    text = old if mode in ("--corefile", "--import-snippet") else _read(s.corefile)
    try:
        return corefile.served_zones(text, dns_port=s.dns_port)
    except corefile.CorefileError as exc:
        raise RenderError(f"{s.corefile}: {exc}") from None


def snapshot(s: RenderSettings, objects: Sequence[dict[str, Any]], ips: Sequence[str],
             proxy_fqdn: str, limits: Rooms | None = None, *,
             zones: tuple[str, ...] = ()) -> Snapshot:
    """The controller's snapshot from the inputs, every slot settled (render prints the
    steady state, not the --target-settle wait). ``--proxy-ip`` stands for the proxy
    Service's ClusterIPs; ``zones`` are those the Corefile serves itself."""
    try:
        policy = dataclasses.replace(HostPolicy.from_settings(s, proxy_fqdn),
                                     served_zones=zones)
        target_map = parse_target_flags(s.target, KEY_KIND_SPECS)
    except ValueError as exc:
        raise RenderError(str(exc)) from None
    settings = dataclasses.replace(
        plan_settings_of(s, policy, target_map, s.namespace), settle=0.0, dns_ttl=s.dns_ttl,
        rules_budget=s.rules_budget, share_hosts=s.namespace_share_hosts,
        share_bytes=s.namespace_share_bytes, sources_on=turned_on(s))
    objs = list(objects)
    if ips:
        main = (s.namespace, s.proxy_service)
        objs = [o for o in objs if not (o.get("kind") == "Service" and main == (
            (o.get("metadata") or {}).get("namespace"), (o.get("metadata") or {}).get("name")))]
        objs.append({"apiVersion": "v1", "kind": "Service",
                     "metadata": {"namespace": main[0], "name": main[1]},
                     "spec": {"clusterIP": ips[0], "clusterIPs": list(ips)}})
    snap = snapshot_of(objs, settings, targets_configmap=s.targets_configmap)
    table_cm = snap.targets_configmap
    if table_cm is not None:
        # When each slot was published is left out: with it, a slot published after the
        # snapshot's time would read as settling, and its hosts would get no rule.
        table_cm = {**table_cm, "data": {k: v for k, v in (table_cm.get("data") or {}).items()
                                         if k != PUBLISHED_KEY}}
    return dataclasses.replace(snap, rooms=limits, targets_configmap=table_cm)


def _targets_yaml(s: RenderSettings, snap: Snapshot, desired: DesiredState) -> str:
    """The targets ConfigMap's table and the slot Services, as the controller writes them
    (less what only the cluster knows: uids, and when each slot was first published)."""
    p = desired.plan
    data = table_data(p, {}, 0.0)
    proxy: Mapping[str, Any] = next(
        (o for o in snap.services if ((o.get("metadata") or {}).get("namespace"),
                                      (o.get("metadata") or {}).get("name"))
         == (s.namespace, s.proxy_service)), {})
    owner = {"metadata": {"name": s.targets_configmap}}
    items: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": s.targets_configmap, "namespace": s.namespace},
         "data": {TABLE_KEY: data[TABLE_KEY]}}]
    for key, slot in sorted(p.slots.items(), key=lambda kv: kv[1]):
        svc = slot_service(s.namespace, slot, key, dict(proxy), owner)
        del svc["metadata"]["ownerReferences"]
        items.append(svc)
    return yaml.safe_dump_all(items, sort_keys=False)


def _output(mode: str, s: RenderSettings, desired: DesiredState, old: str,
            proxy_fqdn: str) -> str:
    """What the controller would write in ``mode``'s file, from ``old``."""
    groups = desired.groups()
    try:
        if mode == "--import-snippet":
            return ImportEdit.snippet(groups)
        if mode == "--corefile":
            edit = CorednsEdit(s.namespace, "coredns", "Corefile", proxy_fqdn, s.dns_port)
            return edit.edit(old, groups)
        if mode == "--node-local-corefile":
            return apply_nodelocal(old, desired.hosts, cluster_domain=s.cluster_domain)
    except corefile.CorefileError as exc:
        where = "import snippet" if mode == "--import-snippet" else str(
            s.corefile if mode == "--corefile" else s.node_local_corefile)
        raise RenderError(f"{where}: {exc}") from None
    try:
        update = hostsfile.apply_entries(old, desired.entries())
    except hostsfile.HostsFileError as exc:
        raise RenderError(f"{s.hosts_file}: {exc}") from None
    if update.skipped:
        log.warning("hosts a hosts file cannot hold were skipped",
                    extra={"skipped": ",".join(update.skipped)})
    return update.text


def _check_imports(s: RenderSettings, old: str) -> None:
    if s.corefile is None:
        return
    if not corefile.imports_key(old, s.import_key, dns_port=s.dns_port):
        raise RenderError(
            f"{s.corefile}: no root server block on port {s.dns_port} imports "
            f"{s.import_key} (e.g. import /etc/coredns/custom/*.override); "
            "the snippet would have no effect")
    log.info("the Corefile imports the key",
             extra={"corefile": str(s.corefile), "key": s.import_key})


def render(s: RenderSettings, out: TextIO) -> int:
    mode = _mode(s)
    ips = _proxy_ips(s.proxy_ip)
    # Every input is read before any is processed: a missing file is said alone, not after
    # the other inputs' warnings.
    path = {"--hosts-file": s.hosts_file, "--node-local-corefile": s.node_local_corefile
            }.get(mode, s.corefile)
    old = _read(path) if path is not None else ""
    zones = served_zones(s, mode, old)
    try:
        corefile.Answers.of(ips, s.dns_ttl)
    except corefile.CorefileError as exc:
        raise RenderError(f"--dns-ttl: {exc.reason}") from None
    proxy_fqdn = s.legacy_target or proxy_service_fqdn(s.cluster_domain, s.proxy_service,
                                                       s.namespace)
    try:
        manifests = load(s.ingress)
    except ManifestError as exc:
        raise RenderError(str(exc)) from None
    # The objects read stay until the plan is printed: the collector need not walk them at
    # each of its passes over the plan's objects (at 50,000 Ingresses, a fifth of the time).
    # They are handed back to it at the end, for whoever called render() (unless it had
    # frozen objects of its own: it then keeps them, and ours, frozen).
    frozen_before = gc.get_freeze_count()
    gc.freeze()
    try:
        return _planned(s, out, mode, manifests, ips=ips, old=old, path=path, zones=zones,
                        proxy_fqdn=proxy_fqdn)
    finally:
        if not frozen_before:
            gc.unfreeze()


def _planned(s: RenderSettings, out: TextIO, mode: str, manifests: Manifests, *,
             ips: Sequence[str], old: str, path: Path | None, zones: tuple[str, ...],
             proxy_fqdn: str) -> int:
    """The plan of the objects read, printed as ``mode`` asks."""
    if not manifests.ingresses:
        # Most likely a wrong path; the output would drop every rule.
        log.warning("no Ingress objects found", extra={"files": len(manifests.files)})
    snap = snapshot(s, manifests.objects, ips, proxy_fqdn, rooms(mode, s, old), zones=zones)
    if snap.ingress_classes is None:
        # Manifests often leave the IngressClasses out: whether a class exists is unknown
        # then, and is not held against the Ingresses (the controller checks it).
        log.info("no IngressClass among the inputs: class names are not checked")
    desired, ingresses_read = plan_with_policy(snap)
    _needs(mode, s, desired.missing_services)
    _report(desired, ingresses_read)
    log.debug("evaluated", extra={"files": len(manifests.files),
                                  "ingresses": len(manifests.ingresses),
                                  "hosts": len(desired.hosts),
                                  "rejected": len(desired.refusals)})
    if mode == "--import-snippet":
        _check_imports(s, old)
    new = _output(mode, s, desired, old, proxy_fqdn)
    extra = _targets_yaml(s, snap, desired) if s.print_targets else ""
    if mode == "--import-snippet":
        _emit(out, new + (f"---\n{extra}" if extra else ""))
        return EXIT_OK
    changed = new != old
    if s.diff:
        _emit(out, "".join(unified_diff(old, new, str(path))))
    elif not s.check:
        _emit(out, new + (f"---\n{extra}" if extra else ""))
    return EXIT_CHANGED if s.check and changed else EXIT_OK


def run(settings: RenderSettings) -> int:
    setup_logging(settings.log_level, settings.log_format)
    try:
        return render(settings, sys.stdout)
    except RenderError as exc:
        return usage_error("render", str(exc))
