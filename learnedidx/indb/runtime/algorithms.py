"""The algorithms a caller names: the built-ins and registered DSL algorithms; train and predict.

The built-ins (:mod:`.builtins`) are compiled once per process; user algorithms are
compiled when registered and kept by name in this process's registry.
"""
from __future__ import annotations

import threading

import numpy as np

from learnedidx.errors import BuiltinNameError, DSLError, InDBError, UnknownAlgorithmError
from learnedidx.indb.dsl import Algorithm, compile_algorithm, settings_for
from learnedidx.indb.runtime.logregr import optimizer as logregr_optimizer
from learnedidx.indb.runtime.logregr import train as train_logregr
from learnedidx.indb.runtime.lstsq import train as train_linregr
from learnedidx.indb.runtime.builtins import ALGORITHMS, SOURCES
from learnedidx.indb.runtime.data import with_intercept
from learnedidx.indb.runtime.engine import StopCheck, TrainOutput, run

_REGISTRY: dict[str, Algorithm] = {}
_BUILTINS: dict[str, Algorithm] = {}
_LOCK = threading.Lock()


def builtin(name: str) -> Algorithm:
    """A built-in algorithm, compiled once per process."""
    with _LOCK:
        if name not in _BUILTINS:
            _BUILTINS[name] = compile_algorithm(name, SOURCES[name])
        return _BUILTINS[name]


def register_algorithm(name: str, source: str) -> Algorithm:
    """Compile ``source`` (unless registered unchanged already) and register it under ``name``;
    raises DSLError on bad source or a built-in's name."""
    if not name or not name.replace("_", "").isalnum():
        raise DSLError("algorithm names are letters, digits and underscores")
    if name in ALGORITHMS:
        raise BuiltinNameError(f"{name} is a built-in algorithm")
    with _LOCK:
        known = _REGISTRY.get(name)
    if known is not None and known.source == source:
        return known  # unchanged source: no recompilation
    alg = compile_algorithm(name, source)
    with _LOCK:
        _REGISTRY[name] = alg
    return alg


def get_algorithm(name: str) -> Algorithm:
    """A registered user algorithm by name."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownAlgorithmError(f"unknown algorithm {name!r}: register it first") from None


def check_params(algorithm: str, params: dict) -> None:
    """Refuse MADlib options this engine does not implement (rather than ignore them) and
    parameters out of range, before any data is read."""
    if algorithm == "logregr":
        logregr_optimizer(params)
    settings_for(builtin(algorithm).settings, params)


def train(algorithm: str | Algorithm, data: dict, params: dict | None = None, *, threads: int = 2, seed: int = 0,
          stop: StopCheck = None) -> TrainOutput:
    """Train ``algorithm`` (a built-in or registered name, or a compiled DSL algorithm) on arrays:
    {"X", "y"} or, for factor algorithms such as LMF, {"row", "col", "value"}.  ``stop()``, asked
    between epochs or iterations, ends training early with :class:`CancelledError` when it
    returns true.  Built-ins take MADlib's parameter names (``max_iter``, ``stepsize``, ``lambda``, ...)."""
    params = dict(params or {})
    if isinstance(algorithm, Algorithm):
        return run(algorithm, data, params, threads=threads, seed=seed, stop=stop)
    if algorithm not in ALGORITHMS:
        return run(get_algorithm(algorithm), data, params, threads=threads, seed=seed, stop=stop)
    check_params(algorithm, params)
    if algorithm == "linregr":  # the R factor of the rows (lstsq.py); the DSL source is its cost model
        return train_linregr(data, params, threads=threads, stop=stop, cost=builtin(algorithm).cost)
    if algorithm == "logregr":  # MADlib's optimizers over the DSL source's accumulators
        return train_logregr(builtin(algorithm), data, params, threads=threads, stop=stop)
    out = run(builtin(algorithm), data, params, threads=threads, seed=seed, stop=stop)
    if algorithm == "lmf":
        out.loss = float(np.sqrt(out.loss))  # RMSE, as MADlib reports
    return out


def predict(algorithm: str, model: dict, X: np.ndarray) -> np.ndarray:
    """Predictions of a linregr (score), logregr (class 0/1) or svm (label) model."""
    coef = model["coef"]
    Xi = with_intercept(X, len(coef) == X.shape[1] + 1)
    z = Xi @ coef
    if algorithm == "linregr":
        return z
    if algorithm == "logregr":
        return (z > 0).astype(np.float64)
    if algorithm == "svm":
        return np.where(z > 0, model["labels"][1], model["labels"][0])
    raise InDBError(f"predict is not defined for {algorithm}")


def predict_proba(algorithm: str, model: dict, X: np.ndarray) -> np.ndarray:
    """P(y = 1) of a logregr model."""
    if algorithm != "logregr":
        raise InDBError("predict_proba is defined for logistic regression only")
    coef = model["coef"]
    return 1.0 / (1.0 + np.exp(-(with_intercept(X, len(coef) == X.shape[1] + 1) @ coef)))
