"""The engine loop: accumulate-then-update passes over chunks of rows, or per-thread SGD
models over partitions of the tuples, merged every epoch.

Accumulate algorithms (:mod:`learnedidx.indb.dsl.kernels`) sum their accumulators per chunk
of rows, on any thread, and add the chunks' sums in the rows' order, so results depend on
neither the thread count nor the schedule; the rows come from memory or, on the first pass,
from the caller's stream while it arrives (:meth:`run` takes a source of rows).  SGD and
factor algorithms need every row in memory: each engine thread runs the kernel on its own
contiguous partition with its own copy of the model; after every epoch the copies are merged
(averaged / summed) in partition order, so results depend only on the seed and the thread
count.  Kernels run on pieces of about :data:`WORK_PER_CHECK` operations (chunks, for
accumulate passes), asking ``stop()`` between pieces, so that a stopped call stops computing
within milliseconds; the pieces give the same results as one call.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from learnedidx.accel.engine_model import modelled_seconds
from learnedidx.errors import CancelledError, DSLError, LearnedIdxError, TrainingDataError
from learnedidx.indb.dsl import Algorithm, settings_for
from learnedidx.indb.dsl.compiler import runtime_error
from learnedidx.indb.dsl.kernels import SCHEDULES, accumulate_kernel, factor_kernel, loss_kernel, sgd_kernel
from learnedidx.indb.runtime.data import (NO_FEATURES, NO_ROWS, NOT_FINITE, InMemory, design, factor_tuples, labels,
                                          partitions)

StopCheck = Callable[[], bool] | None
#: Multiply-adds a kernel call does between two looks at ``stop()`` (milliseconds of work).
WORK_PER_CHECK = 1 << 23


@dataclass
class TrainOutput:
    model: dict
    loss: float
    iterations: int
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


def run(alg: Algorithm, data, params: dict, *, threads: int = 2, seed: int = 0,
        stop: StopCheck = None) -> TrainOutput:
    """Train ``alg`` on arrays ({"X", "y"}, or {"row", "col", "value"} for factors), or on a
    source of rows read in passes (:class:`~learnedidx.indb.runtime.data.InMemory`'s interface:
    the caller's stream)."""
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
    return TrainOutput(model, loss, epochs, time.perf_counter() - t0, modelled_seconds(alg.cost, n, d, epochs), info)


def _loss(ex: ThreadPoolExecutor, kernel, parts: list[slice], data: tuple, model: tuple, stop: StopCheck,
          cost: int) -> float:
    """The loss summed over the tuples ``data`` (``cost`` operations each), each partition on
    its own thread."""
    return float(sum(ex.map(lambda p: sum(kernel(*(a[i:j] for a in data), *model)
                                          for i, j in _pieces(p.start, p.stop, cost, stop)), parts)))


def check_stop(stop: StopCheck) -> None:
    if stop is not None and stop():
        raise CancelledError("training stopped: the calling statement is gone")


def check_first_pass(src) -> None:
    """The checks of :func:`check` on a source whose first pass has ended."""
    if src.n == 0:
        raise TrainingDataError(NO_ROWS)
    if not src.finite:
        raise TrainingDataError(NOT_FINITE)
    if src.d == 0:
        raise TrainingDataError(NO_FEATURES)


def all_rows(src) -> tuple[np.ndarray, np.ndarray]:
    """(y, X): every row in memory, checked; without the reserved intercept column when the
    features already start with ones."""
    src.need_all = True
    y, X = src.arrays()
    check_first_pass(src)
    if src.ones and src.lead:
        src.drop_lead()
        y, X = src.arrays()
    return y, X


def _train_linear(alg, data, params, s, threads, seed, stop, info):
    src = InMemory(design(data["X"], params), data["y"]) if isinstance(data, dict) else data
    with ThreadPoolExecutor(threads) as ex:
        if alg.form == "accumulate":
            return _train_accumulate(alg, src, s, ex, stop, info)
        y, X = all_rows(src)
        y, extra = labels(y, s["labels"], alg.name)
        with ThreadPoolExecutor(1, thread_name_prefix="learnedidx-shuffle") as shuffler:
            w, loss, ep = _sgd_epochs(alg, X, y, s, partitions(len(y), threads), seed, ex, shuffler, stop)
    return {"coef": w, **extra}, loss, ep, len(y), X.shape[1]


def _sgd_epochs(alg, X, y, s, parts, seed, ex, shuffler, stop):
    """SGD epochs, each thread on its partition in a random order with its own copy of the
    model, the copies merged after each epoch: (w, loss, epochs)."""
    n = len(y)
    w = np.zeros(X.shape[1])
    loss_k = loss_kernel(alg)
    prev, loss, ep = np.inf, float("nan"), 0
    kernel = sgd_kernel(alg, w, X[0], y[0])
    rng = np.random.default_rng(seed)
    sched, batch = SCHEDULES[s["schedule"]], int(s["batch_size"])
    # Each epoch's order per partition is rng.permutation(np.arange(p.start, p.stop)), drawn in
    # the same sequence, but shuffled in place, one epoch ahead, on a thread of its own, while
    # the epoch before runs.
    buffers = [[np.empty(p.stop - p.start, np.int64) for p in parts] for _ in range(2)]

    def shuffled(orders: list) -> list:
        for p, o in zip(parts, orders):
            o[:] = 1  # range(p.start, p.stop), without allocating it
            o[0] = p.start
            np.cumsum(o, out=o)
            rng.shuffle(o)
        return orders

    epochs = int(s["epochs"])
    ahead = shuffler.submit(shuffled, buffers[0])
    for ep in rounds(1, epochs, stop):
        lr = s["learning_rate"] * (0.5 ** ((ep - 1) // 10) if s["schedule"] == "step" else 1.0)
        orders = ahead.result()
        if ep < epochs:
            ahead = shuffler.submit(shuffled, buffers[ep % 2])
        tbase = (ep - 1) * max(1, len(orders[0]) // max(1, batch))

        def epoch(o, m, t):  # pieces of whole mini-batches: the same steps as one call
            for i, j in _pieces(0, len(o), X.shape[1], stop, batch):
                m = kernel(X, y, m, lr, sched, t + i // batch, o[i:j], batch, float(s["l2"]))
            return m

        models = list(ex.map(lambda o: epoch(o, w.copy(), tbase), orders))
        w = np.mean(models, axis=0) if s["merge"] == "average" else w + np.sum(models, axis=0) - len(models) * w
        loss = _loss(ex, loss_k, parts, (X, y), (w,), stop, X.shape[1]) / n if loss_k else float("nan")
        if abs(prev - loss) < s["tolerance"]:
            break
        prev = loss
    return w, loss, ep


class Accumulation:
    """An accumulate algorithm's pass: every ``acc_*`` (and the loss) summed per chunk of rows,
    the chunks' sums added in the rows' order; then ``update``."""

    def __init__(self, alg: Algorithm, w: np.ndarray, x: np.ndarray, y: float, kind: str) -> None:
        self.alg = alg
        # the per-tuple loss is summed for the convergence test, unless update gives the loss
        self.kernel, self.modes, self.shapes = accumulate_kernel(alg, w, x, y, loss=not alg.update_gives_loss)
        self.binary = kind == "binary"

    def chunk(self, w: np.ndarray, stop: StopCheck):
        def fn(y: np.ndarray, X: np.ndarray):
            check_stop(stop)
            if self.binary and not np.all((y == 0) | (y == 1)) and np.all(np.isfinite(y)):
                raise TrainingDataError(f"{self.alg.name} needs labels 0/1 (or booleans)")
            acc = [np.zeros(shape) for shape in self.shapes]
            lsum = np.zeros(1)
            self.kernel(X, y, w, 0, len(y), *acc, lsum)
            return acc, lsum[0]
        return fn

    def run(self, src, w: np.ndarray, ex: ThreadPoolExecutor, stop: StopCheck) -> tuple[list, float]:
        """(accumulator sums, loss sum at ``w``) of one pass."""
        res = src.each(self.chunk(w, stop), ex)
        sums = [sum((r[0][k] for r in res), np.zeros(shape)) for k, shape in enumerate(self.shapes)]
        return sums, float(sum(r[1] for r in res))

    def update(self, w: np.ndarray, sums: list, n: int, info: dict) -> tuple[np.ndarray, float | None]:
        """(the next model, its loss when update gives it)."""
        return update(self.alg, w, sums, self.modes, n, info)


def update(alg: Algorithm, w: np.ndarray, sums: list, modes: tuple, n: int, info: dict
           ) -> tuple[np.ndarray, float | None]:
    """An accumulate algorithm's ``update`` of ``w`` from the sums of a pass over ``n`` rows
    (each accumulator's ``modes``: "scalar" ones are passed as numbers): (the next model, its
    loss when update gives it)."""
    values = {"w": w.copy(), "n": n}
    values.update({a: (v[0] if mode == "scalar" else v) for a, v, mode in zip(alg.accumulators, sums, modes)})
    info["accumulators"] = {a: values[a] for a in alg.accumulators}
    out = alg.namespace["update"](*[values[a] for a in alg.update_args])
    new, loss = (out[0], float(out[1])) if alg.update_gives_loss else (out, None)
    new = np.asarray(new, np.float64)
    if new.shape != w.shape:
        raise DSLError(f"update must return the model: {w.shape[0]} values, not shape {new.shape}")
    return new, loss


def _train_accumulate(alg, src, s, ex, stop, info):
    """Epochs of accumulate-then-update; the first pass over a stream computes while it arrives."""
    extra: dict = {}
    if s["labels"] == "signed":  # the mapping needs both label values before the first row
        y, X = all_rows(src)
        y, extra = labels(y, "signed", alg.name)
        src = InMemory(X, y)
    # A pass over memory is faster than one over the stream, but keeping the rows costs
    # writing them: worth it when more than the epoch's pass and the loss pass are coming.
    src.keep = int(s["epochs"]) > 1
    first = src.peek()
    if first is None:
        src.each(lambda y, X: None, ex)  # the pass's end: its row counts
        check_first_pass(src)
    y0, X0 = first
    if src.d == 0:
        raise TrainingDataError(NO_FEATURES)
    w = np.zeros(src.d)
    acc = Accumulation(alg, w, X0[0], float(y0[0]), s["labels"])
    loss_k = loss_kernel(alg)
    prev, loss, ep = np.inf, float("nan"), 0
    for ep in rounds(1, int(s["epochs"]), stop):
        sums, lsum = acc.run(src, w, ex, stop)
        if ep == 1:
            check_first_pass(src)
            if src.ones and src.lead:  # the features start with ones: no intercept column of our own
                src.drop_lead()
                w = np.zeros(src.d)
                acc = Accumulation(alg, w, X0[0, 1:], float(y0[0]), s["labels"])
                sums, lsum = acc.run(src, w, ex, stop)
        w, given = acc.update(w, sums, src.n, info)
        loss = epoch_loss = lsum / src.n if given is None else given
        if abs(prev - epoch_loss) < s["tolerance"]:
            break
        prev = epoch_loss
    if loss_k is not None and not alg.update_gives_loss:  # the pass saw the model before the update
        loss = float(sum(src.each(lambda y, X: (check_stop(stop), loss_k(X, y, w))[1], ex))) / src.n
    return {"coef": w, **extra}, loss, ep, src.n, src.d


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
