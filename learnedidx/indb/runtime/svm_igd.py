"""MADlib 2.1's support vector machines, trained as MADlib trains them, so that the same call on
the same rows in the same order gives the same model: ``svm_classification`` (hinge loss),
``svm_regression`` (epsilon-insensitive loss) and ``svm_one_class``, with their cross
validation.  MADlib's definitions (``linear_svm_igd`` and ``svm.py_in``):

* an iteration is one pass over the rows in their order (incremental gradient descent, one
  model, no shuffling); before each row the model is scaled by ``1 - lambda / n * stepsize``
  (L2; 0 when that is negative; ``n``: the group's rows), the row's step is ``stepsize *
  weight`` (its class's ``class_weight``), and with L1 the model is clipped towards 0 by
  ``lambda / n * stepsize`` after it;
* the step size is ``init_stepsize`` in the first iteration, then multiplied by ``decay_factor``
  after each (a ``decay_factor`` of 0 or less: ``init_stepsize / (t + 1)`` after iteration t);
* the pass also sums the loss and its subgradient at the model the iteration started from;
  ``loss`` is that sum plus ``lambda / 2 ||w||^2`` (L2; ``lambda ||w||_1`` with L1) over the
  rows, ``norm_of_gradient`` the norm of the sum's subgradient (with ``lambda w``);
* training stops after ``max_iter`` iterations or when the loss changed by less than
  ``tolerance`` relative to the previous iteration's (never after the first); every group
  steps with the same schedule and reports the same ``num_iterations``;
* cross validation (parameter lists and ``n_folds``): PostgreSQL's ``random()`` after
  ``setseed(0.5)`` orders the rows (one draw per row, in row order; :func:`pg_random`), the
  order is cut into ``n_folds`` contiguous folds (the first ``n mod n_folds`` one row longer),
  each candidate of the grid (lambda, epsilon (regression only), init_stepsize, max_iter,
  decay_factor; the first varying slowest) trains on the other folds in that order and scores
  the fold (classification: the share of its rows predicted right; regression: minus the
  root mean squared error); the best mean score wins (the first on ties).  One-class rows have
  no label, so, as in MADlib, every candidate scores 1 and the first wins.

The rows come as MADlib's features: the stream's (a leading 1 kept when MADlib's ``ARRAY[1,
...]`` states it), then a 1 with the linear kernel's ``fit_intercept`` (random feature maps
append theirs in the query, ``learnedidx._svm_features``).  Labels arrive as -1/+1 (mapped
here from two numeric values, the smaller to -1, or by the caller's SQL) or, for regression,
as they are.
"""
from __future__ import annotations

import itertools
import math
import time

import numpy as np
from numba import njit

from learnedidx import checks
from learnedidx.errors import CancelledError, ParameterError, TrainingDataError
from learnedidx.indb.runtime.data import NO_FEATURES, NO_ROWS, NOT_FINITE, two_values
from learnedidx.indb.runtime.engine import WORK_PER_CHECK, StopCheck

#: The parameters that may be lists (cross validation's candidates), in MADlib's grid order.
GRID = ("lambda", "epsilon", "init_stepsize", "max_iter", "decay_factor")


# ------------------------------------------------------------------ PostgreSQL's random()
_MASK = (1 << 64) - 1


def _splitmix64(state: int) -> tuple[int, int]:
    state = (state + 0x9E3779B97F4A7C15) & _MASK
    v = ((state ^ (state >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    v = ((v ^ (v >> 27)) * 0x94D049BB133111EB) & _MASK
    return state, v ^ (v >> 31)


@njit(cache=True, nogil=True)
def _xoroshiro_doubles(s0, s1, n):
    out = np.empty(n)
    for i in range(n):
        val = s0 * np.uint64(5)
        val = ((val << np.uint64(7)) | (val >> np.uint64(57))) * np.uint64(9)
        sx = s1 ^ s0
        s0 = ((s0 << np.uint64(24)) | (s0 >> np.uint64(40))) ^ sx ^ (sx << np.uint64(16))
        s1 = (sx << np.uint64(37)) | (sx >> np.uint64(27))
        out[i] = float(val >> np.uint64(12)) * 2.0 ** -52
    return out


def pg_random(n: int, seed: float = 0.5) -> np.ndarray:
    """The first ``n`` values of PostgreSQL 15's ``random()`` after ``setseed(seed)``
    (xoroshiro128** seeded through splitmix64 from ``seed * (2^52 - 1)``)."""
    s = int((2 ** 52 - 1) * seed) & _MASK
    s, s0 = _splitmix64(s)
    s, s1 = _splitmix64(s)
    if s0 == 0 and s1 == 0:  # pragma: no cover - PostgreSQL's guard against an all-zero state
        s0, s1 = 0x5851F42D4C957F2D, 0x14057B7EF767814F
    return _xoroshiro_doubles(np.uint64(s0), np.uint64(s1), n)


# ------------------------------------------------------------------ one iteration
@njit(cache=True, nogil=True)
def _pass(X, y, weight, rows, model, incr, grad, total, step, l2, l1, n_tuples, svc, eps, icpt):
    """One piece of an iteration over ``X[rows]`` (``icpt``: each row ends with an implicit 1):
    the model ``incr`` stepped row after row; the loss (``total[0]``) and subgradient
    (``grad``) summed at ``model``, the iteration's starting point."""
    d = X.shape[1]
    k = incr.shape[0]
    wscale = 1.0 - l2 / n_tuples * step
    clip = l1 / n_tuples * step
    for r in rows:
        yi = y[r]
        if wscale > 0:
            for j in range(k):
                incr[j] *= wscale
        else:
            incr[:] = 0.0
        wx = 0.0
        for j in range(d):
            wx += incr[j] * X[r, j]
        if icpt:
            wx += incr[d]
        s = step * weight[r]
        c = 0.0
        if svc:
            if 1.0 - wx * yi > 0.0:
                c = -yi
        else:
            diff = wx - yi
            sign = 1.0 if diff > 0 else -1.0
            if sign * diff - eps > 0.0:
                c = sign
        if c != 0.0:
            sc = s * c
            for j in range(d):
                incr[j] -= sc * X[r, j]
            if icpt:
                incr[d] -= sc
        if l1 != 0.0:
            for j in range(k):
                if incr[j] > clip:
                    incr[j] -= clip
                elif incr[j] < -clip:
                    incr[j] += clip
                else:
                    incr[j] = 0.0
        mx = 0.0
        for j in range(d):
            mx += model[j] * X[r, j]
        if icpt:
            mx += model[d]
        if svc:
            dist = 1.0 - mx * yi
            g = -yi if dist > 0 else 0.0
        else:
            diff = mx - yi
            sign = 1.0 if diff > 0 else -1.0
            dist = abs(diff) - eps
            g = sign if sign * diff - eps > 0.0 else 0.0
        if dist > 0.0:
            total[0] += dist
        if g != 0.0:
            for j in range(d):
                grad[j] += g * X[r, j]
            if icpt:
                grad[d] += g


@njit(cache=True, nogil=True)
def _dots(X, rows, w, icpt):
    """w . x for each row of ``X[rows]``."""
    d = X.shape[1]
    out = np.empty(len(rows))
    for i in range(len(rows)):
        s = 0.0
        for j in range(d):
            s += w[j] * X[rows[i], j]
        out[i] = s + (w[d] if icpt else 0.0)
    return out


class Problem:
    """Rows as MADlib's SVM reads them: ``X`` (``icpt``: each row ends with an implicit 1), ``y``
    (-1/+1 for classification), ``weight`` (each row's class weight)."""

    def __init__(self, X: np.ndarray, y: np.ndarray, icpt: bool, svc: bool) -> None:
        self.X, self.y, self.icpt, self.svc = X, y, icpt, svc
        self.k = X.shape[1] + int(icpt)


def iterate(p: Problem, rows: np.ndarray, weight: np.ndarray, s: dict, eps: float, stop: StopCheck,
            model: np.ndarray, step: float) -> tuple[np.ndarray, float, np.ndarray]:
    """One iteration over ``rows``: (the new model, the loss summed at ``model``, its
    subgradient), the loss and subgradient with the regularization's terms."""
    incr, grad, total = model.copy(), np.zeros(p.k), np.zeros(1)
    l2, l1 = (s["lambda"], 0.0) if s["norm"] == "l2" else (0.0, s["lambda"])
    piece = max(1, WORK_PER_CHECK // max(1, 4 * p.k))
    for a in range(0, len(rows), piece):
        if stop is not None and stop():
            raise CancelledError("training stopped: the calling statement is gone")
        _pass(p.X, p.y, weight, rows[a:a + piece], model, incr, grad, total, step, l2, l1, float(len(rows)),
              p.svc, eps, p.icpt)
    norm = math.sqrt(float(model @ model))
    loss = float(total[0]) + l2 * norm * norm / 2 + l1 * float(np.abs(model).sum())
    grad += l2 * model
    if l1 != 0.0:
        grad += l1 * np.sign(model)
    return incr, loss, grad


def weights(y: np.ndarray, rows: np.ndarray, class_weight, svc: bool) -> np.ndarray:
    """Each row's weight: its class's in ``class_weight`` ({-1: w, 1: w}, or "balanced": half
    the rows over the class's rows), else 1."""
    w = np.ones(len(y))
    if not svc or not class_weight:
        return w
    if class_weight == "balanced":
        n = len(rows)
        for label in (-1.0, 1.0):
            count = int(np.count_nonzero(y[rows] == label))
            if count:
                w[y == label] = n / 2 / count
        return w
    for label, value in class_weight.items():
        w[y == float(label)] = float(value)
    return w


def train(p: Problem, groups: list[np.ndarray], s: dict, eps: list[float], stop: StopCheck
          ) -> tuple[list[dict], int]:
    """Train one model per group of rows (indices into ``p``'s rows, in training order) with
    settings ``s`` (scalars): per group, its model, loss and gradient norm; and the
    iterations run (the same for every group)."""
    models = [np.zeros(p.k) for _ in groups]
    w = [weights(p.y, g, s["class_weight"], p.svc) for g in groups]
    out: list[dict | None] = [None] * len(groups)
    prev: list[float | None] = [None] * len(groups)
    step, it = s["init_stepsize"], 0
    while any(o is None for o in out):
        it += 1
        for i, g in enumerate(groups):
            if out[i] is not None:
                continue
            new, loss, grad = iterate(p, g, w[i], s, eps[i], stop, models[i], step)
            models[i] = new
            done = it >= s["max_iter"]
            if prev[i] is not None:
                with np.errstate(divide="ignore", invalid="ignore"):
                    change = abs((prev[i] - loss) / np.float64(prev[i]))
                done = done or bool(change < s["tolerance"])
            prev[i] = loss
            if done:
                out[i] = {"coef": new, "loss": loss / len(g), "norm_of_gradient": float(np.linalg.norm(grad))}
        step = step * s["decay_factor"] if s["decay_factor"] > 0 else s["init_stepsize"] / (it + 1)
    return out, it


# ------------------------------------------------------------------ cross validation
def folds(n: int, n_folds: int) -> list[tuple[int, int]]:
    """MADlib's folds of ids 1..n: [start, end) each, the first n mod n_folds one longer."""
    r, size = n % n_folds, n // n_folds
    out = []
    for f in range(1, n_folds + 1):
        start = r * (size + 1) + (f - r - 1) * size + 1 if f > r else (f - 1) * (size + 1) + 1
        out.append((start, start + (size if f > r else size + 1)))
    return out


def candidates(s: dict) -> tuple[list[str], list[dict]]:
    """The grid's names (those given as lists of several values) and its candidates, in
    MADlib's order; epsilon takes part in regression only."""
    names = [k for k in GRID if len(s[k]) > 1 and (k != "epsilon" or not s["svc"])]
    return names, [dict(zip(names, values)) for values in itertools.product(*(s[k] for k in names))]


def cross_validate(p: Problem, s: dict, stop: StopCheck) -> tuple[list[str], list[list[float]], dict]:
    """The cross validation's table (the grid's names, then mean_score, std_dev_score; one row
    per candidate) and the best candidate."""
    names, grid = candidates(s)
    n = len(p.y)
    order = np.argsort(pg_random(n), kind="stable")  # row order[j] has id j + 1
    table, best, best_score = [], grid[0], -math.inf
    for cand in grid:
        if s["one_class"]:
            scores = [1.0] * s["n_folds"]
        else:
            scores = []
            for start, end in folds(n, s["n_folds"]):
                train_rows = np.r_[order[:start - 1], order[end - 1:]]
                valid = order[start - 1:end - 1]
                fs = {**scalar(s), **cand, "class_weight": s["fold_class_weight"]}
                (m,), _ = train(p, [train_rows], fs, [fs["epsilon"]], stop)
                pred = _dots(p.X, valid, m["coef"], p.icpt)
                if p.svc:
                    miss = np.count_nonzero(np.where(pred >= 0, 1.0, -1.0) != p.y[valid])
                    scores.append(1.0 - miss / len(valid))
                else:
                    scores.append(-math.sqrt(float(np.mean((p.y[valid] - pred) ** 2))))
        mean = sum(scores) / len(scores)
        std = math.sqrt(sum((x - mean) ** 2 for x in scores) / (len(scores) - 1))
        table.append([cand[k] for k in names] + [mean, std])
        if mean > best_score:
            best, best_score = cand, mean
    return names + ["mean_score", "std_dev_score"], table, best


# ------------------------------------------------------------------ a call
def scalar(s: dict) -> dict:
    """Settings with each list parameter at its first value."""
    return {**s, **{k: s[k][0] for k in GRID}}


def check(s: dict) -> dict:
    """The call's settings (the request's ``igd`` object), checked before any data is read."""
    if not isinstance(s, dict):
        raise ParameterError("igd must be an object")
    out = dict(s)
    bounds = {"init_stepsize": (0.0, None, True), "lambda": (0.0, None, False), "epsilon": (0.0, None, False),
              "decay_factor": (None, 1.0, False)}
    for k in GRID:
        values = s.get(k)
        if not isinstance(values, list) or not values:
            raise ParameterError(f"{k} must be a list of values")
        if k == "max_iter":
            out[k] = [checks.integer(k, v, 1, error=ParameterError, whole_floats=True) for v in values]
        else:
            lo, hi, above = bounds[k]
            out[k] = [checks.number(k, v, lo, hi, above=above, error=ParameterError) for v in values]
    out["tolerance"] = checks.number("tolerance", s.get("tolerance"), 0.0, error=ParameterError)
    out["n_folds"] = checks.integer("n_folds", s.get("n_folds", 0), 0, error=ParameterError, whole_floats=True)
    if s.get("norm") not in ("l1", "l2"):
        raise ParameterError("norm must be l1 or l2")
    for name in ("class_weight", "fold_class_weight"):
        cw = s.get(name)
        if cw not in (None, "balanced") and not (isinstance(cw, dict) and set(cw) <= {"-1", "1"}):
            raise ParameterError(f"{name} must be balanced or the weights of labels -1 and 1")
        if isinstance(cw, dict):
            out[name] = {k: checks.number(f"{name} of {k}", v, error=ParameterError) for k, v in cw.items()}
    out.setdefault("fold_class_weight", out.get("class_weight"))
    for flag in ("svc", "one_class", "intercept", "lead_one", "eps_column"):
        out[flag] = checks.boolean(flag, s.get(flag, False), error=ParameterError)
    names, _ = candidates(out)
    if names and out["n_folds"] < 2:
        raise ParameterError("parameter lists of several values need n_folds of 2 or more (cross validation)")
    return out


def _one_class_rows(X: np.ndarray, icpt: bool) -> tuple[np.ndarray, np.ndarray]:
    """MADlib's one-class rows: the distinct rows as +1 (their first occurrences, in order),
    then the origin (zeros but the intercept's 1) as -1."""
    full = np.c_[X, np.ones(len(X))] if icpt else X
    _, first = np.unique(full, axis=0, return_index=True)
    rows = full[np.sort(first)]
    origin = np.zeros((1, full.shape[1]))
    origin[0, -1] = 1.0
    return np.r_[rows, origin], np.r_[np.ones(len(rows)), -1.0]


def fit(src, s: dict, grouped: bool, stop: StopCheck) -> tuple[list[dict], dict]:
    """Train MADlib's SVM on the rows of ``src`` (a stream or rows in memory; with ``grouped``
    its last column numbers the groups): one result per group and what they share, as
    :func:`learnedidx.indb.runtime.models.fit` returns them; ``cv``: the cross validation's
    table and the chosen values."""
    t0 = time.perf_counter()
    src.set_lead(1 if s["lead_one"] else 0)
    src.need_all = True
    y, X = src.arrays()
    if not src.finite:
        raise TrainingDataError(NOT_FINITE)
    group_index = X[:, -1] if grouped else None
    X = X[:, :-1] if grouped else X
    eps_rows = X[:, -1] if s["eps_column"] else None
    X = np.ascontiguousarray(X[:, :-1] if s["eps_column"] else X)
    if len(y) == 0:
        raise TrainingDataError(NO_ROWS)
    if X.shape[1] + int(s["intercept"]) == 0:
        raise TrainingDataError(NO_FEATURES)
    extra: dict = {}
    icpt = s["intercept"]
    if s["one_class"]:
        X, y = _one_class_rows(X, icpt)
        icpt = False
        extra = {"labels": np.array([-1.0, 1.0])}
    elif s["svc"]:
        values = two_values(y)
        if values is None:
            raise TrainingDataError(f"svm classification needs exactly two label values, not {len(np.unique(y))}")
        y = np.where(y == values[1], 1.0, -1.0)
        extra = {"labels": values}
    p = Problem(X, np.ascontiguousarray(y, np.float64), icpt, s["svc"])
    settings = scalar(s)
    cv = None
    if s["n_folds"] > 1 and candidates(s)[0]:
        names, table, best = cross_validate(p, s, stop)
        settings.update(best)
        cv = {"columns": names, "rows": table, "chosen": {k: settings[k] for k in GRID}}
    if grouped:
        gi = group_index.astype(np.int64)
        keys = np.unique(gi)
        groups = [np.flatnonzero(gi == k) for k in keys]
    else:
        keys, groups = [None], [np.arange(len(y))]
    eps = [float(eps_rows[g[0]]) if eps_rows is not None else settings["epsilon"] for g in groups]
    models, iterations = train(p, groups, settings, eps, stop)
    seconds = time.perf_counter() - t0
    results = [{"group": None if k is None else int(k),
                "model": {"coef": m["coef"].tolist(), **{k2: v.tolist() for k2, v in extra.items()}},
                "loss": m["loss"], "num_rows_processed": int(len(g)), "num_iterations": iterations,
                "accel_seconds": None, "train_seconds": seconds,
                "stats": {"loss": m["loss"], "norm_of_gradient": m["norm_of_gradient"]}}
               for k, g, m in zip(keys, groups, models)]
    shared = {"intercept": bool(s["intercept"]), "num_features": int(p.k), "cv": cv,
              "chosen": {k: settings[k] for k in GRID}}
    return results, shared


def warm_up() -> None:
    """Compile the kernels (a server calls this at start)."""
    p = Problem(np.ones((2, 1)), np.array([-1.0, 1.0]), True, True)
    iterate(p, np.arange(2), np.ones(2), {"lambda": 0.1, "norm": "l2"}, 0.0, None, np.zeros(2), 0.1)
    _dots(p.X, np.arange(2), np.zeros(2), True)
    pg_random(2)
