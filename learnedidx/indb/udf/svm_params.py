"""MADlib 2.1's svm arguments: the kernel's name and ``kernel_params``, and ``params`` (the
optimizer's, the regularization's and cross validation's), with MADlib's names, types,
defaults and checks; and the texts MADlib's summary table gives them."""
from __future__ import annotations

from typing import Any

from learnedidx.errors import NotSupportedError, ParameterError
from learnedidx.indb.udf import madlib_params as mp
from learnedidx.indb.udf.selectlist import split_top

#: MADlib's kernels (a prefix names one: 'gau', 'po').
KERNELS = ("linear", "gaussian", "polynomial")
#: The params that are lists (several values: cross validation's candidates).
LISTS = ("init_stepsize", "decay_factor", "max_iter", "lambda", "epsilon")


def _list(convert):
    """A list parameter's converter: each value by ``convert(name, value)``; at least one."""
    def values(name: str, value: str) -> list:
        out = [convert(name, v) for v in mp.items(value)]
        if not out:
            raise ParameterError(f"{name} must list at least one value")
        return out
    return values


def _floats(lo: float | None = None, hi: float | None = None, above: bool = False):
    return _list(lambda name, v: mp.number(name, v, lo, hi, above))


def _norm(name: str, value: str) -> str:
    if value.lower() not in ("l1", "l2"):
        raise ParameterError(f"norm must be L1 or L2, not {value!r}")
    return value.lower()


def _text(name: str, value: str) -> str:
    return value


PARAMS = {
    "init_stepsize": _floats(0.0, above=True),
    "decay_factor": _floats(hi=1.0),
    "max_iter": _list(lambda name, v: mp.integer(name, v, 1)),
    "tolerance": lambda name, value: mp.number(name, value, 0.0),
    "lambda": _floats(0.0),
    "norm": _norm,
    "n_folds": lambda name, value: mp.integer(name, value, 0),
    "validation_result": _text,
    "epsilon": _floats(0.0),
    "eps_table": _text,
    "class_weight": _text,
}
DEFAULTS = {"init_stepsize": [0.01], "decay_factor": [0.9], "max_iter": [100], "tolerance": 1e-10,
            "lambda": [0.01], "norm": "l2", "n_folds": 0, "validation_result": "", "epsilon": [0.01],
            "eps_table": "", "class_weight": ""}
KERNEL_PARAMS = {"n_components": lambda n, v: mp.integer(n, v, 1), "fit_intercept": mp.boolean,
                 "random_state": mp.integer, "degree": lambda n, v: mp.integer(n, v, 1),
                 "coef0": lambda n, v: mp.number(n, v, 0.0), "fit_in_memory": mp.boolean,
                 "gamma": lambda n, v: mp.number(n, v, 0.0)}


def kernel_name(kernel_func: str | None) -> str:
    """The kernel ``kernel_func`` names (linear when NULL or empty; a prefix names one)."""
    if not kernel_func or not kernel_func.strip():
        return "linear"
    name = kernel_func.strip().lower()
    for k in KERNELS:
        if k.startswith(name):
            return k
    raise ParameterError(f"invalid kernel function {kernel_func!r}: the kernels are {', '.join(KERNELS)}")


def params(text: str | None, svc: bool, grouped: bool) -> dict[str, Any]:
    """``params`` as MADlib takes them: every list parameter a list; cross validation checked
    as MADlib checks it (lists of several values need n_folds > 1; epsilon is a candidate of
    regression only; no cross validation with grouping; n_folds > 1 without lists trains
    without it, as MADlib does after a warning)."""
    p = mp.typed(text, "params", PARAMS, DEFAULTS)
    if p["n_folds"] > 1 and grouped:
        raise NotSupportedError("cross validation (n_folds > 1) with grouping is not supported (nor in MADlib)")
    several = [k for k in LISTS if len(p[k]) > 1 and (k != "epsilon" or not svc)]
    if several and p["n_folds"] <= 1:
        raise ParameterError(f"{', '.join(several)} list several values: cross validation needs n_folds of 2 or "
                             f"more (with n_folds {p['n_folds']}, every parameter takes one value)")
    p["class_weight"] = class_weight(p["class_weight"])
    return p


def class_weight(text: str) -> str | list[tuple[str, float]] | None:
    """MADlib's class_weight: None, ``balanced``, or ``{label: weight, ...}`` (one or two
    labels, as text, each weight a number)."""
    text = text.strip()
    if not text:
        return None
    if text == "balanced":
        return text
    if not (len(text) > 2 and text[0] == "{" and text[-1] == "}"):
        raise ParameterError(f"class_weight must be balanced or {{label: weight, ...}}, not {text!r}")
    pairs = []
    for item in split_top(text[1:-1]):
        key, colon, value = item.rpartition(":")
        if not colon or not key.strip():
            raise ParameterError(f"class_weight must map labels to weights (label: weight), not {item!r}")
        pairs.append((key.strip(), mp.number(f"the class_weight of {key.strip()}", value)))
    if not 1 <= len(pairs) <= 2:
        raise ParameterError("class_weight weighs one or two labels: svm classification has two")
    return pairs


def kernel_params(kernel: str, text: str | None, n_features: int) -> dict[str, Any]:
    """``kernel_params`` with MADlib's defaults for rows of ``n_features`` features
    (n_components max(100, 2 n_features), gamma 1 / n_features, degree 3, coef0 1,
    random_state 1, fit_intercept false, fit_in_memory true)."""
    defaults = {"n_components": max(100, 2 * n_features), "fit_intercept": False, "random_state": 1, "degree": 3,
                "coef0": 1, "fit_in_memory": True, "gamma": 1 / n_features if n_features else 1.0}
    return mp.typed(text, "kernel_params", KERNEL_PARAMS, defaults)


def kernel_params_text(kernel: str, kp: dict[str, Any]) -> str:
    """The summary's kernel_params, as MADlib writes them (svm_predict reads them back)."""
    if kernel == "linear":
        return "fit_intercept=%s" % kp["fit_intercept"]
    if kernel == "gaussian":
        return "gamma=%s, n_components=%s,random_state=%s, fit_intercept=%s, fit_in_memory=%s" % (
            kp["gamma"], kp["n_components"], kp["random_state"], kp["fit_intercept"], kp["fit_in_memory"])
    return "degree=%s, coef0=%s, n_components=%s, random_state=%s, fit_intercept=%s" % (
        kp["degree"], kp["coef0"], kp["n_components"], kp["random_state"], kp["fit_intercept"])


def optim_text(p: dict[str, Any], class_weight_text: str) -> str:
    """The summary's optim_params (the values trained with: cross validation's choice)."""
    return ("init_stepsize=%s, decay_factor=%s, max_iter=%s, tolerance=%s, epsilon=%s, eps_table=%s, "
            "class_weight=%s" % (p["init_stepsize"], p["decay_factor"], p["max_iter"], p["tolerance"],
                                 p["epsilon"], p["eps_table"], class_weight_text))


def reg_text(p: dict[str, Any]) -> str:
    """The summary's reg_params."""
    return "lambda=%s, norm=%s, n_folds=%s" % (p["lambda"], p["norm"], p["n_folds"])
