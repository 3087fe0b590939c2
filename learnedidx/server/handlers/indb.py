"""Accelerator-server handlers for in-database training: ``indb.train``, ``indb.register``.

The caller's backend (``extension/offload.c``) sends the request and then streams its data
as the handler asks for passes (:class:`learnedidx.server.stream.CallStream`); the handler
decodes them (:mod:`learnedidx.indb.read`) and trains (:mod:`learnedidx.indb.runtime`).  The
server never connects to PostgreSQL: it knows no database identity, so nothing in a request
can make it act as a role.  Every resource a call can ask for has a limit set by the server's
administrator (:class:`Limits`).
"""
from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict

import numpy as np

from learnedidx import checks
from learnedidx.errors import (BadRequestError, BuiltinNameError, CancelledError, NotSupportedError, ParameterError, TooLargeError,
                               TrainingDataError)
from learnedidx.indb import runtime
from learnedidx.indb.runtime import models, shards, stats, svm_igd
from learnedidx.indb.dsl import Algorithm, compile_algorithm
from learnedidx.indb.udf import catalog
from learnedidx.indb.read import memory, strider
from learnedidx.indb.read.passes import StreamSource
from learnedidx.server.registry import handler, on_start

_COMPILED: OrderedDict[str, Algorithm] = OrderedDict()  # DSL sources by hash, most recent last
_COMPILED_MAX = 256
_LOCK = threading.Lock()


def _dsl(name: str, source: str) -> Algorithm:
    """The compiled DSL algorithm of ``source`` (compiled once per source text)."""
    if not isinstance(source, str):
        raise BadRequestError("dsl_source must be the algorithm's source text")
    key = hashlib.sha256(source.encode()).hexdigest()
    with _LOCK:
        alg = _COMPILED.get(key)
        if alg is not None:
            _COMPILED.move_to_end(key)
            return alg
    alg = compile_algorithm(name, source)
    with _LOCK:
        _COMPILED[key] = alg
        while len(_COMPILED) > _COMPILED_MAX:
            _COMPILED.popitem(last=False)
    return alg


def _threads(params: dict, limit: int) -> int:
    """The engine threads a call gets: what it asks for (default: the limit), at most the limit."""
    asked = params.pop("threads", None)
    return limit if asked is None else min(_integer(asked, "threads", 1), limit)


def _factor_data(X: np.ndarray, y: np.ndarray, rank: int, threads: int, max_bytes: int) -> tuple[dict, dict]:
    """LMF tuples with row and column ids remapped to dense indices, so that the factors'
    memory follows the number of distinct ids; and the ids, for the model."""
    if X.shape[1] != 2:
        raise TrainingDataError("LMF reads a row id and a column id per rating")
    if len(X) and not (np.all(np.isfinite(X)) and np.all(X == np.floor(X))):
        raise TrainingDataError("LMF row and column ids must be integers")
    row_ids, rows = np.unique(X[:, 0].astype(np.int64), return_inverse=True)
    col_ids, cols = np.unique(X[:, 1].astype(np.int64), return_inverse=True)
    need = (len(row_ids) + len(col_ids)) * rank * 8 * (threads + 2)
    if need > max_bytes:
        raise TooLargeError(f"factors of rank {rank} for {len(row_ids)} rows and {len(col_ids)} columns need "
                            f"{need:,} bytes, more than the server's memory limit per call ({max_bytes:,})")
    return {"row": rows, "col": cols, "value": y}, {"row_ids": row_ids, "col_ids": col_ids}


@handler("indb.train")
def indb_train(args, arrays, ctx):
    """Train on the data the caller streams; return the models (one, or one per group: the
    stream's last column numbers the groups) and their statistics as JSON."""
    limits = ctx.server.config.limits
    stream = ctx.stream
    algorithm = args["algorithm"]
    if not isinstance(args.get("params") or {}, dict):
        raise BadRequestError("params must be a JSON object")
    params = dict(args.get("params") or {})
    grouped = params.pop("grouped", False) is True
    # training over shards (runtime.shards): a shard's pass, or the coordinator's step
    shard_pass, shard_step = params.pop("shard_pass", None), params.pop("shard_step", None)
    # MADlib's svm_classification, svm_regression and svm_one_class: MADlib's own training
    igd = svm_igd.check(params.pop("igd")) if algorithm == "svm" and "igd" in params else None
    if igd is not None:
        trainee: str | Algorithm = algorithm
    elif algorithm in runtime.ALGORITHMS:
        if grouped and algorithm not in catalog.GROUPABLE:
            raise NotSupportedError(f"{algorithm} trains one model: grouping is not supported")
        runtime.check_params(algorithm, params)  # before reading any data
        trainee = algorithm
    else:
        trainee = _dsl(algorithm, args.get("dsl_source"))
    if shard_step is not None:  # no data: the coordinator's step from the shards' sums
        return {"groups": shards.step(trainee, shard_step, params)}, {}
    threads = _threads(params, limits.max_threads)
    seed = _integer(params.pop("seed", 0), "seed")
    stream.any_order = _any_order(trainee, igd, grouped, params)
    t0 = time.perf_counter()
    # The rows arrive with the intercept's column of ones reserved (dropped again when the model
    # has none, or when the features already start with ones): no copy of the rows to add it.
    with ctx.server.call_slot(stream), stream.watch() as closed, \
            StreamSource(stream.request_pass, stream.release, lead=0 if algorithm == "lmf" else 1, threads=threads,
                         budget=limits.max_call_bytes, max_features=limits.max_features) as src:
        t_start = time.perf_counter()
        if algorithm == "lmf":
            rank = _integer(params.get("rank", params.get("max_rank", 10)), "max_rank")
            if rank > limits.max_features:
                raise TooLargeError(f"rank {rank} exceeds the server's limit of {limits.max_features}")
            src.need_all = True
            y, X = src.arrays()
            data, extra = _factor_data(X, y, rank, threads, limits.max_call_bytes)
            out = runtime.train(trainee, data, params, threads=threads, seed=seed, stop=closed.is_set)
            groups, shared = [models.result(None, out, len(y), {}, extra)], {"intercept": False, "num_features": 2}
        elif shard_pass is not None:
            if params.get("intercept") is False:
                src.set_lead(0)
            groups, shared = shards.shard_pass(trainee, src, shard_pass, grouped, threads, closed.is_set,
                                               limits.max_call_bytes), {}
        elif igd is not None:
            groups, shared = svm_igd.fit(src, igd, grouped, closed.is_set)
        else:
            groups, shared = models.fit(trainee, src, params, grouped=grouped, threads=threads, seed=seed,
                                        stop=closed.is_set)
    st = src.stats
    return {
        "groups": groups, **shared, "num_rows_skipped": st.rows_skipped,
        "num_rows_processed": st.rows_total - st.rows_skipped, "features_form": st.features_form,
        "train_seconds": time.perf_counter() - t0, "path": st.path, "threads": threads,
        "timings": {"wait": t_start - t0, "first_pass": st.seconds, "decode": st.decode_seconds,
                    "train": sum(g["train_seconds"] for g in groups), "passes": st.passes,
                    "workers": st.workers, "producers": st.producers, "produce": st.produce_seconds, "produce_max": st.produce_max,
                    "produce_cpu": st.produce_cpu},
    }, {}


def _any_order(trainee: str | Algorithm, igd, grouped: bool, params: dict) -> bool:
    """Whether the call's result does not depend on the order the rows arrive in (only on the
    rounding of its sums), so that the caller may read its pages with parallel workers: linregr
    (R factors merged), logregr's Newton and conjugate-gradient passes and DSL algorithms of
    accumulators (sums).  MADlib's svm, SGD, LMF, logregr's igd and DSL algorithms of SGD visit
    the rows in the order they come."""
    if igd is not None or grouped:
        return False
    if isinstance(trainee, Algorithm):
        return trainee.form == "accumulate"
    return trainee == "linregr" or (trainee == "logregr" and params.get("optimizer", "irls") in
                                    ("irls", "newton", "cg"))


@handler("indb.ring")
def indb_ring(args, arrays, ctx):
    """The ring of a call in progress, for its backend's parallel workers: sent on this
    connection (an ``M`` frame with the memfd) to whoever names the call's token, which only the
    call's own connection was given.  The call's connection still carries every frame naming a
    slot; this connection carries nothing else."""
    if ctx.peer != "unix" or ctx.stream is None:
        raise NotSupportedError("a ring is passed over the Unix socket only")
    token = args.get("token")
    if not isinstance(token, str) or len(token) != 32:
        raise BadRequestError("token must be the ring's 32 hex digits")
    try:
        raw = bytes.fromhex(token)
    except ValueError:
        raise BadRequestError("token must be the ring's 32 hex digits") from None
    ctx.stream.send_ring(raw)
    return {}, {}


def _integer(value, name: str, lo: int | None = None) -> int:
    """A training parameter that is an integer (JSON may write it 2.0, or as text)."""
    return checks.integer(name, value, lo, error=ParameterError, whole_floats=True, parse=True)


@handler("indb.register")
def indb_register(args, arrays, ctx):
    """Compile and validate a DSL algorithm (training compiles it again from the source the
    caller's database holds, cached by the source's hash)."""
    name = str(args["name"])
    if name in runtime.ALGORITHMS:
        raise BuiltinNameError(f"{name} is a built-in algorithm")
    alg = _dsl(name, args["source"])
    return {"name": alg.name, "ops_per_tuple": alg.ops_per_tuple}, {}


@on_start
def warm_up(server) -> None:
    """Compile the Strider's and the built-in algorithms' kernels once at start, so that no
    call pays for it; keep huge pages for the rows training reads again (memory.py)."""
    memory.small_pages_for_temporaries()
    strider.warm_up()
    rng = np.random.default_rng(0)
    X = np.c_[np.ones(64), rng.normal(size=(64, 2))]
    y = (X[:, 1] > 0).astype(float)
    for name in runtime.ALGORITHMS:
        data = {"row": np.arange(64) % 4, "col": np.arange(64) % 3, "value": y} if name == "lmf" else {"X": X, "y": y}
        try:
            runtime.train(name, data, {"max_iter": 1}, threads=2)
        except CancelledError:
            return
    stats.svm(np.zeros(3), X, 2 * y - 1, 0.1, np.ones(3, bool))
    svm_igd.warm_up()
