"""The emulated FPGA datapath against FP64 oracles, and its cycle model."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg

from learnedidx.accel.config import DeviceConfig
from learnedidx.accel.fpga import FpgaDatapath, cycles_full, cycles_incremental, tree_dot
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
