"""Sorting a batch of keys (an arena + offsets, see :class:`~learnedidx.index.keys.KeyBatch`)
in compiled code: the first step of a bulk load.

:func:`sort_unique` orders the keys bytewise (a shorter key before any key it is a prefix of)
and keeps one index per distinct key, the last occurrence's, so that loading the batch
has last-write-wins semantics.  It is an MSD radix sort over *digits* of 8 bytes: the 7
key bytes from the current depth, big-endian, and a last byte saying how many of them the
key has (0..7, or 8 when it goes on past them).  Digits order the keys exactly as their
bytes do up to the depth + 7; equal digits with a last byte below 8 are equal keys; equal
digits with 8 are sorted further from the depth + 7.  Each range is sorted by LSD radix
passes over only the bits in which its digits differ (a long common prefix costs one scan
per 7 bytes, no pass), small ranges by insertion sort.  Everything works on an index array, never
moving key bytes; :func:`gather` then writes the sorted arena once.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from learnedidx.index import parallel
from learnedidx.index.kernels import compare_key
from learnedidx.native import copy_from_address, load_be64, prefetch

_STEP = 7  # key bytes per digit (the eighth byte of a digit is the count)
_SMALL = 24  # ranges up to this size: insertion sort on the digits
_RADIX_BITS = 11  # digit bits per LSD pass over large ranges
_MID = 2048  # ranges below this size sort with 8-bit passes (smaller histograms)
_AHEAD = 16  # keys prefetched ahead of the one being read


@njit(cache=True, nogil=True, inline="always")
def _digit(arena, offsets, i, d) -> np.int64:
    """Key i's digit at depth d (module docstring), as the bits of a uint64."""
    a = offsets[i] + d
    rest = offsets[i + 1] - a
    if rest >= 8:
        return np.int64(load_be64(arena, a)) & np.int64(-256) | np.int64(8)
    h = np.int64(0)
    for j in range(_STEP):
        h = (h << np.int64(8)) | (np.int64(arena[a + j]) if j < rest else np.int64(0))
    return (h << np.int64(8)) | np.int64(rest if rest > 0 else 0)


@njit(cache=True, nogil=True)
def _digits(arena, offsets, idx, dig, lo, hi, d):
    """``dig[t]`` = digit at depth d of key ``idx[t]``, for t in [lo, hi).  Below the first
    level the keys are visited in no order of the arena: the loads of the keys a few steps
    ahead are started early so that their cache misses overlap."""
    for t in range(lo, hi):
        if t + _AHEAD < hi:
            prefetch(offsets, idx[t + _AHEAD])
        if t + _AHEAD // 2 < hi:
            prefetch(arena, offsets[idx[t + _AHEAD // 2]] + d)
        dig[t] = _digit(arena, offsets, idx[t], d)


@njit(cache=True, nogil=True, inline="always")
def _ult(a, b) -> bool:
    """Unsigned a < b for the int64 bit patterns of two digits."""
    return (a ^ np.int64(-(1 << 63))) < (b ^ np.int64(-(1 << 63)))


@njit(cache=True, nogil=True)
def _radix(dig, idx, tdig, tidx, lo, hi):
    """Sort ``dig[lo:hi]`` (unsigned) with ``idx`` alongside by LSD passes over the bits in
    which the digits differ; ``tdig``/``tidx`` are scratch of the same size.  (``>>`` is
    arithmetic on int64: where a pass reaches past bit 63 its extra bits copy bit 63, which
    keeps the unsigned order.)"""
    x0 = dig[lo]
    diff = np.int64(0)
    for t in range(lo + 1, hi):
        diff |= dig[t] ^ x0
    if diff == 0:
        return
    low = 0
    while (diff >> np.int64(low)) & np.int64(1) == 0:
        low += 1
    high = 63
    while (diff >> np.int64(high)) & np.int64(1) == 0:
        high -= 1
    bits = _RADIX_BITS if hi - lo >= _MID else 8
    size = 1 << bits
    mask = np.int64(size - 1)
    count = np.empty(size + 1, np.int64)
    src_d, src_i, dst_d, dst_i = dig, idx, tdig, tidx
    shift = low
    while shift <= high:
        count[:] = 0
        for t in range(lo, hi):
            count[((src_d[t] >> np.int64(shift)) & mask) + 1] += 1
        pos = lo
        for c in range(size):
            pos, count[c] = pos + count[c + 1], pos
        for t in range(lo, hi):
            c = (src_d[t] >> np.int64(shift)) & mask
            p = count[c]
            count[c] = p + 1
            dst_d[p] = src_d[t]
            dst_i[p] = src_i[t]
        src_d, src_i, dst_d, dst_i = dst_d, dst_i, src_d, src_i
        shift += bits
    if src_d is not dig:  # an odd number of passes: the result is in the scratch arrays
        dig[lo:hi] = src_d[lo:hi]
        idx[lo:hi] = src_i[lo:hi]


@njit(cache=True, nogil=True)
def _insertion(dig, idx, lo, hi):
    """Sort ``dig[lo:hi]`` (unsigned) with ``idx`` alongside."""
    for t in range(lo + 1, hi):
        x, j = dig[t], idx[t]
        u = t
        while u > lo and _ult(x, dig[u - 1]):
            dig[u] = dig[u - 1]
            idx[u] = idx[u - 1]
            u -= 1
        dig[u] = x
        idx[u] = j


@njit(cache=True, nogil=True)
def _level(arena, offsets, idx, dig, tidx, tdig, same, lo, hi, d, deeper):
    """Sort keys ``idx[lo:hi]``, which share their first d bytes, by their digits at
    depth d; mark runs of equal keys in ``same``, and append the runs that need sorting
    from depth d + 7 to ``deeper``."""
    _digits(arena, offsets, idx, dig, lo, hi, d)
    if hi - lo <= _SMALL:
        _insertion(dig, idx, lo, hi)
    else:
        _radix(dig, idx, tdig, tidx, lo, hi)
    a = lo
    while a < hi:  # runs of equal digits: equal keys, or keys to sort deeper
        b = a + 1
        while b < hi and dig[b] == dig[a]:
            b += 1
        if b - a > 1:
            if dig[a] & np.int64(255) == 8:
                deeper.append((a, b, d + _STEP))
            else:
                same[a + 1:b] = True
        a = b


@njit(cache=True, nogil=True)
def _finish(arena, offsets, idx, dig, tidx, tdig, same, ranges, r0, r1):
    """Sort ranges ``ranges[r0:r1]`` (rows lo, hi, depth) completely, depth first."""
    for r in range(r0, r1):
        stack = [(ranges[r, 0], ranges[r, 1], ranges[r, 2])]
        while stack:
            lo, hi, d = stack.pop()
            _level(arena, offsets, idx, dig, tidx, tdig, same, lo, hi, d, stack)


@njit(cache=True, nogil=True)
def _split(arena, offsets, idx, dig, tidx, tdig, same, most):
    """Sort by levels, largest range first, until no pending range holds more than
    ``most`` keys; the pending ranges (rows lo, hi, depth)."""
    n = idx.shape[0]
    pending = [(0, n, 0)]
    while pending:
        big = 0
        for r in range(len(pending)):
            if pending[r][1] - pending[r][0] > pending[big][1] - pending[big][0]:
                big = r
        lo, hi, d = pending[big]
        if hi - lo <= most:
            break
        pending[big] = pending[-1]
        pending.pop()
        _level(arena, offsets, idx, dig, tidx, tdig, same, lo, hi, d, pending)
    out = np.empty((len(pending), 3), np.int64)
    for r in range(len(pending)):
        out[r, 0], out[r, 1], out[r, 2] = pending[r]
    return out


@njit(cache=True, nogil=True)
def _last_of_runs(idx, same):
    """One index per run of equal keys: the largest (its last occurrence)."""
    n = idx.shape[0]
    out = np.empty(n, np.int64)
    m = 0
    t = 0
    while t < n:
        best = idx[t]
        t += 1
        while t < n and same[t]:
            best = max(best, idx[t])
            t += 1
        out[m] = best
        m += 1
    return out[:m]


_PARTS = 64  # slices of the sort's pending ranges handed to the cores


def sort_unique(arena: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Indexes of the keys of ``arena``/``offsets`` in bytewise order, one per distinct
    key: the index of its last occurrence (so a load keeps the last value written).

    The first levels split the keys into ranges of at most 1/64th of them, which the
    cores then finish independently."""
    n = len(offsets) - 1
    idx = np.arange(n, dtype=np.int64)
    dig = np.empty(n, np.int64)
    tidx = np.empty(n, np.int64)
    tdig = np.empty(n, np.int64)
    same = np.zeros(n, np.bool_)  # same[t]: the key at t equals the one at t - 1
    arrays = (arena, offsets, idx, dig, tidx, tdig, same)
    if n:
        ranges = _split(*arrays, max(n // _PARTS, _MID))
        ranges = ranges[np.random.default_rng(0).permutation(len(ranges))]  # mix large and small
        parallel.over_range(lambda r0, r1: _finish(*arrays, ranges, r0, r1), len(ranges), _PARTS)
    return _last_of_runs(idx, same)


@njit(cache=True, nogil=True)
def _lengths(offsets, perm, out_off, lo, hi):
    for t in range(lo, hi):
        if t + _AHEAD < hi:
            prefetch(offsets, perm[t + _AHEAD])
        out_off[t + 1] = offsets[perm[t] + 1] - offsets[perm[t]]


@njit(cache=True, nogil=True)
def _copy(arena, offsets, perm, out, out_off, lo, hi):
    base = arena.ctypes.data
    for t in range(lo, hi):
        if t + _AHEAD < hi:
            prefetch(offsets, perm[t + _AHEAD])
        if t + _AHEAD // 2 < hi:
            prefetch(arena, offsets[perm[t + _AHEAD // 2]])
        copy_from_address(out, out_off[t], base + offsets[perm[t]], out_off[t + 1] - out_off[t])


def gather(arena: np.ndarray, offsets: np.ndarray, perm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(arena, offsets)`` of keys ``perm[0], perm[1], ...`` of the given batch."""
    m = len(perm)
    out_off = np.zeros(m + 1, np.int64)
    parallel.over_range(lambda lo, hi: _lengths(offsets, perm, out_off, lo, hi), m, parallel.CORES)
    np.cumsum(out_off, out=out_off)
    out = np.empty(int(out_off[-1]), np.uint8)
    parallel.over_range(lambda lo, hi: _copy(arena, offsets, perm, out, out_off, lo, hi), m, parallel.CORES)
    return out, out_off


@njit(cache=True, nogil=True)
def is_sorted_unique(arena, offsets) -> bool:
    """Whether the keys of the batch are in strictly increasing bytewise order."""
    for i in range(1, offsets.shape[0] - 1):
        if compare_key(arena, offsets, i - 1, arena[offsets[i]:offsets[i + 1]]) >= 0:
            return False
    return True
