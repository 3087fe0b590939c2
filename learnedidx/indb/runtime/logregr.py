"""Logistic regression as MADlib 2.1 defines it: its optimizers, its stopping rule, its iterations.

Each iteration is one pass over the rows that sums, at the current coefficients c, the gradient
g = Σ (y - σ(x·c)) x, the Hessian H = X'AX (a = σ(x·c) σ(-x·c)) and the log-likelihood
L(c) (the DSL's logregr accumulators, :mod:`.builtins`), and then steps:

* ``irls`` (``newton``): c := H⁺ (H c + g), H⁺ MADlib's pseudo-inverse (the inverse when the
  condition number is below 1e20);
* ``cg``: MADlib's conjugate gradient: the first direction is g; then Hestenes-Stiefel,
  β = g·(g - g₋) / d₋·(g - g₋), set to 0 when g·(g - g₋) / g₋·g₋ is no more than the least
  denormal (Powell's restart), d := g - β d₋; and the Newton step along d, c := c + (g·d / d'Hd) d;
* ``igd``: MADlib's incremental gradient: a pass of c := c + 0.01 (y - σ(x·c)) x row by row, in
  the order the rows come (the caller's scan); MADlib's first iteration takes no step (its step
  size starts at 0), and the log-likelihood it sees in an iteration is the one at the
  coefficients the iteration starts from (0 in the first).

MADlib stops after iteration k when k reaches ``max_iter`` or, from the second iteration, when the
log-likelihoods summed over the rows at the coefficients the last two iterations started from
differ by less than ``tolerance`` (``__logregr_*_step_distance``): the same rule here, so the same
iterations.  A step to non-finite coefficients stops it (MADlib's TERMINATED).  Unlike MADlib,
which reports the Hessian and log-likelihood of the last iteration's start, the statistics are
those at the coefficients returned: one more pass computes them there.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from learnedidx.accel.engine_model import modelled_seconds
from learnedidx.errors import ParameterError
from learnedidx.indb.dsl import Algorithm, settings_for
from learnedidx.indb.runtime.data import InMemory, design
from learnedidx.indb.runtime.engine import (Accumulation, StopCheck, TrainOutput, all_rows, check_first_pass,
                                            check_stop, rounds)
from learnedidx.indb.runtime.stats import spd_inverse

#: The optimizers a caller names, as MADlib names them.
OPTIMIZERS = {"irls": "irls", "newton": "irls", "cg": "cg", "igd": "igd"}
#: MADlib's incremental gradient step size (hard-coded there too).
IGD_STEP = 0.01
DENORM_MIN = np.finfo(np.float64).smallest_subnormal


def optimizer(params: dict) -> str:
    """The optimizer ``params`` names (MADlib's names), checked."""
    name = params.get("optimizer", "irls")
    if name not in OPTIMIZERS:
        raise ParameterError(f"optimizer must be 'irls' (or 'newton'), 'cg' or 'igd', not {name!r}")
    return OPTIMIZERS[name]


class _Passes:
    """Passes over ``src`` summing the gradient, the Hessian and the loss (minus the
    log-likelihood) at given coefficients; the first decides the intercept's column."""

    def __init__(self, alg: Algorithm, src, ex: ThreadPoolExecutor, stop: StopCheck) -> None:
        self.alg, self.src, self.ex, self.stop = alg, src, ex, stop
        self.acc: Accumulation | None = None

    def start(self) -> tuple[np.ndarray, np.ndarray, float]:
        """The first pass, at c = 0: (g, H, loss)."""
        src = self.src
        first = src.peek()
        if first is None:
            src.each(lambda y, X: None, self.ex)  # the pass's end: its row counts
            check_first_pass(src)
        y0, X0 = first
        self.acc = Accumulation(self.alg, np.zeros(src.d), X0[0], float(y0[0]), "binary")
        out = self.at(np.zeros(src.d))
        check_first_pass(src)
        if src.ones and src.lead:  # the features start with ones: no intercept column of our own
            src.drop_lead()
            self.acc = Accumulation(self.alg, np.zeros(src.d), X0[0, 1:], float(y0[0]), "binary")
            out = self.at(np.zeros(src.d))
        return out

    def at(self, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        (g, H), loss = self.acc.run(self.src, c, self.ex, self.stop)
        return g, H, loss


def _irls(c: np.ndarray, g: np.ndarray, H: np.ndarray, loss: float) -> np.ndarray:
    inv, _ = spd_inverse(H)
    return inv @ (H @ c + g)


def _iterate(passes: _Passes, step, s: dict, stop: StopCheck) -> tuple[np.ndarray, int]:
    """MADlib's iterations of ``step(c, g, H, loss) -> c``: (coefficients, iterations)."""
    g, H, loss = passes.start()
    c = np.zeros(len(g))
    previous = None
    k = 0
    for k in rounds(1, int(s["epochs"]), stop):
        if k > 1:
            g, H, loss = passes.at(c)
        with np.errstate(all="ignore"):
            c = step(c, g, H, loss)
        if not np.all(np.isfinite(c)):
            break  # MADlib's TERMINATED: the group fails
        likelihood = -loss
        if previous is not None and abs(likelihood - previous) < s["tolerance"]:
            break
        previous = likelihood
    return c, k


class _ConjugateGradient:
    """MADlib's conjugate-gradient state: the last gradient and direction."""

    def __init__(self) -> None:
        self.grad: np.ndarray | None = None
        self.dir: np.ndarray | None = None

    def __call__(self, c: np.ndarray, g: np.ndarray, H: np.ndarray, loss: float) -> np.ndarray:
        if self.grad is None:
            self.dir = g.copy()
        else:
            diff = g - self.grad
            beta = (g @ diff) / (self.dir @ diff)
            if (g @ diff) / (self.grad @ self.grad) <= DENORM_MIN:
                beta = 0.0
            self.dir = g - beta * self.dir
        self.grad = g
        return c + (self.grad @ self.dir) / (self.dir @ H @ self.dir) * self.dir


@njit(cache=True, nogil=True)
def _igd_pass(X, y, c, step):
    """c += step (y - σ(x·c)) x, row by row in order."""
    for i in range(X.shape[0]):
        z = 0.0
        for j in range(X.shape[1]):
            z += X[i, j] * c[j]
        scale = step * (y[i] - 1.0 / (1.0 + np.exp(-z)))
        for j in range(X.shape[1]):
            c[j] += scale * X[i, j]


def _igd(passes: _Passes, s: dict, stop: StopCheck) -> tuple[np.ndarray, int]:
    """MADlib's incremental gradient iterations over the rows in memory, in their order."""
    y, X = all_rows(passes.src)
    passes.src = InMemory(X, y, checked=True)
    passes.start()  # the labels checked, the accumulator made
    c = np.zeros(X.shape[1])
    previous = None
    k = 0
    for k in rounds(1, int(s["epochs"]), stop):
        likelihood = 0.0  # MADlib's first iteration computes none, and steps by 0
        if k > 1:
            likelihood = -passes.at(c)[2]
            check_stop(stop)
            with np.errstate(all="ignore"):
                _igd_pass(X, y, c, IGD_STEP)
        if not np.all(np.isfinite(c)):
            break
        if previous is not None and abs(likelihood - previous) < s["tolerance"]:
            break
        previous = likelihood
    return c, k


def train(alg: Algorithm, data, params: dict, *, threads: int = 2, stop: StopCheck = None) -> TrainOutput:
    """Logistic regression on ``data`` ({"X", "y"} arrays, or a source of rows read in passes)
    with MADlib's ``optimizer``; ``info["accumulators"]`` holds the gradient and the Hessian at
    the coefficients returned."""
    s = settings_for(alg.settings, params)
    name = optimizer(params)
    t0 = time.perf_counter()
    src = InMemory(design(data["X"], params), data["y"]) if isinstance(data, dict) else data
    src.keep = int(s["epochs"]) > 1  # later iterations read the rows in memory when they fit
    with ThreadPoolExecutor(threads) as ex:
        passes = _Passes(alg, src, ex, stop)
        if name == "igd":
            c, iterations = _igd(passes, s, stop)
        else:
            c, iterations = _iterate(passes, _irls if name == "irls" else _ConjugateGradient(), s, stop)
        g, H, loss = passes.at(c) if np.all(np.isfinite(c)) else (c * np.nan, np.full((len(c), len(c)), np.nan),
                                                                 np.nan)
    n = passes.src.n
    info = {"settings": s, "accumulators": {"grad": g, "hess": H}, "optimizer": name}
    return TrainOutput({"coef": c}, loss / n, iterations, time.perf_counter() - t0,
                       modelled_seconds(alg.cost, n, len(c), iterations + 1), info)
