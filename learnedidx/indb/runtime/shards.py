"""Training over shards (docs/indb.md, "Training over shards"): a shard's pass over its own rows,
which returns sufficient statistics, never rows; and the coordinator's steps between passes.

The coordinator (:mod:`learnedidx.indb.udf.shards`) asks every shard for a pass and merges the
replies exactly:

* linregr, one pass: each group's R factor of its rows [X y] (:class:`.lstsq.State`, the bytes of
  the extension's linregr state), merged by the extension's ``linregr_merge_states``;
* logregr, one pass per iteration: each group's gradient, Hessian X'AX and loss (minus the
  log-likelihood) summed at the coordinator's coefficients; their sums are the single node's, and
  :func:`step` steps from them as :mod:`.logregr` does (IRLS or conjugate gradient), on the
  coordinator's server.

The intercept's column is fixed by the request (``intercept``), never dropped on a shard: a
shard whose features happen to start with ones reports it (``ones``), and the coordinator drops
the column when every shard does, as the single node does for all the rows (linregr: the state
without the column comes with the reply; logregr: the first pass again, as on one node).  A shard
without rows (or a group without rows on a shard) replies none, not an error.
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from learnedidx.errors import BadRequestError, NotSupportedError, TrainingDataError
from learnedidx.indb.runtime import lstsq, stats
from learnedidx.indb.runtime.algorithms import builtin
from learnedidx.indb.runtime.data import NO_FEATURES, NOT_FINITE, InMemory
from learnedidx.indb.dsl import Algorithm, settings_for
from learnedidx.indb.dsl.compiler import runtime_error
from learnedidx.indb.dsl.kernels import loss_kernel
from learnedidx.indb.runtime.engine import Accumulation, StopCheck, check_stop, update
from learnedidx.indb.runtime.logregr import _ConjugateGradient, _irls
from learnedidx.indb.runtime.models import _groups
from learnedidx.indb.udf import catalog

def _vector(value, name: str) -> np.ndarray:
    try:
        v = np.asarray(value, np.float64)
    except (TypeError, ValueError):
        raise BadRequestError(f"{name} must be numbers") from None
    return v


class _KeptRows(InMemory):
    """A shard's rows kept from an earlier pass of the same call: the first pass's design matrix
    (its lead columns, and the group column when grouped)."""

    def __init__(self, y: np.ndarray, X: np.ndarray, lead: int, ones: bool) -> None:
        super().__init__(X, y, checked=True)
        self.lead, self.ones, self.need_all = lead, ones, False

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return self.y, self.X


@dataclass
class _Entry:
    y: np.ndarray
    X: np.ndarray
    lead: int
    ones: bool
    size: int
    used: float
    caches: list
    users: int = 0  # passes using the rows now: given back only when none is
    dropped: bool = False


class Kept:
    """Rows shards keep in this server between the passes of one training call (logregr's
    iterations), so that a shard reads its rows once, as one node does.

    A token names them: a random secret the shard's backend makes for one coordinator call in
    one of its transactions and as one role (:func:`learnedidx.indb.udf.shards.shard_state`), so
    that only the backend that read the rows, in the snapshot they were read in, uses them again.
    The rows kept by all calls together stay within ``budget`` bytes (the server's memory limit of
    one call), the least recently used given back first; rows unused for :data:`TTL` seconds, or
    after the call's last pass, are given back; a token not found (given back) streams again."""

    TTL = 600.0

    def __init__(self) -> None:
        self._rows: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def using(self, token: str | None, lead: int) -> Iterator[_KeptRows | None]:
        """The rows kept under ``token`` (None: none), not given back while in use."""
        e = None
        if token:
            with self._lock:
                self._expire()
                e = self._rows.get(token)
                if e is not None and e.lead == lead:
                    self._rows.move_to_end(token)
                    e.used = time.monotonic()
                    e.users += 1
                else:
                    e = None
        try:
            yield None if e is None else _KeptRows(e.y, e.X, e.lead, e.ones)
        finally:
            if e is not None:
                with self._lock:
                    e.users -= 1
                    if e.dropped and not e.users:
                        _release(e.caches)

    def put(self, token: str, src, budget: int) -> None:
        """Keep ``src``'s rows (a stream whose first pass kept them) under ``token``: the
        memory is this cache's from now on, not the stream's."""
        if src.cached is None or src.n <= 0:
            return
        y, X = src.cached
        caches, src._caches = src._caches, []
        size = y.nbytes + X.nbytes
        if size > budget:
            _release(caches)
            return
        with self._lock:
            self._drop(token)
            while self._rows and sum(e.size for e in self._rows.values()) + size > budget:
                self._drop(next(iter(self._rows)))
            self._rows[token] = _Entry(y, X, src.lead, bool(src.ones), size, time.monotonic(), caches)

    def drop(self, token: str) -> None:
        with self._lock:
            self._drop(token)

    def __len__(self) -> int:
        return len(self._rows)

    def _drop(self, token: str) -> None:
        e = self._rows.pop(token, None)
        if e is not None:
            e.dropped = True
            if not e.users:
                _release(e.caches)

    def _expire(self) -> None:
        now = time.monotonic()
        for token in [t for t, e in self._rows.items() if now - e.used > self.TTL]:
            self._drop(token)


def _release(caches: list) -> None:
    for cache in caches:
        cache.release()


#: The rows kept between passes, in this server.
KEPT = Kept()


def shard_pass(algorithm: str | Algorithm, src, request: dict, grouped: bool, threads: int, stop: StopCheck,
               budget: int) -> list[dict]:
    """:func:`passes` over the rows kept under ``request["kept"]`` when this server has them,
    else over the stream ``src`` (keeping its rows for the next pass); ``request["last"]``:
    the call's last pass, after which they are given back (``release``: given back, no pass)."""
    if not isinstance(request, dict):
        raise BadRequestError("shard_pass must be a JSON object")
    token = request.get("kept")
    if token is not None and (not isinstance(token, str) or len(token) < 32):
        raise BadRequestError("kept must be a token of at least 32 characters")
    if request.get("release"):
        if token:
            KEPT.drop(token)
        return []
    with KEPT.using(token, src.lead) as rows:
        out = passes(algorithm, rows or src, request, grouped, threads, stop)
    if token and request.get("last"):
        KEPT.drop(token)
    elif token and rows is None:
        KEPT.put(token, src, budget)
    return out


def passes(algorithm: str | Algorithm, src, request: dict, grouped: bool, threads: int, stop: StopCheck
           ) -> list[dict]:
    """This shard's pass over ``src`` (its lead fixed): one reply per group that has rows,
    ``group`` its number (None without grouping).  ``request["coefs"]``: the coefficients per
    group ({group number as text: coefficients}; none: zeros), groups without are skipped; for a
    DSL algorithm (compiled: accumulate algorithms only), ``binary`` (its labels are 0/1) and
    ``loss_only`` (the loss summed, no accumulators)."""
    dsl = isinstance(algorithm, Algorithm)
    if dsl and algorithm.form != "accumulate":
        raise NotSupportedError(f"{algorithm.name} is not an accumulate algorithm: it does not train over shards")
    if not dsl and algorithm not in catalog.SHARDED:
        raise NotSupportedError(f"{algorithm} does not train over shards")
    coefs = request.get("coefs")
    with ThreadPoolExecutor(threads) as ex:
        if not grouped:
            parts = [(None, src)]
            if src.peek() is None:
                src.each(lambda y, X: None, ex)
        else:
            src.need_all = True
            y, design = src.arrays()
            parts = [(g, InMemory(design[rows, :-1], y[rows], checked=True)) for g, rows in _groups(design[:, -1])]
        out = []
        for group, part in parts:
            if part.n == 0:
                continue
            c = None if coefs is None else coefs.get(str(group))
            if coefs is not None and c is None:
                continue  # a group the coordinator is done with
            t0 = time.perf_counter()
            if dsl:
                with _dsl_errors(algorithm):
                    reply = _accumulate(part, algorithm, c, request, src.lead, ex, stop)
            elif algorithm == "linregr":
                reply = _linregr(part, src.lead, ex, stop)
            else:
                reply = _logregr(part, c, src.lead, ex, stop)
            out.append({"group": group, **reply, "train_seconds": time.perf_counter() - t0})
    if not src.finite:
        raise TrainingDataError(NOT_FINITE)
    if src.n > 0 and src.d - (1 if grouped else 0) <= 0:
        raise TrainingDataError(NO_FEATURES)
    return out


def _start(part, c) -> tuple[np.ndarray, np.ndarray, float]:
    """(coefficients, the first row's features and label) of a pass at ``c`` (None: zeros)."""
    y0, X0 = part.peek()
    w = np.zeros(X0.shape[1]) if c is None else _vector(c, "coefs")
    if w.shape != (X0.shape[1],):
        raise BadRequestError(f"coefficients of {X0.shape[1]} values expected, not {w.shape}")
    return w, X0[0], float(y0[0])


def _accumulate(part, alg: Algorithm, c, request: dict, lead: int, ex: ThreadPoolExecutor, stop: StopCheck
                ) -> dict:
    """A DSL accumulate algorithm's pass at ``c``: its accumulators and loss summed (the
    engine's :class:`.Accumulation`), or only the loss (``loss_only``)."""
    w, x0, y0 = _start(part, c)
    if request.get("loss_only"):
        loss_k = loss_kernel(alg)
        out = {"lsum": float(sum(part.each(lambda y, X: (check_stop(stop), loss_k(X, y, w))[1], ex)))}
    else:
        acc = Accumulation(alg, w, x0, y0, "binary" if request.get("binary") else "any")
        sums, lsum = acc.run(part, w, ex, stop)
        out = {"sums": [np.asarray(v).tolist() for v in sums], "modes": list(acc.modes), "lsum": lsum}
    # (after the pass: a stream knows its rows and their first feature once its first pass ended)
    return {**out, "n": int(part.n), "d": len(w), "ones": _ones(part, lead)}


def _ones(part, lead: int) -> bool:
    """Whether every row's first feature (after the lead column) is 1."""
    if isinstance(part, InMemory):
        return part.d > lead and bool(np.all(part.X[:, lead] == 1.0))
    return bool(part.ones)


def _linregr(part, lead: int, ex: ThreadPoolExecutor, stop: StopCheck) -> dict:
    state = lstsq._pass_state(part, lambda y, X: (X, y), ex, stop)
    out = {"n": int(state.n), "state": state.encoded(), "ones": _ones(part, lead)}
    if out["ones"] and lead:
        out["state_no_lead"] = state.drop_first().encoded()
    return out


def _logregr(part, c, lead: int, ex: ThreadPoolExecutor, stop: StopCheck) -> dict:
    w, x0, y0 = _start(part, c)
    acc = Accumulation(builtin("logregr"), w, x0, y0, "binary")
    (g, H), loss = acc.run(part, w, ex, stop)
    return {"n": int(part.n), "grad": g.tolist(), "hess": H.tolist(), "loss": loss,
            "ones": _ones(part, lead)}


def step(algorithm: str | Algorithm, request: dict, params: dict) -> list[dict]:
    """The coordinator's step of each group from its merged sums: logregr's {"coef" (None:
    zeros), "grad", "hess", "loss", "cg" (the conjugate gradient's last gradient and direction)}
    -> {"coef", "cg"}, with ``final`` MADlib's statistics at "coef" instead; a DSL algorithm's
    (:func:`dsl_step`)."""
    if not isinstance(request, dict) or not isinstance(request.get("groups"), list):
        raise BadRequestError("shard_step must be a JSON object with groups")
    if isinstance(algorithm, Algorithm):
        return dsl_step(algorithm, request, params)
    if algorithm != "logregr":
        raise NotSupportedError(f"{algorithm} has no step over shards")
    out = []
    for grp in request["groups"]:
        g, H = _vector(grp["grad"], "grad"), _vector(grp["hess"], "hess")
        if H.shape != (len(g), len(g)):
            raise BadRequestError("hess must be a square matrix of the gradient's size")
        c = np.zeros(len(g)) if grp.get("coef") is None else _vector(grp["coef"], "coef")
        loss = float(grp["loss"])
        if request.get("final"):
            s = stats.logregr(c, H, -loss)
            out.append({k: np.asarray(v).tolist() for k, v in s.items()})
            continue
        if request.get("optimizer") == "cg":
            cg = _ConjugateGradient()
            if grp.get("cg"):
                cg.grad, cg.dir = _vector(grp["cg"]["grad"], "cg"), _vector(grp["cg"]["dir"], "cg")
            with np.errstate(all="ignore"):
                new = cg(c, g, H, loss)
            out.append({"coef": new.tolist(), "cg": {"grad": cg.grad.tolist(), "dir": cg.dir.tolist()}})
        else:
            with np.errstate(all="ignore"):
                new = _irls(c, g, H, loss)
            out.append({"coef": new.tolist()})
    return out


def dsl_step(alg: Algorithm, request: dict, params: dict) -> list[dict]:
    """A DSL algorithm's ``update`` from the merged sums of a pass, {"coef" (None: zeros),
    "sums", "modes", "n", "d"} -> {"coef", "given" (the loss update gives, or None)}; with
    ``probe``, how it trains: whether over shards (an accumulate algorithm whose labels need no
    mapping of all the rows), its epochs and tolerance, and whether a loss pass follows."""
    s = settings_for(alg.settings, params)
    if request.get("probe"):
        return [{"sharded": alg.form == "accumulate" and s["labels"] != "signed", "epochs": int(s["epochs"]),
                 "tolerance": float(s["tolerance"]), "binary": s["labels"] == "binary",
                 "loss_pass": loss_kernel(alg) is not None and not alg.update_gives_loss}]
    out = []
    for grp in request["groups"]:
        w = np.zeros(int(grp["d"])) if grp.get("coef") is None else _vector(grp["coef"], "coef")
        sums = [_vector(v, "sums") for v in grp["sums"]]
        with np.errstate(all="ignore"), _dsl_errors(alg):
            new, given = update(alg, w, sums, tuple(grp["modes"]), int(grp["n"]), {})
        out.append({"coef": new.tolist(), "given": given})
    return out


@contextlib.contextmanager
def _dsl_errors(alg: Algorithm) -> Iterator[None]:
    """A DSL algorithm's runtime errors raised as one node's engine raises them (its SQLSTATE)."""
    try:
        yield
    except (ZeroDivisionError, OverflowError, IndexError) as exc:  # raised by the algorithm's compiled code
        raise runtime_error(exc, alg.name) from None
