"""Event recording: the rate limits, and the Event the API receives."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hairpin_proxy.kube import config as kconfig
from hairpin_proxy.kube.client import KubeClient
from hairpin_proxy.kube.events import EventRecorder, TokenBucket
from tests.fakeapi.fixtures import ingress
from tests.fakeapi.server import FakeApiServer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=1.0, burst=2, clock=clock)
    assert bucket.take() and bucket.take() and not bucket.take()
    clock.now += 1.0
    assert bucket.take() and not bucket.take()


def test_once_per_object_and_key_per_interval() -> None:
    clock = Clock()
    rec = EventRecorder(KubeClient.__new__(KubeClient), instance="me", interval=60, rate=100,
                        burst=100, clock=clock)
    assert rec.due("uid1", "host-a")
    assert not rec.due("uid1", "host-a")
    assert rec.due("uid1", "host-b")
    assert rec.due("uid2", "host-a")
    clock.now += 60
    assert rec.due("uid1", "host-a")


def test_global_bucket_caps_a_flood() -> None:
    clock = Clock()
    rec = EventRecorder(KubeClient.__new__(KubeClient), instance="me", interval=60, rate=0.1,
                        burst=5, clock=clock)
    sent = sum(rec.due(f"uid{i}", "h") for i in range(100))
    assert sent == 5
    assert rec.suppressed == 95


def test_warning_event_names_the_object(fake_api: FakeApiServer, kubeconfig: Path) -> None:
    obj = fake_api.create(ingress("team", "web", tls_hosts=["x"]))

    async def main() -> bool:
        client = KubeClient.from_cluster(kconfig.load(kubeconfig))
        try:
            rec = EventRecorder(client, instance="ctl-1")
            involved = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", **obj}
            first = await rec.warn(involved, reason="HostRejected", message="bad host",
                                   key="x")
            second = await rec.warn(involved, reason="HostRejected", message="bad host",
                                    key="x")
            return first and not second
        finally:
            await client.close()

    assert asyncio.run(main())
    (event,) = fake_api.list("Event", "team")
    assert event["reason"] == "HostRejected" and event["type"] == "Warning"
    assert event["message"] == "bad host"
    assert event["involvedObject"] == {
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "namespace": "team",
        "name": "web", "uid": obj["metadata"]["uid"],
        "resourceVersion": obj["metadata"]["resourceVersion"]}
    assert event["reportingInstance"] == "ctl-1"
