"""MADlib's statistics of a trained model, computed from what training already summed.

Each function follows the definitions of Apache MADlib's output tables (2.1):

* :func:`logregr`: ``stateToResult`` over the Hessian X'AX of the last Newton step (its
  inverse is the variance-covariance; Wald z statistics, two-sided normal p-values, odds
  ratios, and the condition number sqrt(λmax / λmin) of X'AX);
* :func:`svm`: the objective and the norm of its subgradient, summed over the rows, as
  ``internal_linear_svm_igd_result`` reports them.

(linregr's statistics are the extension's ``linregr_final``, from the R factor of
:mod:`.lstsq`.)  The inverse is MADlib's pseudo-inverse: the inverse when the condition number is below 1e20,
else through the eigendecomposition, eigenvalues below n·λmax·ε taken as zero.
"""
from __future__ import annotations

import numpy as np
from numba import njit
from scipy import stats as distributions


def spd_inverse(m: np.ndarray) -> tuple[np.ndarray, float]:
    """(pseudo-inverse, condition number) of a symmetric positive semi-definite matrix."""
    if not np.all(np.isfinite(m)):  # a diverged training: no statistics
        return np.full(m.shape, np.nan), float("nan")
    ev, vec = np.linalg.eigh(m)
    low, high = max(ev[0], 0.0), ev[-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        cond = float(np.inf if high <= 0 else high / low)
    if cond < 1e20:
        try:
            return np.linalg.inv(m), cond
        except np.linalg.LinAlgError:  # singular after all: as MADlib's LDLT would not stop, go on below
            pass
    eps = m.shape[0] * high * np.finfo(float).eps
    inv_ev = np.where(ev < eps, 0.0, 1.0 / np.where(ev < eps, 1.0, ev))
    return (vec * inv_ev) @ vec.T, cond


def logregr(coef: np.ndarray, hessian: np.ndarray, log_likelihood: float) -> dict:
    """log_likelihood, std_err, z_stats, p_values, odds_ratios, condition_no and
    variance_covariance of a logistic regression."""
    inv, cond = spd_inverse(hessian)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        std_err = np.sqrt(np.diag(inv))
        z_stats = coef / std_err
        odds = np.exp(coef)
    return {"log_likelihood": log_likelihood, "std_err": std_err, "z_stats": z_stats,
            "p_values": 2 * distributions.norm.cdf(-np.abs(z_stats)), "odds_ratios": odds,
            "condition_no": float(np.sqrt(cond)), "variance_covariance": inv}


def svm(coef: np.ndarray, X: np.ndarray, y: np.ndarray, l2: float, regularized: np.ndarray) -> dict:
    """loss (the objective per row: the mean hinge loss plus l2 / 2 · ||w||², l2 per row) and
    norm_of_gradient (of the objective summed over the rows), for labels ``y`` in {-1, +1};
    ``regularized`` marks the coefficients the penalty applies to."""
    w = np.where(regularized, coef, 0.0)
    n = len(y)
    hinge, gradient = _hinge(np.ascontiguousarray(X, np.float64), np.ascontiguousarray(y, np.float64),
                             np.ascontiguousarray(coef, np.float64))
    gradient += n * l2 * w
    return {"loss": float(hinge / n + l2 / 2 * (w @ w)), "norm_of_gradient": float(np.linalg.norm(gradient))}


@njit(cache=True, nogil=True)
def _hinge(X, y, coef):
    """(the hinge losses summed, their subgradients summed) over the rows: one pass, and no
    temporary the size of the rows (ten million rows' would cost more than the pass)."""
    g = np.zeros(X.shape[1])
    s = 0.0
    for i in range(X.shape[0]):
        m = 0.0
        for j in range(X.shape[1]):
            m += X[i, j] * coef[j]
        m *= y[i]
        if m < 1.0:
            s += 1.0 - m
            for j in range(X.shape[1]):
                g[j] -= y[i] * X[i, j]
    return s, g
