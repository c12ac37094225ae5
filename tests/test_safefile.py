"""Crash-safe file replacement, on real files: rename and in-place paths, editors, crashes."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hairpin_proxy.safefile import (
    BACKUP_SUFFIX,
    JOURNAL_SUFFIX,
    TEMP_MARK,
    ConflictError,
    RecoveryError,
    SafeFile,
    SafeFileError,
    VerifyError,
    changed_range,
    padded,
)

FOREIGN = "127.0.0.1 localhost\n::1 localhost ip6-localhost\n# an admin's comment\n"
WRITER = Path(__file__).parent / "etchosts" / "killable_writer.py"


def block(n: int, addr: str = "10.96.0.10") -> str:
    lines = "".join(f"{addr} host-{i}.example.com\n" for i in range(n))
    return f"# BEGIN test\n{lines}# END test\n"


class Crash(Exception):
    """Raised from a hook to stop a write half-way, as a crash would."""


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if TEMP_MARK in p.name)


# ---------------------------------------------------------------------- pure helpers

@given(st.binary(max_size=200), st.integers(min_value=0, max_value=300))
def test_padded_keeps_content_and_only_adds_ignorable_lines(content: bytes, size: int) -> None:
    out = padded(content, size)
    assert len(out) == max(size, len(content))
    assert out.startswith(content)
    extra = out[len(content):]
    if extra and content and not content.endswith(b"\n"):
        assert extra.startswith(b"\n")
        extra = extra[1:]
    for line in extra.split(b"\n")[:-1] if extra else []:
        assert line == b"" or set(line) == {ord("#")}
    assert not extra or extra.endswith(b"\n")


@given(st.binary(max_size=60), st.binary(max_size=60))
def test_changed_range_covers_every_difference(current: bytes, target: bytes) -> None:
    full = padded(target, len(current))
    start, end = changed_range(current, full)
    rebuilt = bytearray(current) + bytearray(len(full) - len(current))
    rebuilt[start:end] = full[start:end]
    assert bytes(rebuilt[:len(full)]) == full


# ---------------------------------------------------------------------- rename path

def test_rename_replaces_content_keeping_mode_and_owner(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text(FOREIGN)
    path.chmod(0o640)
    if os.geteuid() == 0:
        os.chown(path, 1234, 2345)
    before = path.stat()
    result = SafeFile(path).update(lambda text: text + block(2))
    after = path.stat()
    assert result.changed and result.method == "rename" and result.attempts == 1
    assert path.read_text() == FOREIGN + block(2)
    assert after.st_ino != before.st_ino
    assert (after.st_mode, after.st_uid, after.st_gid) == (before.st_mode, before.st_uid,
                                                          before.st_gid)
    assert leftovers(tmp_path) == []
    assert not (tmp_path / ("hosts" + BACKUP_SUFFIX)).exists()


def test_unchanged_text_is_never_written(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text(FOREIGN)
    before = path.stat()
    for method in ("rename", "in-place"):
        result = SafeFile(path, method=method).update(lambda text: text)
        assert not result.changed and result.method is None
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns, after.st_ctime_ns) == (
        before.st_ino, before.st_mtime_ns, before.st_ctime_ns)
    assert not (tmp_path / ("hosts" + BACKUP_SUFFIX)).exists()


def test_a_failing_transform_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text(FOREIGN)
    before = path.stat()

    def refuse(text: str) -> str:
        raise ValueError("bad block")

    with pytest.raises(ValueError, match="bad block"):
        SafeFile(path).update(refuse)
    assert path.read_text() == FOREIGN
    assert path.stat().st_mtime_ns == before.st_mtime_ns
    assert [p.name for p in tmp_path.iterdir()] == ["hosts"]


def test_a_symlinked_file_is_updated_through_the_link(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "hosts"
    target.write_text(FOREIGN)
    link = tmp_path / "hosts"
    link.symlink_to(target)
    SafeFile(link).update(lambda text: text + block(1))
    assert link.is_symlink()
    assert target.read_text() == FOREIGN + block(1)


def test_a_missing_file_is_created_world_readable(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    result = SafeFile(path).update(lambda text: text + block(1))
    assert result.changed and path.read_text() == block(1)
    assert path.stat().st_mode & 0o777 == 0o644
    with pytest.raises(SafeFileError, match="does not exist"):
        SafeFile(tmp_path / "absent", method="in-place").update(lambda text: "x\n")
    # Nothing to write: a missing file is not created empty.
    assert not SafeFile(tmp_path / "absent").update(lambda text: text).changed
    assert not (tmp_path / "absent").exists()


def test_bytes_that_are_not_utf8_survive(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_bytes(b"10.0.0.1 caf\xe9.example\n")
    SafeFile(path).update(lambda text: text + "10.0.0.2 b.example\n")
    assert path.read_bytes() == b"10.0.0.1 caf\xe9.example\n10.0.0.2 b.example\n"


# ---------------------------------------------------------------------- concurrent editors

@pytest.mark.parametrize(("method", "point"), [("rename", "temp-written"),
                                                ("in-place", "journal-written")])
def test_an_editors_line_added_just_before_the_swap_survives(tmp_path: Path, method: str,
                                                             point: str) -> None:
    path = tmp_path / "hosts"
    path.write_text(FOREIGN)
    edits = 0

    def editor(at: str) -> None:
        nonlocal edits
        if at == point and edits == 0:
            edits += 1
            with path.open("a") as f:
                f.write("192.0.2.7 added-by-admin\n")

    seen: list[str] = []

    def add_block(text: str) -> str:
        seen.append(text)
        return text.replace(block(1), "") + block(1)

    writer = SafeFile(path, method=method, hook=editor)  # type: ignore[arg-type]
    result = writer.update(add_block)
    assert result.attempts == 2
    assert "192.0.2.7 added-by-admin" in seen[1]
    assert path.read_text() == FOREIGN + "192.0.2.7 added-by-admin\n" + block(1)
    assert not writer.journal_path.exists()
    assert leftovers(tmp_path) == []


def test_an_editor_in_the_middle_of_the_transform_is_merged(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text(FOREIGN)
    calls = 0

    def slow_transform(text: str) -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            with path.open("a") as f:
                f.write("192.0.2.8 also-foreign\n")
        return text + block(2)

    result = SafeFile(path).update(slow_transform)
    assert result.attempts == 2
    assert path.read_text() == FOREIGN + "192.0.2.8 also-foreign\n" + block(2)


@pytest.mark.parametrize("method", ["rename", "in-place"])
def test_a_file_that_never_settles_is_left_alone(tmp_path: Path, method: str) -> None:
    path = tmp_path / "hosts"
    path.write_text(FOREIGN)
    n = 0

    def busy_editor(at: str) -> None:
        nonlocal n
        if at in ("temp-written", "journal-written"):
            n += 1
            path.write_text(FOREIGN + f"# edit {n}\n")

    writer = SafeFile(path, method=method, retries=3, hook=busy_editor)  # type: ignore[arg-type]
    with pytest.raises(ConflictError):
        writer.update(lambda text: text + block(1))
    assert path.read_text() == FOREIGN + "# edit 3\n"
    assert not writer.journal_path.exists()
    assert leftovers(tmp_path) == []


# ---------------------------------------------------------------------- in-place path

@pytest.mark.parametrize(("old", "new"), [(FOREIGN + block(30), FOREIGN + block(2)),
                                          (FOREIGN + block(2), FOREIGN + block(30)),
                                          (FOREIGN + block(3), FOREIGN + block(3, "10.9.9.9"))])
def test_in_place_keeps_the_inode_and_backs_up_the_old_content(tmp_path: Path, old: str,
                                                               new: str) -> None:
    path = tmp_path / "hosts"
    path.write_text(old)
    path.chmod(0o604)
    ino = path.stat().st_ino
    writer = SafeFile(path, method="in-place")
    result = writer.update(lambda text: new)
    assert result.changed and result.method == "in-place"
    assert path.read_text() == new
    assert path.stat().st_ino == ino and path.stat().st_mode & 0o777 == 0o604
    assert writer.backup_path.read_text() == old
    assert not writer.journal_path.exists()
    assert leftovers(tmp_path) == []


def test_in_place_never_leaves_the_file_short_or_ending_in_stale_bytes(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    old, new = (FOREIGN + block(40)).encode(), (FOREIGN + block(3)).encode()
    path.write_bytes(old)
    states: list[tuple[str, bytes]] = []
    writer = SafeFile(path, method="in-place", chunk=64,
                      hook=lambda at: states.append((at, path.read_bytes())))
    writer.update(lambda text: new.decode())
    full = padded(new, len(old))
    mid = [data for at, data in states if at == "chunk-written"]
    assert len(mid) > 3  # the seam really split the write
    for data in mid:
        assert len(data) == len(old)
        assert all(b in (o, f) for b, o, f in zip(data, old, full, strict=True))
    assert dict(states)["padded-written"] == full
    assert dict(states)["truncated"] == new
    assert path.read_bytes() == new


def test_in_place_leaves_bytes_before_the_change_untouched(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text(FOREIGN + block(5))
    writes: list[tuple[int, int]] = []
    real_pwrite = os.pwrite

    def spy(fd: int, data: bytes, offset: int) -> int:
        writes.append((offset, len(data)))
        return real_pwrite(fd, data, offset)

    writer = SafeFile(path, method="in-place")
    os.pwrite = spy  # type: ignore[assignment]
    try:
        writer.update(lambda text: FOREIGN + block(6))
    finally:
        os.pwrite = real_pwrite
    file_writes = [w for w in writes if w[0] > 0]
    assert file_writes and min(offset for offset, _ in file_writes) >= len(FOREIGN)


def test_a_wrong_read_back_restores_the_backup(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    old = FOREIGN + block(4)
    path.write_text(old)

    def scribble(at: str) -> None:
        if at == "padded-written":
            with path.open("r+b") as f:
                f.write(b"XXXX")

    writer = SafeFile(path, method="in-place", hook=scribble)
    with pytest.raises(VerifyError):
        writer.update(lambda text: FOREIGN + block(2))
    assert path.read_text() == old
    assert not writer.journal_path.exists()


def _crash_at(path: Path, old: str, new: str, point: str, after: int = 1) -> SafeFile:
    path.write_text(old)
    seen = 0

    def hook(at: str) -> None:
        nonlocal seen
        if at == point:
            seen += 1
            if seen == after:
                raise Crash(at)

    writer = SafeFile(path, method="in-place", chunk=64, hook=hook)
    with pytest.raises(Crash):
        writer.update(lambda text: new)
    assert writer.journal_path.exists()
    return writer


@pytest.mark.parametrize(("point", "old", "new", "outcome"), [
    ("journal-written", FOREIGN + block(9), FOREIGN + block(2), "not-started"),
    ("chunk-written", FOREIGN + block(9), FOREIGN + block(2), "rolled-back"),
    ("chunk-written", FOREIGN + block(2), FOREIGN + block(9), "rolled-back"),
    ("padded-written", FOREIGN + block(9), FOREIGN + block(2), "completed"),
    ("truncated", FOREIGN + block(9), FOREIGN + block(2), "completed"),
    ("verified", FOREIGN + block(2), FOREIGN + block(9), "completed"),
])
def test_recover_resolves_an_interrupted_rewrite(tmp_path: Path, point: str, old: str, new: str,
                                                 outcome: str) -> None:
    path = tmp_path / "hosts"
    _crash_at(path, old, new, point, after=3 if point == "chunk-written" else 1)
    torn = path.read_text()
    if outcome == "rolled-back":
        assert torn not in (old, new)
    fresh = SafeFile(path)
    assert fresh.recover() == outcome
    assert path.read_text() == (old if outcome in ("not-started", "rolled-back") else new)
    # What was rolled back is kept beside the backup, never silently dropped.
    if outcome == "rolled-back":
        assert fresh.torn_path.read_text() == torn
    else:
        assert not fresh.torn_path.exists()
    assert not fresh.journal_path.exists()
    assert fresh.recover() == "clean"


def test_the_next_update_recovers_first(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    old, new = FOREIGN + block(9), FOREIGN + block(2)
    _crash_at(path, old, new, "chunk-written", after=2)
    result = SafeFile(path).update(lambda text: text.replace(block(9), block(2)))
    assert result.recovered == "rolled-back"
    assert path.read_text() == new


def test_recover_refuses_when_the_backup_does_not_match(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    writer = _crash_at(path, FOREIGN + block(9), FOREIGN + block(2), "chunk-written", after=2)
    torn = path.read_bytes()
    writer.backup_path.write_text("something else\n")
    with pytest.raises(RecoveryError, match="does not hold"):
        SafeFile(path).recover()
    assert path.read_bytes() == torn
    assert writer.journal_path.exists()
    writer.journal_path.write_text("{not json")
    with pytest.raises(RecoveryError, match="unreadable"):
        SafeFile(path).update(lambda text: text)


def test_backup_and_journal_can_live_elsewhere(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "state").mkdir()
    path = tmp_path / "etc" / "hosts"
    path.write_text(FOREIGN)
    writer = SafeFile(path, method="in-place", state_dir=tmp_path / "state")
    writer.update(lambda text: text + block(1))
    assert [p.name for p in (tmp_path / "etc").iterdir()] == ["hosts"]
    assert (tmp_path / "state" / ("hosts" + BACKUP_SUFFIX)).read_text() == FOREIGN


def test_no_in_place_rewrite_without_a_backup(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text(FOREIGN)
    writer = SafeFile(path, method="in-place", state_dir=tmp_path / "missing")
    with pytest.raises(SafeFileError, match="cannot write the backup"):
        writer.update(lambda text: text + block(1))
    assert path.read_text() == FOREIGN


def test_stale_temporary_files_are_cleaned_up(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text(FOREIGN)
    stale = tmp_path / f".hosts{TEMP_MARK}deadbeef"
    stale.write_text("half")
    other = tmp_path / ".unrelated"
    other.write_text("keep")
    assert SafeFile(path).recover() == "clean"
    assert not stale.exists() and other.exists()


# ---------------------------------------------------------------------- a real bind mount

def _can_bind_mount() -> str:
    if os.geteuid() != 0:
        return "needs root to bind-mount"
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "needs unshare(1) and mount(8)"
    with tempfile.TemporaryDirectory() as d:
        src, target = Path(d) / "src", Path(d) / "target"
        src.write_text("src\n")
        target.write_text("target\n")
        probe = subprocess.run(["unshare", "-m", "--propagation", "private", "mount", "--bind",
                                str(src), str(target)],
                               capture_output=True, timeout=30, check=False)
    if probe.returncode != 0:
        return f"cannot bind-mount in a private mount namespace: {probe.stderr.decode().strip()}"
    return ""


BIND_SKIP = _can_bind_mount()
needs_bind = pytest.mark.skipif(bool(BIND_SKIP), reason=BIND_SKIP or "ok")

_BIND_SCRIPT = """
import subprocess, sys
from hairpin_proxy.safefile import SafeFile, SafeFileError
src, target, method, new = sys.argv[1:5]
subprocess.run(["mount", "--bind", src, target], check=True)
try:
    result = SafeFile(target, method=method).update(lambda text: new)
    print(result.method)
except SafeFileError as exc:
    print("refused:", exc)
"""


@needs_bind
@pytest.mark.parametrize("method", ["auto", "rename"])
def test_a_bind_mounted_file_is_rewritten_in_place(tmp_path: Path, method: str) -> None:
    src, target = tmp_path / "node-hosts", tmp_path / "hosts"
    src.write_text(FOREIGN)
    target.write_text("placeholder under the mount\n")
    ino = src.stat().st_ino
    new = FOREIGN + block(3)
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c",
                           _BIND_SCRIPT, str(src), str(target), method, new],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    if method == "auto":
        assert proc.stdout.strip() == "in-place"
        assert src.read_text() == new and src.stat().st_ino == ino
        assert (tmp_path / ("hosts" + BACKUP_SUFFIX)).read_text() == FOREIGN
    else:
        assert proc.stdout.startswith("refused:") and "Device or resource busy" in proc.stdout
        assert src.read_text() == FOREIGN
    assert target.read_text() == "placeholder under the mount\n"
    assert leftovers(tmp_path) == []


# ---------------------------------------------------------------------- SIGKILL at random

A = FOREIGN + block(3)
B = FOREIGN + "# another foreign line\n" + block(120, "10.96.0.11")  # several pages


class Killer:
    """Drives tests/etchosts/killable_writer.py: start a writer, kill it, look at the file."""

    def __init__(self, tmp_path: Path, method: str, *, chunk: int = 0, pause_max: float = 0.0,
                 bind: bool = False) -> None:
        self.path = tmp_path / "hosts"
        self.seen = self.path  # where the test reads the file from
        self.path.write_text(A)
        (tmp_path / "a").write_text(A)
        (tmp_path / "b").write_text(B)
        cmd = [sys.executable, str(WRITER), "--path", str(self.path), "--method", method,
               "--a", str(tmp_path / "a"), "--b", str(tmp_path / "b"), "--chunk", str(chunk),
               "--pause-max", str(pause_max)]
        if bind:
            self.seen = tmp_path / "node-hosts"
            self.seen.write_text(A)
            cmd = ["unshare", "-m", "--propagation", "private", *cmd, "--bind", str(self.seen)]
        self.journal = self.path.with_name("hosts" + JOURNAL_SUFFIX)
        self.backup = self.path.with_name("hosts" + BACKUP_SUFFIX)
        self.child = 0
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)
        assert self._line() == "ready"

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line, "writer helper died"
        return line

    def _send(self, cmd: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()

    def run_and_kill(self, delay: float, stop_at: int = 0) -> str:
        """Start a writer; kill it after ``delay`` or when stopped at hook point ``stop_at``.

        Returns the point it was stopped at ("" for a kill after a delay).
        """
        self._send(f"go {stop_at}" if stop_at else "go")
        pid, point = 0, ""
        while not pid or (stop_at and not point):
            line = self._line()
            kind, _, value = line.partition(" ")
            assert kind in ("pid", "at") and value, line
            if kind == "pid":
                pid = int(value)
            else:
                point = value
        self.child = pid
        if not stop_at:
            time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
        status = int(self._line().split()[1])
        self.child = 0  # reaped: the pid may be reused
        # Died of our SIGKILL, not of an error of its own.
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        return point

    def recover(self) -> str:
        self._send("recover")
        kind, outcome = self._line().split()
        assert kind == "outcome"
        return outcome

    def close(self) -> None:
        if self.child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.child, signal.SIGKILL)
        if self.proc.poll() is None:
            self._send("quit")
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def killers() -> Iterator[list[Killer]]:
    made: list[Killer] = []
    yield made
    for k in made:
        k.close()


ITERATIONS = 250
# Seconds per variant past the first MIN_ITERATIONS, which run however long they take: a
# loaded machine does fewer iterations, never fails for being slow.
BUDGET = 45.0
MIN_ITERATIONS = 60


def test_rename_path_killed_at_random_leaves_old_or_new_and_readers_see_nothing_else(
        tmp_path: Path, killers: list[Killer]) -> None:
    k = Killer(tmp_path, "rename")
    killers.append(k)
    a, b = A.encode(), B.encode()
    bad: list[bytes] = []
    reads = 0
    stop = threading.Event()

    def reader() -> None:
        nonlocal reads
        while not stop.is_set():
            data = k.path.read_bytes()
            reads += 1
            if data not in (a, b):
                bad.append(data)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    found: Counter[str] = Counter()
    deadline = time.monotonic() + BUDGET
    done = 0
    try:
        while done < ITERATIONS and (done < MIN_ITERATIONS or time.monotonic() < deadline):
            k.run_and_kill(random.uniform(0, 0.02))
            done += 1
            data = k.path.read_bytes()
            assert data in (a, b)
            found["a" if data == a else "b"] += 1
    finally:
        stop.set()
        thread.join(timeout=30)
    assert done >= MIN_ITERATIONS
    assert bad == []
    assert reads > done
    assert found["a"] and found["b"]
    # A kill between creating and renaming the temporary file leaves it; the next start
    # removes it (rename path: never a journal).
    assert k.recover() == "clean"
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(("variant", "chunk", "pause"), [
    ("forced", 0, 0.0),
    ("forced-seams", 512, 0.002),
    ("bind-mount", 512, 0.002),
])
def test_in_place_path_killed_at_random_always_recovers_to_old_or_new(
        tmp_path: Path, killers: list[Killer], variant: str, chunk: int, pause: float) -> None:
    """Kills after a random delay; with the seams, every other kill lands at a random step."""
    if variant == "bind-mount" and BIND_SKIP:
        pytest.skip(BIND_SKIP)
    k = Killer(tmp_path, "auto" if variant == "bind-mount" else "in-place", chunk=chunk,
               pause_max=pause, bind=variant == "bind-mount")
    killers.append(k)
    a, b = A.encode(), B.encode()
    allowed = {a, b, padded(a, len(b))}
    states: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    deadline = time.monotonic() + BUDGET
    done = 0
    points: Counter[str] = Counter()
    while done < ITERATIONS and (done < MIN_ITERATIONS or time.monotonic() < deadline):
        targeted = bool(pause) and done % 2 == 1
        point = k.run_and_kill(random.uniform(0, 0.03 if pause else 0.015),
                               stop_at=random.randint(1, 40) if targeted else 0)
        points[point] += 1
        done += 1
        data = k.seen.read_bytes()
        if not k.journal.exists():
            # The documented promise: without a journal the file is exactly old or new.
            assert data in (a, b)
            states["exact"] += 1
            continue
        state = "exact" if data in (a, b) else "padded" if data in allowed else "torn"
        states[state] += 1
        if state != "torn" or outcomes["rolled-back"] == 0 or states["torn"] % 2:
            # Recover here; the other torn files are left to the next writer's first update.
            outcome = k.recover()
            outcomes[outcome] += 1
            assert outcome == "rolled-back" if state == "torn" else outcome != "rolled-back"
            assert k.seen.read_bytes() in (a, b)
            assert not k.journal.exists()
    outcomes[k.recover()] += 1
    assert done >= MIN_ITERATIONS
    assert k.seen.read_bytes() in (a, b)
    assert k.backup.read_bytes() in (a, b)
    assert not k.journal.exists() and leftovers(tmp_path) == []
    assert states["exact"] > 0
    if pause:
        # With the seams the kills really land mid-write, and recovery really rolls back.
        assert states["torn"] > 0 and outcomes["rolled-back"] > 0
        assert points["chunk-written"] > 0
    print(variant, done, json.dumps({"states": states, "outcomes": outcomes, "points": points}))
