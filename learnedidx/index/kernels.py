"""Numba kernels of the learned index: key comparison, features, prediction and search.

Keys live in a flat ``uint8`` arena with ``int64`` offsets (key i is
``arena[offsets[i]:offsets[i+1]]``).  Group parameters are packed into one int64 matrix
``gint`` (columns below) and one float64 matrix ``coef`` so that a Python call into a
kernel passes few arguments (Numba's dispatch cost grows with the argument count).

Searches compare *heads* first: the 8 key bytes after the group's common prefix packed
big-endian into an int64 (zero-padded, sign bit flipped so that signed order is byte
order), one per key in ``heads``.  Heads are ordered like the keys (ties only where keys
share those 8 bytes), so a binary search touches the compact ``heads`` array and reads a
key from the arena only on a tie.  The root search does the same with ``G_PHEAD``, the
head of each group's first key taken from byte 0.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import njit

# Columns of the packed group matrix ``gint``.
G_START, G_END, G_PREFIX, G_FEAT, G_ERRLO, G_ERRHI, G_PHEAD = range(7)
G_COLS = 7
_SIGN = np.int64(-(1 << 63))


@njit(cache=True, nogil=True, inline="always")
def head(buf, start, end) -> np.int64:
    """Bytes ``buf[start:start+8]`` (stopping at ``end``) as an order-preserving int64."""
    h = np.int64(0)
    for j in range(8):
        b = np.int64(buf[start + j]) if start + j < end else np.int64(0)
        h = (h << np.int64(8)) | b
    return h ^ _SIGN


@njit(cache=True, nogil=True)
def build_heads(arena, offsets, gint):
    """``heads`` of every key (8 bytes after its group's prefix, see the module docstring);
    also fills ``gint[:, G_PHEAD]``."""
    heads = np.empty(offsets.shape[0] - 1, np.int64)
    for g in range(gint.shape[0]):
        plen = gint[g, G_PREFIX]
        s = gint[g, G_START]
        gint[g, G_PHEAD] = head(arena, offsets[s], offsets[s + 1]) if gint[g, G_END] > s else _SIGN
        for i in range(gint[g, G_START], gint[g, G_END]):
            heads[i] = head(arena, offsets[i] + plen, offsets[i + 1])
    return heads


@njit(cache=True, nogil=True, inline="always")
def compare_key(arena, offsets, i, q) -> int:
    """Bytewise compare of stored key ``i`` with query ``q``: -1, 0 or 1."""
    a = offsets[i]
    la = offsets[i + 1] - a
    lq = len(q)
    m = la if la < lq else lq
    for j in range(m):
        x = arena[a + j]
        y = q[j]
        if x != y:
            return -1 if x < y else 1
    if la == lq:
        return 0
    return -1 if la < lq else 1


@njit(cache=True, nogil=True)
def lower_bound(arena, offsets, q, lo, hi) -> int:
    """First index in [lo, hi) whose key is >= q (hi if none)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if compare_key(arena, offsets, mid, q) < 0:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True)
def lower_bound_h(arena, offsets, heads, q, qh, lo, hi) -> int:
    """:func:`lower_bound` comparing heads first (all keys in [lo, hi) share the prefix
    that ``heads`` and the query's head ``qh`` were taken after)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        h = heads[mid]
        if h < qh or (h == qh and compare_key(arena, offsets, mid, q) < 0):
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True)
def build_features(arena, offsets, start, stop, prefix_len, feat_len):
    """Feature rows ``[1.0, byte(prefix_len), ..., byte(prefix_len+feat_len-1)]`` for keys
    ``start..stop-1`` (zero-padded; bytes past ``feat_len`` are truncated)."""
    n = stop - start
    A = np.zeros((n, feat_len + 1))
    for r in range(n):
        a = offsets[start + r] + prefix_len
        e = offsets[start + r + 1]
        A[r, 0] = 1.0
        for j in range(feat_len):
            if a + j >= e:
                break
            A[r, 1 + j] = arena[a + j]
    return A


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
def _predict(q, prefix_len, feat_len, coef_row) -> float:
    p = coef_row[0]
    for j in range(feat_len):
        if prefix_len + j >= len(q):
            break
        p += coef_row[1 + j] * q[prefix_len + j]
    return p


@njit(cache=True, nogil=True)
def error_bounds(arena, offsets, start, stop, prefix_len, feat_len, coef_row):
    """Exact (err_lo, err_hi) of the model over keys start..stop-1: every key's rank r lies
    in [floor(pred) + err_lo, floor(pred) + err_hi]."""
    lo = 0
    hi = 0
    for i in range(start, stop):
        q = arena[offsets[i]:offsets[i + 1]]
        p = _predict(q, prefix_len, feat_len, coef_row)
        if not np.isfinite(p):
            p = 0.0
        p = min(max(p, -1e15), 1e15)
        e = (i - start) - np.int64(np.floor(p))
        if i == start or e < lo:
            lo = e
        if i == start or e > hi:
            hi = e
    return lo, hi


@njit(cache=True, nogil=True)
def find_group(arena, offsets, gint, q) -> int:
    """Root search: the last group whose first key is <= q (0 if q precedes all)."""
    lo = 0
    hi = gint.shape[0]
    qh = head(q, 0, len(q))
    while lo < hi:
        mid = (lo + hi) >> 1
        h = gint[mid, G_PHEAD]
        if h < qh or (h == qh and compare_key(arena, offsets, gint[mid, G_START], q) <= 0):
            lo = mid + 1
        else:
            hi = mid
    return lo - 1 if lo > 0 else 0


@njit(cache=True, nogil=True)
def _has_prefix(arena, offsets, i, q, plen) -> bool:
    a = offsets[i]
    if len(q) < plen or offsets[i + 1] - a < plen:
        return False
    for j in range(plen):
        if arena[a + j] != q[j]:
            return False
    return True


@njit(cache=True, nogil=True)
def group_lower_bound(arena, offsets, heads, gint, coef, g, q) -> int:
    """Lower bound of q inside group g using its model and error window (last-mile search),
    falling back to a binary search over the group when q lies outside the window."""
    gs = gint[g, G_START]
    ge = gint[g, G_END]
    plen = gint[g, G_PREFIX]
    if ge <= gs:
        return gs
    if not _has_prefix(arena, offsets, gs, q, plen):
        return lower_bound(arena, offsets, q, gs, ge)
    qh = head(q, plen, len(q))
    p = _predict(q, plen, gint[g, G_FEAT], coef[g])
    if not np.isfinite(p):
        p = 0.0
    p = min(max(p, -1e15), 1e15)
    base = gs + np.int64(np.floor(p))
    a = base + gint[g, G_ERRLO]
    b = base + gint[g, G_ERRHI] + 1
    if a < gs:
        a = gs
    if b > ge:
        b = ge
    if a >= b:
        return lower_bound_h(arena, offsets, heads, q, qh, gs, ge)
    r = lower_bound_h(arena, offsets, heads, q, qh, a, b)
    # q may be absent and fall outside the window: verify the neighbours.
    if r == a and a > gs and compare_key(arena, offsets, a - 1, q) >= 0:
        return lower_bound_h(arena, offsets, heads, q, qh, gs, a)
    if r == b and b < ge and compare_key(arena, offsets, b, q) < 0:
        return lower_bound_h(arena, offsets, heads, q, qh, b, ge)
    return r


@njit(cache=True, nogil=True, inline="always")
def _in_group(arena, offsets, heads, gint, coef, g, q, exact) -> int:
    """Lower bound of q, found in group g; with ``exact``, q's index or -1."""
    r = group_lower_bound(arena, offsets, heads, gint, coef, g, q)
    if not exact:
        return r
    if r < gint[g, G_END] and compare_key(arena, offsets, r, q) == 0:
        return r
    return -1


@njit(cache=True, nogil=True)
def find_one(arena, offsets, heads, gint, coef, q) -> int:
    """Index of key q in the merged arrays, or -1."""
    if gint.shape[0] == 0:
        return -1
    return _in_group(arena, offsets, heads, gint, coef, find_group(arena, offsets, gint, q), q, True)


@njit(cache=True, nogil=True)
def seek(arena, offsets, heads, gint, coef, q) -> int:
    """Global lower bound of q (index of the first key >= q)."""
    if gint.shape[0] == 0:
        return 0
    return _in_group(arena, offsets, heads, gint, coef, find_group(arena, offsets, gint, q), q, False)


@njit(cache=True, nogil=True)
def _radix_order(qh):
    """An order of ``qh`` sorted on its 24 most significant varying bits (two counting-sort
    passes of 12 bits): exact enough for cache locality, 15x cheaper than ``argsort``."""
    m = qh.shape[0]
    if m < 2048:  # the radix passes' fixed cost (two 4,096-bucket histograms) would dominate
        return np.argsort(qh)
    diff = np.int64(0)
    for i in range(m):
        diff |= qh[i] ^ qh[0]
    top = -1  # highest bit in which any two heads differ
    while diff != 0:
        diff = (diff >> np.int64(1)) & np.int64(0x7FFFFFFFFFFFFFFF)
        top += 1
    shift = max(top + 1 - 24, 0)
    order = np.arange(m)
    tmp = np.empty(m, np.int64)
    for p in range(2):
        sh = shift + 12 * p
        start = np.zeros(4097, np.int64)
        for i in range(m):
            start[((qh[i] >> sh) & 4095) + 1] += 1
        for d in range(4096):
            start[d + 1] += start[d]
        for t in range(m):
            i = order[t]
            d = (qh[i] >> sh) & 4095
            tmp[start[d]] = i
            start[d] += 1
        order, tmp = tmp, order
    return order


@njit(cache=True, nogil=True)
def _sorted_queries(qarena, qoffsets):
    """A batch's queries ordered (roughly) by their first 8 bytes: ``(order, arena,
    offsets)`` with query ``order[t]`` at position t of the new arena.

    Answering in this order makes consecutive searches touch neighbouring groups and cache
    lines, and the copy keeps the queries' own bytes sequential too (together about twice
    as fast as arrival order on a store of a million keys)."""
    m = qoffsets.shape[0] - 1
    qh = np.empty(m, np.int64)
    for i in range(m):
        qh[i] = head(qarena, qoffsets[i], qoffsets[i + 1])
    order = _radix_order(qh)
    sa = np.empty(qoffsets[m] - qoffsets[0], np.uint8)
    so = np.empty(m + 1, np.int64)
    so[0] = 0
    for t in range(m):
        a = qoffsets[order[t]]
        ln = qoffsets[order[t] + 1] - a
        sa[so[t]:so[t] + ln] = qarena[a:a + ln]
        so[t + 1] = so[t] + ln
    return order, sa, so


@njit(cache=True, nogil=True)
def search_many(arena, offsets, heads, gint, coef, qarena, qoffsets, exact):
    """Batched searches inside compiled code, answered in sorted-query order: the index of
    each query key or -1 (``exact``, as :func:`find_one`), else its lower bound (:func:`seek`)."""
    if gint.shape[0] == 0:
        return np.full(qoffsets.shape[0] - 1, -1 if exact else 0, np.int64)
    order, sa, so = _sorted_queries(qarena, qoffsets)
    out = np.empty(order.shape[0], dtype=np.int64)
    for t in range(order.shape[0]):
        q = sa[so[t]:so[t + 1]]
        out[order[t]] = _in_group(arena, offsets, heads, gint, coef, find_group(arena, offsets, gint, q), q, exact)
    return out


# Single-key entry points for Python's per-operation API hold the GIL on purpose: a
# sub-microsecond call that releases it hands the interpreter to any runnable thread (the
# background merger, say) and waits up to its switch interval to get it back, which cut
# per-op lookups from ~950k/s to ~200k/s beside one busy thread.  Loops stay nogil.
@njit(cache=True)
def find_one_gil(arena, offsets, heads, gint, coef, q) -> int:
    """:func:`find_one`, holding the GIL (see above)."""
    return find_one(arena, offsets, heads, gint, coef, q)


@njit(cache=True)
def seek_gil(arena, offsets, heads, gint, coef, q) -> int:
    """:func:`seek`, holding the GIL (see above)."""
    return seek(arena, offsets, heads, gint, coef, q)


def entry_point(dispatcher, *example_args):
    """``dispatcher``'s compiled entry point for the types of ``example_args``.

    Calling it skips Numba's per-call type dispatch (a third of a point lookup's cost from
    Python); the caller must pass exactly those types.  Falls back to the dispatcher."""
    dispatcher(*example_args)  # compile or load from the cache
    cres = dispatcher.overloads.get(tuple(numba.typeof(a) for a in example_args))
    return getattr(cres, "entry_point", None) or dispatcher
