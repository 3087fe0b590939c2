"""One caller cannot take the server from everyone: limits, cancellation, restarts and stop.

A server of its own with small limits (``--max-threads 2 --max-features 64 --max-call-memory
8 MB``) serves these tests; CPU use is read from /proc (user + system time of every thread).
"""
from __future__ import annotations

import subprocess
import sys
import threading
import time

import numpy as np
import psycopg
import pytest

from learnedidx.indb import runtime
from learnedidx.indb.cluster import TempCluster
from learnedidx.server.process import spawn
from tests.indb.conftest import connect, cpu_seconds, load, thread_count
from tests.pgfixtures import PG_BINDIR

pytestmark = pytest.mark.postgres

LIMITS = ["--max-threads", "2", "--max-features", "64", "--max-call-memory", str(8 << 20)]
LONG_SVM = "SELECT * FROM learnedidx.svm_train('big', 'big_svm', 'y', 'features', max_iter => 1000000)"
LONG_MADLIB_SVM = ("SELECT * FROM learnedidx.svm_classification('big', 'big_svm', 'y', 'features', NULL, NULL, NULL, "
                   "'max_iter=100000000, tolerance=0')")


@pytest.fixture(scope="module")
def small_server(tmp_path_factory, postgresql_proc):
    proc = spawn(str(tmp_path_factory.mktemp("lim") / "accel.sock"), extra_args=LIMITS, warm=True)
    yield proc
    proc.stop()


@pytest.fixture
def ldb(db, small_server):
    db.execute("SELECT set_config('learnedidx.socket', %s, false)", (small_server.socket_path,))
    db.execute(f"ALTER DATABASE \"{db.info.dbname}\" SET learnedidx.socket = '{small_server.socket_path}'")
    rng = np.random.default_rng(2)
    X = rng.normal(size=(20000, 10))
    load(db, "big", X, (X[:, 0] > 0).astype(float))
    return db


def idle_within_a_second(pid: int) -> float:
    """CPU seconds ``pid`` uses in the second that starts one second from now."""
    time.sleep(1.0)
    before = cpu_seconds(pid)
    time.sleep(1.0)
    return cpu_seconds(pid) - before


def _in_thread(conn_factory, sql: str, errors: list, setup: tuple = ()) -> threading.Thread:
    def run() -> None:
        with conn_factory() as c:
            try:
                for s in setup:
                    c.execute(s)
                c.execute(sql)
            except psycopg.Error as exc:
                errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    return t


def _wait_active(probe, needle: str) -> int:
    for _ in range(400):
        row = probe.execute("SELECT pid FROM pg_stat_activity WHERE query LIKE %s AND state = 'active' "
                            "AND pid <> pg_backend_pid()", (f"%{needle}%",)).fetchone()
        if row:
            return row[0]
        time.sleep(0.025)
    raise AssertionError(f"no active {needle} call")


@pytest.mark.parametrize("call", [LONG_SVM, LONG_MADLIB_SVM])
def test_statement_timeout_ends_the_call_and_the_servers_work(ldb, small_server, call):
    ldb.execute("SET statement_timeout = '700ms'")
    with pytest.raises(psycopg.errors.QueryCanceled, match="^canceling statement due to statement timeout"):
        ldb.execute(call)
    ldb.execute("SET statement_timeout = 0")
    assert ldb.execute("SELECT to_regclass('big_svm')").fetchone() == (None,)
    assert idle_within_a_second(small_server.pid) < 0.3  # two busy engine threads would burn ~2 s
    assert ldb.execute("SELECT num_rows_processed FROM learnedidx.linregr_train('big', 'after', 'y', 'features')"
                       ).fetchone() == (20000,)


def test_pg_cancel_backend_ends_the_call_while_others_are_served(ldb, small_server):
    errors: list = []
    t = _in_thread(lambda: connect(ldb), LONG_SVM, errors)
    with connect(ldb) as probe:
        pid = _wait_active(probe, "svm_train(")
        time.sleep(0.3)
        X = np.random.default_rng(3).normal(size=(300, 3))
        load(ldb, "small", X, X @ [1.0, 2.0, 3.0] + 4.0)  # meanwhile another caller is served
        coef = ldb.execute("SELECT coef FROM learnedidx.linregr_train('small', 'small_m', 'y', 'features')").fetchone()[0]
        np.testing.assert_allclose(coef, [4.0, 1.0, 2.0, 3.0], atol=1e-8)
        assert probe.execute("SELECT pg_cancel_backend(%s)", (pid,)).fetchone() == (True,)
        t.join(10)
    assert not t.is_alive() and len(errors) == 1 and isinstance(errors[0], psycopg.errors.QueryCanceled)
    assert ldb.execute("SELECT to_regclass('big_svm')").fetchone() == (None,)
    assert idle_within_a_second(small_server.pid) < 0.3


def _client_backends(probe) -> int:
    return probe.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                         "AND datname = current_database()").fetchone()[0]


def test_threads_per_call_are_capped_and_the_server_opens_no_connections(ldb, small_server):
    before = thread_count(small_server.pid)
    with connect(ldb) as probe:
        idle = _client_backends(probe)  # this test's own connections
    errors: list = []
    t = _in_thread(lambda: connect(ldb), LONG_SVM, errors,
                   setup=("SET learnedidx.threads = 3000", "SET statement_timeout = '1500ms'"))
    peak, backends = 0, 0
    with connect(ldb) as probe:
        _wait_active(probe, "svm_train(")
        while t.is_alive():
            peak = max(peak, thread_count(small_server.pid))
            backends = max(backends, _client_backends(probe))
            time.sleep(0.05)
    assert len(errors) == 1 and isinstance(errors[0], psycopg.errors.QueryCanceled)
    # the connection's thread, its watcher, and the 2 decoding threads of the first pass, or
    # the 2 engine threads and the thread shuffling the next epoch's order, at most
    assert peak <= before + 2 + 1 + 2 + 1
    assert backends == idle + 1  # the caller's: nothing connects back for the server


def test_too_many_features_are_refused(ldb):
    ldb.execute("CREATE TABLE wide (y float8, f float8[])")
    # 100 features fit a page uncompressed (the page path reads them); 10000 are TOASTed
    ldb.execute("INSERT INTO wide SELECT g, array_fill(g::float8, ARRAY[100]) FROM generate_series(1, 20) g")
    ldb.execute("CREATE TABLE wider (y float8, f float8[])")
    ldb.execute("INSERT INTO wider SELECT g, array_fill(g::float8, ARRAY[10000]) FROM generate_series(1, 20) g")
    for reader, table, n in (("pages", "wide", 100), ("query", "wide", 100), ("auto", "wider", 10000)):
        ldb.execute(f"SET learnedidx.reader = '{reader}'")
        with pytest.raises(psycopg.errors.ProgramLimitExceeded, match=f"{n} features exceed the server's limit of 64"):
            ldb.execute(f"SELECT * FROM learnedidx.linregr_train('{table}', 'wide_m', 'y', 'f')")
    ldb.execute("RESET learnedidx.reader")
    # a row larger than a slot of the stream's ring: refused by the backend
    ldb.execute("CREATE TABLE huge AS SELECT 1::float8 AS y, array_fill(1.5::float8, ARRAY[9000000]) AS f")
    with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="exceeds the stream's slots"):
        ldb.execute("SELECT * FROM learnedidx.linregr_train('huge', 'huge_m', 'y', 'f')")
    assert ldb.execute("SELECT count(*) FROM learnedidx.models").fetchone() == (0,)


@pytest.mark.parametrize("reader", ["pages", "query"])
def test_data_beyond_the_memory_limit_stream_every_pass(ldb, reader):
    """50,000 rows of 30 features (12.8 MB as float8) against the server's 8 MB per call: the
    algorithms that sum over the rows read the caller's stream again for every pass instead of
    holding the rows, and train the model they train in memory; SGD, which visits the rows in
    a random order, needs them all in memory and is refused."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(50000, 30))
    y = X @ rng.normal(size=30) + rng.normal(size=50000)
    load(ldb, "tall", X, y)
    ldb.execute(f"SET learnedidx.reader = '{reader}'")
    coef = ldb.execute("SELECT coef FROM learnedidx.linregr_train('tall', 'tall_lin', 'y', 'features')").fetchone()[0]
    np.testing.assert_allclose(coef, np.linalg.lstsq(np.c_[np.ones(len(X)), X], y, rcond=None)[0], rtol=1e-9)
    labels = (y > 0).astype(float)
    load(ldb, "tall", X, labels)
    coef, loss, iterations = ldb.execute("SELECT coef, loss, num_iterations FROM learnedidx.logregr_train("
                                         "'tall', 'tall_log', 'y', 'features', max_iter => 3)").fetchone()
    passes = ldb.execute("SELECT (timings->>'passes')::int FROM tall_log_summary").fetchone()[0]
    assert (iterations, passes) == (3, 4)  # three iterations and the loss at the last model: four passes
    want = runtime.train("logregr", {"X": X, "y": labels}, {"max_iter": 3})
    np.testing.assert_allclose(coef, want.model["coef"], rtol=1e-9)
    assert loss == pytest.approx(want.loss, rel=1e-9)
    with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="memory limit per call"):
        ldb.execute("SELECT * FROM learnedidx.svm_train('tall', 'tall_svm', 'y', 'features')")


def test_lmf_memory_follows_the_distinct_ids(ldb):
    ldb.execute("CREATE TABLE sparse (r int8, c int8, v float8)")
    ldb.execute("INSERT INTO sparse SELECT CASE WHEN g = 1 THEN 1000000 WHEN g = 2 THEN 2000000000 ELSE g END, "
                "g % 5, g % 3 FROM generate_series(1, 40) g")
    ldb.execute("SELECT * FROM learnedidx.lmf_train('sparse', 'sparse_m', 'r', 'c', 'v', max_rank => 4)")
    u, rows = ldb.execute("SELECT u, row_ids FROM sparse_m").fetchone()
    assert np.shape(u) == (40, 4) and rows[-2:] == [1000000, 2000000000]
    assert ldb.execute("SELECT learnedidx.predict('sparse_m', '{2000000000, 2}') IS NOT NULL, "
                       "learnedidx.predict('sparse_m', '{5, 7}') IS NULL").fetchone() == (True, True)
    with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="rank"):
        ldb.execute("SELECT * FROM learnedidx.lmf_train('sparse', 'sparse_m2', 'r', 'c', 'v', max_rank => 100000)")


def test_dsl_work_is_bounded_and_never_freezes_the_server(ldb, small_server):
    """An update() computing 3 ** 40000000 once held the GIL for minutes: every caller waited."""
    evil = ("epochs = 3\ndef acc_xx(w, x, y):\n    return outer(x, x)\ndef acc_xy(w, x, y):\n    return y * x\n"
            "def update(w, n, xx, xy):\n    return lstsq(xx + eye(len(w)) * (3 ** 40000000 + n ** n ** n), xy)\n")
    ldb.execute("SELECT learnedidx.register_algorithm('evil', %s)", (evil,))
    errors: list = []
    t = _in_thread(lambda: connect(ldb), "SELECT * FROM learnedidx.train('evil', 'big', 'y', 'features')", errors,
                   setup=("SET statement_timeout = '60s'",))
    X = np.random.default_rng(4).normal(size=(200, 2))
    load(ldb, "other", X, X @ [1.0, -1.0])
    assert ldb.execute("SELECT num_rows_processed FROM learnedidx.linregr_train('other', 'other_m', 'y', 'features')"
                       ).fetchone() == (200,)
    t.join(60)
    assert not t.is_alive() and not any(isinstance(e, psycopg.errors.QueryCanceled) for e in errors)
    assert idle_within_a_second(small_server.pid) < 0.3
    with pytest.raises(psycopg.errors.SyntaxError, match="eye"):  # a matrix larger than the model
        ldb.execute("SELECT learnedidx.register_algorithm('big_eye', %s)", (evil.replace(
            "eye(len(w)) * (3 ** 40000000 + n ** n ** n)", "eye(100000)"),))
        ldb.execute("SELECT * FROM learnedidx.train('big_eye', 'big', 'y', 'features')")


def _cluster_with_extension(tmp_path):
    return TempCluster(PG_BINDIR, settings={"shared_buffers": "64MB", "max_wal_size": "128MB"})


def test_a_database_restart_mid_call_stops_the_servers_work(tmp_path):
    srv = spawn(str(tmp_path / "accel.sock"), warm=True)
    try:
        with _cluster_with_extension(tmp_path) as cluster:
            with psycopg.connect(cluster.conninfo, autocommit=True) as c:
                c.execute("CREATE EXTENSION learnedidx CASCADE")
                c.execute(f"ALTER SYSTEM SET learnedidx.socket = '{srv.socket_path}'")
                c.execute("SELECT pg_reload_conf()")
                X = np.random.default_rng(5).normal(size=(20000, 10))
                load(c, "big", X, (X[:, 0] > 0).astype(float))
            errors: list = []
            t = _in_thread(lambda: psycopg.connect(cluster.conninfo, autocommit=True), LONG_SVM, errors)
            with psycopg.connect(cluster.conninfo, autocommit=True) as probe:
                _wait_active(probe, "svm_train(")
            time.sleep(0.5)
            cluster.restart()
            t.join(30)
            assert not t.is_alive() and len(errors) == 1
            assert idle_within_a_second(srv.pid) < 0.3
            with psycopg.connect(cluster.conninfo, autocommit=True) as c:  # the server serves the restarted cluster
                assert c.execute("SELECT num_rows_processed FROM learnedidx.linregr_train('big', 'again', 'y', "
                                 "'features')").fetchone() == (20000,)
    finally:
        srv.stop()


def test_server_stop_mid_call_exits_and_the_caller_hears_it(db, tmp_path):
    sock = str(tmp_path / "stopme.sock")
    cli = [sys.executable, "-P", "-m", "learnedidx.cli", "server"]
    subprocess.run(cli + ["start", "--daemon", "--socket", sock], check=True, capture_output=True, timeout=120)
    pid = int(open(sock + ".pid").read())
    db.execute("SELECT set_config('learnedidx.socket', %s, false)", (sock,))
    rng = np.random.default_rng(6)
    X = rng.normal(size=(20000, 10))
    # labels that are not separable: IRLS converges and, with tolerance 0, iterates on until the
    # stop (separable ones diverge and end the call as TERMINATED within a second or two)
    load(db, "big", X, (X[:, 0] + rng.normal(size=20000) > 0).astype(float))
    errors: list = []
    t = _in_thread(lambda: connect(db, options=f"-c learnedidx.socket={sock}"),
                   "SELECT * FROM learnedidx.logregr_train('big', 'lr', 'y', 'features', max_iter => 1000000, "
                   "tolerance => 0)", errors)
    with connect(db) as probe:
        _wait_active(probe, "logregr_train(")
    time.sleep(0.5)
    stop = subprocess.run(cli + ["stop", "--socket", sock], capture_output=True, text=True, timeout=60)
    assert stop.returncode == 0, stop.stderr
    t.join(10)
    assert not t.is_alive() and len(errors) == 1 and isinstance(errors[0], psycopg.errors.ConnectionFailure)
    with pytest.raises(ProcessLookupError):
        for _ in range(50):  # stop has waited for its socket and pidfile to go; the process follows
            __import__("os").kill(pid, 0)
            time.sleep(0.1)


def test_calls_beyond_max_calls_wait_and_a_waiting_caller_may_leave(db, tmp_path):
    """With --max-calls 1 a second call waits for the first; a waiting caller that gives up
    (statement_timeout) leaves the queue, and the next call runs once the first ends."""
    srv = spawn(str(tmp_path / "one.sock"), extra_args=["--max-calls", "1", "--max-threads", "1"], warm=True)
    try:
        sock = f"-c learnedidx.socket={srv.socket_path}"
        db.execute("SELECT set_config('learnedidx.socket', %s, false)", (srv.socket_path,))
        X = np.random.default_rng(7).normal(size=(20000, 10))
        load(db, "big", X, (X[:, 0] > 0).astype(float))
        load(db, "tiny", X[:50, :2], X[:50, 0])
        errors: list = []
        t = _in_thread(lambda: connect(db, options=sock), LONG_SVM, errors)
        with connect(db) as probe:
            pid = _wait_active(probe, "svm_train(")
            time.sleep(0.5)
            with connect(db, options=sock) as waiter:  # waits, gives up, leaves the queue
                waiter.execute("SET statement_timeout = '1s'")
                with pytest.raises(psycopg.errors.QueryCanceled):
                    waiter.execute("SELECT * FROM learnedidx.linregr_train('tiny', 'tiny_1', 'y', 'features')")
            second: list = []
            t2 = _in_thread(lambda: connect(db, options=sock),
                            "SELECT * FROM learnedidx.linregr_train('tiny', 'tiny_2', 'y', 'features')", second)
            time.sleep(1.5)
            assert t2.is_alive()  # still waiting for the first call
            probe.execute("SELECT pg_cancel_backend(%s)", (pid,))
            t.join(10)
            t2.join(10)
        assert not t.is_alive() and not t2.is_alive() and second == []
        assert db.execute("SELECT to_regclass('tiny_1'), to_regclass('tiny_2') IS NOT NULL").fetchone() == \
            (None, True)
    finally:
        srv.stop()
