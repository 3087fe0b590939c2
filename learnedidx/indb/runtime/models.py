"""The models of one training call: one, or one per group of rows (MADlib's ``grouping_cols``),
each with the statistics MADlib's output tables hold (:mod:`.stats`).

The caller's rows arrive as a source read in passes (:class:`~learnedidx.indb.read.passes.StreamSource`):
labels and a design matrix whose column 0 is ones (the intercept's); with grouping, its last
column numbers each row's group (1, 2, ... in the order of the grouping columns).  One model of
an algorithm that sums over the rows trains on the stream itself, its statistics from its sums;
grouping and SVM take every row into memory.  The intercept is decided once for all groups, so
every group's model has the same coefficients, and SVM labels are mapped to -1/+1 once for all
rows, so a group holding one class still trains (MADlib does the same).
"""
from __future__ import annotations

import numpy as np

from learnedidx.errors import TrainingDataError
from learnedidx.indb.dsl import Algorithm
from learnedidx.indb.runtime import stats
from learnedidx.indb.runtime.algorithms import train
from learnedidx.indb.runtime.data import NO_FEATURES, NOT_FINITE, InMemory, two_values
from learnedidx.indb.runtime.data import design as with_design
from learnedidx.indb.runtime.engine import StopCheck, TrainOutput


def _groups(index: np.ndarray) -> list[tuple[int, np.ndarray | slice]]:
    """(group number, its rows) in group order: slices when the rows arrived grouped."""
    gi = index.astype(np.int64)
    if len(gi) and np.all(gi[1:] >= gi[:-1]):
        cuts = np.flatnonzero(np.diff(gi)) + 1
        starts, ends = np.r_[0, cuts], np.r_[cuts, len(gi)]
        return [(int(gi[a]), slice(int(a), int(b))) for a, b in zip(starts, ends)]
    order = np.argsort(gi, kind="stable")
    keys, first = np.unique(gi[order], return_index=True)
    bounds = np.r_[first, len(gi)]
    return [(int(k), order[bounds[i]:bounds[i + 1]]) for i, k in enumerate(keys)]


def _statistics(name: str, out: TrainOutput, X: np.ndarray | None, y: np.ndarray | None, n: int) -> dict:
    """MADlib's statistics of a model, from the sums training made (and, for svm, the rows)."""
    coef = np.asarray(out.model["coef"], np.float64)
    if name == "linregr":  # the extension's linregr_final computes MADlib's statistics from the states
        return {key: out.info[key].encoded() for key in ("state", "hetero_state") if key in out.info}
    if name == "logregr":
        return stats.logregr(coef, out.info["accumulators"]["hess"], -out.loss * n)
    if name == "svm":  # the engine penalizes every coefficient but the first
        return stats.svm(coef, X, y, out.info["settings"]["l2"], np.arange(len(coef)) > 0)
    return {}


def fit(trainee: str | Algorithm, src, params: dict, *, grouped: bool, threads: int, seed: int,
        stop: StopCheck) -> tuple[list[dict], dict]:
    """Train ``trainee`` (a built-in's name or a compiled algorithm) on every group of the rows
    of ``src``; returns one result per group (``group``: its number, or None) and what they
    share (``intercept``, ``num_features``)."""
    name = trainee if isinstance(trainee, str) else trainee.name
    params = dict(params)
    if not grouped and name != "svm":  # one model, trained while the rows stream
        if params.get("intercept") is False:
            src.set_lead(0)
        out = train(trainee, src, params, threads=threads, seed=seed, stop=stop)
        return [result(None, out, src.n, _statistics(name, out, None, None, src.n), {})], \
            {"intercept": bool(src.lead or src.ones), "num_features": int(src.d - src.lead)}
    src.need_all = True
    y, design = src.arrays()
    group_index = design[:, -1] if grouped else None
    design = design[:, :-1] if grouped else design
    X = design[:, 1:]
    ones = X.shape[1] > 0 and len(X) > 0 and bool(np.all(X[:, 0] == 1.0))
    intercept = ones or params.get("intercept") is not False
    data_X = design if intercept and not ones else X  # the design's column of ones: no copy to add it
    extra: dict = {}
    if not src.finite:  # the stream's decoding saw every value: no pass over them to check again
        raise TrainingDataError(NOT_FINITE)
    if name == "svm":
        values = two_values(y)
        if values is None:
            raise TrainingDataError(f"svm needs exactly two label values, not {len(np.unique(y))}")
        y = np.where(y == values[1], 1.0, -1.0)
        params = {**params, "labels": "any"}  # mapped here, once for every group
        extra = {"labels": values}
    if len(y) == 0:
        raise TrainingDataError("no rows to train on (the table is empty or every row has NULLs)")
    if data_X.shape[1] == 0:
        raise TrainingDataError(NO_FEATURES)
    parts = _groups(group_index) if grouped else [(None, slice(None))]
    results = []
    for group, rows in parts:
        Xg, yg = data_X[rows], y[rows]
        out = train(trainee, InMemory(with_design(Xg, params), yg, checked=True), params, threads=threads, seed=seed,
                    stop=stop)
        results.append(result(group, out, len(yg), _statistics(name, out, Xg, yg, len(yg)), extra))
    return results, {"intercept": bool(intercept), "num_features": int(X.shape[1])}


def result(group: int | None, out: TrainOutput, rows: int, statistics: dict, extra: dict) -> dict:
    """One model as the server replies it (JSON): its group, model arrays (and ``extra``
    arrays), loss, rows, iterations, times and MADlib's statistics."""
    return {"group": group, "model": {k: np.asarray(v).tolist() for k, v in {**out.model, **extra}.items()},
            "loss": out.loss, "num_rows_processed": rows, "num_iterations": out.iterations,
            "accel_seconds": out.modelled_seconds, "train_seconds": out.seconds,
            "stats": {k: np.asarray(v).tolist() for k, v in statistics.items()}}
