"""Bulk data without user-space copies: socket -> pipe -> socket with ``splice(2)``.

A direction that has moved more than ``--splice-threshold`` bytes borrows a pipe from the
process's pool and moves its bytes through it: the kernel hands the socket's pages to the pipe
and the pipe's pages to the other socket, so the bytes never cross into the interpreter.
Splicing only pays for streams: taking a pipe and the extra EAGAIN a pipe needs to prove a
socket empty cost more than copying a short exchange (HAProxy's ``splice-auto`` likewise
splices only once a direction behaves as a stream).

A pipe holds at most ``capacity`` bytes (limits.pipe_bytes: one socket buffer, within what the
copying path may hold unsent in user space), and a direction reads into its pipe only when the
pipe is empty, so a stalled spliced direction holds no more than a stalled copying one. A pipe
goes back to the pool once it is empty and its source has nothing more to read, and is closed
rather than pooled when the pool already holds enough idle pipes or the pipe still holds bytes
when its connection ends.

Whether the kernel lets us splice at all (an old kernel, a seccomp profile refusing the call)
is probed once at start (``probe``); the relay copies when it cannot.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import select
import socket
from collections.abc import Callable

from hairpin_proxy.relay.limits import IDLE_PIPES

log = logging.getLogger("hairpin_proxy.relay")

# Not in every Python's fcntl module (3.10+ on Linux has them); the values are Linux's.
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)
# Move the pages rather than copy them where the kernel can; never block on the pipe (the
# sockets are non-blocking themselves: SPLICE_F_NONBLOCK covers only the pipe).
FLAGS = getattr(os, "SPLICE_F_MOVE", 1) | getattr(os, "SPLICE_F_NONBLOCK", 2)

# os.splice(src, dst, count, offset_src, offset_dst, flags)
Splice = Callable[[int, int, int, None, None, int], int]


class Pipe:
    """One pipe of the pool: its read and write ends (non-blocking, close-on-exec)."""

    __slots__ = ("r", "w")

    def __init__(self, r: int, w: int) -> None:
        self.r = r
        self.w = w

    def close(self) -> None:
        for fd in (self.r, self.w):
            with contextlib.suppress(OSError):
                os.close(fd)


class PipePool:
    """At most ``limit`` pipes (lent and idle together) of ``capacity`` bytes each.

    ``take`` gives None when the pool is exhausted or a new pipe cannot be made or sized (the
    per-user pipe page limit, descriptors): that direction then copies, as it would without
    splice, and asks again later.
    """

    def __init__(self, capacity: int, limit: int, threshold: int, *,
                 idle_limit: int = IDLE_PIPES) -> None:
        self.capacity = capacity
        self.limit = limit
        self.threshold = threshold  # bytes a direction moves by copying before it splices
        self.idle_limit = idle_limit
        self.idle: list[Pipe] = []
        self.lent = 0
        self.failure: str | None = None  # why a new pipe could not be made (logged once)

    @property
    def open(self) -> int:
        """Pipes that exist now: lent out or idle."""
        return self.lent + len(self.idle)

    def take(self) -> Pipe | None:
        if self.idle:
            self.lent += 1
            return self.idle.pop()
        if self.lent >= self.limit:
            return None
        try:
            pipe = new_pipe(self.capacity)
        except OSError as exc:
            if self.failure is None:
                log.warning("cannot make a pipe to splice through; streams that find no pipe "
                            "are copied", extra={"error": exc.strerror or str(exc),
                                                 "pipes": self.open})
            self.failure = exc.strerror or str(exc)
            return None
        self.lent += 1
        return pipe

    def give(self, pipe: Pipe, *, empty: bool) -> None:
        """A pipe back from its direction: kept for reuse when it is ``empty`` and the pool
        has room for it, else closed (bytes a pipe holds at close are never read)."""
        self.lent -= 1
        if empty and len(self.idle) < self.idle_limit:
            self.idle.append(pipe)
        else:
            pipe.close()

    def close(self) -> None:
        idle, self.idle = self.idle, []
        for pipe in idle:
            pipe.close()


def new_pipe(capacity: int) -> Pipe:
    """A pipe of ``capacity`` bytes (the kernel rounds it up to a power of two pages), or
    OSError."""
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        fcntl.fcntl(w, F_SETPIPE_SZ, capacity)
    except OSError:
        os.close(r)
        os.close(w)
        raise
    return Pipe(r, w)


def probe(capacity: int, splice: Splice | None = None) -> str | None:
    """None when this process may splice from a TCP socket into a pipe of ``capacity`` bytes
    and from there into a TCP socket; else why not, in words for the one log line.

    Run once at start over loopback. ``splice`` stands in for ``os.splice`` (tests refuse it
    as a seccomp profile would).
    """
    call = splice if splice is not None else getattr(os, "splice", None)
    if call is None:
        return "this Python has no os.splice"
    try:
        pipe = new_pipe(capacity)
    except OSError as exc:
        return f"cannot make a pipe of {capacity} bytes: {exc.strerror or exc}"
    try:
        a, b = _tcp_pair()
    except OSError as exc:
        pipe.close()
        return f"cannot connect over loopback to probe it: {exc.strerror or exc}"
    try:
        a.sendall(b"probe")
        select.select([b], [], [], 5)  # loopback delivers at once; never wait long
        n = call(b.fileno(), pipe.w, capacity, None, None, FLAGS)
        if n != 5:
            return f"splice from a socket moved {n} bytes of 5"
        n = call(pipe.r, a.fileno(), 5, None, None, FLAGS)
        if n != 5:
            return f"splice to a socket moved {n} bytes of 5"
        if b.recv(16) != b"probe":
            return "splice did not pass the bytes on"
    except OSError as exc:
        return f"splice(2) failed: {exc.strerror or exc}"
    finally:
        a.close()
        b.close()
        pipe.close()
    return None


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    """Two connected TCP sockets over loopback (IPv4, else IPv6), blocking, 5 s timeouts."""
    try:
        lsn = socket.create_server(("127.0.0.1", 0))
    except OSError:
        lsn = socket.create_server(("::1", 0), family=socket.AF_INET6)
    with lsn:
        a = socket.create_connection(lsn.getsockname()[:2], timeout=5)
        try:
            lsn.settimeout(5)
            b, _ = lsn.accept()
        except OSError:
            a.close()
            raise
    b.settimeout(5)
    return a, b
