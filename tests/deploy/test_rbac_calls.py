"""RBAC against the code: every API call the controller and `cleanup` really make is allowed by
the manifests that install them, and every grant of the controller's Roles is used.

The real CLI runs against the fake API with every feature on, with the arguments of the
rendered Deployment / cleanup Job. Each request the fake server received is turned into the
RBAC request the API server's authorizer would see (as its RequestInfo does: GET on a name is
get, on a collection list, or watch with watch=true; POST create; PUT update; PATCH patch;
DELETE delete; list/watch with fieldSelector=metadata.name=X are for the name X).

Runs, and the render whose RBAC applies to each (as test_manifests' CLEANUP_FOR pairs them):
  default   controller --leader-elect --nudge-coredns, node-local-dns present, proxy Service
            and EndpointSlice, Ingresses (one rejected: an Event), a CoreDNS pod
            → components/nudge-coredns (the base plus the nudge Role)
  cleanup   cleanup after it                                         → base
  import    controller --leader-elect --mode=coredns-import (kubespray's nodelocaldns present)
            then its cleanup                                         → overlays/k3s
  guard     controller --guard-data-planes: an ingress-nginx expecting PROXY (named target
            ports), Nodes with pod CIDRs, the guard's ClusterRole (the policies' owner); its
            guard created, updated, deleted, created again
                                                              → components/guard-data-planes
  cleanup-guard  cleanup after it, without --no-guard-policies: the policy deleted
                                                              → components/guard-data-planes
"""

from __future__ import annotations

import copy
import os
import socket
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hairpin_proxy import corefile
from tests.controller.conftest import COREFILE, NAMESPACE, NODE_LOCAL, PROXY_IP, Controller
from tests.corefiles import BY_NAME
from tests.deploy.rendering import Doc, find
from tests.deploy.test_manifests import allowed, pod_spec
from tests.fakeapi.crds import (
    ENVOY_CLIENT_TRAFFIC_POLICY,
    NGINX_PROXY,
    TRAEFIK_INGRESSROUTE,
    TRAEFIK_INGRESSROUTE_LEGACY,
)
from tests.fakeapi.fixtures import (
    configmap,
    corefile_configmap,
    endpoint_slice,
    gateway,
    gateway_class,
    ingress,
    route,
    service,
)
from tests.fakeapi.server import FakeApiServer, RequestRecord
from tests.waiting import PATIENCE, wait_until

SA = "hairpin-proxy-controller"


@dataclass(frozen=True, order=True)
class Access:
    """One RBAC request: namespace ("" when cluster-scoped), group, resource, verb, name."""

    namespace: str
    group: str
    resource: str
    verb: str
    name: str = ""

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        group = f".{self.group}" if self.group else ""
        return f"{self.verb} {where}{self.resource}{group}{'/' + self.name if self.name else ''}"


@dataclass(frozen=True, order=True)
class Grant:
    """One (resource, verb, name) of a rule, with the namespace its binding confines it to."""

    scope: str  # "" for a ClusterRoleBinding
    group: str
    resource: str
    verb: str
    name: str = ""  # "" when the rule has no resourceNames

    def covers(self, a: Access) -> bool:
        return ((not self.scope or self.scope == a.namespace) and self.group == a.group
                and self.resource == a.resource and self.verb == a.verb
                and (not self.name or self.name == a.name))

    def __str__(self) -> str:
        return str(Access(self.scope, self.group, self.resource, self.verb, self.name))


def _name_from_field_selector(selector: str) -> str:
    """X for exactly "metadata.name=X" (or ==): what RBAC's resourceNames match for list and
    watch; anything else selects no single name."""
    terms = [t for t in selector.split(",") if t]
    if len(terms) != 1:
        return ""
    field, sep, value = terms[0].replace("==", "=").partition("=")
    return value if sep and field == "metadata.name" else ""


def access_of(r: RequestRecord) -> Access | None:
    """The RBAC request for a recorded API request; None for a non-resource URL."""
    parts = [p for p in r.path.split("/") if p]
    if len(parts) >= 3 and parts[0] == "api":
        group, rest = "", parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return None
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    resource, name = rest[0], rest[1] if len(rest) > 1 else ""
    if len(rest) > 2:
        resource += "/" + rest[2]
    if resource == "namespaces" and name:
        namespace = name  # as the API server's RequestInfo has it
    if r.method == "GET":
        verb = "get" if name else ("watch" if r.watch else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete" if name else "deletecollection"}[r.method]
    if verb in ("list", "watch"):
        name = _name_from_field_selector(r.query.get("fieldSelector", ""))
    return Access(namespace, group, resource, verb, name)


def is_allowed(docs: list[Doc], a: Access) -> bool:
    return allowed(docs, SA, a.namespace, a.group, a.resource, a.verb, a.name or None)


def grants(docs: list[Doc], sa: str = SA) -> set[Grant]:
    """Every (resource, verb, name) the Roles and ClusterRoles bound to the account grant."""
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in docs
             if d["kind"] in ("Role", "ClusterRole")}
    out: set[Grant] = set()
    for b in docs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding") or not any(
                s["kind"] == "ServiceAccount" and s["name"] == sa
                and s.get("namespace") == "hairpin-proxy" for s in b["subjects"]):
            continue
        scope = b["metadata"].get("namespace") or ""
        ref = b["roleRef"]
        role = roles[(ref["kind"], scope or None if ref["kind"] == "Role" else None,
                      ref["name"])]
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        for name in rule.get("resourceNames") or [""]:
                            out.add(Grant(scope, group, resource, verb, name))
    return out


def unexercised(docs: list[Doc], calls: Iterable[Access]) -> set[Grant]:
    seen = list(calls)
    return {g for g in grants(docs) if not any(g.covers(a) for a in seen)}


# Grants no run here exercises, each with the reason. Kept exact: a grant no code uses goes
# from deploy/ instead of being listed here.
DOCTOR_ONLY = "read by `hairpin-proxy doctor` run with the controller's service account " \
              "(docs/doctor.md, Permissions), not by the controller or cleanup"
EXCEPTIONS: dict[tuple[str, Grant], str] = {
    **{(render, Grant("", "", "services", "get")): DOCTOR_ONLY
       for render in ("base", "components/nudge-coredns", "overlays/k3s",
                      "components/guard-data-planes")},
    **{(render, Grant("kube-system", "", "configmaps", "get", "coredns")): DOCTOR_ONLY
       for render in ("overlays/k3s",)},
    **{(render, Grant("hairpin-proxy", "apps", "deployments", "get",
                      "hairpin-proxy-controller")): DOCTOR_ONLY
       for render in ("base", "components/nudge-coredns", "overlays/k3s",
                      "components/guard-data-planes")},
    **{(render, Grant("kube-system", "", "events", "create")):
       "the Warning Event of an uninstall that could not withdraw the rules in time "
       "(tests/controller/test_uninstall.py), or of a Corefile someone left unparsable"
       for render in ("base", "components/nudge-coredns", "overlays/k3s",
                      "components/guard-data-planes")},
}


# --------------------------------------------------------------------------- the runs


@dataclass
class Run:
    label: str
    render: str  # the manifests whose RBAC applies
    calls: list[Access]
    non_resource: list[str]


def _args(docs: list[Doc], kind: str, name: str) -> list[str]:
    args: list[str] = pod_spec(find(docs, kind, name))["containers"][0]["args"]
    return args[1:]  # without the subcommand, which Controller puts first


def _publishing(renders: dict[str, list[Doc]], docs: list[Doc]) -> list[str]:
    """The controller's args in ``docs`` with the flag the etchosts component adds: the
    published hosts, which the same grants cover with or without the node agent, are then
    read and written too."""
    (flag,) = [a for a in _args(renders["components/etchosts"], "Deployment",
                                "hairpin-proxy-controller")
               if a.startswith("--publish-configmap")]
    return [*_args(docs, "Deployment", "hairpin-proxy-controller"), flag]


def _wait(what: str, predicate: Callable[[], object], timeout: float = 30.0) -> None:
    wait_until(predicate, timeout, what)


def _split(records: list[RequestRecord]) -> tuple[list[Access], list[str]]:
    calls, other = [], []
    for r in records:
        a = access_of(r)
        if a is None:
            other.append(r.path)
        else:
            calls.append(a)
    return calls, other


def _cluster(api: FakeApiServer, corefile_text: str) -> None:
    """What tests/controller's `cluster` fixture sets up, plus a CoreDNS pod."""
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    api.create(service(NAMESPACE, "hairpin-proxy", cluster_ips=[PROXY_IP]))
    api.create(endpoint_slice(NAMESPACE, "hairpin-proxy"))
    api.create(corefile_configmap(corefile_text))
    # What the controller holds for the uninstall (controller/holds.py).
    api.create({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": SA, "namespace": NAMESPACE}})
    api.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "hairpin-proxy-controller-coredns",
                             "namespace": "kube-system"}, "rules": []})
    # The controller's own pod (its HOSTNAME), of a ReplicaSet: read on SIGTERM.
    rs = api.create({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                     "metadata": {"name": "hairpin-proxy-controller-5d4f8c9b7",
                                  "namespace": NAMESPACE}, "spec": {}})
    api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": os.environ.get("HOSTNAME") or socket.gethostname(), "namespace": NAMESPACE,
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                             "name": rs["metadata"]["name"], "uid": rs["metadata"]["uid"]}]},
        "spec": {"containers": [{"name": "controller", "image": "hairpin-proxy"}]}})
    api.create({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "coredns-5d78c9869d-abcde", "namespace": "kube-system",
                             "labels": {"k8s-app": "kube-dns"}},
                "spec": {"containers": [{"name": "coredns", "image": "coredns:1.11.1"}]}})


def _extras(api: FakeApiServer) -> None:
    # NodeLocal DNSCache under both names the controller knows (upstream's, kubespray's), so
    # that each grant is exercised; and two Ingresses, one rejected with a HostRejected Event
    # (a zone the Corefile serves itself).
    # Upstream's is labelled mode Reconcile as its manifest ships it: the controller looks for
    # an addon manager (none runs here) before it edits it.
    api.create(configmap("kube-system", "node-local-dns", {"Corefile": NODE_LOCAL},
                         labels={"addonmanager.kubernetes.io/mode": "Reconcile"}))
    api.create(configmap("kube-system", "nodelocaldns", {"Corefile": NODE_LOCAL}))
    api.create(ingress("shop", "shop", tls_hosts=["shop.example.com"]))
    api.create(ingress("shop", "internal", tls_hosts=["web.cluster.local"]))


ENVOY = "gateway.envoyproxy.io/gatewayclass-controller"


def _gateway_api(api: FakeApiServer) -> None:
    """Every CRD the controller reads (ListenerSet is standard from 1.5 on) and an Envoy
    Gateway route: its target gets a slot and a proxy Service."""
    api.install_gateway_api("1.6", "experimental")
    api.install(ENVOY_CLIENT_TRAFFIC_POLICY, NGINX_PROXY)
    # Read where the IngressRoute source is on (the k3s overlay): both of Traefik's groups.
    api.install(TRAEFIK_INGRESSROUTE, TRAEFIK_INGRESSROUTE_LEGACY)
    api.create(gateway_class("eg", ENVOY))
    api.create(gateway("web", "public", "eg", listeners=[
        {"name": "http", "port": 80, "protocol": "HTTP",
         "allowedRoutes": {"namespaces": {"from": "All"}}}]))
    api.create(service("envoy-gateway-system", "envoy-web-public-1a2b3c4d",
                       labels={"gateway.envoyproxy.io/owning-gateway-name": "public",
                               "gateway.envoyproxy.io/owning-gateway-namespace": "web"}))
    api.create({"apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "ClientTrafficPolicy",
                "metadata": {"namespace": "web", "name": "proxy-protocol"},
                "spec": {"targetRefs": [{"group": "gateway.networking.k8s.io",
                                         "kind": "Gateway", "name": "public"}],
                         "proxyProtocol": {}}})
    obj = route("HTTPRoute", "shop", "gw", hostnames=["gw.example.com"], parent="public",
                parent_namespace="web")
    obj["status"] = {"parents": [{
        "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                      "name": "public", "namespace": "web"},
        "controllerName": ENVOY,
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                        "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]}
    api.create(obj)


def _target_service_lifecycle(api: FakeApiServer) -> None:
    """Create, update and delete of a per-target proxy Service."""
    slot = ("Service", NAMESPACE, "hairpin-proxy-t1")
    _wait("target Service created", lambda: api.get(*slot) is not None)
    svc = api.get("Service", NAMESPACE, "hairpin-proxy")
    assert svc is not None
    svc["spec"]["selector"] = {"app.kubernetes.io/component": "proxy"}
    api.update(svc)
    _wait("target Service updated", lambda: ((api.get(*slot) or {}).get("spec") or {})
          .get("selector") == {"app.kubernetes.io/component": "proxy"})
    api.delete("Gateway", "web", "public")
    _wait("target Service deleted", lambda: api.get(*slot) is None)


def _host_in(api: FakeApiServer, namespace: str, name: str, key: str, host: str) -> bool:
    """Whether the host's first label is in the key (the Corefile has it as a regex)."""
    cm = api.get("ConfigMap", namespace, name)
    return cm is not None and host.partition(".")[0] in str((cm.get("data") or {}).get(key, ""))


def _default_run(renders: dict[str, list[Doc]], work: Path) -> list[Run]:
    nudge = renders["components/nudge-coredns"]
    with FakeApiServer(bookmark_interval=0.5) as api:
        _cluster(api, COREFILE)
        _extras(api)
        # Before the start: the rendered controller looks for CRDs once a minute.
        _gateway_api(api)
        # Conflicted writes re-read the ConfigMap: the `get` of each written name.
        for path in (r"/configmaps/coredns$", r"/configmaps/node-local-dns$",
                     r"/configmaps/hairpin-proxy-hosts$", r"/configmaps/hairpin-proxy-targets$"):
            api.conflict_next_put(path)
        kubeconfig = api.write_kubeconfig(work / "kubeconfig-default")
        ctl = Controller(api, kubeconfig, work / "default.log", *_publishing(renders, nudge))
        try:
            ctl.wait_ready()
            _wait("first rules", lambda: _host_in(api, "kube-system", "node-local-dns",
                                                  "Corefile", "shop.example.com"))
            # A second change: the published hosts (created on the first pass) are updated.
            api.create(ingress("shop", "cart", tls_hosts=["cart.example.com"]))
            _wait("second rules", lambda: all(
                _host_in(api, ns, name, key, "cart.example.com") for ns, name, key in (
                    ("kube-system", "coredns", "Corefile"),
                    ("kube-system", "node-local-dns", "Corefile"),
                    (NAMESPACE, "hairpin-proxy-hosts", "hosts"))))
            _wait("conflicts", lambda: all(
                any(r.status == 409 for r in api.requests("PUT", path)) for path in (
                    r"/configmaps/coredns$", r"/configmaps/node-local-dns$",
                    r"/configmaps/hairpin-proxy-hosts$")))
            _wait("nudge", lambda: "hairpin-proxy.io/corefile-version" in (
                (api.get("Pod", "kube-system", "coredns-5d78c9869d-abcde") or {})
                .get("metadata", {}).get("annotations") or {}))
            _wait("event", lambda: api.list("Event", "shop"))
            _target_service_lifecycle(api)
            _wait("a lease renewal", lambda: api.requests("PUT", r"/leases/"))
        finally:
            assert ctl.stop() == 0, ctl.log()
        controller_calls = _split(api.requests())
        api.clear_requests()
        cleanup = Controller(api, kubeconfig, work / "cleanup.log",
                             *_args(renders["cleanup/default"], "Job", "hairpin-proxy-cleanup"),
                             command="cleanup")
        assert cleanup.proc.wait(PATIENCE) == 0, cleanup.log()
        cleanup.stop()
        coredns = api.get("ConfigMap", "kube-system", "coredns")
        assert coredns is not None
        assert corefile.managed_hosts(coredns["data"]["Corefile"]) == ()
        assert api.get("ConfigMap", NAMESPACE, "hairpin-proxy-hosts") is None
        cleanup_calls = _split(api.requests())
    return [Run("default", "components/nudge-coredns", *controller_calls),
            Run("cleanup", "base", *cleanup_calls)]


def _import_run(renders: dict[str, list[Doc]], work: Path) -> list[Run]:
    k3s = renders["overlays/k3s"]
    with FakeApiServer(bookmark_interval=0.5) as api:
        _cluster(api, BY_NAME["k3s"].text)
        _extras(api)
        _gateway_api(api)
        for path in (r"/configmaps/coredns-custom$", r"/configmaps/nodelocaldns$",
                     r"/configmaps/hairpin-proxy-hosts$", r"/configmaps/hairpin-proxy-targets$"):
            api.conflict_next_put(path)
        kubeconfig = api.write_kubeconfig(work / "kubeconfig-import")
        ctl = Controller(api, kubeconfig, work / "import.log", *_publishing(renders, k3s))
        try:
            ctl.wait_ready()
            _wait("import ConfigMap created", lambda: _host_in(
                api, "kube-system", "coredns-custom", "hairpin-proxy.override",
                "shop.example.com"))
            api.create(ingress("shop", "cart", tls_hosts=["cart.example.com"]))
            _wait("second rules", lambda: all(
                _host_in(api, ns, name, key, "cart.example.com") for ns, name, key in (
                    ("kube-system", "coredns-custom", "hairpin-proxy.override"),
                    ("kube-system", "nodelocaldns", "Corefile"),
                    (NAMESPACE, "hairpin-proxy-hosts", "hosts"))))
            _wait("event", lambda: api.list("Event", "shop"))
            _wait("conflicts", lambda: all(
                any(r.status == 409 for r in api.requests("PUT", path)) for path in (
                    r"/configmaps/coredns-custom$", r"/configmaps/nodelocaldns$",
                    r"/configmaps/hairpin-proxy-hosts$")))
            _target_service_lifecycle(api)
            _wait("a lease renewal", lambda: api.requests("PUT", r"/leases/"))
        finally:
            assert ctl.stop() == 0, ctl.log()
        controller_calls = _split(api.requests())
        api.clear_requests()
        job = renders["cleanup/coredns-import"]
        cleanup = Controller(api, kubeconfig, work / "cleanup-import.log",
                             *_args(job, "Job", "hairpin-proxy-cleanup"), command="cleanup")
        assert cleanup.proc.wait(PATIENCE) == 0, cleanup.log()
        cleanup.stop()
        assert api.get("ConfigMap", "kube-system", "coredns-custom") is None  # ours, emptied
        cleanup_calls = _split(api.requests())
    return [Run("import", "overlays/k3s", *controller_calls),
            Run("cleanup-import", "overlays/k3s", *cleanup_calls)]


def _guard_run(renders: dict[str, list[Doc]], work: Path) -> list[Run]:
    from tests.controller.test_netguard import NGINX_NS, POLICY, ingress_nginx, node

    docs = renders["components/guard-data-planes"]
    with FakeApiServer(bookmark_interval=0.5) as api:
        _cluster(api, COREFILE)
        # The owner every guard policy names.
        api.create(copy.deepcopy(find(docs, "ClusterRole", "hairpin-proxy-controller-guard")))
        api.create(node("n1", "10.244.0.0/24"))
        ingress_nginx(api)
        kubeconfig = api.write_kubeconfig(work / "kubeconfig-guard")
        ctl = Controller(api, kubeconfig, work / "guard.log",
                         *_args(docs, "Deployment", "hairpin-proxy-controller"))
        try:
            ctl.wait_ready()
            _wait("guard created", lambda: api.get(*POLICY) is not None)
            api.create(node("n2", "10.244.9.0/24"))
            _wait("guard updated", lambda: "10.244.9.0/24" in str(api.get(*POLICY)))
            cm = api.get("ConfigMap", NGINX_NS, "ingress-nginx-controller")
            assert cm is not None
            cm["data"]["use-proxy-protocol"] = "false"
            api.update(cm)
            _wait("guard deleted", lambda: api.get(*POLICY) is None)
            cm["data"]["use-proxy-protocol"] = "true"
            api.update(cm)
            _wait("guard back", lambda: api.get(*POLICY) is not None)
        finally:
            assert ctl.stop() == 0, ctl.log()
        guard_calls = _split(api.requests())
        api.clear_requests()
        # With the component's grant, cleanup may remove the guard's policies itself.
        args = [a for a in _args(renders["cleanup/default"], "Job", "hairpin-proxy-cleanup")
                if a != "--no-guard-policies"]
        cleanup = Controller(api, kubeconfig, work / "cleanup-guard.log", *args,
                             command="cleanup")
        assert cleanup.proc.wait(PATIENCE) == 0, cleanup.log()
        cleanup.stop()
        assert api.get(*POLICY) is None
        return [Run("guard", "components/guard-data-planes", *guard_calls),
                Run("cleanup-guard", "components/guard-data-planes", *_split(api.requests()))]


@pytest.fixture(scope="module")
def runs(renders: dict[str, list[Doc]],
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Run]]:
    work = tmp_path_factory.mktemp("rbac-calls")
    yield _default_run(renders, work) + _import_run(renders, work) + _guard_run(renders, work)


def denied(docs: list[Doc], calls: Iterable[Access]) -> list[str]:
    return sorted({str(a) for a in calls if not is_allowed(docs, a)})


# --------------------------------------------------------------------------- the checks


def test_every_call_is_allowed(renders: dict[str, list[Doc]], runs: list[Run]) -> None:
    for run in runs:
        assert run.calls, run.label
        assert denied(renders[run.render], run.calls) == [], (run.label, run.render)
        # Discovery and health URLs are open to every authenticated user (system:discovery,
        # system:public-info-viewer: /api, /api/*, /apis, /apis/*, /version, /healthz); the
        # controller asks for API groups' versions (Gateway API and implementations' CRDs).
        for url in run.non_resource:
            assert url in {"/version", "/api", "/apis", "/healthz"} or url.startswith(
                ("/api/", "/apis/")), (run.label, url)


def test_the_nudge_is_the_only_call_beyond_the_base(renders: dict[str, list[Doc]],
                                                    runs: list[Run]) -> None:
    (default,) = [r for r in runs if r.label == "default"]
    # The base lists kube-system's pods itself (is an addon manager running?); only the patch
    # is the nudge's.
    assert denied(renders["base"], default.calls) == ["patch kube-system/pods/"
                                                      "coredns-5d78c9869d-abcde"]


def _coverage(renders: dict[str, list[Doc]], runs: list[Run]) -> dict[tuple[str, Grant], str]:
    """(render, grant) → "" for every grant no run under that render's RBAC exercised."""
    calls = {run.label: run.calls for run in runs}
    # The nudge install is the base plus one Role: the default run exercises both, with the
    # cleanup after it.
    by_render = {"base": calls["default"] + calls["cleanup"],
                 "components/nudge-coredns": calls["default"] + calls["cleanup"],
                 "overlays/k3s": calls["import"] + calls["cleanup-import"],
                 "components/guard-data-planes": calls["default"] + calls["cleanup"]
                 + calls["guard"] + calls["cleanup-guard"]}
    return {(render, g): "" for render, calls in by_render.items()
            for g in unexercised(renders[render], calls)}


def test_every_grant_is_exercised(renders: dict[str, list[Doc]], runs: list[Run]) -> None:
    missing = _coverage(renders, runs)
    unexpected = sorted(f"{render}: {g}" for render, g in set(missing) - set(EXCEPTIONS))
    stale = sorted(f"{render}: {g}" for render, g in set(EXCEPTIONS) - set(missing))
    assert unexpected == [], "granted but never used:\n" + "\n".join(unexpected)
    assert stale == [], "listed as unused but exercised (or no longer granted)"


def test_the_checks_catch_a_missing_and_an_unused_grant(renders: dict[str, list[Doc]],
                                                        runs: list[Run]) -> None:
    (default,) = [r for r in runs if r.label == "default"]
    docs = copy.deepcopy(renders["components/nudge-coredns"])
    role = find(docs, "Role", "hairpin-proxy-controller-coredns", "kube-system")
    rule = next(r for r in role["rules"] if r.get("resourceNames") == ["coredns"])
    rule["verbs"].remove("update")
    assert "update kube-system/configmaps/coredns" in denied(docs, default.calls)
    # ... and a grant nobody uses: deleting the Lease.
    own = find(docs, "Role", "hairpin-proxy-controller", "hairpin-proxy")
    own["rules"].append({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                         "resourceNames": ["hairpin-proxy-controller"], "verbs": ["delete"]})
    assert Grant("hairpin-proxy", "coordination.k8s.io", "leases", "delete",
                 "hairpin-proxy-controller") in unexercised(docs, default.calls)


def test_request_mapping() -> None:
    def rec(method: str, path: str, **query: str) -> Access | None:
        return access_of(RequestRecord(method, path, query, 0.0, query.get("watch") == "true"))

    assert rec("GET", "/api/v1/namespaces", fieldSelector="metadata.name=hairpin-proxy",
               watch="true") == Access("", "", "namespaces", "watch", "hairpin-proxy")
    assert rec("GET", "/api/v1/namespaces/hairpin-proxy") == Access(
        "hairpin-proxy", "", "namespaces", "get", "hairpin-proxy")
    assert rec("GET", "/apis/networking.k8s.io/v1/ingresses") == Access(
        "", "networking.k8s.io", "ingresses", "list")
    assert rec("GET", "/api/v1/namespaces/kube-system/configmaps",
               fieldSelector="metadata.name=coredns,metadata.namespace=kube-system") == Access(
        "kube-system", "", "configmaps", "list")
    assert rec("PUT", "/apis/coordination.k8s.io/v1/namespaces/n/leases/l") == Access(
        "n", "coordination.k8s.io", "leases", "update", "l")
    assert rec("PUT", "/api/v1/namespaces/n/pods/p/status") == Access(
        "n", "", "pods/status", "update", "p")
    assert rec("DELETE", "/api/v1/namespaces/n/configmaps") == Access(
        "n", "", "configmaps", "deletecollection")
    assert rec("GET", "/version") is None


def test_the_guard_calls_beyond_the_base(renders: dict[str, list[Doc]],
                                         runs: list[Run]) -> None:
    (guard,) = [r for r in runs if r.label == "guard"]
    beyond = denied(renders["base"], guard.calls)
    assert beyond == [
        "create ingress-nginx/networkpolicies.networking.k8s.io",
        "delete ingress-nginx/networkpolicies.networking.k8s.io/"
        "hairpin-proxy-guard-ingress-nginx-controller",
        "list clusterroles.rbac.authorization.k8s.io/hairpin-proxy-controller-guard",
        "list ingress-nginx/endpointslices.discovery.k8s.io",
        "list networkpolicies.networking.k8s.io",
        "list nodes",
        "update ingress-nginx/networkpolicies.networking.k8s.io/"
        "hairpin-proxy-guard-ingress-nginx-controller",
        "watch clusterroles.rbac.authorization.k8s.io/hairpin-proxy-controller-guard",
        "watch networkpolicies.networking.k8s.io",
        "watch nodes"], beyond
    # cleanup, where the component grants it: our labelled policies, listed and deleted.
    (cleanup,) = [r for r in runs if r.label == "cleanup-guard"]
    assert denied(renders["base"], cleanup.calls) == [
        "delete ingress-nginx/networkpolicies.networking.k8s.io/"
        "hairpin-proxy-guard-ingress-nginx-controller",
        "list networkpolicies.networking.k8s.io"]
