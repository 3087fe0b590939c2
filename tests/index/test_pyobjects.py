"""The compiled packer of key lists against Python's own view of the same objects."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learnedidx.index import pyobjects as P

pytestmark = pytest.mark.skipif(not P.LAYOUT_OK, reason="not CPython's bytes layout")


def _pack(keys, max_len=4096):
    return P.pack_bytes_list(id(keys), max_len, P.BYTES_TYPE)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=300))
def test_pack_matches_join(keys):
    arena, offsets, bad = _pack(keys)
    assert bad == -1
    assert arena.tobytes() == b"".join(keys)
    assert offsets.tolist() == [0, *np.cumsum([len(k) for k in keys]).tolist()]


class Sub(bytes):
    pass


@pytest.mark.parametrize("intruder", ["text", bytearray(b"ba"), Sub(b"sub"), 7, None, b""])
def test_pack_reports_the_first_item_it_cannot_take(intruder):
    keys = [b"k%03d" % i for i in range(40)]
    keys[17] = intruder
    keys[30] = intruder
    assert _pack(keys)[2] == 17


def test_pack_checks_lengths():
    keys = [b"a" * 5, b"b" * 9, b"c" * 10]
    assert _pack(keys, max_len=9)[2] == 2
    assert _pack(keys, max_len=10)[2] == -1


def test_items_address_is_zero_for_an_empty_list():
    assert P.items_address([]) == 0


def test_pack_an_empty_list():
    arena, offsets, bad = _pack([])
    assert bad == -1 and arena.size == 0 and offsets.tolist() == [0]
