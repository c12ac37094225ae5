"""The Ingress cache keyed by name, through the running controller: Ingresses of one name in
several namespaces each get their own Events and hosts, whichever of them holds the plain
name as its key, across deletions and re-creations."""

from __future__ import annotations

from collections.abc import Callable

from hairpin_proxy import corefile
from tests.controller.conftest import Controller, corefile_text, wait_until
from tests.fakeapi.fixtures import ingress
from tests.fakeapi.server import FakeApiServer

Start = Callable[..., Controller]


def managed(api: FakeApiServer) -> tuple[str, ...]:
    return corefile.managed_hosts(corefile_text(api))


def rejected_on(api: FakeApiServer, namespace: str) -> list[tuple[str, str, str]]:
    """(name, uid, resourceVersion) of the object of every HostRejected Event there."""
    out = []
    for event in api.list("Event", namespace):
        if event.get("reason") == "HostRejected":
            involved = event["involvedObject"]
            out.append((involved["name"], involved["uid"], involved["resourceVersion"]))
    return out


def version(api: FakeApiServer, namespace: str, name: str) -> tuple[str, str, str]:
    obj = api.get("Ingress", namespace, name)
    assert obj is not None
    return (name, obj["metadata"]["uid"], obj["metadata"]["resourceVersion"])


def test_same_named_ingresses_each_get_their_own_events(cluster: FakeApiServer,
                                                         start: Start) -> None:
    cluster.create(ingress("a", "web", tls_hosts=["a.example.com"]))
    # Refused by the policy (an IP): its Event must land on this very object.
    cluster.create(ingress("b", "web", tls_hosts=["b.example.com", "10.6.6.6"]))
    ctl = start()
    ctl.wait_ready()
    wait_until(lambda: managed(cluster) == ("a.example.com", "b.example.com"), what="hosts")
    wait_until(lambda: rejected_on(cluster, "b") == [version(cluster, "b", "web")],
               what="the Event on b/web")
    assert rejected_on(cluster, "a") == []
    # The first "web" goes; a third comes, refused too; the second changes.
    cluster.delete("Ingress", "a", "web")
    cluster.create(ingress("c", "web", tls_hosts=["c.example.com", "10.7.7.7"]))
    wait_until(lambda: managed(cluster) == ("b.example.com", "c.example.com"),
               what="a/web gone, c/web in")
    wait_until(lambda: rejected_on(cluster, "c") == [version(cluster, "c", "web")],
               what="the Event on c/web")
    obj = cluster.get("Ingress", "b", "web")
    assert obj is not None
    obj["spec"]["tls"][0]["hosts"] = ["b2.example.com", "10.8.8.8"]
    cluster.update(obj)
    wait_until(lambda: version(cluster, "b", "web") in rejected_on(cluster, "b"),
               what="the Event on the changed b/web")
    wait_until(lambda: managed(cluster) == ("b2.example.com", "c.example.com"), what="hosts")
    assert [e[1] for e in rejected_on(cluster, "c")] == [version(cluster, "c", "web")[1]]
    assert rejected_on(cluster, "a") == []


def test_a_relist_that_hands_the_plain_name_to_another_namespace(cluster: FakeApiServer,
                                                                  start: Start) -> None:
    """The holder of the plain name goes unseen (a relist tells it): the other namespace's
    Ingress of that name now holds it, and its changes, Events and deletion still land on it
    (never on a third one that comes later under the full name)."""
    cluster.create(ingress("a", "web", tls_hosts=["a.example.com"]))
    cluster.create(ingress("b", "web", tls_hosts=["b.example.com"]))
    ctl = start("--allow-mass-removal")
    ctl.wait_ready()
    wait_until(lambda: managed(cluster) == ("a.example.com", "b.example.com"), what="hosts")
    cluster.stall_watches()
    try:
        cluster.delete("Ingress", "a", "web")
        cluster.compact()
        cluster.drop_watches()
    finally:
        cluster.unstall_watches()
    wait_until(lambda: managed(cluster) == ("b.example.com",), what="relisted state")
    cluster.create(ingress("a", "web", tls_hosts=["a2.example.com", "10.5.5.5"]))
    wait_until(lambda: managed(cluster) == ("a2.example.com", "b.example.com"), what="a back")
    wait_until(lambda: rejected_on(cluster, "a") == [version(cluster, "a", "web")],
               what="the Event on the new a/web")
    obj = cluster.get("Ingress", "b", "web")
    assert obj is not None
    obj["spec"]["tls"][0]["hosts"] = ["b2.example.com", "10.8.8.8"]
    cluster.update(obj)
    wait_until(lambda: rejected_on(cluster, "b") == [version(cluster, "b", "web")],
               what="the Event on the changed b/web")
    wait_until(lambda: managed(cluster) == ("a2.example.com", "b2.example.com"), what="hosts")
    cluster.delete("Ingress", "b", "web")
    wait_until(lambda: managed(cluster) == ("a2.example.com",), what="b/web gone")
    assert [e[1] for e in rejected_on(cluster, "a")] == [version(cluster, "a", "web")[1]]
