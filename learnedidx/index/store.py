"""The Store: a string-key learned index (SIndex groups, SIA retraining) with a KV API.

This module is the API: it checks input, takes the writer lock, logs writes and hands the
work to compiled operations.  The pieces:

=====================  ==============================================================
``options``            :class:`StoreOptions`, every option validated once
``keys``               key and value checks, :class:`KeyBatch`
``layout``, ``ops``    the index in memory, and the compiled operations on it
``live``               groups, fold-ins and splits, pinned views
``grouping``           building the groups of a sorted key set (bulk loads, recovery)
``retrainer``          training with failover, the groups due for a retrain
``durability``         the write-ahead log and checkpoints
=====================  ==============================================================

Thread safety
-------------
Any number of reader and writer threads may share a Store.  Every read and write of the
index is one compiled call holding the GIL (:mod:`learnedidx.index.ops`), so each answers
from, and leaves, one consistent state; readers take no lock.  Writers are serialized by
the writer lock, which covers logging and applying a write.  Iterators (``items()``,
``range()``, iteration) read a *pinned view*: the index as it was when they started, which
writers leave alone (they copy a group before changing what a view still reads of it).
Retraining takes the writer lock only to take its inputs and to publish its result.
"""
from __future__ import annotations

import gc
import logging
import os
import sys
import threading
import time
import weakref
from typing import Any, Iterator, Sequence

import numpy as np

from learnedidx.errors import ConfigError, LearnedIdxError, StoreClosedError, StoreForkedError
from learnedidx.index import foldin as FI
from learnedidx.index import grouping
from learnedidx.index import keys as KS
from learnedidx.index import layout as L
from learnedidx.index import methods
from learnedidx.index import ops as O
from learnedidx.index.durability import OP_PUT, Durability
from learnedidx.index.keys import KeyBatch
from learnedidx.index.live import MISSING, LiveIndex, WriterLock
from learnedidx.index.methods import GET, PUT, compiled
from learnedidx.index.options import StoreOptions
from learnedidx.index.retrainer import Retrainer, RetrainQueue

__all__ = ["Store", "StoreOptions", "KeyBatch"]

log = logging.getLogger(__name__)

_CHUNK = 1024  # pairs an iterator reads from its view per call
_FIRST_ROOM = 256  # result slots a scan makes before it knows how many pairs it returns


class _NoGC:
    """No cyclic collection (which may run finalizers, and so any code) in the middle of a
    structural change of the index."""

    def __enter__(self) -> None:
        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: Any) -> None:
        if self.was:
            gc.enable()


_no_gc = _NoGC

#: Every store not yet closed, so that a forked child can disown its copies of them.
_open_stores: "weakref.WeakSet[Store]" = weakref.WeakSet()


def _disown_after_fork() -> None:
    """In a child made by ``fork()``: every store of the parent refuses use
    (:class:`StoreForkedError`) and never touches its files, locks or threads (a parent's
    thread may have held a lock at the fork, and the files are the parent's)."""
    for store in list(_open_stores):
        store._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_disown_after_fork)


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
        self._max_len = opts.max_key_len
        self._retrainer = Retrainer(opts)
        self._ckpt_lock = threading.Lock()  # one checkpoint at a time
        self._ckpt_thread: threading.Thread | None = None  # the automatic one, past checkpoint_bytes
        self._closed = False
        self._fork_child = False  # a copy of the store in a forked child (see _forked)
        self._stats = {"merges": 0, "splits": 0, "merge_seconds": 0.0}
        # The live index and its descriptor live as long as the store (a reader may hold
        # the descriptor's address while another thread closes the store).
        self._live = LiveIndex.empty(opts, self._max_len)
        self._addr = self._live.addr
        self._wlock = WriterLock(self._live.D)  # serializes writers
        E = O.entry_points()
        methods.warm()
        self._get, self._upsert, self._put, self._delete = E["get"], E["upsert"], E["put"], E["delete"]
        self._get_many, self._apply_many, self._scan, self._scan_many, self._check_batch = (
            E["get_many"], E["apply_many"], E["scan"], E["scan_many"], E["check_batch"])
        self._counts = np.zeros(1, np.int64)  # apply_many's out-parameter (writer lock)
        self._queue = RetrainQueue(self._live, self._wlock, self._retrainer, opts)
        self._dur: Durability | None = None
        if path is not None:
            try:
                self._dur = Durability(path, opts.sync, opts.sync_interval, opts.max_key_len, opts.recovery)
                with self._dur.released_on_error():  # a failed open holds nothing: a retry can open
                    self._recover(self._dur)
                self._wlock.log_every_write()
            except BaseException:
                self._queue.close()
                raise
        _open_stores.add(self)

    def _forked(self) -> None:
        """This is a forked child's copy: closed without a lock, a checkpoint or a file call;
        the compiled get and put decline (a key length limit of 0), so every call raises."""
        self._fork_child = True
        self._closed = True
        self._live.D[L.D_MAXLEN] = 0

    def _closed_error(self) -> StoreClosedError:
        if self._fork_child:
            return StoreForkedError("the store was opened before this process was forked from its parent: a "
                                    "child cannot use it (it shares the parent's files); open it in the child "
                                    "once the parent has closed it")
        return StoreClosedError("the store is closed")

    def _check_open(self) -> None:
        if self._closed:
            raise self._closed_error()

    def _key(self, key: Any) -> bytes:
        return KS.check_key(key, self._max_len)

    @property
    def _size(self) -> int:
        """Live keys (counted by the kernels that insert and delete)."""
        return int(self._live.D[L.D_SIZE])

    @_size.setter
    def _size(self, n: int) -> None:  # writer lock held
        self._live.D[L.D_SIZE] = n

    # ------------------------------------------------------------------ reads
    def _absent(self, key: Any, default: Any) -> Any:
        self._check_open()
        k = self._key(key)  # raises for a bad key
        if k is not key:  # str, bytearray, a bytes subclass: ask again with exact bytes
            v = self._get(self._addr, k)
            if v is not MISSING:
                return v
        return default

    @compiled(GET, "get", "_absent")
    def get(self, key: Any, default: Any = None) -> Any:
        """The value stored under ``key``, or ``default``."""
        # The hottest path of the API: one compiled call, which answers MISSING for an
        # absent key and for anything that is not exactly bytes of a valid length.  As
        # compiled (methods.py), the call is made from C and an absent key comes to _absent.
        v = self._get(self._addr, key)
        if v is not MISSING:
            return v
        return self._absent(key, default)

    def __getitem__(self, key: Any) -> bytes:
        v = self.get(key, MISSING)
        if v is MISSING:
            raise KeyError(key)
        return v

    def __contains__(self, key: Any) -> bool:
        return self.get(key, MISSING) is not MISSING

    def __len__(self) -> int:
        self._check_open()
        return self._size

    def _key_list(self, keys: Any) -> list:
        return keys if type(keys) is list else KS.key_list(keys, self._max_len)

    def get_many(self, keys: Any) -> list:
        """Values of many keys (None where absent), in one compiled call.

        ``keys``: a sequence of bytes/str, a numpy object or ``S`` array (trailing NUL bytes
        of ``S`` items are dropped by numpy), or a :class:`KeyBatch` for exact bytes."""
        self._check_open()
        klist = self._key_list(keys)
        out = [None] * len(klist)
        if self._get_many(self._addr, id(klist), id(out)) >= 0:
            klist = KS.key_list(klist, self._max_len)  # converts, or raises for the bad key
            if self._get_many(self._addr, id(klist), id(out)) >= 0:
                raise LearnedIdxError("a checked key was refused")
        return out

    def scan(self, start_key: Any, count: int) -> list[tuple[bytes, bytes]]:
        """Up to ``count`` (key, value) pairs with key >= ``start_key``, in key order."""
        self._check_open()
        count = KS.check_count(count)
        room = min(count, _FIRST_ROOM)
        while True:
            # Result lists follow what the scan returns: a scan that fills its room is made
            # again, whole (one state of the store), with four times the room.
            ks, vs = [None] * room, [None] * room
            n = self._scan(self._addr, start_key, room, id(ks), id(vs), False, MISSING)
            if n == -2:
                start_key = self._exact_key(start_key)
                continue
            if n == -1:
                raise MemoryError("out of memory making scan results")
            if n < room or room == count:
                break
            room = min(count, 4 * room)
        if n < room:
            del ks[n:], vs[n:]
        return list(zip(ks, vs))

    def scan_many(self, start_keys: Any, count: int | Sequence[int]) -> list[list[tuple[bytes, bytes]]]:
        """:meth:`scan` for many start keys in one compiled call; ``count`` is one count
        for all, or one per start key."""
        self._check_open()
        klist = self._key_list(start_keys)
        counts = np.array(KS.check_counts(count, len(klist)), np.int64)
        caps = np.minimum(counts, _FIRST_ROOM)
        while True:
            # As in scan: room for what the scans return, four times more for a scan that
            # filled its own, and all of them made again (one state of the store).
            total = int(caps.sum())
            ks, vs = [None] * total, [None] * total
            got = np.zeros(len(klist), np.int64)
            bad = self._scan_many(self._addr, id(klist), caps, id(ks), id(vs), got)
            if bad == -2:
                raise MemoryError("out of memory making scan results")
            if bad >= 0:
                klist = KS.key_list(klist, self._max_len)
                continue
            full = (got == caps) & (caps < counts)
            if not full.any():
                break
            caps = np.where(full, np.minimum(counts, 4 * caps), caps)
        out = []
        at = 0
        for c, g in zip(caps.tolist(), got.tolist()):
            out.append(list(zip(ks[at:at + g], vs[at:at + g])))
            at += c
        return out

    def _pinned(self, lo: bytes, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs from ``lo`` to before ``hi``, as the index was at the first
        ``next()``: a pinned view, read a chunk at a time."""
        self._check_open()
        with self._wlock:
            self._check_open()
            view = self._live.pin()
        try:
            start, excl, bound = lo, False, MISSING if hi is None else hi
            while True:
                ks, vs = [None] * _CHUNK, [None] * _CHUNK
                n = self._scan_view(view.addr, start, ks, vs, excl, bound)
                yield from zip(ks[:n], vs[:n])
                if n < _CHUNK:
                    return
                start, excl = ks[n - 1], True
        finally:
            if not self._fork_child:  # a forked child leaves the parent's locks alone
                self._live.unpin(view)  # no writer lock: this may run in a finalizer, in a writer

    def _scan_view(self, addr: int, start: bytes, ks: list, vs: list, excl: bool, bound: Any) -> int:
        if self._fork_child:
            raise self._closed_error()
        n = self._scan(addr, start, len(ks), id(ks), id(vs), excl, bound)
        if n < 0:
            raise MemoryError("out of memory making scan results")
        return n

    def range(self, lo: Any, hi: Any) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs with ``lo <= key < hi``, in key order, as they were when the
        iteration started."""
        self._check_open()
        return self._pinned(self._key(lo), self._key(hi))

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value) pair in key order, as they were when the iteration started."""
        self._check_open()
        return self._pinned(b"\x00", None)

    def __iter__(self) -> Iterator[bytes]:
        return (k for k, _ in self.items())

    # ------------------------------------------------------------------ writes
    def _put_locked(self, key: Any, value: Any, code: int) -> None:
        if self._fork_child:  # never near a lock a parent's thread may have held at the fork
            raise self._closed_error()
        if code & 0xFF == O.C_INSERTED_FULL:  # written, and its group's buffer is full
            with self._wlock:
                g = code >> O.GROUP_SHIFT
                if self._closed or not self._live.buffer_full(g):  # another writer folded it
                    return
                self._fold(g)
            self._after_write()
            return
        k = key if type(key) is bytes and 0 < len(key) <= self._max_len else self._exact_key(key)
        v = value if type(value) is bytes else KS.check_value(value)
        with self._wlock:
            if self._closed:
                raise self._closed_error()
            dur = self._dur
            if dur is not None:
                dur.log_put(k, v)
            c = self._upsert(self._addr, k, v)
            c = self._written(c, k, v) if c & 0xFF else 0
        if c or dur is not None:
            self._after_write()

    @compiled(PUT, "put", "_put_locked")
    def put(self, key: Any, value: Any) -> None:
        """Insert or update ``key``; durable per the sync policy when this returns."""
        # The hottest write: one compiled call, made without the writer lock when nobody
        # holds it (the call holds the GIL); anything else goes to _put_locked.  As compiled
        # (methods.py), the call is made from C.
        c = self._put(self._addr, key, value)
        if c:
            self._put_locked(key, value, c)

    __setitem__ = put

    def _after_write(self) -> None:
        """After a write (writer lock released): wait for the retrainer when its backlog is
        past the limit, take a checkpoint when the log is past ``checkpoint_bytes``."""
        if self._queue.must_wait():
            self._queue.wait()
        dur = self._dur
        if (dur is not None and dur.appended > self.options.checkpoint_bytes and self._ckpt_thread is None
                and not self._closed):
            self._ckpt_thread = threading.Thread(target=self._auto_checkpoint, name="learnedidx-checkpoint",
                                                 daemon=True)
            self._ckpt_thread.start()

    def _auto_checkpoint(self) -> None:
        try:
            self._checkpoint()
        except Exception:  # the log still holds every write; the next checkpoint tries again
            log.exception("automatic checkpoint of %s failed", self._dur.dir if self._dur else None)
        finally:
            self._ckpt_thread = None

    def _exact_key(self, key: Any) -> bytes:
        k = self._key(key)
        return k if type(k) is bytes else bytes(k)

    def _written(self, code: int, k: bytes, v: bytes) -> bool:
        """The rest of a write whose code was not C_UPDATED (writer lock held); True when it
        folded a buffer in (which may call for a stall, :meth:`_after_write`)."""
        folded = False
        while True:
            op, g = code & 0xFF, code >> O.GROUP_SHIFT
            if op == O.C_INSERTED:
                return folded
            if op == O.C_INSERTED_FULL:
                self._fold(g)
                return True
            if op == O.C_UPDATED:
                return folded
            if op == O.C_NEED_COW:
                with _no_gc():
                    self._live.copy_group(g)
            elif op == O.C_FULL:
                self._fold(g)
                folded = True
            else:
                raise LearnedIdxError(f"write refused with code {op}")
            code = self._upsert(self._addr, k, v)

    def _fold(self, g: int) -> None:
        """Fold group g's full insert buffer in (writer lock held) and queue its retrain."""
        t0 = time.perf_counter()
        with _no_gc():
            gids, ins, dropped = self._live.fold(g)
        self._stats["merges"] += 1
        self._stats["splits"] += len(gids) > 1
        self._stats["merge_seconds"] += time.perf_counter() - t0
        self._queue.add(gids, ins + dropped)
        self._queue.after_fold()

    def delete(self, key: Any) -> bool:
        """Remove ``key``; True if it was present."""
        self._check_open()
        k = self._exact_key(key)
        with self._wlock:
            self._check_open()
            if self._get(self._addr, k) is MISSING:
                return False
            if self._dur is not None:
                self._dur.log_delete(k)
            self._remove(k)
        self._after_write()
        return True

    def _remove(self, k: bytes) -> bool:
        while True:
            code = self._delete(self._addr, k)
            op = code & 0xFF
            if op == O.C_DELETED:
                return True
            if op == O.C_NOT_FOUND:
                return False
            if op != O.C_NEED_COW:
                raise LearnedIdxError(f"delete refused with code {op}")
            with _no_gc():
                self._live.copy_group(code >> O.GROUP_SHIFT)

    def __delitem__(self, key: Any) -> None:
        if not self.delete(key):
            raise KeyError(key)

    def _batch(self, keys: Any, values: Sequence[Any], reads: bool) -> tuple[list, list]:
        """Checked lists of exact keys and values (None for reads where ``reads``), copies
        of the caller's: what is logged is what is applied, whatever another thread does
        to the caller's lists meanwhile."""
        klist = list(keys) if type(keys) is list else self._key_list(keys)
        vlist = list(KS.sequence(values, "values"))
        KS.check_same_length(len(klist), len(vlist))
        if self._check_batch(self._addr, id(klist), id(vlist), reads) >= 0:
            klist = KS.key_list(klist, self._max_len)
            vlist = [None if v is None and reads else KS.check_value(v) for v in vlist]
        return klist, vlist

    def put_many(self, keys: Any, values: Sequence[Any]) -> None:
        """Insert/update many pairs as one atomic, durable batch."""
        self._check_open()
        klist, vlist = self._batch(keys, values, False)
        with self._wlock:
            self._check_open()
            if self._dur is not None:
                self._dur.log_batch([(OP_PUT, k, v) for k, v in zip(klist, vlist)])
            if self._size == 0 and len(klist) >= self.options.group_size and self._live.is_empty():
                self._bulk_load(klist, vlist)
            else:
                self._apply(klist, vlist, [None] * len(klist))
        self._after_write()

    def apply_many(self, keys: Any, values: Sequence[Any]) -> list:
        """Reads and writes in order, as one call: where ``values[i]`` is None, ``keys[i]``
        is read (result: its value at that point of the batch, or None), else ``values[i]``
        is written under it (result: None).

        The outcome is that of the same calls made one after another (a read sees every
        earlier write of the batch), done in one compiled call, with the writes logged as
        one atomic, durable batch before any is applied.  ``keys`` as for :meth:`get_many`."""
        self._check_open()
        klist, vlist = self._batch(keys, values, True)
        out = [None] * len(klist)
        nreads = vlist.count(None)
        if nreads == len(vlist):  # reads only: no lock, no log
            self._get_many(self._addr, id(klist), id(out))
            return out
        if nreads == 0:  # writes only: put_many's (which bulk-loads an empty store)
            self.put_many(klist, vlist)
            return out
        with self._wlock:
            self._check_open()
            if self._dur is not None:
                self._dur.log_batch([(OP_PUT, k, v) for k, v in zip(klist, vlist) if v is not None])
            self._apply(klist, vlist, out)
        self._after_write()
        return out

    def _apply(self, klist: list, vlist: list, out: list) -> None:
        """Apply a checked batch (writer lock held)."""
        t = 0
        counts = self._counts
        while True:
            code = self._apply_many(self._addr, id(klist), id(vlist), id(out), t, counts)
            t, op = code >> O.GROUP_SHIFT, code & 0xFF
            if op == O.C_UPDATED:
                return
            g = int(counts[0])
            if op == O.C_NEED_COW:
                with _no_gc():
                    self._live.copy_group(g)
            elif op in (O.C_FULL, O.C_INSERTED_FULL):
                self._fold(g)
            else:
                raise LearnedIdxError(f"batch refused with code {op} at {t}")

    def _bulk_load(self, klist: list, vlist: list) -> None:
        """An empty store takes a whole batch at once (writer lock held)."""
        batch = KeyBatch.from_keys(klist)
        with _no_gc():
            new, n = grouping.bulk(batch.arena, batch.offsets, vlist, self.options, self._retrainer, self._max_len)
            self._live.adopt(new)
        self._size = n

    # ------------------------------------------------------------------ retraining
    def retrain_now(self) -> None:
        """Fold every buffered write in and retrain every group that is due, now."""
        self._check_open()
        with self._wlock:
            self._check_open()
            for g in self._live.buffered_groups():
                with _no_gc():
                    gids, ins, dropped = self._live.fold(g)
                self._queue.add(gids, ins + dropped)
            if self.options.retrain == "inline":  # inline stores train under the writer lock
                self._queue.drain(locked=True)
                return
        self._queue.drain()

    # ------------------------------------------------------------------ durability
    def _recover(self, dur: Durability) -> None:
        rec = dur.recover()
        n = len(rec.key_offsets) - 1
        if n:
            vb, vo = rec.val_arena.tobytes(), rec.val_offsets.tolist()
            values = [vb[vo[i]:vo[i + 1]] for i in range(n)]
            new = grouping.build(rec.key_arena, rec.key_offsets, values, self.options, self._retrainer,
                                 self._max_len)
            self._live.adopt(new)
            self._size = n
        for op, k, v in rec.log:
            if op == OP_PUT:
                code = self._upsert(self._addr, k, v)
                if code & 0xFF:
                    self._written(code, k, v)
            else:
                self._remove(k)

    def checkpoint(self) -> None:
        """Write the store as it is now to a checkpoint, and drop the log it covers.  Writers
        wait only while the image is pinned, not while it is written."""
        self._check_open()
        self._checkpoint()

    def _checkpoint(self) -> None:
        if self._dur is None or self._dur.closed:
            return
        with self._ckpt_lock:
            with self._wlock:
                view = self._live.pin()
                seg = self._dur.start_checkpoint()
            try:
                self._dur.finish_checkpoint(seg, self._live.export(view))
            finally:
                self._live.unpin(view)

    # ------------------------------------------------------------------ admin
    def stats(self) -> dict:
        """Counters of fold-ins, retraining and stalls, and the shape of the index (docs/store.md)."""
        self._check_open()
        live = self._live
        tab = live.tab[live.root_order()]
        win = tab[:, L.T_ERRHI] - tab[:, L.T_ERRLO]
        return {**self._retrainer.stats, **self._queue.stats, **self._stats, "groups": len(tab), "keys": self._size,
                "merged_keys": int(tab[:, L.T_N].sum()), "buffered_writes": live.buffered(),
                "backlog": self._queue.backlog, "due_groups": len(self._queue.due),
                "trainer": self._retrainer.name, "trainer_failed": self._retrainer.failed,
                "max_error_window": int(win.max()) + 1 if len(tab) else 0}

    def close(self) -> None:
        """Stop the retrainer, checkpoint (durable stores) and release the directory, also
        when the checkpoint fails (which then raises).  A write racing ``close()`` either
        completes before it or raises :class:`StoreClosedError`.  In a forked child, the
        parent's store is left alone (nothing is written, nothing released)."""
        if self._closed:
            return
        self._queue.close()
        with self._wlock:
            if self._closed:
                return
            self._closed = True
            FI.set_slots(self._addr, np.array([L.D_MAXLEN], np.int64), np.zeros(1, np.int64))
        _open_stores.discard(self)
        ck = self._ckpt_thread
        if ck is not None:
            ck.join()
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

    def __del__(self, _finalizing=sys.is_finalizing) -> None:
        # Best effort: stop the thread of a store nobody closed.  A store collected only at
        # interpreter exit (kept by gc.freeze(), say) has nothing to stop: the interpreter
        # ends its daemon thread, and the modules close() uses may be gone (hence the
        # default argument, bound while they were there).
        queue = getattr(self, "_queue", None)
        if queue is not None and not getattr(self, "_closed", True) and not _finalizing():
            queue.close()
