"""The engine loop: per-thread models over partitions of the tuples, merged every epoch.

Each engine thread runs a compiled algorithm's kernel (:mod:`learnedidx.indb.dsl.kernels`)
on its own contiguous partition with its own copy of the model (or its own accumulators);
after every epoch the copies are merged (averaged / summed) in partition order, so results
depend only on the seed and the thread count.  Kernels run on pieces of their partition of
about :data:`WORK_PER_CHECK` operations, asking ``stop()`` between pieces, so that a stopped
call stops computing within milliseconds; the pieces give the same results as one call.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from learnedidx.accel.engine_model import modelled_seconds
from learnedidx.errors import CancelledError, DSLError, LearnedIdxError
from learnedidx.indb.dsl import Algorithm, settings_for
from learnedidx.indb.dsl.compiler import runtime_error
from learnedidx.indb.dsl.kernels import SCHEDULES, accumulate_kernel, factor_kernel, loss_kernel, sgd_kernel
from learnedidx.indb.runtime.data import check, design, factor_tuples, labels, partitions

StopCheck = Callable[[], bool] | None
#: Multiply-adds a kernel call does between two looks at ``stop()`` (milliseconds of work).
WORK_PER_CHECK = 1 << 23


@dataclass
class TrainOutput:
    model: dict
    loss: float
    iterations: int
    rows_used: int
    seconds: float
    modelled_seconds: float
    info: dict = field(default_factory=dict)  #: settings; for accumulating algorithms, the last sums


def rounds(first: int, last: int, stop: StopCheck):
    """``range(first, last + 1)`` that asks ``stop()`` before each round (epoch or iteration)."""
    for i in range(first, last + 1):
        if stop is not None and stop():
            raise CancelledError("training stopped: the calling statement is gone")
        yield i


def _pieces(lo: int, hi: int, cost: int, stop: StopCheck, align: int = 1):
    """``(start, end)`` pieces of ``range(lo, hi)`` of about WORK_PER_CHECK / ``cost`` tuples
    (a multiple of ``align``), asking ``stop()`` before each."""
    step = max(align, WORK_PER_CHECK // max(1, cost) // align * align)
    for a in range(lo, hi, step):
        if stop is not None and stop():
            raise CancelledError("training stopped: the calling statement is gone")
        yield a, min(hi, a + step)


def run(alg: Algorithm, data: dict, params: dict, *, threads: int = 2, seed: int = 0,
        stop: StopCheck = None) -> TrainOutput:
    """Train ``alg`` on arrays ({"X", "y"}, or {"row", "col", "value"} for factors)."""
    s = settings_for(alg.settings, params)
    t0 = time.perf_counter()
    train = _train_factor if alg.form == "factor" else _train_linear
    info: dict = {"settings": s}
    try:
        model, loss, epochs, n, d = train(alg, data, params, s, threads, seed, stop, info)
    except LearnedIdxError:
        raise
    except (ZeroDivisionError, OverflowError, IndexError) as exc:  # raised by the algorithm's compiled code
        raise runtime_error(exc, alg.name) from None
    return TrainOutput(model, loss, epochs, n, time.perf_counter() - t0, modelled_seconds(alg.cost, n, d, epochs),
                       info)


def _loss(ex: ThreadPoolExecutor, kernel, parts: list[slice], data: tuple, model: tuple, stop: StopCheck,
          cost: int) -> float:
    """The loss summed over the tuples ``data`` (``cost`` operations each), each partition on
    its own thread."""
    return float(sum(ex.map(lambda p: sum(kernel(*(a[i:j] for a in data), *model)
                                          for i, j in _pieces(p.start, p.stop, cost, stop)), parts)))


def _train_linear(alg, data, params, s, threads, seed, stop, info):
    X = design(data["X"], params)
    y = np.ascontiguousarray(data["y"], np.float64)
    check(X, y)
    y, extra = labels(y, s["labels"], alg.name)
    n = len(y)
    parts = partitions(n, threads)
    w = np.zeros(X.shape[1])
    loss_k = loss_kernel(alg)
    prev, loss, ep = np.inf, float("nan"), 0
    with ThreadPoolExecutor(len(parts)) as ex:
        if alg.form == "accumulate":
            kernel, modes, shapes = accumulate_kernel(alg, w, X[0], y[0])
        else:
            kernel = sgd_kernel(alg, w, X[0], y[0])
            rng = np.random.default_rng(seed)
            sched, batch = SCHEDULES[s["schedule"]], int(s["batch_size"])
        for ep in rounds(1, int(s["epochs"]), stop):
            if alg.form == "accumulate":
                w, epoch_loss, info["accumulators"] = _accumulate_step(alg, kernel, ex, X, y, w, parts, shapes, modes,
                                                                       stop)
            else:
                lr = s["learning_rate"] * (0.5 ** ((ep - 1) // 10) if s["schedule"] == "step" else 1.0)
                orders = [rng.permutation(np.arange(p.start, p.stop)) for p in parts]
                tbase = (ep - 1) * max(1, len(orders[0]) // max(1, batch))

                def epoch(o, m, t):  # pieces of whole mini-batches: the same steps as one call
                    for i, j in _pieces(0, len(o), X.shape[1], stop, batch):
                        m = kernel(X, y, m, lr, sched, t + i // batch, o[i:j], batch, float(s["l2"]))
                    return m

                models = list(ex.map(lambda o: epoch(o, w.copy(), tbase), orders))
                w = np.mean(models, axis=0) if s["merge"] == "average" else w + np.sum(models, axis=0) - len(models) * w
                epoch_loss = _loss(ex, loss_k, parts, (X, y), (w,), stop, X.shape[1]) / n if loss_k else float("nan")
            loss = epoch_loss
            if abs(prev - epoch_loss) < s["tolerance"]:
                break
            prev = epoch_loss
        if loss_k is not None and alg.form == "accumulate":  # the pass saw the model before the update
            loss = _loss(ex, loss_k, parts, (X, y), (w,), stop, X.shape[1]) / n
    return {"coef": w, **extra}, loss, ep, n, X.shape[1]


def _accumulate_step(alg, kernel, ex, X, y, w, parts, shapes, modes, stop):
    """One pass summing the accumulators (and the loss at ``w``), then ``update``: (w, loss,
    the sums by accumulator name, as ``update`` saw them)."""
    cost = sum(int(np.prod(shape)) for shape in shapes) + X.shape[1]

    def one(p):
        acc = [np.zeros(shape) for shape in shapes]
        lsum = np.zeros(1)
        for i, j in _pieces(p.start, p.stop, cost, stop):
            kernel(X, y, w, i, j, *acc, lsum)
        return acc, lsum[0]

    res = list(ex.map(one, parts))
    sums = [sum(r[0][k] for r in res) for k in range(len(shapes))]
    values = {"w": w.copy(), "n": len(y)}
    values.update({a: (v[0] if mode == "scalar" else v) for a, v, mode in zip(alg.accumulators, sums, modes)})
    new = np.asarray(alg.namespace["update"](*[values[a] for a in alg.update_args]), np.float64)
    if new.shape != w.shape:
        raise DSLError(f"update must return the model: {w.shape[0]} values, not shape {new.shape}")
    return new, float(sum(r[1] for r in res)) / len(y), {a: values[a] for a in alg.accumulators}


def _train_factor(alg, data, params, s, threads, seed, stop, info):
    rows, cols, vals = factor_tuples(data)
    rank = int(s["rank"])
    rng = np.random.default_rng(seed)
    U = rng.normal(0, s["init_scale"], (int(rows.max()) + 1, rank))
    V = rng.normal(0, s["init_scale"], (int(cols.max()) + 1, rank))
    kernel = factor_kernel(alg, U[rows[0]], V[cols[0]], vals[0])
    loss_k = loss_kernel(alg)
    parts = partitions(len(vals), threads)
    sched, lr0, l2 = SCHEDULES[s["schedule"]], float(s["learning_rate"]), float(s["l2"])
    prev, loss, ep = np.inf, float("nan"), 0
    with ThreadPoolExecutor(len(parts)) as ex:
        for ep in rounds(1, int(s["epochs"]), stop):
            lr = lr0 * (0.5 ** ((ep - 1) // 10) if s["schedule"] == "step" else 1.0)
            orders = [rng.permutation(np.arange(p.start, p.stop)) for p in parts]
            copies = [(U.copy(), V.copy()) for _ in orders]
            tbase = (ep - 1) * len(orders[0])

            def epoch(o, uv):
                for i, j in _pieces(0, len(o), 4 * rank, stop):
                    kernel(rows, cols, vals, uv[0], uv[1], lr, sched, tbase + i, o[i:j], l2)

            list(ex.map(epoch, orders, copies))
            U = np.mean([c[0] for c in copies], axis=0)
            V = np.mean([c[1] for c in copies], axis=0)
            if loss_k is not None:
                loss = _loss(ex, loss_k, parts, (rows, cols, vals), (U, V), stop, rank) / len(vals)
                if abs(prev - loss) < s["tolerance"]:
                    break
                prev = loss
    return {"u": U, "v": V}, loss, ep, len(vals), rank
