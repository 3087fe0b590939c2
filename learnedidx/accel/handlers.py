"""Accelerator-server handlers for training requests: ``train.full``, ``train.incremental``."""
from __future__ import annotations

import numpy as np

from learnedidx.server.registry import handler


def _f64(arrays: dict, name: str) -> np.ndarray:
    if name not in arrays:
        raise KeyError(f"missing array {name!r}")
    return np.ascontiguousarray(arrays[name], dtype=np.float64)


def _reply(res: dict):
    return ({"cycles": int(res["cycles"]), "device_seconds": res["device_seconds"],
             "host_seconds": res["host_seconds"]}, {"R": res["R"], "coef": res["coef"]})


@handler("train.full")
def train_full(args, arrays, ctx):
    """Least squares of A (N×n) against b on the server's device."""
    return _reply(ctx.server.device.run("full", _f64(arrays, "A"), _f64(arrays, "b")))


@handler("train.incremental")
def train_incremental(args, arrays, ctx):
    """SIA memoized retrain: R_old, A_delta, A, b."""
    return _reply(ctx.server.device.run("incremental", _f64(arrays, "A"), _f64(arrays, "b"),
                                        _f64(arrays, "R_old"), _f64(arrays, "A_delta")))
