"""The Store: a string-key learned index (SIndex groups, SIA retraining) with a KV API.

This module is the API: it checks input, takes the locks, logs writes and delegates.
Merged keys live in one sorted arena cut into groups, each with a linear model over the
bytes after its common prefix; a lookup runs in Numba (root search → model prediction →
search of the error window), and writes go to a delta buffer, visible at once, which
merges fold into new arrays.  The pieces:

=====================  ==============================================================
``options``            :class:`StoreOptions`, every option validated once
``keys``               key and value checks, :class:`KeyBatch` for the search kernels
``snapshot``           what readers see: frozen merged arrays, the mutable delta buffer
``grouping``           cutting, merging and building groups (pure functions)
``retrainer``          training with failover, when to merge, the background thread
``durability``         the write-ahead log and checkpoints
=====================  ==============================================================

Thread safety
-------------
Any number of reader threads and writer threads may share a Store.  Writers are
serialized by the writer lock; merges by the merge lock (taken before the writer lock).
Reads take no lock: they read the snapshot current when they started (see
:mod:`learnedidx.index.snapshot`), so a read sees every write acknowledged before it
began.  A merge freezes the buffer and builds the new snapshot outside the writer lock,
then swaps it in under it; a checkpoint merges everything under both locks.
"""
from __future__ import annotations

import contextlib
import itertools
import operator
import os
import threading
import time
from typing import Any, Iterator, Sequence

from learnedidx.errors import ConfigError, StoreClosedError
from learnedidx.index import grouping
from learnedidx.index import kernels as K
from learnedidx.index import keys as KS
from learnedidx.index.checkpointfile import chunks_of
from learnedidx.index.durability import OP_PUT, Durability
from learnedidx.index.keys import KeyBatch
from learnedidx.index.options import StoreOptions
from learnedidx.index.retrainer import BackgroundLoop, Retrainer, groups_to_merge, merge_needed
from learnedidx.index.snapshot import MISSING, TOMB, Snapshot

__all__ = ["Store", "StoreOptions", "KeyBatch"]


class Store:
    """An ordered byte-string key-value store indexed by a learned index.

    ``Store(path=None, **options)`` or ``Store(path, StoreOptions(...))``: in memory when
    ``path`` is None, else durable in that directory.  The options and what they mean are
    those of :class:`~learnedidx.index.options.StoreOptions` (docs/store.md).
    """

    def __init__(self, path: str | os.PathLike | None = None, options: StoreOptions | None = None,
                 **kwargs: Any) -> None:
        if options is not None and (kwargs or not isinstance(options, StoreOptions)):
            raise ConfigError("pass a StoreOptions or keyword options, not both")
        self.options = opts = options if options is not None else StoreOptions.of(kwargs)
        self._max_len = opts.max_key_len  # read by put's fast path
        self._inline = opts.retrain == "inline"  # read after every write
        self._retrainer = Retrainer(opts)
        self._wlock = threading.RLock()  # serializes writers
        self._mlock = threading.RLock()  # serializes merges (checkpoints run inside merges)
        self._closed = False
        self._inplace: list[bytes] | None = None  # keys updated in place while a merge builds
        self._stats = {"merges": 0, "splits": 0, "merge_seconds": 0.0}
        self._st = Snapshot.empty(opts.max_features, opts.max_key_len)
        self._dur: Durability | None = None
        self._loop: BackgroundLoop | None = None
        if path is not None:
            self._dur = Durability(path, opts.sync, opts.sync_interval, opts.max_key_len, opts.recovery)
            with self._dur.released_on_error():  # a failed open holds nothing: a retry can open
                self._recover(self._dur)
        if opts.retrain == "background":
            self._loop = BackgroundLoop(opts.retrain_interval, self._background_round)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("the store is closed")

    def _key(self, key: Any) -> bytes:
        return KS.check_key(key, self._max_len)

    # ------------------------------------------------------------------ reads
    def get(self, key: Any, default: Any = None) -> Any:
        """The value stored under ``key``, or ``default``."""
        # The hottest path of the API, kept to a few bytecodes: the kernel checks the key's
        # length, and the delta buffer is looked at only when it holds something.
        if self._closed:
            raise StoreClosedError("the store is closed")
        if type(key) is not bytes:
            return self.get(self._key(key), default)
        st = self._st
        v = st.buf.get(key, MISSING) if st.buf else MISSING
        if v is MISSING:
            i = st.find_kernel(st.ref, key)
            if i >= 0:
                return st.values[i]
            if i == -1:
                return default
            self._key(key)  # -2: raises the length error
        return default if v is TOMB else v

    def __getitem__(self, key: Any) -> bytes:
        v = self.get(key, MISSING)
        if v is MISSING:
            raise KeyError(key)
        return v

    def __contains__(self, key: Any) -> bool:
        return self.get(key, MISSING) is not MISSING

    def __len__(self) -> int:
        self._check_open()
        return self._st.size

    def get_many(self, keys: Any) -> list:
        """Values of many keys (None where absent); the index search runs in one Numba call.

        ``keys``: a sequence of bytes/str, a numpy object or ``S`` array (trailing NUL bytes
        of ``S`` items are dropped by numpy), or a :class:`KeyBatch` for exact bytes.
        """
        self._check_open()
        st = self._st
        batch, klist = KS.as_batch(keys, self._max_len)
        idx = st.search(batch, True)
        if st.buf and klist is None:
            klist = batch.keys()
        return st.values_at(idx.tolist(), klist)

    def scan(self, start_key: Any, count: int) -> list[tuple[bytes, bytes]]:
        """Up to ``count`` (key, value) pairs with key >= ``start_key``, in key order."""
        self._check_open()
        count = KS.check_count(count)
        st = self._st
        k = self._key(start_key)
        return st.scan_at(k, int(st.seek(k)) if count else 0, count)

    def scan_many(self, start_keys: Any, count: int | Sequence[int]) -> list[list[tuple[bytes, bytes]]]:
        """:meth:`scan` for many start keys, the seeks in one Numba call; ``count`` is one
        count for all, or one per start key."""
        self._check_open()
        st = self._st
        batch, klist = KS.as_batch(start_keys, self._max_len)
        counts = KS.check_counts(count, len(batch))
        pos = st.search(batch, False).tolist()
        if klist is None:
            klist = batch.keys()
        return list(map(st.scan_at, klist, pos, counts))

    def range(self, lo: Any, hi: Any) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs with ``lo <= key < hi``, in key order."""
        self._check_open()
        return self._st.iter_from(self._key(lo), self._key(hi))

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        self._check_open()
        return self._st.iter_from(None, None)

    def __iter__(self) -> Iterator[bytes]:
        return (k for k, _ in self.items())

    # ------------------------------------------------------------------ writes
    def _apply(self, k: bytes, v: Any, i: int | None = None) -> None:
        """Apply one write to the current snapshot (writer lock held)."""
        if self._st.write(k, v, i) and self._inplace is not None:
            # A merge building meanwhile may already have copied this slot: it re-applies it.
            self._inplace.append(k)

    def put(self, key: Any, value: Any) -> None:
        """Insert or update ``key``; durable per the sync policy when this returns."""
        self._check_open()
        k = key if type(key) is bytes and 0 < len(key) <= self._max_len else self._key(key)
        v = value if type(value) is bytes else KS.check_value(value)
        with self._wlock:
            self._check_open()
            if self._dur is not None:
                self._dur.log_put(k, v)
            if self._st.write(k, v) and self._inplace is not None:  # _apply, inline on the hot path
                self._inplace.append(k)
        self._after_write()

    __setitem__ = put

    def delete(self, key: Any) -> bool:
        """Remove ``key``; True if it was present."""
        self._check_open()
        k = self._key(key)
        with self._wlock:
            self._check_open()
            if self._st.lookup(k) is TOMB:
                return False
            if self._dur is not None:
                self._dur.log_delete(k)
            self._apply(k, TOMB)
        self._after_write()
        return True

    def __delitem__(self, key: Any) -> None:
        if not self.delete(key):
            raise KeyError(key)

    def put_many(self, keys: Any, values: Sequence[Any]) -> None:
        """Insert/update many pairs as one atomic, durable batch."""
        self._check_open()
        batch, klist = KS.as_batch(keys, self._max_len)  # checked and packed in one compiled pass
        klist = klist if klist is not None else batch.keys()
        vlist = KS.check_values(values)
        KS.check_same_length(len(klist), len(vlist))
        bulk = self._st.nkeys() == 0 and not self._st.buf and len(klist) >= self.options.group_size
        with self._mlock if bulk else contextlib.nullcontext(), self._wlock:  # lock order: merge, write
            self._check_open()
            if self._dur is not None:
                self._dur.log_batch([(OP_PUT, k, v) for k, v in zip(klist, vlist)])
            if bulk and self._st.nkeys() == 0 and not self._st.buf:
                self._st = grouping.bulk_load(batch.arena, batch.offsets, vlist, self.options,
                                              self._retrainer.train, self._retrainer.train_all, self._max_len)
            else:
                for k, v in zip(klist, vlist):
                    self._apply(k, v)
        self._after_write()

    def apply_many(self, keys: Any, values: Sequence[Any]) -> list:
        """Reads and writes in order, as one call: where ``values[i]`` is None, ``keys[i]``
        is read (result: its value at that point of the batch, or None), else ``values[i]``
        is written under it (result: None).

        The outcome is that of the same calls made one after another (a read sees every
        earlier write of the batch), but the index searches of the whole batch run in one
        Numba call, and the writes are logged as one atomic, durable batch before any is
        applied.  ``keys`` as for :meth:`get_many`."""
        self._check_open()
        vlist = values if isinstance(values, list) else list(KS.sequence(values, "values"))
        nreads = vlist.count(None)
        if nreads == len(vlist):  # reads only: no lock, no write log
            out = self.get_many(keys)
            KS.check_same_length(len(out), nreads)
            return out
        if not nreads:  # writes only: put_many (bulk-loads an empty store)
            self.put_many(keys, vlist)
            return [None] * len(vlist)
        batch, klist = KS.as_batch(keys, self._max_len)
        klist = klist if klist is not None else batch.keys()
        KS.check_same_length(len(klist), len(vlist))
        if not set(map(type, vlist)) <= {bytes, type(None)}:
            vlist = [v if v is None else KS.check_value(v) for v in vlist]
        out: list = [None] * len(klist)
        writes = list(itertools.compress(range(len(vlist)), map(operator.is_not, vlist, itertools.repeat(None))))
        with self._wlock:  # no merge can swap the arrays under the precomputed indexes
            self._check_open()
            if self._dur is not None:
                self._dur.log_batch([(OP_PUT, klist[w], vlist[w]) for w in writes])
            st = self._st
            il = st.search(batch, True).tolist()
            # Stretches of reads between two writes are answered at once.
            a = 0
            for w in writes + [len(vlist)]:
                if w > a:
                    out[a:w] = st.values_at(il[a:w], klist[a:w])
                if w < len(vlist):
                    self._apply(klist[w], vlist[w], il[w])
                a = w + 1
        self._after_write()
        return out

    def _after_write(self) -> None:
        if self._inline and merge_needed(self._st, self.options.buffer_threshold):
            self._merge()

    # ------------------------------------------------------------------ merges
    def _regroup(self, st: Snapshot) -> Snapshot:
        return grouping.regroup(st, self.options, self._retrainer.train, self._retrainer.train_all)

    def retrain_now(self) -> None:
        """Merge every buffered write and retrain the groups they touched, synchronously."""
        self._check_open()
        self._merge(all_groups=True)

    def _background_round(self) -> None:
        if merge_needed(self._st, self.options.buffer_threshold):
            self._merge()
        elif self._dur is not None and self._dur.log_bytes() > self.options.checkpoint_bytes:
            self._checkpoint()

    def _merge(self, all_groups: bool = False) -> None:
        """Fold the buffered writes of the groups that need it (all: every group) into a new
        snapshot, built outside the writer lock and swapped in under it."""
        with self._mlock:
            t0 = time.perf_counter()
            with self._wlock:
                st = self._st
                if not st.buf:
                    return
                G = len(st.models)
                dirty = (set(range(max(G, 1))) if G == 0 or all_groups
                         else groups_to_merge(st, self.options.buffer_threshold))
                frozen = dict(st.buf)  # what this merge folds in
                self._inplace = []
            try:
                new, splits = grouping.build(st, frozen, dirty, self.options, self._retrainer.train)
                with self._wlock:
                    cur = self._st
                    for k in self._inplace:  # in-place updates made while the build copied the values
                        i, j = new.find(k), cur.find(k)
                        if i >= 0 and j >= 0:
                            new.values[i] = cur.values[j]
                    new.adopt_buffer(cur.buf, frozen, dirty, st.pivots)
                    new.size = cur.size
                    self._st = new
                    self._stats["merges"] += 1
                    self._stats["splits"] += splits
                    self._stats["merge_seconds"] += time.perf_counter() - t0
            finally:
                self._inplace = None  # a write logged after the swap only reaches a dropped list
            if self._dur is not None and self._dur.log_bytes() > self.options.checkpoint_bytes:
                self._checkpoint()

    # ------------------------------------------------------------------ durability
    def _recover(self, dur: Durability) -> None:
        rec = dur.recover()
        n = len(rec.key_offsets) - 1
        if n:
            vb, vo = rec.val_arena.tobytes(), rec.val_offsets
            values = [vb[vo[i]:vo[i + 1]] for i in range(n)]
            self._st = self._regroup(Snapshot.ungrouped(rec.key_arena, rec.key_offsets, values,
                                                        self.options.max_features, self._max_len))
        for op, k, v in rec.log:
            self._apply(k, v if op == OP_PUT else TOMB)
        if rec.log:
            self._merge(all_groups=True)

    def checkpoint(self) -> None:
        """Write the merged data to a checkpoint and drop the log it covers.  The whole
        buffer is merged first under both locks: writers wait for that merge, not for the
        file to be written."""
        self._check_open()
        self._checkpoint()

    def _checkpoint(self) -> None:
        if self._dur is None or self._dur.closed:
            return
        with self._mlock:
            with self._wlock:
                st = self._st
                if st.buf:
                    new, splits = grouping.build(st, dict(st.buf), set(range(max(len(st.models), 1))),
                                                 self.options, self._retrainer.train)
                    new.size = st.size
                    self._st = st = new
                    self._stats["splits"] += splits
                seg = self._dur.start_checkpoint()
            self._dur.finish_checkpoint(seg, chunks_of(st.arena, st.offsets, st.values))

    # ------------------------------------------------------------------ admin
    def stats(self) -> dict:
        """Counters of merges and training, and the shape of the index (docs/store.md)."""
        self._check_open()
        st = self._st
        win = st.gint[:, K.G_ERRHI] - st.gint[:, K.G_ERRLO]
        return {**self._retrainer.stats, **self._stats, "groups": len(st.models), "keys": st.size,
                "merged_keys": st.nkeys(), "buffered_writes": len(st.buf), "trainer": self._retrainer.name,
                "trainer_failed": self._retrainer.failed,
                "max_error_window": int(win.max()) + 1 if len(st.models) else 0}

    def close(self) -> None:
        """Stop the retrainer, checkpoint (durable stores) and release the directory, also
        when the checkpoint fails (which then raises).  A write racing ``close()`` either
        completes before it or raises :class:`StoreClosedError`."""
        if self._closed:
            return
        if self._loop is not None:
            self._loop.stop()
        with self._wlock:
            if self._closed:
                return
            self._closed = True
        if self._dur is not None:
            try:
                self._checkpoint()
            finally:
                self._dur.close()

    def __enter__(self) -> "Store":
        self._check_open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:  # best effort: stop the thread of an unclosed store
        loop = getattr(self, "_loop", None)
        if loop is not None:
            loop.stop(wait=False)
