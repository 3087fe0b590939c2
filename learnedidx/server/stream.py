"""The data stream of one call on a connection: the server asks the caller for passes over its
data and reads them (docs/protocol.md, "The data stream of indb.train").

The caller is a PostgreSQL backend (``extension/learnedidx.c``) that sends, per pass, a JSON
``begin`` frame, per relation a JSON ``relation`` frame and binary page frames (the page path)
or binary row frames (the query path), and a JSON ``end`` frame.  While the call computes the
caller sends nothing, so the connection becoming readable means it closed: the caller's
statement was cancelled, timed out or ended, or its database went away; :meth:`CallStream.watch`
turns that into the call's stop flag.
"""
from __future__ import annotations

import contextlib
import os
import select
import socket
import struct
import threading
from typing import Iterator

import numpy as np

from learnedidx.errors import CancelledError, ProtocolError
from learnedidx.server import protocol as P

#: Control frame: b"S", reader (0: as the caller chose, 1: the query path), 2 bytes of padding,
#: the pass number (u32 big-endian), then a UTF-8 reason when the reader is the query path.
CONTROL = struct.Struct(">cBxxI")
AS_CHOSEN, QUERY = 0, 1
#: Data frame sub-headers: pages (b"P", padding, count; then count block numbers, padded to
#: 8 bytes, then the pages) and rows (b"R", padding, rows, floats per row, padding).
PAGES = struct.Struct(">c3xI")
ROWS = struct.Struct(">c3xII4x")
PAGE_SIZE = 8192
POLL_SECONDS = 0.1  #: how often a computing call looks at its connection


class CallStream:
    """The stream frames of one request on connection ``sock``."""

    def __init__(self, sock: socket.socket, max_message: int) -> None:
        self.sock = sock
        self.max_message = max_message
        self.closed = threading.Event()  #: the caller is gone (or the server stops): stop working
        self.in_pass = False

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

    def request_pass(self, number: int, query: bool = False, why: str = "") -> Iterator[tuple[str, object]]:
        """Ask for pass ``number`` (on the query path when ``query``, telling the caller ``why``)
        and yield its frames: ("begin", {...}), ("relation", {...}), ("pages", (blocks, pages)),
        ("rows", rows × floats), ("end", {...})."""
        if self.closed.is_set():
            raise self._gone()
        self.sock.sendall(P.encode_binary(P.CONTROL, CONTROL.pack(b"S", QUERY if query else AS_CHOSEN, number)
                                          + why.encode()))
        self.in_pass = True
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
            elif flags == P.DATA and payload[:1].tobytes() == b"P" and len(payload) >= PAGES.size:
                _, count = PAGES.unpack_from(payload)
                start = PAGES.size + (count * 4 + 7) // 8 * 8
                if len(payload) != start + count * PAGE_SIZE:
                    raise ProtocolError("a page frame of the wrong size")
                blocks = payload[PAGES.size:PAGES.size + 4 * count].view(">u4")
                yield "pages", (blocks, payload[start:].reshape(count, PAGE_SIZE))
            elif flags == P.DATA and payload[:1].tobytes() == b"R" and len(payload) >= ROWS.size:
                _, rows, width = ROWS.unpack_from(payload)
                if width == 0 or len(payload) != ROWS.size + rows * width * 8:
                    raise ProtocolError("a row frame of the wrong size")
                yield "rows", payload[ROWS.size:].view("<f8").reshape(rows, width)
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

    @contextlib.contextmanager
    def watch(self):
        """While the body runs, a thread sets :attr:`closed` as soon as the caller's connection
        closes (or sends anything, which it must not while the call computes)."""
        wake_r, wake_w = os.pipe()  # ends the watch at once

        def run() -> None:
            poller = select.poll()
            poller.register(self.sock, select.POLLIN | select.POLLHUP | select.POLLERR | select.POLLRDHUP)
            poller.register(wake_r, select.POLLIN)
            while not self.closed.is_set():
                events = dict(poller.poll(POLL_SECONDS * 1000))
                if wake_r in events:
                    return
                if events:
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
