"""Kernel-level checks against Python's own bytes order."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from learnedidx.index import kernels as K

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
