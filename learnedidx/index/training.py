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

Backends are resolved by name: first those registered in this process with
:func:`register_backend`, then the entry points of group :data:`ENTRY_POINT_GROUP`
(``module:attribute`` of a factory, loaded only when its name is asked for).  The project
declares ``cpu`` (in-process Numba, :mod:`learnedidx.index.qr`), ``fpga-emu`` (the
emulated FPGA in-process) and ``server`` (jobs sent to the accelerator server) there; other
distributions may add theirs.  This module knows none of them by import.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Callable, Protocol, runtime_checkable

import numpy as np

from learnedidx.errors import ConfigError
from learnedidx.index.kernels import build_features


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

    # Optional: ``feature_limit() -> int | None``, the widest feature length (columns - 1)
    # the backend trains; a store whose max_features exceeds it is refused at open.
    # Optional: ``train_keys(jobs: list[KeysJob]) -> list[TrainResult]``, many groups'
    # retrains at once, each given by its keys (the backend builds the feature rows): a
    # backend that pays per call (a round trip to a server) trains a batch for one call.


@dataclass(frozen=True)
class KeysJob:
    """One group's retrain given by its keys, for a backend's ``train_keys``: the group's
    sorted keys (key i is ``arena[offsets[i]:offsets[i + 1]]``, with rank i in ``b``) and,
    for an incremental job, the keys written since ``R_old`` was factored (the rows of
    ``A_delta``).  A key's feature row is ``[1.0, its bytes from prefix on, zero-padded or
    truncated to feat]`` (:func:`learnedidx.index.kernels.build_features`)."""

    arena: np.ndarray  #: uint8 key bytes of the group
    offsets: np.ndarray  #: int64, one more than the group's keys (they need not start at 0)
    prefix: int
    feat: int
    R_old: np.ndarray | None = None  #: (feat + 1)² memoized factor; None for a full retrain
    new_arena: np.ndarray | None = None  #: an incremental job's new keys (none: no new rows)
    new_offsets: np.ndarray | None = None

    @property
    def n(self) -> int:
        return len(self.offsets) - 1

    @property
    def new(self) -> int:
        """The new keys of an incremental job (0 for a full one)."""
        return 0 if self.R_old is None or self.new_offsets is None else len(self.new_offsets) - 1

    def rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(A, b, A_delta)`` of the job: the group's feature rows and ranks, and the new
        keys' rows (None for a full job)."""
        A = build_features(self.arena, self.offsets, 0, self.n, self.prefix, self.feat)
        b = np.arange(self.n, dtype=np.float64)
        if self.R_old is None:
            return A, b, None
        if not self.new:
            return A, b, np.zeros((0, self.feat + 1))
        return A, b, build_features(self.new_arena, self.new_offsets, 0, self.new, self.prefix, self.feat)


def feature_limit(backend: TrainingBackend) -> int | None:
    """The widest feature length ``backend`` trains (its optional ``feature_limit()``
    method), or None when it declares no limit or cannot tell now."""
    fn = getattr(backend, "feature_limit", None)
    return None if fn is None else fn()


#: Entry-point group naming the training backends of every installed distribution.
ENTRY_POINT_GROUP = "learnedidx.training_backends"

_FACTORIES: dict[str, Callable[..., TrainingBackend]] = {}


@functools.cache
def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def register_backend(name: str, factory: Callable[..., TrainingBackend]) -> None:
    """Make a backend available to :func:`get_backend` under ``name`` in this process
    (before, and instead of, an entry point of that name)."""
    _FACTORIES[name] = factory


def known_backends() -> list[str]:
    """Names :func:`get_backend` resolves: registered in this process or declared as entry points."""
    return sorted(set(_FACTORIES) | set(_entry_points()))


def get_backend(name: str = "cpu", **options) -> TrainingBackend:
    """Instantiate the backend named ``name`` with ``options``; ConfigError for an unknown
    name, an option the backend does not take, or one it refuses."""
    factory = _FACTORIES.get(name)
    if factory is None:
        ep = _entry_points().get(name) if isinstance(name, str) else None
        if ep is None:
            raise ConfigError(f"unknown training backend {name!r}; known: {', '.join(known_backends())}")
        factory = ep.load()
    try:
        inspect.signature(factory).bind(**options)
    except TypeError as exc:
        raise ConfigError(f"trainer_options {sorted(options)} are not options of training backend {name!r} "
                          f"({exc})") from None
    except ValueError:  # a factory whose signature cannot be read: it checks its own options
        pass
    try:
        backend = factory(**options)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"training backend {name!r}: {exc}") from exc
    if not isinstance(backend, TrainingBackend):
        raise ConfigError(f"training backend {name!r} does not implement train_full/train_incremental")
    return backend
