"""A store's group arrays and value slots in transparent huge pages (``_pages.c`` says how
and why; docs/store.md#memory-in-huge-pages).

:func:`empty` and :func:`zeros` are numpy's, for the arrays of a group (heads, offsets, key
bytes, insert buffer); :func:`slots` makes a group's value slots.  Arrays below one page
and every array of a build without the C module come from numpy, and slots are then a
list (untracked by the cyclic collector, as the C slots are): the kernels read both alike.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from learnedidx.index.pyobjects import untracked

try:
    from learnedidx.index import _pages
except ImportError:
    _pages = None

BUILT = _pages is not None
_MIN = _pages.MIN_BLOCK if BUILT else 0


def _array(n: int, dtype: Any, zero: bool) -> np.ndarray:
    dt = np.dtype(dtype)
    nbytes = n * dt.itemsize
    if not BUILT or nbytes < _MIN:
        return (np.zeros if zero else np.empty)(n, dt)
    return np.frombuffer(_pages.Block(nbytes, zero), dt, n)


def empty(n: int, dtype: Any) -> np.ndarray:
    """``np.empty(n, dtype)``, from the pool when it is at least a page."""
    return _array(n, dtype, False)


def zeros(n: int, dtype: Any) -> np.ndarray:
    """``np.zeros(n, dtype)``, from the pool when it is at least a page."""
    return _array(n, dtype, True)


def slots(items: list, extra: int = 0) -> Any:
    """The references of ``items`` and then ``extra`` Nones, as a group's value slots (laid
    out as a list, see ``_pages.c``)."""
    items = items if type(items) is list else list(items)
    if BUILT:
        return _pages.Slots(items, extra)
    return untracked(items + [None] * extra)


def copy(s: Any) -> Any:
    """New value slots holding the references ``s`` holds."""
    return s.copy() if BUILT else untracked(list(s))
