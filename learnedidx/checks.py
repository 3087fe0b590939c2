"""Checks of option, parameter and argument values: one definition for every layer.

Each check returns the value as its type or raises ``error`` (a class of
:mod:`learnedidx.errors`; :class:`~learnedidx.errors.ConfigError` unless given) with a message
naming the value ``name``.  The rules are the same wherever a value comes from:

* a bool is not a number (``True`` is an ``int`` to Python, never a count or a size here);
* a float is an integer only where ``whole_floats`` allows it (JSON writes ``2.0`` for some
  integers) and only when it is whole;
* text is parsed only where ``parse`` asks for it: values that arrive as text (a GUC, a
  MADlib ``name=value`` string, a JSON string);
* numbers are finite, and bounds are inclusive (``above``: the lower one is excluded).

The standard library's modules only, besides :mod:`learnedidx.errors`: the extension's
PL/Python functions import this module in the database server (docs/indb.md).
"""
from __future__ import annotations

import math
import re
from typing import Any, Collection

from learnedidx.errors import ConfigError, LearnedIdxError

_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")


def _range(lo: float | None, hi: float | None, above: bool, finite: bool) -> str:
    """'greater than 0, at most 3600 and finite', as the bounds say."""
    parts = [] if lo is None else [f"{'greater than' if above else 'at least'} {lo:g}"]
    parts += [] if hi is None else [f"at most {hi:g}"]
    parts += ["finite"] if finite else []
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]


def integer(name: str, value: Any, lo: int | None = None, hi: int | None = None, *,
            error: type[LearnedIdxError] = ConfigError, whole_floats: bool = False, parse: bool = False) -> int:
    """``value`` as an int in ``lo..hi``."""
    v = value
    if parse and isinstance(v, str) and _INTEGER_TEXT.fullmatch(v.strip()):
        v = int(v)
    elif whole_floats and isinstance(v, float) and v.is_integer():
        v = int(v)
    if not isinstance(v, int) or isinstance(v, bool):
        raise error(f"{name} must be an integer, not {value!r}")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise error(f"{name} must be {_range(lo, hi, False, False)}, not {value!r}")
    return v


def number(name: str, value: Any, lo: float | None = None, hi: float | None = None, *, above: bool = False,
           error: type[LearnedIdxError] = ConfigError, parse: bool = False) -> float:
    """``value`` as a finite float within the bounds."""
    v = value
    if parse and isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            pass
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        raise error(f"{name} must be a number, not {value!r}")
    if not math.isfinite(v) or (lo is not None and (v <= lo if above else v < lo)) or (hi is not None and v > hi):
        raise error(f"{name} must be {_range(lo, hi, above, True)}, not {value!r}")
    return float(v)


def boolean(name: str, value: Any, *, error: type[LearnedIdxError] = ConfigError) -> bool:
    """``value``, which must be a bool (not 0 or 1)."""
    if not isinstance(value, bool):
        raise error(f"{name} must be true or false, not {value!r}")
    return value


def text(name: str, value: Any, *, error: type[LearnedIdxError] = ConfigError) -> str:
    """``value``, which must be a str."""
    if not isinstance(value, str):
        raise error(f"{name} must be text, not {value!r}")
    return value


def choice(name: str, value: Any, allowed: Collection[str], *, error: type[LearnedIdxError] = ConfigError) -> str:
    """``value``, which must be one of ``allowed``."""
    if not isinstance(value, str) or value not in allowed:
        raise error(f"{name} must be one of {', '.join(map(repr, allowed))}, not {value!r}")
    return value
