"""The functions an algorithm's source may call.

The per-tuple functions (``gradient``, ``loss``, ``acc_*``, ...) call :data:`FUNCTIONS`,
compiled by Numba; ``update`` runs as Python once per epoch and may also call
:data:`UPDATE_FUNCTIONS`.
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def dot(a, b):
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i] * b[i]
    return s


@njit(cache=True, nogil=True)
def sign(z):
    return 1.0 if z > 0 else (-1.0 if z < 0 else 0.0)


@njit(cache=True, nogil=True)
def outer(a, b):
    return np.outer(a, b)


def _lstsq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.linalg.lstsq(a, b, rcond=None)[0]


#: Functions of the per-tuple code (compiled by Numba).
FUNCTIONS = {"dot": dot, "sigmoid": sigmoid, "sign": sign, "outer": outer, "exp": np.exp, "log": np.log,
             "log1p": np.log1p, "sqrt": np.sqrt, "abs": abs, "max": max, "min": min, "len": len}
#: Further functions of ``update`` (plain Python over the summed accumulators, once per epoch).
UPDATE_FUNCTIONS = {"solve": np.linalg.solve, "lstsq": _lstsq, "eye": np.eye}
#: Functions the cycle model runs on the nonlinear pipeline.
NONLINEAR = {"sigmoid", "exp", "log", "log1p", "sqrt"}
