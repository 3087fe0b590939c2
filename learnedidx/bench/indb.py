"""``learnedidx bench indb``: in-database training, pages vs query path vs what a user would otherwise do.

One run, one throwaway cluster, the same tables for every contender:

* ``pages`` / ``query``: the SQL training function end to end (client wall time), with
  ``learnedidx.reader`` forcing the read path (the backend streaming heap pages the Strider
  decodes on the server, or the rows of a query);
* ``export+sklearn``: ``SELECT`` through psycopg into numpy, then scikit-learn;
* ``plpython-rows``: a row-at-a-time PL/Python SGD epoch inside the backend.

Every contender does one pass (epoch) over the data, so times compare like with like.
The read table compares the page path's parts (the backend's scan and transfer, the
Strider's decoding, which overlap) with PostgreSQL's own ``SELECT count(*)`` scan of the
same table.
"""
from __future__ import annotations

import time

import numpy as np
import typer

from learnedidx.bench.common import console, parse_list, print_table
from learnedidx.indb.runtime.builtins import ALGORITHMS

# Row-at-a-time SGD in PL/Python: the baseline of a user writing a UDF by hand.
PLPY_SGD = """
CREATE OR REPLACE FUNCTION pg_temp.rowwise_sgd(src text, loss text, lr float8) RETURNS float8[]
LANGUAGE plpython3u AS $py$
import math
w = None
for r in plpy.cursor("SELECT y, features FROM " + plpy.quote_ident(src)):
    x = [1.0] + r["features"]
    if w is None:
        w = [0.0] * len(x)
    z = sum(a * b for a, b in zip(w, x))
    if loss == "log":
        g = 1.0 / (1.0 + math.exp(-z)) - r["y"]
    elif loss == "hinge":
        yy = 2.0 * r["y"] - 1.0
        g = -yy if yy * z < 1.0 else 0.0
    else:
        g = z - r["y"]
    w = [a - lr * g * b for a, b in zip(w, x)]
return w
$py$;
"""


def _make_tables(conn, rows: int, features: int, lmf_dims: tuple[int, int], seed: int) -> None:
    """A features table ``bench_x(id, y, features float8[])`` and an LMF table ``bench_r(row, col, value)``."""
    conn.execute("SELECT setseed(%s)", (seed / 2**31,))
    conn.execute("CREATE TABLE bench_x (id int, y float8, features float8[])")
    # Labels depend on the features so that every algorithm learns something.
    conn.execute(
        "INSERT INTO bench_x SELECT i, (f[1] - f[2] + 0.5 * random() > 0.25)::int, f FROM "
        "(SELECT i, ARRAY(SELECT random() FROM generate_series(1, %s) WHERE i > 0) f "
        " FROM generate_series(1, %s) i) s", (features, rows))
    nr, nc = lmf_dims
    conn.execute("CREATE TABLE bench_r (row int, col int, value float8)")
    conn.execute("INSERT INTO bench_r SELECT (random() * (%s - 1))::int, (random() * (%s - 1))::int, "
                 "random() * 5 FROM generate_series(1, %s)", (nr, nc, rows))
    conn.execute("VACUUM ANALYZE bench_x")
    conn.execute("VACUUM ANALYZE bench_r")
    conn.execute("CHECKPOINT")


def _sql_train(conn, algorithm: str, reader: str, name: str) -> float:
    conn.execute(f"SET learnedidx.reader = '{reader}'")
    calls = {
        "linregr": "SELECT * FROM learnedidx.linregr_train('bench_x', %s, 'y', 'features')",
        "logregr": "SELECT * FROM learnedidx.logregr_train('bench_x', %s, 'y', 'features', max_iter => 1)",
        "svm": "SELECT * FROM learnedidx.svm_train('bench_x', %s, 'y', 'features', max_iter => 1)",
        "lmf": "SELECT * FROM learnedidx.lmf_train('bench_r', %s, 'row', 'col', 'value', num_iterations => 1)",
    }
    t0 = time.perf_counter()
    conn.execute(calls[algorithm], (name,)).fetchall()
    return time.perf_counter() - t0


def _export_sklearn(conn, algorithm: str, seed: int) -> tuple[float, float]:
    """(export seconds, fit seconds) for what a user would do outside the database."""
    from scipy.sparse import coo_matrix
    from sklearn.decomposition import TruncatedSVD
    from sklearn.linear_model import LinearRegression, SGDClassifier

    t0 = time.perf_counter()
    if algorithm == "lmf":
        rows = conn.execute("SELECT row, col, value FROM bench_r").fetchall()
        a = np.array(rows, dtype=np.float64)
    else:
        rows = conn.execute("SELECT y, features FROM bench_x").fetchall()
        y = np.array([r[0] for r in rows])
        X = np.array([r[1] for r in rows])
    t1 = time.perf_counter()
    if algorithm == "linregr":
        LinearRegression().fit(X, y)
    elif algorithm == "logregr":
        SGDClassifier(loss="log_loss", max_iter=1, tol=None, random_state=seed).fit(X, y)
    elif algorithm == "svm":
        SGDClassifier(loss="hinge", max_iter=1, tol=None, random_state=seed).fit(X, y)
    else:
        m = coo_matrix((a[:, 2], (a[:, 0].astype(int), a[:, 1].astype(int)))).tocsr()
        TruncatedSVD(n_components=10, n_iter=1, random_state=seed).fit(m)
    return t1 - t0, time.perf_counter() - t1


def _plpython(conn, algorithm: str) -> float | None:
    loss = {"linregr": "squared", "logregr": "log", "svm": "hinge"}.get(algorithm)
    if loss is None:
        return None
    t0 = time.perf_counter()
    conn.execute("SELECT pg_temp.rowwise_sgd('bench_x', %s, 0.01)", (loss,)).fetchone()
    return time.perf_counter() - t0


def register(app: typer.Typer) -> None:
    @app.command("indb")
    def indb(
        rows: str = typer.Option("1000000", help="table sizes, comma-separated (e.g. 1000000,10000000)"),
        features: int = typer.Option(10, help="features per row (float8[] column)"),
        algorithms: str = typer.Option(",".join(ALGORITHMS)),
        threads: int = typer.Option(2, help="engine threads and Strider connections"),
        plpython: bool = typer.Option(True, help="also time the row-at-a-time PL/Python SGD baseline"),
        quick: bool = typer.Option(False, help="50k rows, for a smoke run"),
        seed: int = typer.Option(0),
    ) -> None:
        """End-to-end training time of the four algorithms, and Strider decode throughput."""
        import warnings

        import psycopg

        from learnedidx.indb.cluster import TempCluster
        from learnedidx.server.process import spawn

        warnings.filterwarnings("ignore", module="sklearn")  # one-epoch fits warn about convergence
        sizes = [50_000] if quick else parse_list(rows)
        algs = [a for a in algorithms.split(",") if a]
        for a in algs:
            if a not in ALGORITHMS:
                raise typer.BadParameter(f"unknown algorithm {a!r}; choose from {', '.join(ALGORITHMS)}")
        with TempCluster() as cluster:
            server = spawn(f"{cluster.root}/accel.sock", backend="cpu")
            try:
                for n in sizes:
                    _run_size(cluster, server, n, features, algs, threads, plpython, seed, psycopg)
            finally:
                server.stop()


def _run_size(cluster, server, n, features, algs, threads, plpython, seed, psycopg) -> None:
    dbname = f"bench_{n}"
    with psycopg.connect(cluster.conninfo, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {dbname}")
    conninfo = cluster.conninfo.replace("dbname=postgres", f"dbname={dbname}")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        try:
            conn.execute("CREATE EXTENSION learnedidx CASCADE")
        except psycopg.Error as exc:
            raise SystemExit(f"cannot create the extension ({exc}); run `learnedidx pg install` as root first")
        conn.execute("SELECT set_config('learnedidx.socket', %s, false)", (server.socket_path,))
        conn.execute(f"SET learnedidx.threads = '{threads}'")
        conn.execute(PLPY_SGD)
        t0 = time.perf_counter()
        with console.status(f"creating {n:,}-row tables"):
            lmf_dims = (6040, 3952)
            _make_tables(conn, n, features, lmf_dims, seed)
        size = conn.execute("SELECT pg_relation_size('bench_x')").fetchone()[0]
        console.print(f"{n:,} rows × {features} features: bench_x {size / 2**20:,.0f} MiB, "
                      f"LMF {lmf_dims[0]}×{lmf_dims[1]} with {n:,} ratings (made in {time.perf_counter() - t0:.0f} s)")
        # Warm up on small tables of the same shape (schema "warm", first on the search_path):
        # Numba compilation in the server is not counted.
        conn.execute("CREATE SCHEMA warm")
        conn.execute("SET search_path = warm, public")
        _make_tables(conn, 2000, features, lmf_dims, seed)
        for a in algs:
            for reader in ("pages", "query"):
                _sql_train(conn, a, reader, f"warm.w_{a}_{reader}")
        conn.execute("SET search_path = public")
        result = []
        for a in algs:
            with console.status(f"{a}: pages / query / export+sklearn / plpython"):
                strider_s = _sql_train(conn, a, "pages", f"m_{a}_pages")
                copy_s = _sql_train(conn, a, "query", f"m_{a}_query")
                exp_s, fit_s = _export_sklearn(conn, a, seed)
                plpy_s = _plpython(conn, a) if plpython else None
            peer = exp_s + fit_s
            result.append([a, strider_s, copy_s, exp_s, fit_s, peer, plpy_s if plpy_s is not None else "—",
                           peer / strider_s, copy_s / strider_s,
                           (plpy_s / strider_s) if plpy_s is not None else "—"])
        print_table(f"one training epoch on {n:,} rows (seconds, client wall time; ratios: × slower than pages)",
                    ["algorithm", "pages", "query", "export", "sklearn fit", "export+sklearn", "plpython rows",
                     "export+sklearn/pages", "query/pages", "plpython/pages"], result)
        if "linregr" in algs:
            _read_table(conn, n)


def _read_table(conn, n: int) -> None:
    """Where the page path's time goes (the server's timings of the linregr call above)
    beside PostgreSQL's own scan of the same table."""
    import json

    from learnedidx.bench.common import best_of

    scan = best_of(lambda: conn.execute("SELECT count(*) FROM bench_x").fetchone(), 3)
    mb = conn.execute("SELECT pg_relation_size('bench_x')").fetchone()[0] / 1e6
    t = conn.execute("SELECT timings FROM m_linregr_pages_summary").fetchone()[0]
    t = json.loads(t) if isinstance(t, str) else t
    rows = [["SELECT count(*) (PostgreSQL seq scan)", scan, mb / scan, n / scan, 1.0]]
    for label, key in (("pages streamed and decoded (one pass)", "read"),
                       ("Strider decode (Numba, overlapping the stream)", "decode"), ("training", "train")):
        rows.append([label, t[key], mb / t[key] if t[key] else 0.0, n / t[key] if t[key] else 0.0, t[key] / scan])
    print_table(f"the page path on bench_x ({mb:,.0f} MB): server-side timings of linregr",
                ["step", "seconds", "MB/s", "rows/s", "× seq scan time"], rows)
