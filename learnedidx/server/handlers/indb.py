"""Accelerator-server handlers for in-database training: ``indb.train``, ``indb.register``.

They read the caller's data (:mod:`learnedidx.indb.read`) and train on it
(:mod:`learnedidx.indb.runtime`); the extension's PL/Python functions send the requests.
"""
from __future__ import annotations

import time

import numpy as np
import psycopg
from psycopg.conninfo import make_conninfo

from learnedidx.errors import InDBError
from learnedidx.indb import runtime
from learnedidx.indb.read.access import check_readable, open_snapshot_session
from learnedidx.indb.read.training_data import read_training_data
from learnedidx.server.registry import handler


def _conninfo(args: dict, server_conninfo: str | None) -> str:
    host, port, db = args.get("host"), args.get("port"), args.get("dbname")
    if not (isinstance(host, str) and host.startswith("/")):
        raise InDBError("the calling cluster must be reached through its Unix socket directory")
    return make_conninfo(server_conninfo or "", host=host, port=str(int(port)), dbname=str(db),
                         application_name="learnedidx-accelerator")


class CallerWatch:
    """``stop`` check for the engine: true once the calling backend has left the transaction
    that asked (cancelled, timed out, disconnected).  Asks ``pg_stat_activity`` at most
    twice a second; when it cannot tell (no rights, no connection) training goes on."""

    def __init__(self, conninfo: str, pid: int, xact_start: str) -> None:
        self.conninfo, self.pid, self.since = conninfo, pid, xact_start
        self.conn: psycopg.Connection | None = None
        self.next = 0.0

    def __call__(self) -> bool:
        now = time.monotonic()
        if now < self.next:
            return False
        self.next = now + 0.5
        try:
            if self.conn is None:
                self.conn = psycopg.connect(self.conninfo, autocommit=True)
            row = self.conn.execute(
                "SELECT state IS NULL OR (state = 'active' AND xact_start = %s::timestamptz) "
                "FROM pg_stat_activity WHERE pid = %s", (self.since, self.pid)).fetchone()
        except psycopg.Error:
            return False
        return row is None or not row[0]

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


@handler("indb.train")
def indb_train(args, arrays, ctx):
    """Read the caller's data under its snapshot and role, train, return the model as JSON."""
    algorithm = args["algorithm"]
    source, dep, indep = args["source"], args.get("dep"), list(args["indep"])
    params = dict(args.get("params") or {})
    dsl_source = params.pop("dsl_source", None)
    if algorithm in runtime.ALGORITHMS:
        runtime.check_params(algorithm, params)  # before reading any data
        trainee = algorithm
    else:
        # The caller's database holds the source: compile that one, not whatever another
        # database registered under the same name.
        trainee = (runtime.register_algorithm(algorithm, dsl_source) if dsl_source
                   else runtime.get_algorithm(algorithm))
    t0 = time.perf_counter()
    conninfo = _conninfo(args, ctx.server.config.pg_conninfo)
    read = {"path": str(params.pop("reader", "auto")), "page_conninfo": conninfo,
            "connections": int(params.get("threads", 2))}
    conn = open_snapshot_session(conninfo, snapshot=args.get("snapshot"), login=args.get("login") or args.get("role"),
                                 role=args.get("role"), search_path=args.get("search_path"))
    try:
        if algorithm == "lmf":
            rel = check_readable(conn, source, indep + [dep])
            td = read_training_data(conn, rel, dep, indep, **read)
            data = {"row": td.X[:, 0].astype(np.int64), "col": td.X[:, 1].astype(np.int64), "value": td.y}
        else:
            rel = check_readable(conn, source, ([dep] if dep else []) + indep)
            td = read_training_data(conn, rel, dep, indep, **read)
            data = {"X": td.X, "y": td.y}
    finally:
        conn.rollback()
        conn.close()
    watch = CallerWatch(conninfo, int(args["caller_pid"]), str(args["caller_xact_start"])) \
        if args.get("caller_pid") else None
    try:
        out = runtime.train(trainee, data, params, threads=int(params.get("threads", 2)),
                           seed=int(params.get("seed", 0)), stop=watch)
    finally:
        if watch is not None:
            watch.close()
    return {
        "model": {k: np.asarray(v).tolist() for k, v in out.model.items()},
        "loss": out.loss, "num_rows_processed": td.rows_total - td.rows_skipped, "num_rows_skipped": td.rows_skipped,
        "num_iterations": out.iterations, "train_seconds": time.perf_counter() - t0,
        "accel_seconds": out.modelled_seconds, "path": td.path, "read_seconds": td.seconds,
    }, {}


@handler("indb.register")
def indb_register(args, arrays, ctx):
    """Compile and validate a DSL algorithm (also done lazily at train time)."""
    alg = runtime.register_algorithm(args["name"], args["source"])
    return {"name": alg.name, "ops_per_tuple": alg.ops_per_tuple}, {}
