"""Vendor the Prometheus Operator's CRD schemas that tests/deploy/test_monitoring.py validates
the `monitoring` component against, and Gateway API CRDs that the fake API serves.

    python scripts/vendor_crd_schemas.py PROMETHEUS_OPERATOR_CHECKOUT
    python scripts/vendor_crd_schemas.py --gateway-api CRD_YAML COMMIT

Reads ``example/prometheus-operator-crd/monitoring.coreos.com_{servicemonitors,podmonitors,
prometheusrules}.yaml`` from a checkout of github.com/prometheus-operator/prometheus-operator
(Apache-2.0) and writes the ``openAPIV3Schema`` of each kind's served ``v1`` version, without
its descriptions, to tests/deploy/crds/monitoring.coreos.com_v1.json, with the operator
version the CRDs name. The schemas are data the tests read; nothing here runs them.

With ``--gateway-api``: reads one definition of the standard channel,
``config/crd/standard/<group>_<plural>.yaml`` of github.com/kubernetes-sigs/gateway-api
(Apache-2.0) at ``COMMIT``, and writes the whole object without its descriptions to
tests/deploy/crds/<group>_<plural>.json, with the bundle version and channel it names and where
it came from; tests/fakeapi/crds.py builds what the fake serves from it.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

OUT = Path(__file__).resolve().parents[1] / "tests" / "deploy" / "crds" / \
    "monitoring.coreos.com_v1.json"
FILES = ("servicemonitors", "podmonitors", "prometheusrules")


def without_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [without_descriptions(v) for v in node]
    return node


def gateway_api(argv: list[str]) -> int:
    if len(argv) != 2 or not re.fullmatch(r"[0-9a-f]{40}", argv[1]):
        print(__doc__, file=sys.stderr)
        return 2
    path, commit = Path(argv[0]), argv[1]
    crd = yaml.safe_load(path.read_text())
    notes = crd["metadata"].get("annotations") or {}
    spec = crd["spec"]
    document = {
        "source": "github.com/kubernetes-sigs/gateway-api, "
                  f"config/crd/standard/{path.name} at {commit} (Apache-2.0), "
                  "descriptions removed",
        "commit": commit,
        "bundle_version": notes.get("gateway.networking.k8s.io/bundle-version", ""),
        "channel": notes.get("gateway.networking.k8s.io/channel", ""),
        "definition": without_descriptions(crd),
    }
    out = OUT.parent / f"{spec['group']}_{spec['names']['plural']}.json"
    out.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out} ({out.stat().st_size:,} bytes)")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--gateway-api"]:
        return gateway_api(argv[1:])
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    checkout = Path(argv[0])
    schemas: dict[str, Any] = {}
    versions = set()
    for name in FILES:
        path = checkout / "example" / "prometheus-operator-crd" / \
            f"monitoring.coreos.com_{name}.yaml"
        crd = yaml.safe_load(path.read_text())
        versions.add(crd["metadata"]["annotations"]["operator.prometheus.io/version"])
        served = [v for v in crd["spec"]["versions"] if v["name"] == "v1" and v["served"]]
        if len(served) != 1:
            print(f"{path}: no single served v1 version", file=sys.stderr)
            return 1
        schemas[crd["spec"]["names"]["kind"]] = without_descriptions(
            served[0]["schema"]["openAPIV3Schema"])
    if len(versions) != 1:
        print(f"the CRDs name several operator versions: {sorted(versions)}", file=sys.stderr)
        return 1
    document = {
        "source": "github.com/prometheus-operator/prometheus-operator, "
                  "example/prometheus-operator-crd (Apache-2.0), descriptions removed",
        "operator_version": versions.pop(),
        "schemas": schemas,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
