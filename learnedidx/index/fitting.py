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
from numba import carray, njit

from learnedidx.index import kernels as K
from learnedidx.index import parallel
from learnedidx.index import qr as Q
from learnedidx.index.layout import f64_at, i64_at, u8_at


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
            _rows_block(W, n, arena, offsets, r0, rows, prefix, feat, s)
            Q.ls_fold(W, n, rows)
        Rg, x = Q.ls_finish(W, n)
        R[R_off[g]:R_off[g + 1]] = Rg.ravel()
        coef[g, :n] = x
        lo, hi = K.error_bounds(arena, offsets, s, e, prefix, feat, coef[g])
        gint[g, K.G_ERRLO] = lo
        gint[g, K.G_ERRHI] = hi


@njit(cache=True, nogil=True)
def _rows_block(W, n, kbytes, offs, r0, rows, prefix, feat, first):
    """Write the feature rows ``[1, bytes after the prefix...]`` of keys r0..r0+rows-1,
    and their positions counted from key ``first`` as the right-hand side, into the data
    columns of block ``W`` (after its first n rows)."""
    for t in range(rows):
        i = r0 + t
        a = offs[i] + prefix
        ln = offs[i + 1] - a
        W[0, n + t] = 1.0
        for j in range(feat):
            W[1 + j, n + t] = kbytes[a + j] if j < ln else 0.0
        W[n, n + t] = i - first


@njit(cache=True, nogil=True)
def fit_shaped(kbytes, offs, n, prefix, feat, R_old, incremental, parena, poffs):
    """``(x, R)``: the least-squares model of ``n`` sorted keys for a given prefix and
    feature length, from their bytes (no feature matrix): incremental from ``R_old`` and
    the new keys' rows (``parena``/``poffs``), full otherwise (see :func:`fit_one`)."""
    m = feat + 1
    if incremental:
        A_delta = K.build_features(parena, poffs, 0, poffs.shape[0] - 1, prefix, feat)
        if A_delta.shape[0] > 0:
            R_d, _ = Q.householder_r(A_delta, np.zeros(A_delta.shape[0]))
            stacked = np.empty((2 * m, m))
            stacked[:m] = R_old
            stacked[m:] = R_d
            R, _ = Q.householder_r(stacked, np.zeros(2 * m))
        else:
            R = R_old.copy()
        ab = np.zeros(m)  # Aᵀb row by row, in the order qr.atb sums it
        for i in range(n):
            a = offs[i] + prefix
            ln = offs[i + 1] - a
            ab[0] += 1.0 * i
            for j in range(feat):
                ab[1 + j] += (kbytes[a + j] if j < ln else 0.0) * i
        x = Q.back_substitute(R, Q.forward_substitute_t(R, ab))
    else:
        W = Q.ls_start(m)
        step = Q.block_rows(m)
        for r0 in range(0, n, step):
            rows = min(step, n - r0)
            _rows_block(W, m, kbytes, offs, r0, rows, prefix, feat, 0)
            Q.ls_fold(W, m, rows)
        R, x = Q.ls_finish(W, m)
    return x, R


@njit(cache=True, nogil=True)
def fit_one(kbytes, offs, n, max_features, R_old, memo_prefix, memo_feat, use_memo, parena, poffs):
    """Retrain one group of ``n`` sorted keys (``kbytes``/``offs``), without the GIL and
    without building its feature matrix: ``(coef, prefix, feat, R, incremental, err_lo,
    err_hi)``.  Incremental (SIA) when ``use_memo`` and the memo's prefix and feature length
    still hold: R of the new keys' rows (``parena``/``poffs``), R of ``[R_old; R_Δ]``, then
    ``RᵀR x = Aᵀb`` with ``Aᵀb`` summed over every key; full otherwise, streamed through the
    L1-sized block.  The same arithmetic as the ``cpu`` backend on the feature matrix, so
    the same numbers; error bounds exact over these keys."""
    if n <= 1:
        return np.zeros(max_features + 1), 0, 0, np.zeros((0, 0)), False, 0, 0
    prefix = K.common_prefix_len(kbytes, offs, 0, n)
    feat = min(max_features, K.max_key_len(offs, 0, n) - prefix)
    m = feat + 1
    coef = np.zeros(max_features + 1)
    incremental = use_memo and memo_prefix == prefix and memo_feat == feat
    x, R = fit_shaped(kbytes, offs, n, prefix, feat, R_old, incremental, parena, poffs)
    coef[:m] = x
    lo, hi = K.error_bounds(kbytes, offs, 0, n, prefix, feat, coef)
    return coef, prefix, feat, R, incremental, lo, hi


#: Columns of :func:`fit_keyed_jobs`'s job table: where a job's keys and new keys lie in
#: the batch's offsets (the group's n keys from ``K_AT``, then its new keys), its shape,
#: whether it starts from a memo, and where its memo and its results lie in the flat arrays.
K_AT, K_N, K_NEW, K_PREFIX, K_FEAT, K_INCR, K_ROLD, K_ROUT, K_COUT, K_COLS = range(10)


@njit(cache=True, nogil=True)
def fit_keyed_jobs(keys, offsets, jobs, r_old, R_out, coef_out, j0, j1) -> None:
    """:func:`fit_shaped` of jobs j0..j1-1 of a batch given by its keys (a server's
    ``train.keys``: ``keys``/``offsets`` hold every job's keys, rows of ``jobs`` say which
    are whose), in one call that releases the GIL.  Job j's R ((feat+1)² values, row by
    row) goes to ``R_out`` from ``jobs[j, K_ROUT]``, its coefficients to ``coef_out`` from
    ``jobs[j, K_COUT]``.  The caller has checked every offset and size."""
    for j in range(j0, j1):
        s = jobs[j]
        at, n, new, prefix, feat = s[K_AT], s[K_N], s[K_NEW], s[K_PREFIX], s[K_FEAT]
        w = feat + 1
        incremental = s[K_INCR] != 0
        R_old = r_old[s[K_ROLD]:s[K_ROLD] + w * w].reshape(w, w) if incremental else np.zeros((0, 0))
        x, R = fit_shaped(keys, offsets[at:at + n + 1], n, prefix, feat, R_old, incremental, keys,
                          offsets[at + n:at + n + new + 1])
        ro, co = s[K_ROUT], s[K_COUT]
        for a in range(w):
            coef_out[co + a] = x[a]
            for b in range(w):
                R_out[ro + a * w + b] = R[a, b]


#: Columns of :func:`fit_jobs`'s job table: the addresses and sizes of a group's arrays
#: (key bytes, offsets, memoized R, the keys written since) and its memo's shape.
J_KB, J_KBLEN, J_OFFS, J_N, J_R, J_MPREFIX, J_MFEAT, J_MEMO, J_PARENA, J_PLEN, J_POFFS, J_PN, J_COLS = range(13)
#: Columns of its integer results.
F_PREFIX, F_FEAT, F_INCR, F_LO, F_HI, F_COLS = range(6)


@njit(cache=True, nogil=True)
def fit_jobs(jobs, max_features, coef, res, R, g0, g1) -> None:
    """:func:`fit_one` of jobs g0..g1-1 in one call that releases the GIL: each row of
    ``jobs`` says where a group's arrays lie (the caller keeps them alive and unchanged
    during the call).  Job g's coefficients go to ``coef[g]``, its prefix, feature length,
    whether it was incremental and its error bounds to ``res[g]``, its R factor
    ((feat+1)² values, row by row) to the start of ``R[g]``.

    One call for many groups, because a background retrainer needs the GIL between two
    calls and a busy writer holds it for milliseconds at a time."""
    for g in range(g0, g1):
        j = jobs[g]
        n = j[J_N]
        kb = carray(u8_at(j[J_KB]), j[J_KBLEN])
        offs = carray(i64_at(j[J_OFFS]), n + 1)
        mf = j[J_MFEAT]
        R_old = carray(f64_at(j[J_R]), (mf + 1, mf + 1)) if j[J_MEMO] else np.zeros((0, 0))
        parena = carray(u8_at(j[J_PARENA]), j[J_PLEN])
        poffs = carray(i64_at(j[J_POFFS]), j[J_PN] + 1)
        c, prefix, feat, Rg, incremental, lo, hi = fit_one(kb, offs, n, max_features, R_old, j[J_MPREFIX], mf,
                                                           j[J_MEMO] != 0, parena, poffs)
        coef[g] = c
        res[g, F_PREFIX], res[g, F_FEAT], res[g, F_INCR], res[g, F_LO], res[g, F_HI] = prefix, feat, incremental, lo, hi
        m = Rg.shape[0]
        for a in range(m):
            for b in range(m):
                R[g, a * m + b] = Rg[a, b]


@njit(cache=True, nogil=True, inline="always")
def _job_keys(j):
    """``(key bytes, offsets, n)`` of a row of a :func:`fit_jobs` table."""
    n = j[J_N]
    return carray(u8_at(j[J_KB]), j[J_KBLEN]), carray(i64_at(j[J_OFFS]), n + 1), n


@njit(cache=True, nogil=True)
def shape_jobs(jobs, max_features, out) -> None:
    """The prefix and feature length of each job of a :func:`fit_jobs` table (groups of at
    least two keys) into ``out[t]``: their keys' common prefix, and the bytes past it, at
    most ``max_features``.  One call for a batch: a background retrainer needs the GIL
    again after every call, and a busy writer holds it for milliseconds at a time."""
    for t in range(jobs.shape[0]):
        kb, offs, n = _job_keys(jobs[t])
        prefix = K.common_prefix_len(kb, offs, 0, n)
        out[t, 0] = prefix
        out[t, 1] = min(max_features, K.max_key_len(offs, 0, n) - prefix)


@njit(cache=True, nogil=True)
def refined_bounds(kb, offs, n, prefix, feat, coef, R, steps):
    """Up to ``steps`` steps of iterative refinement of the model ``coef`` (in place) with
    ``R``, a trainer's factor of the keys' rows (RᵀR = AᵀA, up to the trainer's rounding):
    ``coef += (RᵀR)⁻¹ Aᵀ(b - A·coef)``, the residuals taken in float64.  A trainer that
    factors in FP32 (the emulated FPGA) answers coefficients whose predictions can be off by
    many positions; a step or two on the host brings them to the float64 least-squares
    fit, one pass over the keys each.  Stops when the fit has converged as far as the
    trainer's factor allows, where another pass would cost as much as the first and gain
    nothing: when a step would move no prediction by half a position, or move them by
    less than 1/128 of the window in the root mean square, or when the last step narrowed
    the bounds by less than an eighth; keeps the model of the narrowest bounds seen, and
    returns those exact error bounds."""
    w = feat + 1
    g = np.zeros(w)
    best = coef[:w].copy()
    blo, bhi = 0, -1
    for it in range(steps + 1):
        lo, hi = K.residual_bounds(kb, offs, 0, n, prefix, feat, coef, g)
        converged = it > 0 and 8 * ((bhi - blo) - (hi - lo)) < bhi - blo
        if bhi < blo or hi - lo < bhi - blo:
            blo, bhi = lo, hi
            best[:] = coef[:w]
        if it == steps or converged:
            break
        d = Q.back_substitute(R, Q.forward_substitute_t(R, g))
        move = abs(d[0])
        for j in range(1, w):
            move += 255.0 * abs(d[j])
        # The step's root-mean-square move of the predictions, ‖A·d‖/√n = ‖R·d‖/√n: a step
        # that moves them by less than 1/128 of the window narrows it by next to nothing,
        # and checking that would cost a pass.
        sq = 0.0
        for i in range(w):
            rd = 0.0
            for j in range(i, w):
                rd += R[i, j] * d[j]
            sq += rd * rd
        if not (move >= 0.5 and 128.0 * np.sqrt(sq / n) >= hi - lo):  # (NaN too)
            break
        for j in range(w):
            coef[j] += d[j]
    coef[:w] = best
    return blo, bhi


@njit(cache=True, nogil=True)
def bound_jobs(jobs, shapes, coef, R, steps, out) -> None:
    """The models ``coef[t]`` of a batch of jobs (over the prefix and features of
    ``shapes[t]``), each refined with its trainer's factor ``R[t]`` (:func:`refined_bounds`),
    and their exact error bounds over the jobs' keys into ``out[t]``: one call for a batch
    (:func:`shape_jobs`)."""
    for t in range(jobs.shape[0]):
        kb, offs, n = _job_keys(jobs[t])
        w = shapes[t, 1] + 1
        out[t, 0], out[t, 1] = refined_bounds(kb, offs, n, shapes[t, 0], shapes[t, 1], coef[t], R[t, :w, :w], steps)


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
