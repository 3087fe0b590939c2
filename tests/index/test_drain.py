"""A drain the caller waits for (``retrain_now``), with a trainer that takes batches, keeps
several batches in flight: it must publish exactly what one batch at a time publishes, and
a batch that fails must leave every group it had not published due."""
from __future__ import annotations

import logging
import threading
import time

import numpy as np
import pytest

import learnedidx
from learnedidx.errors import LearnedIdxError, ServerUnavailableError
from learnedidx.index import parallel
from learnedidx.index import retrainer as RT
from learnedidx.index.qr import CpuBackend
from learnedidx.index.retrainer import BATCH_GROUPS
from learnedidx.index.training import register_backend


class _Batches:
    """Trains batches (``train_keys``) on the host; ``fail_at``: the call that raises a
    bug's error (not an offload failure, so it is not trained around)."""

    name = "test-batches"

    def __init__(self) -> None:
        self.cpu = CpuBackend()
        self.calls = 0
        self.fail_at = -1

    def train_full(self, A, b):
        return self.cpu.train_full(A, b)

    def train_incremental(self, R_old, A_delta, A, b):
        return self.cpu.train_incremental(R_old, A_delta, A, b)

    def train_keys(self, jobs):
        self.calls += 1
        if self.calls == self.fail_at:
            raise LearnedIdxError("trainer bug")
        out = []
        for j in jobs:
            A, b, A_delta = j.rows()
            out.append(self.train_full(A, b) if A_delta is None else self.cpu.train_incremental(j.R_old, A_delta, A, b))
        return out


def _keys():
    rng = np.random.default_rng(8)
    return sorted({b"user%015d" % x for x in rng.integers(0, 10 ** 15, 120_000)})


def _loaded(trainer_name: str):
    keys = _keys()
    ref = {k: k[:6] for k in keys[::2]}
    db = learnedidx.open(None, group_size=128, buffer_threshold=16, retrain="off", trainer=trainer_name)
    db.put_many(list(ref), list(ref.values()))
    db.retrain_now()
    for k in keys[1::2]:
        db.put(k, k[-6:])
        ref[k] = k[-6:]
    return db, ref


@pytest.mark.parametrize("cores", [3])
def test_batches_in_flight_publish_what_one_batch_at_a_time_does(monkeypatch, cores):
    trainer = _Batches()
    register_backend(_Batches.name, lambda: trainer)
    models = []
    for n in (1, cores):
        monkeypatch.setattr(parallel, "CORES", n)
        db, ref = _loaded(_Batches.name)
        with db:
            due = db.stats()["due_groups"]
            assert due > 3 * BATCH_GROUPS  # several batches, so several in flight
            calls = trainer.calls
            db.retrain_now()
            s = db.stats()
            assert s["backlog"] == 0 and s["due_groups"] == 0 and not s["trainer_failed"]
            assert trainer.calls - calls >= due / BATCH_GROUPS
            assert db.get_many(list(ref)) == list(ref.values())
            live = db._live
            models.append([(live.coef[g].tobytes(), None if grp.memo is None else grp.memo.R.tobytes())
                           for g, grp in enumerate(live.groups)])
    assert models[0] == models[1]


def test_a_failed_batch_leaves_its_groups_due(monkeypatch):
    trainer = _Batches()
    register_backend(_Batches.name, lambda: trainer)
    monkeypatch.setattr(parallel, "CORES", 2)
    db, ref = _loaded(_Batches.name)
    with db:
        before = db.stats()
        trainer.fail_at = trainer.calls + 2  # the second batch of the drain fails
        with pytest.raises(LearnedIdxError, match="trainer bug"):
            db.retrain_now()
        s = db.stats()
        # Which batch asks the trainer second is a race between the two pool threads: the
        # first in line, the next, or (when the next one's thread is slow to start) the
        # third, taken once the first was published, and then the second is published too.
        # Either way no group is lost: each one is trained or due, and the backlog counts
        # exactly the keys of the groups not trained.
        assert before["due_groups"] - 2 * BATCH_GROUPS <= s["due_groups"] <= before["due_groups"]
        q, groups = db._queue, db._live.groups
        assert all(g in q.due or grp.untrained == 0 for g, grp in enumerate(groups))
        assert s["backlog"] == sum(grp.untrained for grp in groups) > 0
        assert db.get_many(list(ref)) == list(ref.values())
        db.retrain_now()
        s = db.stats()
        assert s["backlog"] == 0 and s["due_groups"] == 0
        assert db.get_many(list(ref)) == list(ref.values())


def test_writes_during_a_drain_never_put_a_group_in_two_batches_in_flight(monkeypatch):
    """A writer folds a group that a batch in flight holds, making it due again while that
    batch trains: a second job for it, taken before the first is published, would count
    the first one's keys as trained twice (the group's backlog would go negative).  Here
    each of the first calls of the trainer writes enough keys into its batch's first group
    to fold it and then takes a while, so that the batch ahead of it is published and the
    next one taken while it is still in flight."""
    trainer = _Batches()
    train = trainer.train_keys
    written: dict[bytes, bytes] = {}
    store: list = []

    def train_keys(jobs):
        if trainer.calls < 100:
            j = jobs[0]
            first = j.arena[j.offsets[0]:j.offsets[1]].tobytes()
            for i in range(40):  # past buffer_threshold: the group folds and is due again
                k = first + b"%03d%03d" % (trainer.calls, i)
                store[0].put(k, b"w")
                written[k] = b"w"
            time.sleep(0.01)  # still in flight when the batch ahead is published
        return train(jobs)

    trainer.train_keys = train_keys
    register_backend(_Batches.name, lambda: trainer)
    monkeypatch.setattr(parallel, "CORES", 2)
    db, ref = _loaded(_Batches.name)
    store.append(db)
    real_publish = RT.publish
    published: list[int] = []

    def publish(live, job, f):
        published.append(job.grp.untrained - job.untrained)
        return real_publish(live, job, f)

    monkeypatch.setattr(RT, "publish", publish)
    with db:
        while trainer.calls < 100:
            db.retrain_now()
        assert min(published) >= 0  # never more keys trained than the group took
        ref.update(written)
        db.retrain_now()
        s = db.stats()
        groups = db._live.groups
        assert s["backlog"] == 0 == sum(grp.untrained for grp in groups)
        assert db.get_many(list(ref)) == [ref[k] for k in ref]


def test_batches_in_flight_when_the_trainer_answers_again_log_it_once(monkeypatch, caplog):
    """After a failure, the batches in flight together each try the trainer again; when it
    answers, the store says so once, as it says once that it failed."""
    trainer = _Batches()
    train = trainer.train_keys
    both = threading.Barrier(2, timeout=10)
    state = {"down": True, "meet": False}

    def train_keys(jobs):
        if state["down"]:
            raise ServerUnavailableError("down")
        if state["meet"]:
            try:
                both.wait()  # both batches have decided to try the trainer again
            except threading.BrokenBarrierError:
                pass
        return train(jobs)

    trainer.train_keys = train_keys
    register_backend(_Batches.name, lambda: trainer)
    monkeypatch.setattr(parallel, "CORES", 2)
    db, ref = _loaded(_Batches.name)
    with db:
        db._retrainer.retry = 0.05
        db.retrain_now()  # fails over: trained in-process
        assert db.stats()["trainer_failed"] is True
        for k in _keys()[1::4]:  # new keys in every group: all due again
            db.put(k + b"+", b"y")
            ref[k + b"+"] = b"y"
        time.sleep(0.1)
        state["down"], state["meet"] = False, True
        with caplog.at_level(logging.WARNING, logger="learnedidx.index.retrainer"):
            db.retrain_now()
        assert db.stats()["trainer_failed"] is False
        again = [r for r in caplog.records if "answers again" in r.getMessage()]
        assert len(again) == 1
        assert db.get_many(list(ref)) == [ref[k] for k in ref]


def test_a_drain_does_not_wait_for_the_background_thread_to_train_alone(monkeypatch):
    """The background thread trains ripe groups a batch at a time on one core.  A drain
    (``retrain_now``) takes over after the batch in hand, with batches in flight on every
    core, rather than waiting for the thread to get through them all.

    Events, not timing: the background thread's first batch waits at a gate until the drain
    has started, so whatever the machine's speed the thread holds one batch when the drain
    begins, and the drain must then train the rest."""
    trainer = _Batches()
    train = trainer.train_keys
    threads: list[str] = []
    in_hand, gate = threading.Event(), threading.Event()

    def train_keys(jobs):
        name = threading.current_thread().name
        threads.append(name)
        if name == "learnedidx-retrainer" and not gate.is_set():
            in_hand.set()
            assert gate.wait(60)
        return train(jobs)

    trainer.train_keys = train_keys
    register_backend(_Batches.name, lambda: trainer)
    monkeypatch.setattr(parallel, "CORES", 2)
    keys = _keys()
    ref = {k: k[:6] for k in keys[::2]}
    with learnedidx.open(None, group_size=128, buffer_threshold=16, retrain="background", trainer=_Batches.name,
                         max_backlog=1 << 24) as db:
        gate.set()  # the bulk load's own retraining passes
        db.put_many(list(ref), list(ref.values()))
        db.retrain_now()
        threads.clear()
        gate.clear()
        for k in keys[1::2]:  # every group doubles: all ripe
            db.put(k, k[-6:])
            ref[k] = k[-6:]
        assert in_hand.wait(60)  # the thread holds one batch, at the gate
        assert db.stats()["due_groups"] > 4 * BATCH_GROUPS
        drain = threading.Thread(target=db.retrain_now)
        drain.start()
        while db._queue._draining == 0:  # the drain has said it waits: the thread yields to it
            time.sleep(0.001)
        gate.set()
        drain.join(120)
        assert not drain.is_alive()
        background = threads.count("learnedidx-retrainer")
        assert background == 1 and len(threads) - background >= 4, threads
        s = db.stats()
        assert s["due_groups"] == 0 and s["backlog"] == 0
        assert db.get_many(list(ref)) == [ref[k] for k in ref]
