"""The training-backend interface shared by the store and the accelerator.

A group's model is a least-squares fit ``A @ coef ≈ b`` where each row of ``A`` is
``[1.0, f_1, ..., f_m]`` (a leading bias column, then one double per key byte after
the group's common prefix, zero-padded to the group's feature length ``m``) and
``b`` holds the keys' ranks in the group's sorted array.  ``n = m + 1`` columns.

Backends compute the upper-triangular factor ``R`` (n × n) of ``A = QR`` and the
coefficients.  ``R`` is what the store memoizes per group for SIA incremental
training: ``train_incremental`` factors only the new rows, re-factors the stacked
``[R_old; R_delta]`` and solves ``RᵀR x = Aᵀb`` with ``Aᵀb`` recomputed over all
rows.  Error bounds are always computed by the host (the store), never trusted
from a backend.

Backends register under a name with :func:`register_backend` and are looked up
with :func:`get_backend`; ``cpu`` (in-process Numba) is the default, the
accelerator adds ``fpga-emu`` and ``server``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, runtime_checkable

import numpy as np

from learnedidx.errors import ConfigError


@dataclass(frozen=True)
class TrainResult:
    """What a backend returns for one group."""

    R: np.ndarray  #: (n, n) float64 upper-triangular factor, memoized by the store
    coef: np.ndarray  #: (n,) float64 model coefficients, bias first
    seconds: float = 0.0  #: host wall time spent in the backend
    device_cycles: int = 0  #: modelled accelerator cycles (0 for CPU backends)
    info: dict = field(default_factory=dict)  #: backend-specific details (device time, ...)


@runtime_checkable
class TrainingBackend(Protocol):
    """What the store needs from a trainer.  Implementations must be thread-safe."""

    name: str

    def train_full(self, A: np.ndarray, b: np.ndarray) -> TrainResult:
        """Least squares from scratch: QR of ``A`` (N × n), then back-substitution."""
        ...

    def train_incremental(
        self, R_old: np.ndarray, A_delta: np.ndarray, A: np.ndarray, b: np.ndarray
    ) -> TrainResult:
        """SIA memoized retrain: QR of ``A_delta`` → R_Δ, QR of ``[R_old; R_Δ]`` → R,
        then solve ``RᵀR x = Aᵀb`` where ``A``/``b`` are all rows with their new positions."""
        ...


_FACTORIES: dict[str, Callable[..., TrainingBackend]] = {}


def register_backend(name: str, factory: Callable[..., TrainingBackend]) -> None:
    """Make a backend available to :func:`get_backend` under ``name``."""
    _FACTORIES[name] = factory


def get_backend(name: str = "cpu", **options) -> TrainingBackend:
    """Instantiate the backend registered as ``name``."""
    if name not in _FACTORIES:
        # Backends living in optional subpackages register on import.
        if name in ("fpga-emu", "server"):
            import learnedidx.accel  # noqa: F401  (registers its backends)
        elif name == "cpu":
            import learnedidx.index.qr  # noqa: F401
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise ConfigError(
            f"unknown training backend {name!r}; known: {sorted(_FACTORIES)}"
        ) from None
    return factory(**options)
