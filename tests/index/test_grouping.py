"""Grouping without a store: cutting, merging buffered writes, building and regrouping
snapshots, checked against a sorted list of keys."""
from __future__ import annotations

import bisect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learnedidx.index import grouping
from learnedidx.index import kernels as K
from learnedidx.index.keys import KeyBatch
from learnedidx.index.options import StoreOptions
from learnedidx.index.qr import CpuBackend
from learnedidx.index.snapshot import TOMB, Snapshot

OPTS = StoreOptions(group_size=16, max_features=8)
keys_st = st.lists(st.binary(min_size=1, max_size=24), max_size=300, unique=True)


def _train(A, b, R_old, A_delta):
    res = CpuBackend().train_full(A, b) if R_old is None else CpuBackend().train_incremental(R_old, A_delta, A, b)
    return res.R, res.coef


def _grouped(keys: list[bytes], opts: StoreOptions = OPTS) -> Snapshot:
    ks = sorted(keys)
    kb = KeyBatch.from_keys(ks)
    flat = Snapshot.ungrouped(kb.arena, kb.offsets, [k[::-1] for k in ks], opts.max_features, 64)
    return grouping.regroup(flat, opts, _train)


def _check(snap: Snapshot, ref: dict[bytes, bytes], opts: StoreOptions = OPTS) -> None:
    """Keys, values and groups of ``snap`` against the sorted oracle ``ref``."""
    ks = sorted(ref)
    assert [snap.key(i) for i in range(snap.nkeys())] == ks
    assert snap.values == [ref[k] for k in ks]
    starts, ends = snap.gint[:, K.G_START].tolist(), snap.gint[:, K.G_END].tolist()
    assert starts[:1] == ([0] if ks else []) and ends[-1:] == ([len(ks)] if ks else [])
    assert starts[1:] == ends[:-1] and all(e > s for s, e in zip(starts, ends))  # contiguous, none empty
    assert snap.pivots == [ks[s] for s in starts]
    for i, k in enumerate(ks):  # every key inside its group's error window: found by the kernel
        assert snap.find(k) == i
    for q in (b"\x00", b"m", b"\xff" * 30):
        assert snap.seek(q) == bisect.bisect_left(ks, q)


@settings(max_examples=40, deadline=None)
@given(keys_st)
def test_cut_covers_the_keys_with_groups_of_bounded_size(keys):
    ks = sorted(keys)
    kb = KeyBatch.from_keys(ks)
    bounds = grouping.cut(kb.arena, kb.offsets, 0, len(ks), OPTS)
    assert bounds[0] == 0 and bounds[-1] == len(ks) and bounds == sorted(set(bounds))
    for a, b in zip(bounds[:-1], bounds[1:]):
        assert b - a < OPTS.group_size * 3 // 2  # a short tail joins the group before it
        assert b - a >= OPTS.min_group or b == len(ks)
        # A group is halved while too wide, unless halving would go below the minimum size.
        wide = grouping.feature_len(kb.arena, kb.offsets, a, b) > OPTS.max_features
        assert not wide or b - a < 2 * OPTS.min_group


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=6), unique=True), st.dictionaries(
    st.binary(min_size=1, max_size=6), st.none() | st.binary(max_size=4)))
def test_merge_sorted_is_a_sorted_dict_update(old, writes):
    old = sorted(old)
    vals = [k + b"!" for k in old]
    w = {k: TOMB if v is None else v for k, v in writes.items()}
    m = grouping.merge_sorted(old, vals, sorted(w), w)
    ref = dict(zip(old, vals))
    for k, v in w.items():
        if v is TOMB:
            ref.pop(k, None)
        else:
            ref[k] = v
    assert m.keys == sorted(ref) and m.values == [ref[k] for k in m.keys]
    assert m.new_keys == sorted(k for k, v in w.items() if v is not TOMB and k not in set(old))
    assert m.deletes == sum(1 for k, v in w.items() if v is TOMB and k in set(old))


@settings(max_examples=30, deadline=None)
@given(keys_st, st.dictionaries(st.binary(min_size=1, max_size=24), st.none() | st.binary(max_size=4), max_size=80),
       st.booleans())
def test_build_folds_the_writes_of_dirty_groups_and_keeps_the_others(keys, writes, everything):
    snap = _grouped(keys)
    ref = {k: k[::-1] for k in keys}
    w = {k: TOMB if v is None else v for k, v in writes.items()}
    G = max(len(snap.models), 1)
    dirty = set(range(G)) if everything else set(range(0, G, 2))
    new, splits = grouping.build(snap, w, dirty, OPTS, _train)
    for k, v in w.items():
        if snap.group_of(k) in dirty:
            if v is TOMB:
                ref.pop(k, None)
            else:
                ref[k] = v
    _check(new, ref)
    assert splits >= 0 and len(new.buf) == 0


def test_build_reuses_untouched_groups_and_trains_touched_ones_incrementally():
    ks = [b"key/%06d" % (i * 10) for i in range(400)]
    opts = StoreOptions(group_size=64, max_features=8)
    snap = _grouped(ks, opts)
    counts = {"full": 0, "incremental": 0}

    def train(A, b, R_old, A_delta):
        counts["full" if R_old is None else "incremental"] += 1
        return _train(A, b, R_old, A_delta)

    g = 2
    s, e = int(snap.gint[g, K.G_START]), int(snap.gint[g, K.G_END])
    new_key = b"key/%06d" % (s * 10 + 5)  # between the group's first two keys: same prefix and width
    new, splits = grouping.build(snap, {new_key: b"new"}, {g}, opts, train)
    assert counts == {"full": 0, "incremental": 1} and splits == 0
    assert new.models[g - 1] is snap.models[g - 1] and new.models[g] is not snap.models[g]
    np.testing.assert_array_equal(new.coef[g + 1], snap.coef[g + 1])
    ref = {k: k[::-1] for k in ks} | {new_key: b"new"}
    _check(new, ref, opts)
    assert new.gint[g, K.G_END] - new.gint[g, K.G_START] == e - s + 1


def test_long_groups_are_cut_again():
    ks = [b"k%05d" % i for i in range(0, 4000, 4)]
    opts = StoreOptions(group_size=16, max_features=8)
    snap = _grouped(ks, opts)
    inserts = {b"k%05d" % i: b"i" for i in range(400) if i % 4}  # first groups: 4x as long
    new, splits = grouping.build(snap, inserts, set(range(len(snap.models))), opts, _train)
    assert splits > 0 and len(new.models) > len(snap.models)
    _check(new, {k: k[::-1] for k in ks} | inserts, opts)


def test_regroup_of_nothing_is_empty():
    new = _grouped([])
    assert new.nkeys() == 0 and new.models == [] and new.find(b"a") == -1


@pytest.mark.parametrize("n", [1, 2, 17, 500])
def test_regroup_trains_every_group(n):
    ks = [b"%08d" % (i * 7919 % 100003) for i in range(n)]
    _check(_grouped(ks), {k: k[::-1] for k in ks})
