"""Readers under concurrent writers (docs/store.md, "Thread safety"): every read answers from
one consistent state.

A writer inserts keys ``w0, w1, ...`` one after another (interleaved in key order with
stable keys that never change), and later deletes them in the same order.  A consistent
state therefore holds every stable key and a *run* of the written keys: ``w0..wj`` while
inserting, ``wi..wn`` while deleting.  A read that saw two moments would show a hole, a
duplicate, a key outside its range or a missing stable key."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import learnedidx

STABLE = [b"k%06d" % i for i in range(0, 6000, 2)]
WRITTEN = [b"k%06d!" % i for i in range(1, 6000, 2)]  # one between each two stable keys
INDEX = {k: i for i, k in enumerate(WRITTEN)}


def _check(pairs, lo=None, hi=None, complete=True) -> None:
    keys = [k for k, _ in pairs]
    assert keys == sorted(set(keys)), "duplicates or out of order"
    assert all((lo is None or k >= lo) and (hi is None or k < hi) for k in keys), "outside the range"
    stable = [k for k in keys if not k.endswith(b"!")]
    expect = [k for k in STABLE if (lo is None or k >= lo) and (hi is None or k < hi)]
    assert stable == (expect if complete else expect[:len(stable)]), "a stable key missing"
    written = sorted(INDEX[k] for k in keys if k.endswith(b"!"))
    if written:  # a run of the writer's keys, within what the range covers
        assert written == list(range(written[0], written[0] + len(written))) or _run_in_range(written, lo, hi)
    for k, v in pairs:
        assert v == (b"s" if not k.endswith(b"!") else b"w"), "a value of another key"


def _run_in_range(written, lo, hi) -> bool:
    """Within a range, a run of the writer's keys is the run cut by the range's ends."""
    inside = [i for i, k in enumerate(WRITTEN) if (lo is None or k >= lo) and (hi is None or k < hi)]
    pos = [inside.index(i) for i in written]
    return pos == list(range(pos[0], pos[0] + len(pos)))


@pytest.mark.parametrize("retrain", ["background", "inline"])
def test_every_read_is_one_state_while_a_writer_inserts_and_deletes(retrain):
    with learnedidx.open(retrain=retrain, group_size=64, buffer_threshold=8) as db:
        db.put_many(STABLE, [b"s"] * len(STABLE))
        stop = threading.Event()
        errors: list = []

        def writer():
            while not stop.is_set():
                for k in WRITTEN:
                    db.put(k, b"w")
                for k in WRITTEN:
                    db.delete(k)

        def reader(kind: int):
            try:
                n = 0
                while not stop.is_set() or n < 3:
                    n += 1
                    lo, hi = STABLE[(n * 97) % 2000], STABLE[(n * 97) % 2000 + 700]
                    if kind == 0:
                        _check(list(db.range(lo, hi)), lo, hi)
                    elif kind == 1:
                        _check(list(db.items()))
                        assert len(list(db)) >= len(STABLE)
                    elif kind == 2:
                        res = db.scan(lo, 900)
                        _check(res, lo, complete=False)
                        assert len(res) == 900  # stable keys alone are more than enough
                    else:
                        for r, start in zip(db.scan_many([lo, hi], [300, 50]), (lo, hi)):
                            _check(r, start, complete=False)
                        got = db.get_many(STABLE[:500] + WRITTEN[:500])
                        assert got[:500] == [b"s"] * 500
                        w = [i for i, v in enumerate(got[500:]) if v is not None]
                        assert w == list(range(w[0], w[0] + len(w))) if w else True
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        threading.Event().wait(4.0)
        stop.set()
        for t in threads:
            t.join(60)
        assert not errors, errors[:3]
        assert db.stats()["merges"] > 0


def test_writers_in_several_threads_each_with_its_oracle():
    """Three writers (puts, deletes, batches, each on keys of its own, interleaved in key
    order with the others') and two readers: every writer's last writes are what the store
    holds, and the readers never see a key of another's range or a torn batch."""
    with learnedidx.open(retrain="background", group_size=64, buffer_threshold=8) as db:
        refs: list[dict] = [{} for _ in range(3)]
        errors: list = []

        def writer(w: int):
            rng = np.random.default_rng(w)
            ref = refs[w]
            try:
                for i in range(4000):
                    k = b"k%05d/%d" % (int(rng.integers(3000)), w)
                    r = rng.random()
                    if r < 0.6:
                        v = b"%d-%d" % (w, i)
                        db.put(k, v)
                        ref[k] = v
                    elif r < 0.8:
                        assert db.delete(k) == (k in ref)
                        ref.pop(k, None)
                    else:
                        ks = [b"k%05d/%d" % (int(x), w) for x in rng.integers(3000, size=5)]
                        vs = [b"b%d-%d" % (w, i)] * 5
                        db.put_many(ks, vs)
                        ref.update(zip(ks, vs))
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        stop = threading.Event()

        def reader():
            try:
                while not stop.is_set():
                    for k, v in db.items():
                        assert k.endswith(v[1:2] if v.startswith(b"b") else v[:1])  # a writer's own key
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
        readers = [threading.Thread(target=reader) for _ in range(2)]
        for t in threads + readers:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        for t in readers:
            t.join()
        assert not errors, errors[:3]
        merged = {k: v for ref in refs for k, v in ref.items()}
        assert dict(db.items()) == merged and len(db) == len(merged)
        assert db.get_many(list(merged)) == list(merged.values())


def test_an_abandoned_iterator_releases_its_view():
    with learnedidx.open(retrain="off", group_size=32, buffer_threshold=4) as db:
        db.put_many([b"k%04d" % i for i in range(500)], [b"v"] * 500)
        it = db.items()
        assert next(it) == (b"k0000", b"v")
        for i in range(500):
            db.put(b"k%04d" % i, b"new")  # copies the groups the view reads
        assert len(db._live.views) == 1
        assert [v for _, v in it] == [b"v"] * 499  # the view: before the writes
        it2 = db.items()
        next(it2)
        del it2  # never exhausted: collected, it releases its view
        import gc
        gc.collect()
        assert db._live.views == []
        assert dict(db.items()) == {b"k%04d" % i: b"new" for i in range(500)}


@pytest.mark.parametrize("write", ["put", "fill", "delete", "put_many"])
def test_writes_wait_while_another_writer_holds_the_lock(write):
    """A write made without the writer lock (one compiled call) must not land while another
    writer holds it: that writer may be between two steps of a change (a fold-in sized and
    not yet copied).  It waits for the lock instead, and lands once it is free."""
    with learnedidx.open(retrain="off", group_size=64, buffer_threshold=4) as db:
        db.put_many([b"k%04d" % i for i in range(0, 400, 2)], [b"old"] * 200)
        db.put(b"k0001", b"b")
        db.put(b"k0003", b"b")
        db.put(b"k0005", b"b")  # the group's buffer holds 3 of 4
        writes = {
            "put": lambda: db.put(b"k0100", b"new"),  # an update in place
            "fill": lambda: db.put(b"k0007", b"new"),  # the insert that fills the buffer
            "delete": lambda: db.delete(b"k0100"),
            "put_many": lambda: db.put_many([b"k0100"], [b"new"]),
        }
        before = dict(db.items())
        probe = sorted(before) + [b"k0007"]
        done = threading.Event()
        with db._wlock:  # (items() would take it: read with get_many)
            t = threading.Thread(target=lambda: (writes[write](), done.set()))
            t.start()
            assert not done.wait(0.3)
            assert db.get_many(probe) == [before.get(k) for k in probe] and len(db) == len(before)
        t.join(10)
        assert done.is_set()
        after = dict(db.items())
        if write == "delete":
            assert b"k0100" not in after and len(db) == len(before) - 1
        else:
            k = b"k0007" if write == "fill" else b"k0100"
            assert after[k] == b"new" and len(db) == len(after)
        if write == "fill":
            assert db.stats()["buffered_writes"] == 0  # the full buffer was folded in
