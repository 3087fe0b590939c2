"""The analytics engine: per-thread models over partitions of the tuples, merged every epoch.

Workers are threads running nogil Numba kernels, each on a contiguous partition; after every
epoch their models are merged (averaged, or summed statistics for closed forms).  Results
are deterministic given the seed and the thread count.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from numba import njit

from learnedidx.errors import InDBError


class TrainingDataError(InDBError, ValueError):
    """The training data cannot be used (empty, NaN/Inf, wrong shape or labels)."""

    kind = "bad-data"


class ParameterError(InDBError, ValueError):
    """A training parameter has a value the algorithm does not accept."""

    kind = "bad-request"


class NotSupportedError(InDBError):
    """A MADlib option this engine does not implement."""

    kind = "not-supported"


class CancelledError(InDBError):
    """The caller gave up (its statement was cancelled): training stopped between rounds."""

    kind = "cancelled"


StopCheck = Callable[[], bool] | None


def rounds(first: int, last: int, stop: StopCheck):
    """``range(first, last + 1)`` that asks ``stop()`` before each round (epoch or iteration)."""
    for i in range(first, last + 1):
        if stop is not None and stop():
            raise CancelledError("training stopped: the calling statement is gone")
        yield i


def check_params(algorithm: str, params: dict) -> None:
    """Refuse MADlib options that would otherwise be silently ignored."""
    if params.get("grouping_cols"):
        raise NotSupportedError("grouping_cols is not supported: train one model per group "
                                "(for example from a view per group)")
    if algorithm == "logregr" and params.get("optimizer", "irls") not in ("irls", "newton"):
        raise ParameterError(f"optimizer must be 'irls' or 'newton', not {params['optimizer']!r}")


@dataclass
class TrainOutput:
    model: dict
    loss: float
    iterations: int
    rows_used: int
    seconds: float
    modelled_seconds: float
    info: dict = field(default_factory=dict)


# ---------------------------------------------------------------------- kernels (per partition)
@njit(cache=True, nogil=True)
def _gram(X, y):
    """XᵀX and Xᵀy of a partition (X with the intercept column)."""
    d = X.shape[1]
    G = np.zeros((d, d))
    v = np.zeros(d)
    for i in range(X.shape[0]):
        for a in range(d):
            xa = X[i, a]
            v[a] += xa * y[i]
            for b in range(a, d):
                G[a, b] += xa * X[i, b]
    for a in range(d):
        for b in range(a):
            G[a, b] = G[b, a]
    return G, v


@njit(cache=True, nogil=True)
def _logistic_newton_stats(X, y, w):
    """Gradient and Hessian of the log-likelihood of a partition at w (IRLS step stats)."""
    d = X.shape[1]
    g = np.zeros(d)
    H = np.zeros((d, d))
    loss = 0.0
    for i in range(X.shape[0]):
        z = 0.0
        for a in range(d):
            z += X[i, a] * w[a]
        p = 1.0 / (1.0 + np.exp(-z))
        loss += np.log1p(np.exp(-abs(z))) + max(z, 0.0) - y[i] * z
        r = y[i] - p
        s = p * (1.0 - p)
        for a in range(d):
            g[a] += r * X[i, a]
            xa = s * X[i, a]
            for b in range(a, d):
                H[a, b] += xa * X[i, b]
    for a in range(d):
        for b in range(a):
            H[a, b] = H[b, a]
    return g, H, loss


@njit(cache=True, nogil=True)
def _svm_epoch(X, y, w, lam, lr0, t0, order):
    """Pegasos-style SGD epoch on the hinge loss (labels ±1); returns (w, hinge sum)."""
    d = X.shape[1]
    t = t0
    hinge = 0.0
    for k in range(order.shape[0]):
        i = order[k]
        t += 1
        eta = lr0 / (1.0 + lr0 * lam * t)
        z = 0.0
        for a in range(d):
            z += X[i, a] * w[a]
        margin = y[i] * z
        for a in range(1, d):  # the intercept is not regularized
            w[a] -= eta * lam * w[a]
        if margin < 1.0:
            hinge += 1.0 - margin
            for a in range(d):
                w[a] += eta * y[i] * X[i, a]
    return w, hinge


@njit(cache=True, nogil=True)
def _lmf_epoch(rows, cols, vals, U, V, lr, lam, order):
    rank = U.shape[1]
    sq = 0.0
    for k in range(order.shape[0]):
        i = order[k]
        r = rows[i]
        c = cols[i]
        pred = 0.0
        for f in range(rank):
            pred += U[r, f] * V[c, f]
        e = vals[i] - pred
        sq += e * e
        for f in range(rank):
            u = U[r, f]
            U[r, f] += lr * (e * V[c, f] - lam * u)
            V[c, f] += lr * (e * u - lam * V[c, f])
    return sq


# ---------------------------------------------------------------------- helpers
def _check(X: np.ndarray, y: np.ndarray | None) -> None:
    if X.ndim != 2 or X.shape[0] == 0:
        raise TrainingDataError("no rows to train on (the table is empty or every row has NULLs)")
    if not np.all(np.isfinite(X)) or (y is not None and not np.all(np.isfinite(y))):
        raise TrainingDataError("the training data contains NaN or infinite values")
    if y is not None and y.shape != (X.shape[0],):
        raise TrainingDataError("labels and features have different row counts")


def _partitions(n: int, threads: int) -> list[slice]:
    threads = max(1, min(threads, n))
    step = (n + threads - 1) // threads
    return [slice(i, min(n, i + step)) for i in range(0, n, step)]


def _with_intercept(X: np.ndarray, intercept: bool) -> np.ndarray:
    X = np.ascontiguousarray(X, np.float64)
    return np.ascontiguousarray(np.c_[np.ones(X.shape[0]), X]) if intercept else X


def _design(X: np.ndarray, params: dict) -> np.ndarray:
    """The training matrix: a leading column of ones (the intercept, ``coef[0]``) is added
    unless ``params["intercept"]`` is false or X's first column is already all ones
    (DAnA-style tables, or MADlib's ``ARRAY[1, x1, ...]``)."""
    X = np.ascontiguousarray(X, np.float64)
    has_ones = X.ndim == 2 and X.shape[0] > 0 and X.shape[1] > 0 and bool(np.all(X[:, 0] == 1.0))
    return _with_intercept(X, params.get("intercept") is not False and not has_ones)


def _modelled(algorithm: str, rows: int, d: int, epochs: int, threads: int) -> float:
    from learnedidx.accel.engine_model import modelled_seconds

    return modelled_seconds(algorithm, rows, d, epochs)


# ---------------------------------------------------------------------- algorithms
def _linregr(data, params, threads, seed, stop):
    X = _design(data["X"], params)
    y = np.ascontiguousarray(data["y"], np.float64)
    _check(X, y)
    parts = _partitions(len(y), threads)
    with ThreadPoolExecutor(len(parts)) as ex:
        stats = list(ex.map(lambda s: _gram(X[s], y[s]), parts))
    G = sum(s[0] for s in stats)
    v = sum(s[1] for s in stats)
    coef = np.linalg.lstsq(G, v, rcond=None)[0]  # merge = sum of statistics, then solve
    resid = y - X @ coef
    return {"coef": coef}, float(resid @ resid / len(y)), 1


def _logregr(data, params, threads, seed, stop):
    X = _design(data["X"], params)
    y = np.ascontiguousarray(data["y"], np.float64)
    _check(X, y)
    if not np.all((y == 0) | (y == 1)):
        raise TrainingDataError("logistic regression needs labels 0/1 (or booleans)")
    max_iter = int(params.get("max_iter", 20))
    tol = float(params.get("tolerance", 1e-6))
    w = np.zeros(X.shape[1])
    parts = _partitions(len(y), threads)
    prev = np.inf
    it = 0
    loss = np.inf
    with ThreadPoolExecutor(len(parts)) as ex:
        for it in rounds(1, max_iter, stop):
            stats = list(ex.map(lambda s: _logistic_newton_stats(X[s], y[s], w), parts))
            g = sum(s[0] for s in stats)
            H = sum(s[1] for s in stats) + 1e-10 * np.eye(len(w))
            loss = float(sum(s[2] for s in stats)) / len(y)
            w = w + np.linalg.solve(H, g)
            if abs(prev - loss) <= tol * max(1.0, abs(loss)):
                break
            prev = loss
    return {"coef": w}, loss, it


def _svm(data, params, threads, seed, stop):
    X = _design(data["X"], params)
    y = np.ascontiguousarray(data["y"], np.float64)
    _check(X, y)
    labels = np.unique(y)
    if len(labels) != 2:
        raise TrainingDataError("SVM needs exactly two label values")
    ys = np.where(y == labels[1], 1.0, -1.0)
    lam = float(params.get("lambda", 1e-4))
    epochs = int(params.get("max_iter", 30))
    lr0 = float(params.get("stepsize", 0.1))
    rng = np.random.default_rng(seed)
    parts = _partitions(len(y), threads)
    w = np.zeros(X.shape[1])
    hinge = 0.0
    with ThreadPoolExecutor(len(parts)) as ex:
        for ep in rounds(0, epochs - 1, stop):
            orders = [rng.permutation(np.arange(s.start, s.stop)) for s in parts]
            res = list(ex.map(lambda o: _svm_epoch(X, ys, w.copy(), lam, lr0, ep * len(o), o), orders))
            w = np.mean([r[0] for r in res], axis=0)  # merge: model averaging
            hinge = sum(r[1] for r in res) / len(y)
    return {"coef": w, "labels": labels.astype(np.float64)}, float(hinge), epochs


def _lmf(data, params, threads, seed, stop):
    rows = np.ascontiguousarray(data["row"], np.int64)
    cols = np.ascontiguousarray(data["col"], np.int64)
    vals = np.ascontiguousarray(data["value"], np.float64)
    if len(vals) == 0:
        raise TrainingDataError("no rows to train on")
    if not np.all(np.isfinite(vals)):
        raise TrainingDataError("the training data contains NaN or infinite values")
    if rows.min() < 0 or cols.min() < 0:
        raise TrainingDataError("row and column ids must be >= 0")
    rank = int(params.get("rank", 10))
    lr = float(params.get("stepsize", 0.01))
    lam = float(params.get("lambda", 0.01))
    epochs = int(params.get("max_iter", 50))
    rng = np.random.default_rng(seed)
    scale = float(params.get("scale_factor", 0.1))
    U = rng.normal(0, scale, (int(rows.max()) + 1, rank))
    V = rng.normal(0, scale, (int(cols.max()) + 1, rank))
    parts = _partitions(len(vals), threads)
    sq = 0.0
    with ThreadPoolExecutor(len(parts)) as ex:
        for _ in rounds(1, epochs, stop):
            orders = [rng.permutation(np.arange(s.start, s.stop)) for s in parts]
            copies = [(U.copy(), V.copy()) for _ in orders]
            sq = sum(ex.map(lambda a: _lmf_epoch(rows, cols, vals, a[1][0], a[1][1], lr, lam, a[0]),
                            zip(orders, copies)))
            U = np.mean([c[0] for c in copies], axis=0)
            V = np.mean([c[1] for c in copies], axis=0)
    rmse = float(np.sqrt(sq / len(vals)))
    return {"u": U, "v": V}, rmse, epochs


ALGORITHMS = {"linregr": _linregr, "logregr": _logregr, "svm": _svm, "lmf": _lmf}


def train(algorithm, data: dict, params: dict | None = None, *, threads: int = 2, seed: int = 0,
          stop: StopCheck = None) -> TrainOutput:
    """Train ``algorithm`` (a built-in or DSL name, or a compiled DSL algorithm) on arrays:
    {"X", "y"} or, for LMF, {"row", "col", "value"}.  ``stop()``, asked between epochs or
    iterations, ends training early with :class:`CancelledError` when it returns true."""
    params = dict(params or {})
    if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
        from learnedidx.indb import dsl

        return dsl.train_registered(algorithm, data, params, threads=threads, seed=seed, stop=stop)
    check_params(algorithm, params)
    t0 = time.perf_counter()
    model, loss, iters = ALGORITHMS[algorithm](data, params, threads, seed, stop)
    dt = time.perf_counter() - t0
    n = len(data["value"]) if algorithm == "lmf" else len(data["y"])
    d = params.get("rank", 10) if algorithm == "lmf" else data["X"].shape[1] + 1
    return TrainOutput(model, loss, iters, n, dt, _modelled(algorithm, n, int(d), iters, threads))


def predict(algorithm: str, model: dict, X: np.ndarray) -> np.ndarray:
    coef = model["coef"]
    Xi = _with_intercept(X, len(coef) == X.shape[1] + 1)
    z = Xi @ coef
    if algorithm == "linregr":
        return z
    if algorithm == "logregr":
        return (z > 0).astype(np.float64)
    if algorithm == "svm":
        return np.where(z > 0, model["labels"][1], model["labels"][0])
    raise InDBError(f"predict is not defined for {algorithm}")


def predict_proba(algorithm: str, model: dict, X: np.ndarray) -> np.ndarray:
    if algorithm != "logregr":
        raise InDBError("predict_proba is defined for logistic regression only")
    coef = model["coef"]
    return 1.0 / (1.0 + np.exp(-(_with_intercept(X, len(coef) == X.shape[1] + 1) @ coef)))


def get_algorithm(name: str):
    """A registered DSL algorithm by name (see :mod:`learnedidx.indb.dsl`)."""
    from learnedidx.indb import dsl

    return dsl.get_algorithm(name)


def register_algorithm(name: str, source: str):
    """Compile and register DSL source text; raises DSLError on bad source."""
    from learnedidx.indb import dsl

    return dsl.register_algorithm(name, source)
