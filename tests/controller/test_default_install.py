"""The default install does the obvious thing: ingress-nginx, found by discovery, is the very
Service the proxy's --target-server names, so its hosts take the main ``hairpin-proxy``
Service on the first pass (no slot, no settle wait), and ``render`` prints the same Corefile.
A second data plane gets a slot, and its hosts' wait is told: a log line, the first sync line,
/readyz.

The controller runs as the CLI runs, against the fake API server (tests/fakeapi).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hairpin_proxy import corefile
from hairpin_proxy.targets import table
from hairpin_proxy.targets.slots import slot_of_service_name
from tests.controller.conftest import COREFILE, NAMESPACE, PROXY_IP, Controller, corefile_text
from tests.fakeapi.fixtures import configmap, ingress, service
from tests.fakeapi.server import FakeApiServer
from tests.waiting import wait_until

Start = Callable[..., Controller]
SHOP = ("www.shop.example", "a.shop.example")
INTERNAL = "api.internal.example"


def ingress_nginx(api: FakeApiServer, *, namespace: str = "ingress-nginx",
                  release: str = "ingress-nginx", cls: str = "nginx", default: bool = True,
                  lb: str = "203.0.113.10",
                  service_ports: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """An ingress-nginx release as its Helm chart installs it, with use-proxy-protocol on:
    its IngressClass, controller Service and ConfigMap. Returns what it created."""
    labels = {"app.kubernetes.io/name": "ingress-nginx",
              "app.kubernetes.io/component": "controller",
              "app.kubernetes.io/instance": release}
    meta: dict[str, Any] = {"name": cls, "labels": labels}
    if default:
        meta["annotations"] = {"ingressclass.kubernetes.io/is-default-class": "true"}
    objects = [
        {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": meta,
         "spec": {"controller": "k8s.io/ingress-nginx"}},
        service(namespace, "ingress-nginx-controller", type="LoadBalancer", labels=labels,
                lb_ingress=[{"ip": lb}], ports=service_ports),
        configmap(namespace, "ingress-nginx-controller", {"use-proxy-protocol": "true"}),
    ]
    for obj in objects:
        api.create(obj)
    return objects


def answers(api: FakeApiServer) -> dict[str, corefile.Answers]:
    return corefile.managed_groups(corefile_text(api))


def slot_services(api: FakeApiServer) -> list[str]:
    return [s["metadata"]["name"] for s in api.list("Service", NAMESPACE)
            if slot_of_service_name(s["metadata"]["name"]) is not None]


def table_keys(api: FakeApiServer) -> set[str]:
    cm = api.get("ConfigMap", NAMESPACE, "hairpin-proxy-targets")
    if cm is None or "targets.json" not in (cm.get("data") or {}):
        return set()
    return {e.key for e in table.decode(cm["data"]["targets.json"])}


def records(ctl: Controller, msg: str) -> list[dict[str, object]]:
    return [r for r in ctl.records() if r.get("msg") == msg]


def render(tmp_path: Path, objects: list[dict[str, Any]]) -> str:
    """``hairpin-proxy render`` of the kubeadm Corefile with ``objects`` (as a GitOps user
    would keep them in files) and the main Service's ClusterIP."""
    inputs = tmp_path / "manifests.json"
    inputs.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    core = tmp_path / "Corefile"
    core.write_text(COREFILE)
    proc = subprocess.run([sys.executable, "-m", "hairpin_proxy", "render", "--corefile",
                           str(core), "--ingress", str(inputs), "--proxy-ip", PROXY_IP],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_default_install_redirects_on_the_first_pass_through_the_main_service(
        cluster: FakeApiServer, start: Start, tmp_path: Path) -> None:
    objects = ingress_nginx(cluster)
    shop = ingress("shop", "web", tls_hosts=SHOP, class_name="nginx")
    cluster.create(shop)
    # The default --target-settle (90 s): nothing here may wait for it.
    ctl = start()
    ctl.wait_ready()
    got = answers(cluster)
    assert {h: got[h].ipv4 for h in SHOP} == {h: (PROXY_IP,) for h in SHOP}
    (first,) = records(ctl, "first sync done")
    assert (first["hosts"], first["pending"]) == (2, 0)
    assert slot_services(cluster) == [] and table_keys(cluster) == set()
    (told,) = [r for r in records(ctl, "target") if r["target"] == "ingressclass/nginx"]
    assert told["level"] == "info"
    assert str(told["state"]).startswith("served by the main proxy Service, no slot: its "
                                         "data plane ingress-nginx/ingress-nginx-controller")
    # What a GitOps user renders from the same objects is what the controller wrote.
    assert render(tmp_path, [*objects, shop]) == corefile_text(cluster)
    code, body = ctl.get("/readyz")
    assert (code, body.strip()) == (200, "ok (leader)")


def test_a_second_data_plane_waits_for_its_slot_and_says_so(
        cluster: FakeApiServer, start: Start) -> None:
    ingress_nginx(cluster)
    ingress_nginx(cluster, namespace="ingress-internal", release="internal", cls="internal",
                  default=False, lb="203.0.113.20")
    cluster.create(ingress("shop", "web", tls_hosts=SHOP, class_name="nginx"))
    cluster.create(ingress("shop", "api", tls_hosts=[INTERNAL], class_name="internal"))
    ctl = start("--target-settle", "600")
    ctl.wait_ready()
    # The default install's hosts do not wait for the second data plane's slot.
    assert set(answers(cluster)) == set(SHOP)
    assert slot_services(cluster) == ["hairpin-proxy-t1"]
    assert table_keys(cluster) == {"ingressclass/internal"}
    (waits,) = records(ctl, "hosts wait for their new slot to settle (--target-settle)")
    assert (waits["target"], waits["slot"], waits["hosts"]) == ("ingressclass/internal", 1, 1)
    rules_at = str(waits["rules_at"])
    (first,) = records(ctl, "first sync done")
    assert (first["hosts"], first["pending"]) == (2, 1)
    code, body = ctl.get("/readyz")
    assert code == 200
    assert body.strip() == ("ok (leader); 1 host pending (slot settling: ingressclass/internal "
                            f"1 host rules at {rules_at})")
    # Told once, not on every pass: another change makes another pass.
    cluster.create(ingress("shop", "more", tls_hosts=["b.shop.example"], class_name="nginx"))
    wait_until(lambda: "b.shop.example" in answers(cluster), what="the new host written")
    assert len(records(ctl, "hosts wait for their new slot to settle (--target-settle)")) == 1


def test_a_proxy_relaying_elsewhere_gives_ingress_nginx_a_slot_of_its_own(
        cluster: FakeApiServer, start: Start) -> None:
    # k3s's overlay: the proxy's --target-server is Traefik, ingress-nginx is a second plane.
    ingress_nginx(cluster)
    cluster.create(ingress("shop", "web", tls_hosts=SHOP, class_name="nginx"))
    ctl = start("--target-settle", "0", "--target-server", "traefik.kube-system.svc.cluster.local")
    ctl.wait_ready()
    wait_until(lambda: set(answers(cluster)) == set(SHOP), what="hosts on their slot")
    t1 = cluster.get("Service", NAMESPACE, "hairpin-proxy-t1")
    assert t1 is not None
    assert answers(cluster)[SHOP[0]].ipv4 == tuple(t1["spec"]["clusterIPs"])
    assert table_keys(cluster) == {"ingressclass/nginx"}
