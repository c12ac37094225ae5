"""``doctor --in-cluster`` against the fake API with the manifests installed: the pod it
creates (the controller's image, service account and DNS policy), the log it reads, its
exit status, the clean-up, and the errors when a step is refused or the pod never starts.

The fake API has no kubelet: a thread plays it, as a node would run the pod: it schedules
the pod, runs its container's command (the real doctor, with the pod's service account),
stores what it printed as the container's log and its exit status.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hairpin_proxy.doctor import incluster
from hairpin_proxy.settings import DoctorSettings
from tests.fakeapi.server import FakeApiServer
from tests.waiting import wait_until

NS = "hairpin-proxy"
SA = "hairpin-proxy-controller"
HOST = "shop.example.test"
MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "hairpin-proxy.yaml"
INSTALLED = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
             "RoleBinding", "Deployment")
# The doctor's own flags for a quick run: no probes, no public DNS.
QUICK = (HOST, "--resolve", f"{HOST}:127.0.0.1", "--port", "0", "--tls-port", "0",
         "--verify-hosts", "off", "--output", "json", "--timeout", "1")

Obj = dict[str, Any]


def install(api: FakeApiServer) -> None:
    for doc in yaml.safe_load_all(MANIFEST.read_text()):
        if doc and doc["kind"] in INSTALLED and (
                doc["kind"] != "Deployment" or doc["metadata"]["name"] == SA):
            api.create(doc)


def run(*args: str, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("HAIRPIN_") and k not in ("KUBECONFIG", "POD_NAMESPACE")}
    return subprocess.run([sys.executable, "-m", "hairpin_proxy", "doctor", "--in-cluster",
                           "--kubeconfig", str(kubeconfig), *args],
                          capture_output=True, text=True, timeout=120, env=env, check=False)


def doctor_pods(api: FakeApiServer) -> list[Obj]:
    return api.list("Pod", NS, label_selector="app.kubernetes.io/component=doctor")


class Kubelet:
    """Plays the node for the first doctor pod: ``act(api, pod)`` does what the node does."""

    def __init__(self, api: FakeApiServer, act: Callable[[FakeApiServer, Obj], object]
                 ) -> None:
        self.api, self.act = api, act
        self.seen: list[Obj] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            wait_until(lambda: doctor_pods(self.api), 60, "the doctor's pod to be created")
            pod = doctor_pods(self.api)[0]
            self.seen.append(pod)
            self.act(self.api, pod)
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.error = exc

    def join(self) -> None:
        self.thread.join(60)
        assert self.error is None, self.error


def run_with(api: FakeApiServer, act: Callable[[FakeApiServer, Obj], object], *args: str,
             kubeconfig: Path) -> tuple[subprocess.CompletedProcess[str], str]:
    """``run`` while a Kubelet does ``act``: (the run, the name of the pod it made)."""
    kubelet = Kubelet(api, act)
    proc = run(*args, kubeconfig=kubeconfig)
    kubelet.join()
    return proc, str(kubelet.seen[0]["metadata"]["name"])


def _status(api: FakeApiServer, pod: Obj, state: Obj) -> None:
    name = pod["metadata"]["name"]
    api.patch("Pod", NS, name, {"spec": {"nodeName": "node-1"}, "status": {
        "phase": "Running" if "running" in state else "Pending",
        "containerStatuses": [{"name": "doctor", "state": state}]}})


def runs_the_container(kubeconfig: Path) -> Callable[[FakeApiServer, Obj], None]:
    """The node runs the pod's command with the pod's service account."""
    def act(api: FakeApiServer, pod: Obj) -> None:
        _status(api, pod, {"running": {}})
        (container,) = pod["spec"]["containers"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("HAIRPIN_")}
        env["KUBECONFIG"] = str(kubeconfig)
        proc = subprocess.run([sys.executable, "-m", "hairpin_proxy", *container["args"]],
                              capture_output=True, text=True, timeout=120, env=env,
                              check=False)
        api.set_pod_log(NS, pod["metadata"]["name"], "doctor", proc.stdout)
        _status(api, pod, {"terminated": {"exitCode": proc.returncode}})
    return act


@pytest.fixture
def installed(fake_api: FakeApiServer, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(an administrator's kubeconfig, the controller account's)."""
    install(fake_api)
    admin = fake_api.write_kubeconfig(tmp_path / "admin", namespace="default")
    token = fake_api.service_account_token(NS, SA)
    yield admin, fake_api.write_kubeconfig(tmp_path / "sa", token=token, namespace=NS)


def test_the_pod_runs_as_the_controller_and_its_report_is_printed(
        fake_api: FakeApiServer, installed: tuple[Path, Path]) -> None:
    admin, account = installed
    kubelet = Kubelet(fake_api, runs_the_container(account))
    proc = run(*QUICK, kubeconfig=admin)
    kubelet.join()
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    (host,) = report["hosts"]
    assert host["host"] == HOST and host["verdict"] == "not-probed"
    # Run with the controller's account: its own Deployment and Services are readable.
    assert report["api"] == "ok"
    assert not any(f"Deployment {NS}/{SA}" in p for p in report["cluster"]["problems"]), \
        report["cluster"]["problems"]
    (pod,) = kubelet.seen
    spec = pod["spec"]
    deployment = fake_api.get("Deployment", NS, SA)
    assert deployment is not None
    template = deployment["spec"]["template"]["spec"]
    (controller,) = template["containers"]
    assert spec["serviceAccountName"] == SA and spec["dnsPolicy"] == "Default"
    assert spec["restartPolicy"] == "Never" and spec["activeDeadlineSeconds"] > 0
    assert spec["securityContext"] == template["securityContext"]
    (container,) = spec["containers"]
    assert container["image"] == controller["image"]
    assert container["securityContext"] == controller["securityContext"]
    assert container["args"] == ["doctor", "--namespace", NS, "--port", "0", "--tls-port", "0",
                                 "--output", "json", "--timeout", "1.0", "--resolve",
                                 f"{HOST}:127.0.0.1", "--verify-hosts", "off", HOST]
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    # Read as the log of its container, then deleted.
    log = rf"/api/v1/namespaces/{NS}/pods/{pod['metadata']['name']}/log\?container=doctor$"
    assert fake_api.requests("GET", log)
    assert doctor_pods(fake_api) == []


def test_without_the_controller_deployment(fake_api: FakeApiServer,
                                           installed: tuple[Path, Path]) -> None:
    admin, _ = installed
    fake_api.delete("Deployment", NS, SA)
    proc = run(*QUICK, kubeconfig=admin)
    assert proc.returncode == 2 and not proc.stdout
    assert proc.stderr == (
        "hairpin-proxy doctor: error: --in-cluster: the controller's Deployment "
        f"{NS}/{SA} not found: --in-cluster runs its image with its service account (see "
        "--namespace / --controller-deployment)\n")


def test_refused_to_create_the_pod(fake_api: FakeApiServer,
                                   installed: tuple[Path, Path]) -> None:
    """The controller's own account may read its Deployment but not create pods."""
    _, account = installed
    proc = run(*QUICK, kubeconfig=account)
    assert proc.returncode == 2 and not proc.stdout
    assert proc.stderr.startswith(f"hairpin-proxy doctor: error: --in-cluster: create the "
                                  f"doctor's pod in {NS}: 403 Forbidden: pods is forbidden")
    assert "needs create, get and delete of pods, get of pods/log" in proc.stderr
    assert doctor_pods(fake_api) == []


def test_an_image_that_cannot_be_pulled(fake_api: FakeApiServer,
                                        installed: tuple[Path, Path]) -> None:
    admin, _ = installed
    proc, name = run_with(fake_api, lambda api, pod: _status(api, pod, {"waiting": {
        "reason": "ErrImagePull", "message": "pull access denied"}}), *QUICK, kubeconfig=admin)
    assert proc.returncode == 2 and not proc.stdout
    assert proc.stderr == (f"hairpin-proxy doctor: error: --in-cluster: pod {NS}/{name} "
                           "cannot start: ErrImagePull: pull access denied\n")
    assert doctor_pods(fake_api) == []


def test_a_pod_that_never_starts(fake_api: FakeApiServer,
                                 installed: tuple[Path, Path]) -> None:
    admin, _ = installed
    proc = run(*QUICK, "--pod-start-timeout", "1", kubeconfig=admin)
    assert proc.returncode == 2 and not proc.stdout
    assert "did not start within 1s (--pod-start-timeout): Pending" in proc.stderr
    assert doctor_pods(fake_api) == []


def test_refused_to_read_the_log(fake_api: FakeApiServer,
                                 installed: tuple[Path, Path]) -> None:
    admin, account = installed
    kubelet = Kubelet(fake_api, runs_the_container(account))
    fake_api.fail_requests(1, status=403, method="GET", path_re=r"/pods/[^/]+/log\?")
    proc = run(*QUICK, kubeconfig=admin)
    kubelet.join()
    assert proc.returncode == 2 and not proc.stdout
    assert "--in-cluster: read the log of pod" in proc.stderr and "403" in proc.stderr
    assert doctor_pods(fake_api) == []


def test_bad_flags_are_refused_before_any_pod() -> None:
    proc = subprocess.run([sys.executable, "-m", "hairpin_proxy", "doctor", "--in-cluster",
                           "--resolver", "nowhere"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 2 and "--resolver: expected cluster" in proc.stderr


def test_the_flags_given_again() -> None:
    s = DoctorSettings(host=("a.example", "b.example"), port=0, forged_header_probe=False,
                       resolve=("a.example:10.0.0.1", "b.example:10.0.0.2"),
                       kubeconfig=Path("/home/me/.kube/config"), namespace="hp",
                       in_cluster=True, pod_start_timeout=5.0)
    assert incluster.doctor_args(s) == [
        "--port", "0", "--resolve", "a.example:10.0.0.1", "--resolve", "b.example:10.0.0.2",
        "--no-forged-header-probe", "a.example", "b.example"]


def test_interrupted_the_pod_is_deleted(fake_api: FakeApiServer,
                                        installed: tuple[Path, Path]) -> None:
    """Ctrl-C while the pod is on its way: the pod goes, one line says so, no traceback."""
    admin, _ = installed
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("HAIRPIN_") and k not in ("KUBECONFIG", "POD_NAMESPACE")}
    proc = subprocess.Popen([sys.executable, "-m", "hairpin_proxy", "doctor", "--in-cluster",
                             "--kubeconfig", str(admin), *QUICK], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_until(lambda: doctor_pods(fake_api), 60, "the doctor's pod to be created")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == incluster.INTERRUPTED and not out
    assert err == "hairpin-proxy doctor: interrupted\n"
    assert doctor_pods(fake_api) == []


def test_a_pod_start_timeout_must_be_positive() -> None:
    proc = subprocess.run([sys.executable, "-m", "hairpin_proxy", "doctor", "--in-cluster",
                           "--pod-start-timeout", "0"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stderr == ("hairpin-proxy doctor: error: --pod-start-timeout must be "
                           "positive\n")


def test_a_deployment_without_the_controller_container(
        fake_api: FakeApiServer, installed: tuple[Path, Path]) -> None:
    admin, _ = installed
    deployment = fake_api.get("Deployment", NS, SA)
    assert deployment is not None
    deployment["spec"]["template"]["spec"]["containers"][0]["name"] = "sidecar"
    deployment["spec"]["template"]["spec"]["containers"][0]["args"] = ["serve"]
    fake_api.update(deployment)
    proc = run(*QUICK, kubeconfig=admin)
    assert proc.returncode == 2 and not proc.stdout
    assert proc.stderr == ("hairpin-proxy doctor: error: --in-cluster: the controller's "
                           f"Deployment {NS}/{SA}: it has no controller container with an "
                           "image\n")
    assert fake_api.list("Pod", NS) == []


def test_a_pod_deleted_under_it(fake_api: FakeApiServer,
                                installed: tuple[Path, Path]) -> None:
    admin, _ = installed
    proc, name = run_with(fake_api, lambda api, pod: api.delete(
        "Pod", NS, pod["metadata"]["name"]), *QUICK, kubeconfig=admin)
    assert proc.returncode == 2
    assert proc.stderr == (f"hairpin-proxy doctor: error: --in-cluster: pod {NS}/{name} "
                           "disappeared before it finished\n")


@pytest.mark.slow
def test_a_run_that_never_ends(fake_api: FakeApiServer,
                               installed: tuple[Path, Path]) -> None:
    """Started but never finished: given up after the run's deadline and its margin."""
    admin, _ = installed
    proc, name = run_with(fake_api, lambda api, pod: _status(api, pod, {"running": {}}),
                          *QUICK[:-1], "0.1", kubeconfig=admin)
    assert proc.returncode == 2
    assert proc.stderr == (f"hairpin-proxy doctor: error: --in-cluster: pod {NS}/{name} did "
                           "not finish within 40.1s\n")
    assert doctor_pods(fake_api) == []


def test_a_refused_deletion_is_said(fake_api: FakeApiServer,
                                    installed: tuple[Path, Path]) -> None:
    admin, _ = installed
    fake_api.fail_requests(1, status=403, method="DELETE", path_re=r"/pods/")
    proc, name = run_with(fake_api, lambda api, pod: _status(api, pod, {"waiting": {
        "reason": "ImagePullBackOff"}}), *QUICK, kubeconfig=admin)
    assert proc.returncode == 2
    deleting, error = proc.stderr.splitlines()
    assert deleting.startswith(f"hairpin-proxy doctor: could not delete pod {NS}/{name}: 403")
    assert error == (f"hairpin-proxy doctor: error: --in-cluster: pod {NS}/{name} cannot "
                     "start: ImagePullBackOff")
    assert len(doctor_pods(fake_api)) == 1
