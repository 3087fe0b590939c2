"""Request handlers of the accelerator server, registered by operation name.

The modules of :mod:`learnedidx.server.handlers` add operations here: ``builtin``
(``health``, ``stats``), ``train`` (``train.full``, ``train.incremental``) and ``indb``
(``indb.*``).  A handler receives the request's JSON ``args``, the numpy arrays that came
through shared memory, and a :class:`HandlerContext`; it returns a
JSON-able dict and a dict of result arrays.  Raising any exception produces an
error reply; the server keeps serving.  Functions registered with :func:`on_start` run once,
in the background, when a server starts (e.g. compiling kernels before the first call).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

Handler = Callable[[dict, dict[str, np.ndarray], "HandlerContext"], tuple[dict, dict[str, np.ndarray]]]

_HANDLERS: dict[str, Handler] = {}
_ON_START: list[Callable[[Any], None]] = []

#: Modules imported by the server at start-up so that their handlers register.
HANDLER_MODULES: tuple[str, ...] = (
    "learnedidx.server.handlers.builtin",
    "learnedidx.server.handlers.train",
    "learnedidx.server.handlers.indb",
)


@dataclass
class HandlerContext:
    """Per-request facts a handler may use."""

    server: Any  #: the running server object (stats, config, caches)
    peer: str = ""  #: description of the client connection
    stream: Any = None  #: the request's data stream (:class:`learnedidx.server.stream.CallStream`)


def handler(op: str) -> Callable[[Handler], Handler]:
    """Decorator registering ``fn`` as the handler of operation ``op``."""

    def deco(fn: Handler) -> Handler:
        if op in _HANDLERS and _HANDLERS[op] is not fn:
            raise RuntimeError(f"handler for {op!r} registered twice")
        _HANDLERS[op] = fn
        return fn

    return deco


def on_start(fn: Callable[[Any], None]) -> Callable[[Any], None]:
    """Decorator registering ``fn(server)`` to run in the background when a server starts."""
    _ON_START.append(fn)
    return fn


def start_hooks() -> list[Callable[[Any], None]]:
    return list(_ON_START)


def lookup(op: str) -> Handler | None:
    return _HANDLERS.get(op)


def operations() -> list[str]:
    return sorted(_HANDLERS)
