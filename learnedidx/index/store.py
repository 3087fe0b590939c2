"""The Store: a string-key learned index (SIndex groups, SIA retraining) with a KV API.

Layout
------
Merged keys live in one sorted flat ``uint8`` arena with ``int64`` offsets; values in a
list aligned with it.  The arena is cut into *groups* of consecutive keys; each group has a
linear model over the bytes after its common prefix (feature length capped at
``max_features``), trained by Householder QR, with exact error bounds.  A lookup runs, in
Numba: root search over the group pivots → group model prediction → binary search inside
``[pred + err_lo, pred + err_hi]``.  Writes go to the delta buffer (counted per group) and
are visible at once; a retrainer merges groups whose buffered writes passed
``buffer_threshold`` and retrains them incrementally (SIA: memoized R per group).

Thread safety
-------------
Any number of reader threads and writer threads may share a Store.  Writes are serialized
by a lock; reads take no lock: they read one immutable snapshot of the merged arrays and
the delta buffer (dict operations are atomic), so a read sees every write acknowledged
before it started.  Merges build new arrays and swap them in atomically.
"""
from __future__ import annotations

import bisect
import contextlib
import functools
import itertools
import logging
import operator
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
from sortedcontainers import SortedDict

from learnedidx.errors import ConfigError, KeyLengthError, KeyTypeError, StoreClosedError, is_offload_failure
from learnedidx.index import kernels as K
from learnedidx.index import pyobjects as P
from learnedidx.index.durability import OP_DELETE, OP_PUT, Durability
from learnedidx.index.training import TrainingBackend, get_backend

log = logging.getLogger(__name__)

_TOMB = object()  # delta-buffer marker of a deleted key
_MISSING = object()


@functools.cache
def _point_kernels() -> tuple:
    """(find, seek) entry points for the exact argument types a _State passes: the address
    of its index descriptor (see :func:`~learnedidx.index.kernels.index_descriptor`) and
    the query as ``bytes``."""
    arrays = (np.frombuffer(b"k", np.uint8), np.array([0, 1], np.int64), np.zeros(1, np.int64),
              np.zeros((1, K.G_COLS), np.int64), np.zeros((1, 2)))
    desc = K.index_descriptor(*arrays, 0, 1)  # one empty group: the example calls find nothing
    ex = (desc.ctypes.data, b"k")
    return K.entry_point(K.find_at, *ex), K.entry_point(K.seek_at, *ex)


@dataclass
class KeyBatch:
    """Keys as one arena + offsets (exact bytes, NULs included): the zero-copy batch input."""

    arena: np.ndarray
    offsets: np.ndarray

    @classmethod
    def from_keys(cls, keys: Sequence[bytes]) -> "KeyBatch":
        lens = np.fromiter((len(k) for k in keys), np.int64, len(keys))
        offsets = np.zeros(len(keys) + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        return cls(np.frombuffer(b"".join(keys), np.uint8), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def key(self, i: int) -> bytes:
        return self.arena[self.offsets[i]:self.offsets[i + 1]].tobytes()

    def keys(self) -> list[bytes]:
        ab, ol = self.arena.tobytes(), self.offsets.tolist()
        return [ab[ol[i]:ol[i + 1]] for i in range(len(ol) - 1)]


@dataclass
class _GroupModel:
    """Per-group training memo (SIA): R factor and bookkeeping for lazy deletes."""

    R: np.ndarray | None = None
    prefix: int = 0
    feat: int = 0
    deletes_since_full: int = 0


@dataclass
class _State:
    """An immutable snapshot of the merged data plus the live delta buffer."""

    arena: np.ndarray
    offsets: np.ndarray
    values: list
    gint: np.ndarray  # (G, kernels.G_COLS) int64, see kernels.G_*
    coef: np.ndarray  # (G, max_features + 1)
    models: list  # _GroupModel per group
    pivots: list  # first key of each group, for bisect
    buf: SortedDict  # key -> value | _TOMB
    counts: list  # buffered writes per group
    size: int  # number of live keys
    max_len: int  # the store's max_key_len (checked by the point lookup kernel)

    def __post_init__(self) -> None:
        # The arena lives in an immutable bytes object (slicing it is the cheapest way to
        # materialize keys for scans); Numba reads it through a zero-copy uint8 view.
        self.ab = self.arena.tobytes()
        self.arena = np.frombuffer(self.ab, np.uint8)
        # Exactly the types _point_kernels() was compiled for (C order, writable int64/float64).
        self.offsets = np.require(self.offsets, np.int64, ["C", "W"])
        self.gint = np.require(self.gint, np.int64, ["C", "W"])
        self.coef = np.require(self.coef, np.float64, ["C", "W"])
        self.heads = K.build_heads(self.arena, self.offsets, self.gint)
        # The descriptor holds these arrays' addresses: they are never replaced afterwards,
        # and a lookup holds the _State (hence the arrays) while its kernel runs.
        self.items = P.items_address(self.values)
        self.desc = K.index_descriptor(self.arena, self.offsets, self.heads, self.gint, self.coef, self.items,
                                       self.max_len)
        self.ref = self.desc.ctypes.data  # the lookups' one argument (see _point_kernels)
        self.find_kernel, self.seek_kernel = _point_kernels()

    def find(self, k: bytes) -> int:
        """Index of ``k`` in the merged arrays, or -1."""
        return self.find_kernel(self.ref, k)

    def seek(self, k: bytes) -> int:
        """Index of the first merged key >= ``k``."""
        return self.seek_kernel(self.ref, k)

    def search(self, batch: "KeyBatch", exact: bool) -> np.ndarray:
        """:func:`~learnedidx.index.kernels.search_many` of ``batch`` (values prefetched
        when ``exact``)."""
        return K.search_many(self.arena, self.offsets, self.heads, self.gint, self.coef,
                             batch.arena, batch.offsets, exact, self.items)

    def nkeys(self) -> int:
        return len(self.offsets) - 1

    def key(self, i: int) -> bytes:
        return self.ab[self.offsets[i]:self.offsets[i + 1]]


class Store:
    """An ordered byte-string key-value store indexed by a learned index.

    Parameters
    ----------
    path : str or None
        Directory for the write-ahead log and checkpoints; in-memory when None.
    sync : {"always", "batch", "off"}
        WAL sync policy (see :mod:`learnedidx.index.durability`).
    max_key_len : int
        Longest accepted key in bytes (keys are 1..max_key_len bytes).
    group_size : int
        Target keys per group; groups over ``2 * group_size`` are split, and groups are
        halved (down to ``group_size // 8`` keys) while their feature length exceeds
        ``max_features``.
    max_features : int
        Cap on the feature length (key bytes after the group prefix) of a group model.
    buffer_threshold : int
        Buffered writes after which a group is merged and retrained.
    retrain : {"background", "inline", "off"}
        Who merges: a background thread every ``retrain_interval`` s, the writing thread
        as soon as a group passes the threshold, or nobody until :meth:`retrain_now`.
    trainer : str or TrainingBackend
        Training backend name (``cpu``, ``fpga-emu``, ``server``) or instance.
    trainer_options : dict
        Options passed to :func:`learnedidx.index.training.get_backend`.
    trainer_retry : float
        After the trainer fails (say the accelerator server died), groups are trained
        in-process and the trainer is tried again once this many seconds have passed.
    checkpoint_bytes : int
        Log size after which a checkpoint is taken at the next merge.
    """

    def __init__(
        self,
        path: str | os.PathLike | None = None,
        *,
        sync: str = "always",
        sync_interval: float = 0.005,
        max_key_len: int = 4096,
        group_size: int = 2048,
        max_features: int = 32,
        buffer_threshold: int = 256,
        retrain: str = "background",
        retrain_interval: float = 1.0,
        trainer: str | TrainingBackend = "cpu",
        trainer_options: dict | None = None,
        trainer_retry: float = 30.0,
        checkpoint_bytes: int = 64 << 20,
        full_retrain_fraction: float = 0.1,
    ) -> None:
        if not isinstance(max_key_len, int) or max_key_len < 1:
            raise ConfigError("max_key_len must be a positive integer")
        if group_size < 16:
            raise ConfigError("group_size must be at least 16")
        if not 1 <= max_features <= 255:
            raise ConfigError("max_features must be in 1..255")
        if buffer_threshold < 1:
            raise ConfigError("buffer_threshold must be at least 1")
        if retrain not in ("background", "inline", "off"):
            raise ConfigError("retrain must be 'background', 'inline' or 'off'")
        self.max_key_len = max_key_len
        self.group_size = group_size
        self.max_features = max_features
        self.buffer_threshold = buffer_threshold
        self.retrain_mode = retrain
        self.retrain_interval = retrain_interval
        self.checkpoint_bytes = checkpoint_bytes
        self.full_retrain_fraction = full_retrain_fraction
        self._trainer = trainer if not isinstance(trainer, str) else get_backend(trainer, **(trainer_options or {}))
        self._cpu = self._trainer if getattr(self._trainer, "name", "") == "cpu" else get_backend("cpu")
        self._trainer_failed = False
        self._trainer_failed_at = 0.0
        self._inplace: list[bytes] | None = None  # keys updated in place while a merge runs
        self.trainer_retry = trainer_retry
        self._wlock = threading.RLock()  # serializes writers
        self._mlock = threading.RLock()  # serializes merges (checkpoints run inside merges)
        self._closed = False
        self._stats = {"retrains_full": 0, "retrains_incremental": 0, "train_seconds": 0.0,
                       "merges": 0, "splits": 0, "merge_seconds": 0.0, "device_cycles": 0}
        self._st = self._empty_state()
        self._dur: Durability | None = None
        if path is not None:
            self._dur = Durability(path, sync=sync, sync_interval=sync_interval)
            self._recover(self._dur)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if retrain == "background":
            self._thread = threading.Thread(target=self._retrain_loop, name="learnedidx-retrainer", daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------ input checks
    def _key(self, key: Any) -> bytes:
        if isinstance(key, bytes):
            k = key
        elif isinstance(key, str):
            k = key.encode("utf-8")
        elif isinstance(key, (bytearray, memoryview)):
            k = bytes(key)
        else:
            raise KeyTypeError(f"keys must be bytes or str, not {type(key).__name__}")
        if not 1 <= len(k) <= self.max_key_len:
            raise KeyLengthError(f"key length {len(k)} outside 1..{self.max_key_len} bytes")
        return k

    @staticmethod
    def _value(value: Any) -> bytes:
        if isinstance(value, bytes):
            return value
        if isinstance(value, (bytearray, memoryview)):
            return bytes(value)
        raise KeyTypeError(f"values must be bytes, not {type(value).__name__}")

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("the store is closed")

    # ------------------------------------------------------------------ reads
    def _lookup(self, st: _State, k: bytes) -> Any:
        v = st.buf.get(k, _MISSING)
        if v is not _MISSING:
            return v
        i = st.find(k)
        return st.values[i] if i >= 0 else _TOMB

    def get(self, key: Any, default: Any = None) -> Any:
        """The value stored under ``key``, or ``default``."""
        # The hottest path of the API, kept to a few bytecodes: the kernel checks the key's
        # length, and the delta buffer is looked at only when it holds something.
        if self._closed:
            raise StoreClosedError("the store is closed")
        if type(key) is not bytes:
            return self.get(self._key(key), default)
        st = self._st
        v = st.buf.get(key, _MISSING) if st.buf else _MISSING
        if v is _MISSING:
            i = st.find_kernel(st.ref, key)
            if i >= 0:
                return st.values[i]
            if i == -1:
                return default
            self._key(key)  # -2: raises the length error
        return default if v is _TOMB else v

    def __getitem__(self, key: Any) -> bytes:
        v = self.get(key, _MISSING)
        if v is _MISSING:
            raise KeyError(key)
        return v

    def __contains__(self, key: Any) -> bool:
        return self.get(key, _MISSING) is not _MISSING

    def __len__(self) -> int:
        return self._st.size

    @staticmethod
    def _listed(keys: Any) -> list:
        if isinstance(keys, np.ndarray) and keys.dtype.kind == "S":
            return keys.tolist()  # numpy 'S' items lose trailing NUL bytes
        return keys if isinstance(keys, list) else list(keys)

    def _key_list(self, keys: Any) -> list[bytes]:
        """``keys`` as a list of checked ``bytes`` (the list itself when it already is one)."""
        if isinstance(keys, KeyBatch):
            return keys.keys()
        klist = self._listed(keys)
        if klist and set(map(type, klist)) == {bytes} and min(map(len, klist)) >= 1 \
                and max(map(len, klist)) <= self.max_key_len:
            return klist
        return [self._key(k) for k in klist]

    def _as_batch(self, keys: Any) -> tuple[KeyBatch, list[bytes] | None]:
        """``keys`` packed for the search kernels, and as a list of checked ``bytes`` (None
        when they came as a :class:`KeyBatch`)."""
        if isinstance(keys, KeyBatch):
            return keys, None
        klist = self._listed(keys)
        if P.LAYOUT_OK and len(klist) > 16:
            # One compiled pass over the list's items (the usual case: all exact bytes of
            # valid lengths); anything else takes the checking path below.
            arena, offsets, bad = P.pack_bytes_list(id(klist), self.max_key_len, P.BYTES_TYPE)
            if bad < 0:
                return KeyBatch(arena, offsets), klist
        klist = self._key_list(klist)
        offsets = np.fromiter(itertools.accumulate(map(len, klist), initial=0), np.int64, len(klist) + 1)
        return KeyBatch(np.frombuffer(b"".join(klist), np.uint8), offsets), klist

    def get_many(self, keys: Any) -> list:
        """Values of many keys (None where absent); the index search runs in one Numba call.

        ``keys``: a sequence of bytes/str, a numpy object or ``S`` array (trailing NUL bytes
        of ``S`` items are dropped by numpy), or a :class:`KeyBatch` for exact bytes.
        """
        self._check_open()
        st = self._st
        batch, klist = self._as_batch(keys)
        idx = st.search(batch, True)
        if st.buf and klist is None:
            klist = batch.keys()
        return self._values_at(st, idx.tolist(), klist)

    @staticmethod
    def _values_at(st: _State, il: list[int], klist: list[bytes] | None) -> list:
        """Values of keys ``klist`` found at merged indexes ``il`` (-1: not merged), the
        delta buffer overriding (``klist`` may be None when the buffer is empty)."""
        vals = st.values
        if len(il) > 1 and min(il) >= 0:
            out = list(operator.itemgetter(*il)(vals))  # one C loop: half the cost of map()
        else:
            out = [vals[i] if i >= 0 else None for i in il]
        if st.buf:
            get = st.buf.get
            for j, k in enumerate(klist):
                v = get(k, _MISSING)
                if v is not _MISSING:
                    out[j] = None if v is _TOMB else v
        return out

    def _iter_from(self, st: _State, start: bytes | None, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        n = st.nkeys()
        i = 0 if start is None else int(st.seek(start))
        buf = st.buf
        bkeys = iter(buf.irange(minimum=start) if start is not None else buf.keys())
        bk = next(bkeys, None)
        ab = st.ab
        offs = st.offsets
        values = st.values
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
                    v = buf.get(bk, _TOMB)
                    if v is not _TOMB:
                        yield bk, v
                    bk = next(bkeys, None)
                if ak is None or (hi is not None and ak >= hi):
                    return
                if bk is not None and bk == ak:
                    v = buf.get(bk, _TOMB)
                    bk = next(bkeys, None)
                    if v is not _TOMB:
                        yield ak, v
                    continue
                yield ak, values[i + j]
            i = chunk_end
            step = min(step * 2, 4096)

    @staticmethod
    def _count(count: Any) -> int:
        if not isinstance(count, int) or isinstance(count, bool):
            raise TypeError(f"count must be an int, not {type(count).__name__}")
        if count < 0:
            raise ValueError("count must be >= 0")
        return count

    def scan(self, start_key: Any, count: int) -> list[tuple[bytes, bytes]]:
        """Up to ``count`` (key, value) pairs with key >= ``start_key``, in key order."""
        self._check_open()
        count = self._count(count)
        st = self._st
        k = self._key(start_key)
        return self._scan_at(st, k, int(st.seek(k)) if count else 0, count)

    def _scan_at(self, st: _State, k: bytes, i: int, count: int) -> list[tuple[bytes, bytes]]:
        """:meth:`scan` of ``count`` pairs from ``k``, whose lower bound among the merged keys is ``i``."""
        if count == 0:
            return []
        n = st.nkeys()
        e = min(n, i + count)
        ol = st.offsets[i:e + 1].tolist()
        ab = st.ab
        keys = [ab[ol[j]:ol[j + 1]] for j in range(e - i)]
        vals = st.values[i:e]
        if not st.buf:
            return list(zip(keys, vals))
        # Fold in the buffered writes up to the slice's last key (usually a few) by bisection.
        last = keys[-1] if e - i == count else None
        limit = 2 * count + 16
        pending = list(itertools.islice(st.buf.irange(minimum=k, maximum=last), limit))
        for bk in pending:
            v = st.buf.get(bk, _TOMB)
            j = bisect.bisect_left(keys, bk)
            if j < len(keys) and keys[j] == bk:
                if v is _TOMB:
                    del keys[j], vals[j]
                else:
                    vals[j] = v
            elif v is not _TOMB:
                keys.insert(j, bk)
                vals.insert(j, v)
        # Without a last key (the merged keys ran out first) pending holds every buffered key
        # from k on, unless it hit the limit; with one, buffered keys past it were not read.
        if len(keys) >= count or (last is None and len(pending) < limit):
            return list(zip(keys[:count], vals[:count]))
        # Deletes emptied part of the slice: walk on through the merged keys and the buffer.
        return list(itertools.islice(self._iter_from(st, k, None), count))

    def scan_many(self, start_keys: Any, count: int | Sequence[int]) -> list[list[tuple[bytes, bytes]]]:
        """:meth:`scan` for many start keys, the seeks in one Numba call; ``count`` is one
        count for all, or one per start key."""
        self._check_open()
        st = self._st
        batch, klist = self._as_batch(start_keys)
        counts = [self._count(count)] * len(batch) if isinstance(count, int) else [self._count(c) for c in count]
        if len(counts) != len(batch):
            raise ValueError(f"{len(batch)} start keys but {len(counts)} counts")
        pos = st.search(batch, False).tolist()
        if klist is None:
            klist = batch.keys()
        return list(map(self._scan_at, itertools.repeat(st), klist, pos, counts))

    def range(self, lo: Any, hi: Any) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs with ``lo <= key < hi``, in key order."""
        self._check_open()
        return self._iter_from(self._st, self._key(lo), self._key(hi))

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        self._check_open()
        return self._iter_from(self._st, None, None)

    def __iter__(self) -> Iterator[bytes]:
        return (k for k, _ in self.items())

    # ------------------------------------------------------------------ writes
    def _apply(self, k: bytes, v: Any, i: int | None = None) -> None:
        """Apply one write (writer lock held): an update of a merged key in place, anything
        else to the delta buffer.  ``i``: ``k``'s index in the merged arrays if already
        searched (-1: not there)."""
        st = self._st
        old = st.buf.get(k, _MISSING)
        if old is _MISSING:
            i = st.find(k) if i is None else i
            if i >= 0 and v is not _TOMB:
                # The key set does not change, so nothing needs merging or retraining. A merge
                # running meanwhile may already have copied this slot: it re-applies the log.
                st.values[i] = v
                if self._inplace is not None:
                    self._inplace.append(k)
                return
            old = st.values[i] if i >= 0 else _TOMB
        if v is _TOMB:
            if old is _TOMB:
                return
            st.size -= 1
        elif old is _TOMB:
            st.size += 1
        st.buf[k] = v
        g = bisect.bisect_right(st.pivots, k) - 1
        st.counts[g if g >= 0 else 0] += 1

    def put(self, key: Any, value: Any) -> None:
        """Insert or update ``key``; durable per the sync policy when this returns."""
        self._check_open()
        k = key if type(key) is bytes and 0 < len(key) <= self.max_key_len else self._key(key)
        v = value if type(value) is bytes else self._value(value)
        with self._wlock:
            self._check_open()
            if self._dur is not None:
                self._dur.log_put(k, v)
            self._apply(k, v)
        self._after_write()

    __setitem__ = put

    def delete(self, key: Any) -> bool:
        """Remove ``key``; True if it was present."""
        self._check_open()
        k = self._key(key)
        with self._wlock:
            self._check_open()
            if self._lookup(self._st, k) is _TOMB:
                return False
            if self._dur is not None:
                self._dur.log_delete(k)
            self._apply(k, _TOMB)
        self._after_write()
        return True

    def __delitem__(self, key: Any) -> None:
        if not self.delete(key):
            raise KeyError(key)

    def put_many(self, keys: Any, values: Sequence[Any]) -> None:
        """Insert/update many pairs as one atomic, durable batch."""
        self._check_open()
        klist = self._key_list(keys)
        vlist = values if isinstance(values, list) and set(map(type, values)) <= {bytes} else [self._value(v) for v in values]
        if len(klist) != len(vlist):
            raise ValueError(f"{len(klist)} keys but {len(vlist)} values")
        bulk = self._st.nkeys() == 0 and not self._st.buf and len(klist) >= self.group_size
        with self._mlock if bulk else contextlib.nullcontext(), self._wlock:  # lock order: merge, write
            self._check_open()
            if self._dur is not None:
                self._dur.log_batch([(OP_PUT, k, v) for k, v in zip(klist, vlist)])
            if bulk and self._st.nkeys() == 0 and not self._st.buf:
                self._st = self._bulk_state(klist, vlist)
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
        vlist = values if isinstance(values, list) else list(values)
        nreads = vlist.count(None)
        if nreads == len(vlist):  # reads only: no lock, no write log
            out = self.get_many(keys)
            if len(out) != nreads:
                raise ValueError(f"{len(out)} keys but {nreads} values")
            return out
        if not nreads:  # writes only: put_many (bulk-loads an empty store)
            self.put_many(keys, vlist)
            return [None] * len(vlist)
        batch, klist = self._as_batch(keys)
        klist = klist if klist is not None else batch.keys()
        if len(klist) != len(vlist):
            raise ValueError(f"{len(klist)} keys but {len(vlist)} values")
        if not set(map(type, vlist)) <= {bytes, type(None)}:
            vlist = [v if v is None else self._value(v) for v in vlist]
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
                    out[a:w] = self._values_at(st, il[a:w], klist[a:w])
                if w < len(vlist):
                    self._apply(klist[w], vlist[w], il[w])
                a = w + 1
        self._after_write()
        return out

    def _bulk_state(self, klist: list[bytes], vlist: list[bytes]) -> _State:
        """Groups built straight from a batch loaded into an empty store (the last value of
        a repeated key wins), skipping the delta buffer."""
        d = dict(zip(klist, vlist))
        ks = sorted(d)
        kb = KeyBatch.from_keys(ks)
        return self._regroup(self._ungrouped(kb.arena, kb.offsets, [d[k] for k in ks]))

    def _after_write(self) -> None:
        if self.retrain_mode == "inline":  # background and off: nothing to do here
            st = self._st
            if max(st.counts) >= self.buffer_threshold or len(st.buf) >= 64 * self.buffer_threshold:
                self._merge()

    # ------------------------------------------------------------------ merge & retrain
    def _ungrouped(self, arena: np.ndarray, offsets: np.ndarray, values: list) -> _State:
        """Sorted keys and their values with no groups yet (:meth:`_regroup` builds them)."""
        return _State(arena, offsets, values, np.zeros((0, K.G_COLS), np.int64),
                      np.zeros((0, self.max_features + 1)), [], [], SortedDict(), [0], len(values), self.max_key_len)

    def _empty_state(self) -> _State:
        return self._ungrouped(np.zeros(0, np.uint8), np.zeros(1, np.int64), [])

    def retrain_now(self) -> None:
        """Merge every buffered write and retrain the groups they touched, synchronously."""
        self._check_open()
        self._merge(all_groups=True)

    def _retrain_loop(self) -> None:
        while not self._stop.wait(self.retrain_interval):
            try:
                st = self._st
                if st.buf and (max(st.counts) >= self.buffer_threshold or len(st.buf) >= 64 * self.buffer_threshold):
                    self._merge()
                elif self._dur is not None and self._dur.log_bytes() > self.checkpoint_bytes:
                    self.checkpoint()
            except Exception:  # keep serving; the next round retries
                log.exception("background merge failed")

    def _train(self, A: np.ndarray, b: np.ndarray, R_old: np.ndarray | None, A_delta: np.ndarray | None):
        retry = self._trainer_failed and time.monotonic() - self._trainer_failed_at >= self.trainer_retry
        backend = self._cpu if self._trainer_failed and not retry else self._trainer
        name = getattr(backend, "name", backend)
        try:
            res = backend.train_full(A, b) if R_old is None else backend.train_incremental(R_old, A_delta, A, b)
            if retry:
                log.warning("training backend %s answers again; offloading training to it", name)
                self._trainer_failed = False
        except Exception as exc:
            if backend is self._cpu or not is_offload_failure(exc):
                raise
            if not self._trainer_failed:
                log.warning("training backend %s failed (%s); training in-process, retrying it every %g s",
                            name, exc, self.trainer_retry)
            self._trainer_failed = True
            self._trainer_failed_at = time.monotonic()
            res = self._cpu.train_full(A, b) if R_old is None else self._cpu.train_incremental(R_old, A_delta, A, b)
        coef = np.asarray(res.coef, np.float64)
        if not np.all(np.isfinite(coef)):  # never trust a device blindly: retrain on the host
            res = self._cpu.train_full(A, b)
            coef = res.coef
        self._stats["train_seconds"] += res.seconds
        self._stats["device_cycles"] += int(res.device_cycles)
        self._stats["retrains_full" if R_old is None else "retrains_incremental"] += 1
        return np.asarray(res.R, np.float64), coef

    def _fit_group(self, arena, offsets, s: int, e: int, memo: _GroupModel | None, new_keys: list | None,
                   deletes: int) -> tuple[_GroupModel, np.ndarray, int, int, int, int]:
        """Train the model of keys s..e-1; returns (memo, coef, prefix, feat, err_lo, err_hi)."""
        if e - s <= 1:
            coef = np.zeros(self.max_features + 1)
            return _GroupModel(None, 0, 0), coef, 0, 0, 0, 0
        prefix = int(K.common_prefix_len(arena, offsets, s, e))
        feat = int(min(self.max_features, K.max_key_len(offsets, s, e) - prefix))
        A = K.build_features(arena, offsets, s, e, prefix, feat)
        b = np.arange(e - s, dtype=np.float64)
        incremental = (
            memo is not None and memo.R is not None and memo.prefix == prefix and memo.feat == feat
            and new_keys is not None
            and memo.deletes_since_full + deletes <= self.full_retrain_fraction * (e - s)
        )
        if incremental:
            nk = KeyBatch.from_keys(new_keys)
            A_delta = K.build_features(nk.arena, nk.offsets, 0, len(nk), prefix, feat)
            R, c = self._train(A, b, memo.R, A_delta)
            new_memo = _GroupModel(R, prefix, feat, memo.deletes_since_full + deletes)
        else:
            R, c = self._train(A, b, None, None)
            new_memo = _GroupModel(R, prefix, feat, 0)
        coef = np.zeros(self.max_features + 1)
        coef[: feat + 1] = c[: feat + 1]
        lo, hi = K.error_bounds(arena, offsets, s, e, prefix, feat, coef)
        return new_memo, coef, prefix, feat, int(lo), int(hi)

    def _merge(self, all_groups: bool = False) -> None:
        with self._mlock:
            t0 = time.perf_counter()
            with self._wlock:
                st = self._st
                if not st.buf:
                    return
                G = len(st.models)
                if G == 0 or all_groups:
                    dirty = set(range(max(G, 1)))
                else:
                    dirty = {g for g, c in enumerate(st.counts) if c >= self.buffer_threshold}
                    if not dirty and len(st.buf) >= 64 * self.buffer_threshold:
                        dirty = {g for g, c in enumerate(st.counts) if c > 0}
                snap = dict(st.buf)  # frozen copy of what this merge folds in
                self._inplace = []
            try:
                new = self._build(st, snap, dirty)
                with self._wlock:
                    for k in self._inplace:  # in-place updates made while _build copied the values
                        i, j = new.find(k), self._st.find(k)
                        if i >= 0 and j >= 0:
                            new.values[i] = self._st.values[j]
                    live = self._st.buf
                    carried = SortedDict()
                    for k, v in live.items():
                        g = bisect.bisect_right(st.pivots, k) - 1
                        merged_here = (g if g >= 0 else 0) in dirty and snap.get(k, _MISSING) is v
                        if not merged_here:
                            carried[k] = v
                    new.buf = carried
                    new.counts = [0] * max(1, len(new.models))
                    for k in carried:
                        g = bisect.bisect_right(new.pivots, k) - 1
                        new.counts[g if g >= 0 else 0] += 1
                    new.size = self._st.size
                    self._st = new
                    self._stats["merges"] += 1
                    self._stats["merge_seconds"] += time.perf_counter() - t0
            finally:
                self._inplace = None  # a write logged after the swap only reaches a dropped list
            if self._dur is not None and self._dur.log_bytes() > self.checkpoint_bytes:
                self.checkpoint()

    def _build(self, st: _State, snap: dict, dirty: set) -> _State:
        """New merged arrays and models with the buffered writes of the ``dirty`` groups folded in."""
        G = len(st.models)
        # Partition the snapshot of the buffer by group.
        per_group: dict[int, list] = {}
        for k in sorted(snap):
            g = bisect.bisect_right(st.pivots, k) - 1 if G else 0
            g = g if g >= 0 else 0
            if g in dirty:
                per_group.setdefault(g, []).append(k)
        plan: list = []  # ("keep", g, start, end) or ("dirty", g, start, end, keys, values, new_keys, deletes)
        pos = 0
        for g in range(max(G, 1)):
            s, e = (int(st.gint[g, K.G_START]), int(st.gint[g, K.G_END])) if G else (0, 0)
            if g not in per_group:
                if e > s:
                    plan.append(("keep", g, pos, pos + (e - s)))
                    pos += e - s
                continue
            merged_k, merged_v, new_keys, deletes = _merge_sorted(
                [st.key(i) for i in range(s, e)], st.values[s:e], per_group[g], snap)
            if merged_k:
                plan.append(("dirty", g, pos, pos + len(merged_k), merged_k, merged_v, new_keys, deletes))
                pos += len(merged_k)
        # Assemble the new arena/offsets/values in plan order.
        arena_parts, lens_parts, values = [], [], []
        for p in plan:
            if p[0] == "keep":
                g = p[1]
                s, e = int(st.gint[g, K.G_START]), int(st.gint[g, K.G_END])
                arena_parts.append(st.arena[st.offsets[s]:st.offsets[e]])
                lens_parts.append(np.diff(st.offsets[s:e + 1]))
                values.extend(st.values[s:e])
            else:
                mk, mv = p[4], p[5]
                arena_parts.append(np.frombuffer(b"".join(mk), np.uint8))
                lens_parts.append(np.fromiter((len(k) for k in mk), np.int64, len(mk)))
                values.extend(mv)
        arena = np.concatenate(arena_parts) if arena_parts else np.zeros(0, np.uint8)
        offsets = np.zeros(pos + 1, np.int64)
        if lens_parts:
            np.cumsum(np.concatenate(lens_parts), out=offsets[1:])
        # Groups: keep untouched ones (shifted), retrain dirty ones, split big ones.
        gint_rows: list = []
        coef_rows: list = []
        models: list = []
        for p in plan:
            if p[0] == "keep":
                g = p[1]
                row = st.gint[g].copy()
                row[K.G_START], row[K.G_END] = p[2], p[3]
                gint_rows.append(row); coef_rows.append(st.coef[g]); models.append(st.models[g])
                continue
            _, g, s, e, _, _, new_keys, deletes = p
            old_feat = st.models[g].feat if G else 0
            feat_grew = old_feat < self.max_features < self._feature_len(arena, offsets, s, e)
            split = e - s > 2 * self.group_size or (feat_grew and e - s > self._min_group)
            bounds = self._cut(arena, offsets, s, e) if split else [s, e]
            if len(bounds) > 2:
                self._stats["splits"] += 1
            memo = st.models[g] if (G and len(bounds) == 2) else None
            for a, b in zip(bounds[:-1], bounds[1:]):
                m, c, prefix, feat, lo, hi = self._fit_group(arena, offsets, a, b, memo, new_keys if memo else None, deletes)
                gint_rows.append(np.array([a, b, prefix, feat, lo, hi, 0], np.int64))
                coef_rows.append(c); models.append(m)
        G2 = len(models)
        gint = np.array(gint_rows, np.int64).reshape(G2, K.G_COLS)
        coef = np.array(coef_rows, np.float64).reshape(G2, self.max_features + 1)
        pivots = [arena[offsets[r[0]]:offsets[r[0] + 1]].tobytes() for r in gint_rows]
        return _State(arena, offsets, values, gint, coef, models, pivots, SortedDict(), [0] * max(G2, 1), st.size, st.max_len)

    # ------------------------------------------------------------------ durability
    def _recover(self, dur: Durability) -> None:
        rec = dur.recover()
        n = len(rec.key_offsets) - 1
        if n:
            va, vo = rec.val_arena, rec.val_offsets
            vb = va.tobytes()
            values = [vb[vo[i]:vo[i + 1]] for i in range(n)]
            self._st = self._regroup(self._ungrouped(rec.key_arena, rec.key_offsets, values))
        for op, k, v in rec.log:
            self._apply(k, v if op == OP_PUT else _TOMB)
        if rec.log:
            self._merge(all_groups=True)

    @property
    def _min_group(self) -> int:
        return max(16, self.group_size // 8)

    @staticmethod
    def _feature_len(arena, offsets, s: int, e: int) -> int:
        """Bytes past the common prefix of keys s..e-1 (the group's uncapped feature length)."""
        return int(K.max_key_len(offsets, s, e) - K.common_prefix_len(arena, offsets, s, e))

    def _cut(self, arena, offsets, s: int, e: int) -> list[int]:
        """Group boundaries over sorted keys s..e-1, greedily as in SIndex: groups of
        ``group_size`` keys (a short tail joins the last one), each halved while its feature
        length exceeds ``max_features`` and it is larger than the minimum group size."""
        bounds = [s]
        a = s
        while a < e:
            b = e if e - a < self.group_size * 3 // 2 else a + self.group_size
            while b - a >= 2 * self._min_group and self._feature_len(arena, offsets, a, b) > self.max_features:
                b = a + (b - a) // 2
            bounds.append(b)
            a = b
        return bounds

    def _regroup(self, st: _State) -> _State:
        """Cut sorted arrays into groups of ``group_size`` and train each from scratch."""
        n = st.nkeys()
        bounds = self._cut(st.arena, st.offsets, 0, n)
        rows, coefs, models = [], [], []
        for a, b in zip(bounds[:-1], bounds[1:]):
            m, c, prefix, feat, lo, hi = self._fit_group(st.arena, st.offsets, a, b, None, None, 0)
            rows.append([a, b, prefix, feat, lo, hi, 0]); coefs.append(c); models.append(m)
        pivots = [st.key(r[0]) for r in rows]
        return _State(st.arena, st.offsets, st.values, np.array(rows, np.int64).reshape(-1, K.G_COLS),
                      np.array(coefs).reshape(-1, self.max_features + 1), models, pivots, st.buf,
                      [0] * max(1, len(rows)), st.size, st.max_len)

    def checkpoint(self) -> None:
        """Write the merged data to a checkpoint and drop the log it covers."""
        self._check_open()
        if self._dur is None:
            return
        with self._mlock:
            with self._wlock:
                self._merge_locked_all()
                st = self._st
                seg = self._dur.start_checkpoint()
            vals = st.values
            vo = np.zeros(len(vals) + 1, np.int64)
            np.cumsum(np.fromiter((len(v) for v in vals), np.int64, len(vals)), out=vo[1:])
            va = np.frombuffer(b"".join(vals), np.uint8)
            self._dur.finish_checkpoint(seg, st.arena, st.offsets, va, vo)

    def _merge_locked_all(self) -> None:
        """Fold the whole buffer in (caller holds both locks)."""
        st = self._st
        if not st.buf:
            return
        new = self._build(st, dict(st.buf), set(range(max(len(st.models), 1))))
        new.size = st.size
        self._st = new

    # ------------------------------------------------------------------ admin
    def stats(self) -> dict:
        st = self._st
        out = dict(self._stats)
        out.update(groups=len(st.models), keys=st.size, merged_keys=st.nkeys(), buffered_writes=len(st.buf),
                   trainer=getattr(self._trainer, "name", str(self._trainer)), trainer_failed=self._trainer_failed,
                   max_error_window=int((st.gint[:, K.G_ERRHI] - st.gint[:, K.G_ERRLO]).max()) + 1 if len(st.models) else 0)
        return out

    def close(self) -> None:
        """Stop the retrainer, checkpoint (durable stores) and release the directory."""
        if self._closed:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._dur is not None:
            self.checkpoint()
            self._dur.close()
        self._closed = True

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:  # best effort: stop the thread of an unclosed store
        try:
            self._stop.set()
        except Exception:
            pass


def _merge_sorted(old_keys: list, old_vals: list, bkeys: list, snap: dict) -> tuple[list, list, list, int]:
    """Fold sorted buffered writes ``bkeys`` (values in ``snap``) into a group's sorted keys.

    Returns merged keys, merged values, the keys that are new (inserts) and the number of
    deleted keys that existed."""
    merged_k: list = []
    merged_v: list = []
    new_keys: list = []
    deletes = 0
    i = j = 0
    n_old, n_b = len(old_keys), len(bkeys)
    while i < n_old or j < n_b:
        if j >= n_b or (i < n_old and old_keys[i] < bkeys[j]):
            merged_k.append(old_keys[i])
            merged_v.append(old_vals[i])
            i += 1
            continue
        bk = bkeys[j]
        v = snap[bk]
        exists = i < n_old and old_keys[i] == bk
        if v is _TOMB:
            deletes += exists
        else:
            merged_k.append(bk)
            merged_v.append(v)
            if not exists:
                new_keys.append(bk)
        i += exists
        j += 1
    return merged_k, merged_v, new_keys, deletes
