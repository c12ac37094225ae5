"""pods/log as kube-apiserver answers it (pkg/registry/core/pod LogLocation, then the
kubelet): the container named or the pod's only one, a scheduled pod, a started container;
plain text; RBAC on the subresource ``pods/log``."""

from __future__ import annotations

from typing import Any

import httpx2 as httpx
import pytest

from tests.fakeapi.server import FakeApiServer
from tests.fakeapi.test_authz import NS, account, grant

POD = f"/api/v1/namespaces/{NS}/pods/job/log"


def pod(containers: list[str], *, node: str = "node-1",
        states: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": NS, "name": "job"},
        "spec": {"containers": [{"name": c, "image": "x"} for c in containers]}}
    if node:
        obj["spec"]["nodeName"] = node
    obj["status"] = {"containerStatuses": [{"name": n, "state": st}
                                           for n, st in (states or {}).items()]}
    return obj


@pytest.fixture
def http(fake_api: FakeApiServer) -> httpx.Client:
    fake_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return httpx.Client(base_url=fake_api.url, timeout=10.0)


def test_the_log_of_a_finished_container(fake_api: FakeApiServer, http: httpx.Client) -> None:
    fake_api.create(pod(["doctor"], states={"doctor": {"terminated": {"exitCode": 0}}}))
    fake_api.set_pod_log(NS, "job", "doctor", "report\n")
    r = http.get(POD)
    assert r.status_code == 200 and r.text == "report\n"
    assert r.headers["content-type"].startswith("text/plain")
    assert http.get(POD, params={"container": "doctor"}).text == "report\n"


@pytest.mark.parametrize(("obj", "params", "message"), [
    (pod(["a", "b"], states={"a": {"running": {}}}), {},
     "a container name must be specified for pod job, choose one of: [a b]"),
    (pod(["a"], states={"a": {"running": {}}}), {"container": "c"},
     "container c is not valid for pod job"),
    (pod(["a"], node=""), {}, "pod job does not have a host assigned"),
    (pod(["a"]), {}, 'container "a" in pod "job" is waiting to start: ContainerCreating'),
    (pod(["a"], states={"a": {"waiting": {"reason": "ErrImagePull"}}}), {},
     'container "a" in pod "job" is waiting to start: ErrImagePull'),
])
def test_bad_requests(fake_api: FakeApiServer, http: httpx.Client, obj: dict[str, Any],
                      params: dict[str, str], message: str) -> None:
    fake_api.create(obj)
    r = http.get(POD, params=params)
    assert r.status_code == 400
    assert r.json()["reason"] == "BadRequest" and r.json()["message"] == message


def test_missing_pod(http: httpx.Client) -> None:
    r = http.get(POD)
    assert r.status_code == 404 and r.json()["message"] == 'pods "job" not found'


def test_rbac_names_the_subresource(fake_api: FakeApiServer) -> None:
    client = account(fake_api)
    fake_api.create(pod(["a"], states={"a": {"running": {}}}))
    grant(fake_api, [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}])
    r = client.get(POD)
    assert r.status_code == 403 and 'cannot get resource "pods/log"' in r.json()["message"]
    grant(fake_api, [{"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}],
          name="logs")
    assert client.get(POD).status_code == 200
