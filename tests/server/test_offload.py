"""The store offloading its retraining to the server: R kept on the device, timeouts, and the
server killed in the middle of a YCSB run."""
from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time

import numpy as np
import pytest

import learnedidx
from learnedidx.server.backend import ServerBackend
from learnedidx.errors import RemoteError
from learnedidx.server.client import Client
from learnedidx.server.process import spawn
from learnedidx.workloads.peers import warm_up_learned_index
from learnedidx.workloads.spec import INSERT, READ, RMW, SCAN, UPDATE, KeySpace, Workload, load_properties, load_stream, run_stream


def _fallback_warnings(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == logging.WARNING and "training backend" in r.getMessage()]


def test_memoized_r_stays_on_the_server(server):
    rng = np.random.default_rng(4)
    A = np.c_[np.ones(3000), rng.integers(0, 256, (3000, 12))].astype(float)
    b = np.argsort(np.argsort(A[:, 1] * 256 + A[:, 2] + rng.random(3000))).astype(float)
    cached, plain = ServerBackend(socket=server.socket_path), ServerBackend(socket=server.socket_path, cache_r=False)
    r0 = cached.train_full(A[:2500], b[:2500])
    r1 = cached.train_incremental(r0.R, A[2500:], A, b)
    ref = plain.train_incremental(r0.R, A[2500:], A, b)
    assert r1.info["r_cached"] and not ref.info["r_cached"]
    np.testing.assert_array_equal(r1.R, ref.R)  # the same job, only R did not travel
    np.testing.assert_array_equal(r1.coef, ref.coef)
    assert r1.device_cycles < ref.device_cycles  # no host-to-device transfer of R charged
    assert cached.train_incremental(r1.R, A[:0], A, b).info["r_cached"]  # version 2 of the group
    # An R the server does not hold under the remembered version: cache miss, R is resent.
    cached._remember(r1.R, "not-on-the-server", 7)
    r3 = cached.train_incremental(r1.R, A[:0], A, b)
    assert not r3.info["r_cached"] and np.array_equal(r3.coef, r1.coef)
    with Client(server.socket_path) as c:
        with pytest.raises(RemoteError) as e:
            c.call("train.incremental", {"group": "nope", "version": 3}, {"A_delta": A[:0], "A": A, "b": b})
        assert e.value.kind == "cache-miss"
        with pytest.raises(RemoteError) as e:
            c.call("train.full", {"group": 5}, {"A": A, "b": b})
        assert e.value.kind == "bad-request"
        dev = c.call("stats")[0]["device"]
    assert dev["r_cache"]["hits"] == 2 and dev["r_cache"]["misses"] == 2


def test_silent_server_times_out_and_store_trains_in_process(tmp_path, caplog):
    path = str(tmp_path / "silent.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    held: list[socket.socket] = []

    def hold() -> None:  # accept and never answer, until the listener is closed
        with contextlib.suppress(OSError):
            for _ in range(8):
                held.append(listener.accept()[0])

    acceptor = threading.Thread(target=hold, daemon=True)
    acceptor.start()
    keys = [b"key%06d" % (i * 37 % 10007) for i in range(2000)]
    warm_up_learned_index()  # compiling kernels (a cold cache) is not what the time bound is about
    try:
        with learnedidx.open(retrain="off", group_size=128, trainer="server",
                             trainer_options={"socket": path, "timeout": 0.3}) as db:
            t0 = time.time()
            for i, k in enumerate(keys):
                db.put(k, b"v%d" % i)
                if i % 500 == 499:
                    db.retrain_now()
            assert time.time() - t0 < 10  # one timeout, then in-process
            assert db.stats()["trainer_failed"] is True
            assert db.get_many(keys) == [b"v%d" % i for i in range(len(keys))]
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        acceptor.join(5)
        for s in held:
            s.close()
    assert len(_fallback_warnings(caplog)) == 1


def test_server_killed_during_ycsb_run_loses_no_acknowledged_write(tmp_path, caplog):
    """Kill -9 the server while the store retrains on it during a YCSB run; then restart it
    and reopen the store from its log: every acknowledged write is readable throughout."""
    sock, data = str(tmp_path / "y.sock"), str(tmp_path / "db")
    w = Workload.from_properties(load_properties("D'"), {"recordcount": "4000", "operationcount": "16000",
                                                         "readproportion": "0.6", "insertproportion": "0.4"})
    ks = KeySpace(w)
    load, run = load_stream(w, ks), run_stream(w, ks)
    proc = spawn(sock, backend="fpga-emu")
    opts = dict(sync="off", group_size=256, buffer_threshold=8, retrain="background", retrain_interval=0.005,
                trainer="server", trainer_options={"socket": sock, "timeout": 10})
    acked = dict(zip(load.keys, load.values))
    killed_at: list[int] = []
    i = 0
    try:
        with learnedidx.open(data, **opts) as db:
            db.put_many(load.keys, load.values)

            def killer() -> None:  # as soon as the server has trained something, kill it
                while db.stats()["device_cycles"] == 0 and i < len(run.ops) - 1:
                    time.sleep(0.001)
                killed_at.append(i)
                proc.kill()

            t = threading.Thread(target=killer)
            t.start()
            for i, (op, k, v) in enumerate(zip(run.ops.tolist(), run.keys, run.values)):  # noqa: B007 - killer() reads i
                if op in (INSERT, UPDATE, RMW):
                    db.put(k, v)
                    acked[k] = v
                elif op == READ:
                    assert db.get(k) == acked.get(k)
                elif op == SCAN:
                    db.scan(k, 5)
            t.join()
            db.retrain_now()
            s = db.stats()
            assert s["trainer_failed"] is True and s["device_cycles"] > 0
            assert killed_at and killed_at[0] < len(run.ops) - 1  # the kill landed mid-run
            assert db.get_many(list(acked)) == list(acked.values()) and len(db) == len(acked)
        assert len(_fallback_warnings(caplog)) == 1
        proc = spawn(sock, backend="fpga-emu")  # replaces the stale socket of the killed server
        with learnedidx.open(data, **opts) as db:
            assert db.get_many(list(acked)) == list(acked.values()) and len(db) == len(acked)
            db.put(b"after-restart", b"x")
            db.retrain_now()
            assert db.stats()["trainer_failed"] is False and db[b"after-restart"] == b"x"
    finally:
        proc.stop()


def test_store_offloads_again_once_a_restarted_server_answers(tmp_path, caplog):
    sock = str(tmp_path / "r.sock")
    proc = spawn(sock, backend="cpu")
    keys = [b"key%06d" % (i * 37 % 10007) for i in range(3000)]
    try:
        with learnedidx.open(retrain="off", group_size=128, trainer="server", trainer_retry=0.2,
                             trainer_options={"socket": sock, "timeout": 5}) as db:
            db.put_many(keys[:1000], keys[:1000])
            proc.kill()
            for k in keys[1000:2000]:
                db.put(k, k)
            db.retrain_now()
            assert db.stats()["trainer_failed"] is True
            proc = spawn(sock, backend="cpu", warm=True)  # its kernels compiled (a cold cache takes seconds)
            time.sleep(0.3)
            for k in keys[2000:]:
                db.put(k, k)
            db.retrain_now()
            assert db.stats()["trainer_failed"] is False
            with Client(sock) as c:
                assert c.call("stats")[0]["device"]["jobs"] > 0  # the restarted server trained
            assert db.get_many(keys) == keys
        msgs = [r.getMessage() for r in _fallback_warnings(caplog)]
        assert len(msgs) == 2 and "failed" in msgs[0] and "answers again" in msgs[1]
    finally:
        proc.stop()


def test_store_wider_than_the_server_device_is_refused_at_open(server, tmp_path):
    with Client(server.socket_path) as c:
        assert c.call("health")[0]["max_features"] == 32  # fpga-emu, default device
    with pytest.raises(learnedidx.errors.ConfigError, match="max_features 40 exceeds the 32"):
        learnedidx.open(trainer="server", trainer_options={"socket": server.socket_path}, max_features=40)
    # Not reachable at open: nothing to check against, the store opens (and falls back later).
    with learnedidx.open(trainer="server", trainer_options={"socket": str(tmp_path / "none.sock")},
                         max_features=40, retrain="off") as db:
        db.put_many([b"k%05d" % i for i in range(6000)], [b"v"] * 6000)
        assert db.stats()["trainer_failed"] is True and db.get(b"k00001") == b"v"


def test_a_device_refusal_is_not_taken_for_a_failure(server, caplog):
    """A configuration error of the request (a job wider than the device) is raised, not
    answered by training in-process (that would hide the misconfiguration)."""
    backend = ServerBackend(socket=server.socket_path)
    A = np.ones((100, 40))
    with pytest.raises(RemoteError) as e:
        backend.train_full(A, np.arange(100.0))
    assert e.value.kind == "config"
    from learnedidx.index.options import StoreOptions
    from learnedidx.index.retrainer import Retrainer

    r = Retrainer(StoreOptions(trainer=backend, max_features=8))
    with pytest.raises(RemoteError):
        r.train(A, np.arange(100.0), None, None)
    assert r.failed is False and not _fallback_warnings(caplog)
