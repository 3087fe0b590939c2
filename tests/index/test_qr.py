"""The cpu training backend against scipy/numpy oracles."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from hypothesis import given, settings
from hypothesis import strategies as st

from learnedidx.index.qr import CpuBackend, solve_full, solve_incremental
from learnedidx.index.training import get_backend


def _features(rng, n_rows, n_feat):
    return np.c_[np.ones(n_rows), rng.integers(0, 256, (n_rows, n_feat))].astype(np.float64)


def _same_up_to_row_signs(R1, R2, rtol=1e-6):
    s1 = np.sign(np.diag(R1))[:, None]
    s2 = np.sign(np.diag(R2))[:, None]
    np.testing.assert_allclose(R1 * s1, R2 * s2, rtol=rtol, atol=1e-6 * np.abs(R2).max())


def test_full_matches_scipy_qr_and_lstsq():
    rng = np.random.default_rng(0)
    A = _features(rng, 2000, 12)
    b = np.arange(2000.0)
    R, x = solve_full(A, b)
    _same_up_to_row_signs(R, scipy.linalg.qr(A, mode="r")[0][:13])
    np.testing.assert_allclose(x, np.linalg.lstsq(A, b, rcond=None)[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("delta", [1, 10, 500])
def test_incremental_equals_full_on_union(delta):
    rng = np.random.default_rng(delta)
    A = _features(rng, 3000, 16)
    b = rng.permutation(3000).astype(float)
    R_old, _ = solve_full(A[:-delta], b[:-delta])
    R_inc, x_inc = solve_incremental(R_old, A[-delta:], A, b)
    R_full, x_full = solve_full(A, b)
    _same_up_to_row_signs(R_inc, R_full)
    np.testing.assert_allclose(x_inc, x_full, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(x_inc, np.linalg.lstsq(A, b, rcond=None)[0], rtol=1e-5, atol=1e-5)


def test_repeated_increments_stay_exact():
    rng = np.random.default_rng(7)
    A = _features(rng, 4000, 8)
    b = np.arange(4000.0)
    R, _ = solve_full(A[:1000], b[:1000])
    for end in range(1100, 4001, 300):
        R, x = solve_incremental(R, A[end - 300 if end > 1100 else 1000:end], A[:end], b[:end])
    np.testing.assert_allclose(x, np.linalg.lstsq(A[:end], b[:end], rcond=None)[0], rtol=1e-5, atol=1e-5)


def test_rank_deficient_columns_give_finite_lstsq_predictions():
    rng = np.random.default_rng(3)
    A = _features(rng, 500, 10)
    A[:, 4] = 0.0  # zero padding
    A[:, 7] = 42.0  # constant byte: collinear with the bias
    b = np.arange(500.0)
    R, x = solve_full(A, b)
    assert np.all(np.isfinite(x)) and np.all(np.isfinite(R))
    ref = A @ np.linalg.lstsq(A, b, rcond=None)[0]
    np.testing.assert_allclose(A @ x, ref, atol=1e-4)
    R2, x2 = solve_incremental(solve_full(A[:400], b[:400])[0], A[400:], A, b)
    np.testing.assert_allclose(A @ x2, ref, atol=1e-4)


@settings(max_examples=30)
@given(n_rows=st.integers(2, 300), n_feat=st.integers(0, 20), split=st.floats(0.1, 0.95), seed=st.integers(0, 2**32 - 1))
def test_property_incremental_predictions_equal_lstsq(n_rows, n_feat, split, seed):
    rng = np.random.default_rng(seed)
    A = _features(rng, n_rows, n_feat)
    b = np.sort(rng.random(n_rows)) * n_rows
    cut = max(1, int(n_rows * split))
    R_old, _ = solve_full(A[:cut], b[:cut])
    _, x = solve_incremental(R_old, A[cut:], A, b)
    assert np.all(np.isfinite(x))
    # SIA's claim: incremental training equals full training on the union.
    np.testing.assert_allclose(A @ x, A @ solve_full(A, b)[1], atol=1e-6 * max(1.0, n_rows))
    if n_rows >= 2 * (n_feat + 1):
        # Well-posed: both equal the least-squares fit.  (On nearly square, ill-conditioned
        # systems the ridge term moves the fit away from lstsq's exact interpolation.)
        ref = A @ np.linalg.lstsq(A, b, rcond=None)[0]
        np.testing.assert_allclose(A @ x, ref, atol=1e-3 * max(1.0, n_rows))


def test_backend_registry_and_result():
    backend = get_backend("cpu")
    assert isinstance(backend, CpuBackend)
    rng = np.random.default_rng(1)
    A = _features(rng, 100, 4)
    res = backend.train_full(A, np.arange(100.0))
    assert res.R.shape == (5, 5) and res.coef.shape == (5,) and res.seconds >= 0
    with pytest.raises(ValueError):
        get_backend("no-such-backend")
