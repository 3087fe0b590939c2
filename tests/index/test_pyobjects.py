"""The compiled packer of key lists against Python's own view of the same objects."""
import sys

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


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=8), max_size=60), st.data())
def test_take_is_the_list_of_the_chosen_items(values, data):
    perm = data.draw(st.lists(st.integers(0, len(values) - 1), max_size=80)) if values else []
    assert P.take(values, np.array(perm, np.int64)) == [values[i] for i in perm]


def test_take_counts_references():
    values = [b"value %d" % i for i in range(50)]  # not interned: counts are their own
    P.take(values, np.array([0, 1]))  # compiled (or loaded) before counting
    before = [sys.getrefcount(v) for v in values]
    perm = np.array([3, 3, 7, 49, 0])
    none_before = sys.getrefcount(None)
    out = P.take(values, perm)
    none_after = sys.getrefcount(None)  # (pytest's assert rewriting holds references to None)
    during = [sys.getrefcount(v) for v in values]
    del out
    after = [sys.getrefcount(v) for v in values]
    assert none_after == none_before  # the fresh list's None slots were released
    assert np.subtract(during, before).tolist() == [perm.tolist().count(i) for i in range(50)]
    assert after == before


@pytest.mark.parametrize("bad", [50, -1])
def test_take_refuses_an_index_out_of_range_and_writes_nothing(bad):
    values = [b"value %d" % i for i in range(50)]
    before = [sys.getrefcount(v) for v in values]
    with pytest.raises(IndexError):
        P.take(values, np.array([1, 2, bad]))
    after = [sys.getrefcount(v) for v in values]
    assert after == before


def test_take_of_a_tuple():
    values = tuple(b"%d" % i for i in range(20))
    assert P.take(values, np.array([4, 2])) == [b"4", b"2"]
