"""The store's operations on a live index, each one compiled call that holds the GIL.

Every read and every write of the index (:mod:`learnedidx.index.layout`) is one of these
calls, and none releases the GIL: so each sees one consistent state and leaves one, and no
thread can free or change what another is reading.  That is what makes readers lock-free
and every result an image of one moment (docs/store.md, "Thread safety").  Keys and values
come in as Python objects (:data:`~learnedidx.native.pyref`) and are read where they lie;
results go out as Python objects: the stored value objects themselves, and keys of scan
results made as ``bytes`` (making ``bytes`` runs no Python code, so nothing can run in the
middle of a call; result lists are made by the caller, before the call).

Writes answer a code (``C_*``, with the group id above :data:`GROUP_SHIFT`): most writes are
done in the call; a write that needs the caller first (a full insert buffer to fold in, a
group to copy because a pinned view still reads it) changes nothing and says so.
"""
from __future__ import annotations

import functools

import numpy as np

from numba import njit, types

from learnedidx.index.layout import (
    BYTES_DATA, D_B, D_BYTES_NEW, D_BYTES_TYPE, D_DECREF, D_HOLD, D_INCREF, D_MAXLEN, D_MISSING, D_NONE, D_NROOT,
    D_PINGEN, D_PINS, D_SIZE, D_TOMB, LIST_ITEMS, OB_SIZE, OB_TYPE, T_BORD, T_GEN, T_N, T_NTOMB, T_RPREFIX,
    T_VITEMS, buffer, bytes_ptr, coefs, compare, desc, head, item, merged, root, table)
from learnedidx.index.pyobjects import replace_item
from learnedidx.index.search import (
    buffer_search, exact, find_root, find_root_near, finish, heads_bound, merged_find, merged_lower_bound, next_pair,
    prefetch_window, radix_order, window)
from learnedidx.native import (
    address_of, as_ref, call_with_address, call_with_two, copy_from_address, load_word, move_bytes,
    prefetch_address, pyref, store_word)

# Write codes (low byte), the group id above GROUP_SHIFT.
(C_UPDATED, C_INSERTED, C_INSERTED_FULL, C_NEED_COW, C_FULL, C_BAD_KEY, C_BAD_VALUE, C_NOT_FOUND, C_DELETED,
 C_HELD) = range(10)
GROUP_SHIFT = 8


@njit(cache=True, nogil=True)
def _query(d, k):
    """``(address, length)`` of key object ``k``, length -1 unless it is exactly ``bytes``
    of 1..max_key_len bytes."""
    if load_word(k + OB_TYPE) != d[D_BYTES_TYPE]:
        return 0, -1
    qp, ql = bytes_ptr(k)
    if ql < 1 or ql > d[D_MAXLEN]:
        return 0, -1
    return qp, ql


@njit(cache=True, nogil=True)
def _lookup(d, qp, ql) -> int:
    """Address of the value object stored under the query (maybe TOMB), or 0."""
    g = root(d)[2][find_root(d, qp, ql)]
    return _lookup_at(d, g, merged_find(table(d)[g], coefs(d)[g], qp, ql), qp, ql)


@njit(cache=True, nogil=True, inline="always")
def _lookup_at(d, g, i, qp, ql) -> int:
    """:func:`_lookup` of a query in group ``g`` at merged position ``i`` (-1: not there)."""
    row = table(d)[g]
    vit = row[T_VITEMS]
    if i >= 0:
        return item(vit, i)
    B = d[D_B]
    bord = buffer(row, B)
    if bord[0] == 0:
        return 0
    j, found = buffer_search(row, B, bord, qp, ql)
    return item(vit, row[T_N] + bord[2 + 2 * j]) if found else 0


@njit(cache=True)
def value_of(daddr, k) -> int:
    """Address of the value object stored under key object ``k`` (no reference taken), 0
    when it is absent or ``k`` is not exactly ``bytes`` of a valid length."""
    d = desc(daddr)
    qp, ql = _query(d, k)
    if ql > 0:
        v = _lookup(d, qp, ql)
        if v != 0 and v != d[D_TOMB]:
            return v
    return 0


@njit(cache=True)
def get(daddr, key):
    """The value object of ``key``, or the descriptor's MISSING object when it is absent
    or is not exactly ``bytes`` of a valid length."""
    d = desc(daddr)
    res = value_of(daddr, address_of(key))
    if res == 0:
        res = d[D_MISSING]
    call_with_address(d[D_INCREF], res)
    return as_ref(res)


@njit(cache=True, nogil=True)
def _cow_needed(d, row) -> bool:
    """Whether a pinned view may still read this group's value list and buffer."""
    return d[D_PINS] > 0 and row[T_GEN] < d[D_PINGEN]


@njit(cache=True, nogil=True)
def _upsert(d, k, qp, ql, v) -> int:
    """Put value object ``v`` under the query (key object ``k``); a write code."""
    g = root(d)[2][find_root(d, qp, ql)]
    row = table(d)[g]
    prefetch_address(row[T_BORD])  # the buffer's count and first entries
    return _upsert_at(d, k, qp, ql, v, g, merged_find(row, coefs(d)[g], qp, ql))


@njit(cache=True, nogil=True)
def _upsert_at(d, k, qp, ql, v, g, i) -> int:
    """:func:`_upsert` of a query in group ``g`` at merged position ``i`` (-1: not there);
    C_BAD_VALUE, with nothing written, unless ``v`` is exactly ``bytes``."""
    if load_word(v + OB_TYPE) != d[D_BYTES_TYPE]:
        return C_BAD_VALUE
    row = table(d)[g]
    gbits = g << GROUP_SHIFT
    inc, dec, tomb = d[D_INCREF], d[D_DECREF], d[D_TOMB]
    vit = row[T_VITEMS]
    B = d[D_B]
    bord = buffer(row, B)
    if i >= 0:
        if _cow_needed(d, row):
            return C_NEED_COW | gbits
        old = item(vit, i)
        replace_item(vit, i, v, inc, dec)
        if old == tomb:
            row[T_NTOMB] -= 1
            d[D_SIZE] += 1
            return C_INSERTED | gbits
        return C_UPDATED | gbits
    n = row[T_N]
    cnt = bord[0]
    prefetch_address(vit + 8 * (n + cnt))  # the slot a new key's value would take
    j, found = buffer_search(row, B, bord, qp, ql)
    if found:
        if _cow_needed(d, row):
            return C_NEED_COW | gbits
        s = n + bord[2 + 2 * j]
        old = item(vit, s)
        replace_item(vit, s, v, inc, dec)
        if old == tomb:
            d[D_SIZE] += 1
            return C_INSERTED | gbits
        return C_UPDATED | gbits
    if cnt >= B:
        return C_FULL | gbits
    if _cow_needed(d, row):
        return C_NEED_COW | gbits
    slot = cnt  # entries stay until the buffer is folded in: slots are taken in turn
    replace_item(vit, n + slot, v, inc, dec)
    replace_item(vit, n + B + slot, k, inc, dec)
    # entries j.. move up by one (bord[cnt] is in bounds: cnt < B)
    move_bytes(bord.ctypes.data + 8 * (3 + 2 * j), bord.ctypes.data + 8 * (1 + 2 * j), 16 * (cnt - j))
    bord[1 + 2 * j] = head(qp, ql, row[T_RPREFIX])
    bord[2 + 2 * j] = slot
    bord[0] = cnt + 1
    d[D_SIZE] += 1
    return (C_INSERTED_FULL if cnt + 1 >= B else C_INSERTED) | gbits


@njit(cache=True)
def upsert_objects(daddr, k, v) -> int:
    """Insert or update key object ``k`` with value object ``v`` (both exactly ``bytes``);
    a write code."""
    d = desc(daddr)
    # The value object lies anywhere (its count goes up): its load overlaps the search, and
    # its type is checked once the search is done.
    prefetch_address(v)
    qp, ql = _query(d, k)
    if ql < 0:
        return C_BAD_KEY
    return _upsert(d, k, qp, ql, v)


@njit(cache=True)
def upsert(daddr, key, value) -> int:
    """:func:`upsert_objects` of Python objects."""
    return upsert_objects(daddr, address_of(key), address_of(value))


@njit(cache=True)
def put_objects(daddr, k, v) -> int:
    """:func:`upsert_objects` for a caller that does not hold the writer lock: 0 when the
    write is done, C_INSERTED_FULL (and the group) when it is done and filled its group's
    buffer, else its code with nothing done (C_HELD: the lock is held, or every write of
    this store is logged first).  Holding the GIL, the call is one whole write that no
    holder of the lock is in the middle of (see :class:`~learnedidx.index.live.WriterLock`)."""
    if desc(daddr)[D_HOLD] != 0:
        return C_HELD
    c = upsert_objects(daddr, k, v)
    return 0 if (c & 0xFF) <= C_INSERTED else c


@njit(cache=True)
def put(daddr, key, value) -> int:
    """:func:`put_objects` of Python objects."""
    return put_objects(daddr, address_of(key), address_of(value))


@njit(cache=True)
def delete(daddr, key) -> int:
    """Delete ``key`` (its value becomes TOMB); C_DELETED, C_NOT_FOUND or C_NEED_COW."""
    d = desc(daddr)
    qp, ql = _query(d, address_of(key))
    if ql < 0:
        return C_BAD_KEY
    g = root(d)[2][find_root(d, qp, ql)]
    row = table(d)[g]
    gbits = g << GROUP_SHIFT
    vit = row[T_VITEMS]
    i = merged_find(row, coefs(d)[g], qp, ql)
    in_merged = i >= 0
    if not in_merged:
        B = d[D_B]
        bord = buffer(row, B)
        j, found = buffer_search(row, B, bord, qp, ql)
        if not found:
            return C_NOT_FOUND | gbits
        i = row[T_N] + bord[2 + 2 * j]
    if item(vit, i) == d[D_TOMB]:
        return C_NOT_FOUND | gbits
    if _cow_needed(d, row):
        return C_NEED_COW | gbits
    replace_item(vit, i, d[D_TOMB], d[D_INCREF], d[D_DECREF])
    if in_merged:
        row[T_NTOMB] += 1
    d[D_SIZE] -= 1
    return C_DELETED | gbits


@njit(cache=True, nogil=True)
def _list(obj):
    """``(item array, size)`` of the list object at ``obj`` (read under the GIL, so that no
    other thread resizes it during the call)."""
    return load_word(obj + LIST_ITEMS), load_word(obj + OB_SIZE)


_LANES = 32  # queries in flight together in get_many


@njit(cache=True, nogil=True, inline="always")
def _lane_places(tab, cf, n, qps, qls, grp, wa, wb, qhs, rs) -> None:
    """The places among their groups' merged keys of the ``n`` queries of a lane (query j:
    bytes ``qps[j]``/``qls[j]``, group ``grp[j]``), each step done for all of them before
    the next so that their misses overlap: the model's window (its lines start loading),
    the heads search (the key and value it lands on start loading), the key compare.
    ``rs[j]``: query j's merged position, or -1."""
    for j in range(n):
        g = grp[j]
        a, b, qh = window(tab[g], cf[g], qps[j], qls[j])
        wa[j], wb[j], qhs[j] = a, b, qh
        if a >= 0:
            heads, offs, _ = merged(tab[g])
            prefetch_window(heads, offs, tab[g, T_VITEMS], a, b)
    for j in range(n):
        if wa[j] >= 0:
            row = tab[grp[j]]
            heads, offs, base = merged(row)
            x = heads_bound(heads, qhs[j], wa[j], wb[j])
            rs[j] = x
            if x < wb[j]:
                prefetch_address(item(row[T_VITEMS], x))
                prefetch_address(base + offs[x])
    for j in range(n):
        row = tab[grp[j]]
        x, eq = finish(row, qps[j], qls[j], qhs[j], wa[j], wb[j], rs[j] if wa[j] >= 0 else -1)
        rs[j] = exact(row, qps[j], qls[j], x, eq)


@njit(cache=True)
def get_many(daddr, keys, out) -> int:
    """Values of the key objects of list ``keys`` into list ``out`` (as long, of Nones);
    -1, or the index of the first key that is not exactly ``bytes`` of a valid length
    (then ``out`` is incomplete).

    Keys are answered in (roughly) sorted order, so that consecutive ones share groups and
    cache lines, and ``_LANES`` at a time, each step done for all of them before the next:
    root and window (prefetching the window), the heads search (prefetching the key and
    value it lands on), the key compare, the values.  The misses of a lane's queries overlap
    where one query at a time would wait for each of its own."""
    d = desc(daddr)
    inc, dec, tomb = d[D_INCREF], d[D_DECREF], d[D_TOMB]
    kit, m = _list(keys)
    oit, mo = _list(out)
    m = min(m, mo)
    qh0 = np.empty(m, np.int64)
    for t in range(m):
        if t + 8 < m:
            prefetch_address(item(kit, t + 8))  # the key objects lie anywhere
        qp, ql = _query(d, item(kit, t))
        if ql < 0:
            return t
        qh0[t] = head(qp, ql, 0)
    order = radix_order(qh0)
    _, _, rgid = root(d)
    tab = table(d)
    cf = coefs(d)
    qps = np.empty(_LANES, np.int64)
    qls = np.empty(_LANES, np.int64)
    grp = np.empty(_LANES, np.int64)
    wa = np.empty(_LANES, np.int64)
    wb = np.empty(_LANES, np.int64)
    qhs = np.empty(_LANES, np.int64)
    rs = np.empty(_LANES, np.int64)
    r = -1
    for t0 in range(0, m, _LANES):
        n = min(m - t0, _LANES)
        for j in range(n):
            qp, ql = bytes_ptr(item(kit, order[t0 + j]))
            r = find_root_near(d, qp, ql, r)
            qps[j], qls[j], grp[j] = qp, ql, rgid[r]
        _lane_places(tab, cf, n, qps, qls, grp, wa, wb, qhs, rs)
        for j in range(n):
            v = _lookup_at(d, grp[j], rs[j], qps[j], qls[j])
            rs[j] = v
            if v != 0:
                prefetch_address(v)
        for j in range(n):
            v = rs[j]
            if v != 0 and v != tomb:
                replace_item(oit, order[t0 + j], v, inc, dec)
    return -1


_WLANES = 16  # operations of apply_many searched together


@njit(cache=True)
def apply_many(daddr, keys, values, out, start, counts) -> int:
    """Operations ``start..`` of lists ``keys``/``values`` in order: where the value is
    None, the key's value into list ``out``, else the value written under the key.  Returns
    ``(t << GROUP_SHIFT) | code``: t is the first operation not done (the batch's length
    when all are) and code says why: C_UPDATED when done, else the write code of operation t
    (C_FULL, C_NEED_COW, C_BAD_KEY, C_BAD_VALUE), or C_INSERTED_FULL when operation t - 1
    filled its group's buffer.  ``counts[0]`` is the group of a C_FULL, C_NEED_COW or
    C_INSERTED_FULL.

    ``_WLANES`` operations at a time: first each one's place among its group's merged keys
    (:func:`_lane_places`, as :func:`get_many` finds them), so that their misses overlap;
    then the operations in order, each from its place (a read sees every earlier write).
    The places hold: nothing in the call changes a group's merged keys (writes change
    values and insert buffers; a full buffer is folded in by the caller, who then calls
    again from the next operation)."""
    d = desc(daddr)
    inc, dec, tomb, none = d[D_INCREF], d[D_DECREF], d[D_TOMB], d[D_NONE]
    kit, m = _list(keys)
    vit, mv = _list(values)
    oit, mo = _list(out)
    m = min(m, mv, mo)
    _, _, rgid = root(d)
    tab = table(d)
    cf = coefs(d)
    qps = np.empty(_WLANES, np.int64)
    qls = np.empty(_WLANES, np.int64)
    grp = np.empty(_WLANES, np.int64)
    wa = np.empty(_WLANES, np.int64)
    wb = np.empty(_WLANES, np.int64)
    qhs = np.empty(_WLANES, np.int64)
    rs = np.empty(_WLANES, np.int64)
    t0 = start
    while t0 < m:
        n = min(m - t0, _WLANES)
        bad = C_UPDATED  # a bad operation ends the lane before it
        for j in range(n):
            k = item(kit, t0 + j)
            qp, ql = _query(d, k)
            v = item(vit, t0 + j)
            if ql < 0:
                bad = C_BAD_KEY
            elif v != none and load_word(v + OB_TYPE) != d[D_BYTES_TYPE]:
                bad = C_BAD_VALUE
            if bad != C_UPDATED:
                n = j
                break
            qps[j], qls[j] = qp, ql
            if v != none:
                prefetch_address(v)  # its count goes up
        for j in range(n):
            g = rgid[find_root(d, qps[j], qls[j])]
            grp[j] = g
            prefetch_address(tab[g, T_BORD])
        _lane_places(tab, cf, n, qps, qls, grp, wa, wb, qhs, rs)
        for j in range(n):
            if rs[j] < 0:  # the insert buffer's search: its middle lines
                bp = tab[grp[j], T_BORD]
                cnt = load_word(bp)
                prefetch_address(bp + 8 * (1 + 2 * (cnt >> 1)))
                prefetch_address(bp + 8 * (1 + 2 * (cnt >> 2)))
                prefetch_address(bp + 8 * (1 + 2 * ((3 * cnt) >> 2)))
        for j in range(n):
            t = t0 + j
            v = item(vit, t)
            if v == none:
                x = _lookup_at(d, grp[j], rs[j], qps[j], qls[j])
                if x != 0 and x != tomb:
                    replace_item(oit, t, x, inc, dec)
                continue
            code = _upsert_at(d, item(kit, t), qps[j], qls[j], v, grp[j], rs[j])
            op = code & 0xFF
            if op == C_INSERTED_FULL:
                counts[0] = code >> GROUP_SHIFT
                return ((t + 1) << GROUP_SHIFT) | C_INSERTED_FULL
            if op == C_FULL or op == C_NEED_COW:
                counts[0] = code >> GROUP_SHIFT
                return (t << GROUP_SHIFT) | op
        if bad != C_UPDATED:
            return ((t0 + n) << GROUP_SHIFT) | bad
        t0 += n
    return (m << GROUP_SHIFT) | C_UPDATED


@njit(cache=True)
def check_batch(daddr, keys, values, reads) -> int:
    """-1 when every item of list ``keys`` is exactly ``bytes`` of a valid length and every
    item of list ``values`` exactly ``bytes`` (or None, with ``reads``), else the first
    index where one is not (or the shorter list's length, when they differ)."""
    d = desc(daddr)
    kit, m = _list(keys)
    vit, mv = _list(values)
    for t in range(min(m, mv)):
        if _query(d, item(kit, t))[1] < 0:
            return t
        v = item(vit, t)
        if not ((reads and v == d[D_NONE]) or load_word(v + OB_TYPE) == d[D_BYTES_TYPE]):
            return t
    return -1 if m == mv else min(m, mv)


@njit(cache=True, nogil=True)
def _emit(d, outk, outv, t, kp, kl, kobj, v) -> bool:
    """Result pair t of a scan: key object ``kobj`` (0: make one from the bytes at ``kp``),
    value object ``v``.  False when making the key failed (out of memory)."""
    inc, dec = d[D_INCREF], d[D_DECREF]
    if kobj == 0:
        obj = call_with_two(d[D_BYTES_NEW], kp, kl)
        if obj == 0:
            return False
        old = item(outk, t)
        store_word(outk + 8 * t, obj)  # the new reference goes to the list
        call_with_address(dec, old)
    else:
        replace_item(outk, t, kobj, inc, dec)
    replace_item(outv, t, v, inc, dec)
    return True


@njit(cache=True, nogil=True)
def _scan(d, qp, ql, count, outk, outv, at, excl, hp, hl) -> int:
    """Up to ``count`` (key, value) pairs from the query on (after it, with ``excl``) and
    before the bound ``(hp, hl)`` (none when ``hl < 0``), into slots ``at..`` of the item
    arrays ``outk``/``outv``; the number written, or -1 when out of memory."""
    if count <= 0:
        return 0
    rhead, _, rgid = root(d)
    tab = table(d)
    cf = coefs(d)
    B = d[D_B]
    tomb = d[D_TOMB]
    r = find_root(d, qp, ql)
    g = rgid[r]
    row = tab[g]
    i, eq = merged_lower_bound(row, cf[g], qp, ql)
    bord = buffer(row, B)
    j, found = buffer_search(row, B, bord, qp, ql)
    if excl:
        if eq == -1 and i < row[T_N]:
            mp, ml = _merged_key(row, i)
            eq = 1 if compare(mp, ml, qp, ql) == 0 else 0
        if eq == 1:
            i += 1
        if found:
            j += 1
    nroot = d[D_NROOT]
    got = 0
    while got < count:
        if i >= row[T_N] and j >= bord[0]:
            r += 1
            if r >= nroot:
                break
            g = rgid[r]
            row = tab[g]
            bord = buffer(row, B)
            i = 0
            j = 0
            continue
        kp, kl, v, from_buffer, i, j = next_pair(row, B, bord, i, j)
        if hl >= 0 and compare(kp, kl, hp, hl) >= 0:
            break
        if v == tomb:
            continue
        # a buffered key is returned as its own object (BYTES_DATA bytes before its characters)
        if not _emit(d, outk, outv, at + got, kp, kl, kp - BYTES_DATA if from_buffer else 0, v):
            return -1
        got += 1
    return got


@njit(cache=True, nogil=True)
def export(daddr, state, max_pairs, max_bytes, karena, koffs, varena, voffs, fill):
    """The live (key, value) pairs of a pinned view (``daddr``) in key order from position
    ``state`` (root entry, merged position, buffer entry), as many as fit in ``max_pairs``
    pairs and ``max_bytes`` bytes (at least one): with ``fill``, their bytes into
    ``karena``/``varena`` at ``koffs``/``voffs`` and ``state`` moved past them.  Returns
    ``(pairs, key bytes, value bytes)``.

    The one operation that releases the GIL: everything a view reads stays as it is and
    alive while it is pinned (writers copy around it), and this reads bytes, no reference
    counts, so a checkpoint copies while writers go on."""
    d = desc(daddr)
    _, _, rgid = root(d)
    tab = table(d)
    B, tomb = d[D_B], d[D_TOMB]
    r, i, j = state[0], state[1], state[2]
    t = 0
    kb = 0
    vb = 0
    while r < d[D_NROOT] and t < max_pairs:
        row = tab[rgid[r]]
        bord = buffer(row, B)
        if i >= row[T_N] and j >= bord[0]:
            r += 1
            i = 0
            j = 0
            continue
        kp, kl, v, _, i2, j2 = next_pair(row, B, bord, i, j)
        if v != tomb:
            vp, vl = bytes_ptr(v)
            if t > 0 and kb + vb + kl + vl > max_bytes:
                break
            if fill:
                koffs[t] = kb
                voffs[t] = vb
                copy_from_address(karena, kb, kp, kl)
                copy_from_address(varena, vb, vp, vl)
            t += 1
            kb += kl
            vb += vl
        i, j = i2, j2
    if fill:
        koffs[t] = kb
        voffs[t] = vb
        state[0], state[1], state[2] = r, i, j
    return t, kb, vb


@njit(cache=True, nogil=True)
def _merged_key(row, i):
    _, offs, base = merged(row)
    a = offs[i]
    return base + a, offs[i + 1] - a


@njit(cache=True)
def scan(daddr, key, count, outk, outv, excl, hi) -> int:
    """Up to ``count`` pairs from ``key`` on (after it with ``excl``), before ``hi`` unless
    ``hi`` is the MISSING object, into lists ``outk``/``outv`` (of Nones, at least ``count``
    long); the number written, -1 when out of memory, -2 for a bad key."""
    d = desc(daddr)
    qp, ql = _query(d, address_of(key))
    if ql < 0:
        return -2
    h = address_of(hi)
    hp, hl = (0, -1) if h == d[D_MISSING] else bytes_ptr(h)
    kit, mk = _list(outk)
    vit, mv = _list(outv)
    return _scan(d, qp, ql, min(count, mk, mv), kit, vit, 0, excl, hp, hl)


@njit(cache=True)
def scan_many(daddr, keys, counts, outk, outv, got) -> int:
    """:func:`scan` of each key object of list ``keys`` with ``counts[t]`` pairs, one after
    another into lists ``outk``/``outv`` (of Nones, ``sum(counts)`` long); ``got[t]`` the
    pairs of scan t.  -1 when done, -2 when out of memory, else the index of a bad key."""
    d = desc(daddr)
    kit, m = _list(keys)
    okit, mk = _list(outk)
    ovit, mv = _list(outv)
    at = 0
    for t in range(min(m, counts.shape[0], got.shape[0])):
        qp, ql = _query(d, item(kit, t))
        if ql < 0:
            return t
        c = _scan(d, qp, ql, max(min(counts[t], mk - at, mv - at), 0), okit, ovit, at, False, 0, -1)
        if c < 0:
            return -2
        got[t] = c
        at += counts[t]
    return -1


_I = types.int64
SIGNATURES = {
    "get": (_I, pyref),
    "upsert": (_I, pyref, pyref),
    "put": (_I, pyref, pyref),
    "delete": (_I, pyref),
    "get_many": (_I, _I, _I),
    "apply_many": (_I, _I, _I, _I, _I, types.int64[::1]),
    "scan": (_I, pyref, _I, _I, _I, types.boolean, pyref),
    "scan_many": (_I, _I, types.int64[::1], _I, _I, types.int64[::1]),
    "export": (_I, types.int64[::1], _I, _I, types.uint8[::1], types.int64[::1], types.uint8[::1], types.int64[::1],
               types.boolean),
    "check_batch": (_I, _I, _I, types.boolean),
}


@functools.cache
def entry_points() -> dict:
    """The compiled entry point of each operation above, for the exact argument types of
    :data:`SIGNATURES` (skipping Numba's per-call dispatch); compiled or loaded from the
    cache on first use."""
    out = {}
    for name, sig in SIGNATURES.items():
        disp = globals()[name]
        disp.compile(sig)
        out[name] = disp.overloads[sig].entry_point
    return out

