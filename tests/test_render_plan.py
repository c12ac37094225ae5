"""`render` over the plan: data planes, slots and the ClusterIPs it must be given, through the
real CLI on real files (byte-identical to the controller: tests/controller/
test_plan_equivalence.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from hairpin_proxy import corefile
from hairpin_proxy.cli import main
from tests.test_plan import PLANES, corpus, with_ips

COREFILE = Path(__file__).parent / "manifests" / "Corefile"


def write(tmp_path: Path, objects: list[dict[str, Any]]) -> Path:
    path = tmp_path / "inputs.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    return path


def render(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["render", "--corefile", str(COREFILE), *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_slot_service_not_among_the_inputs_is_named_never_guessed(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    inputs = write(tmp_path, with_ips(corpus("04-two-classes")["objects"], PLANES))
    code, out, err = render(capsys, "--ingress", str(inputs))
    assert (code, out) == (2, "")
    assert "needs the ClusterIPs of the slot Service hairpin-proxy/hairpin-proxy-t1" in err


def test_each_target_answers_with_its_own_service(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path) -> None:
    objects = with_ips(corpus("04-two-classes")["objects"],
                       {**PLANES, "hairpin-proxy/hairpin-proxy-t1": "10.96.0.51"})
    code, out, err = render(capsys, "--ingress", str(write(tmp_path, objects)),
                            "--print-targets")
    assert code == 0, err
    text, targets = out.split("\n---\n", 1)
    groups = corefile.managed_groups(text)
    assert groups["wiki.example.com"].ipv4 == ("10.96.0.51",)
    assert groups["shop.example.com"].ipv4 == ("10.96.0.50",)
    table, svc = yaml.safe_load_all(targets)
    (entry,) = json.loads(table["data"]["targets.json"])["targets"]
    assert (entry["key"], entry["slot"]) == ("ingressclass/nginx-internal", 1)
    assert svc["metadata"]["name"] == "hairpin-proxy-t1"
    assert [p["targetPort"] for p in svc["spec"]["ports"]] == [20002, 20003]


def test_a_data_plane_without_proxy_is_left_alone_and_said(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    objects = with_ips(corpus("06-no-proxy-data-plane")["objects"], PLANES)
    code, out, err = render(capsys, "--ingress", str(write(tmp_path, objects)))
    assert code == 0, err
    assert "wiki.example.com" not in corefile.managed_groups(out)
    assert "host not redirected host=wiki.example.com target=ingressclass/nginx-internal" in err
