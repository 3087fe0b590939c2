"""Kernels that change a live index's structure: folding a group's insert buffer into its
merged keys, splitting a group, copying a group that a pinned view still reads, publishing
a retrained model, and growing the arrays.

Each builds what it can in arrays the caller made (nothing here allocates Python objects)
and then *publishes*: it rewrites table rows, root entries and descriptor slots in one call
holding the GIL, so that every read sees the index before or after, never between
(:mod:`learnedidx.index.ops`).  Group state that readers may still hold (old key arrays,
value lists) is never changed, only replaced.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from numba import carray

from learnedidx.index.layout import (
    D_B, D_DECREF, D_INCREF, D_NROOT, D_PINGEN, D_PINS, D_RCAP, D_RGID, D_RHEAD, D_RPIV, D_TOMB, LIST_ITEMS, T_BORD,
    T_BYTES, T_ERRHI, T_ERRLO, T_FEAT,
    ROW_COLS, T_GEN, T_HEADS, T_HPREFIX, T_MPREFIX, T_N, T_NTOMB, T_OFFS, T_P0, T_P1, T_RPREFIX, T_VITEMS, buffer, bytes_ptr,
    coefs, common_prefix, compare, desc, f64_at, head, i64_at, item, merged, root, table, u8_at)
from learnedidx.index.pyobjects import move_item
from learnedidx.index.search import buffer_key, lower_bound_h, model_error, predict, sample_root
from learnedidx.native import copy_from_address, load_word, prefetch_address


@njit(cache=True)
def foldin_size(daddr, g):
    """``(keys, key bytes, inserts)`` of group ``g`` once its buffer is folded in: live
    merged keys and live buffered keys, their bytes, and how many of them were buffered."""
    d = desc(daddr)
    row = table(d)[g]
    B, tomb = d[D_B], d[D_TOMB]
    n = row[T_N]
    _, offs, _ = merged(row)
    vit = row[T_VITEMS]
    keys = n
    nbytes = offs[n] - offs[0] if n > 0 else 0
    if row[T_NTOMB] > 0:
        keys = 0
        nbytes = 0
        for i in range(n):
            if item(vit, i) != tomb:
                keys += 1
                nbytes += offs[i + 1] - offs[i]
    bord = buffer(row, B)
    ins = 0
    for j in range(bord[0]):
        if item(vit, n + bord[2 + 2 * j]) != tomb:
            ins += 1
            nbytes += buffer_key(row, B, bord, j)[1]
    return keys + ins, nbytes, ins


@njit(cache=True, nogil=True)
def compute_heads(offs, kbytes, n, plen, heads) -> None:
    """``heads[i]``: the 8 bytes of key i after the first ``plen`` (see layout)."""
    base = kbytes.ctypes.data
    for i in range(n):
        heads[i] = head(base + offs[i], offs[i + 1] - offs[i], plen)


@njit(cache=True, nogil=True)
def key_prefix(offs, kbytes, n) -> int:
    """Common prefix length of sorted keys 0..n-1 (first vs last suffices; 0 for one key)."""
    if n < 2:
        return 0
    base = kbytes.ctypes.data
    return common_prefix(base + offs[0], offs[1] - offs[0], base + offs[n - 1], offs[n] - offs[n - 1])


@njit(cache=True, nogil=True)
def set_prefix_words(row) -> None:
    """``T_P0``/``T_P1`` of a row from its first merged key (see layout)."""
    if row[T_N] > 0:
        _, offs, base = merged(row)
        p, ln = base + offs[0], offs[1] - offs[0]
        row[T_P0] = head(p, ln, 0)
        row[T_P1] = head(p, ln, 8)


@njit(cache=True)
def refresh_prefix_words(daddr, gids) -> None:
    """:func:`set_prefix_words` of groups ``gids`` (rows written from Python)."""
    tab = table(desc(daddr))
    for g in gids:
        set_prefix_words(tab[g])


@njit(cache=True, nogil=True, inline="always")
def _track(acc, k, t, c, lo, hi, slack, jitter) -> None:
    """Bounds of old merged key ``k`` (error within ``[lo, hi]``) now at position ``t``:
    ``acc[0..1]`` the least and greatest shift ``t - k`` (its new error under the same
    model is its old one plus that), ``acc[2..3]`` the least and greatest error it can have
    under the model scaled by ``c`` (its prediction ``P`` lies in ``[k - hi, k - lo + 1)``,
    the scaled one within ``slack`` of ``c * P``), widened by ``jitter``."""
    s = t - k
    acc[0] = min(acc[0], s)
    acc[1] = max(acc[1], s)
    if slack < np.inf:
        acc[2] = min(acc[2], t - np.int64(np.floor(c * (k - lo + 1) + slack)) - jitter)
        acc[3] = max(acc[3], t - np.int64(np.floor(c * (k - hi) - slack)) + jitter)


@njit(cache=True, nogil=True, inline="always")
def _copy_run(d, row, a, b, t, heads, offs, kbytes, nvit, steal, acc, c, slack):
    """Merged keys a..b-1 of a group (the live ones) to new positions from t on: their bytes
    and heads in one copy each where no key of the run was deleted, their values moved
    (``steal``, see :func:`~learnedidx.index.pyobjects.move_item`) or referenced again;
    their bounds into ``acc`` (:func:`_track`).  Returns the new t and the keys dropped."""
    oheads, ooffs, obase = merged(row)
    vit = row[T_VITEMS]
    inc, dec, tomb = d[D_INCREF], d[D_DECREF], d[D_TOMB]
    lo, hi = row[T_ERRLO], row[T_ERRHI]
    if row[T_NTOMB] == 0 and b > a:
        base = ooffs[a]
        copy_from_address(kbytes, offs[t], obase + base, ooffs[b] - base)
        shift = offs[t] - base
        for k in range(a, b):
            offs[t + 1 + k - a] = ooffs[k + 1] + shift
            heads[t + k - a] = oheads[k]
            move_item(vit, k, nvit, t + k - a, steal, inc, dec)
        # The shift is the same for the whole run, and a scaled bound is linear in k but
        # for its floor: the run's ends, widened by one, bound every key between.
        _track(acc, a, t, c, lo, hi, slack, 1)
        _track(acc, b - 1, t + b - 1 - a, c, lo, hi, slack, 1)
        return t + b - a, 0
    dropped = 0
    for k in range(a, b):
        v = item(vit, k)
        if v == tomb:
            dropped += 1
            continue
        kl = ooffs[k + 1] - ooffs[k]
        copy_from_address(kbytes, offs[t], obase + ooffs[k], kl)
        offs[t + 1] = offs[t] + kl
        heads[t] = oheads[k]
        move_item(vit, k, nvit, t, steal, inc, dec)
        _track(acc, k, t, c, lo, hi, slack, 0)
        t += 1
    return t, dropped


_BIG = np.int64(1) << 62
_AHEAD = 8  # buffered keys a fold-in prefetches ahead


@njit(cache=True, nogil=True)
def _scale_slack(crow, feat, c) -> float:
    """How far the model scaled by ``c`` (each coefficient times ``c``, rounded) can predict
    from ``c`` times the model's own prediction, for any key: the rounding of both sums of
    ``feat + 1`` terms (bytes at most 255) and of the scaled coefficients, with a margin
    of one for the bound's own arithmetic.  Infinite (no scaling) for a model too large or
    not finite."""
    mag = abs(crow[0])
    for j in range(feat):
        mag += 255.0 * abs(crow[1 + j])
    s = 1.0 + 3.0 * (feat + 2) * 2.0 ** -53 * c * mag
    return s if s < 4.0 else np.inf  # NaN compares false: not scaled


@njit(cache=True)
def foldin(daddr, g, heads, offs, kbytes, vals_list, bord_new, newpos):
    """Fold group ``g``'s buffer into its merged keys: the sorted union of its live merged
    and live buffered keys goes to ``heads``/``offs``/``kbytes`` (sized by
    :func:`foldin_size`), their values to the list at address ``vals_list`` (of Nones),
    the new positions of the buffered keys to ``newpos``; then the group reads them.

    Runs of merged keys between buffered ones are copied whole, and the values move to the
    new list without touching them when no pinned view may read the old one.  No key's
    prediction is computed again but the buffered ones': the group keeps its model, or
    that model scaled by the group's growth (``m / n``, so that it spreads over the new
    positions), whichever gives the narrower error bounds; both are derived exactly from
    the old bounds and each key's shift (:func:`_track`).  Keys inserted at random shift
    about in proportion to their position, which the scaled model follows; a retrain makes
    the bounds tight again.  Returns ``(deleted merged keys dropped, widest key length)``."""
    d = desc(daddr)
    row = table(d)[g]
    B, tomb = d[D_B], d[D_TOMB]
    inc, dec = d[D_INCREF], d[D_DECREF]
    n = row[T_N]
    oheads, ooffs, obase = merged(row)
    plen = row[T_HPREFIX]
    vit = row[T_VITEMS]
    bord = buffer(row, B)
    nvit = load_word(vals_list + LIST_ITEMS)
    crow = coefs(d)[g]
    mprefix, feat = row[T_MPREFIX], row[T_FEAT]
    steal = not (d[D_PINS] > 0 and row[T_GEN] < d[D_PINGEN])  # no view reads the old list
    offs[0] = 0
    t = 0
    a = 0  # merged keys before a are copied
    ins = 0
    dropped = 0
    m = heads.shape[0]
    c = m / n if n > 0 else 1.0
    slack = _scale_slack(crow, feat, c) if n > 0 else np.inf
    scaled = np.empty(feat + 1)
    for jj in range(feat + 1):
        scaled[jj] = c * crow[jj]
    acc = np.array([_BIG, -_BIG, _BIG, -_BIG], np.int64)
    # Views without a reference count of the arrays this call fills (the caller holds them,
    # acc and scaled are read at the end): handing them to the code inlined per run and per
    # key would otherwise count a reference up and down each time (atomic operations).
    heads_v = carray(i64_at(heads.ctypes.data), heads.shape[0])
    offs_v = carray(i64_at(offs.ctypes.data), offs.shape[0])
    kb_v = carray(u8_at(kbytes.ctypes.data), kbytes.shape[0])
    acc_v = carray(i64_at(acc.ctypes.data), 4)
    scaled_v = carray(f64_at(scaled.ctypes.data), feat + 1)
    blo, bhi, slo, shi = _BIG, -_BIG, _BIG, -_BIG  # the buffered keys' errors: model, scaled
    cnt = bord[0]
    for j in range(cnt):
        if j + _AHEAD < cnt:  # the key objects lie anywhere: start loading one a few keys ahead
            prefetch_address(item(vit, n + B + bord[2 + 2 * (j + _AHEAD)]))
        v = item(vit, n + bord[2 + 2 * j])
        if v == tomb:
            continue
        kp, kl = buffer_key(row, B, bord, j)
        # Where it goes among the merged keys: heads first when it has their prefix.
        if n == 0:
            b = 0
        elif kl < plen or compare(obase + ooffs[0], plen, kp, plen) != 0:
            b = a if compare(obase + ooffs[0], ooffs[1] - ooffs[0], kp, kl) > 0 else n
        else:
            b = lower_bound_h(oheads, ooffs, obase, kp, kl, head(kp, kl, plen), a, n)
        t, dr = _copy_run(d, row, a, b, t, heads_v, offs_v, kb_v, nvit, steal, acc_v, c, slack)
        dropped += dr
        a = b
        copy_from_address(kbytes, offs[t], kp, kl)
        offs[t + 1] = offs[t] + kl
        move_item(vit, n + bord[2 + 2 * j], nvit, t, steal, inc, dec)
        newpos[ins] = t
        ins += 1
        e = t - np.int64(np.floor(predict(kp, kl, mprefix, feat, crow)))
        blo, bhi = min(blo, e), max(bhi, e)
        if slack < np.inf:
            e = t - np.int64(np.floor(predict(kp, kl, mprefix, feat, scaled_v)))
            slo, shi = min(slo, e), max(shi, e)
        t += 1
    t, dr = _copy_run(d, row, a, n, t, heads_v, offs_v, kb_v, nvit, steal, acc_v, c, slack)
    dropped += dr
    m = t
    newp = key_prefix(offs, kbytes, m)
    if newp != plen:
        compute_heads(offs, kbytes, m, newp, heads)
    else:
        base = kbytes.ctypes.data
        for k in range(ins):
            i = newpos[k]
            heads[i] = head(base + offs[i], offs[i + 1] - offs[i], newp)
    widest = 0
    for i in range(m):
        widest = max(widest, offs[i + 1] - offs[i])
    row[T_HEADS] = heads.ctypes.data
    row[T_OFFS] = offs.ctypes.data
    row[T_BYTES] = kbytes.ctypes.data
    row[T_N] = m
    row[T_VITEMS] = nvit
    row[T_BORD] = bord_new.ctypes.data
    row[T_HPREFIX] = newp
    set_prefix_words(row)
    lo, hi = _BIG, -_BIG  # the same model: every old key's error moves by its shift
    if acc[0] <= acc[1]:
        lo, hi = row[T_ERRLO] + acc[0], row[T_ERRHI] + acc[1]
    lo, hi = min(lo, blo), max(hi, bhi)
    if slack < np.inf:
        slo, shi = min(acc[2], slo), max(acc[3], shi)
        if shi - slo < hi - lo:
            lo, hi = slo, shi
            crow[:feat + 1] = scaled
    if lo > hi:  # no key at all
        lo, hi = 0, 0
    row[T_ERRLO] = lo
    row[T_ERRHI] = hi
    row[T_NTOMB] = 0
    row[T_GEN] = d[D_PINGEN]  # nothing pinned has seen the new list and buffer
    return dropped, widest - newp


@njit(cache=True, nogil=True)
def range_prefix(d, r) -> int:
    """Bytes shared by every key root entry ``r``'s group may hold: the common prefix of
    its pivot and the next (0 for the first group, which also holds keys before its pivot,
    and for the last)."""
    rhead, rpiv, _ = root(d)
    if r == 0 or r + 1 >= d[D_NROOT]:
        return 0
    ap, al = bytes_ptr(rpiv[r])
    bp, bl = bytes_ptr(rpiv[r + 1])
    return common_prefix(ap, al, bp, bl)


@njit(cache=True)
def publish_split(daddr, g, r, pieces, pcoef, pivots):
    """Replace group ``g`` (root entry ``r``, its buffer empty) by the groups of
    ``pieces``: row k of ``pieces`` holds a group id (the first is ``g``) and its columns
    :data:`~learnedidx.index.layout.ROW_COLS`, ``pcoef[k]`` its coefficients, ``pivots[k]`` the
    address of its pivot ``bytes`` object (``pivots[0]``: g's own).  The root gets an entry
    for each new group after ``r`` (its arrays and sample have room), and a new sample."""
    d = desc(daddr)
    tab = table(d)
    cf = coefs(d)
    k = pieces.shape[0]
    nroot = d[D_NROOT]
    cap = d[D_RCAP]  # the caller made room: nroot + k - 1 <= cap
    H = carray(i64_at(d[D_RHEAD]), cap)
    P = carray(i64_at(d[D_RPIV]), cap)
    G = carray(i64_at(d[D_RGID]), cap)
    for t in range(k):
        gid = pieces[t, 0]
        row = tab[gid]
        for c in range(ROW_COLS.shape[0]):
            row[ROW_COLS[c]] = pieces[t, 1 + c]
        set_prefix_words(row)
        row[T_NTOMB] = 0
        row[T_GEN] = d[D_PINGEN]
        cf[gid, :] = pcoef[t]
    for s in range(nroot - 1, r, -1):
        H[s + k - 1] = H[s]
        P[s + k - 1] = P[s]
        G[s + k - 1] = G[s]
    for t in range(1, k):
        pp, pl = bytes_ptr(pivots[t])
        H[r + t] = head(pp, pl, 0)
        P[r + t] = pivots[t]
        G[r + t] = pieces[t, 0]
    d[D_NROOT] = nroot + k - 1
    sample_root(d)
    for t in range(k):
        tab[pieces[t, 0], T_RPREFIX] = range_prefix(d, r + t)


@njit(cache=True)
def publish_cow(daddr, g, vals_list, bord):
    """Group ``g`` reads a copy of its value list and buffer from now on (the old ones stay
    as a pinned view saw them)."""
    d = desc(daddr)
    row = table(d)[g]
    row[T_VITEMS] = load_word(vals_list + LIST_ITEMS)
    row[T_BORD] = bord.ctypes.data
    row[T_GEN] = d[D_PINGEN]


@njit(cache=True)
def publish_model(daddr, g, coef, mprefix, feat, lo, hi, have_bounds):
    """Group ``g``'s model becomes ``coef`` over the ``feat`` bytes after ``mprefix``, with
    error bounds ``lo``/``hi`` when ``have_bounds`` (they must be exact for its keys now),
    else exact ones computed here over its merged keys."""
    d = desc(daddr)
    row = table(d)[g]
    if not have_bounds:
        _, offs, base = merged(row)
        lo, hi = model_error(offs, base, row[T_N], mprefix, feat, coef)
    cf = coefs(d)
    cf[g, :] = 0.0
    cf[g, :coef.shape[0]] = coef
    row[T_MPREFIX] = mprefix
    row[T_FEAT] = feat
    row[T_ERRLO] = lo
    row[T_ERRHI] = hi


@njit(cache=True)
def set_slots(daddr, slots, values) -> None:
    """Descriptor slots ``slots`` take ``values``, in one call (see the module docstring)."""
    d = desc(daddr)
    for t in range(slots.shape[0]):
        d[slots[t]] = values[t]


@njit(cache=True)
def publish_root(daddr) -> None:
    """The root search reads the root's arrays as they are now (see
    :func:`~learnedidx.index.search.sample_root`)."""
    sample_root(desc(daddr))


@njit(cache=True)
def root_prefix(daddr, r) -> int:
    """:func:`range_prefix` of root entry ``r``."""
    return range_prefix(desc(daddr), r)


@njit(cache=True, nogil=True)
def model_error_of(offs, kbytes, n, mprefix, feat, coef):
    """:func:`~learnedidx.index.search.model_error` over keys 0..n-1 of a key array."""
    return model_error(offs, kbytes.ctypes.data, n, mprefix, feat, coef)


@njit(cache=True, nogil=True)
def gather_keys(kbytes, offs, pos):
    """``(arena, offsets)`` of the keys at positions ``pos`` of a key array."""
    m = pos.shape[0]
    o = np.zeros(m + 1, np.int64)
    for t in range(m):
        o[t + 1] = o[t] + offs[pos[t] + 1] - offs[pos[t]]
    arena = np.empty(o[m], np.uint8)
    base = kbytes.ctypes.data
    for t in range(m):
        copy_from_address(arena, o[t], base + offs[pos[t]], o[t + 1] - o[t])
    return arena, o


@njit(cache=True)
def move_values(daddr, src_list, a, b, dst_list, steal) -> None:
    """Items ``a..b-1`` of list ``src_list`` into the first slots of the fresh list
    ``dst_list`` (holding None), moved when ``steal`` (see
    :func:`~learnedidx.index.pyobjects.move_item`)."""
    d = desc(daddr)
    src = load_word(src_list + LIST_ITEMS)
    dst = load_word(dst_list + LIST_ITEMS)
    inc, dec = d[D_INCREF], d[D_DECREF]
    for k in range(a, b):
        move_item(src, k, dst, k - a, steal, inc, dec)
