"""Kernels generated from a compiled DSL algorithm.

One nogil Numba kernel per compiled algorithm and shape: an SGD epoch over a partition, an
accumulation pass over a partition, a factor SGD epoch, or a loss sum; generated on first
use and kept on the :class:`~learnedidx.indb.dsl.compiler.Algorithm`.  The engine
(:mod:`learnedidx.indb.runtime.engine`) runs each on its partitions.  The per-tuple functions
are written into the kernel, each call computed once per tuple (:mod:`.inline`); results of
the form ``s * a`` or ``s * outer(a, b)`` are accumulated in place (see
:func:`learnedidx.indb.dsl.compiler.split_variant`).
"""
from __future__ import annotations

import ast

import numpy as np
from numba import njit

from learnedidx.errors import DSLError
from learnedidx.indb.dsl.compiler import Algorithm, runtime_error
from learnedidx.indb.dsl.functions import FUNCTIONS
from learnedidx.indb.dsl.inline import Inliner
from learnedidx.native import prefetch

#: Schedule codes of :func:`rate` ("step" halves the rate every 10 epochs, between calls).
SCHEDULES = {"constant": 0, "invscaling": 1, "inverse": 2, "step": 0}


@njit(cache=True, nogil=True)
def rate(lr0, schedule, t, l2):
    """The step size at step ``t`` (schedule codes as in :data:`SCHEDULES`)."""
    if schedule == 1:
        return lr0 / np.sqrt(t)
    if schedule == 2:
        return lr0 / (1.0 + lr0 * l2 * t)
    return lr0


def _add(target: str, mode: str, values: list[str]) -> list[str]:
    """Lines adding a per-tuple result (its variables, as :class:`Inliner` computed them) into
    ``target`` (a 1-element array for scalars)."""
    if mode == "scalar":
        return [f"{target}[0] += {values[0]}"]
    if mode == "array":
        return [f"{target} += {values[0]}"]
    s, a = values
    return [f"for _j in range({a}.shape[0]):", f"    {target}[_j] += {s} * {a}[_j]"]


def _indent(lines: list[str], n: int) -> str:
    return "".join(" " * n + line + "\n" for line in lines)


def _call(inl: Inliner, fn: str, mode: str, args: list[str]) -> list[str]:
    return inl.call(f"{fn}__split" if mode in ("scaled", "rank1", "rank1s") else fn, args)


#: Tuples ahead of the current one whose rows an SGD epoch prefetches (it visits them in a
#: random order: without a prefetch, nearly every row is a cache miss).
PREFETCH = 8


def _sgd_source(alg: Algorithm, plan: tuple) -> str:
    (mode,) = plan
    inl = Inliner(alg.source)
    add = _add("g", mode, _call(inl, "gradient", mode, ["w", "x", "label"]))
    return f'''
def _kernel(X, y, w, lr0, schedule, t0, order, batch, l2):
    d = X.shape[1]
    g = np.zeros(d)
    nb = 0
    t = t0
    n = order.shape[0]
    for k in range(n):
        if k + {PREFETCH} < n:
            ahead = order[k + {PREFETCH}]
            _prefetch(X, ahead * d)
            _prefetch(X, ahead * d + d - 1)
            _prefetch(y, ahead)
        i = order[k]
        x = X[i]
        label = y[i]
{_indent(inl.lines + add, 8)}        nb += 1
        if nb == batch or k == n - 1:
            t += 1
            lr = _rate(lr0, schedule, t, l2)
            for a in range(d):
                w[a] -= lr * (g[a] / nb + l2 * w[a] * (a > 0))
                g[a] = 0.0
            nb = 0
    return w
'''


#: Rows whose rank-1 terms are gathered before they are added to their accumulator at once.
BLOCK = 64


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def add_block(SA, SB, A, rows, symmetric):
    """``A += SA[:, :rows] @ SB[:, :rows].T`` (only its upper triangle computed when symmetric):
    ``rows`` rank-1 terms at once, so that A stays in registers and cache while they add."""
    for j in range(A.shape[0]):
        for k in range(j if symmetric else 0, A.shape[1]):
            s = 0.0
            for q in range(rows):
                s += SA[j, q] * SB[k, q]
            A[j, k] += s
            if symmetric and k != j:
                A[k, j] += s


def _accumulate_source(alg: Algorithm, plan: tuple, loss: bool) -> str:
    """An accumulation pass: per tuple, ``scalar``/``array``/``scaled`` results are added at once,
    ``rank1``/``rank1s`` (symmetric) terms gathered for BLOCK tuples, then added together."""
    inl = Inliner(alg.source)
    adds, setup, flush = [], [], []
    for name, mode in zip(alg.accumulators, plan):
        target = f"A_{name}"
        values = _call(inl, f"acc_{name}", mode, ["w", "x", "label"])
        if mode not in ("rank1", "rank1s"):
            adds += _add(target, mode, values)
            continue
        s, a, b = values
        setup += [f"SA_{name} = np.empty(({target}.shape[0], {BLOCK}))",
                  f"SB_{name} = np.empty(({target}.shape[1], {BLOCK}))"]
        adds += [f"if {a}.shape[0] != {target}.shape[0] or {b}.shape[0] != {target}.shape[1]:",
                 f"    raise ValueError('acc_{name} changed shape between tuples')",
                 f"for _j in range({a}.shape[0]):", f"    SA_{name}[_j, _r] = {s} * {a}[_j]",
                 f"for _j in range({b}.shape[0]):", f"    SB_{name}[_j, _r] = {b}[_j]"]
        flush.append(f"_add_block(SA_{name}, SB_{name}, {target}, _r, {mode == 'rank1s'})")
    if loss:
        adds.append(f"L[0] += {inl.call('loss', ['w', 'x', 'label'])[0]}")
    if flush:
        adds += ["_r += 1", f"if _r == {BLOCK}:"] + ["    " + f for f in flush] + ["    _r = 0"]
    return f'''
def _kernel(X, y, w, lo, hi, {", ".join(f"A_{n}" for n in alg.accumulators)}, L):
    _r = 0
{_indent(setup, 4)}    for i in range(lo, hi):
        x = X[i]
        label = y[i]
{_indent(inl.lines + adds, 8)}    if _r > 0:
{_indent(flush or ["pass"], 8)}    return 0
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


def _loss_source(alg: Algorithm) -> str:
    inl = Inliner(alg.source)
    (value,) = inl.call("loss", ["w", "x", "label"])
    return f'''
def _kernel(X, y, w):
    s = 0.0
    for i in range(X.shape[0]):
        x = X[i]
        label = y[i]
{_indent(inl.lines, 8)}        s += {value}
    return s
'''


_FACTOR_LOSS_SOURCE = '''
def _kernel(R, C, Y, U, V):
    s = 0.0
    for i in range(Y.shape[0]):
        s += loss(U[R[i]], V[C[i]], Y[i])
    return s
'''


def _kernel(alg: Algorithm, key: tuple, source: str):
    """The compiled kernel for ``key`` (kind and plan), generated from ``source`` once."""
    with alg.lock:
        if key not in alg.kernels:
            ns = {**FUNCTIONS, **alg.namespace, "np": np, "_rate": rate, "_add_block": add_block,
                  "_prefetch": prefetch}
            exec(source, ns)  # generated from the validated algorithm
            # the per-tuple code is inlined: where it indexes, indexing is bounds-checked, as in
            # the compiled functions (x[100000] must raise, not read the server's memory)
            alg.kernels[key] = njit(nogil=True, fastmath={"reassoc", "contract"},
                                    boundscheck=_indexes(alg))(ns["_kernel"])
        return alg.kernels[key]


def _indexes(alg: Algorithm) -> bool:
    """Whether the algorithm's per-tuple functions index arrays."""
    tree = ast.parse(alg.source)
    return any(isinstance(node, ast.Subscript) for f in tree.body if isinstance(f, ast.FunctionDef)
               and f.name != "update" for node in ast.walk(f))


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
    except ZeroDivisionError as exc:  # the algorithm's own failure on the first tuple, as on any other
        raise runtime_error(exc, fn) from None
    except Exception as exc:  # noqa: BLE001 - Numba typing errors on the user's code
        raise DSLError(f"{fn} cannot be compiled for this data: {str(exc).splitlines()[0]}") from None


def loss_kernel(alg: Algorithm):
    """``kernel(*data, *model)``: the loss summed over the tuples, or None without a ``loss``."""
    if not alg.has_loss:
        return None
    if alg.form == "factor":
        return _kernel(alg, ("factor-loss",), _FACTOR_LOSS_SOURCE)
    return _kernel(alg, ("loss",), _loss_source(alg))


def sgd_kernel(alg: Algorithm, w, x, y):
    """``kernel(X, y, w, lr0, schedule, t0, order, batch, l2)``: an SGD epoch over the tuples
    ``order`` updating ``w`` in place; specialised on one sample tuple ``(w, x, y)``."""
    mode = _mode(alg, "gradient", w, x, y)
    return _kernel(alg, ("sgd", mode), _sgd_source(alg, (mode,)))


def accumulate_kernel(alg: Algorithm, w, x, y, loss: bool = True) -> tuple:
    """(``kernel(X, y, w, lo, hi, *accumulators, loss)``, modes, accumulator shapes): one
    pass adding every ``acc_*`` of tuples lo..hi-1 (and their loss, with ``loss``) into the
    given arrays."""
    modes = tuple(_mode(alg, f"acc_{a}", w, x, y) for a in alg.accumulators)
    modes = tuple("rank1s" if m == "rank1" and f"acc_{a}" in alg.symmetric else m
                  for a, m in zip(alg.accumulators, modes))
    loss = loss and alg.has_loss
    kernel = _kernel(alg, ("accumulate", modes, loss), _accumulate_source(alg, modes, loss))
    shapes = [np.shape(alg.namespace[f"acc_{a}"](w, x, y)) or (1,) for a in alg.accumulators]
    return kernel, modes, shapes


def factor_kernel(alg: Algorithm, u, v, y):
    """``kernel(R, C, Y, U, V, lr0, schedule, t0, order, l2)``: a factor SGD epoch over the
    tuples ``order`` updating U and V in place; specialised on one sample tuple."""
    modes = tuple(_mode(alg, f"gradient_{side}", u, v, y) for side in "uv")
    return _kernel(alg, ("factor", modes), _factor_source(modes))
