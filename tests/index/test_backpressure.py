"""Bounded buffers and backpressure (docs/store.md, "Buffers, retraining and
backpressure"): insert buffers never hold more than ``buffer_threshold`` keys a group, and a
writer that outruns the background retrainer waits for it instead of letting the backlog
of untrained keys grow."""
from __future__ import annotations

import threading
import time

import pytest

import learnedidx
from learnedidx.index.qr import CpuBackend


class SlowBackend:
    """The cpu backend, ``delay`` seconds slower per group (and stoppable by an event)."""

    name = "slow"

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.cpu = CpuBackend()
        self.go = threading.Event()
        self.go.set()

    def train_full(self, A, b):
        self.go.wait()
        time.sleep(self.delay)
        return self.cpu.train_full(A, b)

    def train_incremental(self, R_old, A_delta, A, b):
        self.go.wait()
        time.sleep(self.delay)
        return self.cpu.train_incremental(R_old, A_delta, A, b)


def _keys(n: int, tag: bytes = b"k") -> list[bytes]:
    return [tag + b"%07d" % ((i * 7919) % 1_000_003) for i in range(n)]


def test_a_writer_outrunning_the_retrainer_stalls_and_the_backlog_stays_bounded():
    limit, B = 300, 8
    with learnedidx.open(retrain="background", trainer=SlowBackend(0.004), max_backlog=limit,
                         buffer_threshold=B, group_size=32) as db:
        seen = 0
        for k in _keys(4000):
            db.put(k, b"v")
            s = db.stats()
            seen = max(seen, s["backlog"])
            assert s["buffered_writes"] <= s["groups"] * B
        s = db.stats()
        assert s["stalls"] > 0 and s["stall_seconds"] > 0
        # A write that takes the backlog past the limit returns once it is back under it.
        assert limit // 2 <= seen <= limit
        db.retrain_now()
        assert db.stats()["backlog"] == 0 and db.stats()["due_groups"] == 0
        assert db.get_many(_keys(4000)) == [b"v"] * 4000


def test_readers_go_on_while_a_writer_is_stalled():
    trainer = SlowBackend(0.0)
    with learnedidx.open(retrain="background", trainer=trainer, max_backlog=16, buffer_threshold=4,
                         group_size=16) as db:
        db.put_many(_keys(200, b"r"), [b"r"] * 200)
        trainer.go.clear()  # the retrainer stops: the writer below stalls
        done = threading.Event()

        def writer():
            for k in _keys(400, b"w"):
                db.put(k, b"w")
            done.set()

        t = threading.Thread(target=writer)
        t.start()
        deadline = time.time() + 10
        while db.stats()["backlog"] <= 16 and time.time() < deadline:
            time.sleep(0.01)
        assert not done.is_set()  # stalled
        assert db.get_many(_keys(200, b"r")) == [b"r"] * 200  # readers take no lock
        assert list(db.range(b"r", b"s")) == sorted((k, b"r") for k in _keys(200, b"r"))
        trainer.go.set()
        t.join(20)
        assert done.is_set() and db.stats()["stalls"] > 0


@pytest.mark.parametrize("mode", ["inline", "off"])
def test_inline_stores_never_stall_and_off_never_retrains_until_asked(mode):
    with learnedidx.open(retrain=mode, max_backlog=10, buffer_threshold=4, group_size=16) as db:
        for k in _keys(1000):
            db.put(k, b"v")
            if mode == "inline":
                assert db.stats()["backlog"] == 0
        s = db.stats()
        assert s["stalls"] == 0
        if mode == "off":
            assert s["backlog"] > 10 and s["retrains_incremental"] == 0
            db.retrain_now()
            assert db.stats()["backlog"] == 0
        assert db.get_many(_keys(1000)) == [b"v"] * 1000


def _retrains(db) -> int:
    s = db.stats()
    return s["retrains_full"] + s["retrains_incremental"]


def _wait_for(cond, seconds: float = 10.0) -> bool:
    deadline = time.time() + seconds
    while not cond() and time.time() < deadline:
        time.sleep(0.01)
    return cond()


@pytest.mark.parametrize("after", [0.0, 0.5])
def test_the_background_thread_retrains_a_group_once_it_took_retrain_after_of_its_keys(after):
    old, new = _keys(256), _keys(400, b"n")[:140]
    with learnedidx.open(retrain="background", retrain_after=after, buffer_threshold=8, group_size=256) as db:
        db.put_many(old, old)  # one group, trained
        assert db.stats()["groups"] == 1
        base = _retrains(db)
        for k in new[:64]:  # a quarter of its keys, in 8 fold-ins
            db.put(k, k)
        if after:
            time.sleep(0.3)
            assert _retrains(db) == base and db.stats()["due_groups"] == 1 and db.stats()["backlog"] == 64
        else:
            assert _wait_for(lambda: db.stats()["backlog"] == 0) and _retrains(db) > base
        for k in new[64:]:  # past half of its keys
            db.put(k, k)
        assert _wait_for(lambda: _retrains(db) > base)
        db.retrain_now()
        assert db.stats()["backlog"] == 0 and db.stats()["due_groups"] == 0
        assert db.get_many(old + new) == old + new


def test_writers_waiting_for_the_backlog_get_groups_retrained_before_they_are_ripe():
    limit = 48
    with learnedidx.open(retrain="background", retrain_after=1e9, max_backlog=limit, buffer_threshold=4,
                         group_size=32) as db:
        seen = 0
        for k in _keys(1500):
            db.put(k, b"v")
            seen = max(seen, db.stats()["backlog"])
        assert db.stats()["stalls"] > 0 and seen <= limit  # no deadlock: unripe groups were retrained
        assert db.get_many(_keys(1500)) == [b"v"] * 1500
