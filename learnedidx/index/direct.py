"""The store's hottest operations as C functions, for :mod:`learnedidx.index.methods`.

``Store.get`` and ``Store.put`` call these from C (the compiled methods of
``learnedidx.index._methods``) with the store's descriptor address and the argument
objects' addresses, holding the GIL: each call is one step of the store, as a call of
:mod:`learnedidx.index.ops` is.  A kernel that cannot finish the call alone declines and
the method's Python fallback takes over.
"""
from __future__ import annotations

from numba import cfunc, types

from learnedidx.index.ops import put_objects, value_of

# Answered by put when the write is done (any other answer is a code to decline with).
PUT_DONE = -1

_I = types.int64


@cfunc(_I(_I, _I), cache=True)
def get(daddr, k):
    """The value object of key object ``k`` (the caller takes its reference), 0 to decline:
    the key is absent or not exactly ``bytes`` of a valid length."""
    return value_of(daddr, k)


@cfunc(_I(_I, _I, _I), cache=True)
def put(daddr, k, v):
    """PUT_DONE when the write of value object ``v`` under key object ``k`` is done, else
    the write code of :func:`~learnedidx.index.ops.put_objects`."""
    c = put_objects(daddr, k, v)
    return PUT_DONE if c == 0 else c
