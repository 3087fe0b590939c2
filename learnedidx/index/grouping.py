"""Building the groups of a whole sorted key set at once: how a bulk load and a recovery
make their index.

The keys are cut greedily as SIndex cuts them (:func:`~learnedidx.index.fitting.cut_bounds`)
and every group is trained from scratch: all at once, on every core, by the ``cpu``
backend (:func:`~learnedidx.index.fitting.fit_groups`), or one group at a time through the
store's trainer otherwise.  Pure functions of their arguments, testable without a store.
"""
from __future__ import annotations

import numpy as np

from learnedidx.index import fitting as F
from learnedidx.index import kernels as K
from learnedidx.index import keysort, pyobjects
from learnedidx.index.live import LiveIndex
from learnedidx.index.options import StoreOptions
from learnedidx.index.retrainer import Retrainer


def fit_each(arena: np.ndarray, offsets: np.ndarray, bounds: np.ndarray, opts: StoreOptions,
             retrainer: Retrainer) -> F.Fits:
    """:func:`~learnedidx.index.fitting.fit_groups`'s result, each group trained through
    the store's trainer (for trainers that cannot train them all at once)."""
    G = len(bounds) - 1
    gint = np.zeros((G, K.G_COLS), np.int64)
    coef = np.zeros((G, opts.max_features + 1))
    Rs, R_off = [], [0]
    for g, (s, e) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())):
        gint[g, K.G_START], gint[g, K.G_END] = s, e
        if e - s > 1:
            prefix = int(K.common_prefix_len(arena, offsets, s, e))
            feat = int(min(opts.max_features, K.max_key_len(offsets, s, e) - prefix))
            R, c = retrainer.train(K.build_features(arena, offsets, s, e, prefix, feat),
                                   np.arange(e - s, dtype=np.float64), None, None)
            coef[g, :feat + 1] = c[:feat + 1]
            lo, hi = K.error_bounds(arena, offsets, s, e, prefix, feat, coef[g])
            gint[g, K.G_PREFIX], gint[g, K.G_FEAT], gint[g, K.G_ERRLO], gint[g, K.G_ERRHI] = prefix, feat, lo, hi
            Rs.append(R.ravel())
        R_off.append(R_off[-1] + (len(Rs[-1]) if e - s > 1 else 0))
    return F.Fits(gint, coef, np.concatenate(Rs) if Rs else np.zeros(0), np.array(R_off, np.int64))


def build(arena: np.ndarray, offsets: np.ndarray, values: list, opts: StoreOptions, retrainer: Retrainer,
          max_len: int) -> LiveIndex:
    """A live index of the sorted, distinct keys ``arena``/``offsets`` and their ``values``."""
    n = len(offsets) - 1
    bounds = F.cut_bounds(arena, offsets, 0, n, opts.group_size, opts.min_group, opts.max_features)
    fits = retrainer.train_all(arena, offsets, bounds)
    if fits is None:
        fits = fit_each(arena, offsets, bounds, opts, retrainer)
    return LiveIndex.from_sorted(arena, offsets, values, bounds, fits, opts, max_len)


def bulk(arena: np.ndarray, offsets: np.ndarray, values: list, opts: StoreOptions, retrainer: Retrainer,
         max_len: int) -> tuple[LiveIndex, int]:
    """The live index of a batch of keys (any order, repeats allowed: the last value of a
    key wins) and its number of distinct keys: sorted and deduplicated in compiled code
    (:func:`~learnedidx.index.keysort.sort_unique`), then :func:`build`."""
    perm = keysort.sort_unique(arena, offsets)
    sorted_arena, sorted_offsets = keysort.gather(arena, offsets, perm)
    return build(sorted_arena, sorted_offsets, pyobjects.take(values, perm), opts, retrainer, max_len), len(perm)
