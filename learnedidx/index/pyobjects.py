"""Reading CPython lists and ``bytes`` objects from compiled code.

A batch of keys arrives as a Python list of ``bytes``.  Packing it into an arena from
Python costs three interpreter passes over the list (type check, lengths, join);
:func:`pack_bytes_list` does it in one compiled pass over the list's item array, reading
each object's type, size and bytes in place (figures in docs/training.md).  The same item array
of a store's value list lets lookups prefetch the value they are about to return.

:func:`take` builds a list of another list's items in a given order (the values of a
bulk load, in key order) in one compiled pass that prefetches the items it is about to
reference, where ``operator.itemgetter`` waits for each item's cache miss in turn.

All rely on CPython's object layout (a list's ``ob_item`` pointer after its header, a
``bytes`` object's size and characters at fixed offsets), which is checked on real
objects before use: where it does not hold, :func:`items_address` returns 0 and
:data:`LAYOUT_OK` is False, and callers take their pure-Python paths.  The kernels
hold the GIL, so no other thread can resize a list or free an item while they run; only
:func:`take` writes, into the item array of a list it has just created, and it counts
references through CPython's own ``Py_IncRef``/``Py_DecRef``.
"""
from __future__ import annotations

import ctypes
import operator
import sys

import numpy as np
from numba import njit

from learnedidx.native import call_with_address, copy_from_address, load_word, prefetch_address, store_word

_PTR = ctypes.sizeof(ctypes.c_void_p)
_TYPE_AT = _PTR  # PyObject: ob_refcnt, ob_type
_SIZE_AT = 2 * _PTR  # PyVarObject: ob_size
_BYTES_AT = 4 * _PTR  # PyBytesObject: ..., ob_shash, ob_sval
_ITEMS_AT = 3 * _PTR  # PyListObject: PyObject_VAR_HEAD, ob_item
BYTES_TYPE = id(bytes)


def _layout_ok() -> bool:
    """Whether bytes and lists look here as the kernels below read them."""
    if sys.implementation.name != "cpython" or _PTR != 8:
        return False
    probe = b"learnedidx layout probe \x00\xff"
    lst = [probe, b"x", probe]
    items = ctypes.c_void_p.from_address(id(lst) + _ITEMS_AT).value
    return (ctypes.c_void_p.from_address(id(probe) + _TYPE_AT).value == BYTES_TYPE
            and ctypes.c_ssize_t.from_address(id(probe) + _SIZE_AT).value == len(probe)
            and ctypes.string_at(id(probe) + _BYTES_AT, len(probe)) == probe
            and ctypes.c_ssize_t.from_address(id(lst) + _SIZE_AT).value == 3
            and [ctypes.c_void_p.from_address(items + i * _PTR).value for i in range(3)] == list(map(id, lst)))


LAYOUT_OK = _layout_ok()


def items_address(lst: list) -> int:
    """Address of a list's item array (``ob_item``, after the object header); 0 unless
    the layout checks out on this list.  Valid while the list lives and is not resized."""
    if not lst or not LAYOUT_OK:
        return 0
    addr = ctypes.c_void_p.from_address(id(lst) + _ITEMS_AT).value
    ok = addr and all(ctypes.c_void_p.from_address(addr + i * _PTR).value == id(lst[i])
                      for i in (0, len(lst) - 1))
    return addr if ok else 0


_UNTRACK = ctypes.pythonapi.PyObject_GC_UnTrack
_UNTRACK.argtypes = [ctypes.py_object]
_UNTRACK.restype = None


def untracked(lst: list) -> list:
    """``lst``, no longer traversed by the cyclic collector.  For lists that hold only
    objects that cannot reach them back (``bytes``, None, sentinels): such a list is in no
    cycle, and a store's millions of value references then cost the collector nothing."""
    _UNTRACK(lst)
    return lst


_AHEAD = 8  # objects prefetched ahead of the one being read


@njit(cache=True)  # holds the GIL on purpose: see the module docstring
def pack_bytes_list(lst, max_len, bytes_type):
    """``(arena, offsets, bad)`` of the items of the list at address ``lst``: their bytes
    one after another, item i at ``arena[offsets[i]:offsets[i+1]]``.  ``bad`` is -1, or the
    index of the first item that is not exactly ``bytes`` or whose length is outside
    ``1..max_len`` (then arena and offsets are incomplete).

    The list's size and item array are read here, under the GIL, so that no other thread
    can resize it between that and the copy.  ``bytes_type`` is :data:`BYTES_TYPE`, passed
    in because compiled code is cached across processes and the type's address differs
    between them."""
    n = load_word(lst + _SIZE_AT)
    items = load_word(lst + _ITEMS_AT)
    offsets = np.empty(n + 1, np.int64)
    offsets[0] = 0
    total = 0
    for i in range(n):
        if i + _AHEAD < n:
            prefetch_address(load_word(items + 8 * (i + _AHEAD)))
        obj = load_word(items + 8 * i)
        size = load_word(obj + _SIZE_AT)
        if load_word(obj + _TYPE_AT) != bytes_type or size < 1 or size > max_len:
            return np.empty(0, np.uint8), offsets, i
        total += size
        offsets[i + 1] = total
    arena = np.empty(total, np.uint8)
    for i in range(n):
        copy_from_address(arena, offsets[i], load_word(items + 8 * i) + _BYTES_AT, offsets[i + 1] - offsets[i])
    return arena, offsets, -1


def _c_function(name: str) -> int:
    return ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value


_INCREF = _c_function("Py_IncRef")
_DECREF = _c_function("Py_DecRef")
#: ``PyBytes_FromStringAndSize``: kernels make the keys of scan results with it (``bytes``
#: objects are not tracked by the cyclic collector, so making one runs no Python code).
BYTES_NEW = _c_function("PyBytes_FromStringAndSize")
INCREF, DECREF = _INCREF, _DECREF


@njit(cache=True, nogil=True)
def move_item(src, i, dst, j, steal, incref, decref) -> None:
    """Slot ``i`` of item array ``src`` into slot ``j`` of item array ``dst`` (a fresh list's,
    holding None).  With ``steal`` the two slots swap their pointers: the reference moves
    to ``dst`` and ``src`` keeps the None (no count changes, and the object itself is not
    touched: no cache miss on it); only for a list nothing else will read."""
    obj = load_word(src + 8 * i)
    if steal:
        store_word(src + 8 * i, load_word(dst + 8 * j))
        store_word(dst + 8 * j, obj)
    else:
        replace_item(dst, j, obj, incref, decref)


@njit(cache=True, nogil=True)
def replace_item(items, i, obj, incref, decref) -> None:
    """Put the object at ``obj`` in slot ``i`` of a list's item array (at ``items``), taking
    a reference to it and releasing the one to what the slot held (GIL held; releasing a
    ``bytes`` object or None runs no Python code)."""
    old = load_word(items + 8 * i)
    call_with_address(incref, obj)
    store_word(items + 8 * i, obj)
    call_with_address(decref, old)


@njit(cache=True)  # holds the GIL: it changes reference counts
def _take_into(src, n_src, dst, perm, none, incref, decref) -> bool:
    """Item ``perm[t]`` of the list whose item array is at ``src`` (``n_src`` items) into
    slot t of the item array at ``dst`` (a fresh list of ``len(perm)`` references to
    ``none``, each released here); False, and nothing written, if an index is out of range."""
    m = perm.shape[0]
    for t in range(m):
        if perm[t] < 0 or perm[t] >= n_src:
            return False
    for t in range(m):
        if t + 2 * _AHEAD < m:
            prefetch_address(src + 8 * perm[t + 2 * _AHEAD])
        if t + _AHEAD < m:
            prefetch_address(load_word(src + 8 * perm[t + _AHEAD]))
        obj = load_word(src + 8 * perm[t])
        call_with_address(incref, obj)
        store_word(dst + 8 * t, obj)
        call_with_address(decref, none)
    return True


def take(values: list, perm: np.ndarray) -> list:
    """``[values[i] for i in perm]``, in one compiled pass where the layout checks out
    (else ``operator.itemgetter``); IndexError for an index out of range."""
    m = len(perm)
    out = [None] * m
    src, dst = (items_address(values), items_address(out)) if type(values) is list else (0, 0)
    if src and dst:
        if not _take_into(src, len(values), dst, np.ascontiguousarray(perm, np.int64), id(None), _INCREF, _DECREF):
            raise IndexError("list index out of range")
        return out
    if m < 2:
        return [values[i] for i in perm.tolist()]
    return list(operator.itemgetter(*perm.tolist())(values))
