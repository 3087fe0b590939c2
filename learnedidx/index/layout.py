"""Where a live index lives in memory, as compiled code reads it.

Everything a kernel needs is reached from one int64 array, the *descriptor*, passed by its
address (Numba unboxes an int far faster than a structure of arrays).  It holds the
addresses of:

* the **group table** ``tab`` (int64, one row per group id, columns ``T_*``) and the
  **coefficients** ``coef`` (float64, one row per group id: the model's bias then one
  weight per feature byte);
* the **root**: the groups in key order, as three arrays ``rhead`` (the first 8 bytes of
  each group's pivot key, order-preserving), ``rpiv`` (the pivot ``bytes`` object's
  address) and ``rgid`` (its group id).  Group ``rgid[r]`` holds the keys from pivot ``r``
  (inclusive; the first group also everything before it) to pivot ``r + 1`` (exclusive).
  The root's **sample** ``rsamp`` lays ``rhead`` out for the root search as a static tree
  of 16-way nodes (:func:`sample_size`; built by
  :func:`~learnedidx.index.search.sample_root` whenever the root changes).

A group's **merged keys** are ``n`` sorted keys in three arrays that never change once
published: ``heads`` (int64, the 8 bytes of each key after the group's common prefix
``T_HPREFIX``, order-preserving), ``offs`` (int64, ``n + 1`` offsets) and the key bytes at
``T_BYTES + offs[i] .. T_BYTES + offs[i + 1]``.  Its **values** are one Python list of
``n + 2B`` references (``B`` = the buffer capacity) that is never resized: the value of
merged key ``i`` at ``i`` (:data:`TOMB` once deleted), then ``B`` values of buffered keys,
then the ``B`` buffered key objects themselves.  Its **insert buffer** ``bord`` (int64,
``1 + 2B``) counts its entries in ``bord[0]`` and lists them in key order as pairs
``(head, slot)``: the head of the key after the range prefix ``T_RPREFIX`` (shared by every
key between the group's pivot and the next), and the slot of its value and key object.
``T_P0``/``T_P1`` hold the heads of the first merged key at bytes 0 and 8, so that a lookup
checks the common prefix ``T_HPREFIX`` of the merged keys without reading one.
The buffer holds keys that are not merged keys; updates and deletes of merged keys replace
their value in place.

The descriptor also counts the store's live keys (``D_SIZE``, kept by the kernels that insert
and delete) and says whether a write may be made without the store's writer lock
(``D_HOLD``, nonzero while the lock is held and for stores whose writes are all logged; see
:class:`~learnedidx.index.live.WriterLock`).

Kernels that read or write these structures hold the GIL (see :mod:`learnedidx.index.ops`):
each call sees and leaves one consistent state.
"""
from __future__ import annotations

import numpy as np
from numba import carray, njit, types

from learnedidx.native import load_be64_at, load_byte, load_word, pointer_to

# Descriptor slots.
(D_TAB, D_TCAP, D_COEF, D_CCOLS, D_RHEAD, D_RPIV, D_RGID, D_NROOT, D_RCAP, D_MAXLEN, D_B,
 D_PINGEN, D_PINS, D_NONE, D_TOMB, D_MISSING, D_BYTES_TYPE, D_INCREF, D_DECREF, D_BYTES_NEW, D_SIZE, D_HOLD,
 D_RSAMP) = range(23)
D_SLOTS = 23

# Group table columns: what a lookup of a merged key reads first comes first (one cache line).
(T_N, T_HPREFIX, T_P0, T_MPREFIX, T_FEAT, T_ERRLO, T_ERRHI, T_HEADS,
 T_OFFS, T_BYTES, T_VITEMS, T_P1, T_BORD, T_RPREFIX, T_GEN, T_NTOMB) = range(16)
T_COLS = 16
#: The columns a new group's row takes from its maker (see foldin.publish_split); T_P0 and
#: T_P1 are the heads of its first key at bytes 0 and 8 (so that a lookup checks the
#: merged keys' common prefix without reading a key).
ROW_COLS = np.array([T_HEADS, T_OFFS, T_BYTES, T_N, T_VITEMS, T_BORD, T_HPREFIX, T_MPREFIX, T_FEAT, T_ERRLO,
                     T_ERRHI], np.int64)

#: Offsets inside CPython objects (checked on real objects by :mod:`learnedidx.index.pyobjects`).
OB_TYPE, OB_SIZE, BYTES_DATA, LIST_ITEMS = 8, 16, 32, 24

SIGN = np.int64(-(1 << 63))

i64_at = pointer_to(types.int64)
f64_at = pointer_to(types.float64)
u8_at = pointer_to(types.uint8)


@njit(cache=True, nogil=True, inline="always")
def desc(addr):
    """The descriptor at ``addr``."""
    return carray(i64_at(addr), D_SLOTS)


@njit(cache=True, nogil=True, inline="always")
def table(d):
    return carray(i64_at(d[D_TAB]), (d[D_TCAP], T_COLS))


@njit(cache=True, nogil=True, inline="always")
def coefs(d):
    return carray(f64_at(d[D_COEF]), (d[D_TCAP], d[D_CCOLS]))


@njit(cache=True, nogil=True, inline="always")
def root(d):
    """``(rhead, rpiv, rgid)`` of the descriptor's root."""
    n = d[D_NROOT]
    return carray(i64_at(d[D_RHEAD]), n), carray(i64_at(d[D_RPIV]), n), carray(i64_at(d[D_RGID]), n)


@njit(cache=True, nogil=True, inline="always")
def sample_levels(n) -> int:
    """Levels of the root sample of ``n`` root entries: the least L with 16**L >= n."""
    L = 1
    while (1 << (4 * L)) < n:
        L += 1
    return L


@njit(cache=True, nogil=True, inline="always")
def level_size(n, L, lvl) -> int:
    """Entries of level ``lvl`` (0: the top) of the sample of ``n`` root entries in
    ``L`` levels: 16 per node, one node per 16**(L - lvl) root entries."""
    s = 4 * (L - lvl)
    return 16 * ((n + (1 << s) - 1) >> s)


@njit(cache=True, nogil=True)
def sample_size(n) -> int:
    """Entries of the root sample of ``n`` root entries (every level, top first)."""
    L = sample_levels(n)
    t = 0
    for lvl in range(L):
        t += level_size(n, L, lvl)
    return t


@njit(cache=True, nogil=True, inline="always")
def root_sample(d):
    """The root's sample (see :func:`sample_size`)."""
    return carray(i64_at(d[D_RSAMP]), sample_size(d[D_NROOT]))


@njit(cache=True, nogil=True, inline="always")
def merged(row):
    """``(heads, offs, base)`` of a group's merged keys (table row ``row``)."""
    n = row[T_N]
    return carray(i64_at(row[T_HEADS]), n), carray(i64_at(row[T_OFFS]), n + 1), row[T_BYTES]


@njit(cache=True, nogil=True, inline="always")
def buffer(row, B):
    """A group's insert buffer (``bord``: count, then (head, slot) pairs)."""
    return carray(i64_at(row[T_BORD]), 1 + 2 * B)


@njit(cache=True, nogil=True, inline="always")
def bytes_ptr(obj):
    """``(address of the characters, length)`` of the ``bytes`` object at ``obj``."""
    return obj + BYTES_DATA, load_word(obj + OB_SIZE)


@njit(cache=True, nogil=True, inline="always")
def item(items, i):
    """Item ``i`` of a list whose item array is at ``items`` (an object address)."""
    return load_word(items + 8 * i)


@njit(cache=True, nogil=True, inline="always")
def compare(a, la, b, lb) -> int:
    """Bytewise order of the byte strings at raw addresses ``a`` (``la`` bytes) and ``b``
    (``lb``): -1, 0 or 1, 8 bytes a step."""
    m = la if la < lb else lb
    j = 0
    while j + 8 <= m:
        x = load_be64_at(a + j)
        y = load_be64_at(b + j)
        if x != y:
            return -1 if x < y else 1
        j += 8
    while j < m:
        x = load_byte(a + j)
        y = load_byte(b + j)
        if x != y:
            return -1 if x < y else 1
        j += 1
    if la == lb:
        return 0
    return -1 if la < lb else 1


@njit(cache=True, nogil=True, inline="always")
def head(p, ln, start) -> np.int64:
    """Bytes ``start .. start+8`` of the ``ln`` bytes at ``p`` (zero-padded past the end) as
    an int64 whose signed order is their byte order."""
    if start + 8 <= ln:
        return np.int64(load_be64_at(p + start)) ^ SIGN
    h = np.int64(0)
    for j in range(8):
        b = load_byte(p + start + j) if start + j < ln else 0
        h = (h << np.int64(8)) | np.int64(b)
    return h ^ SIGN


@njit(cache=True, nogil=True, inline="always")
def common_prefix(a, la, b, lb) -> int:
    """Length of the common prefix of two byte strings at raw addresses."""
    m = la if la < lb else lb
    p = 0
    while p + 8 <= m and load_word(a + p) == load_word(b + p):
        p += 8
    while p < m and load_byte(a + p) == load_byte(b + p):
        p += 1
    return p
