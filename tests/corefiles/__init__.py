"""The Corefile corpus and what each file is known to hold."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
# The proxy Service name that rules of earlier versions rewrote to (the default target).
PROXY_FQDN = "hairpin-proxy.hairpin-proxy.svc.cluster.local."
# The hosts of the rules in the files that hold some (see README.md).
HOSTS = ("*.apps.example.com", "a.example.com", "b.example.com")
GROUP_HOSTS = (*HOSTS, "c.example.com", "web.apps.example.com")


@dataclass(frozen=True)
class Sample:
    name: str
    dns_port: int = 53
    root_blocks: int = 1  # server blocks for the root zone on dns_port
    has_reload: bool = True
    imports_override: bool = False  # imports /etc/coredns/custom/*.override in the root block
    legacy_lines: int = 0  # lines "... # Added by hairpin-proxy"
    managed: tuple[str, ...] = ()  # what managed_hosts reads from the file as it is
    strays: int = 0  # rules of ours outside the root blocks (reported, never edited)
    migrated: bool = False  # as kubeadm's Corefile migration prints it (see migrate.py)

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
    Sample("legacy", legacy_lines=2, managed=("bar.example.com", "foo.example.com")),
    Sample("crlf"),
    Sample("tabs"),
    Sample("snippets-quotes"),
    Sample("brace-next-line", has_reload=False),
    # Rules of earlier versions, and rules of ours damaged or moved by hand.
    Sample("old-rewrite", managed=HOSTS),
    Sample("begin-only", managed=HOSTS),
    Sample("end-only", managed=HOSTS, imports_override=True),
    Sample("moved-to-stub", strays=3),
    Sample("moved-in-root", managed=HOSTS, migrated=True),
    Sample("split-in-root", managed=HOSTS),
    Sample("duplicated", managed=("*.apps.example.com", "a.example.com", "c.example.com")),
    # Two answer sets (two proxy Services), one wildcard over the other set's host.
    Sample("groups", managed=GROUP_HOSTS),
    # What kubeadm's migration makes of layouts holding rules of ours (tests/corefiles/migrate.py).
    Sample("kubeadm-migrated", managed=HOSTS, migrated=True),
    Sample("k3s-migrated", managed=HOSTS, migrated=True, imports_override=True),
    Sample("rke2-migrated", managed=HOSTS, migrated=True),
    Sample("microk8s-migrated", managed=HOSTS, migrated=True),
    Sample("talos-migrated", managed=HOSTS, migrated=True),
    Sample("openshift-migrated", dns_port=5353, managed=HOSTS, migrated=True),
    Sample("gardener-migrated", dns_port=8053, managed=HOSTS, migrated=True,
           imports_override=True),
    Sample("aks-migrated", managed=HOSTS, migrated=True, imports_override=True),
    Sample("eks-migrated", managed=HOSTS, migrated=True),
    Sample("stub-zone-migrated", managed=HOSTS, migrated=True),
    Sample("tabs-migrated", managed=HOSTS, migrated=True),
    Sample("snippets-quotes-migrated", managed=HOSTS, migrated=True),
    Sample("brace-next-line-migrated", managed=HOSTS, migrated=True, has_reload=False),
    Sample("legacy-migrated", managed=("bar.example.com", "foo.example.com"), migrated=True),
    Sample("old-rewrite-migrated", managed=HOSTS, migrated=True),
    Sample("groups-migrated", managed=GROUP_HOSTS, migrated=True),
    # The regexes as 0.2 wrote them (each name in full), in what kubeadm's migration made of
    # them: what clusters hold when they upgrade.
    Sample("plain-spelling", managed=HOSTS, migrated=True),
)

BY_NAME = {s.name: s for s in SAMPLES}

# NodeLocal DNSCache's Corefile as its upstream manifest installs it (sed replaced the domain
# and the bind placeholders; node-cache substitutes the rest at run time).
NODE_LOCAL_UPSTREAM = (HERE / "nodelocal" / "upstream.Corefile").read_text()

# The upstream manifest's Corefile as shipped, with only __PILLAR__DNS__DOMAIN__ replaced (the
# one placeholder node-cache does not fill itself): __PILLAR__LOCAL__DNS__,
# __PILLAR__DNS__SERVER__, __PILLAR__CLUSTER__DNS__ and __PILLAR__UPSTREAM__SERVERS__ stay, and
# `health` carries an address.
NODE_LOCAL_MANIFEST = (HERE / "nodelocal" / "upstream-manifest.Corefile").read_text()

# kubespray's `nodelocaldns` ConfigMap, its template rendered with kubespray's defaults.
NODE_LOCAL_KUBESPRAY = (HERE / "nodelocal" / "kubespray.Corefile").read_text()
