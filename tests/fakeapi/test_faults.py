"""Fault injection: each knob does what it documents, and the server recovers afterwards."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import httpx2 as httpx
import pytest
import yaml

from tests.fakeapi.fixtures import configmap
from tests.fakeapi.server import FakeApiServer
from tests.waiting import PATIENCE

CM = "/api/v1/namespaces/default/configmaps"


def test_drop_watches_cuts_streams_mid_body(http: httpx.Client, fake_api: FakeApiServer) -> None:
    fake_api.create(configmap("default", "a"))
    with http.stream("GET", CM, params={"watch": "1"}) as r:
        lines = r.iter_lines()
        assert json.loads(next(lines))["type"] == "ADDED"
        fake_api.drop_watches()
        with pytest.raises(httpx.RemoteProtocolError):
            next(lines)
    fake_api.wait_for(lambda: fake_api.open_watches == 0)
    # The server itself is fine: a new watch from the last version works.
    rv = fake_api.resource_version
    fake_api.create(configmap("default", "b"))
    with http.stream("GET", CM, params={"watch": "1", "resourceVersion": rv}) as r:
        assert json.loads(next(r.iter_lines()))["object"]["metadata"]["name"] == "b"


def test_stalled_watches_send_nothing_until_unstalled(fake_api: FakeApiServer) -> None:
    fake_api.bookmark_interval = 0.1
    rv = fake_api.resource_version
    received: list[tuple[float, str]] = []
    opened = threading.Event()

    def reader() -> None:
        params = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true"}
        with httpx.Client(base_url=fake_api.url, timeout=httpx.Timeout(10.0)) as client, \
                client.stream("GET", CM, params=params) as r:
            opened.set()
            for line in r.iter_lines():
                event = json.loads(line)
                received.append((time.monotonic(), event["type"]))
                if event["type"] == "ADDED":
                    return

    fake_api.stall_watches()
    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    assert opened.wait(PATIENCE)
    fake_api.create(configmap("default", "a"))
    time.sleep(0.5)  # several bookmark intervals: a live stream would have sent some
    assert received == []
    assert fake_api.open_watches == 1
    unstalled = time.monotonic()
    fake_api.unstall_watches()
    thread.join(PATIENCE)
    assert not thread.is_alive()
    assert received[-1][1] == "ADDED"
    assert all(t >= unstalled for t, _ in received)


def test_fail_requests_hits_only_matching_requests(http: httpx.Client,
                                                   fake_api: FakeApiServer) -> None:
    fake_api.create(configmap("default", "c"))
    fake_api.fail_requests(2, status=500, method="PUT", path_re=r"/configmaps/c$")
    assert http.get(f"{CM}/c").status_code == 200
    body = fake_api.get("configmaps", "default", "c")
    assert body is not None
    first = http.put(f"{CM}/c", json=body)
    assert first.status_code == 500
    assert first.headers["content-type"] == "application/json"
    assert first.json()["reason"] == "InternalError"
    assert http.put(f"{CM}/c", json=body).status_code == 500
    assert http.put(f"{CM}/c", json=body).status_code == 200

    fake_api.fail_requests(1, status=429)
    throttled = http.get(CM)
    assert throttled.status_code == 429
    assert throttled.headers["retry-after"] == "1"
    assert throttled.json()["reason"] == "TooManyRequests"
    assert http.get(CM).status_code == 200
    assert [r.status for r in fake_api.requests(method="PUT")] == [500, 500, 200]


def _refused(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_go_down_refuses_connections_and_comes_back_on_the_same_port(
    fake_api: FakeApiServer,
) -> None:
    fake_api.create(configmap("default", "c"))
    port, url = fake_api.port, fake_api.url
    with httpx.Client(base_url=url, timeout=httpx.Timeout(5.0)) as client:
        assert client.get(f"{CM}/c").status_code == 200  # a kept-alive connection
        with client.stream("GET", CM, params={"watch": "1"}) as r:
            lines = r.iter_lines()
            next(lines)
            fake_api.go_down()
            with pytest.raises(httpx.TransportError):
                next(lines)
        assert _refused(port)
        with pytest.raises(httpx.ConnectError):
            client.get(f"{CM}/c")
        fake_api.come_up()
        assert fake_api.port == port
        assert client.get(f"{CM}/c").status_code == 200
    assert fake_api.url == url


def test_conflict_next_put_makes_one_put_lose(http: httpx.Client,
                                              fake_api: FakeApiServer) -> None:
    mine = http.post(CM, json=configmap("default", "c", {"k": "v"})).json()
    fake_api.conflict_next_put(r"/configmaps/c$")
    mine["data"] = {"k": "mine"}
    r = http.put(f"{CM}/c", json=mine)
    assert r.status_code == 409 and r.json()["reason"] == "Conflict"
    fresh = http.get(f"{CM}/c").json()
    assert fresh["metadata"]["annotations"]["fakeapi.test/touched"] == "1"
    fresh["data"] = {"k": "mine"}
    assert http.put(f"{CM}/c", json=fresh).status_code == 200
    assert [r.status for r in fake_api.requests(method="PUT")] == [409, 200]


def test_touch_always_makes_a_new_version(fake_api: FakeApiServer) -> None:
    created = fake_api.create(configmap("default", "c", {"k": "v"}))
    same = fake_api.update(created)
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    touched = fake_api.touch("cm", "default", "c")
    assert touched["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
    assert [t for t, _ in fake_api.changes("configmaps")] == ["ADDED", "MODIFIED"]


def test_before_next_request_runs_a_concurrent_edit(http: httpx.Client,
                                                    fake_api: FakeApiServer) -> None:
    fake_api.create(configmap("default", "c", {"k": "v"}))
    fake_api.before_next_request(
        lambda: fake_api.patch("configmaps", "default", "c", {"data": {"k": "edited"}}),
        method="GET", path_re=r"/configmaps/c$")
    assert http.get(f"{CM}/c").json()["data"] == {"k": "edited"}


def test_held_requests_wait_while_others_are_answered(http: httpx.Client,
                                                      fake_api: FakeApiServer) -> None:
    fake_api.create(configmap("default", "c", {"k": "v"}))
    release = fake_api.hold_requests("GET", r"/configmaps/c$")
    got: list[httpx.Response] = []
    held = threading.Thread(target=lambda: got.append(http.get(f"{CM}/c")))
    held.start()
    fake_api.wait_for(lambda: fake_api.count("GET", r"/configmaps/c$") == 1)
    # Arrived and waiting; the server answers others meanwhile, and writes go through.
    with httpx.Client(base_url=fake_api.url) as other:
        assert other.get(CM).status_code == 200
    fake_api.patch("configmaps", "default", "c", {"data": {"k": "edited"}})
    assert not got
    release()
    held.join(PATIENCE)
    # Handled once let go: what the store holds then.
    assert [r.json()["data"] for r in got] == [{"k": "edited"}]
    assert http.get(f"{CM}/c").status_code == 200


def test_tokens_are_checked(fake_api: FakeApiServer, http: httpx.Client) -> None:
    fake_api.set_tokens({"t1"})
    r = http.get(CM)
    assert r.status_code == 401
    assert r.json()["reason"] == "Unauthorized"
    assert http.get(CM, headers={"Authorization": "Bearer t2"}).status_code == 401
    assert http.get(CM, headers={"Authorization": "Bearer t1"}).status_code == 200
    assert http.get("/healthz").status_code == 200
    fake_api.set_tokens(None)
    assert http.get(CM).status_code == 200


def test_kubeconfig_points_at_the_server(fake_api: FakeApiServer, tmp_path: Path) -> None:
    path = fake_api.write_kubeconfig(tmp_path / "kc", token="abc", namespace="team")
    config = yaml.safe_load(path.read_text())
    assert config["current-context"] == "fake"
    assert config["clusters"][0]["cluster"]["server"] == fake_api.url
    assert config["users"][0]["user"] == {"token": "abc"}
    assert config["contexts"][0]["context"]["namespace"] == "team"


def test_fail_requests_can_target_watches_by_query(http: httpx.Client,
                                                   fake_api: FakeApiServer) -> None:
    fake_api.fail_requests(1, status=503, path_re=r"watch=(1|true)")
    assert http.get(CM).status_code == 200
    with http.stream("GET", CM, params={"watch": "true", "labelSelector": "a=b"}) as r:
        assert r.status_code == 503
    assert fake_api.count(path_re=r"labelSelector=a=b") == 1
    with http.stream("GET", CM, params={"watch": "true", "timeoutSeconds": "1"}) as r:
        assert r.status_code == 200
