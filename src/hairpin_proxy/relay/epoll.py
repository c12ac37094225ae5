"""The data path: plain sockets driven from one edge-triggered epoll set (Linux).

For short connections asyncio's machinery costs more than the kernel work it wraps: a
transport per socket, a Task and a Future for the connect, a handful of callbacks. Here the
event loop watches a single epoll descriptor; a connection is one object with a handler per
socket, and each step is one direct system call. The loop still runs everything else (timers,
the resolver, the admin endpoint, signals).

Readiness is edge-triggered, so a socket is read until a short read says its buffer is empty,
and a short read once the peer's FIN has been reported is the end of the stream without
another ``recv`` (after urgent data or an error, reads go on to EAGAIN instead). A direction
gives the loop back after a few reads and is resumed by it. Flow control: a direction holds at
most one read that its receiver has not taken, and reads nothing more from its source until
that is sent.

A direction that has moved ``--splice-threshold`` bytes in a run of large reads (a stream, not
the many small answers of a keep-alive connection) moves the rest through a pipe with
``splice(2)`` (``_splice``; the pool and the why in ``splice.py``): the same flow control with
the pipe as the one unsent read, except that a short splice does not prove a socket empty (a
pipe fills by slots, not bytes), so a spliced direction reads on to EAGAIN; and a splice that
returns 0 may have stopped at an urgent mark behind which the FIN waits, so ``recv`` (which
reads past the mark) confirms the end.

Every decision that is not about moving bytes (admission, the header, the connect and its
timeout, how an ending is counted and logged, timeouts) is made in ``listener.py``.
"""

from __future__ import annotations

import _socket
import asyncio
import errno
import logging
import os
import select
import socket
import sys
from collections.abc import Callable

from hairpin_proxy.metrics import CounterChild
from hairpin_proxy.relay.listener import (
    HostPort,
    Listener,
    hostport,
    reset_on_close,
    size_buffers,
)
from hairpin_proxy.relay.lookup import Address, ConnectError
from hairpin_proxy.relay.splice import FLAGS as _SPLICE_FLAGS
from hairpin_proxy.relay.splice import Pipe, PipePool

log = logging.getLogger("hairpin_proxy.relay")

READ_SIZE = 256 * 1024
# Reads per direction before other connections, timers and the admin endpoint get a turn;
# a fast bulk stream would otherwise keep the loop for as long as it lasts.
READS_PER_TURN = 16
# A read at least this large continues a direction's run towards the splice threshold; a
# smaller one ends it. Splicing small answers saves nothing and costs a pipe's extra calls.
STREAM_READ = 16 * 1024
ACCEPT_BATCH = 64  # accepts per report, so that one busy listener cannot starve the rest
ACCEPT_RETRY = 1.0  # seconds a listener rests after the process ran out of descriptors

_IN = select.EPOLLIN
_OUT = select.EPOLLOUT
_RDHUP = select.EPOLLRDHUP
_HUP = select.EPOLLHUP
_ERR = select.EPOLLERR
_PRI = select.EPOLLPRI
_IN_OUT = _IN | _OUT
_READABLE = _IN | _RDHUP | _HUP | _ERR
_WRITABLE = _OUT | _HUP | _ERR
# Registered once per socket and never modified: edge-triggered readiness both ways means no
# epoll_ctl call when a direction blocks or drains.
_WATCH = _IN | _OUT | _RDHUP | _PRI | select.EPOLLET
_DONTWAIT = socket.MSG_DONTWAIT
_SEND = socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL
_splice = getattr(os, "splice", None)
_OUT_OF_DESCRIPTORS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
# accept(2): errors of the connection being accepted, not of the listener; take the next one.
_ACCEPT_SKIP = {errno.ECONNABORTED, errno.EPROTO, errno.EPERM, errno.ENETDOWN, errno.ENOPROTOOPT,
                errno.EHOSTDOWN, errno.ENONET, errno.EHOSTUNREACH, errno.EOPNOTSUPP,
                errno.ENETUNREACH}

Handler = Callable[[int], None]
# The sockets of relayed connections are the C type itself, not ``socket.socket``: that
# subclass adds a Python ``__init__`` and ``close`` (and two attributes) to each of them, for
# a makefile() the relay never calls. Measured per connection in benchmarks-analysis.md.
Sock = _socket.socket


class Poller:
    """One epoll set, watched by the event loop; passes readiness on to per-socket handlers.

    A socket let go of during a batch of reports is closed only after the batch: otherwise a
    new connection could be given its descriptor number while reports for the old one are
    still waiting in the batch.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, pipes: PipePool | None = None) -> None:
        self.loop = loop
        # Where a direction starts to splice (bytes it has moved); never without a pool.
        self.pipes = pipes
        self.splice_at = pipes.threshold if pipes is not None else sys.maxsize
        self.epoll = select.epoll()
        self.handlers: dict[int, Handler] = {}
        self.dispatching = False
        self.closing: list[Sock] = []
        # One read buffer for every connection: a read is sent on before the next one.
        self.view = memoryview(bytearray(READ_SIZE))
        loop.add_reader(self.epoll.fileno(), self.dispatch)

    def watch(self, fd: int, handler: Handler, events: int = _WATCH) -> None:
        self.epoll.register(fd, events)
        self.handlers[fd] = handler

    def unwatch(self, fd: int) -> None:
        if self.handlers.pop(fd, None) is not None:
            self.epoll.unregister(fd)

    def release(self, sock: Sock) -> None:
        """Stop reporting on ``sock`` and close it (after the current batch, if in one)."""
        self.handlers.pop(sock.fileno(), None)
        if self.dispatching:
            self.closing.append(sock)
        else:
            sock.close()

    def dispatch(self) -> None:
        handlers = self.handlers
        self.dispatching = True
        try:
            for fd, events in self.epoll.poll(0, 256):
                handler = handlers.get(fd)
                if handler is None:
                    continue
                try:
                    handler(events)
                except Exception:  # a bug must cost one connection, not the whole batch
                    owner = getattr(handler, "__self__", None)
                    if isinstance(owner, RelayedConnection):
                        owner.crashed()
                    else:
                        log.exception("internal error while accepting connections")
        finally:
            self.dispatching = False
            if self.closing:
                closing, self.closing = self.closing, []
                for sock in closing:
                    sock.close()

    def close(self) -> None:
        self.loop.remove_reader(self.epoll.fileno())
        self.epoll.close()
        if self.pipes is not None:
            self.pipes.close()


class Acceptor:
    """Accepts connections on one listening socket for the Listener it serves."""

    def __init__(self, poller: Poller, listener: Listener, sock: socket.socket) -> None:
        self.poller = poller
        self.listener = listener
        self.sock = sock
        self.fd = sock.fileno()
        self.open = True
        self.local: HostPort | None = None
        self.serve(listener)
        # Level-triggered: whatever one batch leaves in the queue is reported again.
        poller.watch(self.fd, self.ready, _IN)

    def serve(self, listener: Listener) -> None:
        """Accept for ``listener`` from now on (the targets table changed this slot); the
        socket stays open, so no client meets a closed port meanwhile."""
        self.listener = listener
        # A listener bound to one address (or advertising a fixed one) knows every header's
        # destination already; a wildcard one asks the kernel per connection.
        self.local = listener.fixed_destination(self.sock.getsockname())

    def ready(self, events: int) -> None:
        # socket.accept() wraps this in Python: 2-3 µs of user time per connection more
        # (interleaved pairs); the socket object is built here the same way.
        accept = self.sock._accept  # type: ignore[attr-defined]  # -> (fd, address)
        family = self.sock.family
        # An IPv4 socket's accept gives (host, port) as headers, logs and the per-source cap
        # want it; only IPv6 addresses need hostport's unmapping and zone removal.
        plain = family == socket.AF_INET
        poller, listener, local = self.poller, self.listener, self.local
        for _ in range(ACCEPT_BATCH):
            try:
                fd, addr = accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _OUT_OF_DESCRIPTORS:
                    self._rest(exc)
                    return
                if exc.errno in _ACCEPT_SKIP:
                    continue
                log.warning("cannot accept a connection: %s", exc.strerror or exc,
                            extra={"listener": listener.spec.name, "cause": "accept_error"})
                return
            start(poller, listener, Sock(family, socket.SOCK_STREAM, 0, fd),
                  addr if plain else hostport(addr), local)

    def _rest(self, exc: OSError) -> None:
        # Level-triggered, the queue would be reported again at once: spinning, not waiting.
        log.warning("cannot accept connections: %s; pausing this listener for %gs",
                    exc.strerror or exc, ACCEPT_RETRY,
                    extra={"listener": self.listener.spec.name, "cause": "accept_error"})
        self.poller.unwatch(self.fd)
        self.poller.loop.call_later(ACCEPT_RETRY, self._resume)

    def _resume(self) -> None:
        if self.open and self.fd not in self.poller.handlers:
            self.poller.watch(self.fd, self.ready, _IN)

    def close(self) -> None:
        if self.open:
            self.open = False
            self.poller.unwatch(self.fd)
            self.sock.close()


def start(poller: Poller, listener: Listener, client: Sock, peer: HostPort | None,
          local: HostPort | None) -> None:
    """A client just accepted from ``peer``: refuse it over the limit, else connect upstream
    for it."""
    source = peer[0] if listener.live.per_source and peer else None
    if not listener.admit(source):
        client.close()
        return
    if local is None:
        try:
            local = listener.destination(client.getsockname())
        except OSError:  # reset before we got here
            client.close()
            listener.dropped(source)
            return
    loop = poller.loop
    now = loop.time()
    try:
        conn = RelayedConnection(poller, listener, client, peer, local, now=now)
    except BaseException:
        client.close()
        listener.dropped(source)
        raise
    listener.opened(conn, peer)
    try:
        addr = listener.address
        if addr is None:
            addr = listener.cached_address(now)
        if addr is not None:
            conn.connect_to(addr)
        else:
            conn.task = loop.create_task(conn.resolve_and_connect())
    except Exception:
        conn.crashed()


class Peer:
    """One of the two parties of a relayed connection (the client, or the upstream the relay
    connected to for it): our socket to it and what it has done so far."""

    __slots__ = ("eof", "hup", "nbytes", "pending", "pipe", "piped", "read", "role", "shut",
                 "sock", "streak", "total", "write")

    def __init__(self, role: str, sock: Sock, total: CounterChild, *,
                 read: bool, write: bool) -> None:
        self.role = role
        self.sock = sock
        self.total = total  # the listener's byte counter for what this socket sends us
        self.read = read  # readiness to read, not used up yet
        self.write = write  # readiness to write, not used up yet
        self.hup = False  # the peer's FIN has been reported
        self.eof = False  # ... and read: nothing more will come from this socket
        self.shut = False  # our FIN has been sent to it
        self.pending = b""  # bytes for this socket that it has not taken yet
        self.pipe: Pipe | None = None  # the pipe its direction splices through, if it does
        self.piped = 0  # bytes for this socket in that pipe (never with ``pending``)
        self.nbytes = 0  # bytes read from it
        self.streak = 0  # bytes of its current run of reads of STREAM_READ or more


class RelayedConnection:
    """A client's connection and the upstream connection made for it, relayed to each other."""

    __slots__ = ("accepted_at", "addr", "client", "connected", "done", "idle_bytes",
                 "idle_since", "listener", "peername", "poller", "sockname", "task", "thorough",
                 "timer", "unblocked", "upstream")

    def __init__(self, poller: Poller, listener: Listener, client: Sock,
                 peername: HostPort | None, sockname: HostPort | None, *, now: float) -> None:
        self.poller = poller
        self.listener = listener
        self.client = Peer("client", client, listener.stats.bytes_up, read=True, write=True)
        self.upstream: Peer | None = None
        self.addr: Address | None = None
        self.peername = peername
        self.sockname = sockname
        self.accepted_at = self.idle_since = now
        self.idle_bytes = 0
        self.connected = False
        # A short read proves a buffer empty only until TCP urgent data (a read stops at its
        # mark) or an error (data queued before a reset is read first, and the reset is
        # reported by the next read) has been reported; from then on reads go to EAGAIN.
        self.thorough = False
        self.unblocked = False  # the client's socket made non-blocking (for splice)
        self.done = False  # both sockets closed (or being closed); nothing more to report
        self.timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None

    def moved(self) -> int:
        upstream = self.upstream
        return self.client.nbytes + (upstream.nbytes if upstream is not None else 0)

    def client_bytes(self) -> int:
        return self.client.nbytes

    def half_closed(self) -> bool:
        upstream = self.upstream
        return self.client.eof or (upstream is not None and upstream.eof)

    def _upstream(self, sock: Sock) -> Peer:
        self.upstream = Peer("upstream", sock, self.listener.stats.bytes_down, read=False,
                             write=True)
        return self.upstream

    # ------------------------------------------------------------------ connecting

    def connect_to(self, addr: Address) -> None:
        """Start a non-blocking connect to an address (on loopback usually done at once)."""
        self.addr = addr
        try:
            sock = Sock(addr[0], socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
        except OSError as exc:
            self._connect_failed(exc)
            return
        self._upstream(sock)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.listener.socket_buffer:
                size_buffers(sock, self.listener.socket_buffer)
            rc = sock.connect_ex(addr[1])
        except OSError as exc:
            self._connect_failed(exc)
            return
        if rc not in (0, errno.EINPROGRESS):
            self._connect_failed(OSError(rc, os.strerror(rc)))
            return
        self._begin()
        if not self.connected and not self.done:
            loop = self.poller.loop
            self.timer = loop.call_at(self.listener.deadline(self.accepted_at), self._expire)

    async def resolve_and_connect(self) -> None:
        """A named upstream: the resolver picks the address (round robin, failover) and
        connects; the connected socket is then relayed like any other."""
        try:
            sock = await self.listener.connect()
        except ConnectError as exc:
            self.task = None
            self.abort(exc.cause, exc.detail)
            return
        self.task = None
        if self.done:
            sock.close()
            return
        self._upstream(sock)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            self.lost("upstream", exc)
            return
        try:
            self._established()
            self._begin()
        except Exception:
            self.crashed()

    def _begin(self) -> None:
        """Both sockets exist: queue the header (with what the client sent so far) and watch."""
        client, upstream = self.client, self.upstream
        assert upstream is not None
        header = self.listener.header(self.peername, self.sockname)
        if header is None:
            self.close()
            return
        # The client's first bytes usually wait already: they go in the header's send.
        view = self.poller.view
        try:
            n = client.sock.recv_into(view, READ_SIZE, _DONTWAIT)
        except BlockingIOError:
            client.read = False
            upstream.pending = header
        except OSError as exc:
            self.lost("client", exc)
            return
        else:
            if n == 0:
                client.eof = True
            elif n < READ_SIZE:
                client.read = False  # watching it reports anything that arrived since
            client.nbytes += n
            client.total.value += n
            upstream.pending = header + view[:n]
        poller = self.poller
        try:
            poller.watch(client.sock.fileno(), self.client_ready)
            poller.watch(upstream.sock.fileno(), self.upstream_ready)
        except OSError as exc:  # the kernel's limit on watched descriptors, or memory
            self.listener.error("io_error",
                                f"cannot watch the connection: {exc.strerror or exc}",
                                self.peername)
            self.close()
            return
        self._move(client, upstream)
        if self.connected and not self.done:
            self._move(upstream, client)

    def _expire(self) -> None:
        self.timer = None
        if not self.connected:
            try:
                self._connect_failed(None)
            except Exception:
                self.crashed()

    def _connect_failed(self, exc: BaseException | None) -> None:
        assert self.addr is not None
        err = self.listener.connect_failed(self.addr, exc)
        self.abort(err.cause, err.detail)

    def _established(self) -> None:
        self.connected = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.listener.connected(self.accepted_at, self.poller.loop.time())

    # ------------------------------------------------------------------ readiness

    def client_ready(self, events: int) -> None:
        client, upstream = self.client, self.upstream
        assert upstream is not None
        if events == _IN_OUT:  # the common report: bytes to read, room to write
            client.read = client.write = True
            self._move(client, upstream)
            if (client.pending or client.piped) and not self.done:
                self._move(upstream, client)
            return
        if events & _ERR and not self.connected:
            # Nothing reads the client before the upstream answers; a reset must not wait.
            self.lost("client", _pending_error(client.sock, errno.ECONNRESET))
            return
        self._note(client, events)
        if events & _READABLE:
            self._move(client, upstream)
        # Writability matters only to a direction holding bytes its receiver did not take.
        if events & _WRITABLE and (client.pending or client.piped) and not self.done:
            self._move(upstream, client)
        if events & _ERR and not self.done:
            self._unreached_error(client)

    def upstream_ready(self, events: int) -> None:
        client, upstream = self.client, self.upstream
        assert upstream is not None
        if events == _IN_OUT and self.connected:
            upstream.read = upstream.write = True
            self._move(upstream, client)
            if (upstream.pending or upstream.piped) and not self.done:
                self._move(client, upstream)
            return
        self._note(upstream, events)
        # Until the header is out, what the upstream says waits (it may speak first).
        if events & _READABLE and self.connected:
            self._move(upstream, client)
        if events & _WRITABLE and (upstream.pending or upstream.piped) and not self.done:
            self._move(client, upstream)
        if events & _ERR and not self.done:
            self._unreached_error(upstream)

    def _unreached_error(self, side: Peer) -> None:
        """An error (a reset, mostly) the moves did not get to: its direction waits for a
        slow receiver. What the side sent can no longer matter; end the pair now rather
        than when the receiver catches up or the idle timeout strikes."""
        self.lost(side.role, _pending_error(side.sock, errno.ECONNRESET))

    def _note(self, side: Peer, events: int) -> None:
        """Take in a readiness report that is not the common one."""
        if events & (_PRI | _ERR):
            self.thorough = True
        if events & _READABLE:
            side.read = True
            if events & (_RDHUP | _HUP) and not events & _ERR:
                side.hup = True
        if events & _WRITABLE:
            side.write = True

    def _move(self, src: Peer, dst: Peer) -> None:
        """Move what ``src`` sends to ``dst`` until one of them has to wait."""
        if (dst.pipe is not None or (src.streak >= self.poller.splice_at and src.read
                                     and self.connected and not dst.pending
                                     and not src.eof and not self.thorough)
                ) and self._splice(src, dst):
            return
        budget = READS_PER_TURN
        while not self.done:
            if dst.pending:
                if not dst.write:
                    return
                data = dst.pending
                try:
                    n = dst.sock.send(data, _SEND)
                except BlockingIOError:
                    dst.write = False
                    return
                except OSError as exc:
                    if self.connected:
                        self.lost(dst.role, exc)
                    else:
                        self._connect_failed(exc)
                    return
                if not self.connected:
                    # The header is out, so the upstream has accepted; it may have spoken.
                    self._established()
                    if dst.read:
                        self._move(dst, src)
                        if self.done:
                            return
                if n < len(data):
                    dst.pending = data[n:]
                    dst.write = False
                    return
                dst.pending = b""
            if src.eof:
                self._pass_eof(src, dst)
                return
            if not src.read:
                return
            if not budget:
                self.poller.loop.call_soon(self._again)
                return
            budget -= 1
            view = self.poller.view
            try:
                n = src.sock.recv_into(view, READ_SIZE, _DONTWAIT)
            except BlockingIOError:
                src.read = False
                return
            except OSError as exc:
                self.lost(src.role, exc)
                return
            if n == 0:
                src.eof = True
                continue
            src.nbytes += n
            src.total.value += n
            src.streak = src.streak + n if n >= STREAM_READ else 0
            if n < READ_SIZE and not self.thorough:
                if src.hup:
                    src.eof = True  # the FIN came after everything just read
                else:
                    src.read = False
            try:
                sent = dst.sock.send(view[:n], _SEND)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                self.lost(dst.role, exc)
                return
            if sent < n:
                dst.pending = bytes(view[sent:n])
                dst.write = False
                return
            if not src.read and not src.eof:
                return

    def _pass_eof(self, src: Peer, dst: Peer) -> None:
        """``src`` has finished and everything it sent is with ``dst``: tell ``dst``."""
        if not dst.shut:
            dst.shut = True
            if src.shut:
                # Both directions have ended and both receive queues are empty: closing
                # sends the FIN that a shutdown would (a system call less).
                self.close()
                return
            try:
                dst.sock.shutdown(socket.SHUT_WR)
            except OSError as exc:
                self.lost(dst.role, _pending_error(dst.sock, exc.errno))

    def _splice(self, src: Peer, dst: Peer) -> bool:
        """``_move`` through a pipe: what ``src`` sends goes to ``dst`` without entering user
        space. False when no pipe is to be had, or urgent data has been reported or may be
        waiting (a splice stops at its mark for good; only ``recv`` reads past it): then the
        caller copies."""
        pool = self.poller.pipes
        assert pool is not None and _splice is not None
        pipe = dst.pipe
        if pipe is None:
            pipe = pool.take()
            if pipe is None:
                return False
            dst.pipe = pipe
            if not self.unblocked:
                # SPLICE_F_NONBLOCK covers the pipe only: a blocking socket would block.
                self.unblocked = True
                self.client.sock.setblocking(False)
        budget = READS_PER_TURN
        while not self.done:
            if dst.piped:
                if not dst.write:
                    return True
                try:
                    n = _splice(pipe.r, dst.sock.fileno(), dst.piped, None, None, _SPLICE_FLAGS)
                except BlockingIOError:
                    dst.write = False
                    return True
                except OSError as exc:
                    self.lost(dst.role, exc)
                    return True
                dst.piped -= n
                if dst.piped:  # a short splice into a socket ends on a full send buffer
                    dst.write = False
                    return True
            if src.eof or not src.read or self.thorough:
                dst.pipe = None  # empty, and its direction idle: back to the pool
                pool.give(pipe, empty=True)
                if src.eof:
                    self._pass_eof(src, dst)
                    return True
                return not self.thorough
            if not budget:
                self.poller.loop.call_soon(self._again)
                return True
            budget -= 1
            try:
                n = _splice(src.sock.fileno(), pipe.w, pool.capacity, None, None,
                            _SPLICE_FLAGS)
            except BlockingIOError:
                src.read = False
                continue
            except OSError as exc:
                self.lost(src.role, exc)
                return True
            if n == 0:
                # The end, or a splice stopped at an urgent mark after the FIN came, which
                # says 0 as well: recv tells them apart (once, at the end of a direction).
                self.thorough = True
                continue
            src.nbytes += n
            src.total.value += n
            src.streak = src.streak + n if n >= STREAM_READ else 0
            dst.piped = n
        return True

    def _again(self) -> None:
        """Carry on after yielding the loop: no new edge comes for bytes already waiting."""
        client, upstream = self.client, self.upstream
        if upstream is None:
            return
        try:
            if not self.done:
                self._move(client, upstream)
            if self.connected and not self.done:
                self._move(upstream, client)
        except Exception:
            self.crashed()

    # ------------------------------------------------------------------ ending

    def lost(self, side: str, exc: OSError) -> None:
        """A socket failed: count it, and pass a reset on to the other side."""
        if self.done:
            return
        self.listener.lost(self.peername, side, exc)
        self.close(reset=True)

    def abort(self, cause: str, detail: str, *, quiet: bool = False) -> None:
        """End both sides now (no upstream, idle timeout, shutdown), counted under ``cause``;
        ``quiet`` skips the log line."""
        if self.done:
            return
        self.listener.error(cause, detail, self.peername, quiet=quiet)
        self.close()

    def crashed(self) -> None:
        """A bug surfaced while handling this connection: log it and end the connection."""
        log.exception("internal error while relaying; closing the connection",
                      extra={"listener": self.listener.spec.name})
        try:
            self.abort("io_error", "internal error", quiet=True)
        except Exception:  # even then the batch must go on
            log.exception("internal error while closing a connection")

    def close(self, reset: bool = False) -> None:
        """Close both sockets; ``reset`` sends a reset rather than a FIN."""
        if self.done:
            return
        self.done = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.task is not None:
            self.task.cancel()
            self.task = None
        poller = self.poller
        upstream = self.upstream
        for side in (self.client, upstream):
            if side is None:
                continue
            if reset:
                reset_on_close(side.sock)
            poller.release(side.sock)
            if side.pipe is not None:
                assert poller.pipes is not None
                poller.pipes.give(side.pipe, empty=not side.piped)
                side.pipe = None
        self.listener.closed(self, self.peername, self.client.nbytes,
                          upstream.nbytes if upstream is not None else 0)


def _pending_error(sock: Sock, fallback: int | None) -> OSError:
    """The error the kernel holds for ``sock`` (as a reset would leave it), else ``fallback``.

    A call such as ``shutdown`` on a socket already reset fails with ENOTCONN, which says
    nothing about why: the reset itself is still pending on the socket.
    """
    try:
        code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    except OSError:
        code = 0
    if not code:
        code = errno.ECONNRESET if fallback in (None, errno.ENOTCONN) else fallback
    return OSError(code, os.strerror(code))
