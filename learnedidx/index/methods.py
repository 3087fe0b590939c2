"""Store methods whose body is one call to a compiled kernel, called without a Python frame.

:func:`compiled` makes a method of :class:`~learnedidx.index.store.Store` into a
``learnedidx.index._methods.Method``: a C descriptor that calls its kernel of
:mod:`learnedidx.index.direct` directly (its source says how), and hands any call the
kernel declines, and every other call form, to Python.  Without the C module (a build
without a compiler), the Python method stands as written: same results, a slower call.
"""
from __future__ import annotations

from typing import Any, Callable

try:
    from learnedidx.index import _methods
except ImportError:
    _methods = None

BUILT = _methods is not None
GET, PUT = (_methods.METHOD_GET, _methods.METHOD_PUT) if BUILT else (1, 2)


def _kernel_address(name: str) -> Callable[[], int]:
    def resolve() -> int:
        from learnedidx.index import direct  # compiled (or loaded from the cache) on first use
        return getattr(direct, name).address
    return resolve


def compiled(kind: int, kernel: str, slow: str) -> Callable[[Callable[..., Any]], Any]:
    """Decorator: the method, called through kernel ``kernel`` of
    :mod:`learnedidx.index.direct`; a call the kernel declines goes to ``self.<slow>``
    (``GET``: with the key and the default; ``PUT``: the key, the value and the code)."""
    def wrap(impl: Callable[..., Any]) -> Any:
        if not BUILT:
            return impl
        return _methods.Method(kind, _kernel_address(kernel), impl, slow)
    return wrap


def warm() -> None:
    """Compile (or load) the kernels now, outside any timed or locked section."""
    if BUILT:
        from learnedidx.index import direct  # noqa: F401
