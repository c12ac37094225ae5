"""``hairpin-proxy doctor --in-cluster``: the in-cluster verdict from a workstation.

What ``kubectl debug`` or ``kubectl run --rm`` would do by hand: one short-lived pod in our
namespace with the controller's image, service account, DNS policy and security context (read
from its Deployment), running the doctor with the same flags; wait for it to finish, print its
log (the report) and exit with its status; delete it whatever happens.

``doctor_pod``, ``doctor_args`` and ``pod_progress`` are pure; ``run_in_cluster`` is the shell.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from hairpin_proxy.doctor.deployed import controller_container
from hairpin_proxy.settings import DoctorSettings, flag_name, usage_error

if TYPE_CHECKING:
    from hairpin_proxy.kube.client import KubeClient

T = TypeVar("T")

CONTAINER = "doctor"
LABELS = {"app.kubernetes.io/name": "hairpin-proxy", "app.kubernetes.io/component": "doctor",
          "app.kubernetes.io/part-of": "hairpin-proxy"}
# Settings that stay on the workstation: where the API is, and this mode itself.
LOCAL = frozenset({"kubeconfig", "namespace", "in_cluster", "pod_start_timeout"})
# Of the controller's pod spec, what the doctor's pod keeps: who it runs as, how it resolves,
# where it may be scheduled and pull its image from.
POD_FIELDS = ("serviceAccountName", "dnsPolicy", "dnsConfig", "securityContext",
              "imagePullSecrets", "nodeSelector", "tolerations", "priorityClassName")
CONTAINER_FIELDS = ("image", "imagePullPolicy", "securityContext", "resources")
# Waiting reasons after which the container never starts by itself.
STUCK = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                   "CreateContainerConfigError", "CreateContainerError"})
POLL = 0.5
# The shell's status for a command ended by SIGINT.
INTERRUPTED = 130


def doctor_args(s: DoctorSettings) -> list[str]:
    """The flags that give ``s`` again, except the workstation's own (``LOCAL``)."""
    args: list[str] = []
    hosts: list[str] = []
    for f in dataclasses.fields(DoctorSettings):
        value = getattr(s, f.name)
        if f.name in LOCAL or value == f.default:
            continue
        if f.metadata.get("positional"):
            hosts += [str(v) for v in value]
        elif isinstance(value, bool):
            args.append(flag_name(f) if value else "--no-" + flag_name(f)[2:])
        elif isinstance(value, tuple):
            for item in value:
                args += [flag_name(f), str(item)]
        else:
            args += [flag_name(f), str(value)]
    return [*args, *hosts]


def doctor_pod(deployment: Mapping[str, Any], namespace: str, args: list[str], *,
               deadline: float) -> dict[str, Any] | str:
    """The doctor's pod, as the controller's Deployment runs its pods; or why there is none.
    ``deadline``: seconds it may run (its activeDeadlineSeconds)."""
    template = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    container = controller_container(deployment)
    if container is None or not container.get("image"):
        return "it has no controller container with an image"
    mounts = [m for m in container.get("volumeMounts") or [] if isinstance(m, Mapping)]
    # Only scratch space (the controller's /tmp): nothing of the controller's is shared.
    scratch = {str(v.get("name")) for v in template.get("volumes") or []
               if isinstance(v, Mapping) and "emptyDir" in v}
    spec: dict[str, Any] = {k: template[k] for k in POD_FIELDS if k in template}
    spec.update(
        restartPolicy="Never", enableServiceLinks=False,
        activeDeadlineSeconds=max(1, int(deadline + 0.999)),
        volumes=[v for v in template.get("volumes") or [] if v.get("name") in scratch],
        containers=[{
            "name": CONTAINER, **{k: container[k] for k in CONTAINER_FIELDS if k in container},
            "args": ["doctor", "--namespace", namespace, *args],
            "volumeMounts": [m for m in mounts if m.get("name") in scratch]}])
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "hairpin-proxy-doctor-", "namespace": namespace,
                         "labels": dict(LABELS)},
            "spec": spec}


@dataclass(frozen=True)
class Progress:
    """Where the pod is: ``exit_code`` once its container ended; ``stuck`` when it never
    will start by itself (why); ``started`` once its container runs; ``waiting`` the reason
    it does not run yet."""
    exit_code: int | None = None
    stuck: str = ""
    started: bool = False
    waiting: str = ""


def pod_progress(pod: Mapping[str, Any]) -> Progress:
    status = pod.get("status") or {}
    for c in status.get("containerStatuses") or []:
        if not isinstance(c, Mapping) or c.get("name") != CONTAINER:
            continue
        state = c.get("state") or {}
        ended = state.get("terminated")
        if isinstance(ended, Mapping):
            return Progress(exit_code=int(ended.get("exitCode") or 0), started=True)
        if "running" in state:
            return Progress(started=True)
        waiting = state.get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        if reason in STUCK:
            return Progress(stuck=f"{reason}: {waiting.get('message') or ''}".rstrip(": "))
        if status.get("phase") != "Failed":
            return Progress(waiting=reason)
    if status.get("phase") == "Failed":
        return Progress(stuck=f"the pod failed: {status.get('reason') or ''} "
                              f"{status.get('message') or ''}".strip())
    return Progress(waiting=str(status.get("phase") or "Pending"))


class InClusterError(Exception):
    """The pod could not be run or read; said in our words."""


async def _pod_run(client: KubeClient, namespace: str, name: str, start_limit: float,
                   run_limit: float) -> int:
    """Wait for the doctor's container to end: its exit status (raises InClusterError)."""
    from hairpin_proxy.kube.client import resource_path

    path, where = resource_path("v1", "pods", namespace, name), f"pod {namespace}/{name}"
    give_up = time.monotonic() + start_limit
    running = False
    while True:
        pod = await client.get(path)
        if pod is None:
            raise InClusterError(f"{where} disappeared before it finished")
        now = pod_progress(pod)
        if now.exit_code is not None:
            return now.exit_code
        if now.stuck:
            raise InClusterError(f"{where} cannot start: {now.stuck}")
        if now.started and not running:
            running, give_up = True, time.monotonic() + run_limit
        if time.monotonic() >= give_up:
            raise InClusterError(
                f"{where} did not finish within {run_limit:g}s" if running else
                f"{where} did not start within {start_limit:g}s (--pod-start-timeout): "
                f"{now.waiting or 'Pending'}")
        await asyncio.sleep(POLL)


async def _in_cluster(s: DoctorSettings, namespace: str, run_limit: float) -> tuple[int, str]:
    """(exit status, report) of the doctor run in its own pod (raises InClusterError)."""
    from hairpin_proxy.kube.client import ApiError, KubeClient, resource_path
    from hairpin_proxy.kube.config import KubeConfigError, load

    try:
        cfg = load(s.kubeconfig)
    except KubeConfigError as exc:
        raise InClusterError(str(exc)) from None
    client = KubeClient.from_cluster(cfg, timeout=max(s.timeout, 5.0))
    where = f"Deployment {namespace}/{s.controller_deployment}"
    name = ""
    try:
        deployment = await _step(f"read the controller's {where}", client.get(
            resource_path("apps/v1", "deployments", namespace, s.controller_deployment)))
        if deployment is None:
            raise InClusterError(f"the controller's {where} not found: --in-cluster runs its "
                                 "image with its service account (see --namespace / "
                                 "--controller-deployment)")
        pod = doctor_pod(deployment, namespace, doctor_args(s),
                         deadline=s.pod_start_timeout + run_limit)
        if isinstance(pod, str):
            raise InClusterError(f"the controller's {where}: {pod}")
        made = await _step(f"create the doctor's pod in {namespace}", client.create(
            resource_path("v1", "pods", namespace), pod))
        name = str((made.get("metadata") or {}).get("name") or "")
        code = await _pod_run(client, namespace, name, s.pod_start_timeout, run_limit)
        report = await _step(f"read the log of pod {namespace}/{name}", client.text(
            resource_path("v1", "pods", namespace, name) + "/log", {"container": CONTAINER}))
        return code, report
    finally:
        if name:
            try:
                await client.delete(resource_path("v1", "pods", namespace, name))
            except ApiError as exc:
                print(f"hairpin-proxy doctor: could not delete pod {namespace}/{name}: {exc}",
                      file=sys.stderr)
        await client.close()


async def _step(what: str, call: Awaitable[T]) -> T:
    """``call`` awaited; an API error is an InClusterError that says what was refused."""
    from hairpin_proxy.kube.client import ApiError

    try:
        return await call
    except ApiError as exc:
        hint = (" (--in-cluster needs create, get and delete of pods, get of pods/log, and "
                "get of the controller's Deployment in that namespace)"
                if exc.status == 403 else "")
        raise InClusterError(f"{what}: {exc}{hint}") from None


def run_in_cluster(s: DoctorSettings, namespace: str, run_limit: float) -> int:
    """Print the in-cluster report; its exit status (2 when it could not be had)."""
    try:
        code, report = asyncio.run(_in_cluster(s, namespace, run_limit))
    except InClusterError as exc:
        return usage_error("doctor", f"--in-cluster: {exc}")
    except KeyboardInterrupt:
        # asyncio.run cancelled the run first: its pod is deleted by then.
        print("hairpin-proxy doctor: interrupted", file=sys.stderr)
        return INTERRUPTED
    sys.stdout.write(report)
    sys.stdout.flush()
    return code
