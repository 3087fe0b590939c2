"""Kernels generated from a DSL algorithm, and the engine loop that runs them.

One nogil Numba kernel per compiled algorithm and shape: an SGD epoch over a partition, an
accumulation pass over a partition, or a factor SGD epoch.  Each engine thread runs the kernel
on its own partition with its own copy of the model (or its own accumulators); after every
epoch the copies are merged (averaged / summed) in partition order, so results depend only on
the seed and the thread count.  Per-tuple results of the form ``s * a`` or ``s * outer(a, b)``
are accumulated in place (see :func:`learnedidx.indb.dsl._split`).
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from learnedidx.accel.engine_model import modelled_seconds
from learnedidx.errors import DSLError, TrainingDataError
from learnedidx.indb.dsl import Algorithm, settings_for
from learnedidx.indb.engine import TrainOutput, _check, _design, _partitions, rounds

SCHEDULES = {"constant": 0, "invscaling": 1, "inverse": 2, "step": 0}


@njit(cache=True, nogil=True)
def rate(lr0, schedule, t, l2):
    """The step size at step ``t`` (schedule codes as in :data:`SCHEDULES`)."""
    if schedule == 1:
        return lr0 / np.sqrt(t)
    if schedule == 2:
        return lr0 / (1.0 + lr0 * l2 * t)
    return lr0


def _add(target: str, fn: str, mode: str, args: str) -> list[str]:
    """Lines adding ``fn(args)`` into ``target`` (a 1-element array for scalars)."""
    if mode == "scalar":
        return [f"{target}[0] += {fn}({args})"]
    if mode == "array":
        return [f"{target} += {fn}({args})"]
    if mode == "scaled":
        return [f"_s, _a = {fn}__split({args})", "for _j in range(_a.shape[0]):", f"    {target}[_j] += _s * _a[_j]"]
    return [f"_s, _a, _b = {fn}__split({args})", "for _j in range(_a.shape[0]):", "    _sa = _s * _a[_j]",
            "    for _k in range(_b.shape[0]):", f"        {target}[_j, _k] += _sa * _b[_k]"]


def _indent(lines: list[str], n: int) -> str:
    return "".join(" " * n + line + "\n" for line in lines)


def _sgd_source(plan: tuple) -> str:
    (mode,) = plan
    return f'''
def _kernel(X, y, w, lr0, schedule, t0, order, batch, l2):
    d = X.shape[1]
    g = np.zeros(d)
    nb = 0
    t = t0
    for k in range(order.shape[0]):
        i = order[k]
{_indent(_add("g", "gradient", mode, "w, X[i], y[i]"), 8)}        nb += 1
        if nb == batch or k == order.shape[0] - 1:
            t += 1
            lr = _rate(lr0, schedule, t, l2)
            for a in range(d):
                w[a] -= lr * (g[a] / nb + l2 * w[a] * (a > 0))
                g[a] = 0.0
            nb = 0
    return w
'''


def _accumulate_source(plan: tuple, names: list[str], loss: bool) -> str:
    body = [line for name, mode in zip(names, plan) for line in _add(f"A_{name}", f"acc_{name}", mode, "w, x, t")]
    if loss:
        body.append("L[0] += loss(w, x, t)")
    return f'''
def _kernel(X, y, w, lo, hi, {", ".join(f"A_{n}" for n in names)}, L):
    for i in range(lo, hi):
        x = X[i]
        t = y[i]
{_indent(body, 8)}    return 0
'''


def _factor_source(plan: tuple) -> str:
    lines = []
    for side, mode in zip("uv", plan):
        if mode == "array":
            lines += [f"g{side} = gradient_{side}(u, v, Y[i])", f"s{side} = 1.0", f"a{side} = g{side}"]
        else:
            lines += [f"s{side}, a{side} = gradient_{side}__split(u, v, Y[i])"]
    return f'''
def _kernel(R, C, Y, U, V, lr0, schedule, t0, order, l2):
    t = t0
    for k in range(order.shape[0]):
        i = order[k]
        u = U[R[i]]
        v = V[C[i]]
        t += 1
        lr = _rate(lr0, schedule, t, l2)
{_indent(lines, 8)}        for f in range(u.shape[0]):
            du = su * au[f] + l2 * u[f]
            dv = sv * av[f] + l2 * v[f]
            u[f] -= lr * du
            v[f] -= lr * dv
    return 0
'''


_LOSS_SOURCE = {
    "tuple": '''
def _kernel(X, y, w):
    s = 0.0
    for i in range(X.shape[0]):
        s += loss(w, X[i], y[i])
    return s
''',
    "factor": '''
def _kernel(R, C, Y, U, V):
    s = 0.0
    for i in range(Y.shape[0]):
        s += loss(U[R[i]], V[C[i]], Y[i])
    return s
'''}


def _kernel(alg: Algorithm, key: tuple, source: str):
    """The compiled kernel for ``key`` (kind and plan), generated from ``source`` once."""
    with alg.lock:
        if key not in alg.kernels:
            ns = {**alg.namespace, "np": np, "_rate": rate}
            exec(source, ns)  # generated from the validated algorithm
            alg.kernels[key] = njit(nogil=True)(ns["_kernel"])
        return alg.kernels[key]


def _mode(alg: Algorithm, fn: str, *args) -> str:
    """How a per-tuple function's result is accumulated, from one call on the first tuple:
    ``scaled``/``rank1`` (in place, via its split variant), else ``scalar`` or ``array``."""
    if fn in alg.split:
        try:
            s, *vecs = alg.namespace[fn + "__split"](*args)
            if np.ndim(s) == 0 and all(np.ndim(v) == 1 for v in vecs):
                return "scaled" if len(vecs) == 1 else "rank1"
        except Exception:  # noqa: BLE001 - typing failed: the generic form below says why
            pass
    try:
        return "scalar" if np.ndim(alg.namespace[fn](*args)) == 0 else "array"
    except Exception as exc:  # noqa: BLE001 - Numba typing errors on the user's code
        raise DSLError(f"{fn} cannot be compiled for this data: {str(exc).splitlines()[0]}") from None


def _loss(ex: ThreadPoolExecutor, kernel, parts: list[slice], data: tuple, model: tuple) -> float:
    """The loss summed over the tuples ``data``, each partition on its own thread."""
    return float(sum(ex.map(lambda p: kernel(*(a[p] for a in data), *model), parts)))


def _labels(y: np.ndarray, kind: str, name: str) -> tuple[np.ndarray, dict]:
    if kind == "binary" and not np.all((y == 0) | (y == 1)):
        raise TrainingDataError(f"{name} needs labels 0/1 (or booleans)")
    if kind == "signed":
        labels = np.unique(y)
        if len(labels) != 2:
            raise TrainingDataError(f"{name} needs exactly two label values")
        return np.where(y == labels[1], 1.0, -1.0), {"labels": labels.astype(np.float64)}
    return y, {}


def train(alg: Algorithm, data: dict, params: dict, *, threads: int = 2, seed: int = 0, stop=None) -> TrainOutput:
    """Train ``alg`` on arrays ({"X", "y"}, or {"row", "col", "value"} for factors)."""
    s = settings_for(alg, params)
    t0 = time.perf_counter()
    run = _train_factor if alg.form == "factor" else _train_linear
    model, loss, epochs, n, d = run(alg, data, params, s, threads, seed, stop)
    return TrainOutput(model, loss, epochs, n, time.perf_counter() - t0, modelled_seconds(alg.cost, n, d, epochs),
                       {"settings": s})


def _train_linear(alg, data, params, s, threads, seed, stop):
    X = _design(data["X"], params)
    y = np.ascontiguousarray(data["y"], np.float64)
    _check(X, y)
    y, extra = _labels(y, s["labels"], alg.name)
    n = len(y)
    parts = _partitions(n, threads)
    w = np.zeros(X.shape[1])
    loss_kernel = _kernel(alg, ("loss",), _LOSS_SOURCE["tuple"]) if alg.has_loss else None
    prev, loss, ep = np.inf, float("nan"), 0
    with ThreadPoolExecutor(len(parts)) as ex:
        if alg.form == "accumulate":
            modes = tuple(_mode(alg, f"acc_{a}", w, X[0], y[0]) for a in alg.accumulators)
            kernel = _kernel(alg, ("accumulate", modes),
                             _accumulate_source(modes, alg.accumulators, alg.has_loss))
            shapes = [np.shape(alg.namespace[f"acc_{a}"](w, X[0], y[0])) or (1,) for a in alg.accumulators]
        else:
            mode = _mode(alg, "gradient", w, X[0], y[0])
            kernel = _kernel(alg, ("sgd", mode), _sgd_source((mode,)))
            rng = np.random.default_rng(seed)
            sched, batch = SCHEDULES[s["schedule"]], int(s["batch_size"])
        for ep in rounds(1, int(s["epochs"]), stop):
            if alg.form == "accumulate":
                w, epoch_loss = _accumulate_step(alg, kernel, ex, X, y, w, parts, shapes, modes)
            else:
                lr = s["learning_rate"] * (0.5 ** ((ep - 1) // 10) if s["schedule"] == "step" else 1.0)
                orders = [rng.permutation(np.arange(p.start, p.stop)) for p in parts]
                tbase = (ep - 1) * max(1, len(orders[0]) // max(1, batch))
                models = list(ex.map(lambda o: kernel(X, y, w.copy(), lr, sched, tbase, o, batch, float(s["l2"])),
                                     orders))
                w = np.mean(models, axis=0) if s["merge"] == "average" else w + np.sum(models, axis=0) - len(models) * w
                epoch_loss = _loss(ex, loss_kernel, parts, (X, y), (w,)) / n if loss_kernel else float("nan")
            loss = epoch_loss
            if abs(prev - epoch_loss) < s["tolerance"]:
                break
            prev = epoch_loss
        if loss_kernel is not None and alg.form == "accumulate":  # the pass saw the model before the update
            loss = _loss(ex, loss_kernel, parts, (X, y), (w,)) / n
    return {"coef": w, **extra}, loss, ep, n, X.shape[1]


def _accumulate_step(alg, kernel, ex, X, y, w, parts, shapes, modes):
    """One pass summing the accumulators (and the loss at ``w``), then ``update``: (w, loss)."""
    def one(p):
        acc = [np.zeros(shape) for shape in shapes]
        lsum = np.zeros(1)
        kernel(X, y, w, p.start, p.stop, *acc, lsum)
        return acc, lsum[0]

    res = list(ex.map(one, parts))
    sums = [sum(r[0][k] for r in res) for k in range(len(shapes))]
    values = {"w": w.copy(), "n": len(y)}
    values.update({a: (v[0] if mode == "scalar" else v) for a, v, mode in zip(alg.accumulators, sums, modes)})
    new = np.asarray(alg.namespace["update"](*[values[a] for a in alg.update_args]), np.float64)
    if new.shape != w.shape:
        raise DSLError(f"update must return the model: {w.shape[0]} values, not shape {new.shape}")
    return new, float(sum(r[1] for r in res)) / len(y)


def _train_factor(alg, data, params, s, threads, seed, stop):
    rows = np.ascontiguousarray(data["row"], np.int64)
    cols = np.ascontiguousarray(data["col"], np.int64)
    vals = np.ascontiguousarray(data["value"], np.float64)
    if len(vals) == 0:
        raise TrainingDataError("no rows to train on")
    if not np.all(np.isfinite(vals)):
        raise TrainingDataError("the training data contains NaN or infinite values")
    if rows.min() < 0 or cols.min() < 0:
        raise TrainingDataError("row and column ids must be >= 0")
    rank = int(s["rank"])
    rng = np.random.default_rng(seed)
    U = rng.normal(0, s["init_scale"], (int(rows.max()) + 1, rank))
    V = rng.normal(0, s["init_scale"], (int(cols.max()) + 1, rank))
    modes = tuple(_mode(alg, f"gradient_{side}", U[rows[0]], V[cols[0]], vals[0]) for side in "uv")
    kernel = _kernel(alg, ("factor", modes), _factor_source(modes))
    loss_kernel = _kernel(alg, ("factor-loss",), _LOSS_SOURCE["factor"]) if alg.has_loss else None
    parts = _partitions(len(vals), threads)
    sched, lr0, l2 = SCHEDULES[s["schedule"]], float(s["learning_rate"]), float(s["l2"])
    prev, loss, ep = np.inf, float("nan"), 0
    with ThreadPoolExecutor(len(parts)) as ex:
        for ep in rounds(1, int(s["epochs"]), stop):
            lr = lr0 * (0.5 ** ((ep - 1) // 10) if s["schedule"] == "step" else 1.0)
            orders = [rng.permutation(np.arange(p.start, p.stop)) for p in parts]
            copies = [(U.copy(), V.copy()) for _ in orders]
            tbase = (ep - 1) * len(orders[0])
            list(ex.map(lambda a: kernel(rows, cols, vals, a[1][0], a[1][1], lr, sched, tbase, a[0], l2),
                        zip(orders, copies)))
            U = np.mean([c[0] for c in copies], axis=0)
            V = np.mean([c[1] for c in copies], axis=0)
            if loss_kernel is not None:
                loss = _loss(ex, loss_kernel, parts, (rows, cols, vals), (U, V)) / len(vals)
                if abs(prev - loss) < s["tolerance"]:
                    break
                prev = loss
    return {"u": U, "v": V}, loss, ep, len(vals), rank
