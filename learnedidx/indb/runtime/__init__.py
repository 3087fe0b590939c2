"""The runtime of in-database training: the engine loop (:mod:`.engine`), data preparation
(:mod:`.data`), the built-in algorithms (:mod:`.builtins`; linregr trains from the R factor of
the rows, :mod:`.lstsq`, and logregr with MADlib's optimizers, :mod:`.logregr`), the registry of user algorithms
with train and predict (:mod:`.algorithms`), the models of one call, one per group
(:mod:`.models`), and MADlib's statistics of them (:mod:`.stats`), over algorithms compiled
by :mod:`learnedidx.indb.dsl`::

    from learnedidx.indb import runtime
    out = runtime.train("linregr", {"X": X, "y": y}, threads=2)
    runtime.predict("linregr", out.model, X)
"""
from __future__ import annotations

from learnedidx.indb.runtime.algorithms import (builtin, check_params, get_algorithm, predict, predict_proba,
                                                register_algorithm, train)
from learnedidx.indb.runtime.builtins import ALGORITHMS
from learnedidx.indb.runtime.engine import TrainOutput

__all__ = ["ALGORITHMS", "TrainOutput", "builtin", "check_params", "get_algorithm", "predict", "predict_proba",
           "register_algorithm", "train"]
