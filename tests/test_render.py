"""`hairpin-proxy render`: the real CLI on real files, every mode and error path."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hairpin_proxy import corefile, hostsfile
from hairpin_proxy.cli import main
from hairpin_proxy.corefile import rules
from tests.corefiles import HERE as COREFILES
from tests.corefiles import SAMPLES, Sample

FIXTURES = Path(__file__).parent / "manifests"
CLUSTER = FIXTURES / "cluster"
COREFILE = FIXTURES / "Corefile"
REPO_CORPUS = Path(__file__).parent / "corefiles"
HOSTS = FIXTURES / "hosts"
NODE_LOCAL = COREFILES / "nodelocal" / "upstream.Corefile"
BIN = Path(sys.executable).parent / "hairpin-proxy"

# What the fixture cluster yields with the default policy (hosts from spec.tls).
EXPECTED = ("*.blog.example.org", "api.example.com", "blog.example.org", "grafana.example.com",
            "shop.example.com", "tenant.example.com", "www.shop.example.com")


PROXY_IP = "10.96.0.50"
ANSWERS = corefile.Answers.of([PROXY_IP])
# Leave out the --proxy-ip that render() adds by default (for the tests of its absence).
NO_IP = "(no --proxy-ip)"


def render(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    argv = [str(a) for a in args if a != NO_IP]
    if "--proxy-ip" not in argv and NO_IP not in args:
        argv += ["--proxy-ip", PROXY_IP]
    code = main(["render", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def copy(src: Path, tmp_path: Path, name: str | None = None) -> Path:
    dst = tmp_path / (name or src.name)
    shutil.copyfile(src, dst)
    return dst


# --------------------------------------------------------------------------- Corefile

def test_corefile_mode_prints_the_edited_corefile(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = render(capsys, "--corefile", COREFILE, "--ingress", CLUSTER)
    assert code == 0
    assert out == corefile.apply(COREFILE.read_text(), EXPECTED, answers=ANSWERS)
    assert corefile.managed_hosts(out) == EXPECTED
    # Rejections are reported with their Ingress and reason, and are not an error.
    lines = [line for line in err.splitlines() if "rejected host" in line]
    assert len(lines) == 2
    assert "ingress=tenant/sneaky host=kubernetes.default.svc.cluster.local " \
           "reason=at or under the cluster domain cluster.local" in lines[0]
    assert "ingress=tenant/sneaky host=10.0.0.1 reason=IP address, not a DNS name" in lines[1]


def test_rendering_does_not_touch_the_file(capsys: pytest.CaptureFixture[str],
                                           tmp_path: Path) -> None:
    path = copy(COREFILE, tmp_path)
    before = path.read_bytes()
    assert render(capsys, "--corefile", path, "--ingress", CLUSTER)[0] == 0
    assert path.read_bytes() == before


def test_check_exit_codes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = copy(COREFILE, tmp_path)
    code, out, _ = render(capsys, "--corefile", path, "--ingress", CLUSTER, "--check")
    assert (code, out) == (1, "")
    code, rendered, _ = render(capsys, "--corefile", path, "--ingress", CLUSTER)
    path.write_text(rendered)
    code, out, _ = render(capsys, "--corefile", path, "--ingress", CLUSTER, "--check")
    assert (code, out) == (0, "")
    # One Ingress fewer: the file would change again.
    code, out, _ = render(capsys, "--corefile", path, "--ingress", CLUSTER / "ingresses.yaml",
                          "--check")
    assert (code, out) == (1, "")


def test_diff_applies_with_patch(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = copy(COREFILE, tmp_path)
    _, rendered, _ = render(capsys, "--corefile", path, "--ingress", CLUSTER)
    code, diff, _ = render(capsys, "--corefile", path, "--ingress", CLUSTER, "--diff")
    assert code == 0
    assert diff.startswith(f"--- {path}\n+++ {path}\n@@ ")
    assert "+    # BEGIN hairpin-proxy (managed; do not edit)\n" in diff
    subprocess.run(["patch", "-s", str(path)], input=diff, text=True, check=True, timeout=60)
    assert path.read_text() == rendered
    # Now in step: an empty diff.
    assert render(capsys, "--corefile", path, "--ingress", CLUSTER, "--diff")[:2] == (0, "")


def test_diff_with_check(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = render(capsys, "--corefile", COREFILE, "--ingress", CLUSTER, "--diff",
                          "--check")
    assert code == 1
    assert out.startswith("--- ")


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
def test_diff_round_trips_over_the_corefile_corpus(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, sample: Sample) -> None:
    path = tmp_path / "Corefile"
    path.write_bytes(sample.path.read_bytes())
    args: list[str | Path] = ["--corefile", path, "--ingress", CLUSTER,
                              "--dns-port", str(sample.dns_port)]
    code, rendered, err = render(capsys, *args)
    assert code == 0, err
    assert corefile.managed_hosts(rendered, dns_port=sample.dns_port) == EXPECTED
    code, diff, _ = render(capsys, *args, "--diff")
    assert code == 0
    subprocess.run(["patch", "-s", "--binary", str(path)], input=diff.encode(), check=True,
                   timeout=60)
    assert path.read_bytes().decode() == rendered
    assert render(capsys, *args, "--check")[:2] == (0, "")


def test_policy_flags_reach_the_policy(capsys: pytest.CaptureFixture[str]) -> None:
    def hosts(*flags: str) -> tuple[str, ...]:
        code, out, _ = render(capsys, "--corefile", COREFILE, "--ingress", CLUSTER, *flags)
        assert code == 0
        return corefile.managed_hosts(out)

    assert hosts("--ingress-class", "traefik") == ("grafana.example.com",)
    assert hosts("--ingress-class", "nginx") == tuple(h for h in EXPECTED if "grafana" not in h)
    assert hosts("--include-namespace", "shop") == ("api.example.com", "shop.example.com",
                                                    "www.shop.example.com")
    assert hosts("--exclude-namespace", "shop", "--exclude-namespace", "tenant") == (
        "*.blog.example.org", "blog.example.org", "grafana.example.com")
    assert hosts("--domain", "example.org") == ("*.blog.example.org", "blog.example.org")
    assert hosts("--hosts-from", "rules") == ("plain.example.com", "shop.example.com")
    assert "plain.example.com" in hosts("--hosts-from", "all")


def test_hosts_outside_the_domains_are_logged_once_each(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The plan's own reading of the host policy says which hosts --domain leaves out."""
    code, _, err = render(capsys, "--corefile", COREFILE, "--ingress", CLUSTER,
                          "--domain", "example.org", "--log-level", "info")
    assert code == 0
    ignored = sorted(line.split("host outside the allowed domains", 1)[1].strip()
                     for line in err.splitlines() if "host outside the allowed domains" in line)
    hosts = [part.removeprefix("host=") for line in ignored for part in line.split()
             if part.startswith("host=")]
    # Each as its Ingress spells it (www.shop.example.com is written WWW.Shop.Example.com.).
    assert sorted(h.lower().rstrip(".") for h in hosts) == sorted(
        h for h in EXPECTED if not h.endswith("example.org"))
    assert "ingress=shop/web host=WWW.Shop.Example.com. " in "\n".join(ignored)


def test_target_and_cluster_domain(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # The target names the proxy Service: old rewrite rules to it are converted.
    old = COREFILE.read_text().replace(".:53 {\n", (
        ".:53 {\n    rewrite name exact old.example.com hairpin-proxy.hairpin-proxy.svc."
        "corp.internal.\n    rewrite name exact keep.example.com other.svc.corp.internal.\n"), 1)
    path = tmp_path / "Corefile"
    path.write_text(old)
    code, out, _ = render(capsys, "--corefile", path, "--ingress", CLUSTER,
                          "--cluster-domain", "corp.internal")
    assert code == 0
    assert "old.example.com" not in out and "keep.example.com other.svc" in out
    assert corefile.managed_hosts(out) == EXPECTED
    path.write_text(old.replace("hairpin-proxy.hairpin-proxy.svc.corp.internal.",
                                "proxy.infra.svc.cluster.local."))
    code, out, _ = render(capsys, "--corefile", path, "--ingress", CLUSTER,
                          "--legacy-target", "proxy.infra.svc.cluster.local.")
    assert "old.example.com" not in out and "keep.example.com other.svc" in out


def test_legacy_target_defaults_to_the_proxy_service_named_by_its_flags(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Without --legacy-target, rules rewriting to <proxy-service>.<namespace>.svc.<domain> are
    ours, as in the controller; --help and docs/render.md say that default."""
    path = tmp_path / "Corefile"
    path.write_text(COREFILE.read_text().replace(".:53 {\n", (
        ".:53 {\n    rewrite name exact old.example.com proxy.infra.svc.cluster.local.\n"), 1))
    code, out, _ = render(capsys, "--corefile", path, "--ingress", CLUSTER,
                          "--namespace", "infra", "--proxy-service", "proxy")
    assert code == 0 and "old.example.com" not in out
    code, out, _ = render(capsys, "--corefile", path, "--ingress", CLUSTER)
    assert code == 0 and "rewrite name exact old.example.com" in out
    with pytest.raises(SystemExit):
        main(["render", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "default <proxy-service>.<namespace>.svc.<cluster-domain>." in said
    doc = (Path(__file__).resolve().parents[1] / "docs" / "render.md").read_text()
    assert "default `<proxy-service>.<namespace>.svc.<cluster domain>.`" in doc


def test_answers_ttl_and_both_families(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = render(capsys, "--corefile", COREFILE, "--ingress", CLUSTER,
                          "--proxy-ip", "10.96.0.9", "--proxy-ip", "fd00::9", "--dns-ttl", "30")
    assert code == 0
    assert '"{{ .Name }} 30 IN A 10.96.0.9"' in out
    assert '"{{ .Name }} 30 IN AAAA fd00::9"' in out
    code, out, err = render(capsys, "--corefile", COREFILE, "--ingress", CLUSTER, "--dns-ttl",
                            "0")
    assert (code, out) == (2, "")
    assert "--dns-ttl / HAIRPIN_DNS_TTL: expected a TTL of 1 to 3600 seconds, got '0'" in err


def test_environment_variables_work_like_flags(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HAIRPIN_INGRESS", str(CLUSTER))
    monkeypatch.setenv("HAIRPIN_INGRESS_CLASS", "traefik")
    code, out, _ = render(capsys, "--corefile", COREFILE)
    assert code == 0
    assert corefile.managed_hosts(out) == ("grafana.example.com",)


def test_no_ingresses_found_is_warned_about(capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    path = tmp_path / "Corefile"
    path.write_text(corefile.apply(COREFILE.read_text(), EXPECTED, answers=ANSWERS))
    (tmp_path / "empty").mkdir()
    code, out, err = render(capsys, "--corefile", path, "--ingress", tmp_path / "empty")
    assert code == 0
    assert out == COREFILE.read_text()  # every rule dropped, as asked
    assert "no Ingress objects found files=0" in err


def test_import_snippet(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = render(capsys, "--import-snippet", "--ingress", CLUSTER)
    assert code == 0
    assert out == corefile.import_snippet(EXPECTED, answers=ANSWERS)


def test_import_snippet_checks_the_corefile_imports_it(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    k3s = REPO_CORPUS / "k3s.Corefile"
    code, out, _ = render(capsys, "--import-snippet", "--corefile", k3s, "--ingress", CLUSTER)
    assert code == 0
    assert out == corefile.import_snippet(EXPECTED, answers=ANSWERS)
    # kubeadm's Corefile imports nothing: the snippet would be dead, so it is an error.
    code, out, err = render(capsys, "--import-snippet", "--corefile", COREFILE,
                            "--ingress", CLUSTER)
    assert (code, out) == (2, "")
    assert "imports hairpin-proxy.override" in err and "no effect" in err
    code, out, err = render(capsys, "--import-snippet", "--corefile", k3s, "--import-key",
                            "other.server", "--ingress", CLUSTER)
    assert (code, out) == (2, "")


def test_json_logs(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = render(capsys, "--import-snippet", "--ingress", CLUSTER,
                          "--log-format", "json")
    assert code == 0
    records = [json.loads(line) for line in err.splitlines()]
    assert [(r["ingress"], r["host"]) for r in records] == [
        ("tenant/sneaky", "kubernetes.default.svc.cluster.local"),
        ("tenant/sneaky", "10.0.0.1")]


# --------------------------------------------------------------------------- hosts file

def test_hosts_file_mode(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = render(capsys, "--hosts-file", HOSTS, "--proxy-ip", "10.43.0.10",
                            "--proxy-ip", "fd00::10", "--ingress", CLUSTER)
    assert code == 0
    assert out == hostsfile.apply(HOSTS.read_text(), EXPECTED, ["10.43.0.10", "fd00::10"]).text
    assert out.startswith(HOSTS.read_text())
    assert hostsfile.managed_hosts(out) == EXPECTED[1:]
    assert "skipped=*.blog.example.org" in err


def test_hosts_file_check_and_diff(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = copy(HOSTS, tmp_path)
    args: list[str | Path] = ["--hosts-file", path, "--proxy-ip", "10.43.0.10",
                              "--ingress", CLUSTER]
    assert render(capsys, *args, "--check")[:2] == (1, "")
    _, rendered, _ = render(capsys, *args)
    _, diff, _ = render(capsys, *args, "--diff")
    subprocess.run(["patch", "-s", str(path)], input=diff, text=True, check=True, timeout=60)
    assert path.read_text() == rendered
    assert render(capsys, *args, "--check")[:2] == (0, "")


@pytest.mark.parametrize("ip", ["10.43.0", "proxy.example.com", "fe80::1%eth0", "", "10.0.0.1 x"])
def test_invalid_proxy_ip(capsys: pytest.CaptureFixture[str], ip: str) -> None:
    code, out, err = render(capsys, "--hosts-file", HOSTS, "--proxy-ip", ip,
                            "--ingress", CLUSTER)
    assert (code, out) == (2, "")
    assert f"--proxy-ip {ip!r} is not an IPv4 or IPv6 address" in err


def test_broken_hosts_file_markers(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text(HOSTS.read_text() + corefile.BEGIN_MARKER + "\n")
    code, out, err = render(capsys, "--hosts-file", path, "--proxy-ip", "10.43.0.10",
                            "--ingress", CLUSTER)
    assert (code, out) == (2, "")
    assert f"{path}: line 5: BEGIN marker without an END marker" in err


# --------------------------------------------------------------------------- served zones

# A stub server block and k8s_external: CoreDNS answers both zones itself.
SERVING = COREFILE.read_text().replace(
    "    prometheus :9153\n", "    k8s_external shop.example.com\n    prometheus :9153\n") + \
    "blog.example.org:53 {\n    forward . 10.0.0.10\n}\n"
SERVED = ("*.blog.example.org", "blog.example.org", "shop.example.com", "www.shop.example.com")


@pytest.mark.parametrize("mode", ["--corefile", "--hosts-file", "--node-local-corefile",
                                  "--import-snippet"])
def test_zones_the_corefile_serves_are_never_redirected(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, mode: str) -> None:
    """As the controller reads them from the CoreDNS ConfigMap, render reads them from
    --corefile, in every mode (beside another one, --corefile is only read)."""
    cf = tmp_path / "Corefile"
    cf.write_text(SERVING if mode != "--import-snippet" else SERVING.replace(
        "    reload\n", "    reload\n    import /etc/coredns/custom/*.override\n", 1))
    others: dict[str, list[str | Path]] = {
        "--hosts-file": [mode, HOSTS], "--import-snippet": [mode],
        "--node-local-corefile": [mode, NODE_LOCAL]}
    other = others.get(mode, [])
    code, out, err = render(capsys, *other, "--corefile", cf, "--ingress", CLUSTER)
    assert code == 0, err
    kept = tuple(h for h in EXPECTED if h not in SERVED)
    if mode == "--corefile":
        # The output holds the Corefile, its stub server block included: our rules only.
        assert corefile.managed_hosts(out) == kept
        out = out[out.index(corefile.BEGIN_MARKER):out.index(corefile.END_MARKER)]
    # Hosts as written: the names of the hosts file or of node-local-dns's server block
    # (`name:53`), or the rules' regexes read back.
    written = {w.removesuffix(":53") for w in out.split()} | {
        h for line in out.splitlines() if "match " in line
        for h in rules.hosts_of_regex(line.split()[-1]) or ()}
    for host in SERVED:
        assert host not in written and host.removeprefix("*.") not in written, (host, out)
    for host in kept:
        assert host in written, (host, out)
    if mode == "--corefile":
        lines = [line for line in err.splitlines() if "rejected host" in line]
        assert any("host=shop.example.com" in line for line in lines), err


def test_an_unparsable_corefile_beside_another_mode_is_an_error(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cf = tmp_path / "Corefile"
    cf.write_text(".:53 {\n")
    code, out, err = render(capsys, "--hosts-file", HOSTS, "--corefile", cf,
                            "--ingress", CLUSTER)
    assert (code, out) == (2, "")
    assert f"{cf}: " in err


# --------------------------------------------------------------------------- errors

@pytest.mark.parametrize(("args", "message"), [
    (["--ingress", CLUSTER], "give exactly one of --corefile FILE, --hosts-file FILE, "
                             "--node-local-corefile FILE or --import-snippet"),
    (["--corefile", COREFILE, "--hosts-file", HOSTS, "--import-snippet", "--ingress", CLUSTER],
     "(got --hosts-file, --import-snippet)"),
    (["--import-snippet", "--check", "--ingress", CLUSTER], "--diff and --check compare"),
    (["--hosts-file", HOSTS, "--ingress", CLUSTER, NO_IP],
     "--hosts-file needs at least one --proxy-ip"),
    (["--corefile", COREFILE, "--ingress", CLUSTER, NO_IP],
     "--corefile needs at least one --proxy-ip ADDRESS (the proxy Service's ClusterIP"),
    (["--import-snippet", "--ingress", CLUSTER, NO_IP],
     "--import-snippet needs at least one --proxy-ip"),
    (["--corefile", COREFILE], "give at least one --ingress PATH"),
    (["--corefile", COREFILE, "--ingress", CLUSTER, "--cluster-domain", "."],
     "cluster_domain must not be empty"),
    (["--corefile", FIXTURES / "missing", "--ingress", CLUSTER],
     "missing: cannot read: No such file or directory"),
    (["--corefile", FIXTURES, "--ingress", CLUSTER], "cannot read: Is a directory"),
    (["--corefile", COREFILE, "--ingress", FIXTURES / "nowhere"],
     "nowhere: no such file or directory"),
    (["--corefile", COREFILE, "--ingress", CLUSTER, "--ingress", FIXTURES / "broken"],
     "broken/bad.yaml: invalid YAML at line 6, column 1"),
    (["--import-snippet", "--ingress", FIXTURES / "broken" / "unsafe.yaml"],
     "unsafe.yaml: invalid YAML at line 1, column 1: could not determine a constructor"),
    (["--import-snippet", "--ingress", FIXTURES / "mistyped"],
     "ingress.yaml: invalid YAML at line 7, column 22: 'yesterday' is no timestamp"),
])
def test_errors_exit_2_and_print_nothing(capsys: pytest.CaptureFixture[str],
                                         args: list[str | Path], message: str) -> None:
    code, out, err = render(capsys, *args)
    assert (code, out) == (2, "")
    assert message in err
    assert "Traceback" not in err


@pytest.mark.parametrize(("text", "message"), [
    (".:53 {\n    errors\n", "Corefile:"),
    ('.:53 {\n    forward . "8.8.8.8\n}\n', "unterminated quoted string"),
])
def test_bad_corefile(capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str,
                      message: str) -> None:
    path = tmp_path / "Corefile"
    path.write_text(text)
    for extra in ([], ["--diff"], ["--check"]):
        code, out, err = render(capsys, "--corefile", path, "--ingress", CLUSTER, *extra)
        assert (code, out) == (2, "")
        assert str(path) in err and message in err


def test_corefile_without_a_root_block_for_the_port(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = render(capsys, "--corefile", COREFILE, "--ingress", CLUSTER,
                            "--dns-port", "5353")
    assert (code, out) == (2, "")
    assert str(COREFILE) in err


# --------------------------------------------------------------------------- the real binary

def test_console_script_with_stdin_and_pipes(tmp_path: Path) -> None:
    path = copy(COREFILE, tmp_path)
    stdin = (CLUSTER / "ingresses.yaml").read_text()
    proc = subprocess.run([str(BIN), "render", "--proxy-ip", PROXY_IP, "--corefile", str(path),
                           "--ingress", "-",
                           "--ingress", str(CLUSTER / "apps")],
                          input=stdin, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert corefile.managed_hosts(proc.stdout) == EXPECTED
    assert "ingress=tenant/sneaky" in proc.stderr
    check = subprocess.run([str(BIN), "render", "--proxy-ip", PROXY_IP, "--corefile",
                            str(path), "--ingress",
                            str(CLUSTER), "--check"],
                           capture_output=True, text=True, timeout=120, check=False)
    assert (check.returncode, check.stdout) == (1, "")


def test_console_script_error_and_closed_pipe(tmp_path: Path) -> None:
    proc = subprocess.run([str(BIN), "render", "--proxy-ip", PROXY_IP, "--corefile",
                           str(COREFILE), "--ingress", str(FIXTURES / "broken")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert "bad.yaml: invalid YAML" in proc.stderr
    # A reader that goes away early is no reason for a traceback.
    many = tmp_path / "many.yaml"
    many.write_text("".join(
        f"---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: i{i}}}\n"
        f"spec: {{tls: [{{hosts: [h{i}.example.com]}}]}}\n" for i in range(3000)))
    pipeline = subprocess.run(
        f"'{BIN}' render --proxy-ip {PROXY_IP} --import-snippet --ingress '{many}' "
        "| head -c 10 >/dev/null; "
        "echo ${PIPESTATUS[0]}",
        shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=120,
        check=False)
    assert "Traceback" not in pipeline.stderr
    assert pipeline.stdout.strip() == "0"


def test_a_bad_flag_value_is_refused_before_anything_runs(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = render(capsys, "--corefile", COREFILE, "--ingress", CLUSTER, "--dns-port",
                            "70000")
    assert (code, out) == (2, "")
    assert "--dns-port / HAIRPIN_DNS_PORT: expected a port (1 to 65535), got '70000'" in err


def test_class_existence_is_checked_only_when_classes_are_given(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ing = ("apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: web, namespace: a}\n"
           "spec: {ingressClassName: typo, tls: [{hosts: [a.example.com]}]}\n")
    (tmp_path / "ing.yaml").write_text(ing)
    code, out, _ = render(capsys, "--corefile", COREFILE, "--ingress", tmp_path / "ing.yaml")
    assert code == 0 and corefile.managed_hosts(out) == ("a.example.com",)
    (tmp_path / "classes.yaml").write_text(
        "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: nginx}\n"
        "spec: {controller: k8s.io/ingress-nginx}\n")
    code, out, err = render(capsys, "--corefile", COREFILE, "--ingress", tmp_path)
    assert code == 0 and corefile.managed_hosts(out) == ()
    assert "IngressClass 'typo' does not exist" in err


def test_a_refusal_by_a_size_limit_names_the_hosts(capsys: pytest.CaptureFixture[str]) -> None:
    # A budget that holds some of the fixture's hosts, not all: whole Ingresses are refused.
    code, _, err = render(capsys, "--import-snippet", "--ingress", CLUSTER, "--rules-budget",
                          "100", "--log-format", "json")
    assert code == 0
    records = [json.loads(line) for line in err.splitlines()]
    refused = [r for r in records if "--rules-budget" in r.get("reason", "")]
    assert refused
    for r in refused:
        assert r["host"] and set(r["host"].split(",")) <= set(EXPECTED), r
