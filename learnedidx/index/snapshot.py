"""What readers see: the merged keys with their group models, and the live delta buffer.

A :class:`Snapshot` has two parts.

* **Frozen** when the snapshot is built (by a merge, recovery or a bulk load): the key
  arena and offsets, the group matrices ``gint``/``coef``, the per-group training memos
  ``models``, the ``pivots``, and what is derived from them (``heads``, the index
  descriptor the point-lookup kernels read).  A merge never changes them: it builds a new
  snapshot and the store swaps it in with one assignment.
* **Mutable**, changed only by writers holding the store's writer lock, through
  :meth:`Snapshot.write`: ``values`` (a merged key's slot is replaced by an update in
  place; the list is never resized, so the lookups' view of its item array stays valid),
  the delta buffer ``buf`` (inserts, deletes and writes to buffered keys), the per-group
  counts of buffered writes ``counts``, and the number of live keys ``size``.

Readers take no lock: they read the snapshot the store held when they started; dict and
list item operations are atomic, so a read sees every write acknowledged before it began.
"""
from __future__ import annotations

import bisect
import functools
import itertools
import operator
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
from sortedcontainers import SortedDict

from learnedidx.index import kernels as K
from learnedidx.index import pyobjects as P
from learnedidx.index.keys import KeyBatch

TOMB = object()  #: delta-buffer marker of a deleted key
MISSING = object()  #: "no entry" answer of lookups


@functools.cache
def point_kernels() -> tuple:
    """(find, seek) entry points for the exact argument types a Snapshot passes: the
    address of its index descriptor (see :func:`~learnedidx.index.kernels.index_descriptor`)
    and the query as ``bytes``."""
    arrays = (np.frombuffer(b"k", np.uint8), np.array([0, 1], np.int64), np.zeros(1, np.int64),
              np.zeros((1, K.G_COLS), np.int64), np.zeros((1, 2)))
    desc = K.index_descriptor(*arrays, 0, 1)  # one empty group: the example calls find nothing
    ex = (desc.ctypes.data, b"k")
    return K.entry_point(K.find_at, *ex), K.entry_point(K.seek_at, *ex)


@dataclass
class GroupModel:
    """Per-group training memo (SIA): R factor and bookkeeping for lazy deletes."""

    R: np.ndarray | None = None
    prefix: int = 0
    feat: int = 0
    deletes_since_full: int = 0


@dataclass(eq=False)
class Snapshot:
    """The merged data (frozen) and the delta buffer (mutable under the writer lock); see
    the module docstring."""

    # frozen
    arena: np.ndarray
    offsets: np.ndarray
    # mutable: slots replaced in place by writers
    values: list
    # frozen
    gint: np.ndarray  # (G, kernels.G_COLS) int64, see kernels.G_*
    coef: np.ndarray  # (G, max_features + 1)
    models: list  # GroupModel per group
    pivots: list  # first key of each group, for bisect
    # mutable
    buf: SortedDict  # key -> value | TOMB
    counts: list  # buffered writes per group
    size: int  # number of live keys
    # frozen
    max_len: int  # the store's max_key_len (checked by the point lookup kernel)

    def __post_init__(self) -> None:
        # The arena lives in an immutable bytes object (slicing it is the cheapest way to
        # materialize keys for scans); Numba reads it through a zero-copy uint8 view.
        self.ab = self.arena.tobytes()
        self.arena = np.frombuffer(self.ab, np.uint8)
        # Exactly the types point_kernels() was compiled for (C order, writable int64/float64).
        self.offsets = np.require(self.offsets, np.int64, ["C", "W"])
        self.gint = np.require(self.gint, np.int64, ["C", "W"])
        self.coef = np.require(self.coef, np.float64, ["C", "W"])
        self.heads = K.build_heads(self.arena, self.offsets, self.gint)
        # The descriptor holds these arrays' addresses: they are never replaced afterwards,
        # and a lookup holds the Snapshot (hence the arrays) while its kernel runs.
        self.items = P.items_address(self.values)
        self.desc = K.index_descriptor(self.arena, self.offsets, self.heads, self.gint, self.coef, self.items,
                                       self.max_len)
        self.ref = self.desc.ctypes.data  # the lookups' one argument (see point_kernels)
        self.find_kernel, self.seek_kernel = point_kernels()

    @classmethod
    def ungrouped(cls, arena: np.ndarray, offsets: np.ndarray, values: list, max_features: int,
                  max_len: int) -> "Snapshot":
        """Sorted keys and their values with no groups yet (see :func:`grouping.regroup`)."""
        return cls(arena, offsets, values, np.zeros((0, K.G_COLS), np.int64), np.zeros((0, max_features + 1)),
                   [], [], SortedDict(), [0], len(values), max_len)

    @classmethod
    def empty(cls, max_features: int, max_len: int) -> "Snapshot":
        return cls.ungrouped(np.zeros(0, np.uint8), np.zeros(1, np.int64), [], max_features, max_len)

    # ------------------------------------------------------------------ merged arrays
    def find(self, k: bytes) -> int:
        """Index of ``k`` in the merged arrays, or -1."""
        return self.find_kernel(self.ref, k)

    def seek(self, k: bytes) -> int:
        """Index of the first merged key >= ``k``."""
        return self.seek_kernel(self.ref, k)

    def search(self, batch: KeyBatch, exact: bool) -> np.ndarray:
        """:func:`~learnedidx.index.kernels.search_many` of ``batch`` (values prefetched
        when ``exact``)."""
        return K.search_many(self.arena, self.offsets, self.heads, self.gint, self.coef,
                             batch.arena, batch.offsets, exact, self.items)

    def nkeys(self) -> int:
        return len(self.offsets) - 1

    def key(self, i: int) -> bytes:
        return self.ab[self.offsets[i]:self.offsets[i + 1]]

    def group_of(self, k: bytes) -> int:
        """The group whose key range holds ``k`` (group 0 for keys before the first pivot)."""
        g = bisect.bisect_right(self.pivots, k) - 1
        return g if g >= 0 else 0

    # ------------------------------------------------------------------ reads
    def lookup(self, k: bytes) -> Any:
        """The value of ``k`` (buffer first), or TOMB."""
        v = self.buf.get(k, MISSING)
        if v is not MISSING:
            return v
        i = self.find(k)
        return self.values[i] if i >= 0 else TOMB

    def values_at(self, il: list[int], klist: list[bytes] | None) -> list:
        """Values of keys ``klist`` found at merged indexes ``il`` (-1: not merged), the
        delta buffer overriding (``klist`` may be None when the buffer is empty)."""
        vals = self.values
        if len(il) > 1 and min(il) >= 0:
            out = list(operator.itemgetter(*il)(vals))  # one C loop instead of a Python one
        else:
            out = [vals[i] if i >= 0 else None for i in il]
        if self.buf:
            get = self.buf.get
            for j, k in enumerate(klist):
                v = get(k, MISSING)
                if v is not MISSING:
                    out[j] = None if v is TOMB else v
        return out

    def iter_from(self, start: bytes | None, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs from ``start`` (None: the first key) to before ``hi`` (None: the end)."""
        n = self.nkeys()
        i = 0 if start is None else int(self.seek(start))
        buf = self.buf
        bkeys = iter(buf.irange(minimum=start) if start is not None else buf.keys())
        bk = next(bkeys, None)
        ab = self.ab
        offs = self.offsets
        values = self.values
        step = 128
        while True:
            chunk_end = min(n, i + step)
            ol = offs[i:chunk_end + 1].tolist()
            last = chunk_end - i
            for j in range(last + (chunk_end == n)):  # past the last merged key: ak is None
                ak = ab[ol[j]:ol[j + 1]] if j < last else None
                while bk is not None and (ak is None or bk < ak):
                    if hi is not None and bk >= hi:
                        return
                    v = buf.get(bk, TOMB)
                    if v is not TOMB:
                        yield bk, v
                    bk = next(bkeys, None)
                if ak is None or (hi is not None and ak >= hi):
                    return
                if bk is not None and bk == ak:
                    v = buf.get(bk, TOMB)
                    bk = next(bkeys, None)
                    if v is not TOMB:
                        yield ak, v
                    continue
                yield ak, values[i + j]
            i = chunk_end
            step = min(step * 2, 4096)

    def scan_at(self, k: bytes, i: int, count: int) -> list[tuple[bytes, bytes]]:
        """``count`` pairs from ``k``, whose lower bound among the merged keys is ``i``."""
        if count == 0:
            return []
        n = self.nkeys()
        e = min(n, i + count)
        ol = self.offsets[i:e + 1].tolist()
        ab = self.ab
        keys = [ab[ol[j]:ol[j + 1]] for j in range(e - i)]
        vals = self.values[i:e]
        if not self.buf:
            return list(zip(keys, vals))
        # Fold in the buffered writes up to the slice's last key (usually a few) by bisection.
        last = keys[-1] if e - i == count else None
        limit = 2 * count + 16
        pending = list(itertools.islice(self.buf.irange(minimum=k, maximum=last), limit))
        for bk in pending:
            v = self.buf.get(bk, TOMB)
            j = bisect.bisect_left(keys, bk)
            if j < len(keys) and keys[j] == bk:
                if v is TOMB:
                    del keys[j], vals[j]
                else:
                    vals[j] = v
            elif v is not TOMB:
                keys.insert(j, bk)
                vals.insert(j, v)
        # Without a last key (the merged keys ran out first) pending holds every buffered key
        # from k on, unless it hit the limit; with one, buffered keys past it were not read.
        if len(keys) >= count or (last is None and len(pending) < limit):
            return list(zip(keys[:count], vals[:count]))
        # Deletes emptied part of the slice: walk on through the merged keys and the buffer.
        return list(itertools.islice(self.iter_from(k, None), count))

    # ------------------------------------------------------------------ writes
    def write(self, k: bytes, v: Any, i: int | None = None) -> bool:
        """Apply one write (the caller holds the writer lock): an update of a merged key in
        place, anything else to the delta buffer.  ``i``: ``k``'s index in the merged
        arrays if already searched (-1: not there).  True when the update was in place."""
        old = self.buf.get(k, MISSING)
        if old is MISSING:
            i = self.find(k) if i is None else i
            if i >= 0 and v is not TOMB:
                self.values[i] = v  # the key set does not change: nothing to merge or retrain
                return True
            old = self.values[i] if i >= 0 else TOMB
        if v is TOMB:
            if old is TOMB:
                return False
            self.size -= 1
        elif old is TOMB:
            self.size += 1
        self.buf[k] = v
        g = bisect.bisect_right(self.pivots, k) - 1  # group_of, inline: every buffered write runs it
        self.counts[g if g >= 0 else 0] += 1
        return False

    def adopt_buffer(self, live: SortedDict, merged: dict, dirty: set[int], old_pivots: list) -> None:
        """Take over the writes of ``live`` (the buffer of the snapshot this one replaces)
        that the merge did not fold in: those outside the ``dirty`` groups (by
        ``old_pivots``) and those written again after the merge froze ``merged``."""
        carried = SortedDict()
        for k, v in live.items():
            g = bisect.bisect_right(old_pivots, k) - 1
            if not ((g if g >= 0 else 0) in dirty and merged.get(k, MISSING) is v):
                carried[k] = v
        self.buf = carried
        self.counts = [0] * max(1, len(self.models))
        for k in carried:
            self.counts[self.group_of(k)] += 1
