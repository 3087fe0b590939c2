"""The runtime of in-database training: the engine loop, data preparation, the built-in
algorithms and the registry of user algorithms, over algorithms compiled by
:mod:`learnedidx.indb.dsl`.

>>> from learnedidx.indb import runtime
>>> out = runtime.train("linregr", {"X": X, "y": y}, threads=2)   # doctest: +SKIP
"""
from __future__ import annotations

from learnedidx.indb.runtime.algorithms import (builtin, check_params, get_algorithm, predict, predict_proba,
                                                register_algorithm, train)
from learnedidx.indb.runtime.builtins import ALGORITHMS
from learnedidx.indb.runtime.engine import TrainOutput

__all__ = ["ALGORITHMS", "TrainOutput", "builtin", "check_params", "get_algorithm", "predict", "predict_proba",
           "register_algorithm", "train"]
