"""The etchosts node agent: decisions, applying to a real file, and the CLI against a fake API."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hairpin_proxy import hostsfile
from hairpin_proxy.etchosts import (
    REMOVED,
    Agent,
    EtchostsMetrics,
    Published,
    block_inputs,
    desired_state,
    transform_for,
)
from hairpin_proxy.metrics import Registry
from hairpin_proxy.published import entries_text
from hairpin_proxy.safefile import SafeFile
from hairpin_proxy.settings import EtchostsSettings
from tests.etchosts.agent import NAMESPACE, EtchostsProcess
from tests.fakeapi.fixtures import configmap, fake_api, kubeconfig
from tests.fakeapi.server import FakeApiServer
from tests.peers import wait_for

__all__ = ["fake_api", "kubeconfig"]

FOREIGN = ("127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"
           "# The following line was added by an administrator\n192.0.2.50 nas.lan\n")
ORIGINAL_TOOL = "10.96.0.99 legacy.example.com # Added by hairpin-proxy\n"
CM_NAME = "hairpin-proxy-hosts"


def published(hosts: list[str], addresses: list[str],
              entries: dict[str, list[str]] | None = None) -> dict[str, Any]:
    data = {"hosts": "".join(h + "\n" for h in sorted(hosts)),
            "addresses": "".join(a + "\n" for a in addresses)}
    if entries is not None:
        data["entries"] = entries_text(entries)
    return configmap(NAMESPACE, CM_NAME, data)


def managed(path: Path) -> tuple[str, ...]:
    return hostsfile.managed_hosts(path.read_text())


def block_lines(text: str) -> list[str]:
    lines = text.splitlines()
    begin = next(i for i, line in enumerate(lines) if line.startswith("# BEGIN hairpin-proxy"))
    end = next(i for i, line in enumerate(lines) if line.startswith("# END hairpin-proxy"))
    return lines[begin + 1:end]


def foreign_kept(text: str) -> bool:
    return all(line in text.splitlines() for line in FOREIGN.splitlines())


# ---------------------------------------------------------------------- pure decisions

def test_published_configmap_is_parsed_line_by_line() -> None:
    cm = {"data": {"hosts": "a.example.com\n\n  b.example.com \n# note\n",
                   "addresses": "10.96.0.10\nfd00::10\n"}}
    assert Published.from_configmap(cm) == Published(("a.example.com", "b.example.com"),
                                                     ("10.96.0.10", "fd00::10"))
    assert Published.from_configmap({}) == REMOVED
    assert Published.from_configmap({"data": {"hosts": 7}}) == REMOVED


def test_a_deleted_configmap_keeps_the_last_state_unless_told() -> None:
    last = Published(("a.example.com",), ("10.96.0.10",))
    cm = {"data": {"hosts": "b.example.com\n", "addresses": "10.96.0.10\n"}}
    assert desired_state(cm, last, remove_on_delete=False) == Published(("b.example.com",),
                                                                        ("10.96.0.10",))
    assert desired_state(None, last, remove_on_delete=False) == last
    assert desired_state(None, None, remove_on_delete=False) is None
    assert desired_state(None, last, remove_on_delete=True) == REMOVED
    assert desired_state(None, None, remove_on_delete=True) == REMOVED


def test_hosts_without_an_address_empty_the_block() -> None:
    assert block_inputs(Published(("a.example.com",), ())) == ((), ())
    assert block_inputs(Published(("a.example.com",), ("10.96.0.10",))) == (
        ("a.example.com",), ("10.96.0.10",))


# ---------------------------------------------------------------------- the agent, in process

def settings(path: Path, **kw: Any) -> EtchostsSettings:
    return EtchostsSettings(hosts_file=path, **kw)


def make_agent(path: Path, *, hook: Callable[[str], None] | None = None,
               **kw: Any) -> tuple[Agent, EtchostsMetrics]:
    metrics = EtchostsMetrics(Registry())
    s = settings(path, **kw)
    writer = SafeFile(path, method=s.write_method, hook=hook)
    return Agent(s, writer, metrics), metrics


CM = {"data": {"hosts": "a.example.com\nb.example.com\n", "addresses": "10.96.0.10\n"}}


def test_apply_writes_the_block_keeps_foreign_lines_and_migrates_the_original(
        tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text(FOREIGN + ORIGINAL_TOOL)
    agent, metrics = make_agent(path)
    agent.published_changed(CM)
    assert asyncio.run(agent.apply("published"))
    text = path.read_text()
    assert managed(path) == ("a.example.com", "b.example.com")
    assert foreign_kept(text)
    assert "Added by hairpin-proxy" not in text and "legacy.example.com" not in text
    assert all("10.96.0.10" in line for line in block_lines(text))
    assert metrics.writes.value("rename") == 1
    assert metrics.hosts.value() == 2


def test_an_unchanged_state_is_not_written_again(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text(FOREIGN)
    agent, metrics = make_agent(path)
    agent.published_changed(CM)
    assert asyncio.run(agent.apply("published"))
    before = path.stat()
    for _ in range(3):
        assert asyncio.run(agent.apply("resync"))
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert metrics.writes.value("rename") == 1
    assert metrics.applies.value("resync", "ok") == 3


def test_wildcards_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text(FOREIGN)
    agent, metrics = make_agent(path)
    agent.published_changed({"data": {"hosts": "*.apps.example.com\na.example.com\n",
                                      "addresses": "10.96.0.10\n"}})
    assert asyncio.run(agent.apply("published"))
    assert managed(path) == ("a.example.com",)
    assert "*" not in path.read_text()
    assert metrics.hosts.value() == 1


def test_a_block_that_cannot_be_edited_safely_is_refused_and_the_file_kept(
        tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    broken = FOREIGN + "# BEGIN hairpin-proxy (managed; do not edit)\n10.96.0.10 a.example.com\n"
    path.write_text(broken)
    with pytest.raises(hostsfile.HostsFileError):
        hostsfile.apply(broken, ["a.example.com"], ["10.96.0.10"])
    agent, metrics = make_agent(path)
    agent.published_changed(CM)
    assert not asyncio.run(agent.apply("published"))
    assert path.read_text() == broken
    assert metrics.applies.value("published", "refused") == 1
    assert not asyncio.run(agent.ready()).ok


def test_an_editors_line_added_between_read_and_write_survives(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text(FOREIGN)
    edited = False

    def editor(point: str) -> None:
        nonlocal edited
        if point == "temp-written" and not edited:
            edited = True
            with path.open("a") as f:
                f.write("192.0.2.77 printer.lan\n")

    agent, _ = make_agent(path, hook=editor)
    agent.published_changed(CM)
    assert asyncio.run(agent.apply("published"))
    text = path.read_text()
    assert "192.0.2.77 printer.lan" in text.splitlines()
    assert managed(path) == ("a.example.com", "b.example.com")
    assert foreign_kept(text)


def _run_agent(agent: Agent, body: Callable[[], None]) -> None:
    """Run the agent's loop while ``body`` (blocking; run in a thread) looks at the file."""
    async def main() -> None:
        task = asyncio.create_task(agent.run())
        try:
            await asyncio.to_thread(body)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    asyncio.run(main())


def test_outside_edits_are_merged_and_our_block_repaired(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text(FOREIGN)
    agent, metrics = make_agent(path, poll_interval=0.05, resync_interval=3600.0)
    agent.published_changed(CM)

    def body() -> None:
        wait_for(lambda: managed(path) == ("a.example.com", "b.example.com"), 10, "block")
        # An editor that rewrites the whole file and drops our block (as some tools do).
        tmp = tmp_path / "hosts.new"
        tmp.write_text(FOREIGN + "192.0.2.9 added-later.lan\n")
        tmp.replace(path)
        wait_for(lambda: managed(path) == ("a.example.com", "b.example.com"), 10, "repair")
        assert "192.0.2.9 added-later.lan" in path.read_text().splitlines()
        # Tampering inside the block is repaired too.
        path.write_text(path.read_text().replace("b.example.com", "evil.example.com"))
        wait_for(lambda: managed(path) == ("a.example.com", "b.example.com"), 10, "repair 2")
        wait_for(lambda: metrics.applies.value("file-changed", "ok") >= 2, 10, "counted")

    _run_agent(agent, body)
    assert foreign_kept(path.read_text())


def test_an_edit_right_after_our_write_is_not_taken_for_ours(tmp_path: Path) -> None:
    """An editor replaces the file the instant our write lands (the writer's last step): the
    agent must see the file is not what it wrote and repair it at its next poll, not at the
    next resync an hour later."""
    path = tmp_path / "hosts"
    path.write_text(FOREIGN)
    edits = 0

    def editor_right_after(point: str) -> None:
        nonlocal edits
        if point == "renamed" and edits == 0:
            edits += 1
            tmp = tmp_path / "hosts.editor"
            tmp.write_text(FOREIGN + "192.0.2.9 added-later.lan\n")
            tmp.replace(path)

    agent, metrics = make_agent(path, hook=editor_right_after, poll_interval=0.05,
                                resync_interval=3600.0)
    agent.published_changed(CM)

    def body() -> None:
        wait_for(lambda: metrics.applies.value("file-changed", "ok") >= 1, 30, "a repair")
        wait_for(lambda: managed(path) == ("a.example.com", "b.example.com"), 30, "repaired")

    _run_agent(agent, body)
    assert edits == 1
    assert "192.0.2.9 added-later.lan" in path.read_text().splitlines()
    assert foreign_kept(path.read_text())


def test_the_periodic_resync_applies_without_any_event(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text(FOREIGN)
    agent, metrics = make_agent(path, poll_interval=0.0, resync_interval=1.0)
    agent.desired = Published(("a.example.com",), ("10.96.0.10",))  # no wake-up

    def body() -> None:
        wait_for(lambda: metrics.applies.value("resync", "ok") >= 1, 15, "resync")

    _run_agent(agent, body)
    assert managed(path) == ("a.example.com",)


def test_remove_takes_out_our_block_and_the_original_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    text = hostsfile.apply(FOREIGN, ["a.example.com"], ["10.96.0.10"]).text
    path.write_text(text + ORIGINAL_TOOL)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HAIRPIN_", "KUBECONFIG"))}
    proc = subprocess.run([sys.executable, "-m", "hairpin_proxy", "etchosts", "--remove",
                           "--hosts-file", str(path)], capture_output=True, text=True,
                          timeout=60, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    after = path.read_text()
    assert managed(path) == ()
    assert "hairpin-proxy" not in after
    assert foreign_kept(after)
    again = subprocess.run([sys.executable, "-m", "hairpin_proxy", "etchosts", "--remove",
                            "--hosts-file", str(path)], capture_output=True, text=True,
                           timeout=60, env=env, check=False)
    assert again.returncode == 0 and "no block to remove" in again.stderr


# ---------------------------------------------------------------------- end to end

@pytest.fixture
def agents(kubeconfig: Path, tmp_path: Path) -> Iterator[Callable[..., EtchostsProcess]]:
    started: list[EtchostsProcess] = []

    def start(hosts_file: Path, *args: str) -> EtchostsProcess:
        p = EtchostsProcess(kubeconfig, hosts_file, tmp_path / f"etchosts-{len(started)}.log",
                            *args)
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()


def test_end_to_end_the_file_follows_the_published_configmap(
        fake_api: FakeApiServer, agents: Callable[..., EtchostsProcess], tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text(FOREIGN + ORIGINAL_TOOL)
    fake_api.create(configmap(NAMESPACE, "unrelated", {"hosts": "x.example.com\n"}))
    agent = agents(path)
    # Listed, nothing published: ready, and the file is left exactly as it was.
    wait_for(agent.ready, 30, "agent ready")
    assert path.read_text() == FOREIGN + ORIGINAL_TOOL

    fake_api.create(published(["a.example.com", "b.example.com"], ["10.96.0.10"]))
    wait_for(lambda: managed(path) == ("a.example.com", "b.example.com"), 30, "first apply")
    text = path.read_text()
    assert foreign_kept(text) and "Added by hairpin-proxy" not in text

    fake_api.update(published(["a.example.com", "c.example.com", "*.apps.example.com"],
                              ["10.96.0.11"]))
    wait_for(lambda: managed(path) == ("a.example.com", "c.example.com"), 30, "update")
    assert all("10.96.0.11" in line for line in block_lines(path.read_text()))

    # Someone appends a line and mangles our block: merged and repaired.
    with path.open("a") as f:
        f.write("192.0.2.60 late.lan\n")
    path.write_text(path.read_text().replace("c.example.com", "d.example.com"))
    wait_for(lambda: managed(path) == ("a.example.com", "c.example.com"), 30, "repair")
    assert "192.0.2.60 late.lan" in path.read_text().splitlines()

    # Deleted: the last state is kept.
    fake_api.delete("ConfigMap", NAMESPACE, CM_NAME)
    wait_for(lambda: agent.metric("hairpin_etchosts_published_present") == 0, 30, "deleted")
    assert managed(path) == ("a.example.com", "c.example.com")

    # Only our ConfigMap is ever asked for.
    watched = [r for r in fake_api.requests("GET", r"/configmaps")
               if r.query.get("watch") == "true" or "limit" in r.query]
    assert watched
    assert all(r.query.get("fieldSelector") == f"metadata.name={CM_NAME}" for r in watched)
    assert all(f"/namespaces/{NAMESPACE}/configmaps" in r.path for r in watched)

    # SIGTERM: exit 0, the block stays.
    assert agent.stop() == 0
    assert managed(path) == ("a.example.com", "c.example.com")
    assert foreign_kept(path.read_text())


def test_end_to_end_in_place_and_remove_on_delete(
        fake_api: FakeApiServer, agents: Callable[..., EtchostsProcess], tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text(FOREIGN)
    ino = path.stat().st_ino
    fake_api.create(published(["a.example.com"], ["10.96.0.10", "fd00::10"]))
    agent = agents(path, "--write-method", "in-place", "--remove-on-delete")
    wait_for(lambda: managed(path) == ("a.example.com",), 30, "first apply")
    block = block_lines(path.read_text())
    assert any("10.96.0.10" in line for line in block) and any("fd00::10" in line
                                                               for line in block)
    fake_api.update(published(["a.example.com", "b.example.com"], ["10.96.0.10"]))
    wait_for(lambda: managed(path) == ("a.example.com", "b.example.com"), 30, "update")
    fake_api.delete("ConfigMap", NAMESPACE, CM_NAME)
    wait_for(lambda: managed(path) == (), 30, "removed on delete")
    # The content lands before the write ends (its journal is removed last), and the counter
    # moves once it has ended: wait on the counter before looking at the write's own files.
    wait_for(lambda: agent.metric('hairpin_etchosts_writes_total{method="in-place"}') == 3, 30,
             "three in-place writes counted")
    assert path.read_text().startswith(FOREIGN)
    assert foreign_kept(path.read_text())
    assert path.stat().st_ino == ino
    assert (tmp_path / "hosts.hairpin-proxy.bak").exists()
    assert not (tmp_path / "hosts.hairpin-proxy.journal").exists()
    assert agent.stop() == 0


def test_end_to_end_an_interrupted_rewrite_is_rolled_back_at_start(
        fake_api: FakeApiServer, agents: Callable[..., EtchostsProcess], tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    old = hostsfile.apply(FOREIGN, [f"h{i}.example.com" for i in range(60)], ["10.96.0.10"]).text
    path.write_text(old)
    chunks = 0

    def crash(point: str) -> None:
        nonlocal chunks
        if point == "chunk-written":
            chunks += 1
            if chunks == 3:
                raise RuntimeError("killed mid-write")

    writer = SafeFile(path, method="in-place", chunk=64, hook=crash)
    with pytest.raises(RuntimeError):
        writer.update(lambda text: hostsfile.apply(text, ["a.example.com"], ["10.96.0.10"]).text)
    assert path.read_text() not in (old, FOREIGN) and writer.journal_path.exists()

    agent = agents(path, "--write-method", "in-place")
    wait_for(agent.ready, 30, "agent ready")
    assert path.read_text() == old
    assert not writer.journal_path.exists()
    assert agent.metric('hairpin_etchosts_recoveries_total{outcome="rolled-back"}') == 1
    fake_api.create(published(["a.example.com"], ["10.96.0.10"]))
    wait_for(lambda: managed(path) == ("a.example.com",), 30, "apply after recovery")
    assert foreign_kept(path.read_text())


# ---------------------------------------------------------------------- per-host entries

MAIN_V4, MAIN_V6 = "10.96.0.10", "fd00:10:96::10"  # the main proxy Service (default target)
T1_V4, T1_V6 = "10.96.0.21", "fd00:10:96::21"      # the proxy Service of a second target
ENTRIES = {"a.example.com": [MAIN_V4, MAIN_V6], "gw.example.com": [T1_V4, T1_V6],
           "v4.example.com": [T1_V4]}
# What a current controller publishes: entries for every host, and in the older keys only the
# default target's hosts with the main Service's addresses.
CM_ENTRIES = {"data": {"entries": entries_text(ENTRIES), "hosts": "a.example.com\n",
                       "addresses": f"{MAIN_V4}\n{MAIN_V6}\n"}}


def entries_in(path: Path) -> dict[str, set[str]]:
    return {h: set(a) for h, a in hostsfile.managed_entries(path.read_text()).items()}


def test_entries_are_authoritative_when_present() -> None:
    want = Published.from_configmap(CM_ENTRIES)
    assert want.entries == (("a.example.com", (MAIN_V4, MAIN_V6)),
                            ("gw.example.com", (T1_V4, T1_V6)), ("v4.example.com", (T1_V4,)))
    assert want.source == "entries" and want.refused == ()
    text = transform_for(want)(FOREIGN)
    assert text == hostsfile.apply_entries(FOREIGN, ENTRIES).text
    # The older keys, which hold the default target's hosts only, play no part.
    assert "gw.example.com" in text
    # Present but empty: nothing to map, even though the older keys list a host.
    empty = Published.from_configmap({"data": {**CM_ENTRIES["data"], "entries": ""}})
    assert empty.entries == () and empty != REMOVED
    assert transform_for(empty)(text) == FOREIGN


def test_without_entries_the_older_keys_are_applied_as_before() -> None:
    want = Published.from_configmap(CM)
    assert want.entries is None and want.source == "hosts+addresses"
    assert transform_for(want)(FOREIGN) == hostsfile.apply(
        FOREIGN, ["a.example.com", "b.example.com"], ["10.96.0.10"]).text
    # The older path keeps refusing a bad address outright, as it always has.
    bad = Published.from_configmap({"data": {"hosts": "a.example.com\n", "addresses": "x\n"}})
    with pytest.raises(hostsfile.HostsFileError):
        transform_for(bad)(FOREIGN)


def test_malformed_entries_are_refused_line_by_line() -> None:
    cm = {"data": {"entries": f"a.example.com {MAIN_V4}\nbroken.example.com 10.96\n"
                              f"{T1_V4} swapped.example.com\n"}}
    want = Published.from_configmap(cm)
    assert want.entries == (("a.example.com", (MAIN_V4,)),)
    assert len(want.refused) == 3
    assert want.refused[0].startswith("line 2 'broken.example.com 10.96': ")
    assert want.refused[2].startswith(f"line 3 '{T1_V4} swapped.example.com': ")
    # The reasons are for the log; they do not make another state.
    assert want == Published.from_configmap({"data": {"entries": f"a.example.com {MAIN_V4}\n"}})


def test_the_agent_writes_each_host_with_its_own_addresses(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text(FOREIGN + ORIGINAL_TOOL)
    agent, metrics = make_agent(path)
    agent.published_changed(CM_ENTRIES)
    assert asyncio.run(agent.apply("published"))
    assert entries_in(path) == {h: set(a) for h, a in ENTRIES.items()}
    text = path.read_text()
    assert foreign_kept(text) and "legacy.example.com" not in text
    assert text.startswith(FOREIGN)
    assert metrics.hosts.value() == 3
    before = path.stat()
    assert asyncio.run(agent.apply("resync"))
    assert path.stat().st_mtime_ns == before.st_mtime_ns
    assert metrics.writes.value("rename") == 1


def test_the_agent_follows_a_controller_upgrade_and_downgrade(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text(FOREIGN)
    agent, _ = make_agent(path)
    old_controller = {"data": {"hosts": "a.example.com\n", "addresses": f"{MAIN_V4}\n"}}
    agent.published_changed(old_controller)
    assert asyncio.run(agent.apply("published"))
    assert entries_in(path) == {"a.example.com": {MAIN_V4}}
    agent.published_changed(CM_ENTRIES)
    assert asyncio.run(agent.apply("published"))
    assert entries_in(path) == {h: set(a) for h, a in ENTRIES.items()}
    # Back to a controller without entries: its hosts, the others resolve normally again.
    agent.published_changed(old_controller)
    assert asyncio.run(agent.apply("published"))
    assert entries_in(path) == {"a.example.com": {MAIN_V4}}
    assert path.read_text().startswith(FOREIGN)


def test_refused_entries_and_the_keys_in_use_are_logged_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "hosts"
    path.write_text(FOREIGN)
    agent, _ = make_agent(path)
    cm = {"data": {"entries": f"a.example.com {MAIN_V4}\nbad.example.com nowhere\n"
                              "*.apps.example.com " + MAIN_V4 + "\n"}}
    with caplog.at_level(logging.INFO, logger="hairpin_proxy.etchosts"):
        for _ in range(3):
            agent.published_changed(cm)
            assert asyncio.run(agent.apply("published"))
    refused = [r for r in caplog.records if r.getMessage() == "published entry refused"]
    assert [getattr(r, "reason", "") for r in refused] == [
        "line 2 'bad.example.com nowhere': not an IPv4 or IPv6 address, left out: nowhere",
        "line 2 'bad.example.com nowhere': no valid address; the host is left out"]
    keys = [getattr(r, "keys", "") for r in caplog.records
            if r.getMessage() == "following the published hosts"]
    assert keys == ["entries"]
    # A wildcard is a well-formed entry that a hosts file cannot hold: skipped, as before.
    skipped = [r for r in caplog.records
               if r.getMessage() == "hosts a hosts file cannot hold were skipped"]
    assert [getattr(r, "skipped", "") for r in skipped] == ["*.apps.example.com"]
    assert managed(path) == ("a.example.com",)


def test_too_many_refused_entries_are_summed_up(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "hosts"
    path.write_text(FOREIGN)
    agent, _ = make_agent(path)
    cm = {"data": {"entries": "".join(f"h{i}.example.com\n" for i in range(50))}}
    with caplog.at_level(logging.INFO, logger="hairpin_proxy.etchosts"):
        agent.published_changed(cm)
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count("published entry refused") == 20
    more = [r for r in caplog.records if r.getMessage() == "more published entries refused"]
    assert [getattr(r, "more", 0) for r in more] == [30]


def test_end_to_end_the_file_follows_the_published_entries(
        fake_api: FakeApiServer, agents: Callable[..., EtchostsProcess], tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text(FOREIGN)
    fake_api.create(published(["a.example.com"], [MAIN_V4, MAIN_V6], ENTRIES))
    agent = agents(path)
    want = {h: set(a) for h, a in ENTRIES.items()}
    wait_for(lambda: entries_in(path) == want, 30, "entries applied")
    assert foreign_kept(path.read_text())
    # A target's Service gets another address, a host moves to another target, one line is
    # garbled by hand: the garbled host is left out, the rest follows.
    moved = {"a.example.com": [T1_V4], "gw.example.com": [T1_V4], "v4.example.com": [T1_V4]}
    cm = published([], [MAIN_V4], moved)
    cm["data"]["entries"] += "garbled.example.com 10.96.0\n"
    fake_api.update(cm)
    wait_for(lambda: entries_in(path) == {h: set(a) for h, a in moved.items()}, 30, "update")
    # Back to the older keys only (a controller downgrade): they are followed again.
    fake_api.update(published(["a.example.com"], [MAIN_V4]))
    wait_for(lambda: entries_in(path) == {"a.example.com": {MAIN_V4}}, 30, "downgrade")
    assert agent.stop() == 0
    log = (tmp_path / "etchosts-0.log").read_text()
    assert "published entry refused" in log and "garbled.example.com" in log
