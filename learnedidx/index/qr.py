"""Householder QR and SIA incremental least squares, in Numba: the ``cpu`` backend.

Rank deficiency is normal for key features (zero padding, byte positions constant in a
group).  Every factorization therefore includes ``RIDGE`` rows ``sqrt(λ)·I`` once (a tiny
Tikhonov term): ``RᵀR = AᵀA + λI`` stays invertible, the coefficients of degenerate
columns go to the minimum-norm split, and predictions match ``numpy.linalg.lstsq`` to
~1e-9 relative.  The memoized R already holds the ridge rows, so incremental training
(which stacks only new rows onto it) equals full training on the union.

Full training streams the rows through a block that stays in the L1 cache (a flat TSQR):
the block holds the R factor so far (at first the ridge rows, already triangular) above
the next rows, ``[b | Qᵀb]`` riding along as a last column, and each step factors the
block by Householder reflections.  The whole matrix never exists, and each reflector is
applied to a few dozen cached rows instead of the whole group.
"""
from __future__ import annotations

import time

import numpy as np
from numba import njit
from numba import uint64 as _u

from learnedidx.index.training import TrainResult

RANK_TOL = 1e-300
RIDGE = 1e-6


# Loops below count in unsigned integers: Numba then skips its negative-index wraparound,
# which keeps LLVM from vectorizing them.
@njit(cache=True, nogil=True, fastmath={"reassoc"})
def _dot(v, w, k, m) -> float:
    """Sum of ``v[i] * w[i]`` for i in [k, m), in vector lanes (reassociated, so that it
    vectorizes: the order is fixed by the compiled code, not by the data)."""
    s = 0.0
    for i in range(_u(k), _u(m)):
        s += v[i] * w[i]
    return s


@njit(cache=True, nogil=True)
def householder_block(W: np.ndarray, n: int, m: int) -> None:
    """Householder QR, in place, of rows [0, m) of the column-major block ``W`` (row j of
    ``W`` is column j of the matrix): reflectors for the first ``n`` columns, applied to
    every column of ``W``.  Afterwards ``W[j, i]`` for i <= j < n is ``R[i, j]``, and the
    reflectors lie below."""
    ncol = W.shape[0]
    for k in range(n):
        v = W[k]
        norm2 = _dot(v, v, k, m)
        norm = np.sqrt(norm2)
        if norm == 0.0:
            continue
        xk = v[k]
        alpha = -norm if xk >= 0 else norm
        v[k] = xk - alpha  # v = x - alpha e1; vᵀv = 2 (norm² - alpha x_k)
        vtv = 2.0 * (norm2 - alpha * xk)
        if vtv == 0.0:
            v[k] = alpha
            continue
        inv = 2.0 / vtv
        for j in range(k + 1, ncol):
            w = W[j]
            s = _dot(v, w, k, m) * inv
            for i in range(_u(k), _u(m)):
                w[i] -= s * v[i]
        v[k] = alpha


@njit(cache=True, nogil=True)
def householder_r(A: np.ndarray, b: np.ndarray) -> tuple:
    """QR of ``A`` (N×n) by Householder reflections; returns (R n×n, Qᵀb[:n]).

    Works on a transposed copy, b as its last column, so each column is contiguous in
    memory; reflectors are applied column by column (the order the FPGA's outer-loop PE
    and inner-loop PEs use)."""
    N, n = A.shape
    W = np.empty((n + 1, N))  # W[j] is column j of [A b]
    W[:n] = A.T
    W[n] = b
    householder_block(W, n, N)
    k_max = min(N, n)
    R = np.zeros((n, n))
    qtb = np.zeros(n)
    for i in range(k_max):
        for j in range(i, n):
            R[i, j] = W[j, i]
        qtb[i] = W[n, i]
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
def block_rows(n: int) -> int:
    """New rows per block for n columns (and the right-hand side): the block, with the n
    rows of R above them, fills about 24 KiB, an L1 cache."""
    return max(32, 3072 // (n + 1) - n)


@njit(cache=True, nogil=True)
def ls_start(n: int) -> np.ndarray:
    """An empty streaming least-squares block for n columns: ``W[j, :]`` is column j
    (``W[n]`` the right-hand side), the first n rows hold the ridge rows ``√λ·I``, the
    next :func:`block_rows` ones take data (see :func:`ls_fold`)."""
    W = np.zeros((n + 1, n + block_rows(n)))
    r = np.sqrt(RIDGE)
    for j in range(n):
        W[j, j] = r
    return W


@njit(cache=True, nogil=True)
def ls_fold(W: np.ndarray, n: int, rows: int) -> None:
    """Fold the ``rows`` data rows the caller wrote below the first n rows of block ``W``
    into the R factor held there (QR of the stacked rows, keeping R)."""
    householder_block(W, n, n + rows)
    for j in range(n):
        W[j, j + 1:n] = 0.0  # the reflectors under R: zeros of the next stacked R


@njit(cache=True, nogil=True)
def ls_finish(W: np.ndarray, n: int) -> tuple:
    """(R, x) of the rows folded into block ``W``: R n×n and the least-squares solution."""
    R = np.zeros((n, n))
    qtb = np.zeros(n)
    for i in range(n):
        for j in range(i, n):
            R[i, j] = W[j, i]
        qtb[i] = W[n, i]
    return R, back_substitute(R, qtb)


@njit(cache=True, nogil=True)
def solve_full(A: np.ndarray, b: np.ndarray) -> tuple:
    """Least squares from scratch over ``[A; sqrt(RIDGE)·I]``: (R, x), streaming the rows
    of A through an L1-sized block (module docstring)."""
    N, n = A.shape
    W = ls_start(n)
    step = block_rows(n)
    for r0 in range(0, N, step):
        rows = min(step, N - r0)
        for j in range(n):
            W[j, n:n + rows] = A[r0:r0 + rows, j]
        W[n, n:n + rows] = b[r0:r0 + rows]
        ls_fold(W, n, rows)
    return ls_finish(W, n)


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

