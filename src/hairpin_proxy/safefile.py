"""Crash-safe replacement of a small text file that others edit too (the node's hosts file).

``SafeFile.update(transform)`` reads the file, computes the new text from that fresh content,
and replaces it only when the text changes, retrying when someone else changed the file between
the read and the write. Two ways to replace it:

* rename: temporary file in the same directory, fsync, mode/owner/xattrs copied, rename over
  the file, fsync the directory. Readers see the old or the new file, nothing else.
* in place, for a file that is itself a mount point (rename fails with EBUSY, EXDEV or EPERM)
  or when forced: back the old content up beside the file (fsynced), record a journal, then
  overwrite so the file is never shorter than its content needs and never ends in stale bytes
  (the new text is padded with comment lines to the old length, the padding truncated last),
  read it back, and restore from the backup if it differs. ``recover()`` finishes or undoes an
  interrupted rewrite from the journal. docs/etchosts.md states the exact guarantees.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import secrets
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

log = logging.getLogger("hairpin_proxy.safefile")

Method = Literal["auto", "rename", "in-place"]
Used = Literal["rename", "in-place"]
Outcome = Literal["clean", "not-started", "completed", "rolled-back"]
Hook = Callable[[str], None]

BACKUP_SUFFIX = ".hairpin-proxy.bak"
JOURNAL_SUFFIX = ".hairpin-proxy.journal"
TORN_SUFFIX = ".hairpin-proxy.torn"
TEMP_MARK = ".hairpin-proxy-tmp."

# rename(2) onto a bind-mounted file fails with EBUSY; EXDEV and EPERM come from overlay and
# container set-ups that forbid replacing the name.
_RENAME_IMPOSSIBLE = frozenset({errno.EBUSY, errno.EXDEV, errno.EPERM})
# The directory can be read-only while the mounted file itself is writable.
_DIR_UNWRITABLE = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


class SafeFileError(Exception):
    """The file was left as it was (or restored); the message says why."""


class ConflictError(SafeFileError):
    """The file kept changing under us; nothing was written."""


class VerifyError(SafeFileError):
    """An in-place rewrite read back wrong; the old content was restored from the backup."""


class RecoveryError(SafeFileError):
    """An interrupted in-place rewrite could not be resolved; the journal is kept."""


class _Changed(Exception):
    pass


class _RenameImpossible(Exception):
    def __init__(self, cause: OSError) -> None:
        super().__init__(str(cause))
        self.cause = cause


def padded(content: bytes, size: int) -> bytes:
    """``content`` lengthened to ``size`` bytes with lines a hosts-file reader ignores.

    The filler is one line of ``#`` (a comment however a reader splits long lines) or, for a
    single byte, an empty line; a missing final newline is added first so the last line keeps
    its meaning.
    """
    gap = size - len(content)
    if gap <= 0:
        return content
    pad = b""
    if content and not content.endswith(b"\n"):
        pad, gap = b"\n", gap - 1
    if gap == 1:
        pad += b"\n"
    elif gap > 1:
        pad += b"#" * (gap - 1) + b"\n"
    return content + pad


def changed_range(current: bytes, target: bytes) -> tuple[int, int]:
    """The [start, end) byte range of ``target`` that differs from ``current``.

    Bytes outside it are never rewritten, so foreign lines ahead of our block are not touched
    at all. Only meaningful when ``len(target) >= len(current)`` (padding ensures that).
    """
    limit = min(len(current), len(target))
    start = 0
    while start < limit and current[start] == target[start]:
        start += 1
    end = len(target)
    if len(target) == len(current):
        while end > start and current[end - 1] == target[end - 1]:
            end -= 1
    return start, end


def _digest(data: bytes) -> dict[str, Any]:
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


StatKey = tuple[int, int, int, int, int]


def stat_key(st: os.stat_result) -> StatKey:
    """Device, inode, size, mtime and ctime: a write or a replacement changes at least one."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True)
class Snapshot:
    """The file's bytes and the stat fields that tell whether it changed since."""

    data: bytes
    exists: bool
    key: StatKey | None = None  # None when the file does not exist
    mode: int = 0o644
    uid: int = 0
    gid: int = 0

    @property
    def text(self) -> str:
        # surrogateescape: bytes that are not UTF-8 survive the round trip unchanged.
        return self.data.decode("utf-8", "surrogateescape")

    def same_stat(self, st: os.stat_result) -> bool:
        return self.exists and stat_key(st) == self.key


@dataclass(frozen=True)
class Result:
    changed: bool
    method: Used | None
    attempts: int
    before: Snapshot
    after: bytes
    recovered: Outcome = "clean"


def encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _read_fd(fd: int) -> bytes:
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, 1 << 16, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    done = 0
    while done < len(data):
        done += os.pwrite(fd, data[done:], offset + done)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _copy_xattrs(source: Path, fd: int) -> None:
    # SELinux labels and ACLs matter on some nodes; copy what the kernel lets us, quietly.
    try:
        names = os.listxattr(source)
    except OSError:
        return
    for name in names:
        with contextlib.suppress(OSError):
            os.setxattr(fd, name, os.getxattr(source, name))


class SafeFile:
    """One file kept up to date crash-safely; see the module docstring.

    ``state_dir`` holds the in-place backup and journal (default: the file's directory).
    ``hook`` and ``chunk`` are test seams: ``hook(point)`` runs at each step, and a non-zero
    ``chunk`` splits in-place writes into writes of that many bytes with a hook between them.
    """

    def __init__(self, path: Path | str, *, method: Method = "auto",
                 state_dir: Path | str | None = None, retries: int = 5,
                 hook: Hook | None = None, chunk: int = 0) -> None:
        # Follow symlinks: replacing a link with a regular file would surprise the system.
        self.path = Path(os.path.realpath(path))
        self.method = method
        self.state_dir = Path(state_dir) if state_dir is not None else self.path.parent
        self.backup_path = self.state_dir / (self.path.name + BACKUP_SUFFIX)
        self.journal_path = self.state_dir / (self.path.name + JOURNAL_SUFFIX)
        self.torn_path = self.state_dir / (self.path.name + TORN_SUFFIX)
        self.retries = retries
        self._hook_fn = hook
        self._chunk = chunk
        self._in_place = method == "in-place"

    def _hook(self, point: str) -> None:
        if self._hook_fn is not None:
            self._hook_fn(point)

    # ------------------------------------------------------------------ reading

    def read(self) -> Snapshot:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return Snapshot(b"", exists=False)
        try:
            st = os.fstat(fd)
            data = _read_fd(fd)
        finally:
            os.close(fd)
        return Snapshot(data, True, stat_key(st), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)

    def _unchanged(self, snap: Snapshot) -> bool:
        """Whether the file still is exactly what ``snap`` saw (stat fields and content)."""
        fresh = self.read()
        if not snap.exists:
            return not fresh.exists
        return fresh.exists and fresh.key == snap.key and fresh.data == snap.data

    # ------------------------------------------------------------------ updating

    def update(self, transform: Callable[[str], str]) -> Result:
        """Replace the file with ``transform(current text)`` unless that changes nothing.

        ``transform`` is called on the freshest content of each attempt; whatever it raises
        propagates and nothing is written.
        """
        recovered = self.recover()
        for attempt in range(1, self.retries + 1):
            snap = self.read()
            new = encode(transform(snap.text))
            # An absent file reads as empty: one that would stay empty is not created.
            if new == snap.data:
                return Result(False, None, attempt, snap, new, recovered)
            try:
                used = self._write(snap, new)
            except _Changed:
                log.info("file changed while we wrote; merging again",
                         extra={"path": str(self.path), "attempt": attempt})
                continue
            return Result(True, used, attempt, snap, new, recovered)
        raise ConflictError(f"{self.path} kept changing during {self.retries} attempts; "
                            "left as it is")

    def _write(self, snap: Snapshot, new: bytes) -> Used:
        if not self._in_place:
            try:
                self._write_rename(snap, new)
                return "rename"
            except _RenameImpossible as exc:
                if self.method == "rename":
                    raise SafeFileError(f"cannot replace {self.path} by rename: {exc}") from None
                log.info("cannot replace the file by rename; rewriting it in place from now on",
                         extra={"path": str(self.path), "reason": str(exc)})
                self._in_place = True
        self._write_in_place(snap, new)
        return "in-place"

    def _create_temp(self, directory: Path) -> tuple[int, Path]:
        name = f".{self.path.name}{TEMP_MARK}{secrets.token_hex(6)}"
        tmp = directory / name
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        return fd, tmp

    def _atomic_write(self, target: Path, data: bytes, mode: int) -> None:
        """Replace a file of our own (backup, journal) by rename, durably."""
        fd, tmp = self._create_temp(target.parent)
        try:
            _pwrite_all(fd, data, 0)
            os.fchmod(fd, mode)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(fd)
        try:
            tmp.rename(target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(target.parent)

    def _write_all(self, fd: int, data: bytes, offset: int) -> None:
        step = self._chunk or len(data) or 1
        done = 0
        while done < len(data):
            n = os.pwrite(fd, data[done:done + step], offset + done)
            done += n
            if self._chunk and done < len(data):
                self._hook("chunk-written")

    def _write_rename(self, snap: Snapshot, new: bytes) -> None:
        directory = self.path.parent
        try:
            fd, tmp = self._create_temp(directory)
        except OSError as exc:
            if exc.errno in _DIR_UNWRITABLE:
                raise _RenameImpossible(exc) from None
            raise
        keep: Path | None = tmp
        try:
            try:
                self._write_all(fd, new, 0)
                if snap.exists:
                    if (snap.uid, snap.gid) != (os.geteuid(), os.getegid()):
                        try:
                            os.fchown(fd, snap.uid, snap.gid)
                        except PermissionError as exc:
                            # A file we cannot give back its owner is better rewritten in place.
                            raise _RenameImpossible(exc) from None
                    os.fchmod(fd, snap.mode)
                    _copy_xattrs(self.path, fd)
                else:
                    os.fchmod(fd, 0o644)
                os.fsync(fd)
            finally:
                os.close(fd)
            self._hook("temp-written")
            if not self._unchanged(snap):
                raise _Changed
            try:
                tmp.rename(self.path)
            except OSError as exc:
                if exc.errno in _RENAME_IMPOSSIBLE:
                    raise _RenameImpossible(exc) from None
                raise
            keep = None
            self._hook("renamed")
            _fsync_dir(directory)
        finally:
            if keep is not None:
                keep.unlink(missing_ok=True)

    def _overwrite(self, fd: int, current: bytes, target: bytes, stage: str = "") -> None:
        """Make the file behind ``fd`` (holding ``current``) hold ``target``, in place.

        One pass writes ``target`` padded to at least the current length, so at no instant is
        the file shorter than needed or does it end in stale bytes of the old content; the
        padding is truncated only afterwards.
        """
        full = padded(target, len(current))
        start, end = changed_range(current, full)
        self._write_all(fd, full[start:end], start)
        self._hook(stage + "padded-written")
        if len(full) > len(target):
            os.ftruncate(fd, len(target))
            self._hook(stage + "truncated")
        os.fsync(fd)

    def _write_in_place(self, snap: Snapshot, new: bytes) -> None:
        if not snap.exists:
            raise SafeFileError(f"{self.path} does not exist; an in-place rewrite needs it")
        # O_RDWR without O_TRUNC: the file is never emptied, not even for an instant.
        fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        try:
            try:
                self._atomic_write(self.backup_path, snap.data, snap.mode & 0o666)
            except OSError as exc:
                # No backup, no in-place rewrite: a torn file could not be undone.
                raise SafeFileError(f"cannot write the backup {self.backup_path} ({exc}); "
                                    "an in-place rewrite needs a writable state "
                                    "directory") from None
            self._hook("backup-written")
            journal = {"file": str(self.path), "old": _digest(snap.data),
                       "new": _digest(new), "padded": _digest(padded(new, len(snap.data)))}
            self._atomic_write(self.journal_path, json.dumps(journal).encode() + b"\n", 0o600)
            self._hook("journal-written")
            # Last look before the first byte changes: same inode under the name, same content.
            try:
                moved = not snap.same_stat(self.path.stat())
            except FileNotFoundError:
                moved = True
            if moved or not snap.same_stat(os.fstat(fd)) or _read_fd(fd) != snap.data:
                self._remove_journal()
                raise _Changed
            self._overwrite(fd, snap.data, new)
            back = _read_fd(fd)
            if back != new:
                log.error("in-place rewrite read back wrong; restoring the backup",
                          extra={"path": str(self.path), "backup": str(self.backup_path)})
                self._overwrite(fd, back, snap.data, "restore-")
                if _read_fd(fd) != snap.data:
                    raise RecoveryError(f"{self.path}: restoring {self.backup_path} failed; "
                                        f"journal {self.journal_path} kept")
                self._remove_journal()
                raise VerifyError(f"{self.path} read back wrong after an in-place rewrite; "
                                  "the previous content was restored")
            self._hook("verified")
            self._remove_journal()
            self._hook("done")
        finally:
            os.close(fd)

    def _remove_journal(self) -> None:
        self.journal_path.unlink(missing_ok=True)
        _fsync_dir(self.journal_path.parent)

    # ------------------------------------------------------------------ recovery

    def _remove_stale_temps(self) -> None:
        prefix = f".{self.path.name}{TEMP_MARK}"
        for directory in {self.path.parent, self.state_dir}:
            with contextlib.suppress(OSError):
                for entry in os.scandir(directory):
                    if entry.name.startswith(prefix):
                        with contextlib.suppress(OSError):
                            Path(entry.path).unlink()

    def recover(self) -> Outcome:
        """Finish or undo an in-place rewrite that a crash or an error interrupted.

        The journal names the old (= backup), new and padded contents by hash. The file
        holding the new or old content needs nothing; the padded one is truncated (it already
        means the new content); anything else is a torn write and the backup is restored.
        """
        self._remove_stale_temps()
        try:
            raw = self.journal_path.read_bytes()
        except FileNotFoundError:
            return "clean"
        try:
            journal = json.loads(raw)
            old, new, full = journal["old"], journal["new"], journal["padded"]
            for part in (old, new, full):
                if not isinstance(part["size"], int) or not isinstance(part["sha256"], str):
                    raise TypeError("bad digest")
        except (ValueError, KeyError, TypeError) as exc:
            raise RecoveryError(f"journal {self.journal_path} is unreadable ({exc}); "
                                f"compare {self.path} with {self.backup_path} and delete "
                                "the journal") from None
        fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        try:
            current = _read_fd(fd)
            found = _digest(current)
            outcome: Outcome
            if found == new:
                outcome = "completed"
            elif found == old:
                outcome = "not-started"
            elif found == full:
                os.ftruncate(fd, new["size"])
                os.fsync(fd)
                if _digest(_read_fd(fd)) != new:
                    raise RecoveryError(f"{self.path}: truncating the padding failed")
                outcome = "completed"
            else:
                try:
                    backup = self.backup_path.read_bytes()
                except OSError as exc:
                    raise RecoveryError(f"{self.path} is torn and {self.backup_path} is "
                                        f"unreadable: {exc}") from None
                if _digest(backup) != old:
                    raise RecoveryError(f"{self.path} is torn and {self.backup_path} does "
                                        "not hold the content it was taken from")
                # Kept for inspection: an edit made between the crash and now cannot be told
                # from a torn write, and must not vanish without a trace.
                self._atomic_write(self.torn_path, current, 0o600)
                self._overwrite(fd, current, backup, "recover-")
                if _read_fd(fd) != backup:
                    raise RecoveryError(f"{self.path}: restoring {self.backup_path} failed")
                outcome = "rolled-back"
        finally:
            os.close(fd)
        log.log(logging.WARNING if outcome == "rolled-back" else logging.INFO,
                "resolved an interrupted in-place rewrite",
                extra={"path": str(self.path), "outcome": outcome,
                       **({"torn_copy": str(self.torn_path)} if outcome == "rolled-back"
                          else {})})
        self._remove_journal()
        return outcome
