"""Who trains, and when: the training backend with its failover to in-process training, the
one rule deciding that buffered writes need merging, and the background merge thread."""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

import numpy as np

from learnedidx.errors import ConfigError, is_offload_failure
from learnedidx.index.fitting import Fits, fit_groups
from learnedidx.index.options import StoreOptions
from learnedidx.index.qr import CpuBackend
from learnedidx.index.snapshot import Snapshot
from learnedidx.index.training import TrainingBackend, feature_limit, get_backend

log = logging.getLogger(__name__)

#: Every group with buffered writes is merged once the whole buffer holds this many times
#: ``buffer_threshold`` writes, however they spread over the groups.
BUFFER_LIMIT = 64


def merge_needed(st: Snapshot, threshold: int) -> bool:
    """Whether the buffered writes of ``st`` call for a merge: a group reached
    ``threshold``, or the buffer reached ``BUFFER_LIMIT × threshold``."""
    return bool(st.buf) and (max(st.counts) >= threshold or len(st.buf) >= BUFFER_LIMIT * threshold)


def groups_to_merge(st: Snapshot, threshold: int) -> set[int]:
    """The groups a merge folds in (non-empty exactly when :func:`merge_needed`)."""
    dirty = {g for g, c in enumerate(st.counts) if c >= threshold}
    if not dirty and len(st.buf) >= BUFFER_LIMIT * threshold:
        dirty = {g for g, c in enumerate(st.counts) if c > 0}
    return dirty


class Retrainer:
    """Trains group models on the store's trainer.  When an offloading trainer fails (the
    accelerator server died, say: :func:`~learnedidx.errors.is_offload_failure`), groups
    are trained in-process with ``cpu`` and the trainer is tried again every
    ``trainer_retry`` seconds; any other error (a wrong request or configuration) is raised.
    Called by one merge at a time (the store's merge lock)."""

    def __init__(self, opts: StoreOptions) -> None:
        try:
            self.trainer: TrainingBackend = (get_backend(opts.trainer, **opts.trainer_options)
                                             if isinstance(opts.trainer, str) else opts.trainer)
        except ConfigError as exc:
            raise ConfigError(f"trainer: {exc}") from None
        limit = feature_limit(self.trainer)
        if limit is not None and opts.max_features > limit:
            raise ConfigError(f"max_features {opts.max_features} exceeds the {limit} features training "
                              f"backend {self.name} supports")
        self.cpu = self.trainer if getattr(self.trainer, "name", "") == "cpu" else CpuBackend()
        self.max_features = opts.max_features
        self.retry = opts.trainer_retry
        self.failed = False
        self._failed_at = 0.0
        self.stats = {"retrains_full": 0, "retrains_incremental": 0, "train_seconds": 0.0, "device_cycles": 0}

    @property
    def name(self) -> str:
        return getattr(self.trainer, "name", str(self.trainer))

    def _retrying(self) -> bool:
        """Whether the failed trainer is due to be tried again."""
        return self.failed and time.monotonic() - self._failed_at >= self.retry

    def train_all(self, arena: np.ndarray, offsets: np.ndarray, bounds: np.ndarray) -> Fits | None:
        """Every group between consecutive ``bounds`` of the sorted keys trained from
        scratch at once (:func:`~learnedidx.index.fitting.fit_groups`), when training runs
        in-process on the cpu backend; None otherwise (the caller then trains each group
        through :meth:`train`)."""
        backend = self.cpu if self.failed and not self._retrying() else self.trainer
        if type(backend) is not CpuBackend:
            return None
        t0 = time.perf_counter()
        fits = fit_groups(arena, offsets, bounds, self.max_features)
        self.stats["train_seconds"] += time.perf_counter() - t0
        self.stats["retrains_full"] += int(np.count_nonzero(np.diff(bounds) > 1))
        return fits

    def train(self, A: np.ndarray, b: np.ndarray, R_old: np.ndarray | None,
              A_delta: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """(R, coef) of one group: full training when ``R_old`` is None, else incremental."""
        retry = self._retrying()
        backend = self.cpu if self.failed and not retry else self.trainer
        name = getattr(backend, "name", backend)
        try:
            res = backend.train_full(A, b) if R_old is None else backend.train_incremental(R_old, A_delta, A, b)
            if retry:
                log.warning("training backend %s answers again; offloading training to it", name)
                self.failed = False
        except Exception as exc:
            if backend is self.cpu or not is_offload_failure(exc):
                raise
            if not self.failed:
                log.warning("training backend %s failed (%s); training in-process, retrying it every %g s",
                            name, exc, self.retry)
            self.failed = True
            self._failed_at = time.monotonic()
            res = self.cpu.train_full(A, b) if R_old is None else self.cpu.train_incremental(R_old, A_delta, A, b)
        coef = np.asarray(res.coef, np.float64)
        if not np.all(np.isfinite(coef)):  # never trust a device blindly: retrain on the host
            res = self.cpu.train_full(A, b)
            coef = res.coef
        self.stats["train_seconds"] += res.seconds
        self.stats["device_cycles"] += int(res.device_cycles)
        self.stats["retrains_full" if R_old is None else "retrains_incremental"] += 1
        return np.asarray(res.R, np.float64), coef


class BackgroundLoop:
    """A daemon thread running ``round()`` every ``interval`` seconds until :meth:`stop`;
    a round that raises is logged and the next one retries."""

    def __init__(self, interval: float, round: Callable[[], None]) -> None:
        self._interval = interval
        self._round = round
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="learnedidx-retrainer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._round()
            except Exception:  # keep serving; the next round retries
                log.exception("background merge failed")

    def stop(self, wait: bool = True) -> None:
        self._stop.set()
        if wait and self._thread is not threading.current_thread():
            self._thread.join()
