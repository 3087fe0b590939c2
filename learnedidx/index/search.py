"""Finding a key in a live index (:mod:`learnedidx.index.layout`): the root search, the
search of a group's merged keys through its model and error bounds, and the search of its
insert buffer.  Queries are raw ``(address, length)`` pairs, so that keys are read where they
lie (in ``bytes`` objects, in key arrays) without copies.

Searches compare *heads* first (8 key bytes after a prefix every candidate shares, as an
order-preserving int64) and read key bytes only on a tie.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from learnedidx.index.layout import (
    D_NROOT, SIGN, T_ERRHI, T_ERRLO, T_FEAT, T_HPREFIX, T_MPREFIX, T_N, T_P0, T_P1, T_RPREFIX, T_VITEMS, bytes_ptr,
    compare, head, item, level_size, merged, root, root_sample, sample_levels)
from learnedidx.native import load_byte, prefetch, prefetch_address


_LOWEST, _HIGHEST = SIGN, ~SIGN  # the least and greatest heads


@njit(cache=True, nogil=True)
def sample_root(d) -> None:
    """(Re)build the root's sample from its heads (``d[D_RSAMP]`` has room for it).

    Level ``lvl`` has one node of 16 heads per ``16**(L - lvl)`` root entries: node ``b``
    holds the heads of entries ``(16 b + i) * 16**(L - 1 - lvl)``, ``i`` = 0..15, the
    bottom level being ``rhead`` itself.  Above the bottom, slot 0 of a node holds the
    lowest head (the search only counts the heads after it), and so does entry 0 at the
    bottom: the first group holds every key before its pivot too, so that pivot bounds
    nothing (and is not the least once keys below it were split off).  Slots past the last
    entry hold the highest head, which no head is below."""
    rhead = root(d)[0]
    n = rhead.shape[0]
    samp = root_sample(d)
    L = sample_levels(n)
    off = 0
    for lvl in range(L):
        size = level_size(n, L, lvl)
        stride = 1 << (4 * (L - 1 - lvl))
        for t in range(size):
            j = t * stride
            if t == 0 or (lvl < L - 1 and (t & 15) == 0):
                samp[off + t] = _LOWEST
            else:
                samp[off + t] = rhead[j] if j < n else _HIGHEST
        off += size


@njit(cache=True, nogil=True, inline="always")
def _count_below(a, at, qh) -> int:
    """How many of the 16 heads ``a[at:at + 16]`` are below ``qh`` (compiled branch-free)."""
    c = 0
    for i in range(16):
        c += a[at + i] < qh
    return c


@njit(cache=True, nogil=True)
def find_root(d, qp, ql) -> int:
    """Root index of the group holding query key ``(qp, ql)``: the last pivot <= it, or 0
    (the first group holds every key below the next pivot, whatever its own).

    Each level of the sample narrows the first entry whose head is not below the query's
    to one node by counting (no branch to mispredict); pivots whose head equals the
    query's are then compared whole."""
    n = d[D_NROOT]
    if n <= 1:
        return 0
    samp = root_sample(d)
    L = sample_levels(n)
    qh = head(qp, ql, 0)
    b = 0
    off = 0
    for lvl in range(L - 1):
        b = 16 * b + max(_count_below(samp, off + 16 * b, qh) - 1, 0)
        off += level_size(n, L, lvl)
    lo = max(16 * b + _count_below(samp, off + 16 * b, qh), 1)  # entry 0 is at or below any key
    if lo < n and samp[off + lo] == qh:
        # Pivots with the query's head: a gallop bounds them (keys sharing a long prefix
        # can give every pivot one head), then their whole keys are searched.
        step = 1
        while lo + step < n and samp[off + lo + step] == qh:
            step <<= 1
        hi = min(lo + step, n)
        rpiv = root(d)[1]
        while lo < hi:
            mid = (lo + hi) >> 1
            pp, pl = bytes_ptr(rpiv[mid])
            if compare(pp, pl, qp, ql) <= 0:
                lo = mid + 1
            else:
                hi = mid
    return lo - 1


@njit(cache=True, nogil=True)
def find_root_near(d, qp, ql, r) -> int:
    """:func:`find_root`, answered without a search when the query falls between root
    entries ``r`` and ``r + 1`` by their heads alone (queries in order mostly do)."""
    rhead, _, _ = root(d)
    n = rhead.shape[0]
    if 0 <= r < n:
        qh = head(qp, ql, 0)
        if rhead[r] < qh and (r + 1 == n or qh < rhead[r + 1]):
            return r
    return find_root(d, qp, ql)


@njit(cache=True, nogil=True)
def radix_order(qh):
    """An order of ``qh`` sorted on its 24 most significant varying bits (two counting-sort
    passes of 12 bits): exact enough for cache locality, far cheaper than ``argsort``."""
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
        for k in range(4096):
            start[k + 1] += start[k]
        for t in range(m):
            i = order[t]
            k = (qh[i] >> sh) & 4095
            tmp[start[k]] = i
            start[k] += 1
        order, tmp = tmp, order
    return order


@njit(cache=True, nogil=True, inline="always")
def predict(p, ln, mprefix, feat, crow) -> float:
    """The group model's position for the key at ``p`` (``ln`` bytes): bias plus one weight
    per byte after ``mprefix``, summed in the order :func:`model_error` sums them, so that
    a stored key's prediction here is exactly the one its error bound was computed from."""
    x = crow[0]
    for j in range(feat):
        if mprefix + j >= ln:
            break
        x += crow[1 + j] * load_byte(p + mprefix + j)
    if not np.isfinite(x):
        x = 0.0
    return min(max(x, -1e15), 1e15)


@njit(cache=True, nogil=True)
def model_error(offs, base, n, mprefix, feat, crow):
    """Exact ``(err_lo, err_hi)`` of a model over merged keys 0..n-1: key i's position lies
    in ``[floor(pred) + err_lo, floor(pred) + err_hi]``."""
    lo = 0
    hi = 0
    for i in range(n):
        e = i - np.int64(np.floor(predict(base + offs[i], offs[i + 1] - offs[i], mprefix, feat, crow)))
        if i == 0 or e < lo:
            lo = e
        if i == 0 or e > hi:
            hi = e
    return lo, hi


@njit(cache=True, nogil=True, inline="always")
def key_cmp(offs, base, i, qp, ql) -> int:
    """Order of merged key ``i`` against the query."""
    a = offs[i]
    return compare(base + a, offs[i + 1] - a, qp, ql)


@njit(cache=True, nogil=True)
def lower_bound_h(heads, offs, base, qp, ql, qh, lo, hi) -> int:
    """First index in [lo, hi) whose key is >= the query (hi if none), heads first."""
    while lo < hi:
        mid = (lo + hi) >> 1
        h = heads[mid]
        if h < qh or (h == qh and key_cmp(offs, base, mid, qp, ql) < 0):
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True)
def has_prefix(row, qp, ql) -> bool:
    """Whether the query starts with the group's merged keys' common prefix (checked a word
    at a time against ``T_P0``/``T_P1``, past 16 bytes against the first key)."""
    plen = row[T_HPREFIX]
    if ql < plen:
        return False
    k = 0
    while k < plen:
        if k < 16:
            w = np.uint64(head(qp, ql, k) ^ (row[T_P0] if k == 0 else row[T_P1]))
            take = min(8, plen - k)
            if (w >> np.uint64(64 - 8 * take)) != 0:
                return False
            k += 8
        else:
            _, offs, base = merged(row)
            return compare(base + offs[0] + k, plen - k, qp + k, plen - k) == 0
    return True


@njit(cache=True, nogil=True, inline="always")
def predicted_window(row, crow, qp, ql):
    """``(a, b, qh, p)``: :func:`window` and the model's predicted position ``p``."""
    n = row[T_N]
    if n == 0 or not has_prefix(row, qp, ql):
        return -1, -1, np.int64(0), 0
    p = np.int64(np.floor(predict(qp, ql, row[T_MPREFIX], row[T_FEAT], crow)))
    a = max(p + row[T_ERRLO], 0)
    b = min(p + row[T_ERRHI] + 1, n)
    if a >= b:  # predicted outside the group: search all of it
        a, b = 0, n
    return a, b, head(qp, ql, row[T_HPREFIX]), p


@njit(cache=True, nogil=True)
def window(row, crow, qp, ql):
    """``(a, b, qh)``: the positions ``[a, b)`` of the group's merged keys the query may be
    at (from the model and its error bounds) and its head; ``a = -1`` when the group has
    no merged key or the query lacks their common prefix."""
    a, b, qh, _ = predicted_window(row, crow, qp, ql)
    return a, b, qh


@njit(cache=True, nogil=True, inline="always")
def heads_bound(heads, qh, a, b) -> int:
    """First index in [a, b) whose head is >= qh (b if none)."""
    while a < b:
        mid = (a + b) >> 1
        if heads[mid] < qh:
            a = mid + 1
        else:
            b = mid
    return a


@njit(cache=True, nogil=True)
def finish(row, qp, ql, qh, a, b, r):
    """``(r, eq)``: the query's lower bound among the merged keys from ``r =
    heads_bound(heads, qh, a, b)`` (any r when ``a < 0``), and 1 when the key at r is the
    query, 0 when it is not, -1 when unknown.  Head ties are settled by comparing keys, and
    a query outside the window is searched for in the rest of the group."""
    n = row[T_N]
    if a < 0:
        if n == 0:
            return 0, 0
        heads, offs, base = merged(row)
        # The query lacks the merged keys' common prefix: it sorts before or after all of them.
        return (0 if key_cmp(offs, base, 0, qp, ql) > 0 else n), 0
    heads, offs, base = merged(row)
    if r < b and heads[r] == qh:
        c = key_cmp(offs, base, r, qp, ql)
        if c == 0:
            return r, 1
        if c < 0:
            r = lower_bound_h(heads, offs, base, qp, ql, qh, r + 1, b)
    if r == a and a > 0 and heads[a - 1] >= qh and key_cmp(offs, base, a - 1, qp, ql) >= 0:
        return lower_bound_h(heads, offs, base, qp, ql, qh, 0, a), -1
    if r == b and b < n and heads[b] <= qh and key_cmp(offs, base, b, qp, ql) < 0:
        return lower_bound_h(heads, offs, base, qp, ql, qh, b, n), -1
    if r >= n or heads[r] != qh:  # merged keys share the prefix: another head, another key
        return r, 0
    return r, -1


@njit(cache=True, nogil=True, inline="always")
def exact(row, qp, ql, r, eq) -> int:
    """The merged position of the query from :func:`finish`'s ``(r, eq)``, or -1."""
    if eq == 1:
        return r
    if eq == -1 and r < row[T_N]:
        _, offs, base = merged(row)
        if key_cmp(offs, base, r, qp, ql) == 0:
            return r
    return -1


@njit(cache=True, nogil=True)
def merged_lower_bound(row, crow, qp, ql):
    """``(r, eq)`` of the query among the group's merged keys (see :func:`finish`)."""
    a, b, qh = window(row, crow, qp, ql)
    if a < 0:
        return finish(row, qp, ql, qh, a, b, a)
    heads, _, _ = merged(row)
    return finish(row, qp, ql, qh, a, b, heads_bound(heads, qh, a, b))


_PREFETCH_ALL = 16  # windows up to this many keys are prefetched whole


@njit(cache=True, nogil=True, inline="always")
def prefetch_window(heads, offs, vit, a, b) -> None:
    """Start loading what a search of ``[a, b)`` reads (heads, offsets, value slots), so that
    the misses overlap instead of following one another as a binary search's do; of a large
    window, the probes of the first levels."""
    if b - a <= _PREFETCH_ALL:
        for i in range(a, b + 8, 8):
            prefetch(heads, min(i, heads.shape[0] - 1))
            prefetch(offs, i)
            prefetch_address(vit + 8 * i)
    else:
        step = (b - a) >> 3
        for i in range(a + step, b, step):
            prefetch(heads, i)


_WHOLE = 256  # a lookup loads a window of up to this many entries whole
_NEAR_SLOTS = 32  # and the offsets and value slots of those this close to the prediction


@njit(cache=True, nogil=True, inline="always")
def prefetch_entries(heads, offs, vit, a, b, p) -> None:
    """Start loading every line of the heads of the window ``[a, b)``, and of the offsets
    and value slots of its entries within ``_NEAR_SLOTS`` of the prediction ``p`` (most
    answers lie there: the error bounds are the worst case, and loading every slot would
    evict more of the caller's lines than it saves)."""
    last = heads.shape[0] - 1
    for i in range(a, b + 8, 8):
        prefetch(heads, min(i, last))
    c = min(max(p, a), b - 1)
    for i in range(max(a, c - _NEAR_SLOTS), min(b, c + _NEAR_SLOTS) + 8, 8):
        prefetch(offs, min(i, last + 1))
        prefetch_address(vit + 8 * i)


@njit(cache=True, nogil=True)
def merged_find(row, crow, qp, ql) -> int:
    """Position of the query among the group's merged keys, or -1.

    One query alone waits for each miss of its search in turn, so the search's lines are
    loaded together first: a window of up to ``_WHOLE`` entries (most groups') whole, its
    heads and the offsets and value slots nearest the prediction (:func:`prefetch_entries`),
    so that its search costs one wave of misses; of a wider window, the lines of the first
    probes (:func:`prefetch_window`: such models fit their keys badly, and loading the
    whole window cost more than it saved).  Then the value object at the heads search's
    answer is prefetched before the key compare that confirms it (that load overlaps the
    compare's misses)."""
    a, b, qh, p = predicted_window(row, crow, qp, ql)
    if a < 0:
        rr, eq = finish(row, qp, ql, qh, a, b, a)
        return exact(row, qp, ql, rr, eq)
    heads, offs, base = merged(row)
    vit = row[T_VITEMS]
    if b - a <= _WHOLE:
        prefetch_entries(heads, offs, vit, a, b, p)
    else:
        prefetch_window(heads, offs, vit, a, b)
    r = heads_bound(heads, qh, a, b)
    if r < b:
        prefetch_address(item(vit, r))
        prefetch_address(base + offs[r])
    rr, eq = finish(row, qp, ql, qh, a, b, r)
    return exact(row, qp, ql, rr, eq)


@njit(cache=True, nogil=True, inline="always")
def buffer_key(row, B, bord, j):
    """``(address, length)`` of the key of buffer entry ``j``."""
    return bytes_ptr(item(row[T_VITEMS], row[T_N] + B + bord[2 + 2 * j]))


@njit(cache=True, nogil=True)
def buffer_search(row, B, bord, qp, ql):
    """``(j, found)``: the query's lower bound among the group's buffer entries, and
    whether entry j is the query."""
    qh = head(qp, ql, row[T_RPREFIX])
    lo = 0
    hi = bord[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        h = bord[1 + 2 * mid]
        if h < qh:
            lo = mid + 1
        elif h > qh:
            hi = mid
        else:
            kp, kl = buffer_key(row, B, bord, mid)
            c = compare(kp, kl, qp, ql)
            if c < 0:
                lo = mid + 1
            elif c > 0:
                hi = mid
            else:
                return mid, True
    return lo, False


@njit(cache=True, nogil=True, inline="always")
def prefetch_value(items, i) -> None:
    """Start loading the object at slot ``i`` of a list's item array (never faults)."""
    prefetch_address(item(items, i))


@njit(cache=True, nogil=True, inline="always")
def next_pair(row, B, bord, i, j):
    """The next key of a group in key order, from merged position ``i`` and buffer entry
    ``j`` (one of them not exhausted): ``(address, length, value object, from the buffer,
    i, j)`` with i or j moved past it.  Buffered keys are never merged keys."""
    n = row[T_N]
    vit = row[T_VITEMS]
    from_buffer = i >= n
    if not from_buffer and j < bord[0]:
        _, offs, base = merged(row)
        bp, bl = buffer_key(row, B, bord, j)
        from_buffer = key_cmp(offs, base, i, bp, bl) > 0
    if from_buffer:
        kp, kl = buffer_key(row, B, bord, j)
        return kp, kl, item(vit, n + bord[2 + 2 * j]), True, i, j + 1
    _, offs, base = merged(row)
    a = offs[i]
    return base + a, offs[i + 1] - a, item(vit, i), False, i + 1, j
