"""The store against a dict + sorted-list oracle (hypothesis stateful testing)."""
from __future__ import annotations

import bisect
import os
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from numba import njit

import learnedidx
from learnedidx.index import layout as L
from learnedidx.index import store as store_module
from learnedidx.index.search import _WHOLE, predicted_window
from learnedidx.index.store import KeyBatch
from tests.index.invariants import contents

PREFIXES = [b"", b"user", b"\x00\x00", b"shared/prefix/", b"\xff" * 20]
keys = st.builds(lambda p, s: p + s, st.sampled_from(PREFIXES), st.binary(min_size=1, max_size=40))
values = st.binary(max_size=30)


class StoreMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.db = learnedidx.open(retrain="off", group_size=16, buffer_threshold=3)
        self.ref: dict[bytes, bytes] = {}

    def teardown(self):
        self.db.close()

    @rule(k=keys, v=values)
    def put(self, k, v):
        self.db.put(k, v)
        self.ref[k] = v

    @rule(ks=st.lists(keys, max_size=30), v=values)
    def put_many(self, ks, v):
        self.db.put_many(ks, [v] * len(ks))
        for k in ks:
            self.ref[k] = v

    @precondition(lambda self: self.ref)
    @rule(data=st.data())
    def delete_existing(self, data):
        k = data.draw(st.sampled_from(sorted(self.ref)))
        assert self.db.delete(k)
        del self.ref[k]

    @rule(k=keys)
    def delete_any(self, k):
        assert self.db.delete(k) == (k in self.ref)
        self.ref.pop(k, None)

    @rule(k=keys)
    def get(self, k):
        assert self.db.get(k) == self.ref.get(k)

    @rule(ks=st.lists(keys, max_size=20))
    def get_many(self, ks):
        probe = ks + list(self.ref)[:10]
        assert self.db.get_many(probe) == [self.ref.get(k) for k in probe]
        assert self.db.get_many(KeyBatch.from_keys(probe)) == [self.ref.get(k) for k in probe]

    @rule(steps=st.lists(st.tuples(keys, st.none() | values), max_size=30), known=st.integers(0, 8))
    def apply_many(self, steps, known):
        # Mixed reads (None) and writes, some on keys already stored and some repeated.
        steps = steps + [(k, None) for k in list(self.ref)[:known]] + steps[:3]
        expect = []
        for k, v in steps:
            expect.append(self.ref.get(k) if v is None else None)
            if v is not None:
                self.ref[k] = v
        assert self.db.apply_many([k for k, _ in steps], [v for _, v in steps]) == expect

    @rule(k=keys, n=st.integers(0, 25))
    def scan(self, k, n):
        s = sorted(self.ref)
        i = bisect.bisect_left(s, k)
        assert self.db.scan(k, n) == [(x, self.ref[x]) for x in s[i:i + n]]

    @rule(starts=st.lists(st.tuples(keys, st.integers(0, 25)), max_size=25), same=st.booleans())
    def scan_many(self, starts, same):
        # Deletes and inserts still in the buffer are folded into every scan of the batch.
        s = sorted(self.ref)
        ks = [k for k, _ in starts]
        counts = 7 if same else [n for _, n in starts]
        expect = [[(x, self.ref[x]) for x in s[bisect.bisect_left(s, k):][:7 if same else n]] for k, n in starts]
        assert self.db.scan_many(ks, counts) == expect

    @rule(a=keys, b=keys)
    def range_(self, a, b):
        lo, hi = min(a, b), max(a, b)
        assert list(self.db.range(lo, hi)) == [(x, self.ref[x]) for x in sorted(self.ref) if lo <= x < hi]

    @rule()
    def retrain(self):
        self.db.retrain_now()

    @invariant()
    def size_and_order(self):
        assert len(self.db) == len(self.ref)

    @invariant()
    def every_invariant_of_the_index(self):
        assert contents(self.db._live) == self.ref


TestStoreMachine = StoreMachine.TestCase
TestStoreMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


class ViewMachine(StoreMachine):
    """The machine above with iterations open across its writes, merges and retrains: each
    yields the pairs as they were at its first ``next()``.  Views read three pairs at a time
    so that a small store still spans many reads of a pinned view."""

    def __init__(self):
        super().__init__()
        self.chunk, store_module._CHUNK = store_module._CHUNK, 3
        self.views: list[tuple] = []  # (iterator, the pairs it has still to yield)

    def teardown(self):
        try:
            for it, rest in self.views:
                assert list(it) == rest
        finally:
            store_module._CHUNK = self.chunk
            super().teardown()

    @precondition(lambda self: len(self.views) < 4)
    @rule(a=keys, b=keys, whole=st.booleans())
    def open_view(self, a, b, whole):
        lo, hi = min(a, b), max(a, b)
        it = self.db.items() if whole else self.db.range(lo, hi)
        want = [(k, v) for k, v in sorted(self.ref.items()) if whole or lo <= k < hi]
        assert next(it, None) == (want[0] if want else None)  # the first next() pins
        if want:
            self.views.append((it, want[1:]))

    @precondition(lambda self: self.views)
    @rule(i=st.integers(0, 3), n=st.integers(1, 10))
    def advance_view(self, i, n):
        j = i % len(self.views)
        it, rest = self.views[j]
        for _ in range(n):
            want = rest.pop(0) if rest else None
            assert next(it, None) == want
            if want is None:
                del self.views[j]
                return

    @precondition(lambda self: self.views)
    @rule(i=st.integers(0, 3))
    def close_view(self, i):
        self.views.pop(i % len(self.views))[0].close()


TestViewMachine = ViewMachine.TestCase
TestViewMachine.settings = settings(max_examples=60, stateful_step_count=60, deadline=None)


def test_iteration_and_scans_on_many_keys():
    rng = np.random.default_rng(5)
    ks = sorted({rng.bytes(int(rng.integers(1, 24))) for _ in range(20000)})
    with learnedidx.open(retrain="off", group_size=512) as db:
        db.put_many(ks, [k[::-1] for k in ks])
        assert list(db) == ks
        assert db.stats()["groups"] > 10
        assert db.get_many(ks[::7]) == [k[::-1] for k in ks[::7]]
        for start in ks[::997]:
            i = ks.index(start)
            assert [k for k, _ in db.scan(start, 100)] == ks[i:i + 100]
        res = db.scan_many(ks[::1999], 10)
        assert [[k for k, _ in r] for r in res] == [ks[i:i + 10] for i in range(0, len(ks), 1999)]


def test_scan_reaching_the_last_merged_key_reads_buffered_keys_past_it():
    # The slice of merged keys ends exactly at the last one and a buffered delete empties
    # part of it: the pairs still owed come from buffered inserts past that last key.
    with learnedidx.open(retrain="off") as db:
        db.put_many([b"\x00", b"\x00\x00", b"\x00\x00\x00"], [b"", b"", b""])
        db.retrain_now()
        db.delete(b"\x00")
        db.put(b"user\x00", b"u")
        expect = [(b"\x00\x00", b""), (b"\x00\x00\x00", b""), (b"user\x00", b"u")]
        assert db.scan(b"\x00", 3) == expect
        assert db.scan_many([b"\x00"], [3]) == [expect]


def test_numpy_key_arrays():
    with learnedidx.open(retrain="off") as db:
        db.put_many(np.array([b"a1", b"b2", b"c3"], dtype=object), [b"1", b"2", b"3"])
        assert db.get_many(np.array([b"b2", b"zz"], dtype="S2")) == [b"2", None]


def test_background_retrainer_merges_and_counts():
    import time
    with learnedidx.open(retrain="background", retrain_interval=0.02, buffer_threshold=4, group_size=32) as db:
        for i in range(2000):
            db.put(f"key{i:05d}".encode(), b"v")
        deadline = time.time() + 10
        while db.stats()["buffered_writes"] > 4 * 32 and time.time() < deadline:
            time.sleep(0.02)
        s = db.stats()
        assert s["retrains_full"] + s["retrains_incremental"] > 0
        assert all(db.get(f"key{i:05d}") == b"v" for i in range(0, 2000, 37))


def test_incremental_retraining_is_used_and_exact():
    with learnedidx.open(retrain="off", group_size=4096, buffer_threshold=1) as db:
        base = [f"user{i * 7:08d}".encode() for i in range(3000)]
        db.put_many(base, [b"x"] * len(base))
        db.retrain_now()
        before = db.stats()["retrains_incremental"]
        extra = [f"user{i * 7 + 3:08d}".encode() for i in range(0, 3000, 50)]
        db.put_many(extra, [b"y"] * len(extra))
        db.retrain_now()
        assert db.stats()["retrains_incremental"] > before
        every = sorted(base + extra)
        assert list(db) == every
        assert db.get_many(every) == [b"y" if k in set(extra) else b"x" for k in every]


def test_concurrent_readers_with_a_writer():
    with learnedidx.open(retrain="background", retrain_interval=0.01, buffer_threshold=8, group_size=64) as db:
        stable = [f"stable{i:05d}".encode() for i in range(3000)]
        db.put_many(stable, [b"s"] * len(stable))
        errors: list = []
        stop = threading.Event()

        def reader():
            rng = np.random.default_rng(threading.get_ident() % 1000)
            while not stop.is_set():
                k = stable[int(rng.integers(len(stable)))]
                if db.get(k) != b"s":
                    errors.append(k)

        threads = [threading.Thread(target=reader) for _ in range(3)]
        for t in threads:
            t.start()
        for i in range(5000):
            db.put(f"new{i:06d}".encode(), b"n")
        stop.set()
        for t in threads:
            t.join()
        assert not errors
        assert len(db) == 8000


def test_absent_keys_outside_the_model_window():
    ks = [bytes([i // 256, i % 256]) + b"k" for i in range(5000)]
    with learnedidx.open(retrain="off", group_size=1000) as db:
        db.put_many(ks, ks)
        for q in (b"\x00", b"\x05", b"\x13\x87zz", b"\xff\xff"):
            i = bisect.bisect_left(ks, q)
            assert db.get(q) is None
            assert db.scan(q, 2) == [(k, k) for k in ks[i:i + 2]]


@njit
def _window_of(row, crow, i):
    """The width of the window a lookup of merged key i of a group searches."""
    _, offs, base = L.merged(row)
    a, b, _, _ = predicted_window(row, crow, base + offs[i], offs[i + 1] - offs[i])
    return b - a


def test_lookups_in_narrow_and_wide_windows():
    # Clustered keys: a linear model over their bytes fits them badly, so many windows span
    # thousands of keys (searched from probes) and others few (loaded whole, searched in
    # one wave), with keys anywhere in them.
    rng = np.random.default_rng(5)
    firsts = rng.choice([1, 2, 3, 200, 201, 250], 60000, p=[.4, .05, .05, .3, .1, .1])
    ks = sorted({bytes([int(c)]) * 3 + rng.bytes(int(rng.integers(1, 12))) for c in firsts})
    with learnedidx.open(retrain="off", group_size=20000) as db:
        db.put_many(ks, ks)
        db.retrain_now()
        live = db._live
        widths = np.array([_window_of(live.tab[g], live.coef[g], i)
                           for g in live.root_order() for i in range(int(live.tab[g, L.T_N]))])
        assert (widths <= _WHOLE).sum() > 100 and (widths > _WHOLE).sum() > 100
        assert all(db.get(k) is k for k in ks)
        present = set(ks)
        absent = [q for k in ks[::7] for q in (k + b"\0", k[:-1]) if q not in present]
        assert all(db.get(q) is None for q in absent)
        assert db.get_many(ks[::3] + absent) == ks[::3] + [None] * len(absent)
        for k in ks[::50]:  # updates and deletes find the key the same way
            db.put(k, b"new")
            assert db.get(k) == b"new" and db.delete(k) and db.get(k) is None


def test_heads_ties_and_trailing_nuls_resolve_by_full_compare():
    # Keys equal in the 8 bytes after the prefix, keys that differ only by trailing NULs,
    # and keys shorter than prefix + 8: heads tie and the full comparison decides.
    base = [b"p/" + bytes([a]) * 8 + t for a in (0, 1, 255) for t in (b"", b"\0", b"\0\0", b"x", b"\xff" * 9)]
    base += [b"p/", b"p/\0", b"p/a", b"p/a\0", b"p/\xff"]
    ks = sorted(set(base))
    with learnedidx.open(retrain="off", group_size=16, buffer_threshold=4) as db:
        db.put_many(ks, ks)
        db.retrain_now()
        for i, k in enumerate(ks):
            assert db.get(k) == k
            assert db.scan(k, 2) == [(x, x) for x in ks[i:i + 2]]
        for q in (b"p/\0\0\0\0\0\0\0\0\0\0\0", b"p/a\0\0", b"p/\x01", b"p/\xff\xff", b"q", b"o"):
            assert db.get(q) is None
            i = bisect.bisect_left(ks, q)
            assert db.scan(q, 2) == [(x, x) for x in ks[i:i + 2]]
        # the same keys again, through the insert buffers
        more = [k + b"\0" for k in ks]
        for k in more:
            db.put(k, k)
        every = sorted(set(ks + more))
        for i, k in enumerate(every):
            assert db.get(k) == k and db.scan(k, 2) == [(x, x) for x in every[i:i + 2]]
        assert contents(db._live) == {k: k for k in every}


def test_bulk_load_into_empty_store_last_value_wins_and_survives_reopen(tmp_path):
    rng = np.random.default_rng(11)
    ks = [rng.bytes(int(rng.integers(1, 20))) for _ in range(5000)]
    ks += ks[:300]  # repeated keys in the same batch: the later value wins
    vs = [b"%d" % i for i in range(len(ks))]
    ref = dict(zip(ks, vs))
    with learnedidx.open(tmp_path / "db", retrain="off", group_size=256) as db:
        db.put_many(ks, vs)
        assert db.stats()["groups"] > 5 and db.stats()["buffered_writes"] == 0
        assert len(db) == len(ref)
        assert list(db.items()) == sorted(ref.items())
        probe = list(ref)[::3] + [b"\xff" * 25, b"\x00"]
        assert db.get_many(probe) == [ref.get(k) for k in probe]
        db.put(b"\x00", b"new")
        db.delete(ks[0])
        ref[b"\x00"] = b"new"
        del ref[ks[0]]
    with learnedidx.open(tmp_path / "db", retrain="off") as db:
        assert list(db.items()) == sorted(ref.items())


def _groups(db) -> list[list[bytes]]:
    """The merged keys of each group, in key order."""
    live = db._live
    out = []
    for g in live.root_order():
        grp, n = live.groups[g], int(live.tab[g, L.T_N])
        out.append([grp.kbytes[grp.offs[i]:grp.offs[i + 1]].tobytes() for i in range(n)])
    return out


def _feature_lens(db) -> list[int]:
    return [max(map(len, ks)) - len(os.path.commonprefix(ks)) for ks in _groups(db) if ks]


def test_groups_are_halved_to_bound_the_feature_length():
    # 40 runs of 100 keys "ddd/" + 10 random bytes: a 512-key group spans several runs, so its
    # feature length is 12 > max_features = 10; halving down to one run brings it to 10.
    rng = np.random.default_rng(3)
    ks = sorted(b"%03d/" % (i // 100) + rng.bytes(10) for i in range(4000))
    with learnedidx.open(retrain="off", group_size=512, max_features=10) as db:
        db.put_many(ks, ks)
        sizes = [len(g) for g in _groups(db)]
        feats = _feature_lens(db)
        assert min(sizes) >= 64 and len(sizes) > 4000 // 512
        assert all(f <= 10 or n < 128 for f, n in zip(feats, sizes))  # halved as far as allowed
        assert sum(n for f, n in zip(feats, sizes) if f <= 10) > len(ks) // 4  # none without halving
        assert db.get_many(ks) == ks


def test_groups_whose_feature_length_grows_are_cut_again():
    rng = np.random.default_rng(3)
    ks = sorted({b"pre/" + b"%06d" % int(rng.integers(0, 10**6)) + rng.bytes(int(rng.integers(0, 3)))
                 for _ in range(4000)})
    with learnedidx.open(retrain="inline", group_size=512, max_features=10, buffer_threshold=8) as db:
        db.put_many(ks, ks)
        assert db.stats()["groups"] == 8 and max(_feature_lens(db)) <= 10
        extra = [k + b"-long-suffix" for k in ks[::50]]
        for k in extra:
            db.put(k, k)
        db.retrain_now()
        assert db.stats()["splits"] > 0 and db.stats()["groups"] > 8
        assert list(db) == sorted(ks + extra)
        assert db.get_many(extra) == extra


def test_scans_fold_buffered_inserts_updates_and_deletes():
    ks = [b"s%05d" % i for i in range(0, 4000, 2)]
    ref = dict.fromkeys(ks, b"old")
    with learnedidx.open(retrain="off", group_size=256) as db:
        db.put_many(ks, [b"old"] * len(ks))
        for i in range(1, 400, 2):  # buffered inserts between merged keys
            db.put(b"s%05d" % i, b"ins")
            ref[b"s%05d" % i] = b"ins"
        for i in range(100, 300, 4):  # buffered updates
            db.put(b"s%05d" % i, b"upd")
            ref[b"s%05d" % i] = b"upd"
        for i in range(1000, 1600, 2):  # a run of deletes longer than the scans below
            db.delete(b"s%05d" % i)
            del ref[b"s%05d" % i]
        for i in (4001, 4003, 5000):  # buffered keys past the last merged key
            db.put(b"s%05d" % i, b"tail")
            ref[b"s%05d" % i] = b"tail"
        sk = sorted(ref)
        for start in (b"s", b"s00050", b"s00099", b"s00990", b"s01200", b"s03990", b"s04002", b"s9"):
            j = bisect.bisect_left(sk, start)
            for n in (1, 10, 100):
                assert db.scan(start, n) == [(x, ref[x]) for x in sk[j:j + n]]
        with pytest.raises(TypeError):
            db.scan(b"s", 2.5)


def test_updates_in_place_are_not_lost_to_concurrent_merges():
    # Updates of merged keys are written in place; inserts keep the background merger busy
    # rebuilding the arrays meanwhile. Every key must end with its last value. The inserted
    # keys are new in every round (each right after a merged key), so the merger has work
    # however fast the rounds go: odd keys below 40,000 ran out after ~80 rounds, and a fast
    # writer could insert them all before the sixth merge.
    ks = [b"u%06d" % i for i in range(0, 40000, 2)]
    with learnedidx.open(retrain="background", retrain_interval=0.001, buffer_threshold=2, group_size=256) as db:
        db.put_many(ks, [b"0"] * len(ks))
        inserted = set()
        r = 0
        while db.stats()["merges"] < 6 and r < 300:
            r += 1
            for j, k in enumerate(ks):
                db.put(k, b"%d" % r)
                if j % 40 == 0:
                    nk = k + b".%03d" % r  # a new key
                    db.put(nk, b"new")
                    inserted.add(nk)
            assert db.get_many(ks[::97]) == [b"%d" % r] * len(ks[::97])
        db.retrain_now()
        assert db.stats()["merges"] >= 6 and db.stats()["buffered_writes"] == 0
        assert db.get_many(ks) == [b"%d" % r] * len(ks)
        assert db.get_many(sorted(inserted)) == [b"new"] * len(inserted)
        assert len(db) == len(ks) + len(inserted)


bulk_keys = st.lists(st.builds(lambda p, s: p + s, st.sampled_from(PREFIXES + [b"\x00" * 12]),
                               st.binary(min_size=1, max_size=30)), min_size=64, max_size=600)


@settings(max_examples=25, deadline=None)
@given(bulk_keys, st.sampled_from(["cpu", "fpga-emu"]))
def test_bulk_loaded_store_answers_like_a_dict(ks, trainer):
    ks = ks + ks[::5]  # repeats: the later value wins
    vs = [b"%d" % i for i in range(len(ks))]
    ref = dict(zip(ks, vs))
    with learnedidx.open(retrain="off", group_size=16, trainer=trainer) as db:
        db.put_many(ks, vs)
        s = db.stats()
        assert s["buffered_writes"] == 0 and s["keys"] == len(ref) and (s["retrains_full"] > 0 or len(ref) == 1)
        assert list(db.items()) == sorted(ref.items())
        absent = [k + b"\x00" for k in ks[:50] if k + b"\x00" not in ref] + [b"\xff" * 31, b"\x01"]
        probe = list(ref) + absent
        assert [db.get(k) for k in probe] == [ref.get(k) for k in probe]
        assert db.get_many(probe) == [ref.get(k) for k in probe]
        sk = sorted(ref)
        for q in absent[:10] + sk[::17]:
            i = bisect.bisect_left(sk, q)
            assert db.scan(q, 5) == [(k, ref[k]) for k in sk[i:i + 5]]
        # The memoized R of bulk-built groups carries incremental retraining on.
        new = {k + b"+": b"n" for k in sk[::3]}
        db.put_many(list(new), list(new.values()))
        db.retrain_now()
        ref.update(new)
        assert list(db.items()) == sorted(ref.items())


def test_recovery_builds_every_group_from_the_checkpoint(tmp_path):
    rng = np.random.default_rng(4)
    ks = [b"\x00" * int(rng.integers(0, 3)) + rng.bytes(int(rng.integers(1, 12))) for _ in range(6000)]
    ref = dict(zip(ks, (k[::-1] for k in ks)))
    with learnedidx.open(tmp_path / "db", retrain="off", group_size=64) as db:
        db.put_many(list(ref), list(ref.values()))
        groups = db.stats()["groups"]
    with learnedidx.open(tmp_path / "db", retrain="off", group_size=64) as db:
        s = db.stats()
        assert s["groups"] == groups and s["retrains_full"] >= groups - 1 and s["buffered_writes"] == 0
        assert db.get_many(list(ref)) == list(ref.values())
        assert list(db.items()) == sorted(ref.items())
        extra = {k + b"!": b"x" for k in list(ref)[::10]}
        for k, v in extra.items():
            db.put(k, v)
        db.retrain_now()
        assert db.stats()["retrains_incremental"] > 0
        ref.update(extra)
        assert list(db.items()) == sorted(ref.items())


def test_bulk_loads_in_several_threads_at_once():
    # They share the process's kernel thread pool.
    sets = [[b"t%d/%06d" % (t, (i * 7919) % 30000) for i in range(30000)] for t in range(3)]
    out: dict = {}

    def load(t):
        db = learnedidx.open(retrain="off", group_size=64)
        db.put_many(sets[t], sets[t])
        out[t] = db

    threads = [threading.Thread(target=load, args=(t,)) for t in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for t, db in out.items():
        assert list(db) == sorted(set(sets[t])) and db.get_many(sets[t]) == sets[t]
        db.close()
    assert len(out) == 3
