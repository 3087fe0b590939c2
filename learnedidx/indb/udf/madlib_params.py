"""MADlib's parameter strings: ``'name=value, name=value'``, a value a number, a word or a list
(``[0.01, 1]``, ``{0.001}``), taken as MADlib's ``extract_keyvalue_params`` types them."""
from __future__ import annotations

from typing import Any, Callable

from learnedidx import checks
from learnedidx.errors import ParameterError
from learnedidx.indb.udf.selectlist import split_top

#: MADlib's (and Python's strtobool's) spellings of true and false.
TRUE, FALSE = ("y", "yes", "t", "true", "on", "1"), ("n", "no", "f", "false", "off", "0")


def keyvalues(text: str | None, what: str) -> dict[str, str]:
    """MADlib's ``'name=value, name=value'`` parameter string ``what``, as a dict of lower-case
    names to values (quotes around a value taken off; a list keeps its brackets; the last of a
    repeated name wins, as in MADlib)."""
    out = {}
    for item in split_top(text or ""):
        if not item:
            continue
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise ParameterError(f"{what} must be name=value pairs, not {item!r}")
        out[name.strip().strip('"').lower()] = value.strip().strip("'\"")
    return out


def items(value: str) -> list[str]:
    """The values of a list value (``[a, b]``, ``{a, b}``, ``(a, b)``; a scalar is a list of
    one), as MADlib splits them."""
    inner = value.strip()
    if inner[:1] in "[{(" and inner[-1:] in "]})":
        inner = inner[1:-1]
    out = [v.strip().strip('"') for v in split_top(inner)]
    return [] if out == [""] else out


def boolean(name: str, value: str) -> bool:
    """A MADlib boolean (y, yes, t, true, on, 1; n, no, f, false, off, 0; any case)."""
    v = value.strip().lower()
    if v not in TRUE + FALSE:
        raise ParameterError(f"{name} must be true or false, not {value!r}")
    return v in TRUE


def integer(name: str, value: str, lo: int | None = None) -> int:
    return checks.integer(name, value, lo, error=ParameterError, parse=True)


def number(name: str, value: str, lo: float | None = None, hi: float | None = None, above: bool = False) -> float:
    return checks.number(name, value, lo, hi, above=above, error=ParameterError, parse=True)


def typed(text: str | None, what: str, types: dict[str, Callable[[str, str], Any]],
          defaults: dict[str, Any]) -> dict[str, Any]:
    """MADlib's parameter string ``what`` with each value converted by its name's function in
    ``types`` (``fn(name, value)``), the ``defaults`` for the others; an unknown name is an
    error, as in MADlib."""
    out = dict(defaults)
    for name, value in keyvalues(text, what).items():
        if name not in types:
            raise ParameterError(f"{name} is not a parameter of {what} (its parameters: {', '.join(sorted(types))})")
        out[name] = types[name](name, value)
    return out
