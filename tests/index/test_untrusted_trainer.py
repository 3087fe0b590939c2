"""A trainer's answer is kept only when its coefficients and its R factor are finite and of
the right shapes: an emulated FP32 device can answer NaN in R with finite coefficients, and
a memoized NaN R would poison every later incremental retrain of the group (and be refused
by the server when sent back)."""
from __future__ import annotations

import numpy as np
import pytest

import learnedidx
from learnedidx.index.qr import CpuBackend
from learnedidx.index.training import TrainResult, register_backend


class _NanR:
    """Right coefficients, an R with a NaN (as the FP32 device can answer)."""

    name = "nan-r"

    def __init__(self) -> None:
        self.cpu = CpuBackend()
        self.calls = 0

    def _spoil(self, res: TrainResult) -> TrainResult:
        self.calls += 1
        R = np.array(res.R, np.float64)
        R[0, -1] = np.nan
        return TrainResult(R=R, coef=res.coef)

    def train_full(self, A, b):
        return self._spoil(self.cpu.train_full(A, b))

    def train_incremental(self, R_old, A_delta, A, b):
        assert np.all(np.isfinite(R_old)), "a NaN R was memoized"
        return self._spoil(self.cpu.train_incremental(R_old, A_delta, A, b))


class _NanRKeys(_NanR):
    """The same, answering batches (train_keys) too."""

    name = "nan-r-keys"

    def train_keys(self, jobs):
        out = []
        for j in jobs:
            A, b, A_delta = j.rows()
            out.append(self.train_full(A, b) if A_delta is None else self.train_incremental(j.R_old, A_delta, A, b))
        return out


@pytest.mark.parametrize("cls", [_NanR, _NanRKeys])
def test_a_nan_r_is_never_memoized(cls):
    trainer = cls()
    register_backend(cls.name, lambda: trainer)
    rng = np.random.default_rng(2)
    keys = sorted({b"k%012d" % x for x in rng.integers(0, 10 ** 12, 20_000)})
    ref = {k: b"a" for k in keys[::2]}
    with learnedidx.open(None, group_size=1024, buffer_threshold=32, retrain="background", trainer=cls.name) as db:
        db.put_many(list(ref), list(ref.values()))
        db.retrain_now()
        for _ in range(2):  # two rounds: the second is incremental on the first's memos
            for k in keys[1::2]:
                db.put(k, b"b")
                ref[k] = b"b"
            db.retrain_now()
        live = db._live
        memos = [g.memo for g in live.groups if g is not None and g.memo is not None]
        assert memos and all(np.all(np.isfinite(m.R)) for m in memos)
        assert trainer.calls > 0 and db.stats()["retrains_incremental"] > 0
        assert not db.stats()["trainer_failed"]
        assert db.get_many(keys) == [ref[k] for k in keys]
