"""The targets table as the relay uses it: its slots as listeners, each relaying to its
upstream, and noticing that the file changed (polling).

The controller writes the table (ConfigMap ``hairpin-proxy-targets``, key ``targets.json``);
the kubelet mounts it into the proxy pods, and the relay reads it every ``--targets-poll``
seconds. Each slot is a target with up to two listeners (plain HTTP and TLS) on ``[::]``;
``server.TableListeners`` turns a decoded table into listeners without a restart. What a
table is (fields, ranges, the port plan) is decided by ``hairpin_proxy.targets.table``, the
decoder the controller's encoder is checked against: the relay has no second opinion.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from pathlib import Path

from hairpin_proxy.relay.spec import ListenerSpec
from hairpin_proxy.targets import table as shared

log = logging.getLogger("hairpin_proxy.relay")

TableSlot = shared.TableEntry
# Bounds on the work one poll can cause: a larger file is refused unread beyond this.
MAX_TABLE_BYTES = shared.MAX_TEXT


class TableError(ValueError):
    """A table that cannot be applied. ``reason`` is the metric label: ``unreadable`` (no
    file, no permission), ``malformed`` (not a table the shared decoder accepts),
    ``conflict`` (valid, but its ports clash with ``--listen`` or cannot be bound now)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


REASONS = ("unreadable", "malformed", "conflict")


def load_table(data: bytes) -> tuple[TableSlot, ...]:
    """The slots of a table file's contents, or TableError("malformed", why)."""
    try:
        return shared.decode(data)
    except shared.TableError as exc:
        raise TableError("malformed", str(exc)) from None


def slot_listeners(slot: TableSlot, host: str = "::") -> list[tuple[ListenerSpec, str | None]]:
    """(spec, advertised address or None) of each listener a slot has: ``[host]:listen[i]``
    relaying to ``upstream:ports[i]``, absent where that port is 0."""
    out = []
    for listen, port, adv in zip(slot.listen, slot.ports, slot.advertise_ports, strict=True):
        if port:
            out.append((ListenerSpec(host, listen, slot.upstream, port, slot.proxy,
                                     adv or None), slot.advertise_address or None))
    return out


# --------------------------------------------------------------------------- polling

Stamp = tuple[int, int, int]  # (inode, size, mtime in ns): changes when the kubelet swaps files


def read_if_changed(path: Path, last: Stamp | None) -> tuple[Stamp, bytes | None]:
    """(the file's stamp, its contents, or None when the stamp is ``last``); OSError when it
    cannot be read; TableError when it is too large to be a table. Blocking: run off the
    event loop."""
    st = path.stat()
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    if stamp == last:
        return stamp, None
    with path.open("rb") as f:
        data = f.read(MAX_TABLE_BYTES + 1)
    if len(data) > MAX_TABLE_BYTES:
        raise TableError("malformed", f"larger than {MAX_TABLE_BYTES} bytes")
    return stamp, data


class TableWatcher:
    """Polls the table file and hands every new table to ``apply``.

    Bounded work per poll: one stat; the file is read only when its stamp changed, and
    decoded only when its content hash differs from the last table handled. A table that is
    refused is reported once (``refused(reason, detail)``), not at every poll; one that could
    not be bound (a port taken by another process) is tried again at every poll.
    """

    def __init__(self, path: Path, apply: Callable[[tuple[TableSlot, ...]], None],
                 refused: Callable[[str, str], None]) -> None:
        self.path = path
        self.apply = apply
        self.refused = refused
        self.loaded = False  # a table has been applied
        self._stamp: Stamp | None = None
        self._digest: bytes | None = None
        # The refusal last reported, with the content it was about (None: the file's absence
        # or a failure to read it).
        self._reported: tuple[bytes | None, str] | None = None

    async def run(self, period: float) -> None:
        while True:
            await self.poll()
            await asyncio.sleep(period)

    async def poll(self) -> None:
        try:
            try:
                stamp, data = await asyncio.to_thread(read_if_changed, self.path, self._stamp)
            except FileNotFoundError:
                self._stamp = self._digest = None
                if not self.loaded:
                    # Normal until the controller has written its first table.
                    self._report(None, f"no targets table at {self.path} yet; only the "
                                       "--listen listeners serve")
                    return
                raise
            except OSError as exc:
                self._stamp = self._digest = None
                raise TableError("unreadable", f"cannot read it: {exc.strerror or exc}"
                                 ) from None
            if data is None:
                return
            digest = hashlib.sha256(data).digest()
            if digest == self._digest:
                self._stamp = stamp
                return
            self._stamp, self._digest = stamp, digest
            slots = load_table(data)
            try:
                self.apply(slots)
            except TableError as exc:
                if exc.reason == "conflict":
                    self._stamp = self._digest = None  # try again: the port may come free
                raise
        except FileNotFoundError:
            self._stamp = self._digest = None
            self._report("unreadable", "the file is gone; keeping the last good table")
            return
        except TableError as exc:
            self._report(exc.reason, exc.detail)
            return
        self.loaded = True
        self._reported = None

    def _report(self, reason: str | None, detail: str) -> None:
        key = (self._digest, detail)
        if key == self._reported:
            return
        self._reported = key
        if reason is None:
            log.info(detail, extra={"targets_file": str(self.path)})
        else:
            self.refused(reason, detail)
