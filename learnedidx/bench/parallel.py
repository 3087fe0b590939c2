"""``learnedidx bench indb --parallel-workers K,...``: the page path read by K parallel workers.

Per table size, one throwaway cluster and server; per task and K, the training call with
``learnedidx.parallel_workers = K`` (and ``max_parallel_workers_per_gather = K``, which caps
it; K = 0 is the serial path, the caller's backend reading), interleaved over ``--repeat``
rounds, beside ``SELECT count(*)`` with K workers.  The report gives each cell's median wall
time and, from the server's timings (what the producers' ``end`` frames report), the page
producers' time reading pages summed over the producers and the busiest one's, their CPU time,
the workers PostgreSQL launched, and how far the coefficients are from the serial path's.
Only tasks whose result does not depend on the rows' order read in parallel: linregr and
logregr (IRLS).
"""
from __future__ import annotations

import statistics
import time

from learnedidx.bench import indb
from learnedidx.bench.common import console, print_table

#: the tasks that read in parallel: those whose results are coefficients independent of the
#: rows' order (linregr, logregr by IRLS), the svm tasks reading serially whatever K
TASKS = tuple(t for t, task in indb.TASKS.items() if task.compare)


def run(sizes: list[int], features: int, workers: list[int], tasks: list[str], repeat: int, threads: int,
        seed: int) -> None:
    import psycopg

    from learnedidx.indb.cluster import TempCluster
    from learnedidx.server.process import spawn

    most = max(workers)
    settings = {"max_worker_processes": str(most + 8), "max_parallel_workers": str(most)}
    with TempCluster(settings=settings) as cluster:
        server = spawn(f"{cluster.root}/accel.sock", backend="cpu", warm=True)
        try:
            for n in sizes:
                connect = indb._connect(psycopg, cluster, server, n, features, threads, None)
                with connect() as conn:
                    _run_size(conn, server, n, features, workers, tasks, repeat, seed)
        finally:
            server.stop()


def _set_workers(conn, k: int) -> None:
    conn.execute(f"SET max_parallel_workers_per_gather = {k}")
    conn.execute(f"SET learnedidx.parallel_workers = {k}")


def _run_size(conn, server, n: int, features: int, workers: list[int], tasks: list[str], repeat: int,
              seed: int) -> None:
    t0 = time.perf_counter()
    with console.status(f"creating the {n:,}-row table"):
        indb._make_table(conn, n, features, seed)
    mb = conn.execute("SELECT pg_relation_size('bench_x')").fetchone()[0] / 2**20
    console.print(f"{n:,} rows × {features} float8 features: bench_x {mb:,.0f} MiB "
                  f"(made in {time.perf_counter() - t0:.0f} s)")
    c = indb.Contender(conn, server.pid)
    for k in workers:  # warm-up: the caches, the workers' code
        _set_workers(conn, k)
        c.scan("SELECT count(*) FROM bench_x")
        c.run(indb.TASKS["linregr"].ours, True)
    runs: dict[tuple[str, int], list] = {}
    scans: dict[int, list[float]] = {}
    for r in range(repeat):
        with console.status(f"round {r + 1} of {repeat}"):
            for k in workers:
                _set_workers(conn, k)
                scans.setdefault(k, []).append(c.scan("SELECT count(*) FROM bench_x"))
                for t in tasks:
                    runs.setdefault((t, k), []).append(c.run(indb.TASKS[t].ours, True))
    conn.execute("RESET max_parallel_workers_per_gather")
    conn.execute("RESET learnedidx.parallel_workers")
    rows = []
    for t in tasks:
        base = runs.get((t, 0), runs[(t, workers[0])])[-1].coef
        for k in workers:
            rs = runs[(t, k)]
            tm = [r.timings or {} for r in rs]

            def med(key: str) -> float:
                return statistics.median(float(x.get(key, float("nan"))) for x in tm)

            rows.append([indb.LABELS[t], k, str(max(int(x.get("workers", 0)) for x in tm)),
                         statistics.median(r.seconds for r in rs), med("produce"), med("produce_max"),
                         med("produce_cpu"), med("first_pass"), med("decode"),
                         f"{indb._agreement(rs[-1].coef, base):.1e}", statistics.median(scans[k])])
    print_table(f"{n:,} rows ({mb:,.0f} MiB): K parallel workers reading the pages (K = 0: the backend); "
                f"medians of {repeat} interleaved rounds",
                ["task", "K", "workers launched", "end to end s", "producers s (summed)", "busiest producer s",
                 "producers' CPU s", "first pass s", "decoding s", "coef vs K = 0", "count(*) with K s"], rows)
