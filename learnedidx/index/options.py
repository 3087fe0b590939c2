"""The options of a :class:`~learnedidx.index.store.Store`, validated once when built."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Mapping

from learnedidx.errors import ConfigError
from learnedidx.index.training import TrainingBackend

SYNC_POLICIES = ("always", "batch", "off")
RETRAIN_MODES = ("background", "inline", "off")
RECOVERY_MODES = ("strict", "point-in-time")


@dataclass(frozen=True)
class StoreOptions:
    """Every option of a store (see docs/store.md); invalid values raise
    :class:`~learnedidx.errors.ConfigError` naming the option."""

    sync: str = "always"  #: WAL sync policy: always, batch or off
    sync_interval: float = 0.005  #: seconds between group commits with sync="batch"
    max_key_len: int = 4096  #: longest key in bytes (a durable store keeps the largest it was opened with)
    group_size: int = 4096  #: target keys per group
    max_features: int = 32  #: cap on a group model's feature length
    buffer_threshold: int = 1024  #: buffered writes of a group that call for a merge
    retrain: str = "background"  #: who merges: background, inline or off
    retrain_interval: float = 1.0  #: seconds between background merge rounds
    trainer: str | TrainingBackend = "cpu"  #: training backend name or instance
    trainer_options: Mapping[str, Any] | None = field(default_factory=dict)  #: options of a named trainer
    trainer_retry: float = 30.0  #: seconds before a failed trainer is tried again
    checkpoint_bytes: int = 64 << 20  #: log size past which a checkpoint is taken
    full_retrain_fraction: float = 0.1  #: deletes (fraction of a group) forcing a full retrain
    max_backlog: int = 1 << 20  #: keys written but not yet in a retrained model, past which writers wait
    retrain_after: float = 0.5  #: keys written since a group's model (fraction of its keys) before the background thread retrains it
    recovery: str = "strict"  #: on damage inside the log: refuse to open, or go back to the last good point

    def __post_init__(self) -> None:
        _choice("sync", self.sync, SYNC_POLICIES)
        _choice("retrain", self.retrain, RETRAIN_MODES)
        _choice("recovery", self.recovery, RECOVERY_MODES)
        _int("max_key_len", self.max_key_len, 1)
        _int("group_size", self.group_size, 16)
        _int("max_features", self.max_features, 1, 255)
        _int("buffer_threshold", self.buffer_threshold, 1)
        _int("checkpoint_bytes", self.checkpoint_bytes, 0)
        _int("max_backlog", self.max_backlog, 1)
        _number("sync_interval", self.sync_interval, positive=True)
        _number("retrain_interval", self.retrain_interval, positive=True)
        _number("trainer_retry", self.trainer_retry)
        _number("full_retrain_fraction", self.full_retrain_fraction)
        _number("retrain_after", self.retrain_after)
        if not isinstance(self.trainer, str) and not isinstance(self.trainer, TrainingBackend):
            raise ConfigError(f"trainer must be a backend name or implement train_full/train_incremental, "
                              f"not {type(self.trainer).__name__}")
        topts = {} if self.trainer_options is None else self.trainer_options
        if not isinstance(topts, Mapping):
            raise ConfigError(f"trainer_options must be a mapping, not {type(topts).__name__}")
        if topts and not isinstance(self.trainer, str):
            raise ConfigError("trainer_options apply to a trainer given by name, not to an instance")
        object.__setattr__(self, "trainer_options", MappingProxyType(dict(topts)))

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> "StoreOptions":
        """From keyword options; ConfigError naming any unknown one."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise ConfigError(f"unknown store option(s) {', '.join(unknown)}; options: {', '.join(sorted(names))}")
        return cls(**options)

    @property
    def min_group(self) -> int:
        """Smallest group that halving for the feature length may produce."""
        return max(16, self.group_size // 8)


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{name} must be one of {', '.join(map(repr, allowed))}, not {value!r}")


def _int(name: str, value: Any, lo: int, hi: int | None = None) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{name} must be an integer, not {type(value).__name__}")
    if value < lo or (hi is not None and value > hi):
        raise ConfigError(f"{name} must be {f'in {lo}..{hi}' if hi is not None else f'>= {lo}'}, not {value}")


def _number(name: str, value: Any, positive: bool = False) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, not {value!r}")
    if value < 0 or (positive and value == 0):
        raise ConfigError(f"{name} must be {'> 0' if positive else '>= 0'}, not {value}")
