"""The portable data path: each relayed connection a pair of asyncio protocols.

Each half is an asyncio Protocol that writes what it receives straight into the other half's
transport. When a transport's write buffer passes its high-water mark, the *other* half stops
reading until it drains, so a slow reader holds at most a bounded buffer per direction. EOF from
one side becomes a write EOF (shutdown(SHUT_WR)) on the other; the pipe closes once both
directions have ended. A reset on either side is passed on as a reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
from collections.abc import Callable
from typing import cast

from hairpin_proxy.metrics import CounterChild
from hairpin_proxy.relay.resolve import Address, ConnectError, attempt_failure, gave_up
from hairpin_proxy.relay.route import HostPort, Route, hostport, reset_on_close, size_buffers

# Per direction a pipe buffers at most HIGH_WATER plus one read (256 KiB in asyncio and uvloop).
HIGH_WATER = 256 * 1024
LOW_WATER = 64 * 1024


class TransportEngine:
    """Listeners as asyncio servers; each connection a pair of protocols."""

    name = "transports"

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.servers: list[asyncio.AbstractServer] = []

    async def listen(self, route: Route, sock: socket.socket, backlog: int) -> None:
        fixed = route.fixed_destination(sock.getsockname())

        def make() -> asyncio.Protocol:
            return Pipe(route, fixed).client
        self.servers.append(await self.loop.create_server(make, sock=sock, backlog=backlog))

    def stop_accepting(self) -> None:
        for server in self.servers:
            server.close()

    def close(self) -> None:
        self.stop_accepting()


class Half(asyncio.Protocol):
    """One side of a pipe; what it reads goes to the other side's transport."""

    __slots__ = ("blocked", "counter", "eof", "lost", "nbytes", "paused", "peer", "pipe",
                 "role", "transport", "write")

    def __init__(self, pipe: Pipe, role: str, counter: CounterChild) -> None:
        self.pipe = pipe
        self.role = role
        self.counter = counter
        self.transport: asyncio.Transport | None = None
        self.peer: Half | None = None
        # The peer transport's write; until the peer exists, the pipe holds early data.
        self.write: Callable[[bytes], None] = pipe.hold
        self.nbytes = 0
        self.eof = False
        self.lost = False
        self.paused = False  # we stopped reading this side
        self.blocked = False  # this side's write buffer is over the high-water mark

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport but have its methods.
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        transport.set_write_buffer_limits(HIGH_WATER, LOW_WATER)
        if self.role == "client":
            self.pipe.client_made()
        else:
            self.pipe.upstream_made()

    def data_received(self, data: bytes) -> None:
        self.write(data)
        n = len(data)
        self.nbytes += n
        self.counter.value += n

    def eof_received(self) -> bool:
        self.eof = True
        self.pipe.half_eof(self)
        return True  # keep our sending direction open until the peer is done

    def pause_writing(self) -> None:
        self.blocked = True
        peer = self.peer
        if peer is not None and not peer.paused and not peer.eof and not peer.lost:
            peer.paused = True
            peer.transport.pause_reading()  # type: ignore[union-attr]

    def resume_writing(self) -> None:
        self.blocked = False
        peer = self.peer
        if peer is not None and peer.paused and not peer.eof and not peer.lost:
            peer.paused = False
            peer.transport.resume_reading()  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.pipe.half_lost(self, exc)

    def close(self) -> None:
        if self.transport is not None and not self.lost:
            self.transport.close()

    def abort(self, reset: bool = False) -> None:
        if self.transport is None or self.lost:
            return
        if reset:
            reset_on_close(self.transport.get_extra_info("socket"))
        self.transport.abort()


class Pipe:
    """A client connection and the upstream connection made for it."""

    __slots__ = ("accepted_at", "client", "done", "early", "ending", "expired", "idle_bytes",
                 "idle_since", "peername", "route", "sockname", "task", "upstream")

    def __init__(self, route: Route, destination: HostPort | None = None) -> None:
        self.route = route
        self.early = b""
        stats = route.stats
        self.client = Half(self, "client", stats.bytes_up)
        self.upstream = Half(self, "upstream", stats.bytes_down)
        self.task: asyncio.Task[None] | None = None
        self.peername: HostPort | None = None
        self.sockname = destination  # the header's destination, when fixed for the listener
        self.done = False
        self.ending = False  # we decided to close; later losses are not fresh errors
        self.expired = False  # the connect timer cancelled the connect
        self.accepted_at = 0.0
        self.idle_bytes = 0
        self.idle_since = 0.0

    def moved(self) -> int:
        return self.client.nbytes + self.upstream.nbytes

    def client_bytes(self) -> int:
        return self.client.nbytes + len(self.early)

    def half_closed(self) -> bool:
        return self.client.eof or self.upstream.eof

    # ------------------------------------------------------------------ lifecycle

    def client_made(self) -> None:
        route = self.route
        transport = self.client.transport
        assert transport is not None
        peer = self.peername = hostport(transport.get_extra_info("peername"))
        if not route.admit(peer[0] if peer is not None and route.per_source else None):
            self.done = True
            self.ending = True
            transport.abort()
            return
        route.opened(self, peer)
        if self.sockname is None:
            self.sockname = route.destination(transport.get_extra_info("sockname"))
        # Nothing is read from the client until the upstream has its header.
        self.client.paused = True
        transport.pause_reading()
        loop = route.loop or asyncio.get_running_loop()
        self.accepted_at = self.idle_since = loop.time()
        if route.address is not None:
            self.task = loop.create_task(self._connect_to(route.address))
        else:
            self.task = loop.create_task(self._connect())

    async def _connect_to(self, addr: Address) -> None:
        """The connect for an IP-literal target: the resolver's one-address case, inlined.

        Same causes and messages as ``Resolver.open``; without its nested coroutines, timer
        object and per-attempt bookkeeping, which showed in per-connection profiles.
        """
        route = self.route
        loop = route.loop
        assert loop is not None and self.task is not None
        handle = loop.call_later(route.connect_timeout, self._expire)
        try:
            try:
                await loop.create_connection(self._upstream, addr[1][0], addr[1][1],
                                             family=addr[0])
            finally:
                handle.cancel()
        except asyncio.CancelledError:
            if not self.expired or self.task.uncancel() > 0:
                raise  # the client went away (or shutdown), not our timer
            self._gave_up(addr, None)
            return
        except Exception as exc:  # OSError mostly; the client must not wait for nothing
            self._gave_up(addr, exc)
            return
        route.stats.connect_seconds.observe(loop.time() - self.accepted_at)

    def _expire(self) -> None:
        self.expired = True
        if self.task is not None:
            self.task.cancel()

    def _gave_up(self, addr: Address, exc: BaseException | None) -> None:
        spec = self.route.spec
        err = gave_up(spec.target_host, spec.target_port, [attempt_failure(addr, exc)])
        self.fail(err.cause, err.detail)

    async def _connect(self) -> None:
        route = self.route
        spec = route.spec
        try:
            await route.resolver.open(spec.target_host, spec.target_port, route.connect_timeout,
                                      self._upstream, route.loop)
        except ConnectError as exc:
            self.fail(exc.cause, exc.detail)
            return
        except Exception as exc:  # never expected; the client must not wait for nothing
            self.fail("connect_error", f"cannot connect to {spec.target}: {exc!r}")
            return
        loop = route.loop or asyncio.get_running_loop()
        route.stats.connect_seconds.observe(loop.time() - self.accepted_at)

    def _upstream(self) -> asyncio.Protocol:
        return self.upstream

    def upstream_made(self) -> None:
        client, upstream = self.client, self.upstream
        assert upstream.transport is not None and client.transport is not None
        if self.done or self.ending or client.lost:
            upstream.transport.abort()
            return
        if self.route.socket_buffer:
            sock = upstream.transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    size_buffers(sock, self.route.socket_buffer)
        try:
            header = self.route.encode(self.peername, self.sockname)
        except ValueError as exc:  # an address the header cannot carry; never expected
            self.fail("connect_error", f"cannot encode a PROXY header: {exc}")
            upstream.transport.abort()
            return
        # Linked first, so that flow control already covers what the client sent early.
        client.peer, upstream.peer = upstream, client
        client.write = upstream.transport.write
        upstream.write = client.transport.write
        # The header goes out first and at once: some protocols have the server speak first.
        # What the client already sent goes in the same write (one send, one segment).
        if self.early:
            header += self.early
            self.early = b""
        upstream.transport.write(header)
        if client.eof:
            upstream.transport.write_eof()
            return
        if not upstream.blocked:
            client.paused = False
            client.transport.resume_reading()

    def hold(self, data: bytes) -> None:
        """Keep what the client sent before the upstream was there (uvloop reads once even
        when told to pause in connection_made); it follows the header."""
        self.early += data
        transport = self.client.transport
        if transport is not None and not self.ending:
            transport.pause_reading()

    def half_eof(self, half: Half) -> None:
        peer = half.peer
        if peer is None and half.role == "client" and not self.ending:
            return  # passed on once the upstream is connected
        if peer is None or peer.lost:
            half.close()
            return
        if peer.eof:
            # Both directions have ended: close, which still flushes what is buffered.
            self.ending = True
            half.close()
            peer.close()
            return
        assert peer.transport is not None
        if peer.transport.can_write_eof():
            try:
                peer.transport.write_eof()
            except OSError as exc:  # asyncio: at once; uvloop reports it as a loss later
                self.half_lost(peer, exc)  # the peer's failure, not this side's
                peer.abort()
        else:
            self.ending = True
            half.close()
            peer.close()

    def half_lost(self, half: Half, exc: Exception | None) -> None:
        peer = half.peer
        if isinstance(exc, OSError) and exc.errno == errno.ENOTCONN:
            # shutdown() on a socket reset a moment ago: the reset is what happened.
            exc = ConnectionResetError(errno.ECONNRESET, os.strerror(errno.ECONNRESET))
        if exc is not None and not self.ending:
            self.ending = True
            cause = "reset" if isinstance(exc, ConnectionError) else "io_error"
            self.error(cause, f"{half.role} connection lost: {exc}", side=half.role)
            if peer is not None:
                peer.abort(reset=True)
        elif peer is not None and not peer.lost:
            self.ending = True
            peer.close()
        if half.role == "client" and self.task is not None and not self.task.done():
            self.task.cancel()
        if self.client.lost and (self.upstream.transport is None or self.upstream.lost):
            self.finish()

    def finish(self) -> None:
        if self.done:
            return
        self.done = True
        self.route.closed(self, self.peername, self.client.nbytes, self.upstream.nbytes)

    # ------------------------------------------------------------------ ending on purpose

    def fail(self, cause: str, detail: str) -> None:
        """The upstream could not be reached: count, log, and close the client at once."""
        if self.ending:
            return
        self.ending = True
        self.error(cause, detail)
        self.client.abort()

    def abort(self, cause: str, detail: str, *, quiet: bool = False) -> None:
        """End both sides now (idle timeout, shutdown); ``quiet`` counts without a log line."""
        if not self.ending:
            self.ending = True
            self.error(cause, detail, quiet=quiet)
        if self.task is not None and not self.task.done():
            self.task.cancel()
        self.client.abort()
        self.upstream.abort()

    def error(self, cause: str, detail: str, side: str = "", *, quiet: bool = False) -> None:
        self.route.error(cause, detail, self.peername, side, quiet=quiet)
