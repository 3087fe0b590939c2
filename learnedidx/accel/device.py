"""The server's training device: the CPU kernels or the emulated FPGA, with job accounting."""
from __future__ import annotations

import threading
import time

import numpy as np

from learnedidx.accel.config import DeviceConfig
from learnedidx.accel.fpga import FpgaDatapath
from learnedidx.errors import ConfigError


class Device:
    """Runs train jobs; at most ``units`` at once (the emulated device's QR units; CPU: one per core)."""

    def __init__(self, name: str, config: DeviceConfig, slots: int) -> None:
        self.name = name
        self.config = config
        self._slots = threading.Semaphore(slots)
        self._lock = threading.Lock()
        self._queued = 0
        self._stats = {"jobs": 0, "busy_seconds": 0.0, "modelled_cycles": 0, "modelled_seconds": 0.0}
        self.datapath = FpgaDatapath(config) if name == "fpga-emu" else None

    @classmethod
    def create(cls, backend: str, config_path: str | None = None, **overrides) -> "Device":
        if backend not in ("cpu", "fpga-emu"):
            raise ConfigError(f"device backend must be 'cpu' or 'fpga-emu', not {backend!r}")
        cfg = DeviceConfig.load(config_path, **overrides)
        import os

        return cls(backend, cfg, cfg.units if backend == "fpga-emu" else max(1, os.cpu_count() or 1))

    def run(self, kind: str, A: np.ndarray, b: np.ndarray, R_old: np.ndarray | None = None,
            A_delta: np.ndarray | None = None) -> dict:
        """Train one group; returns R, coef, cycles, device/host seconds."""
        _validate(A, b, R_old, A_delta)
        with self._lock:
            self._queued += 1
        with self._slots:
            with self._lock:
                self._queued -= 1
            t0 = time.perf_counter()
            if self.datapath is not None:
                R, x, cycles = (self.datapath.full(A, b) if kind == "full"
                                else self.datapath.incremental(R_old, A_delta, A, b))
            else:
                from learnedidx.index.qr import solve_full, solve_incremental

                R, x = solve_full(A, b) if kind == "full" else solve_incremental(R_old, A_delta, A, b)
                cycles = 0
            dt = time.perf_counter() - t0
        modelled = cycles / (self.config.clock_mhz * 1e6)
        with self._lock:
            self._stats["jobs"] += 1
            self._stats["busy_seconds"] += dt
            self._stats["modelled_cycles"] += cycles
            self._stats["modelled_seconds"] += modelled
        return {"R": R, "coef": x, "cycles": cycles, "device_seconds": modelled, "host_seconds": dt}

    def stats(self) -> dict:
        with self._lock:
            return {"backend": self.name, "queue_length": self._queued, **self._stats,
                    "config": self.config.to_dict()}


def _validate(A, b, R_old, A_delta) -> None:
    if A.ndim != 2 or A.shape[0] < 1 or A.shape[1] < 1 or b.shape != (A.shape[0],):
        raise ValueError("A must be N×n and b of length N")
    n = A.shape[1]
    if n > 1024:
        raise ValueError(f"too many columns ({n})")
    if R_old is not None and R_old.shape != (n, n):
        raise ValueError("R_old must be n×n")
    if A_delta is not None and (A_delta.ndim != 2 or A_delta.shape[1] != n):
        raise ValueError("A_delta must have n columns")
    for arr in (A, b, R_old, A_delta):
        if arr is not None and not np.all(np.isfinite(arr)):
            raise ValueError("arrays must be finite")
