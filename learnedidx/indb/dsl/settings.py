"""An algorithm's settings: names, types, defaults, allowed values, and MADlib's aliases."""
from __future__ import annotations

from learnedidx.errors import DSLError

SETTINGS = {"epochs": int, "learning_rate": float, "schedule": str, "batch_size": int, "merge": str,
            "tolerance": float, "l2": float, "labels": str, "rank": int, "init_scale": float}
DEFAULTS = {"epochs": 20, "learning_rate": 0.1, "schedule": "invscaling", "batch_size": 1, "merge": "average",
            "tolerance": 0.0, "l2": 0.0, "labels": "any", "rank": 10, "init_scale": 0.1}
#: merge: "average" the threads' models, or "sum" their updates (w + Σ (w_i - w)).
CHOICES = {"schedule": ("constant", "invscaling", "step", "inverse"), "merge": ("average", "sum"),
           "labels": ("any", "binary", "signed")}
#: MADlib's parameter names, accepted as training parameters for the settings they mean.
ALIASES = {"max_iter": "epochs", "num_iterations": "epochs", "stepsize": "learning_rate", "lambda": "l2",
           "max_rank": "rank", "scale_factor": "init_scale"}


def checked(key: str, value, where: str = "") -> object:
    """``value`` as setting ``key``'s type, checked against its allowed choices."""
    try:
        v = SETTINGS[key](value)
    except (TypeError, ValueError):
        raise DSLError(f"{where}{key} must be {SETTINGS[key].__name__}, not {value!r}") from None
    if key in CHOICES and v not in CHOICES[key]:
        raise DSLError(f"{where}{key} must be one of {', '.join(CHOICES[key])}, not {v!r}")
    return v


def settings_for(own: dict, params: dict) -> dict:
    """The defaults, then an algorithm's ``own`` settings, then training ``params`` (MADlib
    names too; parameters that are not settings are left out)."""
    given = {ALIASES.get(k, k): v for k, v in params.items() if v is not None}
    return {**DEFAULTS, **own, **{k: checked(k, v, "parameter ") for k, v in given.items() if k in SETTINGS}}
