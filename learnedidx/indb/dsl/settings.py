"""An algorithm's settings: names, types, defaults, allowed values, and MADlib's aliases."""
from __future__ import annotations

import math

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
    name = name or key
    kind = SETTINGS[key]
    try:
        if isinstance(value, bool) or (kind is int and isinstance(value, float) and not value.is_integer()):
            raise ValueError
        v = kind(value)
    except (TypeError, ValueError, OverflowError):
        raise error(f"{where}{name} must be {'an integer' if kind is int else 'a number' if kind is float else 'text'}"
                    f", not {value!r}") from None
    if key in CHOICES and v not in CHOICES[key]:
        raise error(f"{where}{name} must be one of {', '.join(CHOICES[key])}, not {v!r}")
    if key in BOUNDS:
        low, inclusive = BOUNDS[key]
        if not (math.isfinite(v) and (v >= low if inclusive else v > low)):
            raise error(f"{where}{name} must be {'at least' if inclusive else 'greater than'} {low:g} and finite, "
                        f"not {value!r}")
    return v


def settings_for(own: dict, params: dict) -> dict:
    """The defaults, then an algorithm's ``own`` settings, then training ``params`` (MADlib
    names too; parameters that are not settings are left out)."""
    given = {ALIASES.get(k, k): (k, v) for k, v in params.items() if v is not None}
    return {**DEFAULTS, **own, **{k: checked(k, v, name=name, error=ParameterError)
                                  for k, (name, v) in given.items() if k in SETTINGS}}
