"""Householder QR and SIA incremental least squares, in Numba: the ``cpu`` backend.

Rank deficiency is normal for key features (zero padding, byte positions constant in a
group).  Every factorization therefore includes ``RIDGE`` rows ``sqrt(λ)·I`` once (a tiny
Tikhonov term): ``RᵀR = AᵀA + λI`` stays invertible, the coefficients of degenerate
columns go to the minimum-norm split, and predictions match ``numpy.linalg.lstsq`` to
~1e-9 relative.  The memoized R already holds the ridge rows, so incremental training
(which stacks only new rows onto it) equals full training on the union.
"""
from __future__ import annotations

import time

import numpy as np
from numba import njit

from learnedidx.index.training import TrainResult

RANK_TOL = 1e-300
RIDGE = 1e-6


@njit(cache=True, nogil=True)
def householder_r(A: np.ndarray, b: np.ndarray) -> tuple:
    """QR of ``A`` (N×n) by Householder reflections; returns (R n×n, Qᵀb[:n]).

    Works on a transposed copy so each column is contiguous in memory; reflectors are
    applied column by column (the order the FPGA's outer-loop PE and inner-loop PEs use).
    """
    N, n = A.shape
    W = np.ascontiguousarray(A.T)  # W[j] is column j of A
    y = b.copy()
    k_max = min(N, n)
    for k in range(k_max):
        v = W[k]
        norm2 = 0.0
        for i in range(k, N):
            norm2 += v[i] * v[i]
        norm = np.sqrt(norm2)
        if norm == 0.0:
            continue
        alpha = -norm if v[k] >= 0 else norm
        # v = x - alpha e1 in place; vᵀv = 2 (norm² - alpha x_k)
        xk = v[k]
        v[k] = xk - alpha
        vtv = 2.0 * (norm2 - alpha * xk)
        if vtv == 0.0:
            v[k] = alpha
            continue
        inv = 2.0 / vtv
        for j in range(k + 1, n):
            w = W[j]
            s = 0.0
            for i in range(k, N):
                s += v[i] * w[i]
            s *= inv
            for i in range(k, N):
                w[i] -= s * v[i]
        s = 0.0
        for i in range(k, N):
            s += v[i] * y[i]
        s *= inv
        for i in range(k, N):
            y[i] -= s * v[i]
        v[k] = alpha
    R = np.zeros((n, n))
    for i in range(k_max):
        for j in range(i, n):
            R[i, j] = W[j, i]
    qtb = np.zeros(n)
    for i in range(k_max):
        qtb[i] = y[i]
    return R, qtb


@njit(cache=True, nogil=True)
def _active_mask(R: np.ndarray) -> np.ndarray:
    """Columns whose diagonal entry is non-zero relative to the largest (``RANK_TOL``, far
    below any FP32 or FP64 rounding noise: in effect, non-zero)."""
    n = R.shape[0]
    big = 0.0
    for i in range(n):
        big = max(big, abs(R[i, i]))
    active = np.zeros(n, dtype=np.bool_)
    for i in range(n):
        active[i] = abs(R[i, i]) > RANK_TOL * big and big > 0.0
    return active


@njit(cache=True, nogil=True)
def back_substitute(R: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """Solve R x = rhs over the active columns; inactive coefficients are 0.  Computes in
    R's dtype (the emulated FPGA solves in FP32 with it)."""
    n = R.shape[0]
    active = _active_mask(R)
    x = np.zeros(n, R.dtype)
    for i in range(n - 1, -1, -1):
        if not active[i]:
            continue
        s = rhs[i]
        for j in range(i + 1, n):
            if active[j]:
                s -= R[i, j] * x[j]
        x[i] = s / R[i, i]
    return x


@njit(cache=True, nogil=True)
def forward_substitute_t(R: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """Solve Rᵀ z = rhs over the active columns, in R's dtype."""
    n = R.shape[0]
    active = _active_mask(R)
    z = np.zeros(n, R.dtype)
    for i in range(n):
        if not active[i]:
            continue
        s = rhs[i]
        for j in range(i):
            if active[j]:
                s -= R[j, i] * z[j]
        z[i] = s / R[i, i]
    return z


@njit(cache=True, nogil=True)
def atb(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Aᵀb in one pass over the rows (O(N·n))."""
    N, n = A.shape
    out = np.zeros(n)
    for i in range(N):
        bi = b[i]
        for j in range(n):
            out[j] += A[i, j] * bi
    return out


@njit(cache=True, nogil=True)
def solve_full(A: np.ndarray, b: np.ndarray) -> tuple:
    """Least squares from scratch over ``[A; sqrt(RIDGE)·I]``: (R, x)."""
    N, n = A.shape
    Aug = np.zeros((N + n, n))
    Aug[:N] = A
    bb = np.zeros(N + n)
    bb[:N] = b
    r = np.sqrt(RIDGE)
    for i in range(n):
        Aug[N + i, i] = r
    R, qtb = householder_r(Aug, bb)
    return R, back_substitute(R, qtb)


@njit(cache=True, nogil=True)
def solve_incremental(R_old: np.ndarray, A_delta: np.ndarray, A: np.ndarray, b: np.ndarray) -> tuple:
    """SIA: R_Δ = qr(A_delta); R = qr([R_old; R_Δ]); solve RᵀR x = Aᵀb."""
    n = R_old.shape[0]
    if A_delta.shape[0] > 0:
        R_d, _ = householder_r(A_delta, np.zeros(A_delta.shape[0]))
        stacked = np.empty((2 * n, n))
        stacked[:n] = R_old
        stacked[n:] = R_d
        R, _ = householder_r(stacked, np.zeros(2 * n))
    else:
        R = R_old.copy()
    z = forward_substitute_t(R, atb(A, b))
    return R, back_substitute(R, z)


class CpuBackend:
    """In-process Numba training (releases the GIL while it runs)."""

    name = "cpu"

    def train_full(self, A: np.ndarray, b: np.ndarray) -> TrainResult:
        t0 = time.perf_counter()
        R, x = solve_full(np.ascontiguousarray(A, np.float64), np.ascontiguousarray(b, np.float64))
        return TrainResult(R=R, coef=x, seconds=time.perf_counter() - t0)

    def train_incremental(
        self, R_old: np.ndarray, A_delta: np.ndarray, A: np.ndarray, b: np.ndarray
    ) -> TrainResult:
        t0 = time.perf_counter()
        R, x = solve_incremental(
            np.ascontiguousarray(R_old, np.float64),
            np.ascontiguousarray(A_delta, np.float64),
            np.ascontiguousarray(A, np.float64),
            np.ascontiguousarray(b, np.float64),
        )
        return TrainResult(R=R, coef=x, seconds=time.perf_counter() - t0)

