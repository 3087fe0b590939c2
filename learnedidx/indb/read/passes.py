"""Passes over the caller's data as its backend streams them: slots of the stream in, rows out.

:class:`StreamSource` asks for passes (through a ``request`` function, the server's
:meth:`~learnedidx.server.stream.CallStream.request_pass`) and decodes their slots on worker
threads, in parallel and while the next slots arrive (the Numba kernels release the GIL).  Each
slot's rows go to the consumer's function as soon as they are decoded, so computation overlaps
the backend's scan.  The rows of the first pass are kept in memory, in the order the backend
sent them, when they fit the call's memory budget; later passes then read memory.  When they do
not fit, every pass streams from the backend again, and memory is the ring's and one slot's
rows per worker, whatever the table's size.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from learnedidx.errors import PagesUndecodableError, ProtocolError, TooLargeError
from learnedidx.indb.read import memory, strider
from learnedidx.indb.read.strider import Layout

#: ``request(pass number, query path?, why)``: the frames of one pass.
Request = Callable[[int, bool, str], Iterator[tuple[str, object]]]
#: ``fn(y, X)`` of a chunk of rows (``X``: ``lead`` columns of ones, then the features).
ChunkFn = Callable[[np.ndarray, np.ndarray], object]
IN_FLIGHT = 64  #: slots submitted to the workers and not yet settled, at most


@dataclass
class PassStats:
    """What the first pass read."""

    rows_total: int = 0  # rows the caller's SELECT returns
    rows_skipped: int = 0  # rows with a NULL (or a NULL array element), as MADlib skips them
    path: str = ""  # "pages" or "query"
    features_form: str = "scalars"  # "array" (one array column) or "scalars"
    why: str | None = None  # why the page path did not read it, when it did not
    seconds: float = 0.0  # from asking for the first pass to its end
    decode_seconds: float = 0.0  # of which the decoding threads worked (summed)
    passes: int = 0  # passes streamed from the backend in all
    workers: int = 0  # parallel workers that read the pages of a pass, at most (0: the backend read them)
    producers: int = 0  # processes that read the pages of a pass (the backend, or its parallel workers), at most
    produce_seconds: float = 0.0  # their time reading pages, summed over producers and passes
    produce_max: float = 0.0  # the busiest producer's time per pass, summed over passes
    produce_cpu: float = 0.0  # their CPU time, summed

    def add_producers(self, end: dict) -> None:
        """The producers' times a pass's ``end`` frame reports: [seconds, cpu seconds] each."""
        times = end.get("producers")
        if not isinstance(times, list) or not all(isinstance(t, list) and len(t) == 2 for t in times):
            return
        self.producers = max(self.producers, len(times))
        self.workers = max(self.workers, int(end.get("workers", 0)))
        self.produce_seconds += sum(float(t[0]) for t in times)
        self.produce_max += max((float(t[0]) for t in times), default=0.0)
        self.produce_cpu += sum(float(t[1]) for t in times)


class _Cache:
    """The first pass's rows in slot order, within ``budget`` bytes, in a region of
    :mod:`.memory`: each slot reserves as many rows as it has tuples; rows a NULL made unusable
    leave holes, closed at the end."""

    def __init__(self, rows: int, d: int, budget: int) -> None:
        self.d, self.budget = d, budget
        self.n = 0
        self.region, self.y, self.X = self._arrays(rows)
        self.retired: list = []  # regions grown out of, given back with this one

    def _arrays(self, rows: int):
        if rows * (self.d + 1) * 8 > self.budget:
            raise TooLargeError(f"the training data need more than the server's memory limit per call "
                                f"({self.budget:,} bytes; its administrator sets --max-call-memory)")
        at = -(-rows * 8 // 64) * 64  # X starts on a cache line
        region = memory.take(at + rows * self.d * 8)
        return (region, np.frombuffer(region, np.float64, rows),
                np.frombuffer(region, np.float64, rows * self.d, at).reshape(rows, self.d))

    def fits(self, rows: int) -> bool:
        return self.n + rows <= len(self.y)

    def grow(self, rows: int) -> None:
        """Room for ``rows`` more rows beyond the first estimate: the rows move to a larger
        region (no decoding may write meanwhile)."""
        region, y, X = self._arrays(max(self.n + rows, len(self.y) * 3 // 2))
        y[:self.n], X[:self.n] = self.y[:self.n], self.X[:self.n]
        self.retired.append(self.region)
        self.region, self.y, self.X = region, y, X

    def reserve(self, rows: int) -> int:
        """Where ``rows`` more rows go."""
        start, self.n = self.n, self.n + rows
        return start

    def release(self) -> None:
        """Give the regions back (the rows may not be used after)."""
        self.y = self.X = None
        for region in self.retired + ([self.region] if self.region is not None else []):
            memory.give(region)
        self.region, self.retired = None, []

    def finish(self, spans: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
        """(y, X) of the rows written, holes closed (``spans``: (start, rows) in slot order)."""
        n = 0
        for start, k in spans:
            if start != n:
                self.y[n:n + k], self.X[n:n + k] = self.y[start:start + k], self.X[start:start + k]
            n += k
        return self.y[:n], self.X[:n]


class _Pass:
    """One pass: its frames, the slots decoded so far and the chunk results, in slot order."""

    def __init__(self, number: int, frames: Iterator[tuple[str, object]], first: bool) -> None:
        self.number = number
        self.frames = frames
        self.first = first  # the first pass: its rows are kept when they fit
        self.cache: _Cache | None = None
        self.layout: Layout | None = None
        self.layout_blocks = 0  # pages of the current relation
        self.begin: dict = {}
        self.end: dict | None = None
        self.results: dict[int, object] = {}
        self.spans: dict[int, tuple[int, int]] = {}
        self.early: list[tuple[int, np.ndarray, np.ndarray]] = []  # rows decoded before fn was given
        self.futures: list[Future] = []
        self.seq = 0
        self.tuples = self.skipped = self.rows = 0
        self.ones, self.finite = True, True
        self.decode_seconds = 0.0
        self.lock = threading.Lock()
        self.t0 = time.perf_counter()

    @property
    def query(self) -> bool:
        return self.begin.get("reader") == "query"


class StreamSource:
    """Training rows that the caller's backend streams, pass after pass.

    ``lead``: columns of ones before the features (the intercept's); ``budget``: bytes the
    first pass's rows may keep in memory; ``threads``: decoding workers.  :meth:`peek` reads
    until the first usable rows, :meth:`each` makes a pass with a function per chunk,
    :meth:`arrays` gives every row in memory.
    """

    def __init__(self, request: Request, release: Callable[[object], None], *, lead: int, threads: int,
                 budget: int, max_features: int) -> None:
        self.request, self.release = request, release
        self.lead, self.budget, self.max_features = lead, budget, max_features
        self.pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="learnedidx-decode")
        self.local = threading.local()
        self.query, self.why = False, ""  # read the query path: the pages held a value only it reads
        self.width = -1  # the array column's length (on the query path: the features), once known
        self.d = -1  # columns of X (lead + features), once known
        self.stats = PassStats()
        self.cached: tuple[np.ndarray, np.ndarray] | None = None  # every row, when they fit in memory
        self.keep = True  # keep the first pass's rows in memory when they fit (the consumer's choice)
        self.need_all = False  # the consumer needs every row in memory: too many is an error at once
        self.n = -1  # usable rows, once the first pass ended
        self.ones = False  # every row's first feature is 1.0 (once the first pass ended)
        self.finite = True  # no NaN or infinity (once the first pass ended)
        self._first: _Pass | None = None  # the first pass, while peek has started it
        self._caches: list[_Cache] = []  # the memory of rows kept, given back on close

    def close(self) -> None:
        """Stop the workers; give the memory of the rows kept back (nothing may use them after)."""
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.cached = None
        for cache in self._caches:
            cache.release()
        self._caches = []

    def __enter__(self) -> "StreamSource":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ decoding a slot
    def _scratch(self, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """This thread's rows for one slot (grown as needed)."""
        buf = getattr(self.local, "buf", None)
        if buf is None or len(buf[0]) < rows or buf[1].shape[1] != self.d:
            n = max(rows, 1024)
            buf = self.local.buf = (np.empty(n), np.empty((n, self.d)))
        return buf

    def _decode(self, p: _Pass, slot, layout: Layout | None, cache: _Cache | None, start: int):
        """Decode ``slot`` into ``cache`` at ``start`` (no cache: this thread's scratch rows) and
        give it back: (y, X) of its usable rows."""
        t0 = time.perf_counter()
        try:
            count = slot.tuples if slot.pages is not None else len(slot.rows)
            if cache is None:
                (y, X), row0 = self._scratch(count), 0
            else:
                y, X, row0 = cache.y, cache.X, start
            if slot.pages is not None:
                k, skipped, ones, finite = strider.decode(layout, slot.blocks, slot.pages, self.width, self.lead,
                                                          y, X, row0)
            else:
                data = slot.rows
                k, skipped = len(data), 0
                y[row0:row0 + k] = data[:, 0]
                X[row0:row0 + k, :self.lead] = 1.0
                X[row0:row0 + k, self.lead:] = data[:, 1:]
                finite = bool(np.isfinite(data).all())
                ones = data.shape[1] < 2 or bool((data[:, 1] == 1.0).all())
        finally:
            self.release(slot)
        with p.lock:
            p.tuples += k + skipped
            p.skipped += skipped
            p.rows += k
            p.ones &= ones
            p.finite &= finite
            p.decode_seconds += time.perf_counter() - t0
        return y[row0:row0 + k], X[row0:row0 + k]

    def _job(self, p: _Pass, seq: int, slot, layout: Layout | None, cache: _Cache | None, start: int,
             fn: ChunkFn) -> None:
        y, X = self._decode(p, slot, layout, cache, start)
        p.spans[seq] = (start, len(y))
        if len(y):
            p.results[seq] = fn(y, X)

    # ------------------------------------------------------------------ reading a pass
    def _new_pass(self, first: bool) -> _Pass:
        self.stats.passes += 1
        p = _Pass(self.stats.passes, self.request(self.stats.passes, self.query, self.why), first)
        if first and self.d >= 0:  # a first pass read again on the query path: the shape is known
            self._open_cache(p, 1024)
        return p

    def _open_cache(self, p: _Pass, rows: int) -> None:
        if not (self.keep or self.need_all):
            return
        try:
            p.cache = _Cache(rows, self.d, self.budget)
            self._caches.append(p.cache)
        except TooLargeError:
            if self.need_all:
                raise
            p.cache = None

    def _shape(self, p: _Pass, width: int, slot) -> None:
        """The row shape is known (the array's ``width``): fix it; open the first pass's cache,
        sized from this slot's tuples per page times the relation's pages."""
        features = width if p.query else strider.features(p.layout, width)
        if features > self.max_features:
            raise TooLargeError(f"{features} features exceed the server's limit of {self.max_features} per model "
                                "(its administrator sets --max-features)")
        self.width, self.d = width, self.lead + features
        if p.first:
            if slot is not None and slot.pages is not None:
                rows = int(slot.tuples / len(slot.pages) * p.layout_blocks * 1.05) + 1024
            else:
                rows = 1 << 16
            self._open_cache(p, rows)

    def _read(self, p: _Pass, fn: ChunkFn | None) -> bool:
        """Read ``p``'s frames: slots are decoded here until ``fn`` is given (True as soon as
        usable rows are), then on the workers with ``fn``.  False at the pass's end."""
        for kind, body in p.frames:
            if kind == "begin":
                p.begin = body
            elif kind == "relation":
                p.layout, p.layout_blocks = Layout.from_stream(body), int(body["blocks"])
                if not p.layout.is_array and self.d < 0:
                    self._shape(p, 0, None)
            elif kind == "slot":
                if self._slot(p, body, fn) and fn is None:
                    return True
            elif kind == "end":
                p.end = body
                return False
        raise ProtocolError("the data stream ended mid-pass")

    def _slot(self, p: _Pass, slot, fn: ChunkFn | None) -> bool:
        """Decode (or submit) a slot; True when it was decoded here and gave usable rows."""
        seq, p.seq = p.seq, p.seq + 1
        if self.d < 0:
            if slot.rows is not None:
                self._shape(p, slot.rows.shape[1] - 1, slot)
            else:
                try:
                    w = strider.first_width(p.layout, slot.pages)
                except BaseException:
                    self.release(slot)
                    raise
                if w < 0:  # no usable row: count its tuples, keep nothing
                    self._count_only(p, slot)
                    return False
                self._shape(p, w, slot)
        start = 0
        if p.cache is not None:
            count = slot.tuples if slot.pages is not None else len(slot.rows)
            try:
                if not p.cache.fits(count):
                    self._settle(p, 0)  # no job may write while the rows move
                    p.cache.grow(count)
                start = p.cache.reserve(count)
            except TooLargeError:
                if self.need_all:
                    self.release(slot)
                    raise
                p.cache = None  # stream on: the rows go to the workers' scratch rows
        if fn is None:
            y, X = self._decode(p, slot, p.layout, p.cache, start)
            p.spans[seq] = (start, len(y))
            if len(y):
                p.early.append((seq, y if p.cache is not None else y.copy(), X if p.cache is not None else X.copy()))
            return len(y) > 0
        p.futures.append(self.pool.submit(self._job, p, seq, slot, p.layout, p.cache, start, fn))
        if len(p.futures) > IN_FLIGHT:
            self._settle(p, IN_FLIGHT // 2)
        return False

    def _count_only(self, p: _Pass, slot) -> None:
        """A slot read before the row shape is known, without a usable row: count its tuples."""
        t0 = time.perf_counter()
        try:
            y, X = np.empty(0), np.empty((0, 1))
            _, skipped, _, _ = strider.decode(p.layout, slot.blocks, slot.pages, -1, 0, y, X, 0)
        finally:
            self.release(slot)
        p.tuples += skipped
        p.skipped += skipped
        p.decode_seconds += time.perf_counter() - t0

    @staticmethod
    def _settle(p: _Pass, keep: int) -> None:
        """Wait for the oldest jobs (raising the first error) until ``keep`` remain."""
        done = p.futures[:max(0, len(p.futures) - keep)]
        del p.futures[:len(done)]
        for f in done:
            f.result()

    def _abandon(self, p: _Pass) -> None:
        """Stop ``p``'s jobs; read the rest of its frames, giving every slot back."""
        for f in p.futures:
            f.cancel()
        wait(p.futures)
        if p.end is None:
            for kind, body in p.frames:
                if kind == "slot":
                    self.release(body)

    def _complete(self, p: _Pass, fn: ChunkFn) -> list:
        """Finish pass ``p`` with ``fn``: the chunk results in slot order.  A value only the
        query path reads: this pass is read to its end and made again on the query path."""
        while True:
            try:
                for seq, y, X in p.early:
                    p.results[seq] = fn(y, X)
                p.early = []
                if p.end is None:
                    self._read(p, fn)
                self._settle(p, 0)
                break
            except PagesUndecodableError as exc:
                self._abandon(p)
                self.query, self.why = True, str(exc)
                p = self._new_pass(p.first)
            except BaseException:
                for f in p.futures:
                    f.cancel()
                wait(p.futures)
                raise
        if not p.query and p.tuples != p.end.get("rows"):
            raise ProtocolError(f"decoded {p.tuples} rows where the backend sent {p.end.get('rows')}")
        self.stats.add_producers(p.end)
        if p.first:
            self._record(p)
        return [p.results[s] for s in sorted(p.results)]

    def _record(self, p: _Pass) -> None:
        """What the first pass read; its rows, when they all fit."""
        self._first = None
        st = self.stats
        st.rows_total = int(p.end.get("rows", 0))
        st.rows_skipped = int(p.end.get("skipped", 0)) if p.query else p.skipped
        st.path, st.why = str(p.begin.get("reader")), p.begin.get("why")
        if p.query:
            st.features_form = str(p.end.get("form", "scalars"))
        else:
            st.features_form = "array" if p.layout is not None and p.layout.is_array and len(p.layout.out) == 2 \
                else "scalars"
        st.seconds, st.decode_seconds = time.perf_counter() - p.t0, p.decode_seconds
        if self.d < 0:  # no usable row: the shape of an empty matrix
            self.d = self.lead + (strider.features(p.layout, 0) if p.layout is not None else 0)
        self.n, self.finite = p.rows, p.finite
        self.ones = p.rows > 0 and self.d > self.lead and p.ones
        if p.cache is not None:
            self.cached = p.cache.finish([p.spans[s] for s in sorted(p.spans)])
        elif p.rows == 0:
            self.cached = (np.empty(0), np.empty((0, self.d)))
        for cache in self._caches:  # given up: over the budget, or a pass read again
            if cache is not p.cache:
                cache.release()
        self._caches = [p.cache] if p.cache is not None else []
        if self.cached is not None:  # no pass will stream again: the decoding threads may go
            self.pool.shutdown(wait=True)

    # ------------------------------------------------------------------ the consumer's side
    def peek(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Start the first pass and read until its first usable rows: (y, X) of one of them,
        or None when the data have none."""
        if self.n < 0 and self._first is None:
            p = self._first = self._new_pass(True)
            while True:
                try:
                    if not self._read(p, None):
                        self._complete(p, lambda y, X: None)
                    break
                except PagesUndecodableError as exc:
                    self._abandon(p)
                    self.query, self.why = True, str(exc)
                    p = self._first = self._new_pass(True)
        if self._first is not None and self._first.early:
            _, y, X = self._first.early[0]
            return y[:1], X[:1]
        if self.cached is not None and len(self.cached[0]):
            return self.cached[0][:1], self.cached[1][:1]
        return None

    def each(self, fn: ChunkFn, ex: ThreadPoolExecutor | None = None, chunk_rows: int = 1 << 16) -> list:
        """One pass over the rows, ``fn(y, X)`` per chunk on the workers: the results in the
        rows' order.  The first pass continues what :meth:`peek` started; later passes read the
        rows kept in memory, or stream again when they did not fit."""
        if self._first is not None:
            return self._complete(self._first, fn)
        if self.n < 0:
            return self._complete(self._new_pass(True), fn)
        if self.cached is not None:
            y, X = self.cached
            chunks = range(0, len(y), chunk_rows)
            return list((ex.map if ex is not None else map)(lambda a: fn(y[a:a + chunk_rows], X[a:a + chunk_rows]),
                                                            chunks))
        return self._complete(self._new_pass(False), fn)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Every row in memory (y, X): the first pass's, read now if needed.  TooLargeError when
        they exceed the budget."""
        self.need_all = True
        if self.n < 0:
            self.each(lambda y, X: None)
        if self.cached is None:
            raise TooLargeError(f"the training data need more than the server's memory limit per call "
                                f"({self.budget:,} bytes; its administrator sets --max-call-memory)")
        return self.cached

    def set_lead(self, lead: int) -> None:
        """Columns of ones before the features, decided before the first pass starts."""
        if self.stats.passes:
            raise RuntimeError("the rows' shape is fixed once a pass has started")
        self.lead = lead

    def drop_lead(self) -> None:
        """Read without the leading ones column from now on (the features start with ones)."""
        if self.lead == 0:
            return
        self.lead -= 1
        self.d -= 1
        if self.cached is not None:
            y, X = self.cached
            self.cached = y, np.ascontiguousarray(X[:, 1:])
        self.local = threading.local()
