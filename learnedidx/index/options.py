"""The options of a :class:`~learnedidx.index.store.Store`, validated once when built."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Mapping

from learnedidx import checks
from learnedidx.errors import ConfigError
from learnedidx.index.training import TrainingBackend

SYNC_POLICIES = ("always", "batch", "off")
RETRAIN_MODES = ("background", "inline", "off")
RECOVERY_MODES = ("strict", "point-in-time")

#: The range of each integer option (docs/store.md, Options).  The upper bounds keep every
#: size the store derives from them (a group's buffer and value slots, ``2 * buffer_threshold``
#: per group; a key's length in a log record, a u32) far from what memory or a record holds.
INT_RANGES = {
    "max_key_len": (1, 1 << 20),
    "group_size": (16, 1 << 24),
    "max_features": (1, 255),
    "buffer_threshold": (1, 1 << 16),
    "checkpoint_bytes": (0, 1 << 62),
    "max_backlog": (1, 1 << 62),
}
#: The range of each number option: (least, greatest, whether the least is excluded).
#: Intervals are bounded so that a thread's wait on them stays a wait (``sleep(1e308)``
#: raises ``OverflowError`` in the thread that would sync the log).
NUMBER_RANGES = {
    "sync_interval": (0.0, 3600.0, True),
    "retrain_interval": (0.0, 3600.0, True),
    "trainer_retry": (0.0, 86400.0, False),
    "full_retrain_fraction": (0.0, 1.0, False),
    "retrain_after": (0.0, 1e12, False),
}


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
    retrain_interval: float = 1.0  #: seconds the background thread waits after a failed retrain
    trainer: str | TrainingBackend = "cpu"  #: training backend name or instance
    trainer_options: Mapping[str, Any] | None = field(default_factory=dict)  #: options of a named trainer
    trainer_retry: float = 30.0  #: seconds before a failed trainer is tried again
    checkpoint_bytes: int = 64 << 20  #: log size past which a checkpoint is taken
    full_retrain_fraction: float = 0.1  #: deletes (fraction of a group) forcing a full retrain
    max_backlog: int = 1 << 20  #: keys written but not yet in a retrained model, past which writers wait
    retrain_after: float = 0.5  #: keys written since a group's model (fraction of its keys) before the background thread retrains it
    recovery: str = "strict"  #: on damage inside the log: refuse to open, or go back to the last good point

    def __post_init__(self) -> None:
        checks.choice("sync", self.sync, SYNC_POLICIES)
        checks.choice("retrain", self.retrain, RETRAIN_MODES)
        checks.choice("recovery", self.recovery, RECOVERY_MODES)
        for name, (lo, hi) in INT_RANGES.items():
            checks.integer(name, getattr(self, name), lo, hi)
        for name, (lo, hi, above) in NUMBER_RANGES.items():
            checks.number(name, getattr(self, name), lo, hi, above=above)
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

