"""An algorithm's settings: names, types, defaults, allowed values, and MADlib's aliases."""
from __future__ import annotations

from learnedidx import checks
from learnedidx.errors import DSLError, ParameterError

SETTINGS = {"epochs": int, "learning_rate": float, "schedule": str, "batch_size": int, "merge": str,
            "tolerance": float, "l2": float, "labels": str, "rank": int, "init_scale": float}
DEFAULTS = {"epochs": 20, "learning_rate": 0.1, "schedule": "invscaling", "batch_size": 1, "merge": "average",
            "tolerance": 0.0, "l2": 0.0, "labels": "any", "rank": 10, "init_scale": 0.1}
#: merge: "average" the threads' models, or "sum" their updates (w + Σ (w_i - w)).
CHOICES = {"schedule": ("constant", "invscaling", "step", "inverse"), "merge": ("average", "sum"),
           "labels": ("any", "binary", "signed")}
#: The smallest value of each numeric setting, and whether it may be equal to it.
BOUNDS = {"epochs": (1, True), "batch_size": (1, True), "rank": (1, True), "learning_rate": (0.0, False),
          "tolerance": (0.0, True), "l2": (0.0, True), "init_scale": (0.0, True)}
#: MADlib's parameter names, accepted as training parameters for the settings they mean.
ALIASES = {"max_iter": "epochs", "num_iterations": "epochs", "stepsize": "learning_rate", "lambda": "l2",
           "max_rank": "rank", "scale_factor": "init_scale"}


def checked(key: str, value, where: str = "", name: str | None = None, error: type = DSLError) -> object:
    """``value`` as setting ``key``'s type, checked against its allowed choices and bounds;
    errors name it ``name`` (the caller's word for it, a MADlib alias say) and are ``error``."""
    name = f"{where}{name or key}"
    kind = SETTINGS[key]
    low, inclusive = BOUNDS.get(key, (None, True))
    if kind is int:
        return checks.integer(name, value, low, error=error, whole_floats=True, parse=True)
    if kind is float:
        return checks.number(name, value, low, above=not inclusive, error=error, parse=True)
    return checks.choice(name, checks.text(name, value, error=error), CHOICES[key], error=error)


def settings_for(own: dict, params: dict) -> dict:
    """The defaults, then an algorithm's ``own`` settings, then training ``params`` (MADlib
    names too; parameters that are not settings are left out)."""
    given = {ALIASES.get(k, k): (k, v) for k, v in params.items() if v is not None}
    return {**DEFAULTS, **own, **{k: checked(k, v, name=name, error=ParameterError)
                                  for k, (name, v) in given.items() if k in SETTINGS}}
