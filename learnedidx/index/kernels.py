"""Numba kernels over sorted key arrays: key comparison, feature rows, shape and error
bounds of a group model.

Keys live in a flat ``uint8`` arena with ``int64`` offsets (key i is
``arena[offsets[i]:offsets[i+1]]``).  Bulk builds (:mod:`learnedidx.index.fitting`) and
retraining (:mod:`learnedidx.index.retrainer`) use these; lookups in a live index use
:mod:`learnedidx.index.search`.
"""
from __future__ import annotations

import numpy as np
from numba import carray, njit

from learnedidx.index.layout import i64_at, u8_at
from learnedidx.native import load_be64

# Columns of the group matrix ``gint`` of a bulk build's fits (learnedidx.index.fitting.Fits).
G_START, G_END, G_PREFIX, G_FEAT, G_ERRLO, G_ERRHI = range(6)
G_COLS = 6


@njit(cache=True, nogil=True, inline="always")
def compare_key(arena, offsets, i, q) -> int:
    """Bytewise compare of stored key ``i`` with query ``q``: -1, 0 or 1 (8 bytes a step)."""
    a = offsets[i]
    la = offsets[i + 1] - a
    lq = len(q)
    m = la if la < lq else lq
    j = 0
    while j + 8 <= m:
        x = load_be64(arena, a + j)
        y = load_be64(q, j)
        if x != y:
            return -1 if x < y else 1
        j += 8
    while j < m:
        x = arena[a + j]
        y = q[j]
        if x != y:
            return -1 if x < y else 1
        j += 1
    if la == lq:
        return 0
    return -1 if la < lq else 1


@njit(cache=True, nogil=True)
def build_features(arena, offsets, start, stop, prefix_len, feat_len):
    """Feature rows ``[1.0, byte(prefix_len), ..., byte(prefix_len+feat_len-1)]`` for keys
    ``start..stop-1`` (zero-padded; bytes past ``feat_len`` are truncated)."""
    n = stop - start
    A = np.zeros((n, feat_len + 1))
    for r in range(n):
        a = offsets[start + r] + prefix_len
        A[r, 0] = 1.0
        for j in range(min(feat_len, offsets[start + r + 1] - a)):  # a loop without exits vectorizes
            A[r, 1 + j] = arena[a + j]
    return A


@njit(cache=True, nogil=True, inline="always")
def offsets_within(offsets, size) -> bool:
    """Whether every key offset lies in ``[0, size]``: the check before a compiled call that
    reads a caller's keys by address, without bounds checks."""
    for o in offsets:
        if o < 0 or o > size:
            return False
    return True


#: Columns of :func:`feature_bytes_many`'s table, a row per run of keys: where its key bytes
#: and offsets lie (addresses and sizes; the caller keeps them alive), and the bytes of
#: each key that its feature row reads (from ``prefix`` on, at most ``feat``).
FB_ARENA, FB_ALEN, FB_OFFS, FB_N, FB_PREFIX, FB_FEAT, FB_COLS = range(7)


@njit(cache=True, nogil=True)
def feature_bytes_many(runs):
    """The bytes :func:`build_features` reads of the keys of every run of ``runs`` (see
    ``FB_*``), joined as one batch ``(arena, offsets)``: with prefix 0 they have the keys'
    feature rows.  One call for a whole request: a background retrainer waits for a busy
    writer's GIL after every call.  The third result is -1, or the first run whose offsets
    lie outside its key bytes (then nothing is copied)."""
    total = 0
    for t in range(runs.shape[0]):
        n = runs[t, FB_N]
        if not offsets_within(carray(i64_at(runs[t, FB_OFFS]), n + 1), runs[t, FB_ALEN]):
            return np.zeros(0, np.uint8), np.zeros(1, np.int64), t
        total += n
    o = np.zeros(total + 1, np.int64)
    k = 0
    for t in range(runs.shape[0]):
        n, prefix, feat = runs[t, FB_N], runs[t, FB_PREFIX], runs[t, FB_FEAT]
        offs = carray(i64_at(runs[t, FB_OFFS]), n + 1)
        for i in range(n):
            o[k + 1] = o[k] + max(0, min(feat, offs[i + 1] - offs[i] - prefix))
            k += 1
    out = np.empty(o[total], np.uint8)
    k = 0
    for t in range(runs.shape[0]):
        n, prefix = runs[t, FB_N], runs[t, FB_PREFIX]
        arena, offs = carray(u8_at(runs[t, FB_ARENA]), runs[t, FB_ALEN]), carray(i64_at(runs[t, FB_OFFS]), n + 1)
        for i in range(n):
            a = offs[i] + prefix
            for j in range(o[k + 1] - o[k]):
                out[o[k] + j] = arena[a + j]
            k += 1
    return out, o, -1


@njit(cache=True, nogil=True)
def common_prefix_len(arena, offsets, start, stop) -> int:
    """Length of the common prefix of the sorted keys start..stop-1 (first vs last suffices)."""
    a = offsets[start]
    la = offsets[start + 1] - a
    b = offsets[stop - 1]
    lb = offsets[stop] - b
    m = la if la < lb else lb
    p = 0
    while p < m and arena[a + p] == arena[b + p]:
        p += 1
    return p


@njit(cache=True, nogil=True)
def max_key_len(offsets, start, stop) -> int:
    best = 0
    for i in range(start, stop):
        ln = offsets[i + 1] - offsets[i]
        if ln > best:
            best = ln
    return best


@njit(cache=True, nogil=True, inline="always")
def _key_error(arena, offsets, start, i, prefix_len, feat_len, coef_row):
    """``(error, prediction)`` of key i (rank ``i - start``) under the model, its
    prediction read in place: the same sum in the same order as a lookup of the key
    computes (:func:`~learnedidx.index.search.predict`), so exactly that prediction."""
    a = offsets[i] + prefix_len
    p = coef_row[0]
    for j in range(min(feat_len, offsets[i + 1] - a)):
        p += coef_row[1 + j] * arena[a + j]
    q = p if np.isfinite(p) else 0.0
    q = min(max(q, -1e15), 1e15)
    return (i - start) - np.int64(np.floor(q)), p


@njit(cache=True, nogil=True, inline="always")
def _bounds_pass(arena, offsets, start, stop, prefix_len, feat_len, coef_row, g, residuals):
    """One pass over keys start..stop-1: their exact error bounds, and with ``residuals``
    ``g = Aᵀ(b - A·coef)`` as well."""
    lo = 0
    hi = 0
    for i in range(start, stop):
        e, p = _key_error(arena, offsets, start, i, prefix_len, feat_len, coef_row)
        if i == start or e < lo:
            lo = e
        if i == start or e > hi:
            hi = e
        if residuals:
            r = (i - start) - p
            g[0] += r
            a = offsets[i] + prefix_len
            for j in range(min(feat_len, offsets[i + 1] - a)):
                g[1 + j] += r * arena[a + j]
    return lo, hi


@njit(cache=True, nogil=True)
def error_bounds(arena, offsets, start, stop, prefix_len, feat_len, coef_row):
    """Exact (err_lo, err_hi) of the model over keys start..stop-1: every key's rank r lies
    in [floor(pred) + err_lo, floor(pred) + err_hi]."""
    return _bounds_pass(arena, offsets, start, stop, prefix_len, feat_len, coef_row, np.zeros(0), False)


@njit(cache=True, nogil=True)
def residual_bounds(arena, offsets, start, stop, prefix_len, feat_len, coef_row, g):
    """:func:`error_bounds`, and in the same pass ``g = Aᵀ(b - A·coef)``: the keys' feature
    rows (:func:`build_features`) times their residuals (rank minus prediction)."""
    g[:] = 0.0
    return _bounds_pass(arena, offsets, start, stop, prefix_len, feat_len, coef_row, g, True)
