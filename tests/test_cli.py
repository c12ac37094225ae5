from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hairpin_proxy.cli import COMMANDS, build_parser, main


def test_help_lists_every_command() -> None:
    text = build_parser().format_help()
    for cmd in COMMANDS:
        assert cmd.name in text


@pytest.mark.parametrize("cmd", [c.name for c in COMMANDS])
def test_subcommand_help_names_each_env_var(cmd: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([cmd, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "[env: " in out
    assert "--log-format" in out


def test_bad_env_value_exits_2_with_a_clear_message() -> None:
    proc = subprocess.run([sys.executable, "-m", "hairpin_proxy", "proxy"],
                          env={"HAIRPIN_WORKERS": "lots", "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert "--workers / HAIRPIN_WORKERS" in proc.stderr


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess, without HAIRPIN_* settings from the caller's environment."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("HAIRPIN_") and k not in ("KUBECONFIG", "TARGET_SERVER")}
    return subprocess.run([sys.executable, "-m", "hairpin_proxy", *args],
                          env={**base, **(env or {})}, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60, check=False)


# Python's and argparse's own words: none of them may reach a user.
INTERNAL = ("Traceback", "invalid float value", "invalid int value", "invalid literal",
            "could not convert", "invalid choice:", "choose from", "unrecognized arguments",
            "expected one argument", "the following arguments are required", "usage:",
            "ignored explicit argument")

BAD = [
    (["doctor", "h", "--no-api", "--timeout", "abc"],
     "doctor: error: --timeout / HAIRPIN_TIMEOUT: expected a number, got 'abc'"),
    (["doctor", "h", "--no-api", "--timeout", "nan"], "expected a finite number, got 'nan'"),
    (["doctor", "h", "--no-api", "--timeout", "0"],
     "--timeout / HAIRPIN_TIMEOUT: expected a positive number of seconds, got '0'"),
    (["doctor", "h", "--no-api", "--port", "70000"],
     "--port / HAIRPIN_PORT: expected a port (0 to 65535), got '70000'"),
    (["doctor", "h", "--no-api", "--tls-port", "-1"], "--tls-port / HAIRPIN_TLS_PORT:"),
    (["doctor", "h", "--no-api", "--output", "xml"],
     "--output / HAIRPIN_OUTPUT: invalid choice 'xml' (expected one of text, json)"),
    (["doctor", "h", "--no-api", "--resolve", "h:nonsense"],
     "--resolve 'h:nonsense': 'nonsense' is not an IP address"),
    (["doctor", "h", "--no-api", "--resolve"], "--resolve needs a value"),
    (["doctor", "h", "--no-api=yes"], "--api/--no-api takes no value, got 'yes'"),
    (["doctor", "h", "--no-api", "--bogus"], "unknown flag --bogus"),
    (["proxy", "--listen", "garbage", "--admin-listen", ""], "missing port in 'garbage'"),
    (["proxy", "--admin-listen", "garbage"],
     "--admin-listen / HAIRPIN_ADMIN_LISTEN: expected ADDR:PORT, missing port in 'garbage'"),
    (["proxy", "--workers", "lots"],
     "--workers / HAIRPIN_WORKERS: expected a whole number, got 'lots'"),
    (["proxy", "--idle-timeout", "-5"], "--idle-timeout / HAIRPIN_IDLE_TIMEOUT: must not be "
                                        "negative, got '-5'"),
    (["proxy", "--proxy-protocol", "v3"], "invalid choice 'v3' (expected one of v1, v2)"),
    (["render", "--dns-ttl", "0"],
     "--dns-ttl / HAIRPIN_DNS_TTL: expected a TTL of 1 to 3600 seconds, got '0'"),
    (["render", "--hosts-from", "some"], "invalid choice 'some' (expected one of tls, rules, "
                                         "all)"),
    (["controller", "--dns-port", "0"], "--dns-port / HAIRPIN_DNS_PORT: expected a port (1 to "
                                        "65535), got '0'"),
    (["controller", "--mass-removal-fraction", "7"], "expected a fraction between 0 and 1"),
    (["controller", "--leader-elect", "perhaps"], "unexpected argument perhaps"),
    (["etchosts", "--write-method", "copy"], "invalid choice 'copy'"),
    (["cleanup", "--mode", "x"], "invalid choice 'x' (expected one of coredns, "
                                 "coredns-import)"),
    (["proxy", "--bogus"], "hairpin-proxy proxy: error: unknown flag --bogus; see "
                           "hairpin-proxy proxy --help"),
    (["controller", "--watch-timeout", "0"],
     "hairpin-proxy controller: error: --watch-timeout must be positive"),
    (["etchosts", "--resync-interval", "0"], "hairpin-proxy etchosts: error: --resync-interval"),
    (["render", "--corefile", "/nonexistent/Corefile", "--proxy-ip", "10.96.0.1",
      "--ingress", "-"], "hairpin-proxy render: error: /nonexistent/Corefile: cannot read"),
    (["bogus"], "hairpin-proxy: error: unknown command 'bogus' (expected one of proxy, render, "
                "controller, cleanup, etchosts, doctor)"),
    ([], "hairpin-proxy: error: no command given"),
]


@pytest.mark.parametrize(("args", "message"), BAD, ids=[" ".join(a) or "-" for a, _ in BAD])
def test_bad_values_get_one_line_in_our_words_and_exit_2(args: list[str], message: str) -> None:
    proc = cli(*args)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert message in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    # One style for every command: its name, "error:", no timestamp.
    command = args[0] if args and args[0] != "bogus" else ""
    assert lines[0].startswith(f"hairpin-proxy {command}: error: ".replace(" :", ":")), lines[0]
    assert not any(word in proc.stderr for word in INTERNAL), proc.stderr
    assert proc.stdout == ""


def test_bad_env_values_are_worded_the_same() -> None:
    proc = cli("doctor", "h", "--no-api", env={"HAIRPIN_TIMEOUT": "soon"})
    assert proc.returncode == 2
    assert proc.stderr == ("hairpin-proxy doctor: error: --timeout / HAIRPIN_TIMEOUT: "
                           "expected a number, got 'soon'\n")


def test_help_still_shows_the_choices() -> None:
    proc = cli("doctor", "--help")
    assert proc.returncode == 0
    assert "--output {text,json}" in proc.stdout


def test_help_speaks_of_what_the_commands_do_now() -> None:
    """The rules have been `template` stanzas since 0.1.0 and routes are sources too: no help
    text may still speak of rewrite rules or of Ingresses alone."""
    top = cli("--help").stdout
    assert "rewrite" not in top
    controller = cli("controller", "--help").stdout
    assert "rewrite" not in controller
    assert "Gateway API routes" in controller
