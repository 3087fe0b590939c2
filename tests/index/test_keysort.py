"""The compiled sort of a key batch against Python's ``sorted(dict(zip(keys, values)))``."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learnedidx.errors import WorkloadError
from learnedidx.index import keysort, pyobjects
from learnedidx.index.keys import KeyBatch
from learnedidx.workloads.keysources import load_keys

# Adversarial pieces: NUL bytes (a shorter key vs the same key + NULs), prefixes longer than
# one and two 7-byte digits, bytes with the sign bit set.
PREFIXES = [b"", b"\x00", b"user", b"\x00" * 9, b"shared/prefix/x", b"\xff" * 16]
key = st.builds(lambda p, s: p + s, st.sampled_from(PREFIXES),
                st.binary(max_size=20) | st.sampled_from([b"", b"\x00", b"\x00\x00", b"\xff", b"a\x00"]))


def _sorted_unique(keys: list[bytes], values: list) -> tuple[list[bytes], list]:
    kb = KeyBatch.from_keys(keys)
    perm = keysort.sort_unique(kb.arena, kb.offsets)
    arena, offsets = keysort.gather(kb.arena, kb.offsets, perm)
    out = KeyBatch(arena, offsets)
    assert keysort.is_sorted_unique(arena, offsets)
    return out.keys(), pyobjects.take(values, perm)


def _check(keys: list[bytes]) -> None:
    values = [b"v%d" % i for i in range(len(keys))]
    ref = sorted(dict(zip(keys, values)).items())
    got_k, got_v = _sorted_unique(keys, values)
    assert list(zip(got_k, got_v)) == ref


@settings(max_examples=300, deadline=None)
@given(st.lists(key, max_size=120))
def test_sort_unique_is_sorted_dict_last_write_wins(keys):
    _check(keys)


@settings(max_examples=40, deadline=None)
@given(st.lists(key, min_size=1, max_size=40), st.integers(1, 120))
def test_many_repeats_of_few_keys(few, repeat):
    rng = np.random.default_rng(repeat)
    _check([few[i] for i in rng.integers(0, len(few), repeat * len(few)).tolist()])


@pytest.mark.parametrize("keys", [[], [b"only"], [b""], [b"a", b"a"], [b"a\x00", b"a", b"a\x00\x00", b"a"]])
def test_edge_cases(keys):
    _check(keys)


@pytest.mark.parametrize("n", [5_000, 300_000])
def test_large_batches_take_the_radix_and_parallel_paths(n):
    # Sizes past the insertion-sort and 8-bit-pass thresholds, and past the split into
    # per-core ranges; keys sharing 14+ bytes, and repeats.
    rng = np.random.default_rng(n)
    nums = rng.integers(0, n // 2, n)
    keys = [b"common/prefix/%d" % x if x % 3 else b"%d" % x for x in nums.tolist()]
    _check(keys)


def test_words():
    try:
        words = load_keys("words", 100_000)
    except WorkloadError:
        pytest.skip("no word list")
    np.random.default_rng(0).shuffle(words)
    _check(words + words[:1000])


def test_gather_of_a_chosen_order():
    keys = [b"b", b"", b"abc", b"\x00\x01"]
    kb = KeyBatch.from_keys(keys)
    arena, offsets = keysort.gather(kb.arena, kb.offsets, np.array([2, 2, 0, 1, 3]))
    assert KeyBatch(arena, offsets).keys() == [b"abc", b"abc", b"b", b"", b"\x00\x01"]
