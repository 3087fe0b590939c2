"""The analytics engine: per-thread models over partitions of the tuples, merged every epoch.

The algorithms, the four built-ins included, are written in the DSL (:mod:`learnedidx.indb.dsl`)
and compiled into nogil Numba kernels; worker threads each run one on a contiguous partition
and their models (or accumulators) are merged every epoch (:mod:`learnedidx.indb.dsl.kernels`).
Results are deterministic given the seed and the thread count.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from learnedidx.errors import CancelledError, InDBError, NotSupportedError, ParameterError, TrainingDataError


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


# ---------------------------------------------------------------------- algorithms
#: The built-in algorithms, written in the DSL (:mod:`learnedidx.indb.dsl.builtins`).
ALGORITHMS = ("linregr", "logregr", "svm", "lmf")


def train(algorithm, data: dict, params: dict | None = None, *, threads: int = 2, seed: int = 0,
          stop: StopCheck = None) -> TrainOutput:
    """Train ``algorithm`` (a built-in or DSL name, or a compiled DSL algorithm) on arrays:
    {"X", "y"} or, for LMF, {"row", "col", "value"}.  ``stop()``, asked between epochs or
    iterations, ends training early with :class:`CancelledError` when it returns true.
    Built-ins take MADlib's parameter names (``max_iter``, ``stepsize``, ``lambda``, ...)."""
    from learnedidx.indb import dsl

    params = dict(params or {})
    if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
        return dsl.train_registered(algorithm, data, params, threads=threads, seed=seed, stop=stop)
    check_params(algorithm, params)
    out = dsl.train_registered(dsl.builtin(algorithm), data, params, threads=threads, seed=seed, stop=stop)
    if algorithm == "lmf":
        out.loss = float(np.sqrt(out.loss))  # RMSE, as MADlib reports
    return out


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
