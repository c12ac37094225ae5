"""The controller knows the proxy's --target-server in every install (that data plane then
needs no slot), and the verify-off component turns host verification off, nothing else."""

from __future__ import annotations

from typing import Any

from hairpin_proxy.settings import DEFAULT_TARGET_SERVER, ControllerSettings, settings_from_args
from tests.deploy.rendering import Doc, find, subparsers


def container(docs: list[Doc], name: str) -> dict[str, Any]:
    c: dict[str, Any] = find(docs, "Deployment", name)["spec"]["template"]["spec"][
        "containers"][0]
    return c


def env_of(c: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}


def controller_settings(docs: list[Doc]) -> ControllerSettings:
    """The settings the controller starts with, from its args and env as rendered."""
    c = container(docs, "hairpin-proxy-controller")
    args = subparsers()["controller"].parse_args(c["args"][1:])
    return settings_from_args(ControllerSettings, args, env_of(c))


def test_the_controller_knows_the_proxys_target_server_everywhere(
        renders: dict[str, list[Doc]]) -> None:
    checked = []
    for name, docs in renders.items():
        kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
        if not {("Deployment", "hairpin-proxy"),
                ("Deployment", "hairpin-proxy-controller")} <= kinds:
            continue
        proxy = env_of(container(docs, "hairpin-proxy")).get("TARGET_SERVER",
                                                             DEFAULT_TARGET_SERVER)
        assert controller_settings(docs).target_server == proxy, name
        checked.append(name)
    assert {"base", "overlays/k3s", "overlays/rke2", "components/traefik"} <= set(checked)


def test_verify_off_turns_host_verification_off_and_changes_nothing_else(
        renders: dict[str, list[Doc]]) -> None:
    base, off = renders["base"], renders["components/verify-off"]
    assert controller_settings(base).verify_hosts == "on"
    assert controller_settings(off).verify_hosts == "off"
    ctl = container(off, "hairpin-proxy-controller")
    assert ctl["args"] == [*container(base, "hairpin-proxy-controller")["args"],
                           "--verify-hosts=off"]
    def others(docs: list[Doc]) -> list[Doc]:
        return sorted((d for d in docs if (d["kind"], d["metadata"]["name"])
                       != ("Deployment", "hairpin-proxy-controller")),
                      key=lambda d: (d["kind"], d["metadata"].get("namespace", ""),
                                     d["metadata"]["name"]))
    assert others(off) == others(base)
