"""apply_nodelocal/remove_nodelocal/nodelocal_hosts and NodeLocalEdit: node-local-dns's Corefile.

The oracles are line-based where they can be (our text is found by its marker lines), and the
zone oracle is computed here from the host set, not by the module.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hairpin_proxy.corefile import BEGIN_MARKER, END_MARKER, MAX_CONFIGMAP_BYTES, CorefileError
from hairpin_proxy.corefile.nodelocal import (
    OUR_KEY,
    apply_nodelocal,
    nodelocal_hosts,
    nodelocal_zones,
    remove_nodelocal,
)
from hairpin_proxy.corefile.parser import parse
from hairpin_proxy.edits.coredns import EditError
from hairpin_proxy.edits.nodelocal import CANDIDATES, NodeLocalEdit, reconciler_of
from tests.corefiles import NODE_LOCAL_KUBESPRAY, NODE_LOCAL_MANIFEST, NODE_LOCAL_UPSTREAM

# The upstream ConfigMap after install (sed replaced the domain and the bind placeholders).
UPSTREAM = NODE_LOCAL_UPSTREAM

# The same with the bind placeholders left in (kube-proxy IPVS mode installs).
UPSTREAM_PLACEHOLDERS = UPSTREAM.replace("bind 169.254.20.10 10.96.0.10",
                                         "bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__")

KUBESPRAY = """\
corp.example.com:53 {
    errors
    cache 30
    reload
    loop
    bind 169.254.25.10
    forward . 10.0.0.53
    prometheus :9253
}
cluster.local old.local:53 {
    errors
    cache {
        success 9984 30
        denial 9984 5
    }
    reload
    loop
    bind 169.254.25.10
    forward . 10.233.0.3 {
        force_tcp
    }
    prometheus :9253
    health 169.254.25.10:9254
}
in-addr.arpa:53 {
    errors
    cache 30
    reload
    loop
    bind 169.254.25.10
    forward . 10.233.0.3 {
        force_tcp
    }
    prometheus :9253
}
.:53 {
    errors
    cache 30
    reload
    loop
    bind 169.254.25.10
    forward . /etc/resolv.conf
    prometheus :9253
}
"""

LAYOUTS = {"upstream": UPSTREAM, "placeholders": UPSTREAM_PLACEHOLDERS, "kubespray": KUBESPRAY,
           "manifest": NODE_LOCAL_MANIFEST, "kubespray-default": NODE_LOCAL_KUBESPRAY}


def managed_lines(text: str) -> list[str]:
    """The lines from BEGIN to END marker (line-based, independent of the parser)."""
    out: list[str] = []
    inside = False
    for line in text.splitlines():
        if line.strip() == BEGIN_MARKER:
            inside = True
        if inside:
            out.append(line)
        if line.strip() == END_MARKER:
            inside = False
    return out


def strip_managed(text: str) -> str:
    out: list[str] = []
    inside = False
    for line in text.splitlines(keepends=True):
        if line.strip() == BEGIN_MARKER:
            inside = True
        if not inside:
            out.append(line)
        if line.strip() == END_MARKER:
            inside = False
    return "".join(out)


def our_blocks(text: str) -> list[tuple[str, ...]]:
    return [b.keys for b in parse(text).server_blocks
            if any(k.startswith("hairpin-proxy.invalid") for k in b.keys)]


def test_a_gateway_wildcard_domain_is_a_zone_like_an_ingress_wildcard() -> None:
    # "**.gw.example.com" (any depth) forwards its domain, as "*.apps.example.com" does: the
    # zone takes every depth under it either way.
    assert nodelocal_zones(UPSTREAM, ["**.gw.example.com", "*.apps.example.com"]) == (
        "apps.example.com", "gw.example.com")


# --- layouts -----------------------------------------------------------------------------------


def test_upstream_golden() -> None:
    after = apply_nodelocal(UPSTREAM, ["b.example.com", "*.apps.example.com", "b.example.com"])
    assert after == UPSTREAM + (
        f"{BEGIN_MARKER}\n"
        "hairpin-proxy.invalid:53 apps.example.com:53 b.example.com:53 {\n"
        "    errors\n"
        "    cache {\n"
        "            success 9984 30\n"
        "            denial 9984 5\n"
        "    }\n"
        "    reload\n"
        "    loop\n"
        "    bind 169.254.20.10 10.96.0.10\n"
        "    forward . __PILLAR__CLUSTER__DNS__ {\n"
        "            force_tcp\n"
        "    }\n"
        "    prometheus :9253\n"
        "}\n"
        f"{END_MARKER}\n")
    assert nodelocal_hosts(after) == ("apps.example.com", "b.example.com")
    assert remove_nodelocal(after) == UPSTREAM


def test_no_health_or_ready_copied() -> None:
    text = UPSTREAM.replace("    health 169.254.20.10:8080\n",
                            "    health 169.254.20.10:8080\n    ready 169.254.20.10:8181\n")
    block = "\n".join(managed_lines(apply_nodelocal(text, ["a.example.com"])))
    assert "health" not in block and "ready" not in block
    assert "prometheus :9253" in block


def test_placeholders_copied_verbatim() -> None:
    after = apply_nodelocal(UPSTREAM_PLACEHOLDERS, ["a.example.com"])
    block = managed_lines(after)
    assert "    bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__" in block
    assert "    forward . __PILLAR__CLUSTER__DNS__ {" in block
    assert remove_nodelocal(after) == UPSTREAM_PLACEHOLDERS


def test_upstream_manifest_as_shipped() -> None:
    """The manifest's Corefile with its placeholders (only the domain replaced): our block
    copies them verbatim for node-cache to fill, leaves `health <address>` out (a second
    listener on the same address would collide), and every other byte stays."""
    after = apply_nodelocal(NODE_LOCAL_MANIFEST, ["shop.example.com", "*.apps.example.com"])
    assert after.startswith(NODE_LOCAL_MANIFEST)
    assert managed_lines(after) == [
        BEGIN_MARKER,
        "hairpin-proxy.invalid:53 apps.example.com:53 shop.example.com:53 {",
        "    errors",
        "    cache {",
        "            success 9984 30",
        "            denial 9984 5",
        "    }",
        "    reload",
        "    loop",
        "    bind __PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__",
        "    forward . __PILLAR__CLUSTER__DNS__ {",
        "            force_tcp",
        "    }",
        "    prometheus :9253",
        "}",
        END_MARKER]
    assert "health __PILLAR__LOCAL__DNS__:8080" in NODE_LOCAL_MANIFEST
    assert "health" not in "\n".join(managed_lines(after))
    assert nodelocal_hosts(after) == ("apps.example.com", "shop.example.com")
    assert remove_nodelocal(after) == NODE_LOCAL_MANIFEST
    # The upstream-servers block (everything else) is not what our block copies.
    assert "__PILLAR__UPSTREAM__SERVERS__" not in "\n".join(managed_lines(after))


def test_kubespray_nodelocaldns_as_rendered() -> None:
    """kubespray's `nodelocaldns` (bind to 169.254.25.10 only, CoreDNS's ClusterIP as the
    forward target, health on the node-local address)."""
    after = apply_nodelocal(NODE_LOCAL_KUBESPRAY, ["shop.example.com"])
    block = managed_lines(after)
    assert block[1] == "hairpin-proxy.invalid:53 shop.example.com:53 {"
    assert "    bind 169.254.25.10" in block
    assert "    forward . 10.233.0.3 {" in block and "        force_tcp" in block
    assert not any("health" in line or "resolv.conf" in line for line in block)
    assert remove_nodelocal(after) == NODE_LOCAL_KUBESPRAY
    edit = NodeLocalEdit("kube-system", "nodelocaldns")
    cm = {"metadata": {"name": "nodelocaldns", "namespace": "kube-system",
                       "labels": {"addonmanager.kubernetes.io/mode": "EnsureExists"}},
          "data": {"Corefile": NODE_LOCAL_KUBESPRAY}}
    changed = edit.mutate(["shop.example.com"])(cm)
    assert changed is not None and changed["data"]["Corefile"] == after
    assert edit.current_hosts(changed) == ("shop.example.com",)


def test_kubespray_multi_zone_header_and_external_zone() -> None:
    after = apply_nodelocal(KUBESPRAY, ["corp.example.com", "app.corp.example.com",
                                        "x.old.local", "svc.cluster.local", "*.web.example.org"])
    # corp.example.com is the external block's zone: defining it twice breaks CoreDNS.
    # old.local is not the cluster domain, so x.old.local stays; svc.cluster.local goes.
    assert nodelocal_hosts(after) == ("app.corp.example.com", "web.example.org", "x.old.local")
    assert managed_lines(after) == [
        BEGIN_MARKER,
        "hairpin-proxy.invalid:53 app.corp.example.com:53 web.example.org:53 x.old.local:53 {",
        "    errors",
        "    cache {",
        "        success 9984 30",
        "        denial 9984 5",
        "    }",
        "    reload",
        "    loop",
        "    bind 169.254.25.10",
        "    forward . 10.233.0.3 {",
        "        force_tcp",
        "    }",
        "    prometheus :9253",
        "}",
        END_MARKER]
    assert after.startswith(KUBESPRAY)
    assert remove_nodelocal(after) == KUBESPRAY


def test_custom_cluster_domain() -> None:
    text = KUBESPRAY.replace("cluster.local old.local:53", "k8s.internal:53")
    after = apply_nodelocal(text, ["a.k8s.internal", "a.cluster.local"],
                            cluster_domain="K8S.internal.")
    assert nodelocal_hosts(after) == ("a.cluster.local",)
    with pytest.raises(CorefileError, match="cluster domain"):
        apply_nodelocal(text, ["a.example.com"])


# --- idempotence, removal, clashes --------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_idempotent_and_removal_byte_identical(name: str) -> None:
    text = LAYOUTS[name]
    once = apply_nodelocal(text, ["a.example.com", "*.b.example.com"])
    assert apply_nodelocal(once, ["*.b.example.com", "a.example.com"]) == once
    assert remove_nodelocal(once) == text
    assert apply_nodelocal(once, []) == text
    assert remove_nodelocal(text) == text
    changed = apply_nodelocal(once, ["c.example.com"])
    assert nodelocal_hosts(changed) == ("c.example.com",)
    assert len(our_blocks(changed)) == 1
    assert remove_nodelocal(changed) == text


def test_zone_clashes_dropped() -> None:
    hosts = ["in-addr.arpa", "IP6.ARPA", "cluster.local", "a.svc.cluster.local",
             "hairpin-proxy.invalid", "ok.example.com"]
    assert nodelocal_zones(UPSTREAM, hosts) == ("ok.example.com",)
    after = apply_nodelocal(UPSTREAM, hosts)
    assert nodelocal_hosts(after) == ("ok.example.com",)
    # Every zone:port is defined once.
    keys = [(a.zone, a.effective_port) for b in parse(after).server_blocks for a in b.addresses]
    assert len(keys) == len(set(keys))


def test_clash_on_another_key_of_a_multi_key_block_and_dns_scheme() -> None:
    text = UPSTREAM + "dns://a.example.com:53 b.example.com {\n    forward . 10.0.0.1\n}\n"
    after = apply_nodelocal(text, ["a.example.com", "b.example.com", "c.example.com"])
    assert nodelocal_hosts(after) == ("c.example.com",)
    # The same zone on another port does not clash.
    text = UPSTREAM + "a.example.com:5353 {\n    forward . 10.0.0.1\n}\n"
    assert nodelocal_hosts(apply_nodelocal(text, ["a.example.com"])) == ("a.example.com",)


def test_only_clashing_hosts_means_no_block() -> None:
    assert apply_nodelocal(UPSTREAM, ["x.cluster.local", "in-addr.arpa"]) == UPSTREAM
    once = apply_nodelocal(UPSTREAM, ["a.example.com"])
    assert apply_nodelocal(once, ["x.cluster.local"]) == UPSTREAM


def test_wildcard_becomes_its_domain_and_dedupes_with_exact() -> None:
    after = apply_nodelocal(UPSTREAM, ["*.apps.example.com", "apps.example.com",
                                       "*.Other.Example.com"])
    assert nodelocal_hosts(after) == ("apps.example.com", "other.example.com")
    header = next(line for line in managed_lines(after) if line.endswith("{"))
    assert header == f"{OUR_KEY} apps.example.com:53 other.example.com:53 {{"


def test_names_unfit_for_a_key_are_left_out() -> None:
    after = apply_nodelocal(UPSTREAM, ["a:b.example.com", "dns://c.example.com", "ok.com"])
    assert nodelocal_hosts(after) == ("ok.com",)


# --- recognition without comments ----------------------------------------------------------------


def test_stripped_and_reindented_block_still_recognised() -> None:
    once = apply_nodelocal(UPSTREAM, ["a.example.com", "b.example.com"])
    # A tool dropped the comments, re-indented with tabs, reordered the keys and moved the
    # block to the front.
    block = "\n".join(managed_lines(once)[1:-1])
    block = block.replace("    ", "\t").replace(
        f"{OUR_KEY} a.example.com:53 b.example.com:53",
        f"b.example.com:53 {OUR_KEY} a.example.com:53")
    mangled = block + "\n" + UPSTREAM
    assert nodelocal_hosts(mangled) == ("a.example.com", "b.example.com")
    again = apply_nodelocal(mangled, ["a.example.com", "c.example.com"])
    assert len(our_blocks(again)) == 1
    assert our_blocks(again)[0][0] == OUR_KEY
    assert again.count(BEGIN_MARKER) == 1 and again.count(END_MARKER) == 1
    assert nodelocal_hosts(again) == ("a.example.com", "c.example.com")
    # It is replaced where it stood, and goes entirely.
    assert again.startswith(BEGIN_MARKER + "\n")
    assert remove_nodelocal(again) == UPSTREAM
    assert remove_nodelocal(mangled) == UPSTREAM


def test_two_blocks_of_ours_become_one() -> None:
    once = apply_nodelocal(UPSTREAM, ["a.example.com"])
    twice = once + "\n".join(managed_lines(once)[1:-1]).replace("a.example", "z.example") + "\n"
    assert len(our_blocks(twice)) == 2
    after = apply_nodelocal(twice, ["b.example.com"])
    assert len(our_blocks(after)) == 1
    assert nodelocal_hosts(after) == ("b.example.com",)
    assert remove_nodelocal(after) == UPSTREAM


@pytest.mark.parametrize("drop", [BEGIN_MARKER, END_MARKER])
def test_marker_on_one_side_only(drop: str) -> None:
    once = apply_nodelocal(UPSTREAM, ["a.example.com"])
    damaged = once.replace(drop + "\n", "")
    again = apply_nodelocal(damaged, ["a.example.com"])
    assert again == once
    assert remove_nodelocal(damaged) == UPSTREAM


def test_stray_marker_without_block_is_dropped_and_others_comments_kept() -> None:
    text = UPSTREAM + f"# a comment of someone else\n{END_MARKER}\n"
    assert remove_nodelocal(text) == UPSTREAM + "# a comment of someone else\n"
    # A marker-looking comment inside someone else's block is theirs.
    inside = UPSTREAM.replace("    reload\n", f"    reload\n    {BEGIN_MARKER}\n", 1)
    assert remove_nodelocal(inside) == inside


def test_markers_are_not_what_identifies_the_block() -> None:
    # Marker comments around a block that is not ours: the block stays.
    text = UPSTREAM + f"{BEGIN_MARKER}\nfoo.example.com:53 {{\n    forward . 1.1.1.1\n}}\n" \
        f"{END_MARKER}\n"
    after = remove_nodelocal(text)
    assert "foo.example.com:53 {" in after
    assert nodelocal_hosts(text) == ()


# --- line endings, indentation, end of file ------------------------------------------------------


def test_crlf() -> None:
    text = UPSTREAM.replace("\n", "\r\n")
    after = apply_nodelocal(text, ["a.example.com"])
    assert after.count("\n") == after.count("\r\n")
    assert after.endswith(f"}}\r\n{END_MARKER}\r\n")
    assert nodelocal_hosts(after) == ("a.example.com",)
    assert apply_nodelocal(after, ["a.example.com"]) == after
    assert remove_nodelocal(after) == text


def test_tab_indented_file_gets_tabs() -> None:
    text = KUBESPRAY.replace("    ", "\t")
    after = apply_nodelocal(text, ["a.example.com"])
    assert "\n\terrors\n\tcache {\n\t\tsuccess 9984 30\n" in after[len(text):]
    assert remove_nodelocal(after) == text


def test_no_final_line_ending() -> None:
    text = UPSTREAM.rstrip("\n")
    after = apply_nodelocal(text, ["a.example.com"])
    assert after.startswith(text + "\n" + BEGIN_MARKER)
    assert after.endswith(END_MARKER)
    assert apply_nodelocal(after, ["a.example.com"]) == after
    assert apply_nodelocal(after, ["b.example.com"]).endswith(END_MARKER)
    assert remove_nodelocal(after) == text


def test_trailing_comment_and_blank_lines_kept() -> None:
    text = UPSTREAM + "\n# trailing note\n\n"
    after = apply_nodelocal(text, ["a.example.com"])
    assert after.startswith(text)
    assert remove_nodelocal(after) == text


# --- refusals -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "match"), [
    (UPSTREAM + "x.example.com:53 {\n    errors\n", "never closed"),
    (".:53 {\n    forward . 8.8.8.8\n}\n", "no server block for the cluster domain"),
    (UPSTREAM.replace("cluster.local:53", "__PILLAR__DNS__DOMAIN__:53"),
     "no server block for the cluster domain"),
    (UPSTREAM.replace("cluster.local:53", "cluster.local:5353"),
     "no server block for the cluster domain"),
    (UPSTREAM.replace("    forward . __PILLAR__CLUSTER__DNS__ {\n            force_tcp\n    }\n"
                      "    prometheus :9253\n    health", "    health", 1), "forward"),
    (UPSTREAM + "cluster.local:53 {\n    bind 10.0.0.1\n    forward . 10.0.0.2\n}\n",
     "ambiguous"),
    (UPSTREAM.replace(".:53 {", "example.net:53 {") + "extra.example.com:53\nforward . 1.1.1.1\n",
     "no braces"),
])
def test_refusals(text: str, match: str) -> None:
    with pytest.raises(CorefileError, match=match):
        apply_nodelocal(text, ["a.example.com"])


def test_refusals_of_hosts_and_domain() -> None:
    with pytest.raises(CorefileError):
        apply_nodelocal(UPSTREAM, ["bad host"])
    with pytest.raises(CorefileError):
        apply_nodelocal(UPSTREAM, ["a.*.example.com"])
    with pytest.raises(TypeError):
        apply_nodelocal(UPSTREAM, "a.example.com")
    with pytest.raises(CorefileError, match="cluster domain"):
        apply_nodelocal(UPSTREAM, ["a.example.com"], cluster_domain="bad domain")


def test_refuses_our_block_sharing_a_line() -> None:
    once = apply_nodelocal(UPSTREAM, ["a.example.com"])
    shared = once.replace("}\n" + END_MARKER, "} other.example.com:53 {\n}\n" + END_MARKER)
    with pytest.raises(CorefileError, match="shares its line"):
        apply_nodelocal(shared, ["a.example.com"])


def test_refuses_over_configmap_limit() -> None:
    hosts = [f"h{i:06d}.{'x' * 40}.example.com" for i in range(MAX_CONFIGMAP_BYTES // 60)]
    with pytest.raises(CorefileError, match="ConfigMap limit"):
        apply_nodelocal(UPSTREAM, hosts)


def test_nodelocal_hosts_refuses_unparseable() -> None:
    with pytest.raises(CorefileError):
        nodelocal_hosts("a.example.com:53 {\n")
    assert nodelocal_hosts(UPSTREAM) == ()


# --- properties -----------------------------------------------------------------------------------

_ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"
LABEL = st.one_of(st.sampled_from(_ALNUM), st.builds(
    lambda a, mid, z: a + mid + z,
    st.sampled_from(_ALNUM), st.text(_ALNUM + "-", max_size=6), st.sampled_from(_ALNUM)))
NAME = st.one_of(
    st.lists(LABEL, min_size=1, max_size=4).map(".".join),
    st.sampled_from(["in-addr.arpa", "ip6.arpa", "cluster.local", "a.cluster.local",
                     "corp.example.com", "old.local", "hairpin-proxy.invalid", "example.com"]))
HOST = st.one_of(NAME, NAME.map(lambda n: "*." + n))
HOSTS = st.lists(HOST, max_size=8)
PROPERTY = settings(max_examples=60, deadline=None)


def expected_zones(text: str, hosts: list[str]) -> tuple[str, ...]:
    """The oracle: keys of other blocks read with a regex, not the module's parser."""
    taken = set()
    for header in re.findall(r"(?m)^(\S[^{\n]*)\{", strip_managed(text)):
        for key in header.split():
            zone, _, port = key.removeprefix("dns://").partition(":")
            if port in ("", "53"):
                taken.add(zone.lower().rstrip("."))
    zones = {h.removeprefix("*.") for h in hosts}
    skipped = taken | {"hairpin-proxy.invalid", "cluster.local"}
    return tuple(sorted(z for z in zones
                        if z not in skipped and not z.endswith(".cluster.local")))


@PROPERTY
@given(name=st.sampled_from(sorted(LAYOUTS)), first=HOSTS, second=HOSTS,
       crlf=st.booleans())
def test_properties(name: str, first: list[str], second: list[str], crlf: bool) -> None:
    text = LAYOUTS[name].replace("\n", "\r\n") if crlf else LAYOUTS[name]
    once = apply_nodelocal(text, first)
    zones = expected_zones(text, first)
    assert nodelocal_hosts(once) == zones
    assert apply_nodelocal(once, first) == once
    assert remove_nodelocal(once) == text
    assert strip_managed(once) == text
    assert len(our_blocks(once)) == (1 if zones else 0)
    # From one host set to another: the same as applying the second to the original.
    assert apply_nodelocal(once, second) == apply_nodelocal(text, second)
    assert nodelocal_hosts(apply_nodelocal(once, second)) == expected_zones(text, second)


@PROPERTY
@given(first=HOSTS, second=HOSTS)
def test_properties_with_our_block_moved_to_the_front(first: list[str], second: list[str]
                                                      ) -> None:
    once = apply_nodelocal(UPSTREAM, first)
    block = "".join(line + "\n" for line in managed_lines(once))
    moved = block + UPSTREAM
    again = apply_nodelocal(moved, second)
    assert remove_nodelocal(again) == UPSTREAM
    assert nodelocal_hosts(again) == expected_zones(UPSTREAM, second)
    assert apply_nodelocal(again, second) == again


# --- the edit -------------------------------------------------------------------------------------


def configmap(text: str, mode: str | None = "Reconcile") -> dict[str, Any]:
    labels = {"addonmanager.kubernetes.io/mode": mode} if mode else {}
    return {"metadata": {"name": "node-local-dns", "namespace": "kube-system",
                         "resourceVersion": "7", "labels": labels},
            "data": {"Corefile": text, "other": "kept"}}


def test_edit_mutate_removal_and_no_op() -> None:
    edit = NodeLocalEdit("kube-system", "node-local-dns")
    assert edit.where == "kube-system/node-local-dns[Corefile]"
    cm = configmap(UPSTREAM)
    assert edit.current_hosts(cm) == ()
    written = edit.mutate(["*.apps.example.com", "a.example.com"])(cm)
    assert written is not None
    assert written["data"]["other"] == "kept"
    assert written["data"]["Corefile"] == apply_nodelocal(UPSTREAM, ["a.example.com",
                                                                      "*.apps.example.com"])
    assert edit.current_hosts(written) == ("a.example.com", "apps.example.com")
    # Nothing to change: no write.
    assert edit.mutate(["a.example.com", "*.apps.example.com"])(configmap(
        written["data"]["Corefile"])) is None
    assert edit.mutate([])(configmap(UPSTREAM)) is None
    assert edit.removal()(configmap(UPSTREAM)) is None
    removed = edit.removal()(configmap(written["data"]["Corefile"]))
    assert removed is not None and removed["data"]["Corefile"] == UPSTREAM


def test_edit_cluster_domain_and_key() -> None:
    text = KUBESPRAY.replace("cluster.local old.local:53", "k8s.internal:53")
    edit = NodeLocalEdit("kube-system", "nodelocaldns", key="Corefile",
                         cluster_domain="k8s.internal")
    out = edit.mutate(["a.k8s.internal", "b.example.com"])(configmap(text, "EnsureExists"))
    assert out is not None
    assert nodelocal_hosts(out["data"]["Corefile"]) == ("b.example.com",)


def test_edit_errors() -> None:
    edit = NodeLocalEdit("kube-system", "node-local-dns")
    with pytest.raises(EditError, match="not found"):
        edit.mutate(["a.example.com"])(None)
    with pytest.raises(EditError, match="no key"):
        edit.current_hosts({"data": {}})
    with pytest.raises(CorefileError):
        edit.mutate(["a.example.com"])(configmap(".:53 {\n    forward . 8.8.8.8\n}\n"))


def test_edit_addon_manager_and_candidates() -> None:
    """The label alone stops nothing: only a running addon manager (a pod in kube-system, or
    GKE's hidden one) makes mode Reconcile mean that every edit is reverted."""
    labelled = configmap(UPSTREAM)
    assert NodeLocalEdit.labelled_reconcile(labelled)
    assert not NodeLocalEdit.labelled_reconcile(configmap(UPSTREAM, "EnsureExists"))
    assert not NodeLocalEdit.labelled_reconcile({"metadata": {}})
    assert not NodeLocalEdit.labelled_reconcile(None)
    pod = {"metadata": {"name": "kube-addon-manager-master-1"}, "status": {"phase": "Running"}}
    ended = {"metadata": {"name": "kube-addon-manager-old"}, "status": {"phase": "Failed"}}
    kubeadm = {"gitVersion": "v1.31.2"}
    gke = {"gitVersion": "v1.30.5-gke.1014001"}
    assert reconciler_of(labelled, [], kubeadm) == ""
    assert reconciler_of(labelled, [ended], None) == ""
    assert "kube-system/kube-addon-manager-master-1" in reconciler_of(labelled, [ended, pod],
                                                                      kubeadm)
    assert "GKE" in reconciler_of(labelled, [], gke)
    for unlabelled in (configmap(UPSTREAM, "EnsureExists"), configmap(UPSTREAM, None)):
        assert reconciler_of(unlabelled, [pod], gke) == ""
    assert CANDIDATES == (("kube-system", "node-local-dns"), ("kube-system", "nodelocaldns"))
