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
from numba import carray, njit, types

from learnedidx.native import load_be64, load_word, pointer_to, prefetch, prefetch_address

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
def lower_bound_h(arena, offsets, heads, q, qh, lo, hi) -> int:
    """First index in [lo, hi) whose key is >= q (hi if none), comparing heads first and
    keys only on a tie (all keys in [lo, hi) share the prefix that ``heads`` and the
    query's head ``qh`` were taken after)."""
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
        # _predict of the key, read in place: the same sum in the same order, so exactly
        # the prediction a lookup of this key computes.
        a = offsets[i] + prefix_len
        p = coef_row[0]
        for j in range(min(feat_len, offsets[i + 1] - a)):
            p += coef_row[1 + j] * arena[a + j]
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


@njit(cache=True, nogil=True, inline="always")
def find_group_near(arena, offsets, gint, q, g) -> int:
    """:func:`find_group`, answered without a search when q falls in group g (the previous
    query's, when queries come in order) by the first-key heads of g and g + 1."""
    qh = head(q, 0, len(q))
    # Strictly between the two heads: the keys compare the same way (no tie to break).
    if 0 <= g < gint.shape[0] and gint[g, G_PHEAD] < qh and (g + 1 == gint.shape[0] or qh < gint[g + 1, G_PHEAD]):
        return g
    return find_group(arena, offsets, gint, q)


@njit(cache=True, nogil=True)
def _has_prefix(arena, offsets, i, q, plen) -> bool:
    a = offsets[i]
    if len(q) < plen or offsets[i + 1] - a < plen:
        return False
    for j in range(plen):
        if arena[a + j] != q[j]:
            return False
    return True


@njit(cache=True, nogil=True, inline="always")
def prefetch_value(items, i) -> None:
    """Start loading the Python object at slot i of a list's item array (address ``items``;
    0: none), which the caller is about to return: reading the slot is safe while the list
    lives and is not resized, and a stale pointer (a slot replaced meanwhile) only makes
    the prefetch useless."""
    if items != 0 and i >= 0:
        prefetch_address(load_word(items + 8 * i))


_PREFETCH_ALL = 128  # windows up to this many keys are prefetched whole


@njit(cache=True, nogil=True, inline="always")
def _prefetch_window(heads, offsets, items, a, b) -> None:
    """Start loading the cache lines a search of ``[a, b)`` will read (heads, offsets for
    the final key compare, the value list's slots at ``items`` unless 0), so that their
    misses overlap instead of following one another as a binary search's do.  Large
    windows get the probes of the first levels."""
    if b - a <= _PREFETCH_ALL:
        for i in range(a, b + 8, 8):
            prefetch(heads, i)
            prefetch(offsets, i)
            if items != 0:
                prefetch_address(items + 8 * i)
    else:
        step = (b - a) >> 3
        for i in range(a + step, b, step):
            prefetch(heads, i)


@njit(cache=True, nogil=True, inline="always")
def _window(arena, offsets, gint, coef, g, q):
    """The search window ``[a, b)`` of q in group g (from the model and its error bounds)
    and q's head; ``a = -1`` when q does not share the group's prefix."""
    gs = gint[g, G_START]
    ge = gint[g, G_END]
    plen = gint[g, G_PREFIX]
    if ge <= gs or not _has_prefix(arena, offsets, gs, q, plen):
        return -1, -1, np.int64(0)
    p = _predict(q, plen, gint[g, G_FEAT], coef[g])
    if not np.isfinite(p):
        p = 0.0
    p = min(max(p, -1e15), 1e15)
    base = gs + np.int64(np.floor(p))
    a = max(base + gint[g, G_ERRLO], gs)
    b = min(base + gint[g, G_ERRHI] + 1, ge)
    if a >= b:  # q predicted outside the group: search all of it
        a, b = gs, ge
    return a, b, head(q, plen, len(q))


@njit(cache=True, nogil=True, inline="always")
def _heads_bound(heads, qh, a, b) -> int:
    """First index in [a, b) whose head is >= qh (b if none)."""
    while a < b:
        mid = (a + b) >> 1
        if heads[mid] < qh:
            a = mid + 1
        else:
            b = mid
    return a


@njit(cache=True, nogil=True, inline="always")
def _finish(arena, offsets, heads, gint, g, q, qh, a, b, r):
    """Lower bound of q in group g from ``r = _heads_bound(heads, qh, a, b)``: head ties are
    decided by comparing keys, and an absent q may lie outside the window.

    Returns ``(r, eq)``: eq is 1 when the key at r is q, 0 when it is not, -1 when unknown
    (so that an exact search compares q with a stored key once, not twice)."""
    gs = gint[g, G_START]
    ge = gint[g, G_END]
    if a < 0:
        if ge <= gs:
            return gs, 0
        # q lacks the prefix of group g, whose first key is <= q unless g is the first group
        # and q precedes everything: q sorts before or after the whole group.
        return (gs if compare_key(arena, offsets, gs, q) > 0 else ge), 0
    if r < b and heads[r] == qh:
        c = compare_key(arena, offsets, r, q)
        if c == 0:
            return r, 1
        if c < 0:
            r = lower_bound_h(arena, offsets, heads, q, qh, r + 1, b)
    # Outside the window only if a neighbour says so; heads answer that without the arena.
    if r == a and a > gs and heads[a - 1] >= qh and compare_key(arena, offsets, a - 1, q) >= 0:
        return lower_bound_h(arena, offsets, heads, q, qh, gs, a), -1
    if r == b and b < ge and heads[b] <= qh and compare_key(arena, offsets, b, q) < 0:
        return lower_bound_h(arena, offsets, heads, q, qh, b, ge), -1
    # Keys of the group share its prefix, so a different head means a different key.
    if r >= ge or heads[r] != qh:
        return r, 0
    return r, -1


@njit(cache=True, nogil=True)
def group_lower_bound(arena, offsets, heads, gint, coef, g, q, items=0):
    """``(r, eq)``: lower bound r of q inside group g and whether the key at r is q (see
    :func:`_finish`).  Model prediction, then a search of its error window (prefetched, with
    the value slots at ``items``), falling back to the rest of the group when q lies
    outside it."""
    a, b, qh = _window(arena, offsets, gint, coef, g, q)
    if a < 0:
        return _finish(arena, offsets, heads, gint, g, q, qh, a, b, a)
    _prefetch_window(heads, offsets, items, a, b)
    r = _heads_bound(heads, qh, a, b)
    if r < b:
        # Most likely q's slot: loading its value now overlaps the key compare's miss,
        # instead of following it (docs/training.md, "Error bounds and lookups").
        prefetch_value(items, r)
    return _finish(arena, offsets, heads, gint, g, q, qh, a, b, r)


@njit(cache=True, nogil=True, inline="always")
def _exact(arena, offsets, gint, g, q, r, eq, exact) -> int:
    """With ``exact``, lower bound r (``eq`` as from :func:`_finish`) turned into q's
    index or -1; else r."""
    if not exact:
        return r
    if eq == 1 or (eq == -1 and r < gint[g, G_END] and compare_key(arena, offsets, r, q) == 0):
        return r
    return -1


@njit(cache=True, nogil=True)
def find_one(arena, offsets, heads, gint, coef, q, items=0) -> int:
    """Index of key q in the merged arrays, or -1 (prefetching its value when ``items``
    is the address of the value list's item array, see :func:`group_lower_bound`)."""
    if gint.shape[0] == 0:
        return -1
    g = find_group(arena, offsets, gint, q)
    r, eq = group_lower_bound(arena, offsets, heads, gint, coef, g, q, items)
    return _exact(arena, offsets, gint, g, q, r, eq, True)


@njit(cache=True, nogil=True)
def seek(arena, offsets, heads, gint, coef, q) -> int:
    """Global lower bound of q (index of the first key >= q)."""
    if gint.shape[0] == 0:
        return 0
    return group_lower_bound(arena, offsets, heads, gint, coef, find_group(arena, offsets, gint, q), q)[0]


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


_LANES = 16  # queries in flight together in search_many


@njit(cache=True, nogil=True)
def search_many(arena, offsets, heads, gint, coef, qarena, qoffsets, exact, items=0):
    """Batched searches inside compiled code, answered in sorted-query order: the index of
    each query key or -1 (``exact``, as :func:`find_one`), else its lower bound (:func:`seek`).

    Queries go in groups of ``_LANES``, each step done for all of them before the next:
    windows (prefetching their lines), then the heads searches (prefetching the keys and
    value slots they land on), then the key compares, then the values' objects.  The cache
    misses of a group's queries overlap, where one query at a time waits for each of its
    own (about twice as fast on 1M keys).
    ``items``: as for :func:`find_one` (exact searches prefetch the values found)."""
    m = qoffsets.shape[0] - 1
    if gint.shape[0] == 0:
        return np.full(m, -1 if exact else 0, np.int64)
    order, sa, so = _sorted_queries(qarena, qoffsets)
    out = np.empty(m, dtype=np.int64)
    grp = np.empty(_LANES, np.int64)
    wa = np.empty(_LANES, np.int64)
    wb = np.empty(_LANES, np.int64)
    qhs = np.empty(_LANES, np.int64)
    rs = np.empty(_LANES, np.int64)
    g = -1
    for t0 in range(0, m, _LANES):
        n = min(m - t0, _LANES)
        for j in range(n):
            q = sa[so[t0 + j]:so[t0 + j + 1]]
            g = find_group_near(arena, offsets, gint, q, g)
            a, b, qh = _window(arena, offsets, gint, coef, g, q)
            grp[j], wa[j], wb[j], qhs[j] = g, a, b, qh
            if a >= 0:
                _prefetch_window(heads, offsets, 0, a, b)  # value slots: only the one found
        for j in range(n):
            if wa[j] >= 0:
                r = _heads_bound(heads, qhs[j], wa[j], wb[j])
                rs[j] = r
                prefetch(arena, offsets[min(r, offsets.shape[0] - 1)])
                if exact and items != 0:
                    prefetch_address(items + 8 * r)
        for j in range(n):
            q = sa[so[t0 + j]:so[t0 + j + 1]]
            g = grp[j]
            r, eq = _finish(arena, offsets, heads, gint, g, q, qhs[j], wa[j], wb[j], rs[j] if wa[j] >= 0 else -1)
            rs[j] = _exact(arena, offsets, gint, g, q, r, eq, exact)
            out[order[t0 + j]] = rs[j]
        if exact and items != 0:
            for j in range(n):  # independent loads of the slots: they overlap
                prefetch_value(items, rs[j])
    return out


_u8_at = pointer_to(types.uint8)
_i64_at = pointer_to(types.int64)
_f64_at = pointer_to(types.float64)

# Slots of an index descriptor (see :func:`index_descriptor`).
D_ARENA, D_ARENA_LEN, D_OFFSETS, D_NKEYS, D_HEADS, D_GINT, D_NGROUPS, D_COEF, D_COEF_COLS, D_ITEMS, D_MAX_LEN = range(11)
D_SLOTS = 11


def index_descriptor(arena, offsets, heads, gint, coef, items, max_len) -> np.ndarray:
    """What a point lookup reads, as one int64 array of addresses and sizes, passed to
    :func:`find_at`/:func:`seek_at` by its own address: Numba unboxes one int far faster
    than a structref over the arrays or the six arrays themselves, a cost comparable to
    the whole compiled lookup (figures in docs/training.md).

    ``max_len``: the longest valid query (:func:`find_at` answers -2 for others).
    The caller keeps the arrays (and the descriptor) alive while lookups may use it;
    ``gint`` and ``coef`` must be C-contiguous with ``gint.shape[1] == G_COLS``."""
    for a in (arena, offsets, heads, gint, coef):
        if not a.flags.c_contiguous:
            raise ValueError("index arrays must be C-contiguous")
    d = np.zeros(D_SLOTS, np.int64)
    d[D_ARENA], d[D_ARENA_LEN] = arena.ctypes.data, arena.shape[0]
    d[D_OFFSETS], d[D_NKEYS] = offsets.ctypes.data, offsets.shape[0] - 1
    d[D_HEADS] = heads.ctypes.data
    d[D_GINT], d[D_NGROUPS] = gint.ctypes.data, gint.shape[0]
    d[D_COEF], d[D_COEF_COLS] = coef.ctypes.data, coef.shape[1]
    d[D_ITEMS], d[D_MAX_LEN] = items, max_len
    return d


@njit(cache=True, nogil=True, inline="always")
def _arrays_at(addr):
    d = carray(_i64_at(addr), D_SLOTS)
    n, groups = d[D_NKEYS], d[D_NGROUPS]
    return (carray(_u8_at(d[D_ARENA]), d[D_ARENA_LEN]), carray(_i64_at(d[D_OFFSETS]), n + 1),
            carray(_i64_at(d[D_HEADS]), n), carray(_i64_at(d[D_GINT]), (groups, G_COLS)),
            carray(_f64_at(d[D_COEF]), (groups, d[D_COEF_COLS])), d[D_ITEMS])


# Single-key entry points for Python's per-operation API hold the GIL on purpose: a
# sub-microsecond call that releases it hands the interpreter to any runnable thread (the
# background merger, say) and waits up to its switch interval to get it back, which
# cost per-op lookups most of their throughput beside one busy thread (docs/training.md).
# Loops stay nogil.
@njit(cache=True)
def find_at(desc, q) -> int:
    """:func:`find_one` over the index whose descriptor is at address ``desc`` (see
    :func:`index_descriptor`), holding the GIL (see above); -2 when q's length is outside
    1..max_len (so that the caller's fast path need not check it)."""
    if len(q) < 1 or len(q) > carray(_i64_at(desc), D_SLOTS)[D_MAX_LEN]:
        return -2
    arena, offsets, heads, gint, coef, items = _arrays_at(desc)
    return find_one(arena, offsets, heads, gint, coef, q, items)


@njit(cache=True)
def seek_at(desc, q) -> int:
    """:func:`seek` over the index whose descriptor is at address ``desc``, holding the GIL."""
    arena, offsets, heads, gint, coef, _ = _arrays_at(desc)
    return seek(arena, offsets, heads, gint, coef, q)


def entry_point(dispatcher, *example_args):
    """``dispatcher``'s compiled entry point for the types of ``example_args``.

    Calling it skips Numba's per-call type dispatch (a third of a point lookup's cost from
    Python); the caller must pass exactly those types.  Falls back to the dispatcher."""
    dispatcher(*example_args)  # compile or load from the cache
    cres = dispatcher.overloads.get(tuple(numba.typeof(a) for a in example_args))
    return getattr(cres, "entry_point", None) or dispatcher
