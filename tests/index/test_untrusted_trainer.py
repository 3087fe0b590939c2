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


def _group(n: int, seed: int):
    rng = np.random.default_rng(seed)
    keys = sorted({b"user%019d" % x for x in rng.integers(0, 2 ** 63 - 1, n, dtype=np.int64)})
    arena = np.frombuffer(b"".join(keys), np.uint8)
    return arena, np.cumsum([0] + [len(k) for k in keys]).astype(np.int64), len(keys)


@pytest.mark.parametrize("factor", ["float64", "fp32", "garbage", "nan", "zero"])
def test_refinement_brings_a_rough_fit_to_float64_and_never_makes_it_worse(factor):
    """The store refines a trainer's answer on the host (iterative refinement with the
    trainer's R): with a factor of the rows, exact or rounded to FP32, a fit whose
    predictions are off by many positions comes to numpy's float64 least squares; an R that
    is no factor of the rows leaves the answer no worse; the bounds returned are the exact
    bounds of the coefficients kept."""
    from learnedidx.index import fitting as F
    from learnedidx.index import kernels as K

    arena, offs, n = _group(12_000, 3)
    prefix = K.common_prefix_len(arena, offs, 0, n)
    feat = K.max_key_len(offs, 0, n) - prefix
    A = K.build_features(arena, offs, 0, n, prefix, feat)
    b = np.arange(n, dtype=np.float64)
    best = np.linalg.lstsq(A, b, rcond=None)[0]
    lo, hi = K.error_bounds(arena, offs, 0, n, prefix, feat, best)
    oracle = hi - lo
    rough = best.copy()
    rough[1 + feat // 2] += 40 / 9  # a middle digit now moves predictions by up to 40 positions
    rng = np.random.default_rng(4)
    R = np.linalg.qr(A.astype(np.float32 if factor == "fp32" else np.float64), mode="r").astype(np.float64)
    R = {"garbage": np.triu(rng.normal(size=R.shape)), "nan": np.where(np.eye(len(R)) > 0, np.nan, R),
         "zero": np.zeros_like(R)}.get(factor, R)
    rlo, rhi = K.error_bounds(arena, offs, 0, n, prefix, feat, rough)
    assert rhi - rlo > oracle + 30
    coef = rough.copy()
    lo, hi = F.refined_bounds(arena, offs, n, prefix, feat, coef, np.ascontiguousarray(R), 3)
    assert (lo, hi) == K.error_bounds(arena, offs, 0, n, prefix, feat, coef)  # exact for what is kept
    assert hi - lo <= rhi - rlo
    if factor in ("float64", "fp32"):
        assert hi - lo <= oracle + 2
