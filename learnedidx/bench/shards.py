"""``learnedidx bench indb --shards N``: training over N shards beside one node holding the same rows.

N+1 throwaway clusters on this machine, each with the extension and its own accelerator server:
the coordinator holds ``bench_x`` (every row, one table: the single node) and ``bench_parted``,
range-partitioned by id into N postgres_fdw foreign tables, one per shard cluster, each holding
its share of the same rows (copied from ``bench_x``).  Each task runs on both, interleaved,
``--repeat`` rounds (medians); the report gives wall time, shards ÷ single node, the bytes the
shards and the coordinator exchanged (requests and replies, as the coordinator counts them: the
summary's ``timings -> 'shards'``) per shard and per pass, the passes the shards streamed (the
others read the rows their servers kept), and the largest coefficient
difference relative to the largest coefficient.
"""
from __future__ import annotations

import statistics
import time

import numpy as np

from learnedidx.bench.common import console, print_table

TASKS = {
    "linregr": "learnedidx.linregr_train('{src}', '{out}', 'y', 'features')",
    "logregr": "learnedidx.logregr_train('{src}', '{out}', 'y', 'features', max_iter => 20)",
}


def run(rows: list[int], features: int, shards: int, tasks: list[str], repeat: int, threads: int,
        seed: int) -> None:
    """The benchmark at each table size in ``rows`` (all shards together)."""
    import contextlib

    import psycopg

    from learnedidx.bench.indb import _make_table
    from learnedidx.indb.cluster import TempCluster
    from learnedidx.server.process import spawn

    for t in tasks:
        if t not in TASKS:
            raise ValueError(f"unknown task {t!r} over shards; choose from {', '.join(TASKS)}")
    with contextlib.ExitStack() as stack:
        clusters, servers = [], []
        with console.status(f"starting {shards + 1} clusters and servers"):
            for i in range(shards + 1):
                c = stack.enter_context(TempCluster(settings={"shared_buffers": "256MB"}))
                s = spawn(f"{c.root}/accel.sock", backend="cpu", warm=i == 0)
                stack.callback(s.stop)
                clusters.append(c)
                servers.append(s)
        for n in rows:
            conns = [_database(psycopg, c, s, f"bench_{n}", threads) for c, s in zip(clusters, servers)]
            coord = conns[0]
            t0 = time.perf_counter()
            with console.status(f"creating {n:,} rows on one node and over {shards} shards"):
                _make_table(coord, n, features, seed)
                _shard(coord, conns[1:], clusters[1:], n, f"bench_{n}")
            console.print(f"{n:,} rows × {features} float8 features, {shards} shards (made in "
                          f"{time.perf_counter() - t0:.0f} s)")
            _measure(coord, n, shards, tasks, repeat)
            for c in conns:
                c.close()


def _database(psycopg, cluster, server, dbname: str, threads: int):
    with psycopg.connect(cluster.conninfo, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {dbname}")
    conn = psycopg.connect(cluster.conninfo.replace("dbname=postgres", f"dbname={dbname}"), autocommit=True)
    conn.execute("CREATE EXTENSION learnedidx CASCADE")
    conn.execute(f"ALTER DATABASE {dbname} SET learnedidx.socket = '{server.socket_path}'")
    conn.execute(f"ALTER DATABASE {dbname} SET learnedidx.threads = '{threads}'")
    conn.execute("SELECT pg_catalog.set_config('learnedidx.socket', %s, false)", (server.socket_path,))
    return conn


def _shard(coord, shard_conns, shard_clusters, n: int, dbname: str) -> None:
    """``bench_parted`` on the coordinator: one foreign partition per shard, each shard's
    ``bench_part`` holding its range of ``bench_x``'s rows."""
    k = len(shard_conns)
    cuts = [1 + n * i // k for i in range(k)] + [n + 1]
    coord.execute("CREATE EXTENSION IF NOT EXISTS postgres_fdw")
    coord.execute("CREATE TABLE bench_parted (id int, y float8, features float8[]) PARTITION BY RANGE (id)")
    for i, (conn, cluster) in enumerate(zip(shard_conns, shard_clusters)):
        conn.execute("CREATE TABLE bench_part (id int, y float8, features float8[])")
        with coord.cursor().copy(f"COPY (SELECT * FROM bench_x WHERE id >= {cuts[i]} AND id < {cuts[i + 1]}) "
                                 "TO STDOUT") as out, conn.cursor().copy("COPY bench_part FROM STDIN") as into:
            for block in out:
                into.write(block)
        conn.execute("VACUUM ANALYZE bench_part")
        coord.execute(f"CREATE SERVER shard_{i} FOREIGN DATA WRAPPER postgres_fdw "
                      f"OPTIONS (host '{cluster.socket_dir}', port '5432', dbname '{dbname}')")
        coord.execute(f"CREATE USER MAPPING FOR CURRENT_USER SERVER shard_{i} OPTIONS (user 'postgres')")
        coord.execute(f"CREATE FOREIGN TABLE bench_parted_{i} PARTITION OF bench_parted "
                      f"FOR VALUES FROM ({cuts[i]}) TO ({cuts[i + 1]}) SERVER shard_{i} "
                      "OPTIONS (table_name 'bench_part')")


def _call(conn, task: str, src: str, out: str) -> tuple[float, np.ndarray, dict]:
    t0 = time.perf_counter()
    conn.execute(f"SELECT * FROM {TASKS[task].format(src=src, out=out)}").fetchall()
    seconds = time.perf_counter() - t0
    coef = np.asarray(conn.execute(f"SELECT coef FROM {out}").fetchone()[0], float)
    timings, path = conn.execute(f"SELECT timings, read_path FROM {out}_summary").fetchone()
    conn.execute(f"DROP TABLE {out}, {out}_summary")
    return seconds, coef, {**timings, "path": path}


def _measure(coord, n: int, shards: int, tasks: list[str], repeat: int) -> None:
    coord.execute("SELECT count(*) FROM bench_x").fetchall()
    for t in tasks:  # warm-up: caches, and each server's kernels
        _call(coord, t, "bench_x", "w_one")
        _call(coord, t, "bench_parted", "w_parted")
    one: dict[str, list] = {t: [] for t in tasks}
    parted: dict[str, list] = {t: [] for t in tasks}
    for r in range(repeat):
        with console.status(f"round {r + 1} of {repeat}"):
            for t in tasks:
                one[t].append(_call(coord, t, "bench_x", "m_one"))
                parted[t].append(_call(coord, t, "bench_parted", "m_parted"))
    table = []
    for t in tasks:
        s1 = statistics.median(x[0] for x in one[t])
        sp = statistics.median(x[0] for x in parted[t])
        tm = parted[t][-1][2]
        sh = tm.get("shards") or {}
        sent, received, calls = sh.get("bytes_sent", 0), sh.get("bytes_received", 0), sh.get("calls", 0)
        a, b = parted[t][-1][1], one[t][-1][1]
        agree = float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)) if a.shape == b.shape else float("nan")
        table.append([t, s1, sp, sp / s1, tm["path"], calls, sh.get("passes_streamed", "—"), sent + received,
                      (sent + received) / max(1, calls * shards), f"{agree:.1e}"])
    print_table(f"{n:,} rows: one node vs {shards} shards (medians of {repeat} interleaved rounds)",
                ["task", "one node s", "shards s", "shards ÷ one node", "path", "passes", "passes streamed",
                 "bytes exchanged", "bytes per shard-pass", "coef difference"], table)
