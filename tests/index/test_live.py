"""The live index without a store: cutting, bulk building, writes through the compiled
operations, fold-ins, splits, pinned views and copy-on-write, each checked against a dict
and every invariant of the layout (tests/index/invariants.py)."""
from __future__ import annotations

import bisect

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from learnedidx.index import fitting, grouping
from learnedidx.index import foldin as FI
from learnedidx.index import layout as L
from learnedidx.index import ops as O
from learnedidx.index.keys import KeyBatch
from learnedidx.index.live import MISSING, LiveIndex
from learnedidx.index.options import StoreOptions
from learnedidx.index.retrainer import Retrainer
from learnedidx.index.search import find_root
from tests.index.invariants import contents, head, root_sample

OPTS = StoreOptions(group_size=16, max_features=8, buffer_threshold=4)
E = O.entry_points()
keys_st = st.lists(st.binary(min_size=1, max_size=24), max_size=300, unique=True)


def _built(ref: dict[bytes, bytes], opts: StoreOptions = OPTS) -> LiveIndex:
    ks = sorted(ref)
    kb = KeyBatch.from_keys(ks)
    return grouping.build(kb.arena, kb.offsets, [ref[k] for k in ks], opts, Retrainer(opts), 64)


def _put(live: LiveIndex, k: bytes, v: bytes) -> int:
    """A write as the store makes it: fold a full buffer in, copy a pinned group first."""
    while True:
        c = E["upsert"](live.addr, k, v)
        op, g = c & 0xFF, c >> O.GROUP_SHIFT
        if op == O.C_NEED_COW:
            live.copy_group(g)
        elif op == O.C_FULL:
            live.fold(g)
        else:
            if op == O.C_INSERTED_FULL:
                live.fold(g)
            return op


def _delete(live: LiveIndex, k: bytes) -> bool:
    while True:
        c = E["delete"](live.addr, k)
        if c & 0xFF != O.C_NEED_COW:
            return c & 0xFF == O.C_DELETED
        live.copy_group(c >> O.GROUP_SHIFT)


def _scan(addr: int, k: bytes, n: int) -> list:
    ks, vs = [None] * n, [None] * n
    got = E["scan"](addr, k, n, id(ks), id(vs), False, MISSING)
    return list(zip(ks[:got], vs[:got]))


def _check(live: LiveIndex, ref: dict[bytes, bytes]) -> None:
    assert contents(live) == ref
    ks = sorted(ref)
    for k in ks:
        assert E["get"](live.addr, k) is ref[k]
    for q in (b"\x00", b"m", b"\xff" * 30, *(k + b"\x00" for k in ks[::7])):
        assert E["get"](live.addr, q) is (ref[q] if q in ref else MISSING)
        i = bisect.bisect_left(ks, q)
        assert _scan(live.addr, q, 3) == [(x, ref[x]) for x in ks[i:i + 3]]


@settings(max_examples=40, deadline=None)
@given(keys_st)
def test_cut_covers_the_keys_with_groups_of_bounded_size(keys):
    ks = sorted(keys)
    kb = KeyBatch.from_keys(ks)
    o = OPTS
    bounds = fitting.cut_bounds(kb.arena, kb.offsets, 0, len(ks), o.group_size, o.min_group, o.max_features).tolist()
    assert bounds[0] == 0 and bounds[-1] == len(ks) and bounds == sorted(set(bounds))
    for a, b in zip(bounds[:-1], bounds[1:]):
        assert b - a < o.group_size * 3 // 2  # a short tail joins the group before it
        assert b - a >= o.min_group or b == len(ks)
        # A group is halved while too wide, unless halving would go below the minimum size.
        wide = fitting.feature_len(kb.arena, kb.offsets, a, b) > o.max_features
        assert not wide or b - a < 2 * o.min_group


@settings(max_examples=40, deadline=None)
@given(keys_st)
def test_a_built_index_holds_every_key(keys):
    ref = {k: k[::-1] for k in keys}
    live = _built(ref) if ref else LiveIndex.empty(OPTS, 64)
    _check(live, ref)


@settings(max_examples=60, deadline=None)
@given(keys_st, st.lists(st.tuples(st.binary(min_size=1, max_size=24), st.booleans()), max_size=200))
def test_writes_fold_ins_and_splits_match_a_dict(keys, writes):
    ref = {k: k[::-1] for k in keys}
    live = _built(ref) if ref else LiveIndex.empty(OPTS, 64)
    for i, (k, is_delete) in enumerate(writes):
        if is_delete:
            assert _delete(live, k) == (k in ref)
            ref.pop(k, None)
        else:
            v = b"%d" % i
            op = _put(live, k, v)
            assert op in ((O.C_INSERTED, O.C_INSERTED_FULL) if k not in ref else (O.C_UPDATED,))
            ref[k] = v
    _check(live, ref)
    for g in live.buffered_groups():  # every buffer folded in: the same pairs, none buffered
        live.fold(g)
    assert live.buffered() == 0
    _check(live, ref)


def test_long_groups_are_split_and_their_pieces_route_keys():
    live = LiveIndex.empty(OPTS, 64)
    ref = {}
    for i in range(400):
        k = b"k%05d" % (i * 7919 % 400)
        _put(live, k, k)
        ref[k] = k
    assert len(live.root_order()) > 400 // (2 * OPTS.group_size)
    _check(live, ref)


def test_a_pinned_view_keeps_its_moment_while_writers_go_on():
    ref = {b"k%04d" % i: b"old" for i in range(0, 300, 2)}
    live = _built(ref)
    view = live.pin()
    frozen = dict(ref)
    for i in range(300):
        k = b"k%04d" % i
        if i % 3 == 0 and k in ref:
            _delete(live, k)
            del ref[k]
        else:
            _put(live, k, b"new")
            ref[k] = b"new"
    assert live.views == [view]
    assert _scan(view.addr, b"\x00", 1000) == sorted(frozen.items())  # the view: before every write
    # Its lookups route through its own root (the index's split since): each key, and a
    # scan from the middle.
    ks = sorted(frozen)
    assert len(live.root_order()) > len(view.arrays[2])
    for i in range(300):
        k = b"k%04d" % i
        assert E["get"](view.addr, k) is frozen.get(k, MISSING)
    assert _scan(view.addr, b"k0151", 5) == [(k, frozen[k]) for k in ks[76:81]]
    _check(live, ref)  # the index: after them
    live.unpin(view)
    assert live.views == [] and view.keep == []


def test_export_of_a_view_is_every_pair_in_order():
    ref = {bytes([i % 7]) * (i % 5 + 1) + b"%d" % i: b"v%d" % i for i in range(500)}
    live = _built(ref)
    for i in range(100):
        _put(live, b"new%03d" % i, b"n")
        ref[b"new%03d" % i] = b"n"
    _delete(live, sorted(ref)[3])
    del ref[sorted(ref)[3]]
    view = live.pin()
    for max_pairs, max_bytes in ((1 << 16, 1 << 30), (7, 1 << 30), (1000, 40), (1, 1)):
        got = []
        for karena, koffs, varena, voffs in live.export(view, max_pairs, max_bytes):
            n = len(koffs) - 1
            assert 1 <= n <= max_pairs and (n == 1 or koffs[-1] + voffs[-1] <= max_bytes)
            got += [(karena[koffs[i]:koffs[i + 1]].tobytes(), varena[voffs[i]:voffs[i + 1]].tobytes())
                    for i in range(n)]
        assert got == sorted(ref.items())


def test_adopt_keeps_the_descriptor_readers_hold():
    live = LiveIndex.empty(OPTS, 64)
    addr = live.addr
    ref = {b"a%03d" % i: b"x" for i in range(100)}
    live.adopt(_built(ref))
    assert live.addr == addr
    _check(live, ref)


@njit
def _find_root(daddr: int, q: np.ndarray) -> int:
    return find_root(L.desc(daddr), q.ctypes.data, q.shape[0])


# Pivots for the root search: few distinct first 8 bytes (heads tie often), the lowest and
# highest heads among them, any count of them (up to four levels of the root's sample).
_pivot_st = st.builds(lambda a, b: a + b, st.sampled_from([b"", b"\x00" * 8, b"\xff" * 8, b"user0001", b"user0002"]),
                      st.binary(max_size=3))


@settings(max_examples=60, deadline=None)
@given(first=_pivot_st, pivots=st.lists(_pivot_st, max_size=300, unique=True), queries=st.lists(_pivot_st, max_size=40),
       extra=st.sampled_from([0, 14, 15, 16, 240, 254, 255, 256, 4094, 4095, 4096]))
def test_the_root_search_answers_the_last_pivot_at_or_below_the_key(first, pivots, queries, extra):
    # The first group also holds every key below its pivot, so that pivot may be anything
    # (keys below it split off keep it): root entry r > 0 is the group from pivots[r - 1].
    # Extra pivots: every other one of a single head (those are searched whole).
    pivots = sorted(set(pivots) | {(b"m%07d" if i % 2 else b"user0001m%07d") % i for i in range(extra)})
    root = [first, *pivots]
    live = LiveIndex(OPTS, 64)
    n = len(root)
    live._grow_root(n)
    live.rhead[:n] = [head(p) for p in root]
    live.rpiv[:n] = [id(p) for p in root]
    live.D[L.D_NROOT] = n
    FI.publish_root(live.addr)
    assert live.rsamp[:L.sample_size(n)].tolist() == root_sample(live.rhead[:n].tolist())
    for q in [first, *queries, *pivots[::max(1, n // 50)], *(p + b"\x00" for p in pivots[::7]), b"\x00", b"\xff" * 9]:
        if q:
            assert _find_root(live.addr, np.frombuffer(q, np.uint8)) == bisect.bisect_right(pivots, q), q


def test_lists_resized_by_another_thread_are_read_by_their_size_at_the_call():
    live = _built({b"a": b"1", b"b": b"2"})
    keys = [b"a", b"b", b"zz"]
    out = [None] * 2  # shorter than keys: only as many as both hold are read
    assert E["get_many"](live.addr, id(keys), id(out)) == -1 and out == [b"1", b"2"]


def _apply(live: LiveIndex, ks: list, vs: list) -> list:
    """A batch as the store makes it: the compiled call, then a fold-in or a copy where it
    stops, then on from where it stopped."""
    out = [None] * len(ks)
    counts = np.zeros(1, np.int64)
    t = 0
    while True:
        code = E["apply_many"](live.addr, id(ks), id(vs), id(out), t, counts)
        t, op = code >> O.GROUP_SHIFT, code & 0xFF
        if op == O.C_UPDATED:
            return out
        g = int(counts[0])
        if op == O.C_NEED_COW:
            live.copy_group(g)
        elif op in (O.C_FULL, O.C_INSERTED_FULL):
            live.fold(g)
        else:
            raise AssertionError(f"code {op} at {t}")


@settings(max_examples=40, deadline=None)
@given(keys=keys_st, steps=st.lists(st.tuples(st.integers(0, 400), st.booleans()), min_size=1, max_size=400),
       pinned=st.booleans())
def test_apply_many_in_lanes_is_the_same_calls_one_after_another(keys, steps, pinned):
    # Many lanes' worth of reads and writes, with keys repeated within a lane (a read after
    # an insert of its key, inserts that fill a buffer mid-lane) and, with a pinned view,
    # writes that must copy a group first: every read sees every earlier write.
    ref = {k: k[::-1] for k in keys}
    live = _built(ref) if ref else LiveIndex.empty(OPTS, 64)
    view = live.pin() if pinned else None
    frozen = dict(ref)
    pool = sorted(ref) + [b"new%03d" % i for i in range(60)]
    ks, vs, expect = [], [], []
    for i, (x, write) in enumerate(steps):
        k = pool[x % len(pool)]
        ks.append(k)
        vs.append(b"w%d" % i if write else None)
        expect.append(None if write else ref.get(k))
        if write:
            ref[k] = vs[-1]
    assert _apply(live, ks, vs) == expect
    _check(live, ref)
    if view is not None:
        assert _scan(view.addr, b"\x00", 1000) == sorted(frozen.items())
        live.unpin(view)


def test_apply_many_does_the_operations_before_a_bad_key_in_a_lane_and_stops_there():
    ref = {b"k%03d" % i: b"v" for i in range(100)}
    live = _built(ref)
    ks = [b"k001", b"new1", b"new1", b"", b"k002"]
    vs = [None, b"a", None, b"b", b"c"]
    out = [None] * 5
    code = E["apply_many"](live.addr, id(ks), id(vs), id(out), 0, np.zeros(1, np.int64))
    assert (code >> O.GROUP_SHIFT, code & 0xFF) == (3, O.C_BAD_KEY)
    assert out == [b"v", None, b"a", None, None]
    assert E["get"](live.addr, b"new1") == b"a" and E["get"](live.addr, b"k002") == b"v"
    vs[3] = 7  # a value that is not bytes: the same
    ks[3] = b"k003"
    code = E["apply_many"](live.addr, id(ks), id(vs), id(out), 1, np.zeros(1, np.int64))
    assert (code >> O.GROUP_SHIFT, code & 0xFF) == (3, O.C_BAD_VALUE)


def _window(live: LiveIndex, g: int) -> int:
    return int(live.tab[g, L.T_ERRHI] - live.tab[g, L.T_ERRLO])


def test_fold_ins_of_random_keys_scale_the_model_and_keep_its_window_narrow():
    # Keys inserted at random shift in proportion to their position: the model scaled by
    # the group's growth follows them, and its bounds (derived, not recomputed) stay exact
    # and far narrower than the old bounds widened by every insert.
    rng = np.random.default_rng(3)
    opts = StoreOptions(group_size=4096, buffer_threshold=256)
    nums = rng.choice(10 ** 9, 6000, replace=False)
    ref = {b"user%012d" % x: b"v" for x in nums[:2000]}
    live = _built(ref, opts)
    (g,) = live.root_order()
    start = _window(live, g)
    for x in nums[2000:3024]:  # four fold-ins of 256 keys
        _put(live, b"user%012d" % x, b"n")
        ref[b"user%012d" % x] = b"n"
    assert contents(live) == ref  # every invariant, the bounds holding every key among them
    assert _window(live, g) < start + 1024 // 4, (start, _window(live, g))


def test_fold_ins_keep_exact_bounds_for_models_too_large_or_not_finite_to_scale():
    ref = {b"user%06d" % i: b"v" for i in range(0, 4000, 2)}
    for coef in ([1e14, -3e13, 7e12], [float("nan"), 1.0, 2.0], [0.0, 0.0, 0.0]):
        live = _built(ref, StoreOptions(group_size=4096, buffer_threshold=64))
        (g,) = live.root_order()
        row = live.tab[g]
        live.publish_model(g, np.array(coef), int(row[L.T_MPREFIX]), 2)  # exact bounds computed
        want = dict(ref)
        for i in range(1, 1000, 2):
            _put(live, b"user%06d" % i, b"n")
            want[b"user%06d" % i] = b"n"
        _check(live, want)


@settings(max_examples=30, deadline=None)
@given(n=st.sampled_from([50, 3000]), seed=st.integers(0, 2 ** 32 - 1))
def test_get_many_answers_repeated_keys_each_time_and_counts_their_references(n, seed):
    # Repeats as the same object and as equal objects, among keys sharing their first 8
    # bytes (tied heads), and repeats of missing keys; batches under and over the size where
    # get_many orders queries by radix passes: every answer is there, each one reference.
    import sys
    rng = np.random.default_rng(seed)
    ref = {b"samehead%05d" % i: b"v%d" % i for i in range(0, 400, 2)}
    ref.update({b"k%07d" % i: b"w%d" % i for i in range(0, 4000, 3)})
    live = _built(ref)
    pool = sorted(ref) + [b"samehead%05d" % i for i in range(1, 40, 2)] + [b"zz%d" % i for i in range(20)]
    picks = rng.integers(0, len(pool), n)
    hot = rng.integers(0, len(pool), 5)
    picks[rng.random(n) < 0.4] = rng.choice(hot)  # a few keys asked for many times
    keys = [pool[p] if rng.random() < 0.5 else bytes(bytearray(pool[p])) for p in picks]
    v0 = ref[sorted(ref)[0]]
    before = sys.getrefcount(v0)
    out = [None] * n
    assert E["get_many"](live.addr, id(keys), id(out)) == -1
    assert out == [ref.get(k) for k in keys]
    assert sys.getrefcount(v0) == before + sum(o is v0 for o in out)
    del out
    assert sys.getrefcount(v0) == before


@settings(max_examples=25, deadline=None)
@given(pattern=st.sampled_from(["random", "appended", "prepended", "clustered"]), seed=st.integers(0, 2 ** 32 - 1))
def test_a_fold_in_keeps_bounds_no_wider_than_the_old_model_moved_by_its_inserts(pattern, seed):
    # Whatever the insert pattern (the scaled model fits random inserts, not appends), the
    # fold-in keeps the narrower bounds: never wider than the old bounds moved by every
    # insert together with the old model's exact errors on the keys it now holds.
    rng = np.random.default_rng(seed)
    opts = StoreOptions(group_size=4096, buffer_threshold=64)
    base = np.sort(rng.choice(10 ** 9, 1500, replace=False)) + 10 ** 9
    ref = {b"user%012d" % x: b"v" for x in base}
    live = _built(ref, opts)
    (g,) = live.root_order()
    news = {"random": rng.choice(3 * 10 ** 9, 512, replace=False),
            "appended": 3 * 10 ** 9 + np.arange(512) * 7,
            "prepended": np.arange(512) * 7,
            "clustered": base[700] + 1 + rng.choice(10 ** 6, 512, replace=False)}[pattern]
    for t in range(0, 512, 64):
        row = live.tab[g]
        lo0, hi0, mprefix, feat = (int(row[c]) for c in (L.T_ERRLO, L.T_ERRHI, L.T_MPREFIX, L.T_FEAT))
        coef0 = live.coef[g].copy()
        for x in news[t:t + 64]:
            k = b"user%012d" % x
            _put(live, k, b"n")
            ref[k] = b"n"
        if live.root_order() != [g]:
            break  # split: the pieces' bounds are computed exactly
        grp = live.groups[g]
        elo, ehi = FI.model_error_of(grp.offs, grp.kbytes, int(live.tab[g, L.T_N]), mprefix, feat, coef0)
        assert _window(live, g) <= max(hi0 + 64, ehi) - min(lo0, elo), (pattern, t)
    assert contents(live) == ref
