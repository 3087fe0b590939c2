"""The emulated FPGA training datapath: exactly the arithmetic SIA's hardware performs.

* Householder QR unit: the outer-loop PE forms each reflector — squared norm by a
  ``dot_width``-input adder tree fed sequentially (partial sums accumulated in tree order),
  ``sqrt`` and a reciprocal — and the inner-loop PEs apply it to the remaining columns
  (a tree dot product, then a scaled subtraction).
* Two-level TSQR: the rows are split into ``units × pus_per_unit`` blocks, each factored by
  one PU; the stacked R factors are re-factored in one unit.  The right-hand side rides
  along as an extra column, so Qᵀb comes out of the same factorization.
* Memoized incremental retraining: the delta rows are factored the same way, ``[R_old; R_Δ]``
  is re-factored in one unit, ``Aᵀb`` is accumulated by the dot-product trees and
  ``RᵀR x = Aᵀb`` is solved by two triangular solves on the device.

All arithmetic runs in the configured precision (FP32 by default) in Numba kernels.  The
cycle model charges each step of the same schedule (see :func:`cycles_full`).
"""
from __future__ import annotations

import math

import numpy as np
from numba import carray, njit

from learnedidx.accel.config import DeviceConfig
from learnedidx.errors import ConfigError, LearnedIdxError
from learnedidx.index.kernels import build_features, offsets_within
from learnedidx.index.layout import f64_at, i64_at, u8_at
from learnedidx.index.qr import back_substitute, forward_substitute_t
from learnedidx.index.training import KeysJob

#: Tikhonov rows included once in every full factorization: column j gets a row with
#: ``RIDGE * ||A_j||`` (1.0 for an all-zero column).  Degenerate key columns (padding, bytes
#: constant in a group) then sit far above the FP32 rounding noise of R_jj, while the fit
#: of the meaningful columns moves by ~RIDGE² relative.
RIDGE_FP32 = 1e-3
RIDGE_FP64 = 1e-6


@njit(cache=True, nogil=True, inline="always")
def _tree(buf, width):
    """Reduce the rows of ``buf`` (width × k: a chunk's products, one column per dot) as
    the adder tree does, pairwise level by level; the sums are left in row 0."""
    w = width
    while w > 1:
        for j in range(w // 2):
            for c in range(buf.shape[1]):
                buf[j, c] = buf[2 * j, c] + buf[2 * j + 1, c]
        if w % 2 == 1:
            for c in range(buf.shape[1]):
                buf[w // 2, c] = buf[w - 1, c]
        w = (w + 1) // 2


@njit(cache=True, nogil=True)
def _dots(f, a, b0, stride, cols, L, width, acc, buf, t1, t2):
    """``acc[c]`` for c < ``cols``: the dot product of f[a:a + L] and f[b:b + L], where
    b = b0 + c·stride, as the hardware sums it: ``width`` products per beat (zero-padded)
    reduced by a pairwise adder tree, the beats' sums accumulated in order.  In f's dtype
    and without FMA: every product and sum rounds to it.

    One flat array and offsets, no views, and all of a reflector's dots in one call: a
    view, or an array handed to an inlined function, inside a loop costs two atomic
    reference count updates, more than a short dot.  A power-of-two width (the usual
    case): all beats' trees level by level, in loops that vectorize (a beat's pairs never
    cross into the next beat at any level, so the sums are the same); any other width: a
    beat at a time through ``buf`` (width × 1).  ``t1``, ``t2``: L // 2 + width each."""
    zero = f.dtype.type(0.0)
    one = np.uint64(1)
    # Unsigned indexes: the compiler need not check for negative ones, so the loops vectorize.
    ua, uL = np.uint64(a), np.uint64(L)
    for c in range(cols):
        b = b0 + c * stride
        ub = np.uint64(b)
        s = zero
        if width == 1:
            for i in range(uL):
                s += f[ua + i] * f[ub + i]
        elif width & (width - 1) == 0:
            nb = (L + width - 1) // width
            n = nb * (width // 2)
            full = L // 2
            for t in range(np.uint64(full)):
                t1[t] = f[ua + t + t] * f[ub + t + t] + f[ua + t + t + one] * f[ub + t + t + one]
            for t in range(full, n):  # the last beat's zero padding
                t1[t] = zero
            if L % 2:
                t1[full] = f[a + L - 1] * f[b + L - 1] + zero
            in_t1 = True
            while n > nb:
                n //= 2
                if in_t1:
                    for t in range(np.uint64(n)):
                        t2[t] = t1[t + t] + t1[t + t + one]
                else:
                    for t in range(np.uint64(n)):
                        t1[t] = t2[t + t] + t2[t + t + one]
                in_t1 = not in_t1
            for t in range(nb):
                s += t1[t] if in_t1 else t2[t]
        else:
            for i in range(0, L, width):
                cnt = min(width, L - i)
                for r in range(cnt):
                    buf[r, 0] = f[a + i + r] * f[b + i + r]
                for r in range(cnt, width):
                    buf[r, 0] = zero
                _tree(buf, width)
                s += buf[0, 0]
        acc[c] = s


@njit(cache=True, nogil=True)
def tree_dot(x, y, start, width):
    """Dot product of x[start:] and y[start:] as the hardware's dot-product tree sums it
    (:func:`_dots`), in x's dtype."""
    L = x.shape[0] - start
    f = np.empty(2 * L, x.dtype)
    f[:L] = x[start:]
    f[L:] = y[start:]
    acc = np.empty(1, x.dtype)
    t1 = np.empty(L // 2 + width, x.dtype)
    _dots(f, 0, L, 0, 1, L, width, acc, np.empty((width, 1), x.dtype), t1, np.empty_like(t1))
    return acc[0]


@njit(cache=True, nogil=True)
def tree_dots(A, y, width, one):
    """``tree_dot`` of every column of ``A`` (N × n, any float; row-major) with ``y`` (N),
    both taken in the precision of ``one`` (a device scalar): Aᵀy as the dot-product trees
    compute it.  A chunk of ``width`` rows at a time, the trees of all columns side by
    side (the same sums, in the same order, as one column at a time)."""
    N, n = A.shape
    buf = np.empty((width, n), type(one))
    acc = np.zeros(n, type(one))
    for i in range(0, N, width):
        m = min(width, N - i)
        for r in range(m):
            yi = type(one)(y[i + r])
            for j in range(n):
                buf[r, j] = type(one)(A[i + r, j]) * yi
        for r in range(m, width):
            for j in range(n):
                buf[r, j] = 0.0
        _tree(buf, width)
        for j in range(n):
            acc[j] += buf[0, j]
    return acc


@njit(cache=True, nogil=True)
def householder_unit(W, width):
    """Factor the columns of ``W`` (stored transposed: W[j] is column j, length m) in place;
    returns R (n×n) in W's dtype.  The last column may be a right-hand side.  (W is
    C-contiguous; its rows are read through one flat view, see :func:`_dots`.)"""
    n = W.shape[0]
    m = W.shape[1]
    one = W.dtype.type(1.0)
    two = W.dtype.type(2.0)
    f = W.reshape(n * m)
    buf = np.empty((width, 1), W.dtype)
    acc = np.empty(n, W.dtype)
    t1 = np.empty(m // 2 + width, W.dtype)
    t2 = np.empty_like(t1)
    for k in range(min(n, m)):
        vk = k * m + k  # column k from its diagonal entry on
        uk = np.uint64(vk)
        L = m - k
        _dots(f, vk, vk, 0, 1, L, width, acc, buf, t1, t2)
        norm2 = acc[0]
        if norm2 == 0.0:
            continue
        norm = np.sqrt(norm2)
        xk = f[vk]
        alpha = -norm if xk >= 0 else norm
        f[vk] = xk - alpha
        vtv = two * (norm2 - alpha * xk)
        if vtv == 0.0:
            f[vk] = alpha
            continue
        inv = two * (one / vtv)  # the reciprocal unit
        # The inner PEs: each column's dot with the reflector (all before any update, which
        # changes no other column's dot), then the scaled subtraction.
        _dots(f, vk, vk + m, m, n - k - 1, L, width, acc, buf, t1, t2)
        for j in range(k + 1, n):
            wk = np.uint64(j * m + k)  # unsigned, as in _dots
            s = acc[j - k - 1] * inv
            for i in range(np.uint64(L)):
                f[wk + i] -= s * f[uk + i]
        f[vk] = alpha
    R = np.zeros((n, n), W.dtype)
    for i in range(min(n, m)):
        for j in range(i, n):
            R[i, j] = W[j, i]
    return R


@njit(cache=True, nogil=True)
def tsqr(At, blocks, width):
    """Two-level TSQR of the transposed matrix At (n × N): ``blocks`` row blocks factored
    independently, their R's stacked and re-factored."""
    n = At.shape[0]
    N = At.shape[1]
    blocks = max(1, min(blocks, max(1, N // max(n, 1))))
    step = (N + blocks - 1) // blocks
    stacked = np.zeros((n, blocks * n), At.dtype)
    used = 0
    for b in range(blocks):
        lo = b * step
        hi = min(N, lo + step)
        if hi <= lo:
            continue
        Wb = np.ascontiguousarray(At[:, lo:hi])
        Rb = householder_unit(Wb, width)
        for i in range(n):
            for j in range(n):
                stacked[j, used + i] = Rb[i, j]
        used += n
    W2 = np.ascontiguousarray(stacked[:, :used])
    return householder_unit(W2, width)


@njit(cache=True, nogil=True)
def _fill_t(Wt, A, b, has_b, ridge):
    """Wt (zeros) := [A b; diag(ridge·||A_j||) 0] transposed, cast to Wt's dtype.  The
    norms sum the squares row after row, as numpy's ``linalg.norm(A, axis=0)`` does."""
    N, n = A.shape
    sq = np.zeros(n)
    for i in range(N):
        for j in range(n):
            a = A[i, j]
            Wt[j, i] = a
            sq[j] += a * a
        if has_b:
            Wt[n, i] = b[i]
    if ridge > 0:
        for j in range(n):
            norm = np.sqrt(sq[j])
            Wt[j, N + j] = ridge * norm if norm > 0 else 1.0


@njit(cache=True, nogil=True)
def _augmented_t_of(A, b, has_b, ridge, probe):
    """:func:`_augmented_t` of float64 ``A``/``b``, in ``probe``'s dtype."""
    N, n = A.shape
    Wt = np.zeros((n + (1 if has_b else 0), N + (n if ridge > 0 else 0)), probe.dtype)
    _fill_t(Wt, A, b, has_b, ridge)
    return Wt


def _augmented_t(A: np.ndarray, b: np.ndarray | None, ridge: float, dtype) -> np.ndarray:
    """[A b; diag(ridge·||A_j||) 0] transposed, in the device precision."""
    return _augmented_t_of(np.ascontiguousarray(A, np.float64),
                           np.ascontiguousarray(b if b is not None else A[:0, 0], np.float64), b is not None,
                           float(ridge), np.zeros(0, dtype))


@njit(cache=True, nogil=True)
def emulate_full(A, b, blocks, width, ridge, probe):
    """(R, coef) in float64 of the device's full training of float64 ``A``/``b``, in
    ``probe``'s dtype: TSQR of the ridge-augmented [A b], then back-substitution."""
    n = A.shape[1]
    Raug = tsqr(_augmented_t_of(A, b, True, ridge, probe), blocks, width)
    R = Raug[:n, :n]
    x = back_substitute(R, np.ascontiguousarray(Raug[:n, n]))
    return R.astype(np.float64), x.astype(np.float64)


@njit(cache=True, nogil=True)
def emulate_incremental(R_old, A_delta, A, b, blocks, width, probe):
    """(R, coef) in float64 of SIA's memoized retrain on the device (float64 inputs, in
    ``probe``'s dtype): TSQR of the delta rows, [R_old; R_Δ] re-factored, Aᵀb by the dot
    trees, then RᵀR x = Aᵀb by two triangular solves."""
    n = A.shape[1]
    one = probe.dtype.type(1.0)
    if A_delta.shape[0]:
        Rd = tsqr(_augmented_t_of(A_delta, A_delta[:0, 0], False, 0.0, probe), blocks, width)
        W = np.zeros((n, 2 * n), probe.dtype)
        W[:, :n] = R_old.astype(probe.dtype).T
        W[:, n:] = Rd.T
        R = householder_unit(W, width)
    else:
        R = R_old.astype(probe.dtype)
    atb = tree_dots(A, b, width, one)
    x = back_substitute(R, forward_substitute_t(R, atb))
    return R.astype(np.float64), x.astype(np.float64)


@njit(cache=True, nogil=True)
def emulate_keys(arena, offsets, n, prefix, feat, R_old, incremental, new_arena, new_offsets, blocks, width, ridge,
                 probe):
    """:func:`emulate_full` or :func:`emulate_incremental` of a group given by its keys (a
    :class:`~learnedidx.index.training.KeysJob`: the feature rows are built here), in one
    call that releases the GIL."""
    A = build_features(arena, offsets, 0, n, prefix, feat)
    b = np.arange(n).astype(np.float64)
    if not incremental:
        return emulate_full(A, b, blocks, width, ridge, probe)
    A_delta = build_features(new_arena, new_offsets, 0, new_offsets.shape[0] - 1, prefix, feat)
    return emulate_incremental(R_old, A_delta, A, b, blocks, width, probe)


#: Columns of :func:`emulate_key_jobs`'s table: where a job's arrays lie (addresses and
#: sizes), its shape, and where its R (row by row) and coefficients go in the outputs.
(E_ARENA, E_ALEN, E_OFFS, E_N, E_NARENA, E_NALEN, E_NOFFS, E_NNEW, E_ROLD, E_INCR, E_PREFIX, E_FEAT, E_ROUT,
 E_COUT, E_COLS) = range(15)


@njit(cache=True, nogil=True)
def emulate_key_jobs(table, R_out, coef_out, blocks, width, ridge, probe) -> int:
    """:func:`emulate_keys` of every job of ``table`` (see ``E_*``; the caller keeps the
    arrays alive and has checked each R_old's shape), in one call that releases the GIL:
    a background retrainer needs the GIL again after every call, and a busy writer holds
    it for milliseconds at a time.  Returns -1, or the first job whose key offsets lie
    outside its key bytes (it and the jobs after it are not trained)."""
    for t in range(table.shape[0]):
        j = table[t]
        n, nn, w = j[E_N], j[E_NNEW], j[E_FEAT] + 1
        arena, offsets = carray(u8_at(j[E_ARENA]), j[E_ALEN]), carray(i64_at(j[E_OFFS]), n + 1)
        new_arena, new_offsets = carray(u8_at(j[E_NARENA]), j[E_NALEN]), carray(i64_at(j[E_NOFFS]), nn + 1)
        if not (offsets_within(offsets, arena.shape[0]) and offsets_within(new_offsets, new_arena.shape[0])):
            return t
        incremental = j[E_INCR] != 0
        R_old = carray(f64_at(j[E_ROLD]), (w, w)) if incremental else np.zeros((0, 0))
        R, x = emulate_keys(arena, offsets, n, j[E_PREFIX], j[E_FEAT], R_old, incremental, new_arena, new_offsets,
                            blocks, width, ridge, probe)
        ro, co = j[E_ROUT], j[E_COUT]
        for a in range(w):
            coef_out[co + a] = x[a]
            for b in range(w):
                R_out[ro + a * w + b] = R[a, b]
    return -1


_NO_R = np.zeros((0, 0))
_NO_KEYS = (np.zeros(0, np.uint8), np.zeros(1, np.int64))


class FpgaDatapath:
    """Runs training jobs with the device's arithmetic and reports modelled cycles."""

    def __init__(self, config: DeviceConfig | None = None) -> None:
        self.cfg = config or DeviceConfig()
        self.dtype = np.float32 if self.cfg.precision == "fp32" else np.float64
        self.ridge = RIDGE_FP32 if self.cfg.precision == "fp32" else RIDGE_FP64
        self._probe = np.zeros(0, self.dtype)

    @property
    def blocks(self) -> int:
        return self.cfg.units * self.cfg.pus_per_unit

    def check(self, n_cols: int) -> None:
        if n_cols - 1 > self.cfg.max_features:
            raise ConfigError(f"{n_cols - 1} features exceed the device's {self.cfg.max_features}")

    def full(self, A: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """(R, coef, cycles) of the least-squares fit, computed as the device does."""
        N, n = A.shape
        self.check(n)
        R, x = emulate_full(np.ascontiguousarray(A, np.float64), np.ascontiguousarray(b, np.float64), self.blocks,
                            self.cfg.dot_width, self.ridge, self._probe)
        return R, x, cycles_full(self.cfg, N, n)

    def incremental(self, R_old: np.ndarray, A_delta: np.ndarray, A: np.ndarray, b: np.ndarray,
                    r_resident: bool = False) -> tuple[np.ndarray, np.ndarray, int]:
        """(R, coef, cycles) of SIA's memoized retrain; ``r_resident``: R_old is already in
        device memory (its transfer is not charged)."""
        N, n = A.shape
        self.check(n)
        R, x = emulate_incremental(np.ascontiguousarray(R_old, np.float64), np.ascontiguousarray(A_delta, np.float64),
                                   np.ascontiguousarray(A, np.float64), np.ascontiguousarray(b, np.float64),
                                   self.blocks, self.cfg.dot_width, self._probe)
        return R, x, cycles_incremental(self.cfg, N, n, A_delta.shape[0], r_resident)

    def keys(self, job: KeysJob) -> tuple[np.ndarray, np.ndarray, int]:
        """(R, coef, cycles) of a job given by its keys: :meth:`full` or :meth:`incremental`
        of its feature rows (:meth:`KeysJob.rows`), which are built in the same compiled call."""
        return self.keys_many([job])[0]

    def keys_many(self, jobs: list[KeysJob]) -> list[tuple[np.ndarray, np.ndarray, int]]:
        """:meth:`keys` of every job, in one compiled call (:func:`emulate_key_jobs`)."""
        table = np.zeros((len(jobs), E_COLS), np.int64)
        keep = []  # what the table points into, alive until the call returns
        ro = co = 0
        for t, job in enumerate(jobs):
            w = job.feat + 1
            self.check(w)
            incremental = job.R_old is not None
            if incremental and np.shape(job.R_old) != (w, w):
                raise LearnedIdxError(f"R_old of shape {np.shape(job.R_old)} for {job.feat} features")
            arena, offsets = np.ascontiguousarray(job.arena, np.uint8), np.ascontiguousarray(job.offsets, np.int64)
            new_arena, new_offsets = (job.new_arena, job.new_offsets) if job.new else _NO_KEYS
            new_arena, new_offsets = np.ascontiguousarray(new_arena, np.uint8), np.ascontiguousarray(new_offsets, np.int64)
            R_old = np.ascontiguousarray(job.R_old, np.float64) if incremental else _NO_R
            keep.append((arena, offsets, new_arena, new_offsets, R_old))
            table[t] = (arena.ctypes.data, arena.size, offsets.ctypes.data, offsets.size - 1, new_arena.ctypes.data,
                        new_arena.size, new_offsets.ctypes.data, new_offsets.size - 1, R_old.ctypes.data, incremental,
                        job.prefix, job.feat, ro, co)
            ro, co = ro + w * w, co + w
        R_out, coef_out = np.zeros(ro), np.zeros(co)
        bad = emulate_key_jobs(table, R_out, coef_out, self.blocks, self.cfg.dot_width, self.ridge, self._probe)
        del keep
        if bad >= 0:
            raise LearnedIdxError("key offsets past the key bytes")
        out = []
        for t, job in enumerate(jobs):
            w, (ro, co) = job.feat + 1, table[t, [E_ROUT, E_COUT]]
            cycles = (cycles_incremental(self.cfg, job.n, w, job.new) if job.R_old is not None
                      else cycles_full(self.cfg, job.n, w))
            out.append((R_out[ro:ro + w * w].reshape(w, w).copy(), coef_out[co:co + w].copy(), cycles))
        return out


# ---------------------------------------------------------------------- cycle model
def _dot_cycles(cfg: DeviceConfig, length: int) -> int:
    """Stream ``length`` products through the tree: one beat per ``dot_width`` inputs,
    plus the tree depth and the accumulator."""
    return _dot_cycles_of(length, cfg.dot_width, cfg.lat_add, cfg.lat_mul)


# The cycle model's kernels hold the GIL: a call takes microseconds, and one that released it
# would hand a busy writer's GIL away and then wait for it (a background retrainer charges
# every job).
@njit(cache=True)
def _dot_cycles_of(length, dot_width, lat_add, lat_mul) -> int:
    depth = max(1, math.ceil(math.log2(dot_width)))
    return math.ceil(length / dot_width) + depth * lat_add + lat_add + lat_mul


@njit(cache=True)
def _qr_unit_cycles_of(m, n_cols, dot_width, inner_pes, lat_add, lat_mul, lat_sqrt, lat_recip) -> int:
    total = 0
    for k in range(min(m, n_cols)):
        r = m - k
        dot = _dot_cycles_of(r, dot_width, lat_add, lat_mul)
        outer = dot + lat_sqrt + lat_recip + lat_add
        rest = n_cols - k - 1
        rounds = math.ceil(rest / inner_pes) if rest > 0 else 0
        inner = rounds * (dot + math.ceil(r / dot_width) + lat_mul + lat_add)
        total += outer + inner
    return total


def qr_unit_cycles(cfg: DeviceConfig, m: int, n_cols: int) -> int:
    """Cycles for one PU to factor an m × n_cols block (compiled: every job is charged)."""
    return int(_qr_unit_cycles_of(m, n_cols, cfg.dot_width, cfg.inner_pes, cfg.lat_add, cfg.lat_mul, cfg.lat_sqrt,
                                  cfg.lat_recip))


def transfer_cycles(cfg: DeviceConfig, nbytes: int) -> int:
    seconds = cfg.link_latency_us * 1e-6 + nbytes / (cfg.link_gbps * 1e9)
    return math.ceil(seconds * cfg.clock_mhz * 1e6)


def _tsqr_cycles(cfg: DeviceConfig, N: int, n_cols: int) -> int:
    blocks = max(1, min(cfg.units * cfg.pus_per_unit, max(1, N // max(n_cols, 1))))
    per_block = math.ceil(N / blocks)
    return qr_unit_cycles(cfg, per_block, n_cols) + qr_unit_cycles(cfg, blocks * n_cols, n_cols)


def _solve_cycles(cfg: DeviceConfig, n: int) -> int:
    return n * (math.ceil(n / cfg.inner_pes) + cfg.lat_mul + cfg.lat_add + cfg.lat_recip)


def cycles_full(cfg: DeviceConfig, N: int, n: int) -> int:
    itemsize = 4 if cfg.precision == "fp32" else 8
    return (transfer_cycles(cfg, N * (n + 1) * itemsize) + _tsqr_cycles(cfg, N + n, n + 1)
            + _solve_cycles(cfg, n) + transfer_cycles(cfg, (n * n + n) * itemsize))


def cycles_incremental(cfg: DeviceConfig, N: int, n: int, d: int, r_resident: bool = False) -> int:
    itemsize = 4 if cfg.precision == "fp32" else 8
    r_in = 0 if r_resident else n * n
    lanes = cfg.units * cfg.pus_per_unit
    atb = math.ceil(n / lanes) * _dot_cycles(cfg, N)
    merge = qr_unit_cycles(cfg, 2 * n, n) if d else 0
    return (transfer_cycles(cfg, (d * n + N * (n + 1) + r_in) * itemsize) + (_tsqr_cycles(cfg, d, n) if d else 0)
            + merge + atb + 2 * _solve_cycles(cfg, n) + transfer_cycles(cfg, (n * n + n) * itemsize))
