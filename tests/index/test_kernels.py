"""Kernel-level checks against Python's own bytes order."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from numba import njit

from learnedidx.index import kernels as K
from learnedidx.index import layout as L
from tests.index.invariants import head, lcp

# Long shared prefixes so that the 8-byte steps of compare_key meet the differing byte
# at every offset, with bytes >= 0x80 (where a signed compare would go wrong).
stems = st.sampled_from([b"", b"\xff" * 7, b"user1234567890", b"\x00" * 16, b"\x80abc\x7f" * 5])
tails = st.binary(max_size=20)


@settings(max_examples=400, deadline=None)
@given(stems, tails, tails)
def test_compare_key_matches_bytes_order(stem, x, y):
    a, b = stem + x, stem + y
    if not a or not b:
        return
    arena = np.frombuffer(a, np.uint8)
    offsets = np.array([0, len(a)], np.int64)
    expected = (a > b) - (a < b)
    assert K.compare_key(arena, offsets, 0, np.frombuffer(b, np.uint8)) == expected
    assert K.compare_key(arena, offsets, 0, b) == expected  # a bytes query, as get() passes


@njit(cache=True)
def _raw(a, b, start):
    """layout's compare, head and common_prefix on the characters of two bytes objects."""
    pa, la = a.ctypes.data, a.shape[0]
    pb, lb = b.ctypes.data, b.shape[0]
    return L.compare(pa, la, pb, lb), L.head(pa, la, start), L.common_prefix(pa, la, pb, lb)


@settings(max_examples=400, deadline=None)
@given(stems, tails, tails, st.integers(0, 24))
def test_raw_compare_heads_and_prefixes_match_bytes(stem, x, y, start):
    a, b = stem + x, stem + y
    c, h, p = _raw(np.frombuffer(a, np.uint8), np.frombuffer(b, np.uint8), start)
    assert c == (a > b) - (a < b)
    assert h == head(a[start:])
    assert p == lcp(a, b)
    # Heads order like the bytes they hold (ties only where those 8 bytes are equal).
    hb = _raw(np.frombuffer(b, np.uint8), np.frombuffer(a, np.uint8), start)[1]
    assert (h < hb) == (a[start:start + 8].ljust(8, b"\0") < b[start:start + 8].ljust(8, b"\0"))
