"""One pass over the caller's data: the frames of the stream in (see
:class:`learnedidx.server.stream.CallStream`), :class:`TrainingData` out.

Frames are decoded on a worker thread, in order, while the next ones arrive (the Numba
kernels release the GIL), so decoding overlaps the backend's scan and the transfer.
"""
from __future__ import annotations

import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable

import numpy as np

from learnedidx.errors import PagesUndecodableError, ProtocolError
from learnedidx.indb.read import strider
from learnedidx.indb.read.strider import Layout
from learnedidx.indb.read.training_data import RowBuffer, TrainingData

LOOKAHEAD = 8  #: frames read ahead of the decoder (each at most 512 KiB)


class _Pass:
    """What one pass has seen so far (touched by the decoding thread only, in frame order)."""

    def __init__(self, buffer: RowBuffer) -> None:
        self.buffer = buffer
        self.layout: Layout | None = None
        self.blocks = 0  # blocks of the current relation, for the first estimate of its rows
        self.estimated = False
        self.width = -1  # elements of the array column, from its first usable row
        self.tuples = 0
        self.skipped = 0
        self.decode_seconds = 0.0  # time the decoding thread worked

    def timed(self, fn, *args) -> None:
        t0 = time.perf_counter()
        fn(*args)
        self.decode_seconds += time.perf_counter() - t0

    def pages(self, layout: Layout, blocks: np.ndarray, pages: np.ndarray) -> None:
        ok, self.width, skipped, (scal, apos, acode) = strider.decode(layout, blocks, pages, self.width)
        self.tuples += len(ok) + skipped
        self.skipped += skipped
        if not self.estimated:  # rows per page so far, times the relation's pages
            self.estimated = True
            self.buffer.expect(self.buffer.n + int((len(ok) + skipped) / len(pages) * self.blocks * 1.05) + 1024)
        if len(ok):
            features = int((layout.out[1:] >= 0).sum()) + (self.width if layout.is_array else 0)
            row0 = self.buffer.reserve(len(ok), features)
            strider.fill_rows(pages, ok, scal, layout.out, apos, acode, max(self.width, 0), self.buffer.y,
                              self.buffer.design, row0)

    def rows(self, rows: np.ndarray) -> None:
        row0 = self.buffer.reserve(len(rows), rows.shape[1] - 1)
        self.buffer.y[row0:row0 + len(rows)] = rows[:, 0]
        self.buffer.design[row0:row0 + len(rows), 1:] = rows[:, 1:]


def read_pass(frames: Iterable[tuple[str, object]], buffer: RowBuffer) -> TrainingData:
    """Decode one pass into ``buffer``.  Raises :class:`PagesUndecodableError` (after reading the
    pass to its end) when the page path met a value only the query path reads."""
    t0 = time.perf_counter()
    state = _Pass(buffer)
    begin: dict = {}
    end: dict = {}
    pending: deque = deque()
    undecodable: PagesUndecodableError | None = None
    form = "scalars"
    with ThreadPoolExecutor(1, thread_name_prefix="learnedidx-decode") as ex:
        def settle(keep: int) -> None:
            nonlocal undecodable
            while len(pending) > keep:
                try:
                    pending.popleft().result()
                except PagesUndecodableError as exc:  # keep reading the pass, decode no more
                    undecodable = exc

        for kind, body in frames:
            if kind == "begin":
                begin = body
            elif kind == "end":
                end = body
            elif undecodable is not None:
                continue
            elif kind == "relation":
                layout = Layout.from_stream(body)
                form = "array" if layout.is_array and len(layout.out) == 2 else "scalars"
                pending.append(ex.submit(_relation, state, layout, int(body["blocks"])))
            elif kind == "pages":
                pending.append(ex.submit(state.timed, lambda b: state.pages(state.layout, *b), body))
            elif kind == "rows":
                pending.append(ex.submit(state.timed, state.rows, body))
            settle(LOOKAHEAD)
        settle(0)
    if undecodable is not None:
        raise undecodable
    path = begin.get("reader")
    if path == "pages":
        if state.tuples != end.get("rows"):
            raise ProtocolError(f"decoded {state.tuples} rows where the backend sent {end.get('rows')}")
        total, skipped = state.tuples, state.skipped
    else:
        total, skipped = int(end.get("rows", 0)), int(end.get("skipped", 0))
        form = str(end.get("form", "scalars"))
    y, design = buffer.finish()
    return TrainingData(y, design, total, skipped, str(path), form, time.perf_counter() - t0, state.decode_seconds,
                        begin.get("why"))


def _relation(state: _Pass, layout: Layout, blocks: int) -> None:
    state.layout, state.blocks, state.estimated = layout, blocks, False
