"""The data stream of one call on a connection: the server asks the caller for passes over its
data and reads them (docs/protocol.md, "The data stream of indb.train").

The caller is a PostgreSQL backend (``extension/offload.c``).  The data travel through a
ring of slots in shared memory that the server creates once per call (a memfd sealed against
shrinking, sent with the first pass request): the backend copies heap pages (the page path) or
float8 rows (the query path) into a free slot and names it in a small data frame; the server
decodes the slot and frees it with a control frame.  No data cross the socket, and the ring's
size, not the table's, bounds the memory in flight.  Per pass the backend also sends a JSON
``begin`` frame, per relation a JSON ``relation`` frame, and a JSON ``end`` frame.

While the call computes the caller sends nothing, so the connection becoming readable means it
closed: the caller's statement was cancelled, timed out or ended, or its database went away;
:meth:`CallStream.watch` turns that into the call's stop flag.
"""
from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import select
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from learnedidx.errors import BadRequestError, CancelledError, ProtocolError
from learnedidx.server import protocol as P

#: Control frames (server to caller): pass requests (b"S", reader: 0 as the caller chose, 1 the
#: query path, plus ANY_ORDER when the call's result does not depend on the rows' order, so that
#: the caller may read the pages with parallel workers; the pass number; then a UTF-8 reason
#: when the reader is the query path), the ring (b"M", its slots and their bytes, the token its
#: backend's parallel workers name to get it too, with the memfd attached), a freed slot (b"F").
CONTROL = struct.Struct(">cBxxI")
RING = struct.Struct(">c3xII16s")
FREE = struct.Struct(">c3xI")
AS_CHOSEN, QUERY, ANY_ORDER = 0, 1, 2
#: The data frame of a filled slot: b"K", kind (b"P" pages, b"R" rows), padding, the slot, its
#: pages or rows, then the pages' visible tuples or the float8 per row; for pages, their block
#: numbers follow (u32 each).
SLOT = struct.Struct(">ccxxIII")
PAGE_SIZE = 8192
RING_SLOTS = 16  #: slots of the ring
SLOT_BYTES = 128 * PAGE_SIZE  #: bytes per slot (1 MiB)
POLL_SECONDS = 0.1  #: how often a computing call looks at its connection

_RINGS: dict[bytes, "CallStream"] = {}  # the rings of the calls in progress, by token
_RINGS_LOCK = threading.Lock()


@dataclass
class Slot:
    """A filled slot, the server's until :meth:`CallStream.release`: ``pages`` (count × 8192
    bytes) with their ``blocks`` and visible ``tuples``, or ``rows`` (count × floats per row)."""

    index: int
    pages: np.ndarray | None = None
    blocks: np.ndarray | None = None
    tuples: int = 0
    rows: np.ndarray | None = None


class CallStream:
    """The stream frames of one request on connection ``sock``."""

    def __init__(self, sock: socket.socket, max_message: int) -> None:
        self.sock = sock
        self.max_message = max_message
        self.closed = threading.Event()  #: the caller is gone (or the server stops): stop working
        self.in_pass = False
        self.passes = 0  # passes started
        self._send = threading.Lock()  # decoding threads free slots while the call reads frames
        self._map: mmap.mmap | None = None
        self._ring: np.ndarray | None = None
        self._held: set[int] = set()  # slots the caller filled and the server has not freed
        self._fd = -1  # the ring's memfd, kept for the caller's parallel workers (indb.ring)
        self.token = b""  # what names the ring to indb.ring
        self.any_order = False  #: the call's result does not depend on the rows' order

    def _gone(self) -> CancelledError:
        self.closed.set()
        return CancelledError("the caller closed the connection (its statement was cancelled, timed out or ended)")

    def _recv_into(self, buf) -> None:
        view = memoryview(buf).cast("B")
        while len(view):
            try:
                n = self.sock.recv_into(view)
            except OSError:
                n = 0
            if n == 0:
                raise self._gone()
            view = view[n:]

    def _frame(self) -> tuple[int, np.ndarray]:
        head = bytearray(P.HEADER.size)
        self._recv_into(head)
        magic, version, flags, length = P.HEADER.unpack(head)
        if magic != P.MAGIC or version != P.VERSION or length > self.max_message:
            raise ProtocolError("malformed frame in the data stream")
        payload = np.empty(length, np.uint8)
        self._recv_into(payload)
        return flags, payload

    def _sendall(self, data: bytes, fds: list[int] | None = None) -> None:
        with self._send:
            try:
                if fds:
                    socket.send_fds(self.sock, [data], fds)
                else:
                    self.sock.sendall(data)
            except OSError:
                raise self._gone() from None

    def _open_ring(self) -> None:
        """Create the ring (a memfd sealed against shrinking, growing and resealing) and send it,
        with the token under which :meth:`send_ring` hands it to the caller's parallel workers."""
        size = RING_SLOTS * SLOT_BYTES
        fd = os.memfd_create("learnedidx-ring", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            self._map = mmap.mmap(fd, size)
            self._ring = np.frombuffer(self._map, np.uint8).reshape(RING_SLOTS, SLOT_BYTES)
            token = os.urandom(16)
            with _RINGS_LOCK:
                self._fd, self.token = fd, token
                _RINGS[token] = self
            fd = -1
            self._sendall(P.encode_binary(P.CONTROL, RING.pack(b"M", RING_SLOTS, SLOT_BYTES, token)), [self._fd])
        finally:
            if fd >= 0:
                os.close(fd)

    def send_ring(self, token: bytes) -> None:
        """Send this connection the ring of the call in progress that ``token`` names (its
        backend's parallel workers copy pages into it; the call's own connection carries every
        frame naming a slot)."""
        with _RINGS_LOCK:
            owner = _RINGS.get(token) if len(token) == 16 else None
            if owner is None or owner.closed.is_set():
                raise BadRequestError("no call in progress holds that ring")
            fd = os.dup(owner._fd)
        try:
            self._sendall(P.encode_binary(P.CONTROL, RING.pack(b"M", RING_SLOTS, SLOT_BYTES, token)), [fd])
        finally:
            os.close(fd)

    def close(self) -> None:
        """Unmap the ring (once nothing refers to it any more)."""
        with _RINGS_LOCK:
            if self.token:
                _RINGS.pop(self.token, None)
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
        self._ring = None
        if self._map is not None:
            with contextlib.suppress(BufferError):
                self._map.close()
                self._map = None

    def release(self, slot: Slot) -> None:
        """Give ``slot`` back to the caller (its data must not be used after)."""
        self._held.discard(slot.index)
        if not self.closed.is_set():
            with contextlib.suppress(CancelledError):
                self._sendall(P.encode_binary(P.CONTROL, FREE.pack(b"F", slot.index)))

    def _slot(self, payload: np.ndarray) -> Slot:
        if len(payload) < SLOT.size:
            raise ProtocolError("a malformed slot frame")
        _, kind, index, count, extra = SLOT.unpack_from(payload)
        if index >= RING_SLOTS or index in self._held or count == 0:
            raise ProtocolError("a slot frame names a slot the caller does not hold")
        data = self._ring[index]
        if kind == b"P" and count * PAGE_SIZE <= SLOT_BYTES and len(payload) == SLOT.size + 4 * count:
            self._held.add(index)
            return Slot(index, pages=data[:count * PAGE_SIZE].reshape(count, PAGE_SIZE),
                        blocks=payload[SLOT.size:].view(">u4"), tuples=extra)
        if kind == b"R" and extra > 0 and count * extra * 8 <= SLOT_BYTES and len(payload) == SLOT.size:
            self._held.add(index)
            return Slot(index, rows=data[:count * extra * 8].view("<f8").reshape(count, extra))
        raise ProtocolError("a malformed slot frame")

    def request_pass(self, number: int, query: bool = False, why: str = "") -> Iterator[tuple[str, object]]:
        """Ask for pass ``number`` (on the query path when ``query``, telling the caller ``why``)
        and yield its frames: ("begin", {...}), ("relation", {...}), ("slot", :class:`Slot`),
        ("end", {...}).  Every slot must be given back with :meth:`release`."""
        if self.closed.is_set():
            raise self._gone()
        if self._ring is None:
            self._open_ring()
        self.passes += 1
        self.in_pass = True  # before the request: the watch must not take the answer for a hang-up
        reader = (QUERY if query else AS_CHOSEN) | (ANY_ORDER if self.any_order else 0)
        self._sendall(P.encode_binary(P.CONTROL, CONTROL.pack(b"S", reader, number) + why.encode()))
        while True:
            flags, payload = self._frame()
            if flags == P.JSON:
                obj = P.parse_json(payload.tobytes())
                ((kind, body),) = obj.items() if len(obj) == 1 else [(None, None)]
                if kind not in ("begin", "relation", "end") or not isinstance(body, dict):
                    raise ProtocolError("unexpected JSON frame in the data stream")
                if kind == "end":
                    self.in_pass = False
                yield kind, body
                if kind == "end":
                    return
            elif flags == P.DATA and payload[:1].tobytes() == b"K":
                yield "slot", self._slot(payload)
            else:
                raise ProtocolError("unexpected frame in the data stream")

    def drain(self, timeout: float = 30.0) -> None:
        """After an error reply in mid-pass: read and drop the rest of the pass, until the
        caller, having read the reply, stops sending and closes the connection."""
        self.sock.settimeout(timeout)
        with contextlib.suppress(OSError, ConnectionError, CancelledError, ProtocolError):
            while True:
                flags, payload = self._frame()
                if flags == P.JSON and b'"end"' in payload[:8].tobytes():
                    return

    def _hung_up(self) -> bool:
        """Whether the caller closed the connection (or sent data, which it does in passes only):
        poll's word may be stale, a pass having read the data since."""
        try:
            self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            pass
        return True

    @contextlib.contextmanager
    def watch(self):
        """While the body runs, a thread sets :attr:`closed` as soon as the caller's connection
        closes (or sends anything outside a pass, which it must not while the call computes;
        in a pass, reading the stream notices a closed connection)."""
        wake_r, wake_w = os.pipe()  # ends the watch at once

        def run() -> None:
            poller = select.poll()
            poller.register(self.sock, select.POLLIN | select.POLLHUP | select.POLLERR | select.POLLRDHUP)
            poller.register(wake_r, select.POLLIN)
            idle = select.poll()
            idle.register(wake_r, select.POLLIN)
            while not self.closed.is_set():
                events = dict((idle if self.in_pass else poller).poll(POLL_SECONDS * 1000))
                if wake_r in events:
                    return
                passes = self.passes
                # data outside a pass: not when a pass began or ended around the look
                if events and not self.in_pass and self._hung_up() and not self.in_pass and passes == self.passes:
                    self.closed.set()

        t = threading.Thread(target=run, name="learnedidx-watch", daemon=True)
        t.start()
        try:
            yield self.closed
        finally:
            os.write(wake_w, b"x")
            t.join()
            os.close(wake_r)
            os.close(wake_w)
