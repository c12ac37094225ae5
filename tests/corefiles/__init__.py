"""The Corefile corpus and what each file is known to hold."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
# The default rewrite target, as the tests expect to see it in rules.
TARGET = "hairpin-proxy.hairpin-proxy.svc.cluster.local."


@dataclass(frozen=True)
class Sample:
    name: str
    dns_port: int = 53
    root_blocks: int = 1  # server blocks for the root zone on dns_port
    has_reload: bool = True
    imports_override: bool = False  # imports /etc/coredns/custom/*.override in the root block
    legacy_lines: int = 0  # lines "... # Added by hairpin-proxy"

    @property
    def path(self) -> Path:
        return HERE / f"{self.name}.Corefile"

    @property
    def text(self) -> str:
        # Bytes, not read_text(): universal newlines would hide the CRLF file's line ends.
        return self.path.read_bytes().decode("utf-8")


SAMPLES: tuple[Sample, ...] = (
    Sample("kubeadm"),
    Sample("k3s", imports_override=True),
    Sample("rke2"),
    Sample("microk8s"),
    Sample("talos"),
    Sample("helm-no-port"),
    Sample("openshift", dns_port=5353),
    Sample("gardener", dns_port=8053, imports_override=True),
    Sample("aks", imports_override=True),
    Sample("eks"),
    Sample("multi-block"),
    Sample("stub-zone"),
    Sample("legacy", legacy_lines=2),
    Sample("crlf"),
    Sample("tabs"),
    Sample("snippets-quotes"),
    Sample("brace-next-line", has_reload=False),
)

BY_NAME = {s.name: s for s in SAMPLES}
