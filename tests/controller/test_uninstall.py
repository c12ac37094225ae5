"""Uninstall by deleting the one-file install, every object at once and in any order: the rules
are withdrawn and nothing is left behind, with RBAC, service-account tokens, finalizers, the
garbage collector and the namespace controller as the real cluster has them (tests/fakeapi:
authz.py, lifecycle.py).

The controllers run as real processes with their ServiceAccount's token; each has a Pod object
(owned by the Deployment, held by a kubelet finalizer) and a small kubelet below sends SIGTERM
when the Pod is deleted and lets the Pod go once the process has exited.
"""

from __future__ import annotations

import functools
import os
import random
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from hairpin_proxy import corefile
from hairpin_proxy.controller import holds
from hairpin_proxy.edits.configmap import MANAGED_BY
from hairpin_proxy.targets import netguard
from tests.controller.conftest import COREFILE, NAMESPACE, Controller, corefile_text
from tests.controller.test_netguard import POLICY, foreign, ingress_nginx, node
from tests.corefiles import BY_NAME
from tests.deploy.rendering import DEPLOY, find, kubectl_or_skip, render
from tests.fakeapi.fixtures import configmap, corefile_configmap, endpoint_slice, ingress
from tests.fakeapi.server import FakeApiServer
from tests.fakeapi.status import ApiError
from tests.waiting import PATIENCE, wait_until

Obj = dict[str, Any]
MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "hairpin-proxy.yaml"
KUBELET = "test.hairpin-proxy.io/kubelet"
REPLICA_SET = "hairpin-proxy-controller-5d4f8c9b7"
FLAGS = ("--uninstall-timeout", "10")
UNINSTALLED = "uninstalled: every rule withdrawn and the held objects let go; exiting"


def owner_ref(api_version: str, kind: str, obj: Obj) -> Obj:
    return {"apiVersion": api_version, "kind": kind, "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"]}


def manifest() -> list[Obj]:
    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]


@dataclass
class Install:
    api: FakeApiServer
    work: Path
    objects: list[tuple[str, str | None, str]] = field(default_factory=list)
    pods: dict[str, Controller] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    kubelet_thread: threading.Thread | None = None
    # False: a deleted Pod's SIGTERM never comes (a kubelet that is slow to act on it).
    sigterm: bool = True

    def start(self, *flags: str) -> Controller:
        """One controller replica: a Pod of the Deployment's ReplicaSet, and its process (its
        HOSTNAME the Pod's name, as in a pod)."""
        rs = self.api.get("ReplicaSet", NAMESPACE, REPLICA_SET)
        if rs is None:
            deploy = self.api.get("Deployment", NAMESPACE, "hairpin-proxy-controller")
            assert deploy is not None
            rs = self.api.create({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {
                "name": REPLICA_SET, "namespace": NAMESPACE, "ownerReferences": [
                    owner_ref("apps/v1", "Deployment", deploy)]},
                "spec": deploy["spec"]})
        name = f"{REPLICA_SET}-{len(self.pods)}"
        self.api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, "namespace": NAMESPACE, "finalizers": [KUBELET],
            "ownerReferences": [owner_ref("apps/v1", "ReplicaSet", rs)]},
            "spec": {"serviceAccountName": holds.SERVICE_ACCOUNT,
                     "containers": [{"name": "controller", "image": "hairpin-proxy"}]}})
        token = self.api.service_account_token(NAMESPACE, holds.SERVICE_ACCOUNT)
        config = self.api.write_kubeconfig(self.work / f"{name}.kubeconfig", token=token,
                                           namespace=NAMESPACE)
        before = os.environ.get("HOSTNAME")
        os.environ["HOSTNAME"] = name
        try:
            ctl = Controller(self.api, config, self.work / f"{name}.log", *FLAGS, *flags)
        finally:
            if before is None:
                del os.environ["HOSTNAME"]
            else:
                os.environ["HOSTNAME"] = before
        self.pods[name] = ctl
        return ctl

    def kubelet(self) -> None:
        """SIGTERM on a Pod's deletion; the Pod goes once its process has exited."""
        signalled: set[str] = set()
        while not self._stop.wait(0.05):
            for name, ctl in list(self.pods.items()):
                pod = self.api.get("Pod", NAMESPACE, name)
                if pod is None or not pod["metadata"].get("deletionTimestamp"):
                    continue
                if self.sigterm and name not in signalled and ctl.proc.poll() is None:
                    signalled.add(name)
                    ctl.proc.send_signal(signal.SIGTERM)
                if ctl.proc.poll() is not None:
                    self.api.patch("Pod", NAMESPACE, name, {"metadata": {"finalizers": None}})

    def delete_all(self, order: list[tuple[str, str | None, str]]) -> None:
        """`kubectl delete -f`: one DELETE after the other, nothing waited for; one that finds
        its object already gone (the namespace's deletion took it) is passed over, as kubectl
        reports it and goes on."""
        for kind, ns, name in order:
            try:
                self.api.delete(kind, ns, name)
            except ApiError as exc:
                if exc.code != 404:
                    raise

    def leftovers(self) -> list[str]:
        """What is still there of the install, of what the controller made, of its holds."""
        left = [f"{k} {ns}/{n}" for k, ns, n in self.objects if self.api.get(k, ns, n)]
        for kind, ns, name in (("RoleBinding", "kube-system", holds.WITHDRAWAL),
                               ("Role", NAMESPACE, holds.RELEASE),
                               ("RoleBinding", NAMESPACE, holds.RELEASE),
                               ("Namespace", None, NAMESPACE)):
            if self.api.get(kind, ns, name) is not None:
                left.append(f"{kind} {ns}/{name}")
        left += [f"Pod {n}" for n in self.pods if self.api.get("Pod", NAMESPACE, n)]
        # The data-plane guard's policies, wherever they are.
        left += [f"NetworkPolicy {p['metadata']['namespace']}/{p['metadata']['name']}"
                 for p in self.api.list("NetworkPolicy") if netguard.is_ours(p)]
        if self.api.get("ReplicaSet", NAMESPACE, REPLICA_SET) is not None:
            left.append(f"ReplicaSet {REPLICA_SET}")
        return left


@pytest.fixture
def install(fake_api: FakeApiServer, tmp_path: Path) -> Iterator[Install]:
    """deploy/hairpin-proxy.yaml applied to the fake (every kind it serves), the proxy ready,
    a kubeadm CoreDNS, one Ingress; the controller-manager's collectors running."""
    api = fake_api
    inst = Install(api, tmp_path)
    for doc in manifest():
        try:
            api.create(doc)
        except KeyError:
            continue  # a kind the fake does not serve (PodDisruptionBudget)
        md = doc["metadata"]
        inst.objects.append((doc["kind"], md.get("namespace"), md["name"]))
    api.create(endpoint_slice(NAMESPACE, "hairpin-proxy"))
    api.create(corefile_configmap(COREFILE))
    api.create(ingress("shop", "web", tls_hosts=["a.example.com", "b.example.com"]))
    api.start_controllers()
    kubelet = threading.Thread(target=inst.kubelet, daemon=True)
    kubelet.start()
    inst.kubelet_thread = kubelet
    yield inst
    inst._stop.set()
    kubelet.join(5)
    for ctl in inst.pods.values():
        ctl.stop()


def managed(api: FakeApiServer) -> tuple[str, ...]:
    return corefile.managed_hosts(corefile_text(api))


def running(inst: Install, replicas: int = 1, *flags: str,
            hosts: tuple[str, ...] = ("a.example.com", "b.example.com")) -> list[Controller]:
    ctls = [inst.start(*flags) for _ in range(replicas)]
    for ctl in ctls:
        try:
            ctl.wait_ready()
        except AssertionError as exc:
            raise AssertionError(f"{ctl.get('/readyz')}\n{ctl.log()[-3000:]}") from exc
    wait_until(lambda: managed(inst.api) == hosts, what="rules written")
    # Held before the first rule: the Role and the account, each with its own binding.
    for kind, ns, name in (("Role", "kube-system", holds.COREDNS_ROLE),
                           ("ServiceAccount", NAMESPACE, holds.SERVICE_ACCOUNT)):
        obj = inst.api.get(kind, ns, name)
        assert obj is not None and holds.FINALIZER in obj["metadata"]["finalizers"]
    assert inst.api.get("RoleBinding", "kube-system", holds.WITHDRAWAL) is not None
    assert inst.api.get("RoleBinding", NAMESPACE, holds.RELEASE) is not None
    return ctls


def gone(inst: Install) -> None:
    last: list[list[str]] = []

    def nothing_left() -> bool:
        last[:] = [inst.leftovers()]
        return not last[0]
    try:
        wait_until(nothing_left, timeout=40, what="everything gone")
    except AssertionError as exc:
        logs = "\n".join(f"exit={c.proc.poll()}\n{c.log()[-3000:]}" for c in inst.pods.values())
        alive = inst.kubelet_thread is not None and inst.kubelet_thread.is_alive()
        raise AssertionError(f"left: {last} kubelet alive: {alive}\n{logs}") from exc


def uninstalled(inst: Install, ctls: list[Controller]) -> None:
    """The rules are gone, the Corefile is as before, nothing is left, every process ended
    cleanly."""
    gone(inst)
    assert corefile_text(inst.api) == COREFILE
    for ctl in ctls:
        assert ctl.proc.wait(PATIENCE) == 0, ctl.log()
        assert "could not withdraw" not in ctl.log()


def shuffled(seed: int, objs: list[Any]) -> list[Any]:
    return random.Random(seed).sample(objs, len(objs))


ORDERS: dict[str, Callable[[list[tuple[str, str | None, str]]], list[Any]]] = {
    "file order": lambda objs: objs,
    "reverse": lambda objs: objs[::-1],
    "RBAC and accounts first": lambda objs: sorted(
        objs, key=lambda o: o[0] not in ("ServiceAccount", "Role", "RoleBinding",
                                         "ClusterRole", "ClusterRoleBinding")),
    "namespace last": lambda objs: sorted(objs, key=lambda o: o[0] == "Namespace"),
    "deployments first": lambda objs: sorted(objs, key=lambda o: o[0] != "Deployment"),
    **{f"shuffled {seed}": functools.partial(shuffled, seed) for seed in (1, 2, 3)},
}


@pytest.mark.parametrize("order", list(ORDERS))
def test_deleting_everything_at_once_withdraws_and_leaves_nothing(install: Install,
                                                                  order: str) -> None:
    ctls = running(install)
    install.delete_all(ORDERS[order](list(install.objects)))
    uninstalled(install, ctls)


def test_two_replicas_withdraw_once_and_leave_nothing(install: Install) -> None:
    ctls = running(install, replicas=2)
    install.delete_all(ORDERS["RBAC and accounts first"](list(install.objects)))
    uninstalled(install, ctls)


def test_an_uninstall_in_the_middle_of_a_pass(install: Install) -> None:
    ctls = running(install)
    # The next rules write (for a new Ingress) is answered after everything was deleted.
    install.api.before_next_request(
        lambda: install.delete_all(ORDERS["shuffled 1"](list(install.objects))),
        method="PUT", path_re=r"/namespaces/kube-system/configmaps/coredns$")
    install.api.create(ingress("shop", "more", tls_hosts=["c.example.com"]))
    uninstalled(install, ctls)


def test_helm_order_with_the_pods_stopped_before_the_rest_goes(install: Install) -> None:
    """`helm uninstall` deletes Deployments first and RBAC and ServiceAccounts after: SIGTERM
    can come before anything else has gone. The Deployment's ReplicaSet is gone by then."""
    ctls = running(install, replicas=2)
    install.api.delete("Deployment", NAMESPACE, "hairpin-proxy-controller")
    # Told by nothing but their ReplicaSet's absence, both withdraw before the rest goes.
    wait_until(lambda: all("Deployment, ServiceAccount or CoreDNS Role is being deleted: "
                           "withdrawing every rule" in c.log() for c in ctls), what="uninstall")
    wait_until(lambda: managed(install.api) == (), what="rules withdrawn")
    helm = [o for o in install.objects if o[0] != "Namespace"]
    install.delete_all(helm)
    # The namespace stays (helm keeps it); everything of the release and the holds go.
    install.objects = helm
    wait_until(lambda: [o for o in install.leftovers() if not o.startswith("Namespace")] == [],
               timeout=40, what="the release gone")
    wait_until(lambda: install.api.get("RoleBinding", NAMESPACE, holds.RELEASE) is None,
               what="the release binding collected")
    assert corefile_text(install.api) == COREFILE
    for ctl in ctls:
        assert ctl.proc.wait(PATIENCE) == 0


def watches_open(api: FakeApiServer, path: str, n: int) -> bool:
    """Whether ``n`` watches of ``path`` were answered (opened, not refused)."""
    return len([r for r in api.requests("GET", path, watch=True) if r.status == 200]) >= n


def test_once_it_has_let_go_the_controller_exits_without_a_sigterm(install: Install) -> None:
    """`helm uninstall --no-hooks` keeps the namespace and deletes the release at once; the
    pods' SIGTERM may come late (or, here, never). Once the rules are withdrawn and the Role
    and the ServiceAccount let go (its last request), each replica exits 0 by itself and says
    why, rather than retry its Lease, watches and discovery against refusals."""
    install.sigterm = False
    ctls = running(install, replicas=2)
    # Each replica learns of the uninstall from its watches of the held objects: a watch
    # opened after our ServiceAccount is gone is refused, and tells nothing.
    for path in (f"/namespaces/{NAMESPACE}/serviceaccounts", "/namespaces/kube-system/roles"):
        wait_until(functools.partial(watches_open, install.api, path, 2),
                   what=f"both replicas watch {path}")
    helm = [o for o in install.objects if o[0] != "Namespace"]
    install.delete_all(helm)
    for ctl in ctls:
        assert ctl.proc.wait(PATIENCE) == 0, ctl.log()
        (done,) = [r for r in ctl.records() if r.get("msg") == UNINSTALLED]
        assert done["level"] == "info"
    assert corefile_text(install.api) == COREFILE
    install.objects = helm
    wait_until(lambda: [o for o in install.leftovers() if not o.startswith("Namespace")] == [],
               timeout=40, what="the release gone")


def test_held_objects_seen_gone_but_never_deleting_are_the_uninstall(install: Install,
                                                                     tmp_path: Path) -> None:
    """Another replica let go of the Role and the ServiceAccount before this one's watches
    showed them being deleted: they show the finalizer go, then the objects. That is the
    uninstall too: this replica withdraws every rule and exits. (Run with an administrator's
    kubeconfig, so that it may still write once the account is gone.)"""
    (first,) = running(install)
    admin = install.api.write_kubeconfig(tmp_path / "admin.kubeconfig", namespace=NAMESPACE)
    ctl = Controller(install.api, admin, tmp_path / "admin.log", *FLAGS)
    install.pods["outside the cluster"] = ctl
    ctl.wait_ready()
    install.api.delete("Pod", NAMESPACE, f"{REPLICA_SET}-0")  # the first one scaled away
    assert first.proc.wait(PATIENCE) == 0
    # Leading, it has held them itself before its first pass wrote: it has seen them held.
    wait_until(lambda: "first sync done" in ctl.log(), what="the new leader's first pass")
    install.api.stall_watches()
    for kind, ns, name in (("Role", "kube-system", holds.COREDNS_ROLE),
                           ("ServiceAccount", NAMESPACE, holds.SERVICE_ACCOUNT)):
        install.api.patch(kind, ns, name, {"metadata": {"finalizers": None}})
        install.api.delete(kind, ns, name)
    install.api.unstall_watches()
    assert ctl.proc.wait(PATIENCE) == 0, ctl.log()
    assert "our ServiceAccount and CoreDNS Role are gone: withdrawing every rule" in ctl.log()
    assert UNINSTALLED in ctl.log()
    assert corefile_text(install.api) == COREFILE


def test_scaling_to_zero_is_no_uninstall(install: Install) -> None:
    (ctl,) = running(install)
    install.api.delete("Pod", NAMESPACE, f"{REPLICA_SET}-0")
    assert ctl.proc.wait(PATIENCE) == 0
    assert managed(install.api) == ("a.example.com", "b.example.com")
    role = install.api.get("Role", "kube-system", holds.COREDNS_ROLE)
    assert role is not None and holds.FINALIZER in role["metadata"]["finalizers"]


def test_the_namespace_alone_is_an_uninstall(install: Install) -> None:
    ctls = running(install)
    install.api.delete("Namespace", None, NAMESPACE)
    # The namespace's content goes (pods first); the cluster-wide objects stay installed.
    wait_until(lambda: install.api.get("Namespace", None, NAMESPACE) is None, timeout=40,
               what="namespace gone")
    assert corefile_text(install.api) == COREFILE
    role = install.api.get("Role", "kube-system", holds.COREDNS_ROLE)
    assert role is not None and not role["metadata"].get("finalizers")
    assert install.api.get("RoleBinding", "kube-system", holds.WITHDRAWAL) is not None
    assert ctls[0].proc.wait(PATIENCE) == 0


def test_a_sigterm_that_cannot_read_whether_it_is_an_uninstall_lets_the_watches_tell(
        install: Install) -> None:
    """The uninstall took our RBAC before it marked anything we can still read, then our pod
    got SIGTERM: the reads on SIGTERM are refused, so the controller cannot tell a rollout
    from an uninstall. It waits for the watches it opened before (an API server does not
    authorize an open watch again), which then tell the namespace is going: the rules are
    withdrawn all the same."""
    (ctl,) = running(install)
    rbac = [o for o in install.objects
            if o[0] in ("ClusterRole", "ClusterRoleBinding")
            or (o[0] in ("Role", "RoleBinding") and o[1] == NAMESPACE)]
    assert rbac
    install.delete_all(rbac)
    install.api.delete("Pod", NAMESPACE, f"{REPLICA_SET}-0")
    wait_until(lambda: "could not read whether this is an uninstall" in ctl.log(),
               what="the controller watching for an uninstall")
    install.delete_all(list(install.objects))
    uninstalled(install, [ctl])


def test_with_the_controller_gone_the_holds_wait_for_cleanup(install: Install,
                                                             tmp_path: Path) -> None:
    (ctl,) = running(install)
    # Scaled to zero before the uninstall: the pod goes, the rules stay.
    install.api.delete("Pod", NAMESPACE, f"{REPLICA_SET}-0")
    assert ctl.proc.wait(PATIENCE) == 0
    install.delete_all(list(install.objects))
    wait_until(lambda: install.api.get("Deployment", NAMESPACE, "hairpin-proxy") is None,
               what="the proxy gone")
    # What the withdrawal needs is held: the rules can still be withdrawn...
    for kind, ns, name in (("Role", "kube-system", holds.COREDNS_ROLE),
                           ("ServiceAccount", NAMESPACE, holds.SERVICE_ACCOUNT)):
        obj = install.api.get(kind, ns, name)
        assert obj is not None and obj["metadata"].get("deletionTimestamp")
    assert managed(install.api) == ("a.example.com", "b.example.com")
    # ... and `hairpin-proxy cleanup` with an administrator's kubeconfig does it.
    admin = install.api.write_kubeconfig(tmp_path / "admin.kubeconfig", namespace=NAMESPACE)
    cleanup = Controller(install.api, admin, tmp_path / "cleanup.log", command="cleanup")
    assert cleanup.proc.wait(PATIENCE) == 0, cleanup.log()
    gone(install)
    assert corefile_text(install.api) == COREFILE


def test_a_withdrawal_that_cannot_be_written_lets_go_in_time_with_an_event(
        install: Install) -> None:
    (ctl,) = running(install)
    cm = install.api.get("ConfigMap", "kube-system", "coredns")
    assert cm is not None
    # Someone's edit leaves the Corefile unparsable: nothing can be written any more.
    broken = corefile_text(install.api) + "}\n"
    cm["data"]["Corefile"] = broken
    install.api.update(cm)
    install.delete_all(list(install.objects))
    gone(install)
    assert corefile_text(install.api) == broken
    (event,) = [e for e in install.api.list("Event", "kube-system")
                if e.get("reason") == "RulesNotWithdrawn"]
    assert event["type"] == "Warning" and "hairpin-proxy cleanup" in event["message"]
    assert event["involvedObject"]["name"] == "coredns"
    assert ctl.proc.wait(PATIENCE) == 0


def test_the_leader_killed_the_standby_withdraws_and_lets_go_after_its_lease(
        install: Install) -> None:
    ctls = running(install, replicas=2)
    leader = next(c for c in ctls if c.metric("hairpin_controller_leader") == 1)
    standby = next(c for c in ctls if c is not leader)
    leader.proc.kill()  # no SIGTERM, no Lease released
    leader.proc.wait(PATIENCE)
    install.delete_all(ORDERS["file order"](list(install.objects)))
    # The standby withdraws at once, and lets go only once the dead leader's Lease has lapsed
    # (--lease-duration 3): until then that leader might still be writing rules.
    wait_until(lambda: managed(install.api) == (), what="rules withdrawn")
    gone(install)
    assert corefile_text(install.api) == COREFILE
    assert standby.proc.wait(PATIENCE) == 0


def test_without_the_grants_to_hold_the_rules_are_still_written(install: Install) -> None:
    # An RBAC from before this release: the kube-system Role cannot be held.
    role = install.api.get("Role", "kube-system", holds.COREDNS_ROLE)
    assert role is not None
    role["rules"] = [r for r in role["rules"]
                     if "roles" not in r["resources"] and "rolebindings" not in r["resources"]]
    install.api.update(role)
    ctl = install.start()
    ctl.wait_ready()
    wait_until(lambda: managed(install.api) == ("a.example.com", "b.example.com"),
               what="rules written")
    wait_until(lambda: "cannot hold the objects the withdrawal needs" in ctl.log(),
               what="warning")
    assert ctl.log().count("cannot hold the objects") == 1
    held = install.api.get("Role", "kube-system", holds.COREDNS_ROLE)
    assert held is not None and not held["metadata"].get("finalizers")


# --------------------------------------------------------------------------- the guard

GUARD_RBAC = MANIFEST.parent / "components" / "guard-data-planes" / "rbac.yaml"
GUARD_ROLE = ("ClusterRole", None, netguard.OWNER_ROLE)


def guard_policy(api: FakeApiServer) -> Obj | None:
    return api.get(*POLICY)


def with_guard(inst: Install, *, owner_grant: bool = True) -> Obj:
    """The guard-data-planes component's RBAC installed too (``owner_grant=False``: as 0.2.0
    shipped it, without the read of its own ClusterRole), an ingress-nginx that expects
    PROXY, a Node with its pod CIDR, and a policy of someone else's beside ours; the
    Ingress is ingress-nginx's. Returns that other policy."""
    api = inst.api
    for doc in yaml.safe_load_all(GUARD_RBAC.read_text()):
        if not doc:
            continue
        if not owner_grant and doc["kind"] == "ClusterRole":
            doc["rules"] = [r for r in doc["rules"] if "clusterroles" not in r["resources"]]
        api.create(doc)
        inst.objects.append((doc["kind"], None, doc["metadata"]["name"]))
    api.delete("Ingress", "shop", "web")
    ingress_nginx(api)
    api.create(node("n1", "10.244.0.0/24"))
    theirs = foreign("default-deny", {"app.kubernetes.io/managed-by": "hairpin-proxy"})
    return api.create(theirs)


def guarded(inst: Install, replicas: int = 1) -> list[Controller]:
    ctls = running(inst, replicas, "--guard-data-planes", hosts=("shop.example.com",))
    wait_until(lambda: guard_policy(inst.api) is not None, what="guard created")
    return ctls


def owned(api: FakeApiServer) -> bool:
    role = api.get(*GUARD_ROLE)
    policy = guard_policy(api)
    return (role is not None and policy is not None
            and policy["metadata"].get("ownerReferences") == [netguard.owner_reference(role)])


def untouched(api: FakeApiServer, theirs: Obj) -> None:
    now = api.get("NetworkPolicy", theirs["metadata"]["namespace"], theirs["metadata"]["name"])
    assert now is not None and now["metadata"]["resourceVersion"] == theirs["metadata"][
        "resourceVersion"]


GUARD_ORDERS: dict[str, Callable[[list[tuple[str, str | None, str]]], list[Any]]] = {
    # The guard's grant goes before anything else: the controller can no longer delete its
    # policies; their owner is gone, so the garbage collector does.
    "guard RBAC first": lambda objs: sorted(
        objs, key=lambda o: o[2] != netguard.OWNER_ROLE),
    "file order": ORDERS["file order"],
    "reverse": ORDERS["reverse"],
    "RBAC and accounts first": ORDERS["RBAC and accounts first"],
    "shuffled 2": ORDERS["shuffled 2"],
}


@pytest.mark.parametrize("order", list(GUARD_ORDERS))
def test_the_guards_policies_go_with_every_uninstall_order(install: Install,
                                                          order: str) -> None:
    theirs = with_guard(install)
    ctls = guarded(install)
    wait_until(lambda: owned(install.api), what="owned by the guard's ClusterRole")
    install.delete_all(GUARD_ORDERS[order](list(install.objects)))
    uninstalled(install, ctls)
    untouched(install.api, theirs)


@pytest.mark.parametrize("hook_args", [("--no-guard-policies", "--guard-policies"),
                                       ("--no-guard-policies",)],
                         ids=["the chart's hook", "a hook that leaves them"])
def test_helm_uninstall_the_hook_then_the_release(install: Install, tmp_path: Path,
                                                  hook_args: tuple[str, ...]) -> None:
    """The pre-delete hook stops the controller and runs cleanup with the chart's arguments
    (the cleanup Job's --no-guard-policies, then --guard-policies with the guard on): the
    policies go with it. Without it (an older chart, the hook turned off) helm then deletes
    the release, the guard's ClusterRole with it, and the collector removes them."""
    theirs = with_guard(install)
    (ctl,) = guarded(install)
    wait_until(lambda: owned(install.api), what="owned")
    install.api.delete("Pod", NAMESPACE, f"{REPLICA_SET}-0")  # scaled to zero
    assert ctl.proc.wait(PATIENCE) == 0
    admin = install.api.write_kubeconfig(tmp_path / "admin.kubeconfig", namespace=NAMESPACE)
    hook = Controller(install.api, admin, tmp_path / "hook.log", *hook_args, command="cleanup")
    assert hook.proc.wait(PATIENCE) == 0, hook.log()
    assert corefile_text(install.api) == COREFILE
    assert (guard_policy(install.api) is None) == (hook_args[-1] == "--guard-policies")
    helm = [o for o in install.objects if o[0] != "Namespace"]
    install.delete_all(helm)
    install.objects = helm
    wait_until(lambda: [o for o in install.leftovers() if not o.startswith("Namespace")] == [],
               timeout=40, what="the release gone, the policies with it")
    untouched(install.api, theirs)


def test_with_the_controller_gone_the_collector_removes_them(install: Install,
                                                            tmp_path: Path) -> None:
    theirs = with_guard(install)
    (ctl,) = guarded(install)
    wait_until(lambda: owned(install.api), what="owned")
    install.api.delete("Pod", NAMESPACE, f"{REPLICA_SET}-0")
    assert ctl.proc.wait(PATIENCE) == 0
    install.delete_all(list(install.objects))
    # No controller runs: the garbage collector alone removes them.
    wait_until(lambda: guard_policy(install.api) is None, what="collected")
    admin = install.api.write_kubeconfig(tmp_path / "admin.kubeconfig", namespace=NAMESPACE)
    cleanup = Controller(install.api, admin, tmp_path / "cleanup.log", command="cleanup")
    assert cleanup.proc.wait(PATIENCE) == 0, cleanup.log()
    gone(install)
    untouched(install.api, theirs)


def test_unowned_policies_are_removed_by_an_administrators_cleanup(install: Install,
                                                                   tmp_path: Path) -> None:
    """A guard RBAC that cannot read its ClusterRole (as 0.2.0 shipped it): the policies
    carry no owner, which is told once. With the controller gone before the uninstall,
    nothing removes them but `hairpin-proxy cleanup` with an administrator's kubeconfig,
    which deletes ours only."""
    theirs = with_guard(install, owner_grant=False)
    (ctl,) = guarded(install)
    policy = guard_policy(install.api)
    assert policy is not None and "ownerReferences" not in policy["metadata"]
    wait_until(lambda: "data-plane guard policies made without an owner" in ctl.log(),
               what="told")
    install.api.delete("Pod", NAMESPACE, f"{REPLICA_SET}-0")
    assert ctl.proc.wait(PATIENCE) == 0
    assert ctl.log().count("made without an owner") == 1
    install.delete_all(list(install.objects))
    wait_until(lambda: install.api.get("Deployment", NAMESPACE, "hairpin-proxy") is None,
               what="the proxy gone")
    passes = install.api.controller_passes
    wait_until(lambda: install.api.controller_passes >= passes + 2, what="collector passes")
    assert guard_policy(install.api) is not None
    admin = install.api.write_kubeconfig(tmp_path / "admin.kubeconfig", namespace=NAMESPACE)
    cleanup = Controller(install.api, admin, tmp_path / "cleanup.log", command="cleanup")
    assert cleanup.proc.wait(PATIENCE) == 0, cleanup.log()
    assert "deleted a data-plane guard NetworkPolicy" in cleanup.log()
    gone(install)
    untouched(install.api, theirs)


def test_turning_the_guard_off_removes_its_policies(install: Install) -> None:
    """`helm upgrade --set guardDataPlanes.enabled=false` (or the component removed and its
    ClusterRole and binding deleted, docs/forged-proxy-header.md): the controller restarts
    without the flag, the guard's ClusterRole goes, and so do its policies; the rules stay."""
    theirs = with_guard(install)
    (ctl,) = guarded(install)
    wait_until(lambda: owned(install.api), what="owned")
    install.api.delete("Pod", NAMESPACE, f"{REPLICA_SET}-0")
    assert ctl.proc.wait(PATIENCE) == 0
    again = install.start()
    again.wait_ready()
    for kind in ("ClusterRoleBinding", "ClusterRole"):
        install.api.delete(kind, None, netguard.OWNER_ROLE)
    wait_until(lambda: guard_policy(install.api) is None, what="collected")
    assert managed(install.api) == ("shop.example.com",)
    untouched(install.api, theirs)
    assert again.proc.poll() is None


def test_the_guards_cluster_role_deleted_under_a_running_controller(install: Install) -> None:
    """Its ClusterRole deleted while the controller runs with the flag: the policies go and
    none is written again (the grant went with it); re-created, the guard comes back owned
    by the new one."""
    with_guard(install)
    (ctl,) = guarded(install)
    wait_until(lambda: owned(install.api), what="owned")
    role = install.api.get(*GUARD_ROLE)
    assert role is not None
    install.api.delete(*GUARD_ROLE)
    wait_until(lambda: guard_policy(install.api) is None, what="removed")
    wait_until(lambda: "the guard's ClusterRole is gone; its policies go too" in ctl.log(),
               what="told")
    del role["metadata"]["uid"], role["metadata"]["resourceVersion"]
    install.api.create(role)
    wait_until(lambda: owned(install.api), timeout=60, what="back, owned by the new one")


# --------------------------------------------------------------------------- import mode

IMPORT = ("kube-system", "coredns-custom")
IMPORT_KEY = "hairpin-proxy.override"
K3S_COREFILE = BY_NAME["k3s"].text


def import_cm(api: FakeApiServer) -> Obj | None:
    return api.get("ConfigMap", *IMPORT)


def import_hosts(api: FakeApiServer) -> tuple[str, ...]:
    """The hosts our key holds rules for (read as k3s's Corefile imports it)."""
    text = str(((import_cm(api) or {}).get("data") or {}).get(IMPORT_KEY, ""))
    return corefile.managed_hosts(".:53 {\n" + text + "}\n")


def import_mode(inst: Install, *, grant_delete: bool = True) -> None:
    """As deploy/overlays/k3s installs it: the coredns-import component's kube-system Role
    (``grant_delete=False``: without `delete` on coredns-custom) and k3s's Corefile, which
    imports coredns-custom's *.override keys."""
    k3s = render(kubectl_or_skip(), DEPLOY / "overlays" / "k3s")
    wanted = find(k3s, "Role", holds.COREDNS_ROLE, "kube-system")["rules"]
    if not grant_delete:
        wanted = [{**r, "verbs": [v for v in r["verbs"] if v != "delete"]} for r in wanted]
    role = inst.api.get("Role", "kube-system", holds.COREDNS_ROLE)
    assert role is not None
    role["rules"] = wanted
    inst.api.update(role)
    cm = inst.api.get("ConfigMap", "kube-system", "coredns")
    assert cm is not None
    cm["data"]["Corefile"] = K3S_COREFILE
    inst.api.update(cm)


def running_import(inst: Install, replicas: int = 1) -> list[Controller]:
    ctls = [inst.start("--mode=coredns-import") for _ in range(replicas)]
    for ctl in ctls:
        ctl.wait_ready()
    wait_until(lambda: import_hosts(inst.api) == ("a.example.com", "b.example.com"),
               what="rules written into coredns-custom")
    for kind, ns, name in (("Role", "kube-system", holds.COREDNS_ROLE),
                           ("ServiceAccount", NAMESPACE, holds.SERVICE_ACCOUNT)):
        obj = inst.api.get(kind, ns, name)
        assert obj is not None and holds.FINALIZER in obj["metadata"]["finalizers"]
    return ctls


def import_uninstalled(inst: Install, ctls: list[Controller]) -> None:
    """Everything of the install gone (the held objects let go), every replica exited 0, the
    Corefile untouched."""
    gone(inst)
    for ctl in ctls:
        assert ctl.proc.wait(PATIENCE) == 0, ctl.log()
        assert "could not withdraw" not in ctl.log()
    assert corefile_text(inst.api) == K3S_COREFILE


@pytest.mark.parametrize("replicas", [1, 2])
def test_import_mode_the_configmap_it_made_goes_with_the_uninstall(install: Install,
                                                                   replicas: int) -> None:
    """k3s mounts coredns-custom as optional and does not create it: the controller made it,
    labelled as ours. The uninstall leaves the cluster as it found it: without it."""
    import_mode(install)
    ctls = running_import(install, replicas)
    made = import_cm(install.api)
    assert made is not None
    assert made["metadata"]["labels"].items() >= MANAGED_BY.items()
    install.delete_all(ORDERS["RBAC and accounts first"](list(install.objects)))
    import_uninstalled(install, ctls)
    assert import_cm(install.api) is None
    for ctl in ctls:
        assert "could not delete the import ConfigMap" not in ctl.log()


OTHER = {"other.override": "log\n"}


@pytest.mark.parametrize(("labels", "data"), [
    (None, OTHER),
    (MANAGED_BY, OTHER),
    (None, {}),
], ids=["someone else's, with a key of theirs", "ours, with a key someone added",
        "someone else's, empty"])
def test_import_mode_a_configmap_with_anything_else_stays(
        install: Install, labels: dict[str, str] | None, data: dict[str, str]) -> None:
    """A coredns-custom that was there before us, or that holds another key, is never
    deleted: the uninstall removes our key alone."""
    import_mode(install)
    install.api.create(configmap(*IMPORT, data, labels=labels))
    (ctl,) = running_import(install)
    install.delete_all(list(install.objects))
    import_uninstalled(install, [ctl])
    left = import_cm(install.api)
    assert left is not None
    assert (left.get("data") or {}) == data
    assert "deleted the import ConfigMap" not in ctl.log()


def test_import_mode_a_refused_delete_still_lets_go_and_exits(install: Install) -> None:
    """A Role without `delete` on coredns-custom (an edited RBAC): the refusal is told, and
    the held objects are let go all the same; the ConfigMap stays, emptied, for cleanup."""
    import_mode(install, grant_delete=False)
    (ctl,) = running_import(install)
    install.delete_all(list(install.objects))
    import_uninstalled(install, [ctl])
    (told,) = [r for r in ctl.records()
               if str(r.get("msg", "")).startswith("could not delete the import ConfigMap")]
    assert told["level"] == "warning"
    left = import_cm(install.api)
    assert left is not None and not left.get("data")


def test_import_mode_a_key_added_as_it_is_deleted_keeps_it(install: Install) -> None:
    """The ConfigMap is deleted only as it was read: a key someone adds between that read
    and the DELETE keeps it (the precondition fails), and the uninstall ends all the same."""
    import_mode(install)
    (ctl,) = running_import(install)

    def add_a_key() -> None:
        cm = import_cm(install.api)
        assert cm is not None
        cm["data"] = {**(cm.get("data") or {}), **OTHER}
        install.api.update(cm)
    install.api.before_next_request(add_a_key, method="DELETE",
                                    path_re=r"/namespaces/kube-system/configmaps/coredns-custom$")
    install.delete_all(list(install.objects))
    import_uninstalled(install, [ctl])
    left = import_cm(install.api)
    assert left is not None and left.get("data") == OTHER
    assert "changed since it was read; left as it is" in ctl.log()
