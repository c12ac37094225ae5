"""The kubeadm-migration emulator (tests/corefiles/migrate.py) and the migrated corpus files."""

from __future__ import annotations

import re

import pytest

from hairpin_proxy.corefile import Answers, apply, managed_hosts, strays
from tests.corefiles import BY_NAME, HOSTS, SAMPLES, Sample
from tests.corefiles.migrate import SOURCES, migrate, migrated_text
from tests.corefiles.oracle import check_one_set_per_root, find_ours, strip_ours

MIGRATED = [s for s in SAMPLES if s.migrated]


def test_emulator_reproduces_corefile_migrations_own_round_trip() -> None:
    # TestCorefile of github.com/coredns/corefile-migration (migration/corefile): this text
    # is printed back unchanged.
    text = (".:53 {\n    error\n    health\n"
            "    kubernetes cluster.local in-addr.arpa ip6.arpa {\n        pods insecure\n"
            "        upstream\n        fallthrough in-addr.arpa ip6.arpa\n    }\n"
            "    prometheus :9153\n    proxy . /etc/resolv.conf\n    cache 30\n    loop\n"
            "    reload\n    loadbalance\n}\n\n"
            ".:5353 {\n    proxy . /etc/resolv.conf\n}\n\n"
            '"exam ple.com:53" {\n    exampleplug "arg \\"1\\"" {\n'
            '        option1 "my arg1" arg2 "arg \\"three\\"" "arg \\4"\n    }\n'
            "    template ANY A foo.bar.com {\n"
            '        match "^([^.]+).A foo.bar.com"\n'
            '        answer "{{ .Name }} 59 IN CNAME foo2.bar.com"\n'
            "        upstream 127.0.0.1:53\n    }\n}\n")
    assert migrate(text) == text


def test_emulator_strips_comments_reindents_and_drops_empty_braces() -> None:
    text = ("# top\n.:53 {   # the root\n\terrors\n  health {\n  }\n"
            '  forward . "/etc/resolv.conf" # upstream\n  cache 30 {\n      success 100\n'
            "  }\n}\nexample.org {\n}\nimport custom/*.server\n")
    assert migrate(text) == (".:53 {\n    errors\n    health\n    forward . /etc/resolv.conf\n"
                             "    cache 30 {\n        success 100\n    }\n}\n\n"
                             "example.org\nimport custom/*.server")


@pytest.mark.parametrize("sample", MIGRATED, ids=lambda s: s.name)
def test_migrated_files_look_as_kubeadm_prints_them(sample: Sample) -> None:
    text = sample.text
    assert migrate(text) == text  # a fixed point of the migration
    # No comments: a "#" only inside a quoted string.
    assert "#" not in re.sub(r'"(?:[^"\\]|\\.)*"', "", text)
    for line in text.split("\n"):
        assert line == line.rstrip()
        indent = len(line) - len(line.lstrip(" "))
        assert "\t" not in line[:indent + 1]
        assert indent in (0, 4, 8)
    assert "\n\n\n" not in text
    # Server blocks are separated by one blank line.
    assert not re.search(r"\n}\n[^\n]", text)


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_migrated_files_are_what_the_helper_makes(source: str) -> None:
    assert BY_NAME[f"{source}-migrated"].text == migrated_text(source)


@pytest.mark.parametrize("sample", MIGRATED, ids=lambda s: s.name)
def test_one_apply_on_a_migrated_file_gives_one_set(sample: Sample) -> None:
    text, port = sample.text, sample.dns_port
    assert not any(line.lstrip().startswith("#") for line in text.splitlines())
    assert managed_hosts(text, dns_port=port) == sample.managed
    answers = Answers.of(["10.96.0.30", "fd00::30"])
    for hosts in (sample.managed, HOSTS, ("z.example.net",), ()):
        out = apply(text, hosts, answers=answers, dns_port=port)
        check_one_set_per_root(out, hosts, answers, port)
        assert strip_ours(out, port) == strip_ours(text, port)
        assert strays(out, dns_port=port) == ()
        assert apply(out, hosts, answers=answers, dns_port=port) == out
        if hosts:
            # Where the first line of ours was, the set is.
            first = find_ours(text, port).by_block[0][0]
            assert out.split("\n")[first].strip() == "# BEGIN hairpin-proxy (managed; do not edit)"
