"""The server's training device: the CPU kernels or the emulated FPGA, with job accounting."""
from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict

import numpy as np

from learnedidx.accel.config import DeviceConfig
from learnedidx.accel.fpga import FpgaDatapath
from learnedidx.errors import BadRequestError, ConfigError
from learnedidx.index.training import KeysJob

#: Widest job (columns of A) the server's device accepts.
MAX_COLUMNS = 1024


class RCache:
    """Memoized R factors held in device memory, keyed by group id: the latest version of
    each group, least recently used groups dropped beyond ``groups``."""

    def __init__(self, groups: int) -> None:
        self.groups = max(0, groups)
        self._lock = threading.Lock()
        self._data: OrderedDict[str, tuple[int, np.ndarray]] = OrderedDict()
        self.hits = self.misses = 0

    def get(self, group: str, version: int) -> np.ndarray | None:
        with self._lock:
            hit = self._data.get(group)
            if hit is None or hit[0] != version:
                self.misses += 1
                return None
            self._data.move_to_end(group)
            self.hits += 1
            return hit[1]

    def put(self, group: str, version: int, R: np.ndarray) -> None:
        with self._lock:
            self._data[group] = (version, R)
            self._data.move_to_end(group)
            while len(self._data) > self.groups:
                self._data.popitem(last=False)

    def stats(self) -> dict:
        with self._lock:
            return {"groups": len(self._data), "hits": self.hits, "misses": self.misses}


class Device:
    """Runs train jobs and accounts for them.

    ``cpu``: one job per core.  ``fpga-emu``: the modelled device runs one job at a time
    (a job occupies the whole device: its row blocks spread over every unit's PUs, one unit
    re-factors the stacked R's), so ``modelled_seconds`` adds up every job's cycles; the
    emulation itself, host code standing in for the device, runs one job per core, so that
    the host's speed at emulating does not queue jobs behind each other.
    """

    def __init__(self, name: str, config: DeviceConfig, slots: int, r_cache_groups: int = 4096) -> None:
        self.name = name
        self.config = config
        self.r_cache = RCache(r_cache_groups)
        self._slots = threading.Semaphore(slots)
        self._lock = threading.Lock()
        self._queued = 0
        self._stats = {"jobs": 0, "busy_seconds": 0.0, "modelled_cycles": 0, "modelled_seconds": 0.0}
        self.datapath = FpgaDatapath(config) if name == "fpga-emu" else None

    @classmethod
    def create(cls, backend: str, config_path: str | None = None, *, r_cache_groups: int = 4096,
               **overrides) -> "Device":
        if backend not in ("cpu", "fpga-emu"):
            raise ConfigError(f"device backend must be 'cpu' or 'fpga-emu', not {backend!r}")
        cfg = DeviceConfig.load(config_path, **overrides)
        return cls(backend, cfg, max(1, os.cpu_count() or 1), r_cache_groups)

    @property
    def max_features(self) -> int:
        """Widest feature length (columns - 1) of a job this device trains."""
        return self.config.max_features if self.datapath is not None else MAX_COLUMNS - 1

    def run(self, kind: str, A: np.ndarray, b: np.ndarray, R_old: np.ndarray | None = None,
            A_delta: np.ndarray | None = None, r_resident: bool = False, checked: bool = False) -> dict:
        """Train one group; returns R, coef, cycles, device/host seconds.  ``r_resident``:
        R_old is already in device memory (not charged as a transfer); ``checked``: the
        caller has checked the inputs' shapes and finiteness (rows it built from key bytes)."""
        if not checked:
            _validate(A, b, R_old, A_delta)

        def train() -> tuple[np.ndarray, np.ndarray, int]:
            if self.datapath is not None:
                return (self.datapath.full(A, b) if kind == "full"
                        else self.datapath.incremental(R_old, A_delta, A, b, r_resident))
            from learnedidx.index.qr import solve_full, solve_incremental

            R, x = solve_full(A, b) if kind == "full" else solve_incremental(R_old, A_delta, A, b)
            return R, x, 0

        return self._accounted(train)

    def run_keys(self, job: KeysJob) -> dict:
        """The emulated FPGA's training of one group given by its keys (a checked job of a
        ``train.keys`` request): rows built and trained in one compiled call
        (:meth:`FpgaDatapath.keys`); returns what :meth:`run` returns."""
        return self._accounted(lambda: self.datapath.keys(job))

    def run_key_batch(self, keys: np.ndarray, offsets: np.ndarray, jobs: list[tuple], r_old: np.ndarray,
                      ) -> tuple[np.ndarray, np.ndarray, float]:
        """The ``cpu`` device's ``train.keys``: every job of a checked request (``(first
        key, n, new keys, prefix, feat, incremental)`` each; ``r_old`` the incremental jobs'
        factors in order) fitted from the key bytes, without feature matrices, in compiled
        calls over the cores (:func:`~learnedidx.index.fitting.fit_keyed_jobs`: the same
        arithmetic as :meth:`run` on the jobs' rows, so the same numbers).  Returns the R's
        and coefficients concatenated in the jobs' order, and the host seconds."""
        from learnedidx.index import fitting as F
        from learnedidx.index import parallel

        table = np.zeros((len(jobs), F.K_COLS), np.int64)
        r_at = ro = co = 0
        for t, (at, n, new, prefix, feat, incremental) in enumerate(jobs):
            w = feat + 1
            table[t] = (at, n, new, prefix, feat, incremental, r_at, ro, co)
            r_at += w * w if incremental else 0
            ro += w * w
            co += w
        R, coef = np.zeros(ro), np.zeros(co)
        seconds: list[float] = []

        def part(j0: int, j1: int) -> None:
            def train() -> tuple[np.ndarray, np.ndarray, int]:
                F.fit_keyed_jobs(keys, offsets, table, r_old, R, coef, j0, j1)
                return R, coef, 0

            seconds.append(self._accounted(train, j1 - j0)["host_seconds"])

        # small slices, taken by whichever core is free: the jobs' costs differ (full or
        # incremental, their sizes)
        parallel.over_range(part, len(jobs), min(len(jobs), 8 * parallel.CORES))
        return R, coef, sum(seconds)

    def _accounted(self, train, jobs: int = 1) -> dict:
        """Run ``train`` (returning R, coef, cycles) in one of the device's slots, counted
        as ``jobs`` jobs."""
        with self._lock:
            self._queued += 1
        with self._slots:
            with self._lock:
                self._queued -= 1
            t0 = time.perf_counter()
            R, x, cycles = train()
            dt = time.perf_counter() - t0
        modelled = cycles / (self.config.clock_mhz * 1e6)
        with self._lock:
            self._stats["jobs"] += jobs
            self._stats["busy_seconds"] += dt
            self._stats["modelled_cycles"] += cycles
            self._stats["modelled_seconds"] += modelled
        return {"R": R, "coef": x, "cycles": cycles, "device_seconds": modelled, "host_seconds": dt}

    def warm_up(self, A: np.ndarray, b: np.ndarray) -> None:
        """Run the device's full and incremental training once on ``A``/``b``, unaccounted
        (compiles their kernels)."""
        if self.datapath is not None:
            R = self.datapath.full(A, b)[0]
            self.datapath.incremental(R, A, A, b)
        else:
            from learnedidx.index.fitting import fit_keyed_jobs
            from learnedidx.index.qr import solve_full, solve_incremental

            R = solve_full(A, b)[0]
            solve_incremental(R, A, A, b)
            keys = np.frombuffer(bytearray(b"abcd"), np.uint8)  # writable, as a request's arrays are
            offsets = np.arange(5, dtype=np.int64)
            table = np.array([[0, 2, 0, 0, 1, 0, 0, 0, 0], [2, 1, 1, 0, 1, 1, 0, 4, 2]], np.int64)  # full, incremental
            fit_keyed_jobs(keys, offsets, table, np.eye(2).reshape(-1), np.zeros(8), np.zeros(4), 0, 2)

    def stats(self) -> dict:
        with self._lock:
            return {"backend": self.name, "queue_length": self._queued, **self._stats,
                    "r_cache": self.r_cache.stats(), "config": self.config.to_dict()}


def _validate(A, b, R_old, A_delta) -> None:
    if A.ndim != 2 or A.shape[0] < 1 or A.shape[1] < 1 or b.shape != (A.shape[0],):
        raise BadRequestError("A must be N×n and b of length N")
    n = A.shape[1]
    if n > MAX_COLUMNS:
        raise BadRequestError(f"too many columns ({n}; at most {MAX_COLUMNS})")
    if R_old is not None and R_old.shape != (n, n):
        raise BadRequestError("R_old must be n×n")
    if A_delta is not None and (A_delta.ndim != 2 or A_delta.shape[1] != n):
        raise BadRequestError("A_delta must have n columns")
    for arr in (A, b, R_old, A_delta):
        if arr is not None and not np.all(np.isfinite(arr)):
            raise BadRequestError("arrays must be finite")
