"""Training backends offered by the accelerator: ``fpga-emu`` (in-process emulation) and
``server`` (jobs sent to the accelerator server)."""
from __future__ import annotations

import logging
import time

import numpy as np

from learnedidx.accel.config import DeviceConfig
from learnedidx.accel.fpga import FpgaDatapath
from learnedidx.index.training import TrainResult

log = logging.getLogger(__name__)


class FpgaEmuBackend:
    """The emulated FPGA datapath run in this process (FP32 by default)."""

    name = "fpga-emu"

    def __init__(self, config: str | None = None, **overrides) -> None:
        self.datapath = FpgaDatapath(DeviceConfig.load(config, **overrides))

    def _result(self, t0, R, x, cycles) -> TrainResult:
        dev = cycles / (self.datapath.cfg.clock_mhz * 1e6)
        return TrainResult(R=R, coef=x, seconds=time.perf_counter() - t0, device_cycles=cycles,
                           info={"device_seconds": dev})

    def train_full(self, A: np.ndarray, b: np.ndarray) -> TrainResult:
        t0 = time.perf_counter()
        return self._result(t0, *self.datapath.full(A, b))

    def train_incremental(self, R_old, A_delta, A, b) -> TrainResult:
        t0 = time.perf_counter()
        return self._result(t0, *self.datapath.incremental(R_old, A_delta, A, b))


class ServerBackend:
    """Sends train jobs to the accelerator server (arrays through shared memory).

    A dead or silent server raises :class:`~learnedidx.errors.ServerUnavailableError`; the
    store then trains in-process and logs one warning.
    """

    name = "server"

    def __init__(self, socket: str | None = None, timeout: float = 30.0, token: str | None = None,
                 tcp: tuple[str, int] | None = None) -> None:
        from learnedidx.server.client import Client

        self.client = Client(tcp or socket, token=token, timeout=timeout)

    def _result(self, t0, result, arrays) -> TrainResult:
        return TrainResult(R=arrays["R"], coef=arrays["coef"], seconds=time.perf_counter() - t0,
                           device_cycles=int(result.get("cycles", 0)),
                           info={"device_seconds": result.get("device_seconds", 0.0),
                                 "server_seconds": result.get("host_seconds", 0.0)})

    def train_full(self, A, b) -> TrainResult:
        t0 = time.perf_counter()
        return self._result(t0, *self.client.call("train.full", arrays={"A": A, "b": b}))

    def train_incremental(self, R_old, A_delta, A, b) -> TrainResult:
        t0 = time.perf_counter()
        return self._result(t0, *self.client.call(
            "train.incremental", arrays={"R_old": R_old, "A_delta": A_delta, "A": A, "b": b}))
