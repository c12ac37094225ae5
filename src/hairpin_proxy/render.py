"""``hairpin-proxy render``: print the Corefile or hosts file the controller would write.

Offline and read-only: the Ingresses come from manifest files, the result goes to stdout
(the whole file, a unified diff, or only an exit status with ``--check``). Rejected hosts are
logged to stderr and are not an error; an unreadable or unparsable input is (exit 2), and
then nothing at all is printed on stdout.
"""

from __future__ import annotations

import difflib
import ipaddress
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from hairpin_proxy import corefile, hostsfile
from hairpin_proxy.logs import setup_logging
from hairpin_proxy.manifests import ManifestError, load
from hairpin_proxy.policy import (
    ClassIndex,
    HostPolicy,
    PolicyResult,
    default_target,
    evaluate,
    evaluate_ingress,
    merge,
)
from hairpin_proxy.settings import RenderSettings, usage_error

log = logging.getLogger("hairpin_proxy.render")

EXIT_OK, EXIT_CHANGED, EXIT_ERROR = 0, 1, 2


class RenderError(Exception):
    """A usage or input problem; the message says what and where."""


def _mode(s: RenderSettings) -> str:
    # With --import-snippet, --corefile names the Corefile that must import the snippet's key.
    chosen = [name for name, on in (("--corefile", s.corefile is not None
                                     and not s.import_snippet),
                                    ("--hosts-file", s.hosts_file is not None),
                                    ("--import-snippet", s.import_snippet)) if on]
    if len(chosen) != 1:
        raise RenderError("give exactly one of --corefile FILE, --hosts-file FILE or "
                          "--import-snippet" + (f" (got {', '.join(chosen)})" if chosen else ""))
    if s.import_snippet and (s.diff or s.check):
        raise RenderError("--diff and --check compare with a file: use them with --corefile "
                          "or --hosts-file")
    if not s.proxy_ip:
        raise RenderError(f"{chosen[0]} needs at least one --proxy-ip ADDRESS (the proxy "
                          "Service's ClusterIP: kubectl -n hairpin-proxy get service "
                          "hairpin-proxy -o jsonpath='{.spec.clusterIPs}')")
    if not s.ingress:
        raise RenderError("give at least one --ingress PATH (a file, a directory or - for "
                          "standard input)")
    if not 0 < s.dns_port < 65536:
        raise RenderError(f"--dns-port {s.dns_port} is not a port number")
    return chosen[0]


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


def _report(result: PolicyResult) -> None:
    for rej in result.rejections:
        log.warning("rejected host", extra={"ingress": f"{rej.namespace}/{rej.name}",
                                            "host": rej.host, "reason": rej.reason})
    for rej in result.ignored:
        log.info("host outside the allowed domains", extra={
            "ingress": f"{rej.namespace}/{rej.name}", "host": rej.host, "reason": rej.reason})


def _emit(out: TextIO, text: str) -> None:
    try:
        out.write(text)
        out.flush()
    except BrokenPipeError:
        # The reader went away (`render ... | head`): not worth a traceback.
        pass


def render(s: RenderSettings, out: TextIO) -> int:
    mode = _mode(s)
    ips = _proxy_ips(s.proxy_ip)
    # Every input is read before any is processed: a missing file is said alone, not after
    # the other inputs' warnings.
    path = s.hosts_file if mode == "--hosts-file" else s.corefile
    old = _read(path) if path is not None else ""
    try:
        answers = corefile.Answers.of(ips, s.dns_ttl)
    except corefile.CorefileError as exc:
        raise RenderError(f"--dns-ttl: {exc.reason}") from None
    target = s.legacy_target or default_target(s.cluster_domain)
    try:
        policy = HostPolicy.from_settings(s, target)
    except ValueError as exc:
        raise RenderError(str(exc)) from None
    try:
        manifests = load(s.ingress)
    except ManifestError as exc:
        raise RenderError(str(exc)) from None
    if not manifests.ingresses:
        # Most likely a wrong path; the output would drop every rule.
        log.warning("no Ingress objects found", extra={"files": len(manifests.files)})
    if manifests.ingress_classes:
        result = evaluate(manifests.ingresses, manifests.ingress_classes, policy)
    else:
        # Manifests often leave the IngressClasses out: whether a class exists is unknown
        # then, and is not held against the Ingresses (the controller checks it).
        log.info("no IngressClass among the inputs: class names are not checked")
        unknown = ClassIndex(frozenset(), None)
        result = merge(evaluate_ingress(i, policy, unknown) for i in manifests.ingresses)
    _report(result)
    log.debug("evaluated", extra={"files": len(manifests.files),
                                  "ingresses": len(manifests.ingresses),
                                  "hosts": len(result.hosts),
                                  "rejected": len(result.rejections)})

    if mode == "--import-snippet":
        try:
            snippet = corefile.import_snippet(result.hosts, answers=answers)
        except corefile.CorefileError as exc:
            raise RenderError(f"import snippet: {exc}") from None
        if s.corefile is not None:
            if not corefile.imports_key(old, s.import_key, dns_port=s.dns_port):
                raise RenderError(
                    f"{s.corefile}: no root server block on port {s.dns_port} imports "
                    f"{s.import_key} (e.g. import /etc/coredns/custom/*.override); "
                    "the snippet would have no effect")
            log.info("the Corefile imports the key",
                     extra={"corefile": str(s.corefile), "key": s.import_key})
        _emit(out, snippet)
        return EXIT_OK

    assert path is not None
    if mode == "--corefile":
        try:
            new = corefile.apply(old, result.hosts, answers=answers, target=target,
                                 dns_port=s.dns_port)
        except corefile.CorefileError as exc:
            raise RenderError(f"{path}: {exc}") from None
    else:
        try:
            update = hostsfile.apply(old, result.hosts, ips)
        except hostsfile.HostsFileError as exc:
            raise RenderError(f"{path}: {exc}") from None
        new = update.text
        if update.skipped:
            log.warning("hosts a hosts file cannot hold were skipped",
                        extra={"skipped": ",".join(update.skipped)})

    changed = new != old
    if s.diff:
        _emit(out, "".join(unified_diff(old, new, str(path))))
    elif not s.check:
        _emit(out, new)
    return EXIT_CHANGED if s.check and changed else EXIT_OK


def run(settings: RenderSettings) -> int:
    setup_logging(settings.log_level, settings.log_format)
    try:
        return render(settings, sys.stdout)
    except RenderError as exc:
        return usage_error("render", str(exc))
