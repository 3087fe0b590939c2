"""Least squares that stay right: linregr from the R factor of the rows, never from X'X.

Each chunk of rows (a slot of the caller's stream, decoded on any worker, or a chunk of rows in
memory) is folded into the R factor of its rows [X y] by Householder reflections, a block of
rows at a time (:func:`fold_block`: about 2 (d + 1)^2 flops a row, vectorized over the block);
the chunks' factors then merge in the rows' order by stacking two R factors and factoring again
(exact: R1'R1 + R2'R2 is the merged R'R), with Welford's mean and centred sum of squares of y.
So the pass stays one pass at the speed of the scan, and the normal equations, whose condition
is the square of X's, are never formed: 500 hourly epoch timestamps (t ~ 1.7e9) are fitted to
the precision of numpy's lstsq, where X'X loses the intercept.

A :class:`State` is exactly the state of MADlib's linregr aggregate in the extension
(``extension/linregr.c``, ``learnedidx.bytea8``): :meth:`State.pack` writes its bytes, and the
extension's ``linregr_final`` computes MADlib's statistics from them, so the statistics have one
implementation and the aggregate's combine function merges the server's states as its own.
The coefficients here (the model the server keeps, the Breusch-Pagan residuals) follow the same
rules as ``linregr_final``: back substitution when X has full rank (judged with its columns
scaled to unit norm, so that a column's units are no rank deficiency), else the minimum-norm
solution, singular values of R below ``k eps sigma_max`` taken as zero (MADlib's pseudo-inverse
semantics).
"""
from __future__ import annotations

import base64
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import reduce

import numpy as np
from numba import njit
from scipy.linalg import solve_triangular

from learnedidx.accel.engine_model import modelled_seconds
from learnedidx.indb.runtime.data import InMemory, design
from learnedidx.indb.runtime.engine import StopCheck, TrainOutput, check_first_pass, check_stop

#: Rows folded into R at once.
BLOCK = 64
#: The state's layout (learnedidx.h: LX_LINREGR_VERSION, the payload after the varlena header):
#: version, k, n, mean and centred sum of squares of y, then R row-major, in the host's order.
VERSION = 1
HEAD = struct.Struct("=HHqdd")
EPS = np.finfo(np.float64).eps


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def fold_block(R, Bt, b):
    """R (p x p, upper triangular) := the R factor of [R; B], B's first ``b`` rows given by
    columns in Bt (p x >= b), which is overwritten: one Householder reflection per column, its
    vector the column's part in B (R's part is implicit), applied to the columns right of it."""
    p = R.shape[0]
    for j in range(p):
        s = 0.0
        for i in range(b):
            s += Bt[j, i] * Bt[j, i]
        if s == 0.0:
            continue
        a = R[j, j]
        norm = np.sqrt(a * a + s)
        beta = -norm if a >= 0.0 else norm  # the sign that keeps a - beta free of cancellation
        tau = (beta - a) / beta
        scale = 1.0 / (a - beta)
        for i in range(b):
            Bt[j, i] *= scale
        R[j, j] = beta
        for c in range(j + 1, p):
            w = R[j, c]
            for i in range(b):
                w += Bt[j, i] * Bt[c, i]
            w *= tau
            R[j, c] -= w
            for i in range(b):
                Bt[c, i] -= w * Bt[j, i]


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _factor(X, y, R, Bt, out):
    """R := the R factor of [X y] (R zero on entry); out := (mean, centred sum of squares) of y."""
    m, d = X.shape
    for a in range(0, m, BLOCK):
        b = min(BLOCK, m - a)
        for i in range(b):
            for j in range(d):
                Bt[j, i] = X[a + i, j]
            Bt[d, i] = y[a + i]
        fold_block(R, Bt, b)
    mean = 0.0
    for i in range(m):
        mean += y[i]
    mean /= max(m, 1)
    m2 = 0.0
    for i in range(m):
        m2 += (y[i] - mean) * (y[i] - mean)
    out[0] = mean
    out[1] = m2


@dataclass
class State:
    """The R factor of the rows [X y] seen (p x p, p = k + 1), their number and y's mean and
    centred sum of squares: MADlib's linregr state, as the extension keeps it."""

    n: int
    mean: float
    m2: float
    R: np.ndarray

    @property
    def k(self) -> int:
        return self.R.shape[0] - 1

    @classmethod
    def of(cls, X: np.ndarray, y: np.ndarray) -> "State":
        """The state of the rows (X, y)."""
        p = X.shape[1] + 1
        R, out = np.zeros((p, p)), np.zeros(2)
        _factor(np.ascontiguousarray(X, np.float64), np.ascontiguousarray(y, np.float64), R,
                np.empty((p, BLOCK)), out)
        return cls(len(y), float(out[0]), float(out[1]), R)

    def merge(self, other: "State") -> "State":
        """The state of both states' rows: [R1; R2] factored again, Welford's sums merged (Chan's)."""
        if other.n == 0:
            return self
        if self.n == 0:
            return other
        R = self.R.copy()
        fold_block(R, np.ascontiguousarray(other.R.T), other.R.shape[0])
        n = self.n + other.n
        delta = other.mean - self.mean
        return State(n, self.mean + delta * other.n / n, self.m2 + other.m2 + delta * delta * self.n * other.n / n, R)

    def drop_first(self) -> "State":
        """The state without X's first column (R[:, 1:], upper Hessenberg, factored again)."""
        return State(self.n, self.mean, self.m2, np.linalg.qr(self.R[:, 1:], mode="r"))

    def pack(self) -> bytes:
        """The bytes of the extension's state (learnedidx.bytea8's payload)."""
        return HEAD.pack(VERSION, self.k, self.n, self.mean, self.m2) + np.ascontiguousarray(self.R).tobytes()

    def encoded(self) -> str:
        """:meth:`pack` in base64, as the server's JSON reply carries it."""
        return base64.b64encode(self.pack()).decode()

    @classmethod
    def unpack(cls, data: bytes) -> "State":
        version, k, n, mean, m2 = HEAD.unpack_from(data)
        if version != VERSION or len(data) != HEAD.size + 8 * (k + 1) ** 2:
            raise ValueError("not a linregr state")
        return cls(n, mean, m2, np.frombuffer(data, np.float64, offset=HEAD.size).reshape(k + 1, k + 1).copy())

    def solve(self) -> tuple[np.ndarray, float]:
        """(coefficients, residual sum of squares): back substitution when X has full rank,
        else the minimum-norm solution (``linregr_final``'s rules)."""
        k = self.k
        Rx, z, rho = self.R[:k, :k], self.R[:k, k], self.R[k, k]
        norms = np.sqrt(np.einsum("ij,ij->j", Rx, Rx))
        if k and np.all(norms > 0):
            s = np.linalg.svd(Rx / norms, compute_uv=False)
            if s[-1] > k * EPS * s[0]:
                return solve_triangular(Rx, z), float(rho * rho)
        U, s, Vt = np.linalg.svd(Rx)
        keep = s > k * EPS * (s[0] if k else 0.0)
        uz = U.T @ z
        return Vt[keep].T @ (uz[keep] / s[keep]), float(rho * rho + uz[~keep] @ uz[~keep])


def merged(states: list[State]) -> State | None:
    """The states merged in their order (None for none)."""
    return reduce(State.merge, states) if states else None


def _pass_state(src, fn, ex: ThreadPoolExecutor, stop: StopCheck) -> State | None:
    """One pass over ``src``: the state of ``fn(y, X) -> (X', y')`` of each chunk, merged."""
    def chunk(y, X):
        check_stop(stop)
        Xc, yc = fn(y, X)
        return State.of(Xc, yc)
    return merged(src.each(chunk, ex))


def train(data, params: dict, *, threads: int = 2, stop: StopCheck = None, cost=None) -> TrainOutput:
    """Least squares on ``data`` ({"X", "y"} arrays, or a source of rows read in passes, as the
    engine takes them) in one pass; with ``params["heteroskedasticity_option"]``, a second pass
    for the Breusch-Pagan regression of the squared residuals on X.  ``info`` holds the states."""
    t0 = time.perf_counter()
    src = InMemory(design(data["X"], params), data["y"]) if isinstance(data, dict) else data
    hetero = bool(params.get("heteroskedasticity_option"))
    src.keep = hetero  # the rows are read again only for the test
    with ThreadPoolExecutor(threads) as ex:
        if src.peek() is None:
            src.each(lambda y, X: None, ex)  # the pass's end: its row counts
            check_first_pass(src)  # no rows: the error
        state = _pass_state(src, lambda y, X: (X, y), ex, stop)
        check_first_pass(src)
        if src.ones and src.lead:  # the features start with ones: no intercept column of our own
            src.drop_lead()
            state = state.drop_first()
        coef, rss = state.solve()
        info: dict = {"state": state}
        if hetero:
            info["hetero_state"] = _pass_state(src, lambda y, X: (X, np.square(y - X @ coef)), ex, stop)
    n, d = state.n, state.k
    return TrainOutput({"coef": coef}, rss / n, 1, time.perf_counter() - t0,
                       modelled_seconds(cost, n, d, 1) if cost is not None else float("nan"), info)
