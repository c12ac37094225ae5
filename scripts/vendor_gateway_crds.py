"""Vendor a Gateway API CRD that the fake API serves in the tests.

    python scripts/vendor_gateway_crds.py CRD_YAML COMMIT

Reads one definition of the standard channel, ``config/crd/standard/<group>_<plural>.yaml`` of
github.com/kubernetes-sigs/gateway-api (Apache-2.0) at ``COMMIT``, and writes it without its
descriptions to tests/deploy/crds/<group>_<plural>.json, with the bundle version and channel
the definition names and where it came from. tests/fakeapi/crds.py builds what the fake serves
(names, scope, versions, storage, status subresource) from it. Data only; nothing runs it.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml
from vendor_crd_schemas import without_descriptions

OUT = Path(__file__).resolve().parents[1] / "tests" / "deploy" / "crds"
REPOSITORY = "github.com/kubernetes-sigs/gateway-api"


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not re.fullmatch(r"[0-9a-f]{40}", argv[1]):
        print(__doc__, file=sys.stderr)
        return 2
    path, commit = Path(argv[0]), argv[1]
    crd = yaml.safe_load(path.read_text())
    notes = crd["metadata"].get("annotations") or {}
    spec = crd["spec"]
    document = {
        "source": f"{REPOSITORY}, config/crd/standard/{path.name} at {commit} (Apache-2.0), "
                  "descriptions removed",
        "commit": commit,
        "bundle_version": notes.get("gateway.networking.k8s.io/bundle-version", ""),
        "channel": notes.get("gateway.networking.k8s.io/channel", ""),
        "definition": without_descriptions(crd),
    }
    out = OUT / f"{spec['group']}_{spec['names']['plural']}.json"
    out.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out} ({out.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
