"""``train.keys``: many groups' retrains in one request, each given by its keys.  The
server builds each job's feature rows from the keys and must train exactly what the
one-group calls train from feature rows built by the client; forged requests are refused
before any key is read."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import learnedidx
from learnedidx.errors import RemoteError
from learnedidx.index.kernels import build_features
from learnedidx.index.keys import KeyBatch
from learnedidx.index.training import KeysJob
from learnedidx.server import protocol as P
from learnedidx.server.backend import ServerBackend
from learnedidx.server.client import Client
from learnedidx.server.handlers.train import MAX_KEY_JOBS
from learnedidx.server.process import spawn


def _keys(rng, n: int, stem: bytes = b"user") -> list[bytes]:
    """Sorted distinct keys of varying lengths (some shorter than the feature length)."""
    ks = {stem + rng.bytes(int(rng.integers(0, 14))) for _ in range(n)}
    return sorted(ks)


def _batch(keys: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    b = KeyBatch.from_keys(keys)
    return b.arena, b.offsets


def _jobs(rng) -> tuple[list[KeysJob], list[tuple]]:
    """Jobs of every kind, and the one-group calls that train the same: (A, b, R_old, A_delta)."""
    jobs, calls = [], []
    for i, (n, new, feat) in enumerate([(300, 0, 8), (1, 0, 3), (500, 40, 12), (200, 0, 6), (64, 64, 9)]):
        keys = _keys(rng, n, b"g%d-" % i)
        n = len(keys)
        arena, offs = _batch(keys)
        # Offsets that do not start at 0 (a group's keys inside a larger arena).
        arena = np.concatenate([np.frombuffer(b"junk", np.uint8), arena])
        offs = offs + 4
        prefix = 3
        A = build_features(arena, offs, 0, n, prefix, feat)
        b = np.arange(n, dtype=np.float64)
        if i in (2, 3, 4):  # incremental: an R from a first fit of other rows of the group
            R_old = np.linalg.qr(A[::3], mode="r")
            newk = _keys(rng, new, b"g%d-" % i)
            na, no = _batch(newk)
            A_delta = build_features(na, no, 0, len(newk), prefix, feat)
            jobs.append(KeysJob(arena, offs, prefix, feat, R_old, na, no))
            calls.append((A, b, R_old, A_delta))
        else:
            jobs.append(KeysJob(arena, offs, prefix, feat))
            calls.append((A, b, None, None))
    return jobs, calls


@pytest.mark.parametrize("device", ["cpu", "fpga-emu"])
def test_train_keys_trains_what_the_one_group_calls_train(tmp_path, device):
    proc = spawn(str(tmp_path / "accel.sock"), backend=device)
    try:
        be = ServerBackend(socket=proc.socket_path, cache_r=False)
        jobs, calls = _jobs(np.random.default_rng(7))
        got = be.train_keys(jobs)
        assert len(got) == len(jobs)
        for res, (A, b, R_old, A_delta), job in zip(got, calls, jobs):
            one = be.train_full(A, b) if R_old is None else be.train_incremental(R_old, A_delta, A, b)
            np.testing.assert_array_equal(res.R, one.R)
            np.testing.assert_array_equal(res.coef, one.coef)
            assert res.device_cycles == one.device_cycles
            assert res.coef.shape == (job.feat + 1,)
            # A group keeps its R as its memo: a view would keep the whole reply alive.
            assert res.R.base is None and res.coef.base is None
            if device == "cpu" and len(b) > A.shape[1]:
                # The oracle, by numpy: least squares (full), or SIA's normal equations
                # RᵀR x = Aᵀb with R the factor of [R_old; A_delta] (incremental).
                if R_old is None:
                    ref = np.linalg.lstsq(A, b, rcond=None)[0]
                else:
                    Rn = np.linalg.qr(np.vstack([R_old, A_delta]), mode="r")
                    ref = np.linalg.solve(Rn.T @ Rn, A.T @ b)
                np.testing.assert_allclose(A @ res.coef, A @ ref, atol=1e-6 * len(b))
        with Client(proc.socket_path) as c:
            assert c.call("stats")[0]["ops"]["train.keys"] == 1
    finally:
        proc.stop()


def test_a_job_whose_offsets_leave_its_key_bytes_is_refused_before_anything_is_sent(tmp_path):
    """The client copies the bytes each feature row reads, unchecked by bounds inside the
    compiled copy: offsets outside a job's key bytes must stop the request first."""
    proc = spawn(str(tmp_path / "accel.sock"), backend="cpu")
    try:
        be = ServerBackend(socket=proc.socket_path, cache_r=False)
        jobs, _ = _jobs(np.random.default_rng(3))
        j = jobs[2]
        for bad in (KeysJob(j.arena, j.offsets + 10_000, j.prefix, j.feat),  # the group's keys
                    KeysJob(j.arena, j.offsets, j.prefix, j.feat, j.R_old, j.new_arena, j.new_offsets - 1)):  # its new ones
            with pytest.raises(learnedidx.errors.LearnedIdxError, match="key offsets"):
                be.train_keys(jobs[:2] + [bad])
        with Client(proc.socket_path) as c:
            assert c.call("stats")[0]["ops"].get("train.keys", 0) == 0
        assert len(be.train_keys(jobs)) == len(jobs)  # and the backend serves on
    finally:
        proc.stop()


def _forged(jobs, keys, offsets, r_old=None) -> tuple[dict, dict]:
    arrays = {"keys": keys, "offsets": offsets}
    if r_old is not None:
        arrays["R_old"] = r_old
    return {"jobs": jobs}, arrays


def test_forged_train_keys_requests_are_refused_and_the_server_serves_on(tmp_path):
    from learnedidx.server.server import Server, ServerConfig

    srv = Server(ServerConfig(socket_path=str(tmp_path / "k.sock"), max_array_bytes=1 << 20))
    srv.bind()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    keys = np.frombuffer(b"aaaabbbbccccdddd", np.uint8)
    offs = np.array([0, 4, 8, 12, 16], np.int64)
    job = {"n": 4, "new": 0, "prefix": 0, "feat": 4, "incremental": False}
    bad = [
        ({"jobs": []}, {"keys": keys, "offsets": offs}),
        ({"jobs": [job] * (MAX_KEY_JOBS + 1)}, {"keys": keys, "offsets": offs}),
        ({"jobs": "all"}, {"keys": keys, "offsets": offs}),
        _forged([job], keys, np.array([0, 4, 8, 12, 17], np.int64)),  # past the keys
        _forged([job], keys, np.array([0, 8, 4, 12, 16], np.int64)),  # falling
        _forged([job], keys, np.array([-4, 4, 8, 12, 16], np.int64)),  # before the keys
        _forged([job], keys, offs.astype(np.int32)),
        _forged([job], keys.astype(np.int16), offs),
        ({"jobs": [job]}, {"keys": keys}),
        _forged([{**job, "n": 0}], keys, offs),
        _forged([{**job, "n": 3}], keys, offs),  # fewer keys than the offsets hold
        _forged([{**job, "n": 5}], keys, offs),  # more
        _forged([{**job, "n": 2}, {**job, "n": 3}], keys, offs),
        _forged([{**job, "prefix": -1}], keys, offs),
        _forged([{**job, "prefix": 2.0}], keys, offs),
        _forged([{**job, "feat": 5000}], keys, offs),
        _forged([{**job, "n": 2, "new": 2}], keys, offs),  # new rows, not incremental
        _forged([{**job, "incremental": 1}], keys, offs),
        _forged([{**job, "incremental": True}], keys, offs),  # no R_old
        _forged([{**job, "incremental": True}], keys, offs, np.eye(4).reshape(-1)),  # 16 entries, not 25
        _forged([{**job, "incremental": True}], keys, offs, np.full(25, np.nan)),
        _forged(["job"], keys, offs),
    ]
    # The feature rows the server would build are limited like the arrays a request sends:
    # 20,000 one-byte keys of 1,000 features would be 160 MB of doubles; so would 160 jobs
    # of 125 keys of 1,000 features, each within the limit.
    many = np.arange(20_001, dtype=np.int64)
    huge = [_forged([{"n": 20_000, "new": 0, "prefix": 0, "feat": 1000, "incremental": False}],
                    np.zeros(20_000, np.uint8), many),
            _forged([{"n": 125, "new": 0, "prefix": 0, "feat": 1000, "incremental": False}] * 160,
                    np.zeros(20_000, np.uint8), many)]
    try:
        with Client(srv.config.socket_path) as c:
            for (args, arrays), kind in [(b, "bad-request") for b in bad] + [(h, "too-large") for h in huge]:
                with pytest.raises(RemoteError) as e:
                    c.call("train.keys", args, arrays)
                assert e.value.kind == kind, (args, e.value)
            assert c.call("health")[0]["status"] == "ok"
            res, out = c.call("train.keys", {"jobs": [job]}, {"keys": keys, "offsets": offs})
            assert out["coef"].shape == (5,) and out["R"].shape == (25,) and len(res["cycles"]) == 1
    finally:
        srv.stop()
        t.join(5)
    assert not list(P.SHM_DIR.glob(f"{P.SHM_PREFIX}{__import__('os').getpid()}-*"))  # no segment left behind


def test_store_retrains_through_batched_requests(tmp_path):
    """A store on the server sends its due groups many to a request, and reads what a
    sorted dict holds."""
    proc = spawn(str(tmp_path / "accel.sock"), backend="cpu")
    try:
        rng = np.random.default_rng(3)
        keys = sorted({b"user%018d" % x for x in rng.integers(0, 10 ** 18, 60_000)})
        ref = {k: k[::-1] for k in keys[::2]}
        with learnedidx.open(None, group_size=1024, buffer_threshold=32, retrain="background", trainer="server",
                             trainer_options={"socket": proc.socket_path}) as db:
            db.put_many(list(ref), list(ref.values()))
            db.retrain_now()
            with Client(proc.socket_path) as c:
                before = c.call("stats")[0]["ops"]
            for k in keys[1::2]:
                db.put(k, k)
                ref[k] = k
            db.retrain_now()
            s = db.stats()
            with Client(proc.socket_path) as c:
                after = c.call("stats")[0]["ops"]
            assert not s["trainer_failed"]
            keyed = after.get("train.keys", 0) - before.get("train.keys", 0)
            one = sum(after.get(op, 0) - before.get(op, 0) for op in ("train.full", "train.incremental"))
            assert one == 0 and 0 < keyed
            assert s["retrains_incremental"] > 2 * keyed  # several groups per request
            probe = sorted(ref) + [b"user" + b"9" * 19, b"user", b"zz"]
            assert db.get_many(probe) == [ref.get(k) for k in probe]
            lo, hi = keys[1000], keys[3000]
            assert db.scan(lo, 500) == [(k, ref[k]) for k in sorted(ref) if k >= lo][:500]
            assert [k for k, _ in db.scan(lo, 10_000) if k < hi] == [k for k in sorted(ref) if lo <= k < hi]
    finally:
        proc.stop()


def test_store_trains_in_process_when_the_server_dies_mid_batch(tmp_path, caplog):
    proc = spawn(str(tmp_path / "accel.sock"), backend="cpu")
    rng = np.random.default_rng(5)
    keys = sorted({b"k%015d" % x for x in rng.integers(0, 10 ** 15, 30_000)})
    ref = {k: b"v" for k in keys[::2]}
    try:
        with learnedidx.open(None, group_size=1024, buffer_threshold=32, retrain="off", trainer="server",
                             trainer_options={"socket": proc.socket_path, "timeout": 5}) as db:
            db.put_many(list(ref), list(ref.values()))
            db.retrain_now()
            for k in keys[1::2]:
                db.put(k, b"w")
                ref[k] = b"w"
            proc.kill()
            db.retrain_now()  # every due group: the batch fails, each is trained in-process
            s = db.stats()
            assert s["trainer_failed"] is True and s["backlog"] == 0
            assert db.get_many(keys) == [ref[k] for k in keys]
    finally:
        proc.stop()
    assert any("training backend server failed" in r.getMessage() for r in caplog.records)


def _in_process_server(tmp_path, **config):
    from learnedidx.server.server import Server, ServerConfig

    srv = Server(ServerConfig(socket_path=str(tmp_path / "p.sock"), **config))
    srv.bind()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    return srv, t


def test_a_batch_past_the_servers_limit_is_sent_in_parts(tmp_path):
    """A batch whose arrays exceed the server's per-request limit (each job within it) is
    split until its parts fit; the results are those of the one-group calls."""
    jobs, calls = _jobs(np.random.default_rng(9))
    jobs, calls = jobs * 8, calls * 8
    widest = max((j.n + (len(j.new_offsets) - 1 if j.new_offsets is not None else 0)) * (j.feat + 1) * 8 for j in jobs)
    sent = sum(j.arena.nbytes + j.offsets.nbytes for j in jobs)
    assert sent > widest  # the batch is refused whole; any one job's feature matrix is allowed
    srv, t = _in_process_server(tmp_path, max_array_bytes=widest)
    (tmp_path / "plain").mkdir()
    plain, t2 = _in_process_server(tmp_path / "plain")  # the oracle's: the one-group calls send A
    try:
        got = ServerBackend(socket=srv.config.socket_path, cache_r=False).train_keys(jobs)
        assert len(got) == len(jobs)
        be = ServerBackend(socket=plain.config.socket_path, cache_r=False)
        for res, (A, b, R_old, A_delta) in zip(got, calls):
            one = be.train_full(A, b) if R_old is None else be.train_incremental(R_old, A_delta, A, b)
            np.testing.assert_array_equal(res.coef, one.coef)
        assert srv.stats["ops"]["train.keys"] >= 3  # refused whole, then sent in parts
    finally:
        for x, th in ((srv, t), (plain, t2)):
            x.stop()
            th.join(5)


def test_a_server_without_train_keys_gets_one_group_calls(tmp_path, monkeypatch):
    from learnedidx.server import registry

    monkeypatch.delitem(registry._HANDLERS, "train.keys")  # as a server of an earlier version
    srv, t = _in_process_server(tmp_path)
    try:
        be = ServerBackend(socket=srv.config.socket_path, cache_r=False)
        jobs, calls = _jobs(np.random.default_rng(10))
        got = be.train_keys(jobs)
        for res, (A, b, R_old, A_delta) in zip(got, calls):
            one = be.train_full(A, b) if R_old is None else be.train_incremental(R_old, A_delta, A, b)
            np.testing.assert_array_equal(res.R, one.R)
            np.testing.assert_array_equal(res.coef, one.coef)
        be.train_keys(jobs)
        assert srv.stats["errors"] == 1  # asked once on this connection, not for every batch
        be.client.close()  # a new connection may reach a newer server: asked again
        be.train_keys(jobs)
        assert srv.stats["errors"] == 2
    finally:
        srv.stop()
        t.join(5)
