"""Training data as the engine takes it: checked, with an intercept column, split into partitions."""
from __future__ import annotations

import numpy as np

from learnedidx.errors import TrainingDataError

#: Rows per chunk of a pass over rows in memory: results do not depend on the thread count.
CHUNK_ROWS = 1 << 16


NO_ROWS = "no rows to train on (the table is empty or every row has NULLs)"
NO_FEATURES = "no features to train on: indep names none and the model has no intercept"
NOT_FINITE = "the training data contains NaN or infinite values"


def check(X: np.ndarray, y: np.ndarray | None) -> None:
    """Refuse empty data, NaN or infinite values, and labels that do not match the rows."""
    if X.ndim != 2 or X.shape[0] == 0:
        raise TrainingDataError(NO_ROWS)
    if not np.all(np.isfinite(X)) or (y is not None and not np.all(np.isfinite(y))):
        raise TrainingDataError(NOT_FINITE)
    if y is not None and y.shape != (X.shape[0],):
        raise TrainingDataError("labels and features have different row counts")


def partitions(n: int, threads: int) -> list[slice]:
    """Contiguous slices of ``range(n)``, one per engine thread (fewer when n < threads)."""
    threads = max(1, min(threads, n))
    step = (n + threads - 1) // threads
    return [slice(i, min(n, i + step)) for i in range(0, n, step)]


def with_intercept(X: np.ndarray, intercept: bool) -> np.ndarray:
    """X as contiguous float64, with a leading column of ones when ``intercept``."""
    X = np.ascontiguousarray(X, np.float64)
    return np.ascontiguousarray(np.c_[np.ones(X.shape[0]), X]) if intercept else X


def design(X: np.ndarray, params: dict) -> np.ndarray:
    """The training matrix: a leading column of ones (the intercept, ``coef[0]``) is added
    unless ``params["intercept"]`` is false or X's first column is already all ones
    (DAnA-style tables, or MADlib's ``ARRAY[1, x1, ...]``)."""
    X = np.ascontiguousarray(X, np.float64)
    has_ones = X.ndim == 2 and X.shape[0] > 0 and X.shape[1] > 0 and bool(np.all(X[:, 0] == 1.0))
    return with_intercept(X, params.get("intercept") is not False and not has_ones)


def two_values(y: np.ndarray) -> np.ndarray | None:
    """The two distinct values of ``y``, ascending (None unless there are exactly two): in
    linear time, where ``np.unique`` sorts."""
    if len(y) == 0:
        return None
    rest = y[y != y[0]]
    if len(rest) == 0 or not np.all(rest == rest[0]):
        return None
    return np.array(sorted((float(y[0]), float(rest[0]))))


def labels(y: np.ndarray, kind: str, name: str) -> tuple[np.ndarray, dict]:
    """Labels as the algorithm's ``labels`` setting wants them, and what the model must keep:
    ``binary`` checks 0/1; ``signed`` maps two values to -1/+1 and keeps them as ``labels``."""
    if kind == "binary" and not np.all((y == 0) | (y == 1)):
        raise TrainingDataError(f"{name} needs labels 0/1 (or booleans)")
    if kind == "signed":
        values = two_values(y)
        if values is None:
            raise TrainingDataError(f"{name} needs exactly two label values")
        return np.where(y == values[1], 1.0, -1.0), {"labels": values}
    return y, {}


def factor_tuples(data: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row ids, column ids, values) of factor data {"row", "col", "value"}, checked."""
    rows = np.ascontiguousarray(data["row"], np.int64)
    cols = np.ascontiguousarray(data["col"], np.int64)
    vals = np.ascontiguousarray(data["value"], np.float64)
    if len(vals) == 0:
        raise TrainingDataError("no rows to train on")
    if not np.all(np.isfinite(vals)):
        raise TrainingDataError("the training data contains NaN or infinite values")
    if rows.min() < 0 or cols.min() < 0:
        raise TrainingDataError("row and column ids must be >= 0")
    return rows, cols, vals


class InMemory:
    """Rows held in memory, as the engine reads any source of rows: in chunks, pass after pass
    (:class:`learnedidx.indb.read.passes.StreamSource` is the other, the caller's stream).

    ``X`` is the design matrix as :func:`design` makes it; checked at once, unless the caller
    ``checked`` it already."""

    lead = 0  # the intercept's column, if any, is part of X already
    ones = False  # ... so no leading ones column is left to drop
    finite = True  # check() refused anything else

    def __init__(self, X: np.ndarray, y: np.ndarray, checked: bool = False) -> None:
        if not checked:
            check(X, y)
        elif len(y) == 0:
            raise TrainingDataError(NO_ROWS)
        self.X, self.y = X, np.ascontiguousarray(y, np.float64)
        self.n, self.d = X.shape

    def peek(self) -> tuple[np.ndarray, np.ndarray] | None:
        return (self.y[:1], self.X[:1]) if self.n else None

    def each(self, fn, ex, chunk_rows: int = CHUNK_ROWS) -> list:
        """``fn(y, X)`` of every chunk of ``chunk_rows`` rows, on executor ``ex``: the results in order."""
        y, X = self.y, self.X
        return list(ex.map(lambda a: fn(y[a:a + chunk_rows], X[a:a + chunk_rows]), range(0, self.n, chunk_rows)))

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return self.y, self.X

    def drop_lead(self) -> None:  # pragma: no cover - lead is 0
        raise AssertionError("in-memory rows have no leading column to drop")
