"""``learnedidx bench indb``: in-database training end to end, beside MADlib and PostgreSQL's scan.

One run, one throwaway cluster, the same tables for every contender:

* ``learnedidx``: the SQL training function end to end (client wall time until its row is
  returned), the backend streaming heap pages that the server decodes;
* ``MADlib`` (``--madlib PREFIX``: an installation of Apache MADlib 2.1, installed into the
  benchmark's databases with its ``madpack``): ``linregr_train``, ``logregr_train`` (IRLS) and
  ``svm_classification`` on the same table;
* ``SELECT count(*)``: PostgreSQL's own serial scan of the table, the floor of any pass.

Tasks run interleaved, ``--repeat`` rounds; each cell is the median of its rounds.  Peak memory
(VmHWM) of the accelerator server and of the calling backend is reset before each task and
read after it.  ``--also`` adds the one-epoch comparisons of earlier versions: the query path,
exporting the table into scikit-learn, and a row-at-a-time PL/Python epoch.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import typer

from learnedidx.bench.common import console, parse_list, print_table


@dataclass(frozen=True)
class Task:
    """One training task: learnedidx's call and MADlib's (``{out}`` is the output table)."""

    ours: str
    madlib: str | None
    compare: bool  # both compute the same coefficients (the column of agreement)


_ARRAY = "'ARRAY[1]::float8[] || features'"  # MADlib's intercept: a leading 1 in the features
_SVM = "'linear', NULL, NULL, 'init_stepsize=0.1, lambda=0.0001, max_iter={n}, tolerance=0'"
TASKS = {
    "linregr": Task("learnedidx.linregr_train('bench_x', '{out}', 'y', 'features')",
                    f"madlib.linregr_train('bench_x', '{{out}}', 'y', {_ARRAY})", True),
    "logregr-1": Task("learnedidx.logregr_train('bench_x', '{out}', 'y', 'features', max_iter => 1)",
                      f"madlib.logregr_train('bench_x', '{{out}}', 'y > 0.5', {_ARRAY}, NULL, 1, 'irls', 0.0001)",
                      True),
    "logregr": Task("learnedidx.logregr_train('bench_x', '{out}', 'y', 'features', max_iter => 20)",
                    f"madlib.logregr_train('bench_x', '{{out}}', 'y > 0.5', {_ARRAY}, NULL, 20, 'irls', 0.0001)",
                    True),
    "svm-1": Task("learnedidx.svm_train('bench_x', '{out}', 'y', 'features', max_iter => 1)",
                  "madlib.svm_classification('bench_x', '{out}', 'y', 'features', " + _SVM.format(n=1) + ")", False),
    "svm-10": Task("learnedidx.svm_train('bench_x', '{out}', 'y', 'features', max_iter => 10)",
                   "madlib.svm_classification('bench_x', '{out}', 'y', 'features', " + _SVM.format(n=10) + ")",
                   False),
}
LABELS = {"linregr": "linregr", "logregr-1": "logregr, 1 iteration", "logregr": "logregr to convergence",
          "svm-1": "svm, 1 epoch", "svm-10": "svm, 10 epochs"}

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


def _make_table(conn, rows: int, features: int, seed: int) -> None:
    """``bench_x(id, y, features float8[])``: labels that depend on the features, so that every
    algorithm learns something."""
    conn.execute("SELECT setseed(%s)", (seed / 2**31,))
    conn.execute("CREATE TABLE bench_x (id int, y float8, features float8[])")
    conn.execute(
        "INSERT INTO bench_x SELECT i, (f[1] - f[2] + 0.5 * random() > 0.25)::int, f FROM "
        "(SELECT i, ARRAY(SELECT random() FROM generate_series(1, %s) WHERE i > 0) f "
        " FROM generate_series(1, %s) i) s", (features, rows))
    conn.execute("VACUUM ANALYZE bench_x")
    conn.execute("CHECKPOINT")


def install_madlib(prefix: Path, bindir: Path, socket_dir: str, port: int, dbname: str, conn) -> None:
    """Install MADlib (built at ``prefix``) into ``dbname`` with its madpack, as the cluster's
    superuser; madpack points dynamic_library_path at a directory that does not exist on
    Debian, so it is set back to ``$libdir`` and MADlib's library directory."""
    madpack = prefix / "bin" / "madpack"
    libdir = prefix / "Current" / "ports" / "postgres" / "15" / "lib"
    if not madpack.exists() or not libdir.is_dir():
        raise typer.BadParameter(f"no MADlib installation at {prefix} (bin/madpack, {libdir})")
    # madpack runs on the system's python3 (it needs PyYAML: Debian's python3-yaml), not a venv's
    env = {**os.environ, "PATH": f"{bindir}:/usr/bin:/bin", "PGHOST": socket_dir,
           "PGPORT": str(port), "PGUSER": "postgres", "PGDATABASE": dbname}
    res = subprocess.run([str(madpack), "-p", "postgres", "install"], env=env, capture_output=True, text=True,
                         cwd="/tmp")
    if res.returncode != 0 or "installed successfully" not in res.stdout + res.stderr:
        raise SystemExit(f"madpack install failed:\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
    conn.execute(f"ALTER SYSTEM SET dynamic_library_path = '$libdir:{libdir}'")
    conn.execute("SELECT pg_reload_conf()")


def _private_mb(pid: int) -> float:
    """Private resident memory of ``pid`` (RssAnon: not the shared buffers or libraries it maps)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class PeakMemory:
    """The largest private resident memory of some processes while the body runs, sampled
    every few milliseconds by a thread."""

    def __init__(self, *pids: int) -> None:
        self.pids = pids
        self.peak = [0.0] * len(pids)
        self._stop = threading.Event()

    def _sample(self) -> None:
        while True:
            self.peak = [max(p, _private_mb(pid)) for p, pid in zip(self.peak, self.pids)]
            if self._stop.wait(0.005):
                return

    def __enter__(self) -> "PeakMemory":
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Run:
    seconds: float
    coef: np.ndarray | None
    iterations: int | None
    server_mb: float
    backend_mb: float
    timings: dict | None = None


class Contender:
    """Runs one contender's calls on one connection, measuring time and peak memory."""

    def __init__(self, conn, server_pid: int) -> None:
        self.conn, self.server_pid = conn, server_pid
        self.backend_pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        self.count = 0

    def run(self, call: str, ours: bool) -> Run:
        self.count += 1
        out = f"{'m' if ours else 'mad'}_{self.count}"
        with PeakMemory(self.server_pid, self.backend_pid) as mem:
            t0 = time.perf_counter()
            self.conn.execute(f"SELECT * FROM {call.format(out=out)}").fetchall()
            seconds = time.perf_counter() - t0
        server_mb, backend_mb = mem.peak
        cols = {r[0] for r in self.conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0", (out,))}
        row = self.conn.execute(f"SELECT coef{', num_iterations' if 'num_iterations' in cols else ''} "
                                f"FROM {out}").fetchone()
        timings = None
        if ours:
            t = self.conn.execute(f"SELECT timings FROM {out}_summary").fetchone()[0]
            timings = json.loads(t) if isinstance(t, str) else t
        self.conn.execute(f"DROP TABLE {out}, {out}_summary")
        return Run(seconds, np.asarray(row[0], float), row[1] if len(row) > 1 else None, server_mb, backend_mb,
                   timings)

    def scan(self, sql: str) -> float:
        t0 = time.perf_counter()
        self.conn.execute(sql).fetchall()
        return time.perf_counter() - t0


def register(app: typer.Typer) -> None:
    @app.command("indb")
    def indb(
        rows: str = typer.Option("1000000,10000000", help="table sizes, comma-separated"),
        features: int = typer.Option(10, help="features per row (a float8[] column)"),
        madlib: Path = typer.Option(None, help="prefix of a MADlib 2.1 build (its bin/madpack): run it on the "
                                               "same tables (docs/indb.md says how to build it)"),
        tasks: str = typer.Option(",".join(TASKS), help="tasks, comma-separated"),
        repeat: int = typer.Option(3, help="interleaved rounds; cells are medians"),
        threads: int = typer.Option(2, help="learnedidx.threads: the server's threads per call"),
        parallel_workers: str = typer.Option("", help="instead: K parallel workers reading the pages, per K "
                                                      "(comma-separated; 0 the serial path); tasks linregr, logregr"),
        also: str = typer.Option("", help="one-epoch comparisons of earlier versions: query,sklearn,plpython"),
        quick: bool = typer.Option(False, help="50k rows, one round: a smoke run"),
        seed: int = typer.Option(0),
        shards: int = typer.Option(0, help="instead: N local shard clusters (postgres_fdw partitions) beside one "
                                           "node with the same rows; tasks linregr and logregr"),
    ) -> None:
        """Training time and peak memory beside MADlib and SELECT count(*), at each table size."""
        import psycopg

        from learnedidx.bench import shards as over_shards
        from learnedidx.indb.cluster import TempCluster
        from learnedidx.server.process import spawn

        sizes = [50_000] if quick else parse_list(rows)
        chosen = [t for t in tasks.split(",") if t]
        if shards:
            over_shards.run(sizes, features, shards, [t for t in chosen if t in over_shards.TASKS],
                            1 if quick else repeat, threads, seed)
            return
        for t in chosen:
            if t not in TASKS:
                raise typer.BadParameter(f"unknown task {t!r}; choose from {', '.join(TASKS)}")
        extra = [a for a in also.split(",") if a]
        if parallel_workers:
            from learnedidx.bench import parallel

            parallel.run(sizes, features, parse_list(parallel_workers), [t for t in chosen if t in parallel.TASKS],
                         1 if quick else repeat, threads, seed)
            return
        with TempCluster() as cluster:
            server = spawn(f"{cluster.root}/accel.sock", backend="cpu", warm=True)
            try:
                for n in sizes:
                    _run_size(cluster, server, psycopg, n, features, chosen, madlib, 1 if quick else repeat,
                              threads, extra, seed)
            finally:
                server.stop()


def _connect(psycopg, cluster, server, n: int, features: int, threads: int, madlib: Path | None):
    """A database for size ``n`` with the extension (and MADlib), and a connection to it."""
    dbname = f"bench_{n}"
    with psycopg.connect(cluster.conninfo, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {dbname}")
    conn = psycopg.connect(cluster.conninfo.replace("dbname=postgres", f"dbname={dbname}"), autocommit=True)
    try:
        conn.execute("CREATE EXTENSION learnedidx CASCADE")
    except psycopg.Error as exc:
        raise SystemExit(f"cannot create the extension ({exc}); run `learnedidx pg install` as root first")
    conn.execute(f"ALTER DATABASE {dbname} SET learnedidx.socket = '{server.socket_path}'")
    conn.execute(f"ALTER DATABASE {dbname} SET learnedidx.threads = '{threads}'")
    if madlib is not None:
        with console.status("installing MADlib (madpack)"):
            install_madlib(madlib, cluster.bindir, cluster.socket_dir, 5432, dbname, conn)
    conn.close()
    return lambda: psycopg.connect(cluster.conninfo.replace("dbname=postgres", f"dbname={dbname}"), autocommit=True)


def _agreement(a: np.ndarray, b: np.ndarray) -> float:
    """Largest difference of two coefficient vectors, relative to the largest coefficient."""
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)) if a.shape == b.shape else float("nan")


def _run_size(cluster, server, psycopg, n, features, tasks, madlib, repeat, threads, extra, seed) -> None:
    connect = _connect(psycopg, cluster, server, n, features, threads, madlib)
    # each contender has a backend of its own: the memory one leaves allocated is not the other's
    with connect() as conn, connect() as mconn:
        t0 = time.perf_counter()
        with console.status(f"creating the {n:,}-row table"):
            _make_table(conn, n, features, seed)
        mb = conn.execute("SELECT pg_relation_size('bench_x')").fetchone()[0] / 2**20
        console.print(f"{n:,} rows × {features} float8 features: bench_x {mb:,.0f} MiB "
                      f"(made in {time.perf_counter() - t0:.0f} s)")
        # warm-up: the table in PostgreSQL's and the OS's caches, each contender's code loaded
        # (the server compiled its kernels when it started), the server's row memory mapped
        c, mc = Contender(conn, server.pid), Contender(mconn, server.pid)
        c.scan("SELECT count(*) FROM bench_x")
        c.run(TASKS["linregr"].ours, True)
        c.run(TASKS["svm-1"].ours, True)
        if madlib is not None:
            mc.run(TASKS["linregr"].madlib, False)
        runs: dict[tuple[str, str], list[Run]] = {}
        scans: dict[str, list[float]] = {"count": [], "sum": []}
        for r in range(repeat):
            with console.status(f"round {r + 1} of {repeat}"):
                scans["count"].append(c.scan("SELECT count(*) FROM bench_x"))
                scans["sum"].append(c.scan("SELECT sum(features[1]) FROM bench_x"))
                for t in tasks:
                    runs.setdefault((t, "ours"), []).append(c.run(TASKS[t].ours, True))
                    if madlib is not None and TASKS[t].madlib:
                        runs.setdefault((t, "madlib"), []).append(mc.run(TASKS[t].madlib, False))
        _report(n, mb, tasks, runs, scans, madlib is not None)
        if extra:
            _one_epoch_peers(conn, n, extra, seed)


def _median(runs: list[Run], attr: str = "seconds") -> float:
    return statistics.median(getattr(r, attr) for r in runs)


def _report(n, mb, tasks, runs, scans, with_madlib) -> None:
    count, ssum = statistics.median(scans["count"]), statistics.median(scans["sum"])
    rows = []
    for t in tasks:
        ours = runs[(t, "ours")]
        mad = runs.get((t, "madlib"))
        o = _median(ours)
        row = [LABELS[t], o]
        if with_madlib:
            m = _median(mad) if mad else float("nan")
            agree = _agreement(ours[-1].coef, mad[-1].coef) if mad and TASKS[t].compare else None
            its = [r[-1].iterations if r and r[-1].iterations is not None else "—" for r in (ours, mad)]
            row += [m, m / o, f"{its[0]} / {its[1]}",
                    f"{agree:.1e}" if agree is not None else "—"]
        row += [o / count]
        rows.append(row)
    cols = ["task", "learnedidx s"] + (["MADlib s", "MADlib ÷ learnedidx", "iterations (ours / MADlib)",
                                        "coef difference"] if with_madlib else []) + ["learnedidx ÷ count(*)"]
    print_table(f"{n:,} rows ({mb:,.0f} MiB): medians of {len(scans['count'])} interleaved rounds; "
                f"SELECT count(*) {count:.3f} s, sum(features[1]) {ssum:.3f} s", cols, rows)
    mem = []
    for t in tasks:
        ours, mad = runs[(t, "ours")], runs.get((t, "madlib"))
        mem.append([LABELS[t], max(r.server_mb for r in ours), max(r.backend_mb for r in ours)]
                   + ([max(r.backend_mb for r in mad) if mad else "—"] if with_madlib else []))
    print_table(f"{n:,} rows: peak private resident memory (MiB, RssAnon) during each task",
                ["task", "learnedidx server", "learnedidx backend"] + (["MADlib backend"] if with_madlib else []), mem)
    where = []
    for t in tasks:
        tm = runs[(t, "ours")][-1].timings or {}
        where.append([LABELS[t], _median(runs[(t, "ours")]), tm.get("first_pass", float("nan")),
                      tm.get("decode", float("nan")), tm.get("train", float("nan")), str(tm.get("passes", "—"))])
    print_table(f"{n:,} rows: where learnedidx's time goes (the server's timings of the last round)",
                ["task", "end to end s", "first pass s", "decoding s (threads, summed)", "training s (incl. passes)",
                 "passes streamed"], where)


# ------------------------------------------------------------------ one-epoch peers (--also)
def _export_sklearn(conn, algorithm: str, seed: int) -> tuple[float, float]:
    """(export seconds, fit seconds) for what a user would do outside the database."""
    import warnings

    from sklearn.linear_model import LinearRegression, SGDClassifier

    warnings.filterwarnings("ignore", module="sklearn")  # one-epoch fits warn about convergence
    t0 = time.perf_counter()
    rows = conn.execute("SELECT y, features FROM bench_x").fetchall()
    y = np.array([r[0] for r in rows])
    X = np.array([r[1] for r in rows])
    t1 = time.perf_counter()
    if algorithm == "linregr":
        LinearRegression().fit(X, y)
    else:
        SGDClassifier(loss="log_loss" if algorithm == "logregr" else "hinge", max_iter=1, tol=None,
                      random_state=seed).fit(X, y)
    return t1 - t0, time.perf_counter() - t1


def _one_epoch_peers(conn, n: int, extra: list[str], seed: int) -> None:
    conn.execute(PLPY_SGD)
    calls = {"linregr": "learnedidx.linregr_train('bench_x', '{out}', 'y', 'features')",
             "logregr": "learnedidx.logregr_train('bench_x', '{out}', 'y', 'features', max_iter => 1)",
             "svm": "learnedidx.svm_train('bench_x', '{out}', 'y', 'features', max_iter => 1)"}
    rows = []
    for i, (alg, call) in enumerate(calls.items()):
        def timed(reader: str) -> float:
            conn.execute(f"SET learnedidx.reader = '{reader}'")
            t0 = time.perf_counter()
            conn.execute(f"SELECT * FROM {call.format(out=f'e_{i}_{reader}')}").fetchall()
            conn.execute(f"DROP TABLE e_{i}_{reader}, e_{i}_{reader}_summary")
            return time.perf_counter() - t0

        pages = timed("pages")
        row = [alg, pages]
        row.append(timed("query") / pages if "query" in extra else "—")
        row.append(sum(_export_sklearn(conn, alg, seed)) / pages if "sklearn" in extra else "—")
        if "plpython" in extra:
            loss = {"linregr": "squared", "logregr": "log", "svm": "hinge"}[alg]
            t0 = time.perf_counter()
            conn.execute("SELECT pg_temp.rowwise_sgd('bench_x', %s, 0.01)", (loss,)).fetchone()
            row.append((time.perf_counter() - t0) / pages)
        else:
            row.append("—")
        rows.append(row)
    conn.execute("RESET learnedidx.reader")
    print_table(f"{n:,} rows: one epoch, × slower than the page path",
                ["algorithm", "pages s", "query path", "export + scikit-learn", "PL/Python rows"], rows)

