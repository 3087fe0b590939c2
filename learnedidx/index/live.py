"""The live index: the arrays and Python objects behind the descriptor
(:mod:`learnedidx.index.layout`), and the structural changes writers make to it.

A :class:`LiveIndex` owns the group table, the coefficients, the root arrays and, per
group, a :class:`Group` holding its key arrays, value list and insert buffer (the table
holds only their addresses).  Its methods are called by the store with the writer lock
held: :meth:`fold` folds a group's buffer into its merged keys (and splits the group when
it grew too large or too wide), :meth:`copy_group` gives a group a fresh value list and
buffer while a pinned view still reads the old ones, :meth:`pin` makes a :class:`View` (an
image of the index at one moment, for iterators and checkpoints).  Each publishes its
change with one kernel call (:mod:`learnedidx.index.foldin`).

Anything a view may still read is never changed in place once the view exists: replaced
arrays and lists go to the ``keep`` list of every live view and die with the last one.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from learnedidx.index import fitting as F
from learnedidx.index import kernels as K
from learnedidx.index import foldin as FI
from learnedidx.index import layout as L
from learnedidx.index import ops as O
from learnedidx.index import pages
from learnedidx.index import pyobjects as P
from learnedidx.index.keys import KeyBatch
from learnedidx.index.options import StoreOptions

TOMB = type("Tomb", (), {"__repr__": lambda self: "<deleted>"})()  #: value of a deleted key until a fold-in
MISSING = type("Missing", (), {"__repr__": lambda self: "<missing>"})()  #: "no such key" answer of lookups


@dataclass(eq=False)
class Memo:
    """A group's training memo (SIA): the R factor of the rows it was trained on."""

    R: np.ndarray
    prefix: int
    feat: int
    deletes: int = 0  #: deleted rows still in R (lazy deletes)


@dataclass(eq=False)
class Group:
    """A group's Python-side state (the table row holds the addresses of its arrays)."""

    heads: np.ndarray
    offs: np.ndarray
    kbytes: np.ndarray
    vals: Any  #: the value slots (pages.slots: laid out as a list, and a list without the C module)
    bord: np.ndarray
    pivot: bytes
    memo: Memo | None = None  #: None: the next retrain is a full one
    pending: list = field(default_factory=list)  #: batches of keys folded in since the memo
    untrained: int = 0  #: keys written since the group's model was last trained


@dataclass(eq=False)
class View:
    """The index as it was when pinned: copies of the table, coefficients and root, a
    descriptor over them, and what writers replaced since (kept alive here)."""

    desc: np.ndarray
    arrays: tuple
    keep: list = field(default_factory=list)

    @property
    def addr(self) -> int:
        return self.desc.ctypes.data


class WriterLock:
    """The store's writer lock, which serializes the writers that go through Python.

    While it is held, ``D_HOLD`` of the descriptor is nonzero, and a write that would be made
    without it (:func:`~learnedidx.index.ops.put`, one compiled call holding the GIL) does
    nothing and sends its caller to the lock instead: the holder may be between two steps of
    a change (a fold-in sized and not yet copied, a view half pinned).  ``logged`` keeps
    ``D_HOLD`` set for good: a durable store logs every write first, under the lock."""

    def __init__(self, D: np.ndarray) -> None:
        self._lock = threading.Lock()
        self._D = D
        self._idle = 0

    def log_every_write(self) -> None:
        """Every write takes the lock from now on (a durable store's)."""
        with self._lock:
            self._idle = 2
            self._D[L.D_HOLD] = 2

    def locked(self) -> bool:
        return self._lock.locked()

    def __enter__(self) -> "WriterLock":
        self._lock.acquire()
        self._D[L.D_HOLD] = self._idle | 1
        return self

    def __exit__(self, *exc: Any) -> None:
        self._D[L.D_HOLD] = self._idle
        self._lock.release()


def _addr(a: np.ndarray) -> int:
    return a.ctypes.data


class LiveIndex:
    """See the module docstring."""

    def __init__(self, opts: StoreOptions, max_len: int) -> None:
        self.opts = opts
        self.B = opts.buffer_threshold
        self.cols = opts.max_features + 1
        self.groups: list[Group | None] = []
        self.free: list[int] = []
        self.views: list[View] = []
        self.pin_gen = 0
        # Guards views and the pin slots; unpin takes only this one (it may run in a
        # finalizer, even inside a writer), re-entrant for that reason.
        self._pin_lock = threading.RLock()
        self.tab = np.zeros((8, L.T_COLS), np.int64)
        self.coef = np.zeros((8, self.cols))
        self.rhead = np.zeros(8, np.int64)
        self.rpiv = np.zeros(8, np.int64)
        self.rgid = np.zeros(8, np.int64)
        self.rsamp = _sample_for(8)
        self.D = np.zeros(L.D_SLOTS, np.int64)
        D = self.D
        D[L.D_TAB], D[L.D_TCAP], D[L.D_COEF], D[L.D_CCOLS] = _addr(self.tab), 8, _addr(self.coef), self.cols
        D[L.D_RHEAD], D[L.D_RPIV], D[L.D_RGID], D[L.D_RCAP] = _addr(self.rhead), _addr(self.rpiv), _addr(self.rgid), 8
        D[L.D_RSAMP] = _addr(self.rsamp)
        D[L.D_MAXLEN], D[L.D_B] = max_len, self.B
        D[L.D_NONE], D[L.D_TOMB], D[L.D_MISSING] = id(None), id(TOMB), id(MISSING)
        D[L.D_BYTES_TYPE], D[L.D_INCREF], D[L.D_DECREF], D[L.D_BYTES_NEW] = (
            P.BYTES_TYPE, P.INCREF, P.DECREF, P.BYTES_NEW)
        self.addr = _addr(D)

    # ------------------------------------------------------------------ building
    @classmethod
    def empty(cls, opts: StoreOptions, max_len: int) -> "LiveIndex":
        """An index of no keys: one empty group."""
        live = cls(opts, max_len)
        z = np.zeros(1, np.int64)
        live._install([(np.zeros(0, np.int64), z, np.zeros(1, np.uint8), 0, b"", 0, 0, 0, 0, None)],
                      np.zeros((1, live.cols)), [])
        return live

    @classmethod
    def from_sorted(cls, arena: np.ndarray, offsets: np.ndarray, values: list, bounds: np.ndarray,
                    fits: "F.Fits", opts: StoreOptions, max_len: int) -> "LiveIndex":
        """An index of sorted, distinct keys ``arena``/``offsets`` with their ``values``,
        cut at ``bounds`` into groups trained as ``fits`` says."""
        live = cls(opts, max_len)
        n = len(offsets) - 1
        if n == 0:
            return cls.empty(opts, max_len)
        gint = fits.gint
        heads = np.empty(n, np.int64)
        specs = []
        bl = bounds.tolist()
        for g, (s, e) in enumerate(zip(bl[:-1], bl[1:])):
            prefix, feat = int(gint[g, K.G_PREFIX]), int(gint[g, K.G_FEAT])
            offs = offsets[s:e + 1]
            h = heads[s:e]
            FI.compute_heads(offs, arena, e - s, prefix, h)
            R = fits.R[fits.R_off[g]:fits.R_off[g + 1]].reshape(feat + 1, feat + 1) if e - s > 1 else None
            memo = Memo(R, prefix, feat) if R is not None else None
            pivot = arena[offsets[s]:offsets[s + 1]].tobytes()
            specs.append((h, offs, arena, e - s, pivot, prefix, feat, int(gint[g, K.G_ERRLO]), int(gint[g, K.G_ERRHI]),
                          memo))
        live._install(specs, fits.coef, [values[s:e] for s, e in zip(bl[:-1], bl[1:])])
        return live

    def _install(self, specs: list, coef: np.ndarray, vals: list) -> None:
        """Set up a fresh index's groups (``specs``: heads, offs, kbytes, n, pivot, prefix,
        feat, err_lo, err_hi, memo, in key order)."""
        G = len(specs)
        self._grow_table(G)
        self._grow_root(G)
        B = self.B
        for g, (heads, offs, kb, n, pivot, prefix, feat, lo, hi, memo) in enumerate(specs):
            v = pages.slots(vals[g] if vals else [], 2 * B)
            grp = Group(heads, offs, kb, v, pages.zeros(1 + 2 * B, np.int64), pivot, memo)
            self.groups.append(grp)
            row = self.tab[g]
            row[L.T_HEADS], row[L.T_OFFS], row[L.T_BYTES], row[L.T_N] = _addr(heads), _addr(offs), _addr(kb), n
            row[L.T_VITEMS], row[L.T_BORD] = P.items_address(v), _addr(grp.bord)
            row[L.T_HPREFIX], row[L.T_MPREFIX], row[L.T_FEAT] = prefix, prefix, feat
            row[L.T_ERRLO], row[L.T_ERRHI] = lo, hi
            self.coef[g, :coef.shape[1]] = coef[g]
            self.rpiv[g], self.rgid[g] = id(pivot), g
            self.rhead[g] = _head(pivot)
        self.D[L.D_NROOT] = G
        FI.publish_root(self.addr)
        FI.refresh_prefix_words(self.addr, np.arange(G, dtype=np.int64))
        for r in range(G):
            self.tab[r, L.T_RPREFIX] = FI.root_prefix(self.addr, r)

    def adopt(self, other: "LiveIndex") -> None:
        """Take over ``other``'s groups (a bulk load or recovery built it), in place: this
        index's descriptor, which readers hold, stays the same."""
        old = (self.tab, self.coef, self.rhead, self.rpiv, self.rgid, self.rsamp, self.groups)
        other.tab[:, L.T_GEN] = self.pin_gen  # nothing pinned reads them
        self.tab, self.coef, self.rhead, self.rpiv, self.rgid, self.rsamp = (
            other.tab, other.coef, other.rhead, other.rpiv, other.rgid, other.rsamp)
        self.groups, self.free = other.groups, other.free
        slots = np.array([L.D_TAB, L.D_TCAP, L.D_COEF, L.D_RHEAD, L.D_RPIV, L.D_RGID, L.D_RCAP, L.D_NROOT, L.D_RSAMP],
                         np.int64)
        FI.set_slots(self.addr, slots, other.D[slots])
        self._retire(*old)

    def buffer_full(self, g: int) -> bool:
        """Whether group id ``g`` is a group whose insert buffer is full."""
        grp = self.groups[g] if g < len(self.groups) else None
        return grp is not None and int(grp.bord[0]) >= self.B

    def is_empty(self) -> bool:
        """No key, merged or buffered."""
        return self.merged_keys() == 0 and self.buffered() == 0

    # ------------------------------------------------------------------ growth
    def _grow_table(self, need: int) -> None:
        """Room for ``need`` group ids in the table."""
        cap = self.tab.shape[0]
        if need <= cap:
            return
        new = max(need, 2 * cap)
        tab = np.zeros((new, L.T_COLS), np.int64)
        tab[:cap] = self.tab
        coef = np.zeros((new, self.cols))
        coef[:cap] = self.coef
        FI.set_slots(self.addr, np.array([L.D_TAB, L.D_COEF, L.D_TCAP], np.int64),
                     np.array([_addr(tab), _addr(coef), new], np.int64))
        self.tab, self.coef = tab, coef

    def _grow_root(self, need: int) -> None:
        cap = self.rhead.shape[0]
        if need <= cap:
            return
        new = max(need, 2 * cap)
        arrays = []
        for a in (self.rhead, self.rpiv, self.rgid):
            b = np.zeros(new, np.int64)
            b[:cap] = a
            arrays.append(b)
        samp = _sample_for(new)
        samp[:self.rsamp.shape[0]] = self.rsamp  # the sample of the same entries
        arrays.append(samp)
        FI.set_slots(self.addr, np.array([L.D_RHEAD, L.D_RPIV, L.D_RGID, L.D_RSAMP, L.D_RCAP], np.int64),
                     np.array([_addr(a) for a in arrays] + [new], np.int64))
        self.rhead, self.rpiv, self.rgid, self.rsamp = arrays

    def _new_gid(self) -> int:
        if self.free:
            return self.free.pop()
        self.groups.append(None)
        self._grow_table(len(self.groups))
        return len(self.groups) - 1

    # ------------------------------------------------------------------ views
    def _retire(self, *objs: Any) -> None:
        """Objects a live view may still read, replaced by a writer: kept by every view."""
        for v in self.views:
            v.keep.append(objs)

    def pin(self) -> View:
        """An image of the index now (see :class:`View`), kept consistent while writers go
        on: they copy a group before changing what the view reads of it (writer lock held)."""
        with self._pin_lock:
            return self._pin()

    def _pin(self) -> View:
        self.pin_gen += 1
        nroot = int(self.D[L.D_NROOT])
        arrays = (self.tab.copy(), self.coef.copy(), self.rhead[:nroot].copy(), self.rpiv[:nroot].copy(),
                  self.rgid[:nroot].copy(), self.rsamp[:L.sample_size(nroot)].copy())
        d = self.D.copy()
        d[L.D_TAB], d[L.D_COEF], d[L.D_RHEAD], d[L.D_RPIV], d[L.D_RGID], d[L.D_RSAMP] = map(_addr, arrays)
        d[L.D_RCAP] = nroot
        d[L.D_PINS] = 0
        view = View(d, arrays)
        self.views.append(view)
        FI.set_slots(self.addr, np.array([L.D_PINGEN, L.D_PINS], np.int64),
                     np.array([self.pin_gen, len(self.views)], np.int64))
        return view

    def unpin(self, view: View) -> None:
        with self._pin_lock:
            if view in self.views:
                self.views.remove(view)
                FI.set_slots(self.addr, np.array([L.D_PINS], np.int64), np.array([len(self.views)], np.int64))
            view.keep.clear()

    def copy_group(self, g: int) -> None:
        """Group ``g`` gets its own copy of its value list and buffer (a view reads the old)."""
        grp = self.groups[g]
        old = (grp.vals, grp.bord)
        grp.vals, grp.bord = pages.copy(grp.vals), grp.bord.copy()
        FI.publish_cow(self.addr, g, id(grp.vals), grp.bord)
        self._retire(*old)

    # ------------------------------------------------------------------ fold-in and split
    def fold(self, g: int) -> tuple[list[int], int, int]:
        """Fold group ``g``'s buffer into its merged keys; split it when it grew past twice
        the group size or its keys grew wider than ``max_features`` (then its pieces hold
        the parent's model, shifted).  Returns the ids of the groups now holding its keys,
        the keys inserted and the deleted keys dropped."""
        grp = self.groups[g]
        m, nbytes, ins = FI.foldin_size(self.addr, g)
        B = self.B
        heads = pages.empty(m, np.int64)
        offs = pages.empty(m + 1, np.int64)
        kb = pages.empty(max(nbytes, 1), np.uint8)
        vals = pages.slots([], m + 2 * B)
        bord = pages.zeros(1 + 2 * B, np.int64)
        newpos = np.empty(ins, np.int64)
        old = (grp.heads, grp.offs, grp.kbytes, grp.vals, grp.bord)
        grp.heads, grp.offs, grp.kbytes, grp.vals, grp.bord = heads, offs, kb, vals, bord
        dropped, width = FI.foldin(self.addr, g, heads, offs, kb, id(vals), bord, newpos)
        self._retire(*old)
        del old
        if ins:
            grp.pending.append(_gather(kb, offs, newpos))
        if grp.memo is not None:
            grp.memo.deletes += dropped
        grp.untrained += ins + dropped
        o = self.opts
        if m > 2 * o.group_size or (width > o.max_features and m >= 2 * o.min_group):
            bounds = F.cut_bounds(kb, offs, 0, m, o.group_size, o.min_group, o.max_features)
            if len(bounds) > 2:
                return self._split(g, bounds), ins, dropped
        return [g], ins, dropped

    def _split(self, g: int, bounds: np.ndarray) -> list[int]:
        grp = self.groups[g]
        k = len(bounds) - 1
        B = self.B
        row = self.tab[g]
        mprefix, feat = int(row[L.T_MPREFIX]), int(row[L.T_FEAT])
        parent = self.coef[g].copy()
        self._grow_root(int(self.D[L.D_NROOT]) + k - 1)
        gids = [g] + [self._new_gid() for _ in range(k - 1)]
        pieces = np.zeros((k, 1 + len(L.ROW_COLS)), np.int64)
        pcoef = np.zeros((k, self.cols))
        pivots = np.zeros(k, np.int64)
        old_vals = grp.vals
        steal = not (self.D[L.D_PINS] > 0 and row[L.T_GEN] < self.D[L.D_PINGEN])  # no view reads old_vals
        kb, offs = grp.kbytes, grp.offs
        sizes = np.diff(bounds)
        shares = (grp.untrained * sizes // max(int(sizes.sum()), 1)).tolist()  # its backlog, spread
        shares[0] += grp.untrained - sum(shares)
        made = []
        for t, (s, e) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())):
            n = e - s
            o = offs[s:e + 1]
            plen = FI.key_prefix(o, kb, n)
            h = pages.empty(n, np.int64)
            FI.compute_heads(o, kb, n, plen, h)
            c = parent.copy()
            c[0] -= s  # the parent's model, for positions counted from this piece's first key
            lo, hi = FI.model_error_of(o, kb, n, mprefix, feat, c)
            vals = pages.slots([], n + 2 * B)
            FI.move_values(self.addr, id(old_vals), s, e, id(vals), steal)
            bord = pages.zeros(1 + 2 * B, np.int64)
            pivot = grp.pivot if t == 0 else kb[offs[s]:offs[s + 1]].tobytes()
            made.append(Group(h, o, kb, vals, bord, pivot, None, [], shares[t]))
            pieces[t] = [gids[t], _addr(h), _addr(o), _addr(kb), n, P.items_address(vals), _addr(bord), plen,
                         mprefix, feat, lo, hi]
            pcoef[t] = c
            pivots[t] = id(pivot)
        r = int(np.flatnonzero(self.rgid[:int(self.D[L.D_NROOT])] == g)[0])
        for gid, piece in zip(gids, made):
            self.groups[gid] = piece
        FI.publish_split(self.addr, g, r, pieces, pcoef, pivots)
        self._retire(grp, old_vals)
        return gids

    # ------------------------------------------------------------------ models
    def publish_model(self, g: int, coef: np.ndarray, prefix: int, feat: int,
                      bounds: tuple[int, int] | None = None) -> None:
        """Group ``g``'s model becomes ``coef`` over ``feat`` bytes after ``prefix``, with
        ``bounds`` when they are exact for its keys now, else bounds computed here."""
        lo, hi = bounds if bounds is not None else (0, -1)
        FI.publish_model(self.addr, g, np.ascontiguousarray(coef, np.float64), prefix, feat, lo, hi,
                         bounds is not None)

    # ------------------------------------------------------------------ inspection
    def root_order(self) -> list[int]:
        """Group ids in key order."""
        return self.rgid[:int(self.D[L.D_NROOT])].tolist()

    def buffered(self) -> int:
        """Entries in every insert buffer."""
        return sum(int(g.bord[0]) for g in self.groups if g is not None)

    def buffered_groups(self) -> list[int]:
        """The groups whose insert buffer holds something."""
        return [g for g, grp in enumerate(self.groups) if grp is not None and grp.bord[0]]

    def export(self, view: View, max_pairs: int = 1 << 16, max_bytes: int = 64 << 20) -> Iterator[tuple]:
        """``(key arena, key offsets, value arena, value offsets)`` chunks of every pair of a
        pinned view, in key order, each of at most ``max_pairs`` pairs and ``max_bytes``
        bytes (or one pair)."""
        e = O.entry_points()["export"]
        state = np.zeros(3, np.int64)
        while True:
            n, kb, vb = e(view.addr, state, max_pairs, max_bytes, _U8, _I64, _U8, _I64, False)
            if n == 0:
                return
            chunk = (np.empty(kb, np.uint8), np.empty(n + 1, np.int64), np.empty(vb, np.uint8),
                     np.empty(n + 1, np.int64))
            e(view.addr, state, max_pairs, max_bytes, *chunk, True)
            yield chunk

    def merged_keys(self) -> int:
        return int(sum(self.tab[g, L.T_N] for g in self.root_order()))


_U8, _I64 = np.zeros(1, np.uint8), np.zeros(1, np.int64)


def _sample_for(cap: int) -> np.ndarray:
    """Room for the root sample of up to ``cap`` root entries."""
    return np.zeros(L.sample_size(cap), np.int64)  # sample_size grows with its argument


def _head(key: bytes) -> int:
    """The root head of a pivot key (its first 8 bytes, see layout)."""
    b = key[:8].ljust(8, b"\0")
    return int.from_bytes(b, "big") - (1 << 63)


def _gather(kb: np.ndarray, offs: np.ndarray, pos: np.ndarray) -> KeyBatch:
    """The keys at positions ``pos`` of a key array, as a batch."""
    return KeyBatch(*FI.gather_keys(kb, offs, pos))
