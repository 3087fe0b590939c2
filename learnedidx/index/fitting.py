"""Cutting sorted keys into groups and training every group from scratch, in compiled code
on every core: how a bulk load and a recovery build their groups.

Pure functions of arrays: keys come as a sorted, duplicate-free arena + offsets, groups as
boundaries, trained groups as the arrays below.  Training is the ``cpu`` backend's
(:mod:`learnedidx.index.qr`): each group's feature rows are written straight from the
arena into the streaming least-squares block, so no group's feature matrix is ever built,
and the result is what :func:`~learnedidx.index.qr.solve_full` gives on that matrix.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from learnedidx.index import kernels as K
from learnedidx.index import parallel
from learnedidx.index import qr as Q


@njit(cache=True, nogil=True)
def feature_len(arena, offsets, s, e) -> int:
    """Bytes past the common prefix of sorted keys s..e-1 (the group's uncapped feature length)."""
    return K.max_key_len(offsets, s, e) - K.common_prefix_len(arena, offsets, s, e)


@njit(cache=True, nogil=True)
def cut_bounds(arena, offsets, s, e, group_size, min_group, max_features):
    """Group boundaries over sorted keys s..e-1, greedily as in SIndex: groups of
    ``group_size`` keys (a tail shorter than half of it joins the last one), each halved
    while its feature length exceeds ``max_features`` and it has at least
    ``2 * min_group`` keys."""
    bounds = [s]
    a = s
    while a < e:
        b = e if e - a < group_size * 3 // 2 else a + group_size
        while b - a >= 2 * min_group and feature_len(arena, offsets, a, b) > max_features:
            b = a + (b - a) // 2
        bounds.append(b)
        a = b
    return np.array(bounds, np.int64)


class Fits(NamedTuple):
    """Trained groups ``g`` over keys ``bounds[g]..bounds[g+1]-1``."""

    gint: np.ndarray  #: (G, kernels.G_COLS) int64: start, end, prefix, feat, err_lo, err_hi (head: 0)
    coef: np.ndarray  #: (G, max_features + 1) coefficients, zero past feat + 1
    R: np.ndarray  #: every group's R factor, (feat+1)² values from R_off[g] (none for one key)
    R_off: np.ndarray  #: (G + 1,) int64 offsets into R


@njit(cache=True, nogil=True)
def _shapes(arena, offsets, bounds, max_features, gint, R_off):
    """Start, end, prefix and feature length of every group, and where its R goes."""
    total = 0
    for g in range(bounds.shape[0] - 1):
        s, e = bounds[g], bounds[g + 1]
        gint[g, K.G_START] = s
        gint[g, K.G_END] = e
        R_off[g] = total
        if e - s > 1:  # a group of one key keeps prefix and features 0, and no R
            prefix = K.common_prefix_len(arena, offsets, s, e)
            feat = min(max_features, K.max_key_len(offsets, s, e) - prefix)
            gint[g, K.G_PREFIX] = prefix
            gint[g, K.G_FEAT] = feat
            total += (feat + 1) * (feat + 1)
    R_off[bounds.shape[0] - 1] = total


@njit(cache=True, nogil=True)
def _fit(arena, offsets, gint, coef, R, R_off, g0, g1):
    """Train groups g0..g1-1 (shapes from :func:`_shapes`): least squares of the ranks on
    the feature rows, then exact error bounds over the group's keys."""
    for g in range(g0, g1):
        s, e = gint[g, K.G_START], gint[g, K.G_END]
        if e - s <= 1:
            continue
        prefix, feat = gint[g, K.G_PREFIX], gint[g, K.G_FEAT]
        n = feat + 1
        W = Q.ls_start(n)
        step = Q.block_rows(n)
        for r0 in range(s, e, step):
            rows = min(step, e - r0)
            for t in range(rows):  # feature row [1, bytes after the prefix...], rank last
                i = r0 + t
                a = offsets[i] + prefix
                ln = offsets[i + 1] - a
                W[0, n + t] = 1.0
                for j in range(feat):
                    W[1 + j, n + t] = arena[a + j] if j < ln else 0.0
                W[n, n + t] = i - s
            Q.ls_fold(W, n, rows)
        Rg, x = Q.ls_finish(W, n)
        R[R_off[g]:R_off[g + 1]] = Rg.ravel()
        coef[g, :n] = x
        lo, hi = K.error_bounds(arena, offsets, s, e, prefix, feat, coef[g])
        gint[g, K.G_ERRLO] = lo
        gint[g, K.G_ERRHI] = hi


_PER_PART = 64  # groups per slice handed to a core


def fit_groups(arena: np.ndarray, offsets: np.ndarray, bounds: np.ndarray, max_features: int) -> Fits:
    """Every group between consecutive ``bounds`` of the sorted keys trained from scratch
    (as :func:`~learnedidx.index.grouping.fit_group` with the ``cpu`` backend does), on
    every core."""
    G = max(len(bounds) - 1, 0)
    gint = np.zeros((G, K.G_COLS), np.int64)
    coef = np.zeros((G, max_features + 1))
    R_off = np.zeros(G + 1, np.int64)
    bounds = np.ascontiguousarray(bounds, np.int64)
    if G:
        _shapes(arena, offsets, bounds, max_features, gint, R_off)
    R = np.empty(R_off[-1])
    parallel.over_range(lambda g0, g1: _fit(arena, offsets, gint, coef, R, R_off, g0, g1), G,
                        -(-G // _PER_PART))
    return Fits(gint, coef, R, R_off)
