"""The emulated FPGA datapath against FP64 oracles, and its cycle model."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg

from learnedidx.accel.config import DeviceConfig
from learnedidx.accel.fpga import (FpgaDatapath, _augmented_t, cycles_full, cycles_incremental, householder_unit,
                                  qr_unit_cycles, tree_dot, tree_dots)
from learnedidx.errors import ConfigError
from learnedidx.index.qr import solve_full


def _group(rng, n_rows, n_feat):
    A = np.c_[np.ones(n_rows), rng.integers(0, 256, (n_rows, n_feat))].astype(float)
    b = np.argsort(np.argsort(A[:, 1] * 65536 + A[:, 2] * 256 + rng.random(n_rows))).astype(float)
    return A, b


def test_tree_dot_is_a_dot_product():
    rng = np.random.default_rng(0)
    x = rng.random(1001).astype(np.float32)
    y = rng.random(1001).astype(np.float32)
    for w in (1, 3, 8, 16):
        assert tree_dot(x, y, 5, w) == pytest.approx(float(x[5:] @ y[5:]), rel=1e-5)


def _tree_dot_spec(x, y, start, width):
    """The adder tree one dot at a time, in numpy scalars of x's dtype (every operation
    rounded to it): ``width`` products per beat, zero-padded, summed pairwise level by
    level, the beats' sums accumulated in order."""
    acc = x.dtype.type(0.0)
    for i in range(start, len(x), width):
        buf = [x[j] * y[j] for j in range(i, min(i + width, len(x)))]
        buf += [x.dtype.type(0.0)] * (width - len(buf))
        while len(buf) > 1:
            buf = [buf[2 * j] + buf[2 * j + 1] for j in range(len(buf) // 2)] + ([buf[-1]] if len(buf) % 2 else [])
        acc += buf[0]
    return acc


def _householder_spec(W, width):
    """The QR unit, one column at a time (the definition :func:`householder_unit` keeps)."""
    W = W.copy()
    n, m = W.shape
    one, two = W.dtype.type(1.0), W.dtype.type(2.0)
    for k in range(min(n, m)):
        v = W[k]
        norm2 = _tree_dot_spec(v, v, k, width)
        if norm2 == 0.0:
            continue
        norm = np.sqrt(norm2)
        xk = v[k]
        alpha = -norm if xk >= 0 else norm
        v[k] = xk - alpha
        vtv = two * (norm2 - alpha * xk)
        if vtv == 0.0:
            v[k] = alpha
            continue
        inv = two * (one / vtv)
        for j in range(k + 1, n):
            s = _tree_dot_spec(v, W[j], k, width) * inv
            W[j, k:] -= s * v[k:]
        v[k] = alpha
    return np.array([[W[j, i] if j >= i and i < min(n, m) else 0 for j in range(n)] for i in range(n)], W.dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dot_trees_are_bit_identical_to_one_dot_at_a_time(dtype):
    """The kernels run many trees side by side; every sum must be the one the tree makes
    for that dot alone, to the last bit (lengths and widths that leave partial beats)."""
    rng = np.random.default_rng(3)
    for width in (1, 2, 3, 4, 5, 8, 16, 32):
        for length in (1, 7, 8, 9, 61, 300):
            x = (rng.standard_normal(length) * 100).astype(dtype)
            y = (rng.standard_normal(length) * 100).astype(dtype)
            for start in sorted({0, 1, length // 2}):
                got = np.asarray(tree_dot(x, y, start, width), dtype)  # boxed as a Python float: exact
                assert got.tobytes() == np.asarray(_tree_dot_spec(x, y, start, width), dtype).tobytes()
            A = rng.standard_normal((length, 6)) * 1e3  # float64, taken in the device's precision
            b = np.arange(length, dtype=np.float64) * 1.1
            got = tree_dots(A, b, width, dtype(1.0))
            A_dev, b_dev = A.astype(dtype), b.astype(dtype)
            want = np.array([_tree_dot_spec(np.ascontiguousarray(A_dev[:, j]), b_dev, 0, width) for j in range(6)], dtype)
            assert got.tobytes() == want.tobytes()
    for width in (1, 3, 8, 16):
        for n, m in ((6, 40), (5, 5), (7, 4), (12, 301)):
            W = (rng.standard_normal((n, m)) * 50).astype(dtype)
            W[2] = 0.0  # a zero column: the reflector is skipped
            assert householder_unit(W.copy(), width).tobytes() == _householder_spec(W, width).tobytes()


def test_the_augmented_matrix_is_numpys():
    """The device's input, [A b; diag(ridge·||A_j||) 0] transposed in its precision, holds
    the bits numpy's casts and column norms give (norms summed row after row)."""
    rng = np.random.default_rng(4)
    for N, n in ((1, 1), (7, 3), (900, 17), (5000, 25)):
        A = rng.standard_normal((N, n)) * 10.0 ** rng.integers(-4, 5, n)
        A[:, n // 2] = 0.0
        b = rng.standard_normal(N)
        for dtype in (np.float32, np.float64):
            for bb, ridge in ((b, 1e-3), (None, 0.0), (None, 1e-6)):
                want = np.zeros((n + (bb is not None), N + (n if ridge else 0)), dtype)
                want[:n, :N] = A.T
                if bb is not None:
                    want[n, :N] = bb
                if ridge:
                    norms = np.linalg.norm(A, axis=0)
                    want[np.arange(n), N + np.arange(n)] = np.where(norms > 0, ridge * norms, 1.0)
                assert _augmented_t(A, bb, ridge, dtype).tobytes() == want.tobytes()


@pytest.mark.parametrize("precision,tol", [("fp32", 0.5), ("fp64", 1e-6)])
def test_full_training_matches_cpu_fp64(precision, tol):
    rng = np.random.default_rng(1)
    A, b = _group(rng, 8000, 16)
    dp = FpgaDatapath(DeviceConfig(precision=precision))
    R, x, cycles = dp.full(A, b)
    ref = np.linalg.lstsq(A, b, rcond=None)[0]
    assert np.abs(A @ x - A @ ref).max() < tol
    _, x_cpu = solve_full(A, b)
    assert np.abs(A @ x - A @ x_cpu).max() < tol
    Rs = scipy.linalg.qr(A, mode="r")[0][:17]
    np.testing.assert_allclose(np.abs(np.diag(R)), np.abs(np.diag(Rs)), rtol=1e-3)
    assert cycles > 0


def test_incremental_matches_full_within_fp32_tolerance():
    rng = np.random.default_rng(2)
    A, b = _group(rng, 6000, 12)
    dp = FpgaDatapath()
    R_old, _, _ = dp.full(A[:5000], b[:5000])
    _, x_inc, _ = dp.incremental(R_old, A[5000:], A, b)
    ref = A @ np.linalg.lstsq(A, b, rcond=None)[0]
    assert np.abs(A @ x_inc - ref).max() < 1.0


def test_degenerate_columns_stay_finite():
    rng = np.random.default_rng(3)
    A, b = _group(rng, 2000, 10)
    A[:, 5] = 0.0
    A[:, 6] = 48.0
    _, x, _ = FpgaDatapath().full(A, b)
    assert np.all(np.isfinite(x))
    assert np.abs(A @ x - A @ np.linalg.lstsq(A, b, rcond=None)[0]).max() < 1.0


def test_too_many_features_is_refused():
    with pytest.raises(ValueError):
        FpgaDatapath(DeviceConfig(max_features=8)).full(np.ones((100, 12)), np.arange(100.0))


def test_cycle_model_is_monotone():
    base = DeviceConfig()
    c = cycles_full(base, 100_000, 33)
    assert cycles_full(DeviceConfig(units=8), 100_000, 33) < c
    assert cycles_full(DeviceConfig(inner_pes=6), 100_000, 33) < c
    assert cycles_full(DeviceConfig(dot_width=16), 100_000, 33) < c
    assert cycles_full(base, 200_000, 33) > c
    assert cycles_full(DeviceConfig(link_gbps=1.0), 100_000, 33) > c
    assert cycles_incremental(base, 100_000, 33, 1000) < c


def test_a_qr_unit_is_charged_its_schedule():
    """One PU factoring an m × n block, column by column: the outer PE streams the column
    through the dot tree (a beat per ``dot_width`` inputs, the tree's depth and the
    accumulator), then a square root, a reciprocal and an add; the inner PEs take the
    remaining columns ``inner_pes`` at a time, each a dot, a scaled subtraction streamed at a
    beat per ``dot_width`` entries, a multiply and an add."""
    def dot(cfg, r):
        return -(-r // cfg.dot_width) + max(1, math.ceil(math.log2(cfg.dot_width))) * cfg.lat_add + cfg.lat_add + cfg.lat_mul

    def spec(cfg, m, n):
        total = 0
        for k in range(min(m, n)):
            r = m - k
            total += dot(cfg, r) + cfg.lat_sqrt + cfg.lat_recip + cfg.lat_add
            total += -(-(n - k - 1) // cfg.inner_pes) * (dot(cfg, r) + -(-r // cfg.dot_width) + cfg.lat_mul + cfg.lat_add)
        return total

    for cfg in (DeviceConfig(), DeviceConfig(dot_width=3, inner_pes=4, lat_add=1), DeviceConfig(dot_width=16, lat_sqrt=30)):
        for m, n in ((0, 5), (1, 1), (7, 33), (66, 33), (125, 18), (9999, 33)):
            got = qr_unit_cycles(cfg, m, n)
            assert type(got) is int and got == spec(cfg, m, n)


def test_config_file_and_bad_values(tmp_path):
    f = tmp_path / "dev.toml"
    f.write_text("units = 2\nclock_mhz = 300.0\n")
    cfg = DeviceConfig.load(f, inner_pes=5)
    assert (cfg.units, cfg.clock_mhz, cfg.inner_pes) == (2, 300.0, 5)
    with pytest.raises(ConfigError):
        DeviceConfig.load(None, units=0)
    with pytest.raises(ConfigError):
        DeviceConfig.load(None, warp_drive=1)
    assert DeviceConfig.parse_settings(["units=8", "clock_mhz=300", "precision=fp64"]) == \
        {"units": 8, "clock_mhz": 300.0, "precision": "fp64"}
    for bad in (["units"], ["units=eight"], ["warp=1"]):
        with pytest.raises(ConfigError):
            DeviceConfig.parse_settings(bad)


def test_fp32_arithmetic_is_really_fp32_and_r_resident_skips_the_transfer():
    rng = np.random.default_rng(5)
    A, b = _group(rng, 4000, 8)
    x32 = FpgaDatapath(DeviceConfig(precision="fp32")).full(A, b)[1]
    x64 = FpgaDatapath(DeviceConfig(precision="fp64", dot_width=8)).full(A, b)[1]
    rel = np.abs(A @ x32 - A @ x64).max() / np.abs(A @ x64).max()
    assert 1e-9 < rel < 1e-3  # FP32 rounding shows, within FP32 tolerance
    cfg = DeviceConfig()
    assert cycles_incremental(cfg, 4000, 9, 40, r_resident=True) < cycles_incremental(cfg, 4000, 9, 40)


def test_store_trained_on_the_emulated_device_answers_like_cpu():
    import learnedidx

    keys = [b"user%07d" % (i * 7919 % 1000003) for i in range(6000)]
    with learnedidx.open(retrain="off", group_size=512, trainer="fpga-emu") as fpga, \
            learnedidx.open(retrain="off", group_size=512) as cpu:
        for db in (fpga, cpu):
            db.put_many(keys[:5000], keys[:5000])
            for k in keys[5000:]:
                db.put(k, k[::-1])
            db.retrain_now()
        assert fpga.stats()["device_cycles"] > 0 and not fpga.stats()["trainer_failed"]
        assert fpga.stats()["retrains_incremental"] > 0
        probe = keys + [b"user-missing%d" % i for i in range(100)]
        assert fpga.get_many(probe) == cpu.get_many(probe)
        assert fpga.scan(keys[17], 50) == cpu.scan(keys[17], 50)


@pytest.mark.parametrize("precision", ["fp32", "fp64"])
def test_a_job_given_by_its_keys_is_the_job_of_its_rows(precision):
    """``FpgaDatapath.keys`` (rows built and trained in one compiled call) answers exactly,
    to the bit, what the datapath answers for the job's feature rows (``KeysJob.rows``), and
    ``full`` is the composition of the units the tests above pin down."""
    from learnedidx.accel.fpga import tsqr
    from learnedidx.index.qr import back_substitute
    from learnedidx.index.training import KeysJob

    rng = np.random.default_rng(5)
    dp = FpgaDatapath(DeviceConfig(precision=precision))

    def batch(n):
        ks = sorted({b"pre%0*d" % (int(rng.integers(4, 12)), x) for x in rng.integers(0, 10 ** 12, n)})
        pad = b"junk"  # the offsets need not start at 0
        arena = np.frombuffer(pad + b"".join(ks), np.uint8)
        return arena, np.cumsum([len(pad)] + [len(k) for k in ks]).astype(np.int64)

    arena, offs = batch(3000)
    full = KeysJob(arena, offs, 3, 9)
    A, b, _ = full.rows()
    R, x, cycles = dp.keys(full)
    assert (R.tobytes(), x.tobytes(), cycles) == tuple(v.tobytes() if hasattr(v, "tobytes") else v
                                                       for v in dp.full(A, b))
    Raug = tsqr(_augmented_t(A, b, dp.ridge, dp.dtype), dp.blocks, dp.cfg.dot_width)
    assert R.tobytes() == Raug[:10, :10].astype(np.float64).tobytes()
    assert x.tobytes() == back_substitute(Raug[:10, :10], np.ascontiguousarray(Raug[:10, 10])).astype(np.float64).tobytes()
    new_arena, new_offs = batch(400)
    for job in (KeysJob(arena, offs, 3, 9, R, new_arena, new_offs), KeysJob(arena, offs, 3, 9, R)):
        A, b, A_delta = job.rows()
        got = dp.keys(job)
        want = dp.incremental(R, A_delta, A, b)
        assert got[0].tobytes() == want[0].tobytes() and got[1].tobytes() == want[1].tobytes() and got[2] == want[2]
        assert np.allclose(A @ got[1], b, atol=len(b))  # and it is a fit


def test_many_jobs_in_one_call_are_each_job_alone():
    """``keys_many`` (one compiled call for a batch: a background retrainer takes the GIL
    back once per batch) answers each job exactly as ``keys`` answers it alone; a job with
    offsets past its key bytes anywhere in the batch refuses the batch."""
    from learnedidx.errors import LearnedIdxError
    from learnedidx.index.training import KeysJob

    rng = np.random.default_rng(8)
    dp = FpgaDatapath()

    def keys(n, width):
        ks = sorted({b"k%0*d" % (width, x) for x in rng.integers(0, 10 ** width, n)})
        return np.frombuffer(b"".join(ks), np.uint8), np.cumsum([0] + [len(k) for k in ks]).astype(np.int64)

    jobs = []
    for n, width, feat in ((500, 6, 6), (2000, 9, 9), (40, 12, 5), (900, 7, 7)):
        arena, offs = keys(n, width)
        jobs.append(KeysJob(arena, offs, 1, feat))
    R0 = dp.keys(jobs[1])[0]
    new_arena, new_offs = keys(100, 9)
    jobs += [KeysJob(jobs[1].arena, jobs[1].offsets, 1, 9, R0, new_arena, new_offs),
             KeysJob(jobs[1].arena, jobs[1].offsets, 1, 9, R0)]
    together = dp.keys_many(jobs)
    for job, (R, x, cycles) in zip(jobs, together):
        alone = dp.keys(job)
        assert (R.tobytes(), x.tobytes(), cycles) == (alone[0].tobytes(), alone[1].tobytes(), alone[2])
    bad = KeysJob(jobs[0].arena, jobs[0].offsets + 1, 1, 6)  # its last key runs past the bytes
    with pytest.raises(LearnedIdxError, match="past the key bytes"):
        dp.keys_many([jobs[2], bad, jobs[3]])


def test_a_job_given_by_its_keys_is_checked_before_the_compiled_call():
    from learnedidx.errors import LearnedIdxError
    from learnedidx.index.training import KeysJob

    arena = np.frombuffer(b"abcdefgh", np.uint8)
    dp = FpgaDatapath()
    with pytest.raises(LearnedIdxError, match="past the key bytes"):
        dp.keys(KeysJob(arena, np.array([0, 4, 9], np.int64), 0, 4))
    with pytest.raises(LearnedIdxError, match="past the key bytes"):
        dp.keys(KeysJob(arena, np.array([0, 4, 8], np.int64), 0, 4, np.eye(5), arena, np.array([-1, 3], np.int64)))
    with pytest.raises(LearnedIdxError, match="R_old of shape"):
        dp.keys(KeysJob(arena, np.array([0, 4, 8], np.int64), 0, 4, np.eye(4)))


def _weighted_window(db) -> float:
    from learnedidx.index import layout as L

    tab = db._live.tab[db._live.root_order()]
    n = tab[:, L.T_N]
    return float(((tab[:, L.T_ERRHI] - tab[:, L.T_ERRLO] + 1) * n).sum() / n.sum())


def test_models_trained_on_the_fp32_device_are_as_narrow_as_cpu_ones():
    """The FP32 device's fits of groups of YCSB-like keys (decimal numbers of varying length
    after a shared prefix) predict positions off by hundreds; the store refines each answer
    on the host with the device's own R (float64 residuals), so lookups search windows as
    narrow as with the cpu trainer's float64 fits."""
    import learnedidx

    rng = np.random.default_rng(9)
    keys = [b"user%d" % x for x in rng.integers(0, 2 ** 63 - 1, 120_000, dtype=np.int64)]
    windows = {}
    for trainer in ("cpu", "fpga-emu"):
        with learnedidx.open(retrain="background", trainer=trainer) as db:
            db.put_many(keys[:20_000], keys[:20_000])
            for k in keys[20_000:]:  # groups grow by fold-ins and retrain incrementally
                db.put(k, k)
            db.retrain_now()
            st = db.stats()
            assert st["retrains_incremental"] > 0 and not st["trainer_failed"]
            windows[trainer] = _weighted_window(db)
            assert db.get_many(keys[::7]) == keys[::7]
    assert windows["fpga-emu"] <= 1.25 * windows["cpu"] + 8, windows
