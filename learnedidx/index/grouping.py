"""Groups: cutting sorted keys into groups, folding buffered writes in, training the group
models, and building the snapshot that holds them.

Pure functions of their arguments: training goes through the ``train`` callable passed in
(:meth:`learnedidx.index.retrainer.Retrainer.train` in a store), so that everything here
can be tested without a store.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
from sortedcontainers import SortedDict

from learnedidx.index import fitting as F
from learnedidx.index import kernels as K
from learnedidx.index import keysort, pyobjects
from learnedidx.index.fitting import feature_len
from learnedidx.index.keys import KeyBatch
from learnedidx.index.options import StoreOptions
from learnedidx.index.snapshot import TOMB, GroupModel, Snapshot

#: ``train(A, b, R_old, A_delta) -> (R, coef)``: full training when ``R_old`` is None.
Train = Callable[[np.ndarray, np.ndarray, Optional[np.ndarray], Optional[np.ndarray]], tuple[np.ndarray, np.ndarray]]
#: ``train_all(arena, offsets, bounds) -> Fits | None``: every group trained from scratch at
#: once (:func:`learnedidx.index.fitting.fit_groups`), or None where the trainer cannot (then
#: each group is trained through ``train``).
TrainAll = Callable[[np.ndarray, np.ndarray, np.ndarray], Optional[F.Fits]]


@dataclass(frozen=True)
class Merged:
    """A group's sorted keys with buffered writes folded in."""

    keys: list[bytes]
    values: list
    new_keys: list[bytes]  #: keys that were not in the group (inserts)
    deletes: int  #: deleted keys that were in the group


@dataclass(frozen=True)
class GroupPlan:
    """Where one group of the old snapshot goes in the new arrays."""

    group: int  #: its index in the old snapshot
    start: int  #: its first key's index in the new arrays
    end: int  #: one past its last key's
    merged: Merged | None  #: its keys after the merge; None: kept as it was


@dataclass(frozen=True)
class FittedGroup:
    """A trained group model over keys ``start..end-1``."""

    memo: GroupModel
    coef: np.ndarray  #: (max_features + 1,) coefficients, zero past ``feat + 1``
    prefix: int
    feat: int
    err_lo: int
    err_hi: int

    def row(self, start: int, end: int) -> np.ndarray:
        """The group's row of the ``gint`` matrix (see ``kernels.G_*``)."""
        return np.array([start, end, self.prefix, self.feat, self.err_lo, self.err_hi, 0], np.int64)


def cut(arena: np.ndarray, offsets: np.ndarray, s: int, e: int, opts: StoreOptions) -> list[int]:
    """Group boundaries over sorted keys s..e-1, greedily as in SIndex: groups of
    ``group_size`` keys (a short tail joins the last one), each halved while its feature
    length exceeds ``max_features`` and it is larger than the minimum group size."""
    return F.cut_bounds(arena, offsets, s, e, opts.group_size, opts.min_group, opts.max_features).tolist()


def merge_sorted(old_keys: list[bytes], old_vals: list, bkeys: list[bytes], writes: dict) -> Merged:
    """Fold sorted buffered writes ``bkeys`` (values in ``writes``, :data:`TOMB` for a
    delete) into a group's sorted keys."""
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
        v = writes[bk]
        exists = i < n_old and old_keys[i] == bk
        if v is TOMB:
            deletes += exists
        else:
            merged_k.append(bk)
            merged_v.append(v)
            if not exists:
                new_keys.append(bk)
        i += exists
        j += 1
    return Merged(merged_k, merged_v, new_keys, deletes)


def fit_group(arena: np.ndarray, offsets: np.ndarray, s: int, e: int, memo: GroupModel | None,
              new_keys: list[bytes] | None, deletes: int, opts: StoreOptions, train: Train) -> FittedGroup:
    """Train the model of keys s..e-1: incrementally (SIA) from ``memo`` when its prefix and
    feature length still hold, ``new_keys`` are known and few enough deletes accumulated,
    in full otherwise; the error bounds are computed here, over every key."""
    mf = opts.max_features
    if e - s <= 1:
        return FittedGroup(GroupModel(None, 0, 0), np.zeros(mf + 1), 0, 0, 0, 0)
    prefix = int(K.common_prefix_len(arena, offsets, s, e))
    feat = int(min(mf, K.max_key_len(offsets, s, e) - prefix))
    A = K.build_features(arena, offsets, s, e, prefix, feat)
    b = np.arange(e - s, dtype=np.float64)
    incremental = (
        memo is not None and memo.R is not None and memo.prefix == prefix and memo.feat == feat
        and new_keys is not None
        and memo.deletes_since_full + deletes <= opts.full_retrain_fraction * (e - s)
    )
    if incremental:
        nk = KeyBatch.from_keys(new_keys)
        A_delta = K.build_features(nk.arena, nk.offsets, 0, len(nk), prefix, feat)
        R, c = train(A, b, memo.R, A_delta)
        new_memo = GroupModel(R, prefix, feat, memo.deletes_since_full + deletes)
    else:
        R, c = train(A, b, None, None)
        new_memo = GroupModel(R, prefix, feat, 0)
    coef = np.zeros(mf + 1)
    coef[: feat + 1] = c[: feat + 1]
    lo, hi = K.error_bounds(arena, offsets, s, e, prefix, feat, coef)
    return FittedGroup(new_memo, coef, prefix, feat, int(lo), int(hi))


def plan(st: Snapshot, writes: dict, dirty: set[int]) -> list[GroupPlan]:
    """Where every group of ``st`` goes once the buffered ``writes`` of the ``dirty``
    groups are folded in (groups left empty disappear)."""
    per_group: dict[int, list] = {}
    for k in sorted(writes):
        g = st.group_of(k)
        if g in dirty:
            per_group.setdefault(g, []).append(k)
    G = len(st.models)
    out: list[GroupPlan] = []
    pos = 0
    for g in range(max(G, 1)):
        s, e = (int(st.gint[g, K.G_START]), int(st.gint[g, K.G_END])) if G else (0, 0)
        if g not in per_group:
            if e > s:
                out.append(GroupPlan(g, pos, pos + (e - s), None))
                pos += e - s
            continue
        m = merge_sorted([st.key(i) for i in range(s, e)], st.values[s:e], per_group[g], writes)
        if m.keys:
            out.append(GroupPlan(g, pos, pos + len(m.keys), m))
            pos += len(m.keys)
    return out


def build(st: Snapshot, writes: dict, dirty: set[int], opts: StoreOptions, train: Train) -> tuple[Snapshot, int]:
    """A new snapshot with the buffered ``writes`` of the ``dirty`` groups folded in, those
    groups retrained (and cut again when too long or too wide), other groups kept; and the
    number of groups that were split.  Its buffer is empty and its size that of ``st``."""
    plans = plan(st, writes, dirty)
    # The new arena/offsets/values, in plan order.
    arena_parts, lens_parts, values = [], [], []
    for p in plans:
        if p.merged is None:
            s, e = int(st.gint[p.group, K.G_START]), int(st.gint[p.group, K.G_END])
            arena_parts.append(st.arena[st.offsets[s]:st.offsets[e]])
            lens_parts.append(np.diff(st.offsets[s:e + 1]))
            values.extend(st.values[s:e])
        else:
            mk = p.merged.keys
            arena_parts.append(np.frombuffer(b"".join(mk), np.uint8))
            lens_parts.append(np.fromiter((len(k) for k in mk), np.int64, len(mk)))
            values.extend(p.merged.values)
    arena = np.concatenate(arena_parts) if arena_parts else np.zeros(0, np.uint8)
    offsets = np.zeros((plans[-1].end if plans else 0) + 1, np.int64)
    if lens_parts:
        np.cumsum(np.concatenate(lens_parts), out=offsets[1:])
    # Groups: untouched ones shifted, merged ones retrained, too long or too wide ones cut.
    G = len(st.models)
    gint_rows: list = []
    coef_rows: list = []
    models: list = []
    splits = 0
    for p in plans:
        if p.merged is None:
            row = st.gint[p.group].copy()
            row[K.G_START], row[K.G_END] = p.start, p.end
            gint_rows.append(row)
            coef_rows.append(st.coef[p.group])
            models.append(st.models[p.group])
            continue
        s, e = p.start, p.end
        old_feat = st.models[p.group].feat if G else 0
        feat_grew = old_feat < opts.max_features < feature_len(arena, offsets, s, e)
        split = e - s > 2 * opts.group_size or (feat_grew and e - s > opts.min_group)
        bounds = cut(arena, offsets, s, e, opts) if split else [s, e]
        splits += len(bounds) > 2
        memo = st.models[p.group] if (G and len(bounds) == 2) else None
        for a, b in zip(bounds[:-1], bounds[1:]):
            f = fit_group(arena, offsets, a, b, memo, p.merged.new_keys if memo else None, p.merged.deletes,
                          opts, train)
            gint_rows.append(f.row(a, b))
            coef_rows.append(f.coef)
            models.append(f.memo)
    G2 = len(models)
    gint = np.array(gint_rows, np.int64).reshape(G2, K.G_COLS)
    coef = np.array(coef_rows, np.float64).reshape(G2, opts.max_features + 1)
    pivots = [arena[offsets[r[0]]:offsets[r[0] + 1]].tobytes() for r in gint_rows]
    new = Snapshot(arena, offsets, values, gint, coef, models, pivots, SortedDict(), [0] * max(G2, 1), st.size,
                   st.max_len)
    return new, splits


def grouped(arena: np.ndarray, offsets: np.ndarray, values: list, opts: StoreOptions, train: Train,
            train_all: TrainAll | None = None, max_len: int | None = None) -> Snapshot:
    """A snapshot of the sorted, distinct keys ``arena``/``offsets`` with their ``values``,
    cut into groups (:func:`cut`), each trained from scratch: all at once by ``train_all``
    where it can, else group by group through ``train``.  ``max_len``: the store's
    ``max_key_len`` (default: the option's)."""
    n = len(offsets) - 1
    bounds = F.cut_bounds(arena, offsets, 0, n, opts.group_size, opts.min_group, opts.max_features)
    fits = train_all(arena, offsets, bounds) if train_all is not None else None
    if fits is not None:
        gint, coef = fits.gint, fits.coef
        models = [GroupModel(None, 0, 0) if e - s <= 1 else
                  GroupModel(fits.R[r0:r1].reshape(f + 1, f + 1), p, f)
                  for s, e, p, f, r0, r1 in zip(gint[:, K.G_START].tolist(), gint[:, K.G_END].tolist(),
                                                gint[:, K.G_PREFIX].tolist(), gint[:, K.G_FEAT].tolist(),
                                                fits.R_off[:-1].tolist(), fits.R_off[1:].tolist())]
    else:
        bl = bounds.tolist()
        each = [fit_group(arena, offsets, a, b, None, None, 0, opts, train) for a, b in zip(bl[:-1], bl[1:])]
        gint = np.array([f.row(a, b) for f, a, b in zip(each, bl[:-1], bl[1:])], np.int64).reshape(-1, K.G_COLS)
        coef = np.array([f.coef for f in each]).reshape(-1, opts.max_features + 1)
        models = [f.memo for f in each]
    firsts = bounds[:-1]
    pivots = [arena[a:b].tobytes() for a, b in zip(offsets[firsts].tolist(), offsets[firsts + 1].tolist())]
    return Snapshot(arena, offsets, values, gint, coef, models, pivots, SortedDict(), [0] * max(1, len(models)),
                    n, opts.max_key_len if max_len is None else max_len)


def regroup(st: Snapshot, opts: StoreOptions, train: Train, train_all: TrainAll | None = None) -> Snapshot:
    """``st``'s sorted keys cut into groups (:func:`cut`), each trained from scratch (see
    :func:`grouped`); its delta buffer and size carried over."""
    new = grouped(st.arena, st.offsets, st.values, opts, train, train_all, st.max_len)
    new.buf, new.counts, new.size = st.buf, [0] * max(1, len(new.models)), st.size
    return new


def bulk_load(arena: np.ndarray, offsets: np.ndarray, values: list, opts: StoreOptions, train: Train,
              train_all: TrainAll | None = None, max_len: int | None = None) -> Snapshot:
    """The snapshot holding a batch of keys (any order, repeats allowed: the last value of
    a key wins) and their ``values``: sorted and deduplicated in compiled code
    (:func:`~learnedidx.index.keysort.sort_unique`), then :func:`grouped`."""
    perm = keysort.sort_unique(arena, offsets)
    sorted_arena, sorted_offsets = keysort.gather(arena, offsets, perm)
    return grouped(sorted_arena, sorted_offsets, pyobjects.take(values, perm), opts, train, train_all, max_len)
