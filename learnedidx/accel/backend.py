"""The ``fpga-emu`` training backend: the emulated FPGA datapath run in this process."""
from __future__ import annotations

import time

import numpy as np

from learnedidx.accel.config import DeviceConfig
from learnedidx.accel.fpga import FpgaDatapath
from learnedidx.index.training import KeysJob, TrainResult


class FpgaEmuBackend:
    """The emulated FPGA datapath run in this process (FP32 by default)."""

    name = "fpga-emu"

    def __init__(self, config: str | None = None, **overrides) -> None:
        self.datapath = FpgaDatapath(DeviceConfig.load(config, **overrides))

    def _result(self, seconds, R, x, cycles) -> TrainResult:
        dev = cycles / (self.datapath.cfg.clock_mhz * 1e6)
        return TrainResult(R=R, coef=x, seconds=seconds, device_cycles=cycles, info={"device_seconds": dev})

    def feature_limit(self) -> int:
        """The device's ``max_features``: wider jobs are refused."""
        return self.datapath.cfg.max_features

    def train_full(self, A: np.ndarray, b: np.ndarray) -> TrainResult:
        t0 = time.perf_counter()
        out = self.datapath.full(A, b)
        return self._result(time.perf_counter() - t0, *out)

    def train_incremental(self, R_old, A_delta, A, b) -> TrainResult:
        t0 = time.perf_counter()
        out = self.datapath.incremental(R_old, A_delta, A, b)
        return self._result(time.perf_counter() - t0, *out)

    def train_keys(self, jobs: list[KeysJob]) -> list[TrainResult]:
        """Many groups' retrains, each given by its keys: every job's feature rows built and
        trained in one compiled call that releases the GIL (:meth:`FpgaDatapath.keys_many`),
        so that a store's drain trains batches on every core and a background retrainer
        takes the GIL from a busy writer once per batch."""
        t0 = time.perf_counter()
        done = self.datapath.keys_many(jobs)
        seconds = (time.perf_counter() - t0) / max(len(jobs), 1)
        return [self._result(seconds, *out) for out in done]
